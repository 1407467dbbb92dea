"""Per-instance covariates stored in a panel (``instances/covariates/NAME``, docs/panel-format.md).

Covariates are added to a panel that already exists (built, maybe extracted), so unlike everything else in it they
cannot be preallocated when it is made. They are written as panels are made: the whole file is rebuilt in memory
with the new datasets added, written with plain I/O to a temporary name beside the panel, synced, and renamed over
it. A crash, a full disk or a refusal therefore leaves the old panel exactly as it was, never half a covariate, and
HDF5 never writes to a disk that can fill up (see ``hdf5._new_file``). Adding datasets in place (``r+``) would grow
the file through HDF5's own writes, which the panel's writing protocol rules out; copying the panel on disk first
would only move that risk to the copy. The price is memory of about twice the file (checked first): a panel at the
paper's size (16,300 instances x 144 checkpoints, six metrics, 2,049 tokens per row) is ~250 MB.

A panel is refused while an extraction commits into it (an HDF5 writer has it open): the rename would hide that
writer's commit in the replaced file. The file's identity is checked again just before the rename, so a commit
that started meanwhile is not lost either (``memtui covariates`` also holds the extraction's commit lease).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.memory import require_memory
from memtui.core.text import clean
from memtui.panel.hdf5 import checked_covariates, read_panel, write_covariates_group
from memtui.panel.rewrite import identity, replace_panel
from memtui.panel.samples import is_sample


def read_covariates(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The panel's covariates: float64 (NaN = unknown) or object arrays of str ("" = unknown); {} where none."""
    return read_panel(path).covariates


def write_covariates(path: str | os.PathLike, columns: Mapping[str, np.ndarray], *, replace: bool = False) -> None:
    """Add ``columns`` (name -> one value per instance, numbers or text) to the panel at ``path``.

    Numbers are stored as float64 (NaN = unknown), text as fixed-length UTF-8. A name the panel already has is
    refused unless ``replace``; every other covariate already there is kept. Nothing is written on any refusal.
    """
    path = Path(path)
    if is_sample(path):
        raise MemtuiError(f"{path} is a shipped sample (read-only data); copy it and add covariates to the copy.")
    if path.is_file():
        _identity(path)  # a panel being written is refused first: HDF5 would refuse to open it in this process
    panel = read_panel(path)  # every check of a panel read, and its size
    columns = checked_covariates(columns, panel.n_instances)
    if not columns:
        raise MemtuiError(f"{path}: no covariates to write.")
    clash = [name for name in columns if name in panel.covariates]
    if clash and not replace:
        raise MemtuiError(
            f"{path} already has the covariate{'s' if len(clash) > 1 else ''} {', '.join(clash)}; pass --replace "
            "to overwrite."
        )
    before = _identity(path)
    require_memory(3 * before[2], f"adding covariates to {path}", "free memory or add them on a larger machine")
    image = _with_covariates(path.read_bytes(), columns)
    changed = f"{path} changed while covariates were added (an extraction committed?); run it again."
    replace_panel(path, image, before, changed, WHEN_FINISHED)
    read_panel(path)  # the new file reads back whole (a failure here is a bug, and says so in one line)


WHEN_FINISHED = "add covariates when it has finished"  # what a panel being written is told


def _identity(path: Path) -> tuple:
    """What must not change between reading the panel and renaming the new one over it."""
    return identity(path, WHEN_FINISHED)


def _with_covariates(image: bytes, columns: Mapping[str, np.ndarray]) -> bytes:
    """The panel file ``image`` with ``columns`` added under ``instances/covariates``, edited in memory."""
    buffer = io.BytesIO(image)
    with h5py.File(buffer, "r+", libver="latest", locking=False) as f:
        write_covariates_group(f["instances"], columns)
    return buffer.getvalue()


def describe_covariate(values: np.ndarray) -> tuple[str, str]:
    """(kind, summary) of one covariate for `memtui info` and `memtui covariates`: numbers with their missing count
    and range (and median), text with its missing count and most frequent levels."""
    if values.dtype.kind == "f":
        known = values[np.isfinite(values)]
        missing = f"{len(values) - len(known)} missing"
        if not len(known):
            return "numeric", missing
        lo, mid, hi = (float(v) for v in np.quantile(known, [0, 0.5, 1]))
        return "numeric", f"{missing}, {lo:.4g} .. {hi:.4g} (median {mid:.4g})"
    text = np.asarray(values, dtype=object)
    known = text[text != ""]
    levels, counts = np.unique(known.astype(str), return_counts=True) if len(known) else ([], [])
    top = sorted(zip(counts, levels, strict=True), key=lambda t: (-t[0], t[1]))[:5]
    shown = ", ".join(f"{clean(level, 30)} ({count})" for count, level in top)
    more = f", +{len(levels) - len(top)} more" if len(levels) > len(top) else ""
    return "categorical", f"{len(text) - len(known)} missing, {len(levels)} levels: {shown}{more}"


def constant_value(values: np.ndarray) -> str | None:
    """The one value every instance with a known value has, shown (None where there are two or more, or none): such
    a covariate adjusts for nothing (--covariates refuses it) and splits nothing (--by makes one group)."""
    if values.dtype.kind == "f":
        known = np.unique(values[np.isfinite(values)])
        return f"{known[0]:g}" if len(known) == 1 else None
    text = np.asarray(values, dtype=object).astype(str)
    known = np.unique(text[text != ""])
    return f"'{clean(known[0], 40)}'" if len(known) == 1 else None


def covariate_lines(covariates: Mapping[str, np.ndarray]) -> list[str]:
    """One line per covariate, names in one column: name, kind, missing count, range or levels (`memtui info` and
    the workbench's Summaries pane list them alike)."""
    width = max((len(clean(name, 40)) for name in covariates), default=0)
    return [f"{clean(name, 40):<{width}} {' '.join(describe_covariate(v))}" for name, v in covariates.items()]
