"""JAX's threefry PRNG, the few functions Levanter's data order calls, in numpy (memtui does not import jax).

Transcribed from jax 0.10.2 (``jax/_src/random/threefry2x32.py``, ``core.py``, ``prng.py``); the tests check every
function against jax itself, in both settings of ``jax_threefry_partitionable`` (Levanter's trainer turns it on,
``DEFAULT_JAX_CONFIG``; jax itself defaults to it since 0.5.0; "legacy" is the setting off):

- ``PRNGKey(seed)``: ``threefry_seed``, the key ``[seed >> 32, seed & 0xFFFFFFFF]``; with 64-bit mode off (Levanter's
  default) a Python seed is an int32, so memtui takes seeds 0 … 2**31 − 1 (``[0, seed]``).
- ``split``: legacy ``threefry_2x32(key, iota(2n)).reshape(n, 2)``; partitionable ``threefry2x32(key, 0, i)`` for
  i < n, the two words of each result one key.
- ``fold_in(key, d)``: ``threefry_2x32(key, [0, d])`` (the same in both settings).
- ``random_bits(key, 32, (n,))``: legacy ``threefry_2x32(key, iota(n))``; partitionable ``y0 ^ y1`` of
  ``threefry2x32(key, 0, i)``.
- ``randint(key, (), 0, 2**30)`` (int32): ``k1, k2 = split(key)``, bits of each; the multiplier ``2**32 mod 2**30`` is
  0, so the value is k2's bits mod 2**30.
- ``permutation(key, x)`` of an array (``_shuffle``): ``ceil(3 ln(n) / ln(2**32 − 1))`` rounds of ``key, sub =
  split(key)`` and a stable sort of x by ``random_bits(sub, 32, (n,))`` (``lax.sort_key_val``, ``is_stable=True``).
"""

from __future__ import annotations

import numpy as np

from memtui.core.errors import MemtuiError

MODES = ("partitionable", "legacy")
_U32 = np.uint32
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
MAX_SEED = 2**31 - 1


def _check(mode: str) -> None:
    if mode not in MODES:
        raise MemtuiError(f"jax PRNG mode must be partitionable or legacy, not '{mode}'.")


def threefry2x32(key, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32, 20 rounds (``_threefry2x32_lowering``): the two output words for counter words x0, x1."""
    k0, k1 = _U32(key[0]), _U32(key[1])
    ks = (k0, k1, k0 ^ k1 ^ _U32(0x1BD11BDA))
    a = np.asarray(x0, dtype=_U32) + ks[0]
    b = np.asarray(x1, dtype=_U32) + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            a = a + b
            b = (b << _U32(r)) | (b >> _U32(32 - r))
            b = a ^ b
        a = a + ks[(i + 1) % 3]
        b = b + ks[(i + 2) % 3] + _U32(i + 1)
    return a, b


def _threefry_flat(key, counts: np.ndarray) -> np.ndarray:
    """``threefry_2x32(key, counts)``: the counts halved into the two words (padded by a zero when odd)."""
    n = len(counts)
    padded = np.concatenate([counts, np.zeros(n % 2, dtype=_U32)]).astype(_U32)
    half = len(padded) // 2
    y0, y1 = threefry2x32(key, padded[:half], padded[half:])
    return np.concatenate([y0, y1])[:n]


def prng_key(seed: int) -> np.ndarray:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= int(seed) <= MAX_SEED:
        raise MemtuiError(f"a jax seed must be a whole number from 0 to {MAX_SEED}, not {seed!r}.")
    return np.array([0, int(seed)], dtype=_U32)


def split(key, num: int = 2, mode: str = "partitionable") -> np.ndarray:
    _check(mode)
    if mode == "legacy":
        return _threefry_flat(key, np.arange(2 * num, dtype=_U32)).reshape(num, 2)
    y0, y1 = threefry2x32(key, np.zeros(num, dtype=_U32), np.arange(num, dtype=_U32))
    return np.stack([y0, y1], axis=1)


def fold_in(key, data: int) -> np.ndarray:
    y0, y1 = threefry2x32(key, np.zeros(1, dtype=_U32), np.array([int(data) & 0xFFFFFFFF], dtype=_U32))
    return np.array([y0[0], y1[0]], dtype=_U32)


def random_bits32(key, n: int, mode: str = "partitionable") -> np.ndarray:
    _check(mode)
    if mode == "legacy":
        return _threefry_flat(key, np.arange(n, dtype=_U32))
    y0, y1 = threefry2x32(key, np.zeros(n, dtype=_U32), np.arange(n, dtype=_U32))
    return y0 ^ y1


def randint_2_30(key, mode: str = "partitionable") -> int:
    """``jax.random.randint(key, (), 0, 2**30)``, the seed Levanter hands numpy's PCG64."""
    _, k2 = split(key, 2, mode)
    return int(random_bits32(k2, 1, mode)[0]) % (1 << 30)


def shuffle_rounds(n: int) -> int:
    return int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))


def permutation(key, x: np.ndarray, mode: str = "partitionable") -> np.ndarray:
    """``jax.random.permutation(key, x)`` of a 1-d array."""
    x = np.asarray(x)
    for _ in range(shuffle_rounds(len(x))):
        key, sub = split(key, 2, mode)
        x = x[np.argsort(random_bits32(sub, len(x), mode), kind="stable")]
    return x
