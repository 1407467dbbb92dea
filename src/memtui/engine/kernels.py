"""The bootstrap's compiled loop (``_kernels.c``), with the numpy code as the fallback.

A block of the bootstrap's cell draws (``did._Stack.cell_draws``), the calibrated band's studentised maxima over it
and the aggregates' sums of it (``bands._Studentiser``: re-centring terms, weighted draws) were some thirty numpy
passes and two scipy sparse products over a cells x draws block; the compiled loop makes the same float32 operations,
element by element in the same order, in one pass, so every result is the numpy code's bit for bit
(tests/engine/test_kernels.py holds the two equal). Those passes were about 40 % of the suite benchmark's CPU
(benchmarks/suite.py; docs/calibration-study.md).

The library is built by ``pip install`` (setup.py, an optional extension: where no C compiler is found the install
goes on without it) and loaded with ctypes, which releases the GIL for each call. Without it, or with
``MEMTUI_KERNELS=numpy`` in the environment, memtui runs the numpy code: the same results, more slowly. A library whose
interface version or struct layout differs from this module's mirror of them is not called (``mismatch``).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_F32 = ctypes.c_float


class _StudentiseC(ctypes.Structure):
    _fields_ = [
        ("unit", _F32), ("k_t", _PTR), ("k_c", _PTR), ("var", _PTR), ("label", _PTR), ("group_max", _PTR),
        ("gm_stride", _I64), ("agg_ptr", _PTR), ("agg_row", _PTR), ("coef_t", _PTR), ("coef_c", _PTR),
        ("coef_w", _PTR), ("acc_t", _PTR), ("acc_c", _PTR), ("acc_w", _PTR), ("acc_stride", _I64),
    ]  # fmt: skip


# _kernels.c's KERNELS_ABI: the version of cell_draws' arguments and of studentise_t that this module's ctypes mirror
# (_StudentiseC and the argtypes below) is written for. Bump both together.
ABI = 1


def _load() -> ctypes.CDLL | None:
    if os.environ.get("MEMTUI_KERNELS", "").lower() == "numpy":
        return None
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_kernels{suffix}"
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            problem = mismatch(lib)
            if problem is not None:
                _not_used(path, problem)
                return None
            # fmt: off
            lib.cell_draws.argtypes = [
                _I64, _I64, _PTR, _PTR, _PTR, _PTR,  # cells, draws, r, cum_r, w, cum_w
                _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _PTR, _PTR, ctypes.c_int,  # indices, col, group, prefix, own
                _PTR, _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _PTR,  # inv_nt, inv_nc, dm, dmu, out, stride, parts
                ctypes.POINTER(_StudentiseC),
            ]
            # fmt: on
            lib.cell_draws.restype = None
            if hasattr(lib, "rademacher_rows"):  # a library built before it: the numpy code expands them
                lib.rademacher_rows.argtypes = [_PTR, _I64, _I64, _I64, _PTR, _PTR]
                lib.rademacher_rows.restype = None
            return lib
    return None


def mirror_layout() -> list[int]:
    """The ctypes mirror's size of studentise_t and its fields' offsets, as _kernels.c's ``studentise_layout`` gives
    the C compiler's."""
    return [ctypes.sizeof(_StudentiseC), *(getattr(_StudentiseC, name).offset for name, _ in _StudentiseC._fields_)]


def mismatch(lib) -> str | None:
    """Why the library ``lib`` must not be called from this module (None: it matches): a library built from another
    version of _kernels.c, or whose struct the compiler laid out otherwise than ctypes did. A drifted struct or
    signature would not fail: it would read and write the wrong memory."""
    try:
        abi, layout = lib.kernels_abi, lib.studentise_layout
    except AttributeError:
        return "it has no interface version (built from an older _kernels.c)"
    abi.argtypes, abi.restype = [], _I64
    if (version := abi()) != ABI:
        return f"its interface is version {version}, this memtui's is {ABI}"
    expected = mirror_layout()
    got = (_I64 * len(expected))()
    layout.argtypes, layout.restype = [_PTR, _I64], _I64
    fields = layout(ctypes.cast(got, _PTR), len(expected))
    if fields != len(expected) - 1 or list(got) != expected:
        return f"its studentise_t is laid out as {list(got)[: fields + 1]}, the ctypes mirror as {expected}"
    return None


def _not_used(path: Path, problem: str) -> None:
    """A library that does not match is not called: the numpy code runs, with a warning, or, where the compiled loop
    is required (``MEMTUI_REQUIRE_KERNELS=1``, as CI sets), an error."""
    message = (
        f"the compiled loop {path.name} is not used: {problem}; reinstall memtui (pip install -e .) to rebuild it. "
        "The numpy code runs instead: the same results, more slowly."
    )
    if os.environ.get("MEMTUI_REQUIRE_KERNELS") == "1":
        raise ImportError(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


_LIB = _load()


def available() -> bool:
    """Whether the compiled loop is built and in use (not switched off by ``MEMTUI_KERNELS=numpy``)."""
    return _LIB is not None


def expands() -> bool:
    """Whether the compiled loop expands Rademacher multipliers from raw bytes (``rademacher_rows``)."""
    return _LIB is not None and hasattr(_LIB, "rademacher_rows")


def rademacher_rows(raw: np.ndarray, bc: int, row0: int, out: np.ndarray, wsum: np.ndarray | None = None) -> None:
    """Rows ``row0 .. row0 + len(out) - 1`` of the (rows x ``bc``) Rademacher multipliers whose bits are ``raw``
    (uint8; bit j, most significant first, is multiplier j: ``did.multipliers``' values) into ``out`` (float32,
    contiguous, rows x ``bc``) and, where given, each draw's sum over those rows into ``wsum`` (``bc`` float32)."""
    n_rows = out.shape[0] if out.ndim == 2 else 0
    if out.ndim != 2 or out.shape[1] != bc or (wsum is not None and wsum.shape != (bc,)):
        raise ValueError("compiled loop: multipliers of another shape")
    if raw.dtype != np.uint8 or raw.size * 8 < (row0 + n_rows) * bc or row0 < 0:
        raise ValueError("compiled loop: fewer random bits than the rows need")
    _LIB.rademacher_rows(
        _ptr(raw, np.uint8), bc, row0, n_rows, _ptr(out, np.float32), _ptr(wsum, np.float32)
    )  # fmt: skip


@dataclass
class Studentise:
    """What the calibrated band does with a block's draws (``bands._Studentiser``), the block's slices: the unit
    (1 / the outcome's sd), per cell k_t, k_c, the variance and its group of cells (``label``, -1: none), the running
    maxima of the groups over the chunk's draws, and for the aggregates' re-centring (or None) ``AggregateSums``."""

    unit: np.float32
    k_t: np.ndarray
    k_c: np.ndarray
    var: np.ndarray
    label: np.ndarray
    group_max: np.ndarray
    aggregates: AggregateSums | None = None


@dataclass
class AggregateSums:
    """The aggregates' sums over a chunk's cells, sum_k a_k T*_k^2, sum_k c_k C*_k and the weighted draws
    sum_k w_k D*_k (``bands.aggregate_spec``'s sparse matrices, aggregates x cells, in compressed columns): ``ptr``
    (the block's cells + 1 offsets into ``row`` and the coefficients) and the float32 sums (aggregates x the chunk's
    draws) they are added into."""

    ptr: np.ndarray
    row: np.ndarray
    coef_t: np.ndarray
    coef_c: np.ndarray
    coef_w: np.ndarray
    acc_t: np.ndarray
    acc_c: np.ndarray
    acc_w: np.ndarray


def _ptr(a: np.ndarray | None, dtype, rows_only: bool = False) -> int | None:
    """The address of ``a``'s data, after checking what the C loop assumes of it: its dtype, and contiguous rows
    (``rows_only``: rows may be further apart than their length, as a view of some columns of the draws)."""
    if a is None:
        return None
    if a.dtype != dtype:
        raise TypeError(f"compiled loop: {a.dtype} where {np.dtype(dtype)} is needed")
    if a.size == 0:  # nothing is read or written through it (numpy gives empty arrays any strides)
        return a.ctypes.data
    if rows_only:
        if a.ndim != 2 or (a.shape[1] > 1 and a.strides[1] != a.itemsize):
            raise ValueError("compiled loop: rows of the array must be contiguous")
    elif not a.flags.c_contiguous:
        raise ValueError("compiled loop: the array must be C-contiguous")
    return a.ctypes.data


def _studentise_c(st: Studentise, n: int, bc: int) -> _StudentiseC:
    f32 = np.float32
    if any(len(x) != n for x in (st.k_t, st.k_c, st.var, st.label)):
        raise ValueError("compiled loop: per-cell arrays of different lengths")
    if st.group_max.shape[1] != bc or (len(st.label) and int(st.label.max()) >= st.group_max.shape[0]):
        raise ValueError("compiled loop: running maxima of another shape")
    agg = st.aggregates
    if agg is None:
        sums = (None,) * 8 + (0,)
    else:
        rows = agg.acc_t.shape[0]
        entries = int(agg.ptr[-1]) if len(agg.ptr) else 0
        if len(agg.ptr) != n + 1 or min(len(x) for x in (agg.row, agg.coef_t, agg.coef_c, agg.coef_w)) < entries:
            raise ValueError("compiled loop: aggregates' columns that do not match the block")
        accs = (agg.acc_t, agg.acc_c, agg.acc_w)
        if any(a.shape != (rows, bc) or a.strides != agg.acc_t.strides for a in accs):
            raise ValueError("compiled loop: aggregates' sums of another shape")
        if entries and (int(agg.row.max()) >= rows or int(agg.row.min()) < 0):
            raise ValueError("compiled loop: an aggregate beyond the sums")
        sums = (
            _ptr(agg.ptr, np.int64), _ptr(agg.row, np.int64),
            *(_ptr(x, f32) for x in (agg.coef_t, agg.coef_c, agg.coef_w)),
            *(_ptr(a, f32, rows_only=True) for a in accs), agg.acc_t.strides[0] // 4,
        )  # fmt: skip
    return _StudentiseC(
        f32(st.unit), _ptr(st.k_t, f32), _ptr(st.k_c, f32), _ptr(st.var, f32), _ptr(st.label, np.int64),
        _ptr(st.group_max, f32, rows_only=True), st.group_max.strides[0] // 4, *sums,
    )  # fmt: skip


def cell_draws(
    r, cum_r, w, cum_w, index: tuple, col: int, group, prefix, own, any_own: bool, inv_nt, inv_nc, dm, dmu, out,
    treated=None, ctrl=None, studentise: Studentise | None = None,
) -> None:  # fmt: skip
    """``did._Stack.cell_draws`` of one block (its per-cell arrays already sliced to the block) in one pass: the draws
    into ``out`` and the parts into ``treated``, ``ctrl`` (where given), and with ``studentise`` the calibrated
    band's work on the block (``bands._Studentiser``) in the same pass."""
    f32, i64 = np.float32, np.int64
    n, bc = out.shape
    own_t, own_b, ctrl_t, ctrl_b = index
    if any(len(x) != n for x in (own_t, own_b, ctrl_t, ctrl_b, group, prefix, own, inv_nt, inv_nc, dm, dmu)):
        raise ValueError("compiled loop: per-cell arrays of different lengths")
    if r.shape[1] != bc or cum_r.shape[1] != bc or w.shape[1] != bc or cum_w.shape[1] != bc:
        raise ValueError("compiled loop: sums with another number of draws")
    if (treated is None) != (ctrl is None) or (treated is not None and (treated.shape, ctrl.shape) != ((n, bc),) * 2):
        raise ValueError("compiled loop: parts of another shape")
    st = None if studentise is None else ctypes.byref(_studentise_c(studentise, n, bc))
    _LIB.cell_draws(
        n, bc, _ptr(r, f32), _ptr(cum_r, f32), _ptr(w, f32), _ptr(cum_w, f32),
        _ptr(own_t, i64), _ptr(own_b, i64), _ptr(ctrl_t, i64), _ptr(ctrl_b, i64), col,
        _ptr(group, i64), _ptr(prefix, i64), _ptr(own.view(np.uint8), np.uint8), int(any_own),
        _ptr(inv_nt, f32), _ptr(inv_nc, f32), _ptr(dm, f32), _ptr(dmu, f32),
        _ptr(out, f32, rows_only=True), out.strides[0] // 4, _ptr(treated, f32), _ptr(ctrl, f32), st,
    )  # fmt: skip
