"""The permutation band's sums through torch, on the engine setting's device (``--engine-device torch-cpu|cuda``).

Of the permutation band's work, one part grows with the panel: per permutation, each cohort's column sums s, q, c of
the rows the permutation gives it and, with the controls permuted, the permuted controls' Gram matrix and mean
(``permutations._compiled_sums``: one pass over every row per permutation). This module makes the same arrays with
torch from the same ``Plan`` and the same slot lists (``permutations.orders``, drawn on the CPU: the permutations do
not depend on the device): the rows gathered by the slot lists, their squares and cross products (y times the
previous column before the cohort's ``split``, times its base column from it on) summed per cohort, and the controls'
rows of ``Plan.rebased`` gathered for one batched float32 product (TF32 off) and a mean in double. The sums come back
to the host as the compiled path's arrays and everything after (``perm_cells``, the studentised maxima) runs as
before. The sums are float32 as the compiled loop's, added in another order (atomics on a GPU): equal within float32
rounding, not bit for bit (tests/engine/test_torch_permutation.py states and measures the tolerance).

torch is imported inside the class, never when the engine is imported (the import-linter contract lists this module).
"""

from __future__ import annotations

import threading

import numpy as np

# the bytes of a chunk's gathered rows and their products the device holds at once: a quarter of a CUDA device's free
# memory (the rest: the uploaded rows and other callers), a fixed budget on the CPU
_CPU_BUDGET = 1 << 30
_TEMPORARIES = 5  # the gathered rows, their squares, the lagged or base column, the cross products, one spare


# How a chunk's per-cohort sums are formed: "index_add" adds every gathered row into its cohort's bin (atomics on a
# GPU, contended: 16 permutations of 1 M rows took 0.23 s on an H100); "matmul" multiplies the gathered rows by the
# fixed cohort indicator (cohorts x slots, 0/1: the products exact, TF32 off), a dense GEMM without atomics. Both are
# float32 sums in another order than the compiled loop's: equal within float32 rounding.
METHODS = ("index_add", "matmul")


class TorchPermutationSums:
    """One plan's rows on the device (uploaded once) and each chunk of permutations' sums from them."""

    method = "index_add"

    def __init__(self, device: str, p) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.p = p
        dev = self.device
        self.y = torch.from_numpy(np.ascontiguousarray(p.y, dtype=np.float32)).to(dev)
        self.rebased = None if p.rebased is None else torch.from_numpy(np.ascontiguousarray(p.rebased)).to(dev)
        groups, width = len(p.base), p.y.shape[1]
        label = np.repeat(np.arange(groups), np.diff(p.starts))  # each slot's cohort
        self.label = torch.from_numpy(label).to(dev)
        self.base = torch.from_numpy(np.asarray(p.base, np.int64)[label]).to(dev)[:, None]  # each slot's base column
        before = np.arange(width)[None, :] < np.asarray(p.split)[:, None]  # (cohorts, width): the lag's columns
        self.before = torch.from_numpy(before[label]).to(dev)  # per slot (the plan's rows: its size, once)
        self.indicator = None  # "matmul"'s (cohorts x slots) 0/1 matrix, made on first use
        self.lock = threading.Lock()  # one chunk on the device at a time; the slot lists are drawn in parallel

    def _per_chunk(self) -> int:
        """Permutations whose gathered rows and products fit the device's budget at once (at least one)."""
        n, width = self.p.y.shape
        if self.device.type == "cuda":
            free, _ = self.torch.cuda.mem_get_info(self.device)
            budget = free // 4
        else:
            budget = _CPU_BUDGET
        return max(1, int(budget // max(1, _TEMPORARIES * 4 * n * width)))

    def sums(self, order: np.ndarray):
        """``permutations._compiled_sums``'s arrays for the permutations ``order`` (count x rows): (s, q, c) (count x
        cohorts x width, float32) and, with the controls permuted, their Grams (count x w x w, float32) and means
        (count x w, double), else None, None."""
        torch, p = self.torch, self.p
        count = len(order)
        groups, width = len(p.base), p.y.shape[1]
        s, q, c = (np.zeros((count, groups, width), np.float32) for _ in range(3))
        grams = means = None
        if p.ctrl_group >= 0:
            gw = p.rebased.shape[1]
            grams, means = np.empty((count, gw, gw), np.float32), np.empty((count, gw))
        with self.lock:
            step = self._per_chunk()
            order_d = torch.from_numpy(np.ascontiguousarray(order, np.int64)).to(self.device)
            tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False  # TF32's 10-bit mantissas are not float32 rounding
            try:
                for start in range(0, count, step):
                    part = order_d[start : start + step]
                    done = slice(start, start + len(part))
                    s[done], q[done], c[done] = (a.cpu().numpy() for a in self._cohort_sums(part, groups))
                    if grams is not None:
                        grams[done], means[done] = (a.cpu().numpy() for a in self._grams(part))
            finally:
                torch.backends.cuda.matmul.allow_tf32 = tf32
        for a in (s, q, c):
            a[:, :, 0] = 0
        return (s, q, c), grams, means

    def _cohort_sums(self, part, groups: int):
        """(s, q, c) of a sub-chunk of permutations (its slot lists on the device), each (j, cohorts, width)."""
        torch = self.torch
        j, n = part.shape
        width = self.y.shape[1]
        rows = self.y[part]  # (j, slots, width): the row each slot holds
        lag = torch.zeros_like(rows)
        lag[:, :, 1:] = rows[:, :, :-1]
        based = torch.gather(rows, 2, self.base.expand(j, n, 1))  # (j, slots, 1): each slot's base column
        cross = rows * torch.where(self.before[None, :, :], lag, based)
        del lag, based
        if self.method == "matmul":
            return self._matmul_sums(rows, cross, groups)
        bins = (torch.arange(j, device=self.device)[:, None] * groups + self.label[None, :]).reshape(-1)
        out = []
        for a in (rows, rows * rows, cross):
            total = torch.zeros((j * groups, width), dtype=torch.float32, device=self.device)
            out.append(total.index_add_(0, bins, a.reshape(-1, width)).reshape(j, groups, width))
        return out

    def _matmul_sums(self, rows, cross, groups: int):
        """(s, q, c) as products of the cohort indicator with the gathered rows, their squares and ``cross``."""
        torch = self.torch
        if self.indicator is None:
            slots = len(self.label)
            self.indicator = torch.zeros((groups, slots), dtype=torch.float32, device=self.device)
            self.indicator[self.label, torch.arange(slots, device=self.device)] = 1.0
        return [torch.matmul(self.indicator, a) for a in (rows, rows * rows, cross)]

    def _grams(self, part):
        """The permuted controls' Gram matrices (float32, one batched product) and means (double) of a sub-chunk."""
        p = self.p
        first, last = int(p.starts[p.ctrl_group]), int(p.starts[p.ctrl_group + 1])
        rows = self.rebased[part[:, first:last]]  # (j, controls, w)
        means = rows.to(self.torch.float64).mean(dim=1)
        return self.torch.bmm(rows.transpose(1, 2), rows), means
