"""BLAS on one thread while memtui runs its own threads, so that a result never depends on how many threads BLAS uses.

numpy's bundled OpenBLAS splits a product over its threads in ways that, with some kernels and shapes, change the
order of a sum and so the last bits of a float32 result. The bootstrap therefore runs every matrix product on one
BLAS thread and parallelises over independent products itself (a group's sums never depend on another's), which is
deterministic by construction and was also faster: OpenBLAS's idle workers spin, and two layers of threads on the
same cores made the suite benchmark 1.8x slower (14.9 s against 8.1 s with OPENBLAS_NUM_THREADS=1 on 2 cores).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_BLAS_LOCK = threading.Lock()
_BLAS_STATE = {"depth": 0, "before": 0}


def _openblas():
    """numpy's bundled OpenBLAS (the wheel's ``libscipy_openblas64_``), or None where numpy uses another BLAS."""
    folder = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(folder, "libscipy_openblas64_*.so")):
        try:
            lib = ctypes.CDLL(path)  # the library numpy has loaded already: dlopen returns the same handle
            return lib if hasattr(lib, "scipy_openblas_set_num_threads64_") else None
        except OSError:
            return None
    return None


@contextlib.contextmanager
def one_blas_thread():
    """numpy's OpenBLAS on one thread inside the block (re-entrant, across threads), restored after the outermost.
    A no-op where numpy's BLAS is not its bundled OpenBLAS (another BLAS then threads as it likes)."""
    lib = _openblas()
    if lib is None:
        yield
        return
    with _BLAS_LOCK:
        if _BLAS_STATE["depth"] == 0:
            _BLAS_STATE["before"] = lib.scipy_openblas_get_num_threads64_()
            lib.scipy_openblas_set_num_threads64_(1)
        _BLAS_STATE["depth"] += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_STATE["depth"] -= 1
            if _BLAS_STATE["depth"] == 0:
                lib.scipy_openblas_set_num_threads64_(_BLAS_STATE["before"])


# elements (rows x columns) of a layout's outcomes from which its per-group work is spread over the cores (below it,
# starting threads costs more than it saves)
THREADED_ELEMENTS = 1 << 20


def over_cores(work: Callable[[list[int]], None], items: list[int], elements: int) -> None:
    """``work`` on ``items`` (groups whose results are independent) under one BLAS thread: one list on this thread
    for a small layout (``elements`` below ``THREADED_ELEMENTS``), else every core's share on a thread of its own
    (numpy releases the GIL; each group's arithmetic is the same on any thread, so the results are too)."""
    cores = min(os.cpu_count() or 1, len(items)) if elements >= THREADED_ELEMENTS else 1
    with one_blas_thread():
        if cores <= 1:
            work(items)
        else:
            with ThreadPoolExecutor(cores) as pool:
                list(pool.map(work, [items[i::cores] for i in range(cores)]))
