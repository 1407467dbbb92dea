"""Levanter's ``MixtureDataset`` (``levanter/data/mixture.py``), weight stages included, read at positions and
inverted (commit 9263f81e8b453241332c2c0b2d2001bfb2d2241c).

Blocks of ``block_size`` positions. A stage (``weight_stages``: its first sequence index, the weights) covers the
blocks from its start to the next stage's; in each of its blocks dataset d takes ``c_d = int32(w_d / Σw ·
block_size)`` places (the remainder to the first largest: ``_compute_expected_counts_per_block``), the ids ``(d << 16)
+ j`` (j < c_d) laid out dataset by dataset and permuted by ``jax.random.permutation(fold_in(key, block), ids)``
(``_get_block``, with the stage's unpermuted ids; ``_get_stage_for_block``). Place i of block b, in stage s, holds
dataset d's index ``(j + after_{s−1}[d]) + (b − start_s / block_size)·c_{s,d}`` (``_index_into_dataset_for_id``),
``after`` the per-dataset counts of the stages before (``_counts_after_stage``), read modulo the dataset's length
(``_remap_indices``, the "restart" strategy). Datasets keep a number only if some stage weights them above 0.

Levanter keeps ``_counts_after_stage`` in int32 and adds ``j`` to it in int32 (``get_batch``, the loader's path: the
block's ids are int32): a dataset served 2**31 times or more in earlier stages wraps, and so does its index here.
Where the wrap falls inside one block's ids (``after`` within ``c`` of 2**31), memtui refuses rather than invert it.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.levanter_prng import fold_in, permutation

MAX_BLOCK = 2**16
_CACHED = 16_384  # blocks kept (int32, at most 4 GiB / 2**16 … 128 MiB at 2048): a panel's blocks, read twice
_I32 = 2**31


def _wrap32(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, dtype=np.int64) + _I32) % (2 * _I32) - _I32


def block_counts(weights: list[float], block_size: int, total: float | None = None) -> np.ndarray:
    """``_compute_expected_counts_per_block`` of the weights normalised by ``total`` (their sum in the config's
    order: Levanter's ``_normalize_weights`` sums the stage's mapping as written)."""
    total = sum(weights) if total is None else total
    counts = np.zeros(len(weights), dtype=np.int32)
    for i, w in enumerate(weights):
        counts[i] = (w / total) * block_size if w > 0 else 0
    counts[np.argmax(counts)] += block_size - counts.sum()
    return counts


class Mixture:
    """Positions of the mixture <-> (dataset, index into the dataset before the wrap-around).

    ``stages``: (first sequence index, weights of the keyed datasets, the sum to normalise them by or None)."""

    def __init__(self, stages: list[tuple[int, list[float], float | None]], block_size: int, key, mode: str):
        if not 1 <= block_size < MAX_BLOCK:
            raise MemtuiError(f"a Levanter mixture block must hold 1 to {MAX_BLOCK - 1} positions, not {block_size}.")
        if not stages or stages[0][0] != 0:
            raise MemtuiError("a mixture's first weight stage starts at sequence 0.")
        starts = [int(s) for s, _, _ in stages]
        for a, b in zip(starts, starts[1:], strict=False):
            if b <= a or b % block_size:
                raise MemtuiError(
                    f"a mixture's weight stages start at increasing multiples of its block ({block_size}), "
                    f"not {b} after {a}."
                )
        width = len(stages[0][1])
        for _, w, _ in stages:
            if len(w) != width or any(not x >= 0 for x in w) or not sum(w) > 0:
                raise MemtuiError("each weight stage weighs every dataset >= 0, and some dataset above 0.")
        if not all(any(w[d] > 0 for _, w, _ in stages) for d in range(width)):
            raise MemtuiError("a mixture needs datasets of positive weight (those of weight 0 never appear).")
        self.block, self.key, self.mode = block_size, key, mode
        self.start_blocks = np.array(starts, dtype=np.int64) // block_size
        self.stage_counts = [block_counts(w, block_size, t).astype(np.int64) for _, w, t in stages]
        self.after = self._counts_after(starts)
        self.bases = [
            np.concatenate([(d << 16) + np.arange(c) for d, c in enumerate(cs.tolist())]).astype(np.int32)
            for cs in self.stage_counts
        ]
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()

    def _counts_after(self, starts: list[int]) -> list[np.ndarray]:
        """``_counts_after_stage`` shifted by one (stage s's offsets; zeros for the first), in Levanter's int32."""
        after = [np.zeros(len(self.stage_counts[0]), dtype=np.int64)]
        for s in range(len(starts) - 1):
            blocks = (starts[s + 1] - starts[s]) // self.block
            if blocks >= _I32:  # NumPy 2 refuses an int32 array times a Python int beyond int32
                raise MemtuiError(f"a weight stage of {blocks} blocks: Levanter's int32 counts cannot hold it.")
            after.append(_wrap32(after[-1] + self.stage_counts[s] * blocks))
        for s, (a, c) in enumerate(zip(after, self.stage_counts, strict=True)):
            if ((a < _I32) & (a + c > _I32)).any():
                raise MemtuiError(
                    f"weight stage {s + 1}: Levanter's int32 count of a dataset wraps inside one block; memtui does "
                    "not invert that order."
                )
        return after

    @property
    def counts(self) -> np.ndarray:
        """The first stage's places per block (one stage: every block's)."""
        return self.stage_counts[0]

    def stage_of(self, blocks) -> np.ndarray:
        """``_get_stage_for_block``."""
        return np.searchsorted(self.start_blocks, np.asarray(blocks, dtype=np.int64), side="right") - 1

    def block_ids(self, b: int) -> np.ndarray:
        if b not in self._blocks:
            base = self.bases[int(self.stage_of(b))]
            self._blocks[b] = permutation(fold_in(self.key, b), base, self.mode)
            if len(self._blocks) > _CACHED:
                self._blocks.popitem(last=False)
        return self._blocks[b]

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, index into it, before the wrap-around) at each position."""
        positions = np.asarray(positions, dtype=np.int64)
        d, k = np.empty_like(positions), np.empty_like(positions)
        blocks = positions // self.block
        for b in np.unique(blocks).tolist():
            at = blocks == b
            s = int(self.stage_of(b))
            ids = self.block_ids(b)[positions[at] - b * self.block].astype(np.int64)
            di = ids >> 16
            first = _wrap32((ids & 0xFFFF) + self.after[s][di])  # int32 + int32 in Levanter's get_batch
            d[at] = di
            k[at] = first + (b - int(self.start_blocks[s])) * self.stage_counts[s][di]
        return d, k

    def _position(self, s: int, d: int, local: int) -> int:
        """The position of stage s's ``local``-th place of dataset d (counted block after block)."""
        t, j = divmod(int(local), int(self.stage_counts[s][d]))
        b = int(self.start_blocks[s]) + t
        return b * self.block + int(np.flatnonzero(self.block_ids(b) == (d << 16) + j)[0])

    def exposures(self, d: int, q: int, n: int, total: int) -> tuple[int, int]:
        """(first position below ``total`` whose index ≡ q mod n, or -1; how many there are) for dataset d of n
        rows: stage by stage, whole blocks counted, the block that ``total`` cuts checked place by place."""
        first, count = -1, 0
        cut_block, rest = divmod(int(total), self.block)
        ends = [*self.start_blocks[1:].tolist(), None]
        for s, (b0, b1) in enumerate(zip(self.start_blocks.tolist(), ends, strict=True)):
            c = int(self.stage_counts[s][d])
            if c == 0 or b0 > cut_block or (b0 == cut_block and not rest):
                continue
            full = (cut_block if b1 is None else min(b1, cut_block)) - b0
            r = (q - int(self.after[s][d])) % n  # the first local place holding an index ≡ q (mod n)
            places = full * c
            if r < places:
                count += (places - 1 - r) // n + 1
                if first < 0:  # only the earliest block with a candidate can hold the first exposure
                    t = r // c
                    first = min(self._position(s, d, x) for x in range(r, min((t + 1) * c, places), n))
            if rest and (b1 is None or cut_block < b1):
                lo = (cut_block - b0) * c
                cut = [p for x in range(lo + (r - lo) % n, lo + c, n) if (p := self._position(s, d, x)) < total]
                count += len(cut)
                if cut and first < 0:
                    first = min(cut)
        return first, count
