"""Per-token scores: the log-probability of each target token of a chosen subset of instances, per checkpoint.

Layout (docs/panel-format.md, "Per-token scores"), written only where `memtui extract --token-scores` asked for it:

- ``instances/token_scores/ids``: int64 (m,), the subset's instance ids (``instances/id``), in panel row order;
- ``instances/token_scores/logp``: float16 (m, checkpoints, W), W = the longest subset row's length - 1: entry
  [i, c, j] = log p(token j + 2 | tokens 1..j + 1) of instance ``ids[i]`` at checkpoint c (nats; the targets of
  ``loglik``, which sums them); NaN past the row's own length - 1 targets and at checkpoints not yet scored. Chunked
  (a block of instances, one checkpoint, every target), gzip-compressed with the shuffle filter and Fletcher-32;
- ``instances/token_scores/done``: uint8 (checkpoints,), 1 once a checkpoint's column is written whole (written
  after its data and flushed, as ``checkpoints/done`` is for the metrics).

The group is made at launch, before any worker starts (the file rewritten beside and renamed, holding extraction's
commit lease); its chunks are written by the committer, so unlike the metrics they grow the file as checkpoints are
committed (about the size estimate `extract` prints, less compression).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from memtui.core.errors import MemtuiError
from memtui.panel.hdf5 import _dataset, _dataset_handle, _read_live, text_attr
from memtui.panel.model import Panel
from memtui.panel.rewrite import identity, replace_panel

GROUP = "instances/token_scores"
METRIC = "logp"  # the one per-token dataset: instances/token_scores/logp
CHUNK_BYTES = 1 << 16  # a chunk holds this much (uncompressed) of one checkpoint's rows


@dataclass(frozen=True)
class Layout:
    """What a panel's token-score group holds: the subset's rows (indices into the panel), their ids, the target
    width W, the checkpoints whose column is written, and the bytes stored."""

    rows: np.ndarray
    ids: np.ndarray
    width: int
    done: np.ndarray
    stored_bytes: int


def width_of(lengths: np.ndarray, rows: np.ndarray) -> int:
    """W: the subset's longest row's targets (at least 1, so the dataset is never empty)."""
    return max(1, int(np.max(lengths[rows], initial=1)) - 1)


def read_layout(path: str | os.PathLike) -> Layout | None:
    """The panel's token-score layout, checked (one-line refusals for a damaged group); None without the group."""
    path = Path(path)
    return _read_live(path, lambda f: _layout(f, path))


def _layout(f: h5py.File, path: Path) -> Layout | None:
    if GROUP not in f:
        return None
    if not isinstance(f.get(GROUP, getlink=True), h5py.HardLink) or not isinstance(f[GROUP], h5py.Group):
        raise MemtuiError(f"{path}: '{GROUP}' is not a group; rebuild the panel or extract into a fresh copy.")
    panel_ids = _dataset(f, path, "instances/id", "iu").astype(np.int64)
    t = len(_dataset_handle(f, path, "checkpoints/step", "iu"))
    ids = _dataset(f, path, f"{GROUP}/ids", "iu").astype(np.int64)
    if ids.ndim != 1 or not len(ids) or len(np.unique(ids)) != len(ids):
        raise MemtuiError(f"{path}: '{GROUP}/ids' must list distinct instance ids; the file is inconsistent.")
    row_of = {int(v): i for i, v in enumerate(panel_ids)}
    if any(int(v) not in row_of for v in ids):
        raise MemtuiError(f"{path}: '{GROUP}/ids' names instances the panel does not have; the file is inconsistent.")
    rows = np.array([row_of[int(v)] for v in ids], dtype=np.int64)
    if np.any(np.diff(rows) <= 0):
        raise MemtuiError(f"{path}: '{GROUP}/ids' is not in panel row order; the file is inconsistent.")
    logp = _dataset_handle(f, path, f"{GROUP}/{METRIC}", "f")
    if logp.ndim != 3 or logp.shape[:2] != (len(ids), t) or logp.shape[2] < 1:
        raise MemtuiError(
            f"{path}: '{GROUP}/{METRIC}' has shape {logp.shape}, expected ({len(ids)}, {t}, targets); the file is "
            "inconsistent."
        )
    done = _dataset(f, path, f"{GROUP}/done", "iub", (t,)).astype(bool)
    return Layout(rows, ids, int(logp.shape[2]), done, int(logp.id.get_storage_size()))


def read_token_scores(panel_or_path: Panel | str | os.PathLike, ids) -> dict[int, np.ndarray] | None:
    """Per-token log-probabilities of the instances ``ids`` that the panel stores them for: {id: float32 array of
    (checkpoints, length - 1)}, NaN at checkpoints not yet scored; ids without per-token scores are left out. None
    when the panel has no per-token scores at all."""
    path = Path(panel_or_path.path if isinstance(panel_or_path, Panel) else panel_or_path)

    def read(f):
        layout = _layout(f, path)
        if layout is None:
            return None
        lengths = _dataset(f, path, "instances/length", "iu", optional=True)
        ds = f[f"{GROUP}/{METRIC}"]
        out = {}
        position = {int(v): i for i, v in enumerate(layout.ids)}
        for wanted in ids:
            i = position.get(int(wanted))
            if i is None:
                continue
            targets = layout.width if lengths is None else max(0, int(lengths[layout.rows[i]]) - 1)
            values = ds[i].astype(np.float32)[:, : min(targets, layout.width)]
            values[~layout.done] = np.nan
            out[int(wanted)] = values
        return out

    return _read_live(path, read)


def create_group(path: str | os.PathLike, rows: np.ndarray) -> None:
    """Add an empty token-score group for panel ``rows`` (sorted) to the panel at ``path``: the file edited in memory,
    written beside and renamed over it, refused if it changed meanwhile. The caller holds the commit lease."""
    from memtui.core.memory import require_memory

    path = Path(path)
    before = _identity(path)
    require_memory(3 * before[2], f"adding per-token scores to {path}", "free memory or extract on a larger machine")
    image = path.read_bytes()
    buffer = io.BytesIO(image)
    with h5py.File(buffer, "r+", libver="latest", locking=False) as f:
        ids = f["instances/id"][()].astype(np.int64)[rows]
        lengths = f["instances/length"][()] if "instances/length" in f else np.full(len(f["instances/id"]), 2)
        t = len(f["checkpoints/step"])
        width = width_of(np.asarray(lengths), rows)
        group = f["instances"].create_group("token_scores")
        group.attrs["description"] = text_attr(
            "log p of each target token (float16, nats) of the instances ids, per checkpoint; done: columns written"
        )
        group.create_dataset("ids", data=ids, chunks=(len(ids),), fletcher32=True)
        block = int(np.clip(CHUNK_BYTES // (2 * width), 1, len(rows)))
        group.create_dataset(
            METRIC, shape=(len(rows), t, width), dtype=np.float16, chunks=(block, 1, width), fillvalue=np.nan,
            compression="gzip", compression_opts=4, shuffle=True, fletcher32=True,
        )  # fmt: skip
        group.create_dataset("done", data=np.zeros(t, np.uint8), chunks=(t,), fletcher32=True)
    changed = f"{path} changed while its per-token scores were set up (a commit?); run it again."
    replace_panel(path, buffer.getvalue(), before, changed, WHEN_FINISHED)


WHEN_FINISHED = "rerun when it has finished"  # what a panel being written is told


def _identity(path: Path) -> tuple:
    """What must not change between reading the panel and renaming the new one over it."""
    return identity(path, WHEN_FINISHED)


def write_column(f: h5py.File, index: int, values: np.ndarray) -> None:
    """Write checkpoint ``index``'s per-token scores (m x W, NaN-padded) into the open panel ``f``, flush, then mark
    the column done and flush again: a reader, or a resumed run, never sees a done flag before its data."""
    ds = f[f"{GROUP}/{METRIC}"]
    if values.shape != (ds.shape[0], ds.shape[2]):
        raise MemtuiError(f"per-token scores of shape {values.shape} for a column of {(ds.shape[0], ds.shape[2])}.")
    ds[:, index, :] = values.astype(np.float16)
    f.flush()
    f[f"{GROUP}/done"][index] = 1
    f.flush()


def complete(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint steps and whether each is complete: its metrics committed and, where the panel asks for
    per-token scores, those too (extraction's notion of a finished checkpoint)."""
    from memtui.panel.hdf5 import read_done

    steps, done = read_done(path)
    layout = read_layout(path)
    return steps, done if layout is None else done & layout.done
