"""Token-id arrays read from files: a Pythia-layout memmap, .npy / .npz matrices, never-trained validation rows; and
the row stacking every order's instances go through. Each failure is one line naming the file."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.panel.model import PAD


def load_array(path: Path, **kw):
    """``np.load`` with its many failure modes (junk bytes, a pickled object array, a truncated zip) as one line."""
    try:
        return np.load(path, allow_pickle=False, **kw)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        reason = clean((str(exc).strip().splitlines() or [type(exc).__name__])[0], 120)
        if "allow_pickle" in reason or "Object arrays" in reason:
            reason = "it holds Python objects, not numbers"
        raise MemtuiError(f"{path}: cannot read it as a numpy array file ({reason}).") from None


def token_matrix(arr, path) -> np.ndarray:
    """A 2-D integer token matrix, or a one-line refusal."""
    arr = np.asarray(arr)
    if arr.ndim != 2:
        raise MemtuiError(f"{path}: expected a 2-D array of token ids, found shape {arr.shape}.")
    if arr.dtype.kind not in "iu":
        raise MemtuiError(f"{path}: token ids must be integers, found {arr.dtype}.")
    return arr


def check_token_range(tokens: np.ndarray, lengths: np.ndarray, path) -> None:
    """Token ids inside each row's length must be >= 0 and fit int32 (the vocabulary is checked when extracting)."""
    inside = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
    ids = tokens[inside]
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        bad = int(((ids < 0) | (ids > np.iinfo(np.int32).max)).sum())
        raise MemtuiError(
            f"{path}: {bad} token ids are negative or too large (smallest {int(ids.min())}, largest "
            f"{int(ids.max())}); token ids are vocabulary indices >= 0."
        )


def lengths_from_padding(tokens: np.ndarray) -> np.ndarray:
    """Each row's length where none is given: trailing PAD (-1) entries are padding, as in the panel format."""
    real = tokens != PAD
    return np.where(real.any(axis=1), tokens.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def open_memmap(path: str | os.PathLike, seq_len: int) -> np.ndarray:
    """Rows x seq_len tokens, memory-mapped: a raw uint16 ``.bin`` (Pythia's layout) or an ``.npy``."""
    path = input_file(path, "token file")  # a folder, a FIFO or a device is refused, not read
    if path.suffix == ".npy":
        return token_matrix(load_array(path, mmap_mode="r"), path)
    size = path.stat().st_size
    if size % (2 * seq_len):
        raise MemtuiError(
            f"{path}: {size} bytes is not a whole number of {seq_len}-token uint16 rows; check --seq-len."
        )
    return np.memmap(path, dtype=np.uint16, mode="r", shape=(size // (2 * seq_len), seq_len))


def load_token_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """A 2-D token-id array from .npy / .npz (key ``tokens`` or the only array) / .bin (uint16, needs a reshape)."""
    path = input_file(path, "token file")
    if path.suffix == ".npz":
        z = load_array(path)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise MemtuiError(f"{path}: not an .npz archive.")
        with z:
            name = key or ("tokens" if "tokens" in z else (z.files[0] if len(z.files) == 1 else None))
            if name is None or name not in z:
                raise MemtuiError(f"{path}: no array named 'tokens' (it has {clean(', '.join(z.files), 200)}).")
            arr = npz_member(z, name, path)
    else:
        arr = load_array(path)
    return token_matrix(arr, path)


def npz_member(z, name: str, path: Path) -> np.ndarray:
    try:
        return z[name]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        reason = "it holds Python objects" if "allow_pickle" in str(exc) else clean(type(exc).__name__)
        raise MemtuiError(f"{path}: cannot read array '{clean(name, 60)}' ({reason}).") from None


def sampled_validation(validation, n_validation: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The validation token rows (all, or ``n_validation`` drawn with seed + 1, in file order) and their row numbers."""
    val = load_token_array(validation)
    check_token_range(val, np.full(len(val), val.shape[1]), validation)
    if n_validation is not None and n_validation < len(val):
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(val), size=n_validation, replace=False))
    else:
        pick = np.arange(len(val))
    return np.asarray(val[pick]), pick


def stack_rows(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Token rows of any lengths as a PAD-filled matrix and their lengths."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.full((len(rows), max(int(lengths.max()), 1)), PAD, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, lengths


def validation_rows(validation, n_validation: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows picked, their tokens) of a never-trained validation token file (.npy / .npz, rows x length)."""
    if validation is None:
        raise MemtuiError("--controls validation needs --validation FILE (.npy, rows x length of never-trained ids).")
    val = load_token_array(validation)
    if n_validation is not None and n_validation < len(val):
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(val), size=n_validation, replace=False))
    else:
        pick = np.arange(len(val))
    return pick, np.asarray(val[pick]).astype(np.int64)


def pad_rows(values: np.ndarray, n: int) -> np.ndarray:
    """``values`` followed by ``n`` rows of "unknown": -1, or empty text."""
    fill = "" if values.dtype.kind in "USO" else -1
    return np.concatenate([values, np.full((n, *values.shape[1:]), fill, dtype=values.dtype)])


class ConcatenatedRows:
    """Rows numbered across files laid end to end (Pico's parquet shards, a Levanter mixture's caches): ``starts`` is
    each file's first row number, then the total, set by the subclass."""

    starts: np.ndarray
    row_word = "row"  # what a row is called in the refusal of a number out of range

    @property
    def n_instances(self) -> int:
        return int(self.starts[-1])

    def locate(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row number's file and its row within that file."""
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.n_instances):
            raise MemtuiError(f"{self.row_word} numbers must lie in 0 .. {self.n_instances - 1}.")
        f = np.searchsorted(self.starts, index, side="right") - 1
        return f, index - self.starts[f]
