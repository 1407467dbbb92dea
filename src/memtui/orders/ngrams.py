"""Counting token sequences in a training corpus with EleutherAI's ``tokengrams`` (suffix arrays over token files).

A corpus is one or more token files, each indexed on its own and counted together (``ShardedMemmapIndex``): an
n-gram is counted where it lies inside one file, never across two. Accepted files:

- a Megatron ``MMapIndexedDataset`` (``PREFIX.idx`` + ``PREFIX.bin``, the Pile's and Pythia's format), given as
  PREFIX, PREFIX.idx or PREFIX.bin: its ``.bin`` is the documents' tokens one after another with nothing between
  them, so it is indexed as it is, in the dtype its ``.idx`` records;
- a flat file of token ids without header (OLMo's ``.npy``, any ``.bin``), in the dtype given (uint16 by default).

tokengrams indexes 16-bit tokens (vocabularies up to 2**16, the Pile's GPT-NeoX tokenizer) or 32-bit ones; other
widths are refused. The suffix table it builds takes 8 bytes per token and is kept beside the token file as
``FILE.tokengrams`` (or in ``index_dir``), built once to a temporary name and renamed; a later run reuses it.

Documents are concatenated in the file's order: an n-gram that spans two documents there is counted too, and a
sequence that was trained as a window over shuffled documents (GPT-NeoX's samples) is found whole only where the
file holds those documents in that order.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import WriteError, atomic_write
from memtui.core.paths import input_file, writable_folder
from memtui.core.text import clean

INDEX_SUFFIX = ".tokengrams"
SUFFIX_BYTES = 8  # tokengrams' suffix table: one u64 position per token
_WIDTHS = {np.dtype(np.uint16): 2**16, np.dtype(np.uint32): 2**32, np.dtype(np.int32): 2**32}
_NPY_MAGIC = b"\x93NUMPY"


def _tokengrams():
    try:
        import tokengrams
    except ImportError:
        raise MemtuiError(
            "counting n-grams in a corpus needs EleutherAI's tokengrams: pip install tokengrams==0.3.3"
        ) from None
    return tokengrams


def corpus_file(source: str | os.PathLike, dtype: str | None) -> tuple[Path, np.dtype]:
    """The token file of ``source`` and its dtype: a Megatron dataset's ``.bin`` (dtype from its ``.idx``, which is
    checked), else ``source`` itself as flat tokens of ``dtype`` (uint16 when None)."""
    text = str(source)
    prefix = text[:-4] if text.endswith((".idx", ".bin")) else text
    if Path(prefix + ".idx").is_file():
        from memtui.orders.neox import IndexedTokens  # header, dtype and the .bin's size are checked

        tokens = IndexedTokens(prefix)
        if dtype is not None and np.dtype(dtype) != tokens.dtype:
            raise MemtuiError(f"{prefix}.idx records {tokens.dtype} tokens, not {dtype}.")
        return Path(prefix + ".bin"), tokens.dtype
    if not Path(text).exists():
        raise MemtuiError(f"{clean(text, 200)}: no such token file (nor PREFIX.idx and PREFIX.bin).")
    path = input_file(text, "corpus token file")  # a folder, a FIFO or a device is refused, not indexed
    with open(path, "rb") as f:
        if f.read(6) == _NPY_MAGIC:
            raise MemtuiError(
                f"{clean(text, 200)} is a numpy .npy with a header; save its array as raw tokens (array.tofile) and "
                "pass that file."
            )
    dt = np.dtype(dtype or "uint16")
    if path.stat().st_size % dt.itemsize:
        raise MemtuiError(f"{clean(text, 200)}: {path.stat().st_size} bytes is not a whole number of {dt} tokens.")
    return path, dt


class CorpusCounts:
    """Occurrence counts of token sequences in a corpus of token files (tokengrams' sharded suffix-array index)."""

    def __init__(
        self,
        sources: Sequence[str | os.PathLike],
        *,
        dtype: str | None = None,
        index_dir: str | os.PathLike | None = None,
        log: Callable[[str], None] = print,
    ):
        if not sources:
            raise MemtuiError("no corpus token files given.")
        files = [corpus_file(s, dtype) for s in sources]
        widths = {_WIDTHS.get(dt) for _, dt in files}
        if None in widths:
            odd = next(dt for _, dt in files if dt not in _WIDTHS)
            raise MemtuiError(f"the corpus holds {odd} tokens; tokengrams indexes 16- or 32-bit token ids only.")
        if len(widths) > 1:
            raise MemtuiError("the corpus files mix 16- and 32-bit tokens; tokengrams counts one width at a time.")
        self.vocab = widths.pop()
        self.files = [path for path, _ in files]
        self.n_tokens = sum(path.stat().st_size // dt.itemsize for path, dt in files)
        if index_dir is not None:
            writable_folder(index_dir, "--index-dir")
        pairs = [(str(path), str(_ensure_index(path, dt, self.vocab, index_dir, log))) for path, dt in files]
        self.indexes = [Path(table) for _, table in pairs]
        tokengrams = _tokengrams()
        try:
            with rust_panics(self.indexes):
                self._index = tokengrams.ShardedMemmapIndex(pairs, vocab=self.vocab)
        except MemtuiError:
            raise MemtuiError(f"{_damaged(pairs, self.vocab)} is damaged; delete it to rebuild it.") from None

    def count(self, query: Sequence[int]) -> int:
        """Occurrences of the token sequence ``query`` in the corpus (0 where a token lies outside its width).
        Call it inside ``with rust_panics(counts.indexes)``: a damaged table panics in the Rust library."""
        query = [int(t) for t in query]
        if not query or min(query) < 0 or max(query) >= self.vocab:
            return 0  # never sent: tokengrams would wrap such ids into the width
        return int(self._index.count(query))


@contextlib.contextmanager
def rust_panics(indexes: Sequence[Path]):
    """Around calls into tokengrams: a panic of the Rust library (a damaged or foreign suffix table fails its
    ``table.is_sorted()`` assertion or indexes past the text) becomes one line naming the tables, instead of a
    traceback and, with RUST_BACKTRACE set, a backtrace per thread (~170,000 lines). The panic's own report goes to
    a temporary file while the library runs (the library writes it straight to file descriptor 2); whatever else
    was written there is passed on afterwards."""
    saved_env = os.environ.get("RUST_BACKTRACE")
    os.environ["RUST_BACKTRACE"] = "0"  # read by Rust at the first panic: no stack walk for every thread
    sys.stderr.flush()
    saved_fd = os.dup(2)
    panicked = False
    with tempfile.TemporaryFile() as trap:
        os.dup2(trap.fileno(), 2)
        try:
            yield
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":  # pyo3's, a BaseException; KeyboardInterrupt passes through
                raise
            panicked = True
        finally:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            if saved_env is None:
                os.environ.pop("RUST_BACKTRACE", None)
            else:
                os.environ["RUST_BACKTRACE"] = saved_env
            if not panicked:
                trap.seek(0)
                sys.stderr.write(trap.read(8192).decode("utf-8", "replace"))
    if panicked:
        names = ", ".join(clean(p, 160) for p in indexes)
        raise MemtuiError(f"the n-gram index {names} is damaged; delete it to rebuild it.")


def _damaged(pairs: Sequence[tuple[str, str]], vocab: int) -> str:
    """Which suffix table of a sharded index fails to load, each tried on its own (only after the whole failed)."""
    tokengrams = _tokengrams()
    for text, table in pairs:
        try:
            with rust_panics([Path(table)]):
                tokengrams.MemmapIndex(text, table, vocab=vocab)
        except MemtuiError:
            return f"the n-gram index {clean(table, 200)}"
    return "the n-gram index " + ", ".join(clean(table, 160) for _, table in pairs)


def index_path(token_file: Path, index_dir: str | os.PathLike | None) -> Path:
    folder = Path(index_dir) if index_dir is not None else token_file.parent
    return folder / (token_file.name + INDEX_SUFFIX)


def _ensure_index(token_file: Path, dt: np.dtype, vocab: int, index_dir, log: Callable[[str], None]) -> Path:
    """The suffix table of ``token_file``: reused where one of the right size is there, else built and renamed in."""
    target = index_path(token_file, index_dir)
    n = token_file.stat().st_size // dt.itemsize
    if target.exists():
        if target.stat().st_size != SUFFIX_BYTES * n:
            raise MemtuiError(
                f"{target} is not the index of {token_file} ({target.stat().st_size} bytes, expected "
                f"{SUFFIX_BYTES * n}); remove it and rerun to rebuild it."
            )
        if target.stat().st_mtime < token_file.stat().st_mtime:
            raise MemtuiError(f"{target} is older than {token_file}; remove it and rerun to rebuild it.")
        return target
    move = "pass --index-dir FOLDER to keep the n-gram indexes elsewhere"
    writable_folder(index_dir if index_dir is not None else token_file.parent, "where the n-gram index is kept", move)
    if index_dir is not None:
        Path(index_dir).mkdir(parents=True, exist_ok=True)
    log(f"indexing {token_file} ({n:,} tokens; the suffix table takes {SUFFIX_BYTES * n:,} bytes) -> {target}")
    tokengrams = _tokengrams()

    def build(tmp: Path) -> None:
        with _stdout_to_stderr():  # tokengrams prints its progress on stdout, where the covariates' table goes
            tokengrams.MemmapIndex.build(str(token_file), str(tmp), vocab=vocab, verbose=False)

    try:
        atomic_write(target, build)
    except WriteError as exc:  # the disk filled, or the mount turned read-only meanwhile
        raise MemtuiError(f"{exc}; {move}.") from None
    return target


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 pointed at stderr for the duration (the Rust library writes to it directly)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
