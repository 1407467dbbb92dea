"""Flat token files as OLMo and OLMo-core number them, read one instance at a time.

Both libraries treat ``data.paths`` as headerless arrays of token ids (``.npy`` in name only: no numpy header) and
cut each file into instances of ``L`` tokens: instance k of a file is tokens ``[k·L, (k+1)·L)``, a file counts
``size // (itemsize · L)`` instances (a shorter tail is never trained), and files are numbered one after another in
the order given. So the file sizes alone fix the global numbering, and only a panel's instances need to be read.

OLMo-core's ``max_target_sequence_length`` (M, a multiple of L) counts a file in whole blocks of M tokens:
``(size // (itemsize · M)) · (M / L)`` instances (``NumpyFSLDataset._get_file_size_and_length``).

Files are local paths or http(s) URLs (read by exact byte ranges and sized by HEAD requests through
``sources.RemoteFile``, the GPT-NeoX reader's, with its retries); any other scheme goes through fsspec when it is
installed with that scheme's backend.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.orders.arrays import ConcatenatedRows

TOKEN_DTYPES = ("uint8", "uint16", "uint32", "uint64")
_THREADS = 8  # concurrent range requests to one server


def is_url(path: str) -> bool:
    return "://" in str(path)


def token_dtype(name: object, where: str) -> np.dtype:
    text = str(name).removeprefix("numpy.").removeprefix("np.")
    if text not in TOKEN_DTYPES:
        raise MemtuiError(f"{where}: token dtype '{clean(name, 40)}' is not one of {', '.join(TOKEN_DTYPES)}.")
    return np.dtype(text)


def remap(paths: Sequence[str], data_root: str | os.PathLike | None, base: str | None = None) -> list[str]:
    """``paths`` with the prefix ``base`` (else their longest common folder) replaced by ``data_root``: the same
    files mirrored elsewhere (``--data-root``)."""
    paths = [str(p) for p in paths]
    if data_root is None:
        return paths
    if base is None:  # the deepest folder all paths share
        base = os.path.commonprefix(paths)
        base = base[: base.rfind("/") + 1]
    base = base.rstrip("/")
    out = []
    for p in paths:
        if not p.startswith(base):
            raise MemtuiError(f"--data-root: token file {clean(p, 160)} does not start with {clean(base, 160)}.")
        out.append(str(data_root).rstrip("/") + "/" + p[len(base) :].lstrip("/"))
    return out


# -- sizes and byte ranges --------------------------------------------------------------------------------------------


def _remote(path: str):
    """The one reader of remote byte ranges (``sources.RemoteFile``: retries, HEAD for the size), one per URL: its
    size is asked once, however many instances are read from it."""
    from memtui.orders.sources import RemoteFile

    with _REMOTE_LOCK:
        if path not in _REMOTE:
            _REMOTE[path] = RemoteFile(path)
        return _REMOTE[path]


_REMOTE: dict = {}
_REMOTE_LOCK = threading.Lock()


def _fsspec(path: str):
    try:
        import fsspec

        return fsspec.core.url_to_fs(path)
    except (ImportError, ValueError) as exc:
        raise MemtuiError(f"{clean(path, 160)}: cannot open this kind of location ({clean(exc, 100)}).") from None


def file_size(path: str) -> int:
    """The size in bytes of a local file or a remote one (a HEAD request for http(s))."""
    if not is_url(path):  # a folder, a FIFO or a device has no size to number instances by: refused
        return input_file(path, "token file").stat().st_size
    if path.startswith(("http://", "https://")):
        return int(_remote(path).size)
    fs, inner = _fsspec(path)
    try:
        return int(fs.size(inner))
    except FileNotFoundError:
        raise MemtuiError(f"{clean(path, 200)}: no such token file.") from None


def read_range(path: str, start: int, length: int) -> bytes:
    """``length`` bytes from ``start``: a seek for a local file, a Range request for a remote one."""
    if not is_url(path):
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(length)
    elif path.startswith(("http://", "https://")):
        data = _remote(path).read_exact(start, length)
    else:
        fs, inner = _fsspec(path)
        data = fs.cat_file(inner, start=start, end=start + length)
    if len(data) != length:
        raise MemtuiError(
            f"{clean(path, 200)}: read {len(data)} of {length} bytes at {start}; the file changed or is cut short."
        )
    return data


def file_sizes(paths: Sequence[str]) -> np.ndarray:
    """All sizes, remote ones concurrently (one HEAD each)."""
    if not any(is_url(p) for p in paths):
        return np.array([file_size(p) for p in paths], dtype=np.int64)
    with ThreadPoolExecutor(_THREADS) as pool:
        return np.array(list(pool.map(file_size, paths)), dtype=np.int64)


# -- the numbering ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenFiles(ConcatenatedRows):
    """Token files numbered as one sequence of ``seq_len``-token instances (``locate``: a global instance number's
    file and instance within it)."""

    row_word = "instance"

    paths: tuple[str, ...]
    sizes: np.ndarray  # bytes per file
    dtype: np.dtype
    seq_len: int
    block: int = 1  # instances counted in whole blocks of this many (OLMo-core's max_target_sequence_length / L)
    labels: tuple[str, ...] = field(default=())  # a label per file (OLMo's `data.datasets` names), or none

    def __post_init__(self):
        if self.seq_len < 1:
            raise MemtuiError(f"sequence length must be at least 1, not {self.seq_len}.")
        ragged = [p for p, s in zip(self.paths, self.sizes, strict=True) if s % self.dtype.itemsize]
        if ragged:
            raise MemtuiError(
                f"{clean(ragged[0], 200)}: {int(self.sizes[self.paths.index(ragged[0])])} bytes is not a whole number "
                f"of {self.dtype} tokens ({len(ragged)} such file(s)); check the token dtype (memmap_dtype)."
            )
        if self.n_instances == 0:
            raise MemtuiError(f"the token files hold no whole instance of {self.seq_len} tokens.")

    @classmethod
    def open(cls, paths: Sequence[str], dtype: np.dtype, seq_len: int, *, block: int = 1, labels=()) -> TokenFiles:
        if not paths:
            raise MemtuiError("no token files: the config lists no data paths.")
        return cls(tuple(map(str, paths)), file_sizes(list(map(str, paths))), dtype, seq_len, block, tuple(labels))

    @property
    def counts(self) -> np.ndarray:
        per_block = self.dtype.itemsize * self.seq_len * self.block
        return (self.sizes // per_block) * self.block

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts)])

    @property
    def n_instances(self) -> int:
        return int(self.counts.sum())

    @property
    def ignored_tokens(self) -> int:
        """Tokens at the ends of files that make no whole instance (never trained, as in the libraries)."""
        return int((self.sizes // self.dtype.itemsize - self.counts * self.seq_len).sum())

    def read(self, index: np.ndarray, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """The instances' tokens, (len(index), seq_len) int64; only their bytes are read."""
        index = np.asarray(index, dtype=np.int64)
        out = np.empty((len(index), self.seq_len), dtype=np.int64)
        files, local = self.locate(index)
        width = self.dtype.itemsize * self.seq_len
        done = 0
        for f in np.unique(files):
            rows = np.flatnonzero(files == f)
            path = self.paths[f]
            if not is_url(path):  # one pread per instance: a memmap's page faults cost far more on big files
                fd = os.open(path, os.O_RDONLY)
                try:
                    for r in rows:
                        chunk = os.pread(fd, width, int(local[r]) * width)
                        if len(chunk) != width:
                            raise MemtuiError(f"{clean(path, 200)}: cut short while reading; the file changed.")
                        out[r] = np.frombuffer(chunk, dtype=self.dtype)
                finally:
                    os.close(fd)
            else:
                starts = [int(k) * width for k in local[rows]]
                with ThreadPoolExecutor(_THREADS) as pool:
                    for r, chunk in zip(rows, pool.map(lambda s, p=path: read_range(p, s, width), starts), strict=True):
                        out[r] = np.frombuffer(chunk, dtype=self.dtype)
            done += len(rows)
            if progress is not None:
                progress(done, len(index))
        return out
