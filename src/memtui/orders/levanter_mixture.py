"""Levanter's ``MixtureDataset`` (``levanter/data/mixture.py``) with one weight stage, read at positions and inverted.

Blocks of ``block_size`` positions: dataset d takes ``c_d = int32(w_d / Σw · block_size)`` places of each block (the
remainder goes to the first largest), the ids ``(d << 16) + j`` (j < c_d) laid out dataset by dataset and permuted by
``jax.random.permutation(fold_in(key, block), ids)``; place i of block b holds dataset d's index ``b·c_d + j``, read
modulo the dataset's length (``_remap_indices``, the "restart" strategy). Datasets of weight 0 are left out of the
numbering (``self.datasets`` keeps only positive weights, in the config's order).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.levanter_prng import fold_in, permutation

MAX_BLOCK = 2**16
_CACHED = 16_384  # blocks kept (int32, at most 4 GiB / 2**16 … 128 MiB at 2048): a panel's blocks, read twice


def block_counts(weights: list[float], block_size: int) -> np.ndarray:
    """``_compute_expected_counts_per_block`` of the normalised weights (all positive)."""
    total = sum(weights)
    counts = np.zeros(len(weights), dtype=np.int32)
    for i, w in enumerate(weights):
        counts[i] = (w / total) * block_size
    counts[np.argmax(counts)] += block_size - counts.sum()
    return counts


class Mixture:
    """Positions of the mixture <-> (dataset, index into the dataset before the wrap-around)."""

    def __init__(self, weights: list[float], block_size: int, key, mode: str):
        if not 1 <= block_size < MAX_BLOCK:
            raise MemtuiError(f"a Levanter mixture block must hold 1 to {MAX_BLOCK - 1} positions, not {block_size}.")
        if not weights or any(w <= 0 for w in weights):
            raise MemtuiError("a mixture needs datasets of positive weight (those of weight 0 never appear).")
        self.block, self.key, self.mode = block_size, key, mode
        self.counts = block_counts(weights, block_size).astype(np.int64)
        self.base = np.concatenate([(d << 16) + np.arange(c) for d, c in enumerate(self.counts.tolist())])
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()

    def block_ids(self, b: int) -> np.ndarray:
        if b not in self._blocks:
            self._blocks[b] = permutation(fold_in(self.key, b), self.base.astype(np.int32), self.mode)
            if len(self._blocks) > _CACHED:
                self._blocks.popitem(last=False)
        return self._blocks[b]

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, index into it) at each position."""
        positions = np.asarray(positions, dtype=np.int64)
        d, k = np.empty_like(positions), np.empty_like(positions)
        blocks = positions // self.block
        for b in np.unique(blocks).tolist():
            at = blocks == b
            ids = self.block_ids(b)[positions[at] - b * self.block].astype(np.int64)
            d[at] = ids >> 16
            k[at] = (ids & 0xFFFF) + b * self.counts[ids >> 16]
        return d, k

    def position(self, d: int, k: int) -> int:
        """The position holding dataset d's index k."""
        c = int(self.counts[d])
        if c == 0:
            raise MemtuiError("that dataset has no place in a block (its weight rounds to 0 at this block size).")
        b, j = divmod(int(k), c)
        return b * self.block + int(np.flatnonzero(self.block_ids(b) == (d << 16) + j)[0])
