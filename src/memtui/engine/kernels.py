"""Compiled loops for the bootstrap's two hottest steps (``_kernels.c``), with the numpy code as the fallback.

A block of the bootstrap's cell draws (``did._Stack.cell_draws``) and the calibrated band's studentised maxima over it
(``bands.studentized_bootstrap``) are each some fifteen numpy passes over a cells x draws block; the compiled loops
make the same float32 operations, element by element in the same order, in one pass, so every result is the numpy
code's bit for bit (tests/engine/test_kernels.py holds the two equal). They are 40 % of a suite estimate's CPU in
numpy (benchmarks/suite.py; docs/calibration-study.md).

The library is built by ``pip install`` (setup.py, an optional extension: where no C compiler is found the install
goes on without it) and loaded with ctypes, which releases the GIL for each call. Without it, or with
``MEMTUI_KERNELS=numpy`` in the environment, memtui runs the numpy code: the same results, more slowly.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
from pathlib import Path

import numpy as np

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_F32 = ctypes.c_float


def _load() -> ctypes.CDLL | None:
    if os.environ.get("MEMTUI_KERNELS", "").lower() == "numpy":
        return None
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_kernels{suffix}"
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            # fmt: off
            lib.cell_draws.argtypes = [
                _I64, _I64, _PTR, _PTR, _PTR, _PTR,  # cells, draws, r, cum_r, w, cum_w
                _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _PTR, _PTR, ctypes.c_int,  # indices, col, group, prefix, own
                _PTR, _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _PTR,  # inv_nt, inv_nc, dm, dmu, out, stride, parts
            ]
            lib.studentise.argtypes = [
                _I64, _I64, _PTR, _PTR, _PTR, _I64, _F32, _PTR, _PTR, _PTR,  # cells, draws, parts, out, unit, k, var
                _PTR, _PTR, _I64, _PTR, _PTR,  # label, group_max, its stride, squares
            ]
            # fmt: on
            lib.cell_draws.restype = lib.studentise.restype = None
            return lib
    return None


_LIB = _load()


def available() -> bool:
    """Whether the compiled loops are built and in use (not switched off by ``MEMTUI_KERNELS=numpy``)."""
    return _LIB is not None


def _ptr(a: np.ndarray | None, dtype, rows_only: bool = False) -> int | None:
    """The address of ``a``'s data, after checking what the C loop assumes of it: its dtype, and contiguous rows
    (``rows_only``: rows may be further apart than their length, as a view of some columns of the draws)."""
    if a is None:
        return None
    if a.dtype != dtype:
        raise TypeError(f"compiled loop: {a.dtype} where {np.dtype(dtype)} is needed")
    if rows_only:
        if a.ndim != 2 or a.strides[1] != a.itemsize:
            raise ValueError("compiled loop: rows of the array must be contiguous")
    elif not a.flags.c_contiguous:
        raise ValueError("compiled loop: the array must be C-contiguous")
    return a.ctypes.data


def cell_draws(
    r, cum_r, w, cum_w, index: tuple, col: int, group, prefix, own, any_own: bool, inv_nt, inv_nc, dm, dmu,
    out, treated, ctrl,
) -> None:  # fmt: skip
    """``did._Stack.cell_draws`` of one block (its arrays already sliced to the block's cells) in one pass."""
    f32, i64 = np.float32, np.int64
    n, bc = out.shape
    own_t, own_b, ctrl_t, ctrl_b = index
    if any(len(x) != n for x in (own_t, own_b, ctrl_t, ctrl_b, group, prefix, own, inv_nt, inv_nc, dm, dmu)):
        raise ValueError("compiled loop: per-cell arrays of different lengths")
    if r.shape[1] != bc or cum_r.shape[1] != bc or w.shape[1] != bc or cum_w.shape[1] != bc:
        raise ValueError("compiled loop: sums with another number of draws")
    if treated.shape != (n, bc) or ctrl.shape != (n, bc):
        raise ValueError("compiled loop: parts of another shape")
    _LIB.cell_draws(
        n, bc, _ptr(r, f32), _ptr(cum_r, f32), _ptr(w, f32), _ptr(cum_w, f32),
        _ptr(own_t, i64), _ptr(own_b, i64), _ptr(ctrl_t, i64), _ptr(ctrl_b, i64), col,
        _ptr(group, i64), _ptr(prefix, i64), _ptr(own.view(np.uint8), np.uint8), int(any_own),
        _ptr(inv_nt, f32), _ptr(inv_nc, f32), _ptr(dm, f32), _ptr(dmu, f32),
        _ptr(out, f32, rows_only=True), out.strides[0] // 4, _ptr(treated, f32), _ptr(ctrl, f32),
    )  # fmt: skip


def studentise(
    treated, ctrl, out, unit: np.float32, k_t, k_c, var, label, group_max, squares: tuple | None
) -> None:  # fmt: skip
    """``bands.studentized_bootstrap``'s studentised squares of one block folded into ``group_max`` (a view of the
    chunk's columns of every cell group's running maximum; ``label``: each cell's row in it, -1 for none), and with
    ``squares`` the aggregates' unit-scaled T*^2 and C* of the block's cells, in one pass."""
    f32 = np.float32
    n, bc = out.shape
    if treated.shape != (n, bc) or ctrl.shape != (n, bc) or group_max.shape[1] != bc:
        raise ValueError("compiled loop: arrays of different shapes")
    if any(len(x) != n for x in (k_t, k_c, var, label)):
        raise ValueError("compiled loop: per-cell arrays of different lengths")
    if len(label) and int(label.max()) >= group_max.shape[0]:
        raise ValueError("compiled loop: a cell group beyond the running maxima")
    sq_t, sq_c = squares if squares is not None else (None, None)
    if squares is not None and (sq_t.shape != (n, bc) or sq_c.shape != (n, bc)):
        raise ValueError("compiled loop: squares of another shape")
    _LIB.studentise(
        n, bc, _ptr(treated, f32), _ptr(ctrl, f32), _ptr(out, f32, rows_only=True), out.strides[0] // 4,
        f32(unit), _ptr(k_t, f32), _ptr(k_c, f32), _ptr(var, f32), _ptr(label, np.int64),
        _ptr(group_max, f32, rows_only=True), group_max.strides[0] // 4, _ptr(sq_t, f32), _ptr(sq_c, f32),
    )  # fmt: skip
