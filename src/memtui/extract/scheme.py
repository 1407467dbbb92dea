"""``sampled_logp``'s sampling scheme: the one a panel records against the one an extraction computes with.

A panel built with ``sampled_logp`` records its scheme on the metric's dataset (attributes ``top_k`` and
``temperature``, docs/panel-format.md); extraction fills it under memtui's scheme, Hayes et al. (2024)'s top-k = 40 at
temperature 1 (``panel.metrics``). A panel whose recorded scheme differs (made by a memtui with another default, or
edited) would mix two metrics in one column across a resume: every launch and every worker refuses it in one line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import h5py

from memtui.core.errors import MemtuiError
from memtui.panel import metrics as registry
from memtui.panel.hdf5 import _dataset_handle, _read_live

METRIC = "sampled_logp"
REQUESTED = (registry.SAMPLING_TOP_K, registry.SAMPLING_TEMPERATURE)  # what this extraction samples with


def recorded(path: str | os.PathLike) -> tuple[int, float] | None:
    """The (top_k, temperature) the panel's ``sampled_logp`` records; None without the metric. Attributes missing,
    not numbers, or not a scheme (top_k < 1, temperature not finite and > 0) are refused in one line."""
    path = Path(path)
    return _read_live(path, lambda f: _scheme(f, path))


def _scheme(f: h5py.File, path: Path) -> tuple[int, float] | None:
    if f"metrics/{METRIC}" not in f:
        return None
    attrs = _dataset_handle(f, path, f"metrics/{METRIC}", "f").attrs
    inconsistent = (
        f"{path}: metric '{METRIC}' does not record a sampling scheme (attributes top_k >= 1 and temperature > 0); "
        "rebuild the panel."
    )
    try:
        top_k, temperature = attrs["top_k"], attrs["temperature"]
        if getattr(top_k, "shape", ()) != () or getattr(temperature, "shape", ()) != ():
            raise TypeError
        k, t = float(top_k), float(temperature)
    except (KeyError, TypeError, ValueError, OverflowError):
        raise MemtuiError(inconsistent) from None
    if not (math.isfinite(k) and k.is_integer() and 1 <= k <= 2**31) or not (math.isfinite(t) and t > 0):
        raise MemtuiError(inconsistent)
    return int(k), t


def check(path: str | os.PathLike, requested: tuple[int, float] = REQUESTED) -> tuple[int, float] | None:
    """The panel's scheme where it is ``requested`` (None without ``sampled_logp``); a panel recording another one is
    refused in one line."""
    scheme = recorded(path)
    if scheme is None:
        return None
    if scheme[0] != requested[0] or not math.isclose(scheme[1], requested[1], rel_tol=1e-12, abs_tol=0.0):
        raise MemtuiError(
            f"{path} records sampled_logp under top-k {scheme[0]}, temperature {scheme[1]:g}; this extraction "
            f"samples with top-k {requested[0]}, temperature {requested[1]:g}, and one column cannot hold both: "
            "extract it with the memtui that built it, or build a new panel."
        )
    return scheme
