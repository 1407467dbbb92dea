"""OLMo's instance filter: an instance with a short pattern repeated many times is masked out of the loss.

OLMo 2 (``data.instance_filter``) and OLMo-core (``instance_filter_config``) keep such instances in their batches but
never train on them (``instance_mask`` False sets every label to -100). The libraries decide it with
``find_periodic_sequences`` (``olmo/data/util.py``, ``olmo_core/data/utils.py``); this is the same decision for many
instances at once. For each period p in [min_period, min(max_period, L // 3)], the instance is padded with p - L % p
(1..p) cells of -1 and laid out in rows of p; a row equal to the row before it (the first row is compared with the
padded last one, so never) continues a repeat. A maximal run of equal rows s..e, extended by the equal cells at the
end of row s-1 (k) and the start of row e+1 (j), spans ``(e - s + 2) + (k + j) // p`` periods; the library reports
runs of more than 2 periods, and the filter drops the instance when one spans at least ``max_count``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memtui.core.errors import MemtuiError

_BLOCK = 256  # instances compared at once: (block, L) int64 copies stay a few MB


@dataclass(frozen=True)
class RepetitionFilter:
    max_period: int = 13
    min_period: int = 1
    max_count: int = 32

    def __post_init__(self):
        if not (1 <= self.min_period <= self.max_period) or self.max_count < 1:
            raise MemtuiError(
                f"instance filter: need 1 <= repetition_min_period <= repetition_max_period and repetition_max_count "
                f">= 1, not {self.min_period}, {self.max_period}, {self.max_count}."
            )

    @classmethod
    def from_config(cls, section: dict | None, where: str) -> RepetitionFilter | None:
        """OLMo's ``instance_filter`` / OLMo-core's ``instance_filter_config`` section (absent or null: no filter)."""
        if section is None:
            return None
        if not isinstance(section, dict):
            raise MemtuiError(f"{where}: the instance filter must be a mapping, not {type(section).__name__}.")
        known = {"repetition_max_period", "repetition_min_period", "repetition_max_count"}
        values = {k: v for k, v in section.items() if k in known}
        for key, value in values.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise MemtuiError(f"{where}: instance filter '{key}' must be a whole number, not {value!r}.")
        return cls(
            max_period=values.get("repetition_max_period", 13),
            min_period=values.get("repetition_min_period", 1),
            max_count=values.get("repetition_max_count", 32),
        )

    def keep(self, tokens: np.ndarray) -> np.ndarray:
        """True for each row of ``tokens`` (instances x L token ids >= 0) that the library trains on."""
        tokens = np.asarray(tokens)
        drop = np.zeros(len(tokens), dtype=bool)
        for lo in range(0, len(tokens), _BLOCK):
            drop[lo : lo + _BLOCK] = self._repeated(tokens[lo : lo + _BLOCK].astype(np.int64))
        return ~drop

    def _repeated(self, block: np.ndarray) -> np.ndarray:
        n, length = block.shape
        out = np.zeros(n, dtype=bool)
        for p in range(self.min_period, min(self.max_period, length // 3) + 1):
            pad = p - length % p
            rows = np.concatenate([block, np.full((n, pad), -1, dtype=np.int64)], axis=1).reshape(n, -1, p)
            eq = rows == np.roll(rows, 1, axis=1)
            full = eq.all(axis=2)
            # equal cells at the start (lead) and the end (trail) of each row
            lead = np.where(full, p, np.argmin(eq, axis=2))
            trail = np.where(full, p, np.argmin(eq[:, :, ::-1], axis=2))
            inner = full[:, 1:-1]  # the first and last rows are never equal to the one before (padding)
            starts = np.nonzero(inner & ~full[:, :-2])
            ends = np.nonzero(inner & ~full[:, 2:])
            if len(starts[0]) == 0:
                continue
            inst, s, e = starts[0], starts[1] + 1, ends[1] + 1  # run starts and ends pair up in row-major order
            times = (e - s + 2) + (trail[inst, s - 1] + lead[inst, e + 1]) // p
            hit = (times > 2) & (times >= self.max_count)
            out[inst[hit]] = True
        return out
