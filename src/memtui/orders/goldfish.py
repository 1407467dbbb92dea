"""The Goldfish loss's token mask (Hans et al. 2024, "Be like a Goldfish, Don't Memorize!"), as Apertus trained with
it: about 1/k of the labels are left out of the loss at data loading, so those tokens are never trained on.

Transcribed from github.com/swiss-ai/Megatron-LM at commit 81d44dbe25c22190989fa8a12284bdb8d1303b40 (2025-07-15),
``megatron/core/datasets/gpt_dataset.py``: ``_create_hash_table``, ``apply_goldfish`` and ``GPTDataset.__getitem__``
(``--goldfish-loss``, ``--goldfish-k`` 50 and ``--goldfish-h`` 50 by default, ``megatron/training/arguments.py``).
It is the "hash-table" strategy of the authors' code, github.com/ahans30/goldfish-loss at commit
35d29f96553462f6c30417f8065225aa6b89e172, ``lit_gpt/utils.py`` ``apply_goldfish`` (batched there, one row here):

- the table: 1,000,003 float32 draws of ``torch.rand`` from a generator seeded 2971215073, made on the labels'
  device, which in ``__getitem__`` is the CPU (the dataset's numpy tokens): CPU torch draws MT19937's 32-bit outputs
  and keeps their low 24 bits times 2^-24, the stream numpy's legacy ``RandomState(2971215073)`` gives, so the table
  is rebuilt here without torch (tests/orders/test_goldfish.py holds it equal to torch's);
- the labels are the sample's tokens 2..L (``text[1:]``: Megatron's default ``add_extra_token_to_sequence``), as
  int64, with the tokenizer's pad id replaced by 0 (Megatron's HuggingFace tokenizer has none: nothing is replaced);
- label j (0-based) with j >= h - 1 is dropped when ``table[prod(labels[j-h+1 .. j]) mod 1,000,003] < 1/k``: the
  product of the h labels ending at it, in int64 arithmetic that wraps, the remainder taken as Python's (never
  negative), the comparison in float32 (the table's dtype; 1/k rounded to float32). The first h - 1 labels are never
  dropped; a row shorter than h drops none.

A dropped label gets loss mask 0: the model is never trained to predict that token from that context. memtui's targets
are the same tokens 2..L predicted from their prefixes (memtui.extract.scoring), so target j is label j, and the mask
of a row's prefix is the prefix of its mask (a label's key looks back only): panels whose rows are cut shorter than
the training sample keep the mask of the tokens they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean

TABLE_SIZE = 1_000_003  # _HASH_TABLE_SIZE
TABLE_SEED = 2971215073  # the 47th Fibonacci number, a prime (the authors' comment)
APERTUS_K, APERTUS_H = 50, 50  # Megatron's --goldfish-k and --goldfish-h defaults; Apertus's report: k = 50, h = 50
SCHEME = (
    "hash-table: label j >= h-1 dropped where table[prod(labels[j-h+1..j]) mod 1000003] < 1/k (int64 product, "
    "wrapping; float32 compare); table = torch.rand(1000003) on the CPU, generator seeded 2971215073 "
    "(swiss-ai/Megatron-LM 81d44dbe gpt_dataset.apply_goldfish)"
)


@cache
def hash_table() -> np.ndarray:
    """``torch.rand(1_000_003, generator=torch.Generator().manual_seed(2971215073))`` on the CPU, as float32."""
    raw = np.random.RandomState(TABLE_SEED).randint(0, 2**32, size=TABLE_SIZE, dtype=np.uint64)
    table = ((raw & 0xFFFFFF).astype(np.float64) * 2.0**-24).astype(np.float32)
    table.setflags(write=False)
    return table


@dataclass(frozen=True)
class Goldfish:
    """A run's goldfish mask: drop rate 1/k, context width h, and the pad id replaced by 0 before hashing (None: the
    tokenizer has none)."""

    k: int = APERTUS_K
    h: int = APERTUS_H
    pad: int | None = None

    def __post_init__(self):
        for name in ("k", "h"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= 10**6:
                raise MemtuiError(f"goldfish {name} must be a whole number from 1 to 1,000,000, not {value!r}.")

    def dropped(self, labels) -> np.ndarray:
        """Which labels of one row (its tokens 2..L) the mask drops (bool, one per label)."""
        labels = np.asarray(labels)
        if labels.ndim != 1:
            raise MemtuiError("goldfish: one row of labels at a time.")
        labels = labels.astype(np.int64)  # torch's .long(); token ids beyond int64 are refused earlier
        if self.pad is not None:
            labels = np.where(labels == self.pad, 0, labels)
        out = np.zeros(len(labels), dtype=bool)
        width = len(labels) - self.h + 1  # the windows of h labels (Tensor.unfold(0, h, 1))
        if width <= 0:
            return out
        key = np.ones(width, dtype=np.int64)
        with np.errstate(over="ignore"):
            for offset in range(self.h):  # int64 products wrap, as torch's prod over int64 does
                key *= labels[offset : offset + width]
        key %= TABLE_SIZE  # floor remainder: 0 .. TABLE_SIZE-1, as torch's % (remainder)
        out[self.h - 1 :] = hash_table()[key] < np.float32(1.0 / self.k)
        return out

    def trained(self, labels) -> np.ndarray:
        """The labels the loss trains on: not dropped, and not padding (whose loss Megatron masks too)."""
        labels = np.asarray(labels)
        keep = ~self.dropped(labels)
        if self.pad is not None:
            keep &= labels != self.pad
        return keep

    def trained_targets(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The trained flags of every target of right-padded rows, rows one after another (a row of L tokens has
        L - 1 targets, its tokens 2..L: memtui.extract.scoring's order)."""
        parts = [self.trained(np.asarray(tokens[r, 1 : int(n)])) for r, n in enumerate(lengths) if int(n) >= 2]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def describe(self) -> str:
        pad = "none" if self.pad is None else str(self.pad)
        return f"k={self.k}, h={self.h}, pad={pad}; {SCHEME}"


def parse(text: str) -> Goldfish:
    """``--goldfish K,H`` (Apertus: 50,50)."""
    parts = str(text).replace(" ", "").split(",")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and 1 <= int(p) <= 10**6 for p in parts):
        raise MemtuiError(
            f"--goldfish takes K,H: the drop rate 1/K and the hashed context width H, whole numbers from 1 to "
            f"1,000,000 (Apertus: 50,50), not {clean(repr(text), 60)}."
        )
    return Goldfish(int(parts[0]), int(parts[1]))


def to_attrs(goldfish: Goldfish) -> dict[str, str]:
    """A panel's record of its run's mask: what extraction rebuilds it from, and what ``memtui info`` shows."""
    return {
        "goldfish": goldfish.describe(),
        "goldfish_k": str(goldfish.k),
        "goldfish_h": str(goldfish.h),
        "goldfish_pad": "none" if goldfish.pad is None else str(goldfish.pad),
    }


def from_attrs(attrs, where) -> Goldfish:
    """The mask a panel records (:func:`to_attrs`); a one-line refusal where it records none or a damaged one."""
    try:
        k, h, pad = (str(attrs[key]) for key in ("goldfish_k", "goldfish_h", "goldfish_pad"))
        if not (k.isascii() and k.isdigit() and h.isascii() and h.isdigit()):
            raise ValueError
        return Goldfish(int(k), int(h), None if pad == "none" else int(pad))
    except (KeyError, ValueError, TypeError, MemtuiError):
        raise MemtuiError(
            f"{clean(str(where), 200)}: the panel has trained-target metrics but no readable goldfish mask "
            "(attributes goldfish_k, goldfish_h, goldfish_pad); rebuild it with build --goldfish K,H."
        ) from None
