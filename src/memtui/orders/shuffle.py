"""numpy's ``Generator(PCG64(seed)).shuffle(arange(n, uint32))`` read at a few positions, without shuffling.

OLMo's and OLMo-core's ``_build_global_indices`` shuffle ``arange(N, uint32)`` with numpy's Fisher–Yates: for
i = N−1 down to 1, ``j_i = random_interval(i)`` and swap a[i], a[j_i]. ``random_interval`` draws masked uint32 values
(``next_uint32 & mask``, mask the smallest 2^k − 1 ≥ i) until one is ≤ i; PCG64's ``next_uint32`` hands out the low
then the high half of each 64-bit output. numpy's loop pays a cache miss per step (a random j in a 1.2 GB array, one
after the other) and branch misses in the rejection loop: ~150 ns a step, about a minute for 3·10⁸ on a quiet core.

A panel needs the shuffled array at ~20,000 positions only. So:

1. **the swap partners** ``j_i`` are replayed from the same stream, read in bulk (``random_raw``): within one mask a
   draw is accepted or rejected whatever the current i except in a narrow band, and only the few draws in that band
   are decided one by one (:func:`swap_partners`; uint32, 4 bytes a step);
2. **each position is traced back** through the swaps, last step first (i = 1, 2, …): a position moves only at the
   step whose i or j it is, so one pass over the partners, which looks up only the steps that touch a traced
   position, tells where each one's value started — and ``arange`` started with value = position
   (:func:`trace_back`).

Tests (tests/orders/test_shuffle.py) check the partners against ``Generator.shuffle`` applied swap by swap and the
traced values against the shuffled array, for many sizes and seeds, including sizes that cross the mask boundaries.
"""

from __future__ import annotations

import math

import numpy as np

_REFILL = 1 << 22  # uint32 values drawn from PCG64 at a time
_STEP_SHIFT = 10  # replay ~i/1024 steps at a time: ~1 in 1,000 draws falls in the band decided one by one
_MIN_STEPS = 4096
_TABLE_BYTES = 1 << 20  # the traced positions' coarse table (a byte per 2^k positions): the size of a cache


class _Stream:
    """The uint32 values PCG64 hands ``next_uint32`` (low half, then high half, of each 64-bit output)."""

    def __init__(self, seed: int):
        self.bitgen = np.random.PCG64(seed)
        self.buf = np.zeros(0, dtype=np.uint32)
        self.pos = 0

    def peek(self, count: int) -> np.ndarray:
        if len(self.buf) - self.pos < count:
            fresh = self.bitgen.random_raw(max(count, _REFILL) // 2 + 1).view(np.uint32)  # little-endian: low first
            self.buf = np.concatenate([self.buf[self.pos :], fresh])
            self.pos = 0
        return self.buf[self.pos : self.pos + count]

    def consume(self, count: int) -> None:
        self.pos += count


def _intervals(stream: _Stream, top: int, bottom: int, out: np.ndarray) -> None:
    """``out[k] = random_interval(top − k)`` for i = top, top−1, …, bottom, in that order; one mask: ``bottom`` is at
    least the largest power of two ≤ ``top``."""
    mask = (1 << top.bit_length()) - 1
    done, need = 0, top - bottom + 1
    while need:
        p = (bottom + 1) / (mask + 1)  # the least chance a draw is accepted
        count = int(need / p + 4 * math.sqrt(need / p) + 64)
        u = stream.peek(count) & np.uint32(mask)
        at = np.flatnonzero(u <= top)  # above top: rejected whatever the current i
        v = u[at]
        # at most bottom: accepted whatever the current i; in between: accepted if at most the current i, in order
        rejected = []
        for r in np.flatnonzero(v > bottom).tolist():
            if r - len(rejected) >= need:
                break
            if v[r] > top - (r - len(rejected)):  # top minus the draws accepted before r
                rejected.append(r)
        kept = len(v) - len(rejected)
        take = min(need, kept)
        last = take - 1  # v's index of the last draw taken: one further for each rejected one before it
        for r in rejected:
            if r <= last:
                last += 1
        w = done
        for a, b in zip([0] + [r + 1 for r in rejected], rejected + [last + 1], strict=True):
            b = min(b, last + 1)
            if b > a:
                out[w : w + b - a] = v[a:b]
                w += b - a
        stream.consume(int(at[last]) + 1 if take == need else count)
        done, need, top = done + take, need - take, top - take


def swap_partners(n: int, seed: int) -> np.ndarray:
    """``j`` with ``j[i]`` the position numpy's ``Generator(PCG64(seed)).shuffle`` swaps with i, for an array of n
    (``j[0]`` is 0: there is no step 0). uint32; n must be below 2^32."""
    if n >= 1 << 32:
        raise ValueError("more positions than uint32 numbers")
    j = np.zeros(max(n, 1), dtype=np.uint32)
    stream = _Stream(seed)
    hi = n  # steps hi−1, hi−2, … are still to replay
    while hi > 1:
        top = hi - 1
        floor = 1 << (top.bit_length() - 1)  # one mask from top down to the power of two
        bottom = max(floor, hi - max(hi >> _STEP_SHIFT, _MIN_STEPS))
        _intervals(stream, top, bottom, j[bottom:hi][::-1])
        hi = bottom
    return j


def trace_back(partners: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The position each of ``positions`` (distinct) held before the shuffle whose swap partners these are: step i
    swaps i and ``partners[i]``, so undoing the steps from i = 1 up moves a position only at the steps that name it."""
    partners = np.asarray(partners)  # a plain view of a memory map: slicing one is cheaper
    n = len(partners)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= n):
        raise ValueError("positions outside the array")
    if len(np.unique(positions)) != len(positions):
        raise ValueError("positions must be distinct")
    at = {int(p): k for k, p in enumerate(positions.tolist())}  # where each traced value sits now -> its query
    traced = _Traced(n, at)
    starts = np.sort(positions)  # a position waits, untouched, until the sweep reaches it: steps below it never name it
    lo = 1
    while lo < n:
        hi = min(n, lo + max(lo >> _STEP_SHIFT, _MIN_STEPS))
        j = partners[lo:hi]
        here = starts[np.searchsorted(starts, lo) : np.searchsorted(starts, hi)]
        traced.add(j[here - lo])  # where those positions move at their own step, so that later steps there are found
        # steps naming a traced position, a partner among this block's own steps (where traced ones may have moved),
        # and the traced positions' own steps
        hit = np.unique(np.concatenate([traced.hits(j), np.flatnonzero(j >= lo), here - lo]))
        for k in hit.tolist():
            i, p = lo + k, int(j[k])
            if i == p:
                continue
            a, b = at.pop(i, None), at.pop(p, None)
            if a is not None:
                at[p] = a
            if b is not None:
                at[i] = b
                traced.add_one(i)
        traced.refresh(at)
        lo = hi
    out = np.empty(len(positions), dtype=np.int64)
    for p, k in at.items():
        out[k] = p
    return out


class _Traced:
    """Which steps of a block name a traced position: most name none, and a byte table the size of a cache (a byte
    per 2^shift positions) says so with one lookup; its few hits are checked against an exact bit set. Positions
    traced away stay in both until the next refresh: a hit too many is only looked up in vain."""

    def __init__(self, n: int, at: dict):
        self.shift = max(0, (n // _TABLE_BYTES).bit_length())
        self.coarse = np.zeros((n >> self.shift) + 1, dtype=bool)
        self.exact = np.zeros(n // 8 + 1, dtype=np.uint8)
        self.stale = 0
        self.refresh(at, force=True)

    def refresh(self, at: dict, force: bool = False) -> None:
        if not force and self.stale <= len(at) // 2 + 64:
            return
        now = np.fromiter(at, dtype=np.int64, count=len(at))
        self.coarse[:] = False
        self.coarse[now >> self.shift] = True
        self.exact[:] = 0
        np.bitwise_or.at(self.exact, now >> 3, (1 << (now & 7)).astype(np.uint8))
        self.stale = 0

    def add(self, values: np.ndarray) -> None:
        values = values.astype(np.int64)
        self.coarse[values >> self.shift] = True
        np.bitwise_or.at(self.exact, values >> 3, (1 << (values & 7)).astype(np.uint8))
        self.stale += len(values)

    def add_one(self, value: int) -> None:
        self.coarse[value >> self.shift] = True
        self.exact[value >> 3] |= 1 << (value & 7)
        self.stale += 1

    def hits(self, j: np.ndarray) -> np.ndarray:
        """The indices into ``j`` of the values that may be traced (a superset of those that are)."""
        maybe = np.flatnonzero(self.coarse.take(j >> self.shift, mode="clip"))
        v = j[maybe]
        return maybe[(self.exact.take(v >> 3, mode="clip") >> (v & 7).astype(np.uint8)) & 1 == 1]
