"""The OLMo libraries' global indices, read at the panel's positions without building them, their swap partners cached.

``_build_global_indices`` (OLMo and OLMo-core alike) shuffles ``arange(N, uint32)`` with numpy's PCG64 Fisher–Yates.
A panel reads the order at ~20,000 positions; :mod:`memtui.orders.shuffle` gives the shuffled array there exactly,
from the shuffle's swap partners (4 bytes a step, replayed from the PCG64 stream), several times faster than the
shuffle itself and never as int64.

The partners depend on N and the seed only, so they are kept on disk (``cache``: a folder) and a later build of the
same run (another stage, another panel, more steps) reads them back instead of replaying the stream: a ``.npy`` of
uint32 written beside its name and renamed, and a small JSON beside it with N, the seed and a CRC-32 of the data. A
file whose size, header or checksum does not match is not used: it is rebuilt and replaced. Runs below
``CACHE_FROM`` instances are replayed in well under a second and not cached.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import WriteError, atomic_write
from memtui.orders.shuffle import swap_partners, trace_back

CACHE_FROM = 1 << 24  # instances
_FORMAT = "memtui pcg64 swap partners 1"
_CHUNK = 1 << 24  # values per piece of the checksum


def default_cache() -> Path | None:
    """The user's cache folder for shuffles: ``$MEMTUI_CACHE``, else ``$XDG_CACHE_HOME/memtui``, else ``~/.cache``
    (``MEMTUI_CACHE=off``: none)."""
    root = os.environ.get("MEMTUI_CACHE")
    if root == "off":
        return None
    if root:
        return Path(root) / "shuffles"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memtui" / "shuffles"


def _crc(values: np.ndarray) -> int:
    crc = 0
    for start in range(0, len(values), _CHUNK):
        crc = zlib.crc32(memoryview(np.ascontiguousarray(values[start : start + _CHUNK])).cast("B"), crc)
    return crc


class PartnerCache:
    """Swap partners on disk, one file per (N, seed), checked before they are used."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def paths(self, n: int, seed: int) -> tuple[Path, Path]:
        stem = f"pcg64-n{n}-seed{seed}"
        return self.folder / f"{stem}.npy", self.folder / f"{stem}.json"

    def load(self, n: int, seed: int) -> np.ndarray | None:
        """The cached partners (memory-mapped), or None where there are none or they fail a check."""
        data, meta = self.paths(n, seed)
        try:
            info = json.loads(meta.read_text())
            if info.get("format") != _FORMAT or info.get("n") != n or info.get("seed") != seed:
                return None
            partners = np.load(data, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, RecursionError):  # missing, unreadable, a damaged header or JSON
            return None
        if partners.dtype != np.uint32 or partners.shape != (max(n, 1),):
            return None
        if data.stat().st_size != partners.offset + partners.nbytes or _crc(partners) != info.get("crc32"):
            return None  # a byte too many or a changed one
        return partners

    def store(self, n: int, seed: int, partners: np.ndarray) -> bool:
        """Keep the partners; False (and nothing half-written) where the folder cannot take them."""
        data, meta = self.paths(n, seed)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(data, lambda tmp: _save(tmp, partners))
            info = {"format": _FORMAT, "n": n, "seed": seed, "crc32": _crc(partners)}
            atomic_write(meta, lambda tmp: tmp.write_text(json.dumps(info)))
        except (OSError, WriteError):
            return False
        return True


def _save(path: Path, values: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.lib.format.write_array(f, values, allow_pickle=False)


class ShuffledOrder:
    """``_build_global_indices``' order as an array one reads at positions: ``order[positions]`` (uint32).

    ``n`` units are shuffled with ``PCG64(seed)``; with ``chunk`` > 1 a unit is a run of ``chunk`` consecutive
    instances (OLMo-core's ``max_target_sequence_length``), and position p holds ``unit · chunk + p % chunk``.
    ``length`` positions are readable (OLMo-core keeps whole batches only). ``cache``: a folder for the swap
    partners (None: not kept). ``np.asarray(order)`` builds the whole array with numpy's own shuffle.
    """

    dtype = np.dtype(np.uint32)
    ndim = 1

    def __init__(self, n: int, seed: int, chunk: int = 1, length: int | None = None, cache=None):
        if n * chunk >= np.iinfo(np.uint32).max:
            raise MemtuiError(f"{n * chunk:,} instances do not fit the libraries' uint32 global indices.")
        self.n, self.seed, self.chunk = n, seed, chunk
        self.length = n * chunk if length is None else length
        if not 0 <= self.length <= n * chunk:
            raise ValueError(f"{self.length} positions of an order of {n * chunk}")
        self.cache = PartnerCache(cache) if cache is not None else None
        self._partners: np.ndarray | None = None
        self.cached = False  # whether the partners came from the cache

    def __len__(self) -> int:
        return self.length

    @property
    def shape(self) -> tuple[int]:
        return (self.length,)

    def partners(self) -> np.ndarray:
        if self._partners is None:
            found = self.cache.load(self.n, self.seed) if self.cache and self.n >= CACHE_FROM else None
            self.cached = found is not None
            if found is None:
                found = swap_partners(self.n, self.seed)
                if self.cache and self.n >= CACHE_FROM:
                    self.cache.store(self.n, self.seed, found)
            self._partners = found
        return self._partners

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.length))
        scalar = np.ndim(key) == 0
        pos = np.atleast_1d(np.asarray(key))
        if pos.dtype.kind not in "iu":
            raise IndexError("an order is read at integer positions")
        pos = pos.astype(np.int64)
        pos = np.where(pos < 0, pos + self.length, pos)
        if pos.size and (pos.min() < 0 or pos.max() >= self.length):
            raise IndexError(f"positions must lie in 0 .. {self.length - 1}")
        if not pos.size:
            return np.zeros(0, dtype=np.uint32)
        units, inverse = np.unique(pos // self.chunk, return_inverse=True)
        start = trace_back(self.partners(), units)[inverse.reshape(-1)]  # arange: a unit's value is where it started
        out = (start * self.chunk + pos % self.chunk).astype(np.uint32)
        return out[0] if scalar else out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        full = np.arange(self.n, dtype=np.uint32)
        np.random.Generator(np.random.PCG64(seed=self.seed)).shuffle(full)
        if self.chunk > 1:  # the library's repeat-then-add, kept in uint32
            full = (np.repeat(full * np.uint32(self.chunk), self.chunk).reshape(-1, self.chunk)
                    + np.arange(self.chunk, dtype=np.uint32)).ravel()  # fmt: skip
        full = full[: self.length]
        return full if dtype is None else full.astype(dtype)
