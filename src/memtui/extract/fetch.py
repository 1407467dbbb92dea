"""``memtui fetch``: pre-stage a hub model's checkpoint revisions into the Hugging Face cache.

Compute nodes often have no internet, and many nodes pulling the same revisions get rate-limited by the hub. This
downloads, on a node with internet, exactly what ``AutoModelForCausalLM.from_pretrained`` reads for each revision
(config, weights, generation config) into the ordinary Hugging Face cache, so that workers can run with
``HF_HUB_OFFLINE=1``. :func:`missing_revisions` tells, without any network access, which revisions are not there yet.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.memory import human_decimal
from memtui.core.text import clean
from memtui.extract.checkpoints import Source, parse_checkpoints
from memtui.extract.integrity import same_files

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
# The weight file names from_pretrained looks for (transformers' SAFE_WEIGHTS_NAME, WEIGHTS_NAME and their sharded
# forms). Other weight-like files in a repo (optimizer states, consolidated.*, onnx exports) are never read by it.
SAFETENSORS = re.compile(r"^model(?:-\d+-of-\d+)?\.safetensors$")
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN = re.compile(r"^pytorch_model(?:-\d+-of-\d+)?\.bin$")
BIN_INDEX = "pytorch_model.bin.index.json"


def cache_location() -> str:
    """The hub cache folder a process started now would use (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else default).

    Read from the environment at call time, the way huggingface_hub computes it at import, so that the launcher
    reports (and checks) the folder its workers will use.
    """
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    home = os.path.expandvars(os.path.expanduser(home))
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return os.path.expandvars(os.path.expanduser(hub))


def choose_files(names: Sequence[str]) -> list[str]:
    """Of a revision's files, those from_pretrained needs: config, generation config, safetensors else bin weights."""
    top = set(names)  # names in subfolders never match: from_pretrained reads the repo root only
    chosen = [n for n in (CONFIG, GENERATION_CONFIG) if n in top]
    safetensors = sorted(n for n in top if SAFETENSORS.match(n))
    if safetensors:
        chosen += safetensors + ([SAFETENSORS_INDEX] if SAFETENSORS_INDEX in top else [])
    else:
        chosen += sorted(n for n in top if BIN.match(n)) + ([BIN_INDEX] if BIN_INDEX in top else [])
    return chosen


def _storage(model: str, cache: str) -> Path:
    return Path(cache) / ("models--" + model.replace("/", "--"))


def _has_weights(snapshot: Path) -> bool:
    for index, single in ((SAFETENSORS_INDEX, "model.safetensors"), (BIN_INDEX, "pytorch_model.bin")):
        if (snapshot / index).is_file():
            try:
                shards = set(json.loads((snapshot / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return False  # a damaged index cannot be loaded; fetch downloads it again
            return bool(shards) and all(isinstance(s, str) and (snapshot / s).is_file() for s in shards)
        if (snapshot / single).is_file():
            return True
    return False


def _complete(model: str, revision: str, cache: str) -> bool:
    """Whether ``revision`` is loadable from the cache alone (``is_file`` follows the snapshot's blob links)."""
    storage = _storage(model, cache)
    try:
        commit = (storage / "refs" / revision).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False
    if not commit or "/" in commit or commit.startswith("."):  # a ref must name a snapshot, not a path elsewhere
        return False
    snapshot = storage / "snapshots" / commit
    if not (snapshot / CONFIG).is_file() or not _has_weights(snapshot):
        return False
    # Where huggingface_hub cached the revision's file listing, every file we would fetch must be there too (a fetch
    # interrupted between the weights and the generation config leaves the revision loadable but not complete).
    try:
        listing = json.loads((storage / "trees" / f"{commit}.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return True
    if not isinstance(listing, dict):
        return True
    return all((snapshot / name).is_file() for name in choose_files(list(listing)))


def missing_revisions(model: str, steps: Sequence[int], revision_template: str = "step{step}") -> list[int]:
    """The steps whose revision is not complete in the local Hugging Face cache. Never touches the network."""
    cache = cache_location()
    return [step for step in steps if not _complete(model, _revision(revision_template, step), cache)]


def _revision(template: str, step: int) -> str:
    from memtui.orders.revisions import revision_name

    return revision_name(template, step)


def _endpoint() -> str | None:
    # huggingface_hub reads HF_ENDPOINT once, at import: pass it explicitly so it is honoured as set now
    value = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/")
    return value or None


def _offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.strip().lower() in ("1", "true", "yes", "on") or bool(constants.HF_HUB_OFFLINE)


def _describe(exc: BaseException, model: str) -> str:
    """One line for a failed revision (the hub's messages run over several lines and carry URLs)."""
    from huggingface_hub.errors import (
        FileMetadataError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, LocalEntryNotFoundError) and isinstance(exc.__cause__, Exception):
        # huggingface_hub wraps what went wrong (HTTP status, network, a server that is not a hub) in "not cached"
        return _describe(exc.__cause__, model)
    if isinstance(exc, RevisionNotFoundError):
        return f"no such revision in {model}"
    if isinstance(exc, GatedRepoError):
        return f"{model} is gated: accept its conditions on the hub and set HF_TOKEN to a token with access"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, RepositoryNotFoundError) or status in (401, 403):
        code = f" (HTTP {status})" if status else ""
        return (
            f"{model} was not found or access was refused{code}; check the repo id, and for a private or gated "
            "model set HF_TOKEN to a token with access"
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full in {cache_location()}; free space or point HF_HUB_CACHE elsewhere, then rerun"
    if isinstance(exc, LocalEntryNotFoundError) or _is_network_error(exc):
        where = _endpoint() or "https://huggingface.co"
        return f"cannot reach the hub at {where} (network down, proxy or firewall?); rerun to resume"
    if status == 429:
        return "the hub is rate-limiting this node (HTTP 429); wait, then rerun with fewer --workers"
    if isinstance(exc, HfHubHTTPError) and status is not None:
        return f"the hub answered HTTP {status}; rerun to resume"
    if isinstance(exc, FileMetadataError):
        where = _endpoint() or "https://huggingface.co"
        return f"{where} does not answer like the Hugging Face hub (check HF_ENDPOINT, proxy and firewall)"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}"


def _is_network_error(exc: BaseException) -> bool:
    # httpx (or its successor) is what huggingface_hub talks through; match by class name so that this does not
    # depend on which one the installed version uses
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"ConnectError", "TimeoutException", "NetworkError", "RemoteProtocolError", "ProxyError"}:
            return True
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@dataclass
class _Plan:
    """What to fetch for one revision."""

    revision: str
    files: list[str]
    size: int | None  # bytes of those files, where the hub reports sizes
    hashes: dict[str, str] = field(default_factory=dict)  # weight file -> the hub's LFS sha256, where it reports one


class _Stopped(Exception):
    """Raised in a download thread, through its progress bar, to stop at the next chunk after ctrl-c."""


@dataclass
class _Progress:
    """Bytes received so far, across the download threads, and the flag that stops them."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    received: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, n: int) -> None:
        with self.lock:
            self.received += n


def timeout_s() -> float:
    """How long any one request of a fetch may wait for the hub's next byte (``MEMTUI_FETCH_TIMEOUT_S``, 30 s):
    a server that accepts the connection and never answers ends the fetch with one line instead of hanging it."""
    try:
        value = float(os.environ.get("MEMTUI_FETCH_TIMEOUT_S") or 30)
    except ValueError:
        value = 30.0
    return value if 0 < value < 86400 else 30.0


@contextlib.contextmanager
def _requests_time_out(seconds: float):
    """Give every request huggingface_hub makes meanwhile a timeout: its shared HTTP client has none by default, so
    the calls it makes inside ``snapshot_download`` (repo info, file listing) would wait forever on a silent
    server. The client factory is wrapped and the previous one put back afterwards."""
    from huggingface_hub.utils import _http

    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
    if previous is None or not hasattr(_http, "set_client_factory"):
        yield
        return

    def with_timeout():
        client = previous()
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            client.timeout = seconds
        return client

    _http.set_client_factory(with_timeout)
    try:
        yield
    finally:
        _http.set_client_factory(previous)


def _plan(api, model: str, revision: str) -> _Plan:
    info = api.model_info(model, revision=revision, files_metadata=True, timeout=timeout_s())
    siblings = {s.rfilename: s.size for s in (info.siblings or [])}
    lfs = {s.rfilename: getattr(s.lfs, "sha256", None) for s in (info.siblings or []) if s.lfs is not None}
    files = choose_files(list(siblings))
    if CONFIG not in files:
        raise MemtuiError(f"no {CONFIG} in this revision; it is not a transformers checkpoint")
    if not any(SAFETENSORS.match(f) or BIN.match(f) for f in files):
        raise MemtuiError("no weights from_pretrained reads in this revision (model*.safetensors, pytorch_model*.bin)")
    sizes = [siblings[f] for f in files]
    size = sum(sizes) if all(isinstance(s, int) for s in sizes) else None
    hashes = {f: lfs[f] for f in files if (SAFETENSORS.match(f) or BIN.match(f)) and isinstance(lfs.get(f), str)}
    return _Plan(revision, files, size, hashes)


def cached_hashes(model: str, revision: str, cache: str) -> dict[str, str]:
    """The weight files' sha256 of a revision already in the cache, with no network: huggingface_hub names each LFS
    blob by its sha256 (the ETag), and the snapshot's files are links to those blobs."""
    storage = _storage(model, cache)
    try:
        snapshot = storage / "snapshots" / (storage / "refs" / revision).read_text().strip()
        names = [p.name for p in snapshot.iterdir()]
    except (OSError, UnicodeDecodeError):
        return {}
    found = {}
    for name in choose_files(names):
        if SAFETENSORS.match(name) or BIN.match(name):
            blob = Path(os.path.realpath(snapshot / name)).name
            if re.fullmatch(r"[0-9a-f]{64}", blob):
                found[name] = blob
    return found


def _report_duplicates(model: str, steps, template: str, planned: dict[str, dict[str, str]], cache: str) -> None:
    """One line per revision whose weight files (all, or single shards) equal another revision's (pythia#205,
    #206): the cached revisions are read from the cache, the others from the hub's listing."""
    hashes = {}
    for step in steps:
        revision = _revision(template, step)
        hashes[revision] = planned[revision] if revision in planned else cached_hashes(model, revision, cache)
    for line in same_files(hashes):
        print(clean(line))


def _quiet_bar(progress: _Progress):
    """A progress-bar class for snapshot_download that shows nothing, counts the bytes written to the cache, and stops
    the download at the next chunk once ``progress.stop`` is set (huggingface_hub then deletes the partial file)."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class QuietBar(hf_tqdm):
        def __init__(self, *args, **kwargs):
            # snapshot_download's aggregate byte bar; its per-file bars feed it (resumed bytes included)
            self._count = kwargs.get("name") == "huggingface_hub.snapshot_download" and kwargs.get("unit") == "B"
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if progress.stop.is_set():
                raise _Stopped
            if self._count and n:
                progress.add(int(n))
            return super().update(n)

    return QuietBar


def _download(model: str, plan: _Plan, cache: str, bar) -> str:
    from huggingface_hub import snapshot_download

    # One file at a time per revision: parallelism is across revisions (--workers), which keeps the number of
    # connections to the hub at --workers.
    return snapshot_download(
        model,
        revision=plan.revision,
        allow_patterns=plan.files,
        cache_dir=cache,
        endpoint=_endpoint(),
        max_workers=1,
        tqdm_class=bar,
        etag_timeout=timeout_s(),
    )


def checkpoint_spec(steps: Sequence[int]) -> str:
    """A --checkpoints spec for ``steps``: START:STOP:STEP when evenly spaced, else a comma list."""
    if len(steps) > 2:
        gaps = {b - a for a, b in zip(steps[:-1], steps[1:], strict=True)}
        if len(gaps) == 1:
            return f"{steps[0]}:{steps[-1]}:{gaps.pop()}"
    return ",".join(str(s) for s in steps)


def _check_args(args) -> tuple[str, list[int], str]:
    model = str(args.model).strip()
    path = Path(model).expanduser()
    if path.exists():
        raise MemtuiError(
            f"{clean(model)} is a local path: there is nothing to fetch (memtui extract reads checkpoint folders "
            "directly); --model takes a Hugging Face repo id such as EleutherAI/pythia-1.4b-deduped."
        )
    source = Source.open(model, args.revision_template)  # refuses paths that do not exist
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError:
        raise MemtuiError(
            f"{clean(model)} is not a Hugging Face repo id (ORG/NAME, e.g. EleutherAI/pythia-160m)."
        ) from None
    steps = parse_checkpoints(args.checkpoints)
    if steps is None:
        raise MemtuiError(
            "--checkpoints all means every step a panel still needs, and fetch has no panel; name the steps "
            "(START:STOP:STEP, e.g. 0:143000:1000, or a comma list)."
        )
    _revision(args.revision_template, steps[0])  # a bad template is one error, not one per revision
    if args.workers < 1:
        raise MemtuiError(f"--workers must be at least 1 (got {args.workers}).")
    return source.model, steps, args.revision_template


def fetch_from_args(args) -> int:
    """`memtui fetch`: what is missing, then download it (or, with --dry-run, say what would be)."""
    model, steps, template = _check_args(args)
    cache = cache_location()
    missing = missing_revisions(model, steps, template)
    have = len(steps) - len(missing)
    err = sys.stderr
    print(
        f"{clean(model)}: {_count(len(steps), 'revision')}, {have} already in the cache ({clean(cache)}), "
        f"{len(missing)} to fetch",
        file=err,
    )
    hint = f"HF_HUB_OFFLINE=1 memtui extract PANEL --model {clean(model)} --checkpoints {checkpoint_spec(steps)}"
    if template != "step{step}":
        hint += f" --revision-template '{clean(template)}'"
    if not missing:
        _report_duplicates(model, steps, template, {}, cache)
        print(f"nothing to fetch; on compute nodes run: {hint}")
        return 0
    if _offline() and not args.dry_run:
        raise MemtuiError("HF_HUB_OFFLINE is set: fetch needs the network; unset it on a node with internet.")

    from huggingface_hub import HfApi
    from huggingface_hub.utils import logging as hf_logging

    # its warnings are multi-line, carry URLs and bypass clean(); every failure is reported below, one line each
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with _requests_time_out(timeout_s()):
            return _fetch(HfApi(endpoint=_endpoint()), model, steps, template, missing, have, hint, args)
    finally:
        hf_logging.set_verbosity(verbosity)


def _fetch(api, model, steps, template, missing, have, hint, args) -> int:
    """The download (or --dry-run) of the ``missing`` steps; one line per failed revision at the end."""
    cache = cache_location()
    if args.dry_run:
        return _fetch_dry_run(api, model, steps, template, missing, cache)
    failures: list[tuple[str, str]] = []
    planned: dict[str, dict[str, str]] = {}  # revision -> weight file -> sha256, from the hub's listing
    progress = _Progress()
    fetched = _download_missing(api, model, template, missing, cache, args.workers, progress, planned, failures)
    print(
        f"fetched {fetched} of {len(missing)} missing revisions ({human_decimal(progress.received)} downloaded), "
        f"{have} were already cached, {len(failures)} failed; cache: {clean(cache)}"
    )
    _report_duplicates(model, steps, template, planned, cache)
    if not failures:
        print(f"on compute nodes run: {hint}")
    return _report(failures)


def _fetch_dry_run(api, model, steps, template, missing, cache) -> int:
    """What a fetch would download: each missing revision's files and size (from the hub's listing), nothing
    downloaded; one line per revision that could not be listed at the end."""
    failures: list[tuple[str, str]] = []
    planned: dict[str, dict[str, str]] = {}
    total, unknown = 0, 0
    for step in missing:
        revision = template.format(step=step)
        if _offline():
            print(f"{clean(revision)}: missing (size unknown: HF_HUB_OFFLINE is set)")
            unknown += 1
            continue
        try:
            plan = _plan(api, model, revision)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line at the end
            failures.append((revision, _reason(exc, model)))
            continue
        planned[revision] = plan.hashes
        size = human_decimal(plan.size) if plan.size is not None else "size unknown"
        print(f"{clean(revision)}: missing, {len(plan.files)} files, {size} ({clean(', '.join(plan.files))})")
        if plan.size is None:
            unknown += 1
        else:
            total += plan.size
    more = f" (+{unknown} of unknown size)" if unknown else ""
    _report_duplicates(model, steps, template, planned, cache)
    print(f"dry run: {len(missing)} of {len(steps)} revisions missing, {human_decimal(total)} to download{more}")
    return _report(failures)


def _download_missing(api, model, template, missing, cache, workers, progress, planned, failures) -> int:
    """Downloads the ``missing`` steps' revisions on ``workers`` threads, adding each listing to ``planned`` and each
    failure to ``failures``; a line per revision when stderr is not a terminal, a live count when it is. Returns how
    many were fetched. Ctrl-c stops what is under way at its next chunk and re-raises."""
    err = sys.stderr
    bar = _quiet_bar(progress)
    tty = err.isatty()
    fetched = 0

    def job(step: int) -> None:
        if progress.stop.is_set():
            raise _Stopped
        plan = _plan(api, model, template.format(step=step))
        planned[plan.revision] = plan.hashes  # one key per thread: a dict assignment needs no lock
        _download(model, plan, cache, bar)
        if not _complete(model, plan.revision, cache):
            raise MemtuiError("the download ended but the revision is still incomplete in the cache; rerun")

    def show(final: bool = False) -> None:
        line = f"fetched {fetched}/{len(missing)} revisions, {human_decimal(progress.received)}"
        if failures:
            line += f", {len(failures)} failed"
        print("\r" + line + "\x1b[K", end="\n" if final else "", file=err, flush=True)

    pool = ThreadPoolExecutor(max_workers=min(workers, len(missing)), thread_name_prefix="memtui-fetch")
    futures = {pool.submit(job, step): template.format(step=step) for step in missing}
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                revision = futures[future]
                exc = future.exception()
                if exc is None:
                    fetched += 1
                    if not tty:
                        print(f"fetched {clean(revision)} ({fetched}/{len(missing)})", file=err)
                else:
                    failures.append((revision, _reason(exc, model)))
                    if not tty:
                        print(f"failed {clean(revision)} ({len(failures)} failed so far)", file=err)
            if tty:
                show()
    except KeyboardInterrupt:
        # nothing new starts, and the downloads under way stop at their next chunk, removing their partial files
        # (a file that was complete stays in the cache: a rerun resumes from there)
        progress.stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        wait(futures, timeout=30)
        raise
    pool.shutdown(wait=True)
    if tty:
        show(final=True)
    return fetched


def _reason(exc: BaseException, model: str) -> str:
    if isinstance(exc, MemtuiError):
        return str(exc)
    return _describe(exc, model)


def _report(failures: list[tuple[str, str]]) -> int:
    for revision, reason in sorted(failures, key=lambda f: _natural(f[0])):
        print(f"memtui: {clean(revision)}: {clean(reason, limit=300)}", file=sys.stderr)
    if failures:
        print(f"memtui: {_count(len(failures), 'revision')} failed; rerun the same command to resume", file=sys.stderr)
        return 2
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _natural(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]
