"""nanotron's Nanoset blending helper (``build_nanoset_index_helper``): which dataset each sample of an epoch comes
from, compiled where it can be.

The helper is a greedy loop (memtui.orders.nanoset's docstring): every sample depends on the counts the ones before
it left, so it cannot be vectorised exactly. ``_blend.c`` runs it in C, the same float64 operations in the same
order (setup.py builds it beside this module, without fused multiply-adds or fast-math); without a compiler the
Python loop below gives the same array, about a microsecond a sample and dataset instead of a few nanoseconds
(tests/orders/test_blend.py holds the two equal to nanotron's helper; benchmarks/build_orders.py times them).
``MEMTUI_KERNELS=numpy`` in the environment turns the compiled loop off, as it does the bootstrap's.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
from functools import cache
from pathlib import Path

import numpy as np

ABI = 1  # _blend.c's BLEND_ABI: the arguments this module's ctypes mirror is written for; bump both together


@cache
def _library() -> ctypes.CDLL | None:
    if os.environ.get("MEMTUI_KERNELS", "").lower() == "numpy":
        return None
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_blend{suffix}"
        if not path.is_file():
            continue
        try:
            lib = ctypes.CDLL(str(path))
            lib.blend_abi.restype = ctypes.c_int64
            if lib.blend_abi() != ABI:  # a stale build beside a newer module: not called
                return None
            lib.nanoset_picks.restype = None
            lib.nanoset_picks.argtypes = [
                ctypes.c_int64,
                ctypes.c_void_p,
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_void_p,
            ]
            lib.nanoset_blend.restype = None
            lib.nanoset_blend.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_int]  # fmt: skip
        except (OSError, AttributeError):  # not a library of this platform, or one without the functions
            return None
        return lib
    return None


def compiled() -> bool:
    """Whether the compiled loop is there (and not turned off)."""
    return _library() is not None


def blend(lengths: list[int], weights: np.ndarray, *, use_compiled: bool = True) -> np.ndarray:
    """``build_nanoset_index_helper``'s ``dataset_index`` for one epoch of S = sum(lengths) samples (uint8 below 256
    datasets, else uint16)."""
    n, k = int(sum(lengths)), len(lengths)
    out = np.zeros(n, dtype=np.uint8 if k < 256 else np.uint16)
    if k == 1 or n == 0:
        return out
    w = np.ascontiguousarray(weights, dtype=np.float64)
    lib = _library() if use_compiled else None
    if lib is not None:
        counts = np.zeros(k, dtype=np.int64)
        lib.nanoset_blend(n, k, w.ctypes.data, counts.ctypes.data, out.ctypes.data, int(k >= 256))
        return out
    return _blend_python(n, [float(x) for x in w], out)


def picks(dataset: np.ndarray, k: int, *, use_compiled: bool = True) -> list[np.ndarray]:
    """Each dataset's helper indices in ascending order (uint32): the j whose ``dataset[j]`` is d. Views into one
    array of the epoch's size: no int64 temporaries (the compiled pass), or one dataset's at a time (numpy)."""
    counts = np.bincount(dataset, minlength=k).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out = np.empty(len(dataset), dtype=np.uint32)
    lib = _library() if use_compiled else None
    if lib is not None and len(dataset):
        cursor = starts[:-1].copy()
        dataset = np.ascontiguousarray(dataset)
        lib.nanoset_picks(len(dataset), dataset.ctypes.data, int(dataset.dtype == np.uint16), cursor.ctypes.data,
                          out.ctypes.data)  # fmt: skip
    else:
        for d in range(k):
            out[starts[d] : starts[d + 1]] = np.flatnonzero(dataset == d)
    return [out[starts[d] : starts[d + 1]] for d in range(k)]


def _blend_python(n: int, w: list[float], out: np.ndarray) -> np.ndarray:
    c = [0] * len(w)
    ks = range(len(w))
    for i in range(n):
        x = max(i, 1.0)
        best, top = 0, w[0] * x - c[0]
        for d in ks:
            e = w[d] * x - c[d]
            if e > top:  # np.argmax: the first of equal maxima
                best, top = d, e
        out[i] = best
        c[best] += 1
    return out
