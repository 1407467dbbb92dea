"""Byte sources for data orders: a local file (memory-mapped) or a remote one read by byte ranges.

A training corpus (the Pile's token file is ~600 GB) and its index maps (~2.8 GB per seed) are far larger than what a
panel needs: a few thousand map rows and a few thousand documents. Local files are memory-mapped, so only the pages
touched are read. Remote files are read in fixed blocks by HTTP ``Range`` requests (``http(s)://``, with the standard
library) or through fsspec for any other protocol it knows (``hf://``, ``s3://``, ``memory://``...). Blocks can be
kept in a cache folder, one sparse file per remote file plus a list of the blocks it holds, so an interrupted read
resumes where it stopped and a second panel over the same order downloads nothing again.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import mmap
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file

BLOCK = 1 << 20  # bytes per range request unit: large enough to amortise a request, small enough to waste little
RETRIES = 5


def is_remote(location: str | os.PathLike) -> bool:
    return "://" in str(location) and not str(location).startswith("file://")


class LocalFile:
    """A local file, memory-mapped once (never read whole)."""

    def __init__(self, path: str | os.PathLike):
        self.name = str(path)
        path = input_file(str(path).removeprefix("file://"), "file")  # not a folder, a FIFO or a device
        self.size = path.stat().st_size
        self._map = np.memmap(path, dtype=np.uint8, mode="r") if self.size else np.zeros(0, np.uint8)
        if self.size and hasattr(mmap, "MADV_RANDOM"):
            # a panel touches a few thousand scattered rows: without this every page fault reads ahead ~100 KB
            # (on a cold 150 M-sequence order that is most of the build's time and its memory)
            self._map._mmap.madvise(mmap.MADV_RANDOM)
        self._fd = os.open(path, os.O_RDONLY)

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def read(self, offset: int, n: int) -> bytes:
        """Bytes by ``pread``: exactly the range asked for, nothing mapped, nothing read ahead."""
        if offset < 0 or offset + n > self.size:
            raise MemtuiError(f"{self.name}: reading bytes {offset}..{offset + n} past its end ({self.size} bytes).")
        data = os.pread(self._fd, n, offset)
        while len(data) < n:  # pread may return less than asked for large ranges
            more = os.pread(self._fd, n - len(data), offset + len(data))
            if not more:
                raise MemtuiError(f"{self.name}: shorter than it was when opened.")
            data += more
        return data

    def array(self, offset: int, dtype, count: int) -> np.ndarray:
        """A read-only view of ``count`` items of ``dtype`` at byte ``offset`` (no copy)."""
        dtype = np.dtype(dtype)
        if offset + count * dtype.itemsize > self.size:
            raise MemtuiError(f"{self.name}: is truncated ({self.size} bytes; its header promises more).")
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset)


class RemoteFile:
    """A remote file read by block-aligned byte ranges, with retries and an optional resumable block cache."""

    def __init__(
        self,
        url: str,
        cache_dir: str | os.PathLike | None = None,
        *,
        block: int | None = None,
        progress: Callable[[int], None] | None = None,
    ):
        self.name = url
        self.block = block or BLOCK  # read at call time, so a test can make blocks small
        self.progress = progress  # called with the byte count of every range fetched (a progress bar's update)
        self.requests = 0
        self._fs = None
        if not url.startswith(("http://", "https://")):
            import fsspec

            try:
                self._fs, self._path = fsspec.core.url_to_fs(url)
            except (ImportError, ValueError) as exc:
                raise MemtuiError(f"{url}: cannot open this kind of address ({exc}).") from None
        self.size = self._size()
        self._memory: dict[int, bytes] = {}
        self._cache = None
        if cache_dir is not None:
            self._cache = _BlockCache(Path(cache_dir), url, self.size, self.block)

    # -- the two primitives: size and a byte range ----------------------------------------------------------------

    def _size(self) -> int:
        if self._fs is not None:
            try:
                return int(self._fs.size(self._path))
            except FileNotFoundError:
                raise MemtuiError(f"{self.name}: no such remote file.") from None
            except OSError as exc:
                raise MemtuiError(f"{self.name}: cannot read its size ({exc}).") from None
        req = urllib.request.Request(self.name, method="HEAD")
        with self._retrying() as attempt:
            for _ in attempt:
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        length = resp.headers.get("Content-Length")
                        if length is None:
                            raise MemtuiError(f"{self.name}: the server does not say how large the file is.")
                        return int(length)
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:
                        raise MemtuiError(f"{self.name}: no such remote file (HTTP 404).") from None
                    attempt.failed(exc)
                except (OSError, http.client.HTTPException) as exc:
                    attempt.failed(exc)
        raise AssertionError  # _retrying raises after the last failure

    def _fetch(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file, retried on dropped connections and 5xx answers."""
        with self._retrying() as attempt:
            for _ in attempt:
                try:
                    if self._fs is not None:
                        data = self._fs.cat_file(self._path, start=start, end=end)
                    else:
                        req = urllib.request.Request(self.name, headers={"Range": f"bytes={start}-{end - 1}"})
                        with urllib.request.urlopen(req, timeout=60) as resp:
                            if resp.status != 206 and not (resp.status == 200 and start == 0 and end == self.size):
                                raise MemtuiError(f"{self.name}: the server ignores byte ranges (HTTP {resp.status}).")
                            data = resp.read()
                    if len(data) != end - start:
                        raise OSError(f"short read: {len(data)} of {end - start} bytes")
                    self.requests += 1
                    if self.progress is not None:
                        self.progress(len(data))
                    return data
                except urllib.error.HTTPError as exc:
                    if exc.code < 500:
                        raise MemtuiError(f"{self.name}: HTTP {exc.code} reading bytes {start}-{end - 1}.") from None
                    attempt.failed(exc)
                except (OSError, http.client.HTTPException) as exc:  # a dropped connection is an IncompleteRead
                    attempt.failed(exc)
        raise AssertionError

    def read_exact(self, offset: int, n: int) -> bytes:
        """Exactly bytes ``offset .. offset + n`` in one request (retried), bypassing the block cache: for callers
        that read each range once (OLMo's instances, Amber's lines)."""
        if offset < 0 or offset + n > self.size:
            raise MemtuiError(f"{self.name}: reading bytes {offset}..{offset + n} past its end ({self.size} bytes).")
        return self._fetch(offset, offset + n) if n else b""

    class _retrying:
        """``for _ in attempt: try ... except: attempt.failed(exc)``: up to RETRIES tries with a growing pause."""

        def __enter__(self):
            self.tries, self.last = 0, None
            return self

        def __exit__(self, *exc):
            return False

        def __iter__(self):
            while self.tries < RETRIES:
                self.tries += 1
                yield self.tries
            raise MemtuiError(f"remote read failed after {RETRIES} tries ({self.last}).")

        def failed(self, exc):
            self.last = " ".join(str(exc).split()) or type(exc).__name__
            time.sleep(min(0.1 * 2**self.tries, 5.0))

    # -- block-aligned reads ----------------------------------------------------------------------------------------

    def _blocks(self, first: int, last: int) -> dict[int, bytes]:
        have = {}
        missing = []
        for b in range(first, last + 1):
            data = self._memory.get(b)
            if data is None and self._cache is not None:
                data = self._cache.get(b)
            if data is None:
                missing.append(b)
            else:
                have[b] = data
        # consecutive missing blocks are fetched by one request
        runs: list[list[int]] = []
        for b in missing:
            if runs and runs[-1][-1] == b - 1:
                runs[-1].append(b)
            else:
                runs.append([b])
        for run in runs:
            start, end = run[0] * self.block, min(self.size, (run[-1] + 1) * self.block)
            data = self._fetch(start, end)
            for k, b in enumerate(run):
                piece = data[k * self.block : (k + 1) * self.block]
                have[b] = piece
                if self._cache is not None:
                    self._cache.put(b, piece)
                elif len(self._memory) < 4096:  # at most 4 GiB of 1 MiB blocks in memory without a cache folder
                    self._memory[b] = piece
        return have

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or offset + n > self.size:
            raise MemtuiError(f"{self.name}: reading bytes {offset}..{offset + n} past its end ({self.size} bytes).")
        if n == 0:
            return b""
        first, last = offset // self.block, (offset + n - 1) // self.block
        blocks = self._blocks(first, last)
        joined = b"".join(blocks[b] for b in range(first, last + 1))
        skip = offset - first * self.block
        return joined[skip : skip + n]

    def array(self, offset: int, dtype, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        if offset + count * dtype.itemsize > self.size:
            raise MemtuiError(f"{self.name}: is truncated ({self.size} bytes; its header promises more).")
        return np.frombuffer(self.read(offset, count * dtype.itemsize), dtype=dtype)


class _BlockCache:
    """Blocks of one remote file kept on disk: a sparse data file and an append-only list of the blocks it holds.

    A block's number is appended only after its bytes are written and flushed, so a crash can lose the last block
    but never records one that is not there. A file whose size changed is a different file: the cache starts over.
    """

    def __init__(self, folder: Path, url: str, size: int, block: int):
        folder.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(url.encode()).hexdigest()[:24]
        self.data_path = folder / f"{key}.blocks"
        self.list_path = folder / f"{key}.done"
        meta_path = folder / f"{key}.json"
        meta = {"url": url, "size": size, "block": block}
        old = None
        if meta_path.exists():
            try:
                old = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                old = None
        if old != meta:
            for p in (self.data_path, self.list_path):
                p.unlink(missing_ok=True)
            tmp = meta_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, meta_path)
        self.block, self.size = block, size
        self.done: set[int] = set()
        if self.list_path.exists():
            for line in self.list_path.read_text().split():
                if line.isdigit():
                    self.done.add(int(line))
        self._data = open(self.data_path, "a+b")  # noqa: SIM115 - kept open for the life of the cache

    def get(self, b: int) -> bytes | None:
        if b not in self.done:
            return None
        self._data.seek(b * self.block)
        want = min(self.block, self.size - b * self.block)
        data = self._data.read(want)
        return data if len(data) == want else None

    def put(self, b: int, data: bytes) -> None:
        # "a+b" appends on every write regardless of seek; write through a separate positioned handle instead
        with open(self.data_path, "r+b") as f:
            f.seek(b * self.block)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(self.list_path, "a") as f:
            f.write(f"{b}\n")
        self.done.add(b)


def open_source(location: str | os.PathLike, cache_dir=None, progress=None) -> LocalFile | RemoteFile:
    if is_remote(location):
        return RemoteFile(str(location), cache_dir, progress=progress)
    return LocalFile(location)


def exists(location: str | os.PathLike) -> bool:
    """Whether a local path or a remote address names a file (a remote check costs one request)."""
    if not is_remote(location):
        return Path(str(location).removeprefix("file://")).is_file()
    try:
        RemoteFile(str(location))
    except MemtuiError:
        return False
    return True


class ArrayView:
    """Items of a flat little-endian array stored at ``offset`` in a source, read by index without loading it.

    Local sources give a zero-copy view; remote ones read the block(s) holding each requested item.
    """

    def __init__(self, source, offset: int, dtype, shape: tuple[int, ...]):
        self.source, self.offset, self.dtype, self.shape = source, offset, np.dtype(dtype), shape
        self.row = int(np.prod(shape[1:], dtype=np.int64))  # items per first-axis row
        needed = offset + int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
        if needed > source.size:
            raise MemtuiError(f"{source.name}: is truncated ({source.size} bytes; its header promises {needed}).")
        self._local = (
            source.array(offset, self.dtype, int(np.prod(shape, dtype=np.int64))).reshape(shape)
            if isinstance(source, LocalFile)
            else None
        )

    def __len__(self) -> int:
        return self.shape[0]

    def take(self, rows) -> np.ndarray:
        """Rows ``rows`` (any integer array) as a new in-memory array of shape ``rows.shape + shape[1:]``."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(int(rows.max()))
        if self._local is not None:
            return np.asarray(self._local[rows])
        out = np.empty(rows.shape + self.shape[1:], dtype=self.dtype)
        flat = out.reshape(rows.size, self.row)
        width = self.row * self.dtype.itemsize
        for k, r in enumerate(rows.ravel()):
            flat[k] = np.frombuffer(self.source.read(self.offset + int(r) * width, width), dtype=self.dtype)
        return out

    def chunks(self, size: int = 1 << 24):
        """(start, rows) pieces of the whole array in order, for scans that must not hold it in memory."""
        for start in range(0, self.shape[0], size):
            stop = min(self.shape[0], start + size)
            # read, not mapped: a sequential scan of a multi-GB map must not stay in the process's memory
            n = (stop - start) * self.row
            data = self.source.read(self.offset + start * self.row * self.dtype.itemsize, n * self.dtype.itemsize)
            yield start, np.frombuffer(data, dtype=self.dtype).reshape((stop - start, *self.shape[1:]))


def npy_array(location: str | os.PathLike, cache_dir=None, progress=None) -> ArrayView:
    """A ``.npy`` file as an :class:`ArrayView` (its header parsed, its data never read whole)."""
    source = open_source(location, cache_dir, progress)
    head = source.read(0, min(source.size, 1 << 16))
    f = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, OSError) as exc:
        raise MemtuiError(f"{location}: not a numpy .npy file ({' '.join(str(exc).split())[:100]}).") from None
    if fortran and len(shape) > 1:
        raise MemtuiError(f"{location}: a Fortran-ordered array; index maps are C-ordered.")
    if dtype.hasobject:
        raise MemtuiError(f"{location}: it holds Python objects, not numbers.")
    if dtype.byteorder == ">":
        raise MemtuiError(f"{location}: big-endian numbers; index maps are little-endian.")
    return ArrayView(source, f.tell(), dtype, tuple(int(s) for s in shape))
