"""Checkpoints that carry another checkpoint's shard, told by the sha256 of every checkpoint's weight files.

pythia-12b's step50000 and step58000 carry the final model's first shard (EleutherAI/pythia#206): the other shards
differ, so the whole-weights hash (:mod:`memtui.extract.integrity`) tells them apart, yet the checkpoint is a mix of
two. Training never makes two checkpoints' shards bit-identical (every parameter moves at every step), so a shard held
by two checkpoints whose other files differ means one of them is damaged, and which one cannot be told from the files.

What ``extract`` does (:class:`memtui.extract.worker`): before scoring a checkpoint it compares the sha256 of each of
its weight files with those of every other checkpoint of the panel it knows; a checkpoint not yet scored that shares
a shard is **refused** (its column stays undone, nothing is lost), and a checkpoint already scored that shares one
is **marked** (a line in the log and a row in ``memtui info``: its column holds values of a mixed model). Every
checkpoint's file hashes are recorded in ``PANEL.work/shards/STEP.json`` when it is hashed, so the check runs across
runs and workers, and ``info`` derives what it shows from these records and the panel's done flags alone.

Where the sha256 comes from:

- a hub revision in the Hugging Face cache: the name of the blob its snapshot file links to (huggingface_hub names an
  LFS file's blob by its sha256, the hub's LFS oid, which is what ``fetch`` reads from the hub's listing): no read;
- a local checkpoint folder: the file is hashed once and the result kept in ``PANEL.work/hashes/`` keyed by the
  file's path, size and modification time (a file linking into a hub cache's ``blobs/`` is named by its blob).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from memtui.extract.fetch import BIN, SAFETENSORS, cache_location, cached_hashes, choose_files, missing_revisions
from memtui.extract.units import work_dir, write_in_work

SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 22


def shards_dir(panel: str | os.PathLike) -> Path:
    return work_dir(panel) / "shards"


def hashes_dir(panel: str | os.PathLike) -> Path:
    return work_dir(panel) / "hashes"


# -- the sha256 of a checkpoint's weight files ---------------------------------------------------------------------


def weight_files(folder: Path) -> list[str]:
    """The weight files ``from_pretrained`` reads from ``folder`` (safetensors, else bin; shards and single files)."""
    try:
        names = [p.name for p in folder.iterdir() if p.is_file()]
    except OSError:
        return []
    return [n for n in choose_files(names) if SAFETENSORS.match(n) or BIN.match(n)]


def _blob_name(path: Path) -> str | None:
    """The sha256 a hub cache already names the file by, when ``path`` links to an LFS blob of one."""
    real = Path(os.path.realpath(path))
    return real.name if real.parent.name == "blobs" and SHA256.fullmatch(real.name) else None


def _cache_entry(cache: Path, path: Path) -> Path:
    return cache / (hashlib.blake2b(str(path).encode(), digest_size=16).hexdigest() + ".json")


def file_sha256(path: Path, cache: Path | None, compute: bool = True) -> str | None:
    """sha256 of ``path``, from its hub blob name, from ``cache`` (valid while its size and mtime are the same), or
    read (when ``compute``; None otherwise, or when the file cannot be read)."""
    blob = _blob_name(path)
    if blob is not None:
        return blob
    try:
        path = Path(os.path.realpath(path))
        st = path.stat()
    except OSError:
        return None
    stamp = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    entry = _cache_entry(cache, path) if cache is not None else None
    if entry is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            known = json.loads(entry.read_text())
            if {k: known[k] for k in stamp} == stamp and SHA256.fullmatch(known["sha256"]):
                return known["sha256"]
    if not compute:
        return None
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError:
        return None
    digest = h.hexdigest()
    if entry is not None:  # a cache only: a full disk or a read-only work folder costs a second read next time
        with contextlib.suppress(OSError):  # through the work folder itself: never through a link swapped in for it
            write_in_work(cache.parent, cache.name, entry.name, json.dumps({**stamp, "sha256": digest}).encode())
    return digest


def folder_hashes(folder: Path, cache: Path | None, compute: bool = True) -> dict[str, str]:
    """weight file -> sha256 for a local checkpoint folder; {} when any of them is unknown (not computed)."""
    found = {}
    for name in weight_files(folder):
        digest = file_sha256(folder / name, cache, compute)
        if digest is None:
            return {}
        found[name] = digest
    return found


def checkpoint_hashes(source, step: int, cache: Path | None, compute: bool = True) -> dict[str, str]:
    """weight file -> sha256 of ``source``'s checkpoint ``step`` ({} when not known without reading the network):
    a local folder's files (hashed when ``compute``), or a hub revision's from the Hugging Face cache's blob names."""
    if source.local is not None:
        folder = source.local.get(step)
        return folder_hashes(folder, cache, compute) if folder is not None else {}
    from memtui.orders.revisions import revision_name

    if missing_revisions(source.model, [step], source.revision_template):  # a partial download: not yet known
        return {}
    return cached_hashes(source.model, revision_name(source.revision_template, step), cache_location())


# -- the panel's records ---------------------------------------------------------------------------------------------


def record_shards(panel: str | os.PathLike, step: int, revision: str, files: Mapping[str, str]) -> None:
    """Remember checkpoint ``step``'s weight-file hashes (one small file per step; informative, so a full disk or a
    planted link never stops the extraction)."""
    folder = shards_dir(panel)
    body = json.dumps({"step": int(step), "revision": revision, "files": dict(sorted(files.items()))})
    with contextlib.suppress(OSError):
        write_in_work(folder.parent, folder.name, f"{int(step)}.json", body.encode())


def read_shards(panel: str | os.PathLike, steps: Iterable[int] | None = None) -> dict[int, dict[str, str]]:
    """step -> weight file -> sha256 for every recorded checkpoint (of ``steps`` when given); bad records skipped."""
    folder = shards_dir(panel)
    if not folder.is_dir() or folder.is_symlink():
        return {}
    wanted = None if steps is None else {int(s) for s in steps}
    found = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
            step, files = int(record["step"]), record["files"]
            valid = isinstance(files, dict) and all(isinstance(v, str) and SHA256.fullmatch(v) for v in files.values())
            if valid and (wanted is None or step in wanted):
                found[step] = {str(k): v for k, v in files.items()}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return dict(sorted(found.items()))


# -- which checkpoints share a shard ---------------------------------------------------------------------------------


def shared_shards(hashes: Mapping[int, Mapping[str, str]]) -> dict[int, list[tuple[str, int, str]]]:
    """step -> [(its file, other step, the other's file)] for every weight file another checkpoint also holds, where
    the two checkpoints are not the same as a whole (identical checkpoints are whole duplicates: the weights hash
    handles them, scoring the first and refusing the others). Steps that share nothing are left out."""
    holders: dict[str, list[tuple[int, str]]] = {}
    for step, files in hashes.items():
        for name, sha in files.items():
            holders.setdefault(sha, []).append((int(step), name))
    whole = {int(step): frozenset(files.values()) for step, files in hashes.items()}
    shared: dict[int, list[tuple[str, int, str]]] = {}
    for step, files in sorted(hashes.items()):
        pairs = sorted(
            (name, other, other_name)
            for name, sha in files.items()
            for other, other_name in holders[sha]
            if other != step and whole[other] != whole[int(step)]
        )
        if pairs:
            shared[int(step)] = pairs
    return shared


def describe(pairs: list[tuple[str, int, str]], limit: int = 3) -> str:
    """``model-00001-of-00003.safetensors = step 143000's`` (a file of another name: ``= step 9's NAME``), one line."""
    shown = [f"{name} = step {other}'s" + ("" if o_name == name else f" {o_name}") for name, other, o_name in pairs]
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def info_rows(panel: str | os.PathLike, steps, done) -> list[tuple[str, str]]:
    """``memtui info``'s rows: one per checkpoint that shares a shard with another, scored (marked) or left undone
    (refused), from the records and the panel's done flags."""
    done_by_step = {int(s): bool(d) for s, d in zip(steps, done, strict=True)}
    shared = shared_shards(read_shards(panel, done_by_step))
    rows = []
    for step, pairs in shared.items():
        state = "scored: one of the two is damaged, check its column" if done_by_step[step] else "refused, left undone"
        rows.append(("shared shard", f"step{step} ({state}): {describe(pairs)}"))
    return rows


# -- the check a worker runs -----------------------------------------------------------------------------------------


class ShardCheck:
    """One worker's view of the panel's weight-file hashes: what it learns is recorded for the others and for
    ``info``; :meth:`before_scoring` and :meth:`admit` say which checkpoints not to score."""

    def __init__(self, panel: str | os.PathLike, steps, done, run_steps: Iterable[int], log, warn=None):
        self.panel = Path(panel)
        self.steps = [int(s) for s in steps]
        # the checkpoints a shard is compared against: those scored and those this run scores. A checkpoint refused
        # earlier and left out of this run (--checkpoints) no longer blocks its partner: that is how a user scores
        # the one of a pair they know is right.
        scored = {int(s) for s, d in zip(steps, done, strict=True) if d}
        self.pending = {int(s) for s in run_steps} - scored  # not scored yet (by this worker, as far as it knows)
        self.compared = scored | self.pending
        self.cache = hashes_dir(panel)
        self.known = read_shards(panel, self.steps)
        self.log, self.warn = log, warn or (lambda note: None)
        self._said: set[tuple[int, str]] = set()  # (step, kind) already logged by this worker
        self.refused: set[int] = set()

    def learn(self, step: int, revision: str, files: Mapping[str, str]) -> None:
        if files and self.known.get(int(step)) != dict(files):
            self.known[int(step)] = dict(files)
            record_shards(self.panel, step, revision, files)

    def before_scoring(self, source) -> set[int]:
        """Hash every panel checkpoint the source has (hub revisions from the cache; local folders read once, kept in
        ``PANEL.work/hashes``); the pending steps that share a shard are refused, the scored ones marked."""
        available = set(source.available() if source.local is not None else self.steps)
        missing = []
        for step in [s for s in self.steps if s in available]:
            files = checkpoint_hashes(source, step, self.cache, compute=False)
            if files:
                self.learn(step, source.revision(step), files)
            elif source.local is not None and step in self.compared:
                missing.append(step)
        if missing:
            self.log(f"hashing the weight files of {len(missing)} checkpoint folder(s) to find shards that another "
                     f"checkpoint carries (once: kept in {self.cache})")  # fmt: skip
            start = os.getpid() % len(missing)  # workers started together hash different folders first
            for step in missing[start:] + missing[:start]:
                self.learn(step, source.revision(step), checkpoint_hashes(source, step, self.cache))
        return self.refusals()

    def admit(self, step: int, revision: str, files: Mapping[str, str]) -> bool:
        """False when checkpoint ``step``, loaded and about to be scored, carries another checkpoint's shard (a
        pending partner is refused with it); True, and it counts as scored from now on, otherwise."""
        self.learn(step, revision, files)
        if int(step) in self.refusals():
            return False
        self.pending.discard(int(step))
        return True

    def refusals(self) -> set[int]:
        """Every pending step that shares a shard with another compared checkpoint (one line each, once); a scored
        step that shares one is marked (one line)."""
        known = {step: files for step, files in self.known.items() if step in self.compared}
        for step, pairs in shared_shards(known).items():
            if step in self.pending:
                self.refused.add(step)
                self._say(step, "refused", f"step {step} not scored: its weight file {describe(pairs)} (a "
                          "checkpoint carrying another's shard, EleutherAI/pythia#206; which of them is damaged "
                          "cannot be told from the files); its column is left undone: to score the right one, "
                          "leave the other out of --checkpoints")  # fmt: skip
            elif step not in self.refused:
                self._say(step, "marked", f"step {step} was scored but shares a weight file with another "
                          f"checkpoint: {describe(pairs)}; its column may mix two checkpoints "
                          "(memtui info lists it)")  # fmt: skip
        self.pending -= self.refused
        return set(self.refused)

    def _say(self, step: int, kind: str, note: str) -> None:
        if (step, kind) not in self._said:
            self._said.add((step, kind))
            self.log(note)
            self.warn(note)
