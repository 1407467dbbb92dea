"""Estimates cached next to the panel (``PANEL.memtui-cache/``), keyed by the data they came from and the settings,
so re-opening a panel or switching back to a metric is instant. Falls back to ~/.cache/memtui when the panel's folder
is read-only. A cache entry is two files written atomically; the JSON one is written last and marks it complete.

The cache is optional: an entry that cannot be read or does not look exactly like one memtui writes is a miss, and a
cache that cannot be written only adds a note ("cache not written: ...") to the estimate.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sysconfig
from pathlib import Path

import numpy as np
import polars as pl

from memtui import __version__
from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.core.text import clean
from memtui.engine import torch_bootstrap
from memtui.estimation.estimate import SCOPES, EstimateResult, Progress, estimate, result_frame
from memtui.estimation.results import Overall, Pretrend
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel
from memtui.panel.samples import is_sample

# what an entry's JSON holds, and the types each value must have
_META = {
    "overall": dict,
    "pretrend": dict,
    "crit": (int, float),
    "cohorts": list,
    "checkpoints": list,
    "notes": list,
    "sign": int,
}
# Bumped when the same settings come to mean other numbers (the version string moves only at releases), so that an
# entry from before is a miss, not a stale hit. 2: the calibrated band's small-sample pointwise intervals.
RESULTS_GENERATION = 2
# the numbers the CLI and the app read from the summaries
_OVERALL = ("estimate", "std_error", "ci_low", "ci_high", "significant", "n_cells")
_PRETREND = ("n_cells", "n_significant", "sup_t", "p_value", "crit")


def _numbers(record: dict, keys: tuple[str, ...]) -> bool:
    return all(isinstance(record.get(k), (int, float)) for k in keys) and all(
        isinstance(v, (int, float)) for v in record.values()
    )


def key_inputs(panel: Panel, metric: str) -> tuple[dict, list[np.ndarray]]:
    """Everything of the panel an estimate of ``metric`` reads (estimate.py, crosscheck.py): the metric's sign (tau =
    sign x ATT: an entry made before a re-import with --lower-is-better has the other sign), the never-treated code,
    and the arrays: treatment steps, checkpoint steps, done flags and the metric's whole matrix. Add here whatever an
    estimator starts to read, or a cached result outlives the data it came from."""
    if metric not in panel.metrics or not panel.done.any():
        panel.values(metric)  # raises the one-line "no metric" / "no values yet" error
    scalars = {"sign": int(panel.sign(metric)), "never": NEVER}
    # the whole matrix with the done flags: no masked copy (a tenth of a second at the paper's size)
    return scalars, [panel.treatment, panel.steps, panel.done, panel.metrics[metric]]


def cache_key(panel: Panel, settings: Settings) -> str:
    scalars, arrays = key_inputs(panel, settings.metric)
    for name in settings.covariates:  # categorical ones as text: object arrays hold no bytes of their own
        values = panel.covariates.get(name)
        if values is not None:
            arrays.append(values if values.dtype.kind in "fiub" else np.asarray(values, dtype=str))
    h = hashlib.blake2b(digest_size=16)
    head = {"settings": settings.key(), "version": __version__, "generation": RESULTS_GENERATION, **scalars}
    h.update(json.dumps(head, sort_keys=True).encode())
    for arr in arrays:
        arr = np.ascontiguousarray(arr)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())  # the same bytes as another dtype or shape are other data
        h.update(arr.tobytes())
    return h.hexdigest()


def cache_dir(panel: Panel) -> Path:
    """``PANEL.memtui-cache/`` beside a panel in a folder the user may write; the user's cache folder (XDG) for a
    read-only folder and for the shipped samples, which may sit in an installed package (never write there)."""
    path = Path(panel.path).resolve()
    local = path.with_name(path.name + ".memtui-cache")
    if os.access(path.parent, os.W_OK) and not is_sample(path) and not _installed(path):
        return local
    digest = hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "memtui" / digest


def _installed(path: Path) -> bool:
    """Whether ``path`` is inside this Python's installed packages (site-packages and the like)."""
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    return any(path.is_relative_to(Path(r).resolve()) for r in roots if r)


def _schema() -> pl.Schema:
    """The columns (and types) of a result frame, from the code that makes them: an older entry does not match."""
    one = np.zeros(1)
    frame = result_frame(
        Settings(), "profile", cohort=[1], checkpoint=[1], event_time=[0], att=one, sign=1, se=one, ase=one,
        crit=one, n_treated=[1], n_control=[1], pre=[False], n_folded=[0], small=[False],
    )  # fmt: skip
    return frame.schema


def _regular_bytes(path: Path) -> bytes:
    """The file's bytes, if it is a regular file: a FIFO planted at an entry's name would block a plain read forever
    (opened without blocking, then judged by fstat); anything else is a miss."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def _read(base: Path, settings: Settings, sign: int, device: str = "auto") -> EstimateResult:
    meta = json.loads(_regular_bytes(base.with_suffix(".json")))
    if not isinstance(meta, dict) or any(not isinstance(meta.get(k), t) for k, t in _META.items()):
        raise ValueError("not a cache entry")
    if meta["sign"] != sign or meta.get("settings") != settings.key():  # the key says so too; an entry must agree
        raise ValueError("an entry of other data or settings")
    if not _made_on(meta.get("engine_device"), device):
        raise ValueError("an entry another engine device computed")
    if not all(isinstance(n, str) for n in meta["notes"]):
        raise ValueError("notes are not text")
    if not (_numbers(meta["overall"], _OVERALL) and _numbers(meta["pretrend"], _PRETREND)):
        raise ValueError("summaries are not numbers")
    try:
        overall, pretrend = Overall(**meta["overall"]), Pretrend(**meta["pretrend"])
    except TypeError:  # fields this version does not know, or lacks: written by another version
        raise ValueError("summaries of another shape") from None
    if not all(isinstance(v, int) for v in meta["cohorts"] + meta["checkpoints"]):
        raise ValueError("steps are not integers")
    frames = pl.read_parquet(io.BytesIO(_regular_bytes(base.with_suffix(".parquet"))))
    if frames.schema != _schema():
        raise ValueError("columns differ")
    parts = {s: frames.filter(pl.col("scope") == s) for s in SCOPES}
    return EstimateResult(
        settings=settings,
        cells=parts["profile"],
        instantaneous=parts["instantaneous"],
        persistent=parts["persistent"],
        residual=parts["residual"],
        overall=overall,
        pretrend=pretrend,
        crit=float(meta["crit"]),
        cohorts=np.array(meta["cohorts"], dtype=np.int64),
        checkpoints=np.array(meta["checkpoints"], dtype=np.int64),
        notes=meta["notes"],
    )


def _made_on(entry: object, asked: str) -> bool:
    """Whether an entry whose bootstrap ran on engine device ``entry`` answers a request for ``asked``
    (``torch_bootstrap.DEVICES``). The devices' numbers agree within float32 rounding, so ``auto`` (the default)
    takes an entry of any device; a device named (``--engine-device cuda``: a user checking or timing that path)
    takes only an entry that device computed, or one without a bootstrap ("none"), and recomputes otherwise. An
    entry from before entries said (no field) is taken by ``auto`` alone."""
    return asked == "auto" or entry in (asked, "none")


def load(panel: Panel, settings: Settings, device: str | None = None) -> EstimateResult | None:
    """The cached estimate, or None: anything unreadable or malformed is a miss (it is recomputed and rewritten), as
    is an entry another engine device computed where ``device`` (default: the engine setting,
    ``torch_bootstrap.setting``) names one (``_made_on``)."""
    if panel.path is None:
        return None
    device = device or torch_bootstrap.setting()
    try:
        return _read(cache_dir(panel) / cache_key(panel, settings), settings, panel.sign(settings.metric), device)
    except MemtuiError:
        raise  # cache_key's "no such metric" / "no values yet": the estimate would say the same
    except Exception:  # noqa: BLE001 - a cache entry is a file anyone may have damaged; any failure is a miss
        return None


def store(panel: Panel, result: EstimateResult, device: str | None = None) -> str | None:
    """Write the cache entry, made by engine device ``device`` ("none": without a bootstrap; None: not said, an entry
    only ``auto`` reads); returns why it could not be written (None when it was, or there is no panel file)."""
    if panel.path is None:
        return None
    meta = {
        "engine_device": device,
        "overall": result.overall.as_dict(),
        "pretrend": result.pretrend.as_dict(),
        "crit": result.crit,
        "cohorts": result.cohorts.tolist(),
        "checkpoints": result.checkpoints.tolist(),
        "notes": result.notes,
        "settings": result.settings.key(),
        "sign": int(panel.sign(result.settings.metric)),
    }
    try:
        folder = cache_dir(panel)
        base = folder / cache_key(panel, result.settings)
        folder.mkdir(parents=True, exist_ok=True)
        frames = pl.concat([result.scope(s) for s in SCOPES], how="vertical_relaxed")
        # into memory first: polars reports a full disk as a parquet "transport error", a write_bytes as ENOSPC
        data = io.BytesIO()
        frames.write_parquet(data)
        atomic_write(base.with_suffix(".parquet"), lambda p: p.write_bytes(data.getvalue()))
        atomic_write(base.with_suffix(".json"), lambda p: p.write_text(json.dumps(meta, default=float)))
    except (OSError, RuntimeError, MemtuiError, pl.exceptions.PolarsError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        where = getattr(exc, "filename", None)
        return clean(f"{reason} ({where})" if where and str(where) not in reason else reason, limit=200)
    return None


def cached_estimate(panel: Panel, settings: Settings, progress: Progress | None = None) -> EstimateResult:
    """The estimate for these settings, from the cache when the panel's data have not changed since."""
    settings = settings.validate()
    hit = load(panel, settings)
    if hit is not None:
        return hit
    with torch_bootstrap.recording() as used:
        result = estimate(panel, settings, progress)
    device = "+".join(sorted(used)) or "none"
    if used - {"cpu"}:  # said in the entry's notes too: a later hit under auto shows which engine computed it
        result.notes.append(
            f"bootstrap or permutation sums computed by engine device {device} (torch): the CPU path's numbers within "
            "float32 rounding"
        )
    problem = store(panel, result, device)
    if problem:
        result.notes.append(f"cache not written: {problem}")
    return result
