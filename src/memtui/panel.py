"""The panel file: instances x checkpoints x metrics in one HDF5 file (format in docs/panel-format.md).

Every dataset is created at its final shape when the panel is made; extraction then fills one checkpoint column at a
time, flushes, and only then flips that checkpoint's ``done`` flag. Files are written with the latest HDF5 format so
that a writer in SWMR mode and any number of readers can have the file open at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from memtui import __version__
from memtui.errors import MemtuiError
from memtui.files import atomic_write

FORMAT_NAME = "memtui-panel"
FORMAT_VERSION = 1
NEVER = -1  # treatment step stored for never-treated (validation) instances
PAD = -1  # token id stored after the end of a shorter instance
METRICS = ("loglik", "accuracy", "rank", "entropy")
# +1 where a higher value means the model predicts better, so memorisation tau = sign * ATT is positive for
# "does better on what it trained on". Metrics not listed here default to +1 unless the dataset says otherwise.
METRIC_SIGN = {"loglik": 1, "accuracy": 1, "rank": -1, "entropy": -1}
METRIC_LABEL = {
    "loglik": "sequence log-likelihood",
    "accuracy": "mean token accuracy",
    "rank": "mean rank of the true token",
    "entropy": "mean predictive entropy",
}
_STR = h5py.string_dtype("utf-8")


@dataclass
class Panel:
    """A panel read into memory. Metric matrices are (instances, checkpoints) float64, NaN where not computed."""

    ids: np.ndarray
    treatment: np.ndarray  # first checkpoint step that has trained on the instance; NEVER for validation
    steps: np.ndarray
    done: np.ndarray
    metrics: dict[str, np.ndarray]
    split: np.ndarray = None
    source_index: np.ndarray = None
    revisions: list[str] = field(default_factory=list)
    weight_hashes: list[str] = field(default_factory=list)
    signs: dict[str, int] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=dict)
    truth: dict[str, np.ndarray] | None = None  # simulated panels: cohorts, steps and the true tau per metric
    path: Path | None = None
    has_tokens: bool = False

    @property
    def n_instances(self) -> int:
        return len(self.ids)

    @property
    def n_checkpoints(self) -> int:
        return len(self.steps)

    @property
    def never_treated(self) -> np.ndarray:
        return self.treatment == NEVER

    def sign(self, metric: str) -> int:
        return self.signs.get(metric, METRIC_SIGN.get(metric, 1))

    def values(self, metric: str) -> np.ndarray:
        """The metric's matrix restricted to completed checkpoints (columns where ``done``)."""
        if metric not in self.metrics:
            raise MemtuiError(
                f"{self._name}: no metric '{metric}' in this panel (it has: {', '.join(self.metrics) or 'none'})."
            )
        y = self.metrics[metric][:, self.done]
        if not np.isfinite(y).any():
            raise MemtuiError(
                f"{self._name}: metric '{metric}' has no values yet; run `memtui extract {self._name}` "
                "or import a table that has it."
            )
        return y

    @property
    def done_steps(self) -> np.ndarray:
        return self.steps[self.done]

    @property
    def _name(self) -> str:
        return str(self.path) if self.path else "panel"


def _checked_array(name: str, values, dtype, shape: tuple) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != shape:
        raise MemtuiError(f"{name} has shape {arr.shape}, expected {shape}.")
    return arr.astype(dtype, copy=False)


def create_panel(
    path: str | os.PathLike,
    *,
    ids: Sequence[int],
    treatment: Sequence[int],
    steps: Sequence[int],
    metrics: Sequence[str] = METRICS,
    values: Mapping[str, np.ndarray] | None = None,
    split: Sequence[str] | None = None,
    source_index: Sequence[int] | None = None,
    tokens: np.ndarray | None = None,
    lengths: Sequence[int] | None = None,
    revisions: Sequence[str] | None = None,
    signs: Mapping[str, int] | None = None,
    attrs: Mapping[str, str] | None = None,
    truth: Mapping[str, np.ndarray] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a new panel with every dataset at its final shape.

    ``values`` fills metric matrices now (import, simulation): checkpoints with any finite value are marked done.
    Without it the metrics are NaN and no checkpoint is done (a panel waiting for extraction).
    Written to a temporary name and renamed, so a crash never leaves a half-made panel under ``path``.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise MemtuiError(f"{path} already exists; pass --force to overwrite it or choose another path.")
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    if n == 0:
        raise MemtuiError("a panel needs at least one instance.")
    if len(np.unique(ids)) != n:
        raise MemtuiError("instance ids must be unique.")
    treatment = _checked_array("treatment", treatment, np.int64, (n,))
    steps = np.asarray(steps, dtype=np.int64)
    t = len(steps)
    if t == 0 or np.any(np.diff(steps) <= 0):
        raise MemtuiError("checkpoint steps must be a non-empty, strictly increasing list.")
    values = dict(values or {})
    metrics = list(dict.fromkeys([*metrics, *values]))
    split = np.where(treatment == NEVER, "validation", "train") if split is None else split
    split = _checked_array("split", split, object, (n,))
    source_index = np.full(n, -1) if source_index is None else source_index
    source_index = _checked_array("source_index", source_index, np.int64, (n,))
    revisions = [f"step{s}" for s in steps] if revisions is None else list(revisions)
    if len(revisions) != t:
        raise MemtuiError(f"{len(revisions)} revisions for {t} checkpoints.")

    done = np.zeros(t, dtype=bool)
    for name, arr in values.items():
        values[name] = _checked_array(f"metric '{name}'", arr, np.float64, (n, t))
        done |= np.isfinite(values[name]).any(axis=0)

    if tokens is not None:
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or tokens.shape[0] != n:
            raise MemtuiError(f"tokens have shape {tokens.shape}, expected ({n}, sequence length).")
        tokens = tokens.astype(np.int32)
        lengths = np.full(n, tokens.shape[1]) if lengths is None else lengths
        lengths = _checked_array("lengths", lengths, np.int32, (n,))

    def write(tmp: Path) -> None:
        with h5py.File(tmp, "w", libver="latest") as f:
            f.attrs.update(
                {
                    "format": FORMAT_NAME,
                    "format_version": FORMAT_VERSION,
                    "memtui_version": __version__,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "command": " ".join(sys.argv),
                    "model": "",
                }
            )
            f.attrs.update({k: str(v) for k, v in (attrs or {}).items()})
            inst = f.create_group("instances")
            inst["id"] = ids
            inst["treatment_step"] = treatment
            inst.create_dataset("split", data=split.astype(str).tolist(), dtype=_STR)
            inst["source_index"] = source_index
            if tokens is not None:
                inst.create_dataset("tokens", data=tokens, chunks=(1, tokens.shape[1]))
                inst["length"] = lengths
            ck = f.create_group("checkpoints")
            ck["step"] = steps
            ck["done"] = done.astype(np.uint8)
            ck.create_dataset("revision", data=np.array(revisions, dtype="S256"))
            ck.create_dataset("weights_hash", data=np.zeros(t, dtype="S64"))
            ck.create_dataset("finished_at", data=np.zeros(t, dtype=np.float64))
            grp = f.create_group("metrics")
            for name in metrics:
                data = values.get(name, np.full((n, t), np.nan))
                ds = grp.create_dataset(name, data=data, chunks=(n, 1), dtype=np.float64)
                ds.attrs["sign"] = int((signs or {}).get(name, METRIC_SIGN.get(name, 1)))
            if truth:
                tg = f.create_group("truth")
                for key, arr in truth.items():
                    tg[key] = np.asarray(arr)

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)
    return path


def _open(path: Path, mode: str = "r") -> h5py.File:
    if not path.exists():
        raise MemtuiError(
            f"{path}: no such file; make one with `memtui sample synthetic {path}` or `memtui import TABLE {path}`."
        )
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder, not a panel file; pass the .h5 file inside it.")
    if not h5py.is_hdf5(path):
        raise MemtuiError(
            f"{path} is not an HDF5 panel file (empty, truncated or another format); "
            "rebuild it with `memtui import` or `memtui sample`."
        )
    try:
        if mode == "r":
            return h5py.File(path, "r", libver="latest", swmr=True)
        return h5py.File(path, mode, libver="latest")
    except OSError as exc:
        reason = str(exc).split("(")[0].strip() or "unreadable"
        raise MemtuiError(
            f"{path} cannot be opened ({reason}); it may be corrupt or half-written, or locked by another writer."
        ) from None


def _require(f: h5py.File, path: Path, name: str) -> h5py.Dataset:
    if name not in f or not isinstance(f[name], h5py.Dataset):
        raise MemtuiError(f"{path}: dataset '{name}' is missing; the file is incomplete, rebuild it.")
    return f[name]


def read_panel(path: str | os.PathLike) -> Panel:
    """Open and validate a panel; any problem is a MemtuiError with a one-line message."""
    path = Path(path)
    try:
        with _open(path) as f:
            return _read(f, path)
    except MemtuiError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MemtuiError(
            f"{path} cannot be read ({reason}); it may be corrupt or half-written: rebuild it or copy it again."
        ) from None


def _read(f: h5py.File, path: Path) -> Panel:
    if f.attrs.get("format") != FORMAT_NAME:
        raise MemtuiError(f"{path} is an HDF5 file but not a memtui panel; convert it with `memtui import`.")
    version = int(f.attrs.get("format_version", -1))
    if version != FORMAT_VERSION:
        raise MemtuiError(
            f"{path} has panel format version {version}, this memtui reads version {FORMAT_VERSION}; "
            "use a matching memtui or rebuild the panel."
        )
    ids = _require(f, path, "instances/id")[()]
    n = len(ids)
    treatment = _require(f, path, "instances/treatment_step")[()]
    steps = _require(f, path, "checkpoints/step")[()]
    t = len(steps)
    done = _require(f, path, "checkpoints/done")[()]
    for name, arr, shape in [("instances/treatment_step", treatment, (n,)), ("checkpoints/done", done, (t,))]:
        if arr.shape != shape:
            raise MemtuiError(f"{path}: {name} has shape {arr.shape}, expected {shape}; the file is inconsistent.")
    if not np.issubdtype(treatment.dtype, np.integer) or not np.issubdtype(steps.dtype, np.integer):
        raise MemtuiError(f"{path}: treatment steps and checkpoint steps must be integers; rebuild the panel.")
    if t == 0 or np.any(np.diff(steps) <= 0):
        raise MemtuiError(f"{path}: checkpoint steps are not strictly increasing; rebuild the panel.")
    if not (treatment == NEVER).any():
        raise MemtuiError(
            f"{path}: no never-treated (validation) instances, so there is no control group; "
            "add validation instances (treatment step -1)."
        )
    if "metrics" not in f or not len(f["metrics"]):
        raise MemtuiError(f"{path}: the panel has no metrics; rebuild it with `memtui import` or `memtui sample`.")
    metrics, signs = {}, {}
    for name, ds in f["metrics"].items():
        if ds.shape != (n, t):
            raise MemtuiError(
                f"{path}: metric '{name}' has shape {ds.shape}, expected ({n}, {t}) instances x checkpoints."
            )
        if not np.issubdtype(ds.dtype, np.floating):
            raise MemtuiError(f"{path}: metric '{name}' is stored as {ds.dtype}, expected floating point.")
        metrics[name] = ds[()].astype(np.float64, copy=False)
        signs[name] = int(ds.attrs.get("sign", METRIC_SIGN.get(name, 1)))
    done = done.astype(bool)
    split = f["instances/split"].asstr()[()] if "instances/split" in f else None
    source = f["instances/source_index"][()] if "instances/source_index" in f else None
    truth = {k: v[()] for k, v in f["truth"].items()} if "truth" in f else None
    return Panel(
        ids=ids,
        treatment=treatment.astype(np.int64),
        steps=steps.astype(np.int64),
        done=done,
        metrics=metrics,
        split=split,
        source_index=source,
        revisions=[r.decode() for r in f["checkpoints/revision"][()]] if "checkpoints/revision" in f else [],
        weight_hashes=[h.decode() for h in f["checkpoints/weights_hash"][()]]
        if "checkpoints/weights_hash" in f
        else [],
        signs=signs,
        attrs={k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f.attrs.items()},
        truth=truth,
        path=path,
        has_tokens="instances/tokens" in f,
    )


def read_tokens(path: str | os.PathLike, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (rows x L, PAD after each row's length) and lengths, for extraction."""
    path = Path(path)
    with _open(path) as f:
        if "instances/tokens" not in f:
            raise MemtuiError(
                f"{path}: the panel stores no token ids, so it cannot be extracted; build it with `memtui build`."
            )
        return f["instances/tokens"][rows], f["instances/length"][rows]


class PanelWriter:
    """Fills a panel checkpoint by checkpoint while readers may have it open (HDF5 SWMR).

    ``write_checkpoint`` writes each metric's column, flushes, then marks the checkpoint done and flushes again, so a
    reader (or a resumed run after a crash) never sees a done flag before its data. The file is opened straight into
    SWMR-write mode (readers are never refused, not even while it opens) and without HDF5's own file lock, which a
    reader that has the file open would hold: the caller guarantees a single writer (extraction's lock file).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        _open(self.path).close()  # the usual one-line errors for a missing or foreign file
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
        fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
        fapl.set_file_locking(False, True)
        try:
            fid = h5py.h5f.open(os.fsencode(self.path), h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE, fapl=fapl)
        except OSError as exc:
            raise MemtuiError(f"{self.path} cannot be opened for writing ({str(exc).split('(')[0].strip()}).") from None
        self._f = h5py.File(fid)
        try:
            self.panel = _read(self._f, self.path)
        except Exception:
            self._f.close()
            raise

    def __enter__(self) -> PanelWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._f.id.valid:
            self._f.close()

    def write_checkpoint(
        self, index: int, columns: Mapping[str, np.ndarray], *, revision: str | None = None, weights_hash: str = ""
    ) -> None:
        f = self._f
        n = self.panel.n_instances
        for name, col in columns.items():
            if name not in f["metrics"]:
                raise MemtuiError(f"{self.path}: no metric '{name}' in this panel; it was built without it.")
            f["metrics"][name][:, index] = _checked_array(f"column of '{name}'", col, np.float64, (n,))
        if revision is not None:
            f["checkpoints/revision"][index] = revision.encode()[:256]
        f["checkpoints/weights_hash"][index] = weights_hash.encode()[:64]
        f["checkpoints/finished_at"][index] = time.time()
        f.flush()
        f["checkpoints/done"][index] = 1
        f.flush()
        self.panel.done[index] = True


def set_attrs(path: str | os.PathLike, **attrs: str) -> None:
    """Change provenance attributes (e.g. the model name) of a panel no writer has open; SWMR cannot change them."""
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        current = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f.attrs.items()}
    if any(current.get(k) != str(v) for k, v in attrs.items()):
        with h5py.File(path, "r+", libver="latest", locking=False) as f:
            f.attrs.update({k: str(v) for k, v in attrs.items()})
