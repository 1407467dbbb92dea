"""Levanter's pseudo-random permutations (``levanter/data/_prp.py``) and era shuffling (``permutation.py``), read at
indices and inverted, in numpy; see memtui.orders.levanter for the source they transcribe.

A permutation's seed is ``jax.random.randint(key, (), 0, 2**30)`` handed to numpy's ``PCG64`` (memtui.orders.
levanter_prng gives the jax part). ``linear``: ``a`` drawn from ``integers(1, n)`` until ``gcd(a, n) == 1``, then ``b``
from ``integers(0, n)``, and ``p(x) = (a * x + b) % n`` computed as ``(a * x.astype(uint64) + b) % n`` with ``a`` an
``int64``: under NumPy 2 that is float64 arithmetic (``int64 × uint64`` promotes to float64), exact only while
``a·(n − 1) + b < 2**53``; beyond, rows can repeat and others never come (``numpy=2``; ``numpy=1`` is the exact
uint64 arithmetic of NumPy 1's value-based casting). ``feistel``: five rounds over the next power of two,
``F(R) = (R · 2654435761 + key) mod 2**right_bits``, cycle-walking into [0, n).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.levanter_prng import fold_in, randint_2_30

KINDS = ("linear", "feistel")
_EXACT = 2**53
_MAX_WALK = 1000  # _MAX_FEISTEL_ROUNDS


def _rng(key, mode: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(randint_2_30(key, mode)))


class LinearPermutation:
    """``LcgPermutation``: p(x) = (a·x + b) mod n, evaluated as Levanter's numpy evaluates it."""

    def __init__(self, length: int, key, mode: str, numpy_major: int = 2):
        self.length, self.numpy_major = int(length), numpy_major
        if self.length == 1:
            self.a, self.b = 1, 0
            return
        rng = _rng(key, mode)
        while True:
            a = rng.integers(1, self.length)
            if np.gcd(a, self.length) == 1:
                break
        self.a, self.b = int(a), int(rng.integers(0, self.length))

    @property
    def exact(self) -> bool:
        """Whether every value is (a·x + b) mod n exactly (so that p is a permutation)."""
        return self.numpy_major == 1 or self.a * (self.length - 1) + self.b < _EXACT

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        if self.length == 1:
            return np.zeros_like(x)
        if self.numpy_major == 1:
            wrapped = np.uint64(self.a) * x.astype(np.uint64) + np.uint64(self.b)
            return (wrapped % np.uint64(self.length)).astype(np.int64)
        out = (np.int64(self.a) * x.astype(np.uint64) + np.int64(self.b)) % self.length  # float64, as in Levanter
        return out.astype(np.int64)

    def preimages(self, y: int) -> np.ndarray:
        """Every x with p(x) == y (one when exact; none, one or several when float64 rounding merged values)."""
        n, y = self.length, int(y)
        if n == 1:
            return np.zeros(1, dtype=np.int64)
        inv = pow(self.a, -1, n)
        if self.exact:
            return np.array([(inv * (y - self.b)) % n], dtype=np.int64)
        # the float64 value is within eps of a·x + b, whose residue r gives x = a⁻¹(r − b) mod n
        eps = (self.a * (n - 1) + self.b) // 2**52 + 2
        near = [(y + d) % n for d in range(-eps, eps + 1)]
        cand = np.unique(np.array([(inv * (r - self.b)) % n for r in near], dtype=np.int64))
        return cand[self(cand) == y]


class FeistelPermutation:
    """``FeistelPermutation``: a Feistel network over [0, 2**bits) cycle-walked into [0, n)."""

    def __init__(self, length: int, key, mode: str, rounds: int = 5):
        self.length = int(length)
        m = 1 << (self.length - 1).bit_length()
        bits = m.bit_length() - 1
        self.right_bits = bits - bits // 2
        self.mask = np.uint64((1 << self.right_bits) - 1)
        self.keys = _rng(key, mode).integers(0, 1 << self.right_bits, size=rounds, dtype=np.uint64)
        self.exact = True

    def _f(self, right: np.ndarray, key: np.uint64) -> np.ndarray:
        return ((right & self.mask) * np.uint64(2654435761) + key) & self.mask

    def _network(self, x: np.ndarray, inverse: bool = False) -> np.ndarray:
        rb = np.uint64(self.right_bits)
        left, right = x >> rb, x & self.mask
        if not inverse:
            for key in self.keys:
                left, right = right, left ^ self._f(right, key)
        else:  # a round maps (L, R) to (R, L ^ F(R)): undone as (L', R') -> (R' ^ F(L'), L')
            for key in self.keys[::-1]:
                left, right = right ^ self._f(left, key), left
        return (left << rb) | right

    def _walk(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        if self.length == 1:
            return np.zeros_like(x, dtype=np.int64)
        out = self._network(np.asarray(x, dtype=np.int64).astype(np.uint64), inverse)
        for _ in range(_MAX_WALK + 1):
            over = out >= self.length
            if not over.any():
                return out.astype(np.int64)
            out[over] = self._network(out[over], inverse)
        raise MemtuiError("Feistel cycle-walking did not end (Levanter raises the same error here).")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._walk(x, inverse=False)

    def preimages(self, y: int) -> np.ndarray:
        return self._walk(np.array([int(y)]), inverse=True)


def make_permutation(kind: str, length: int, key, mode: str, numpy_major: int = 2):
    """``Permutation.make(kind, length, key)``."""
    if kind == "feistel":
        return FeistelPermutation(length, key, mode)
    if kind == "linear":
        return LinearPermutation(length, key, mode, numpy_major)
    raise MemtuiError(f"Levanter's permutation is linear or feistel, not '{kind}'.")


class Shuffle:
    """One dataset's shuffle: index k of its (first pass of) n rows -> row. ``era``: None for a whole-dataset
    ``PermutationDataset``; L for ``EraShufflingDataset`` (era e permutes rows [eL, eL + L) with the key
    ``fold_in(key, e)``, the last era shorter); 0 for no shuffle.

    ``short_era_fails``: inside a mixture, Levanter computes a short last era's length as an ``np.int64`` (the
    mixture's indices are numpy integers), and ``FeistelPermutation`` calls ``bit_length`` on it, which an
    ``np.int64`` lacks: the run fails on reaching that era, so no run trained its rows, and reading them is refused."""

    def __init__(self, n: int, key, kind: str, era: int | None, mode: str, numpy_major: int = 2,
                 short_era_fails: bool = False):  # fmt: skip
        if n < 1:
            raise MemtuiError("a Levanter dataset with no row cannot be shuffled.")
        self.n, self.key, self.kind, self.era, self.mode, self.numpy_major = n, key, kind, era, mode, numpy_major
        self._perms: OrderedDict[int, object] = OrderedDict()
        self.short_era_fails = short_era_fails and kind == "feistel" and bool(era) and era is not True
        self.whole = None if era is not None else make_permutation(kind, n, key, mode, numpy_major)

    def _era_perm(self, e: int):
        if e not in self._perms:
            length = min(self.era, self.n - e * self.era)
            if self.short_era_fails and length < self.era:
                raise MemtuiError(
                    f"rows {e * self.era} .. {self.n - 1} are a short last era of a Feistel era shuffle in a mixture: "
                    "Levanter (9263f81) fails on reaching it (np.int64 has no bit_length), so no run trained them; "
                    "end the panel before it."
                )
            self._perms[e] = make_permutation(self.kind, length, fold_in(self.key, e), self.mode, self.numpy_major)
            if len(self._perms) > 64:
                self._perms.popitem(last=False)
        return self._perms[e]

    @property
    def exact(self) -> bool:
        """Whether the shuffle is a permutation of the rows (see LinearPermutation.exact)."""
        if self.era == 0:
            return True
        if self.whole is not None:
            return self.whole.exact
        length = min(self.era, self.n)  # the longest era's arithmetic bounds the others'
        return self.kind == "feistel" or self.numpy_major == 1 or length * length < _EXACT

    def rows(self, k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.int64)
        if k.size and (k.min() < 0 or k.max() >= self.n):
            raise MemtuiError(f"dataset indices must lie in 0 .. {self.n - 1}.")
        if self.era == 0:
            return k.copy()
        if self.whole is not None:
            return self.whole(k)
        out = np.empty_like(k)
        eras = k // self.era
        for e in np.unique(eras).tolist():
            at = eras == e
            out[at] = self._era_perm(e)(k[at] - e * self.era) + e * self.era
        return out

    def preimages(self, row: int) -> np.ndarray:
        """The first-pass indices k whose row is ``row`` (one when the shuffle is a permutation)."""
        if self.era == 0:
            return np.array([row], dtype=np.int64)
        if self.whole is not None:
            return np.sort(self.whole.preimages(row))
        e = row // self.era
        return np.sort(self._era_perm(e).preimages(row - e * self.era)) + e * self.era
