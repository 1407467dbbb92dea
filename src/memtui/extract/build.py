"""Build a panel waiting for extraction: instances (token ids + treatment step) and the checkpoint steps.

Two sources:

- a Pythia-layout token memmap (rows of ``seq_len`` uint16 tokens in training order, ``batch_size`` rows per step),
  sampled like Lesci et al.: per macro-batch of ``macro`` steps, ``k`` batches x ``m`` rows (seeded), plus
  never-trained validation rows from a token-id file;
- any token-id array file (npy / npz / parquet) with a treatment-step column.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import refuse_existing
from memtui.core.text import clean
from memtui.extract.checkpoints import parse_checkpoints
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER, PAD

_TOKENS_DEFAULT = "tokens"  # build's --tokens-column default
PYTHIA_TOKENS, PYTHIA_INDEX = "input_ids", "seq_idx"  # the columns of the panel Lesci et al. released


def _check_out(out, overwrite: bool) -> None:
    refuse_existing(out, overwrite)


def _load(path: Path, **kw):
    """``np.load`` with its many failure modes (junk bytes, a pickled object array, a truncated zip) as one line."""
    try:
        return np.load(path, allow_pickle=False, **kw)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        reason = clean((str(exc).strip().splitlines() or [type(exc).__name__])[0], 120)
        if "allow_pickle" in reason or "Object arrays" in reason:
            reason = "it holds Python objects, not numbers"
        raise MemtuiError(f"{path}: cannot read it as a numpy array file ({reason}).") from None


def _token_ids(arr, path) -> np.ndarray:
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


def _lengths_from_padding(tokens: np.ndarray) -> np.ndarray:
    """Each row's length where none is given: trailing PAD (-1) entries are padding, as in the panel format."""
    real = tokens != PAD
    return np.where(real.any(axis=1), tokens.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def open_memmap(path: str | os.PathLike, seq_len: int) -> np.ndarray:
    """Rows x seq_len tokens, memory-mapped: a raw uint16 ``.bin`` (Pythia's layout) or an ``.npy``."""
    path = Path(path)
    if not path.exists():
        raise MemtuiError(f"{path}: no such token file.")
    if path.suffix == ".npy":
        return _token_ids(_load(path, mmap_mode="r"), path)
    size = path.stat().st_size
    if size % (2 * seq_len):
        raise MemtuiError(
            f"{path}: {size} bytes is not a whole number of {seq_len}-token uint16 rows; check --seq-len."
        )
    return np.memmap(path, dtype=np.uint16, mode="r", shape=(size // (2 * seq_len), seq_len))


def load_token_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """A 2-D token-id array from .npy / .npz (key ``tokens`` or the only array) / .bin (uint16, needs a reshape)."""
    path = Path(path)
    if not path.exists():
        raise MemtuiError(f"{path}: no such token file.")
    if path.suffix == ".npz":
        z = _load(path)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise MemtuiError(f"{path}: not an .npz archive.")
        with z:
            name = key or ("tokens" if "tokens" in z else (z.files[0] if len(z.files) == 1 else None))
            if name is None or name not in z:
                raise MemtuiError(f"{path}: no array named 'tokens' (it has {clean(', '.join(z.files), 200)}).")
            arr = _npz_member(z, name, path)
    else:
        arr = _load(path)
    return _token_ids(arr, path)


def _npz_member(z, name: str, path: Path) -> np.ndarray:
    try:
        return z[name]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        reason = "it holds Python objects" if "allow_pickle" in str(exc) else clean(type(exc).__name__)
        raise MemtuiError(f"{path}: cannot read array '{clean(name, 60)}' ({reason}).") from None


def sample_memmap_rows(
    n_rows: int, *, batch_size: int, macro: int, k: int, m: int, max_step: int, seed: int = 0
) -> np.ndarray:
    """Row indices: for every macro-batch whose treatment step is <= max_step, k batches x m rows, seeded."""
    rng = np.random.default_rng(seed)
    n_batches = n_rows // batch_size
    rows = []
    for j in range(n_batches // macro + 1):
        if (j + 1) * macro > max_step:
            break
        batches = np.arange(j * macro, min((j + 1) * macro, n_batches))
        if len(batches) == 0:
            break
        chosen = rng.choice(batches, size=min(k, len(batches)), replace=False)
        for b in np.sort(chosen):
            within = rng.choice(batch_size, size=min(m, batch_size), replace=False)
            rows.extend(b * batch_size + np.sort(within))
    return np.asarray(rows, dtype=np.int64)


def build_from_memmap(
    out: str | os.PathLike,
    memmap: str | os.PathLike,
    validation: str | os.PathLike,
    *,
    steps: str | Sequence[int] | None = None,
    batch_size: int = 1024,
    macro: int = 1000,
    k: int = 10,
    m: int = 10,
    n_validation: int | None = None,
    seq_len: int = 2049,
    seed: int = 0,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel of sampled training rows (treatment per macro-batch) and never-trained validation rows."""
    _check_out(out, overwrite)
    data = open_memmap(memmap, seq_len)
    n_rows, length = data.shape
    covered = (n_rows // batch_size) // macro * macro  # last checkpoint whose macro-batch is complete in the file
    if steps is None:
        if covered == 0:
            raise MemtuiError(f"{memmap}: {n_rows} rows do not fill one macro-batch of {macro} x {batch_size} rows.")
        step_list = list(range(0, covered + 1, macro))
    else:
        step_list = parse_checkpoints(steps) if isinstance(steps, str) else sorted(set(int(s) for s in steps))
        if step_list is None:
            raise MemtuiError("give the panel's checkpoint steps explicitly (e.g. 0:95000:1000), not 'all'.")
    rows = sample_memmap_rows(n_rows, batch_size=batch_size, macro=macro, k=k, m=m, max_step=max(step_list), seed=seed)
    from memtui.panel.importing import pythia_treatment_step

    treat = pythia_treatment_step(rows, batch_size, macro)  # the rows are in training order
    keep = np.isin(treat, step_list)
    rows, treat = rows[keep], treat[keep]
    if len(rows) == 0:
        raise MemtuiError("no training rows fall into the panel's checkpoint steps; check --steps and --macro.")
    val = load_token_array(validation)
    check_token_range(val, np.full(len(val), val.shape[1]), validation)
    if n_validation is not None and n_validation < len(val):
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(val), size=n_validation, replace=False))
    else:
        pick = np.arange(len(val))
    val = np.asarray(val[pick])
    width = max(length, val.shape[1])
    tokens = np.full((len(rows) + len(val), width), PAD, dtype=np.int64)
    tokens[: len(rows), :length] = np.asarray(data[rows])
    check_token_range(tokens[: len(rows)], np.full(len(rows), length), memmap)
    tokens[len(rows) :, : val.shape[1]] = val
    lengths = np.r_[np.full(len(rows), length), np.full(len(val), val.shape[1])]
    ids = np.r_[rows, n_rows + pick]  # validation ids follow the memmap's rows
    return create_panel(
        out,
        ids=ids,
        treatment=np.r_[treat, np.full(len(val), NEVER)],
        steps=step_list,
        source_index=np.r_[rows, pick],
        tokens=tokens,
        lengths=lengths,
        attrs={
            "source": f"memmap {memmap} (batch {batch_size}, macro-batch {macro} steps, {k}x{m} per macro-batch, "
            f"seed {seed}); validation {validation}",
            **(attrs or {}),
        },
        overwrite=overwrite,
    )


def _read_table(path: Path, treatment_column: str, tokens_column: str):
    """(token lists, treatment steps, ids or None, source indices or None) of a parquet token table.

    Besides a treatment column, the layout of the panel Lesci et al. released is recognised: ``input_ids`` (2049 ids)
    and ``seq_idx`` (the training-order index, negative for validation rows), read when the named columns are absent;
    the treatment is then derived from ``seq_idx`` exactly as ``memtui import --from-seq-idx`` does.
    """
    import polars as pl

    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any reader error is a user-facing one-liner
        raise MemtuiError(f"{path}: cannot read parquet ({type(exc).__name__}).") from None
    if tokens_column not in df.columns and tokens_column == _TOKENS_DEFAULT and PYTHIA_TOKENS in df.columns:
        tokens_column = PYTHIA_TOKENS
    if treatment_column not in df.columns and PYTHIA_INDEX in df.columns:
        return _read_seq_idx_table(df, path, tokens_column)
    for col in (tokens_column, treatment_column):
        if col not in df.columns:
            raise MemtuiError(f"{path}: no column '{col}' (it has {', '.join(df.columns)}).")
    seqs = df[tokens_column].to_list()
    ids = df["id"].to_numpy() if "id" in df.columns else None
    return seqs, df[treatment_column].to_numpy(), ids, None


def _read_seq_idx_table(df, path: Path, tokens_column: str):
    from memtui.panel.importing import pythia_treatment_step

    if tokens_column not in df.columns:
        raise MemtuiError(
            f"{path}: no column '{clean(tokens_column, 60)}' (it has {clean(', '.join(df.columns), 200)})."
        )
    column = df[PYTHIA_INDEX]
    if not column.dtype.is_integer() or column.null_count():
        raise MemtuiError(
            f"{path}: column '{PYTHIA_INDEX}' must hold a whole training-order index in every row, not {column.dtype}"
            f"{' with missing values' if column.null_count() else ''}."
        )
    seq_idx = column.to_numpy().astype(np.int64)
    if len(np.unique(seq_idx)) != len(seq_idx):
        raise MemtuiError(f"{path}: some '{PYTHIA_INDEX}' values appear more than once; keep one row per sequence.")
    treat = pythia_treatment_step(seq_idx)
    return df[tokens_column].to_list(), treat, seq_idx, seq_idx


def build_from_tokens(
    out: str | os.PathLike,
    tokens_file: str | os.PathLike,
    *,
    steps: str | Sequence[int] | None = None,
    treatment_column: str = "treatment_step",
    tokens_column: str = "tokens",
    treatment_file: str | os.PathLike | None = None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel from token ids with a treatment step per row (-1 = never trained, a validation instance).

    .parquet: a list column of token ids and a treatment column (optional ``id``), or the released Pythia panel's
    ``input_ids`` and ``seq_idx`` (treatment from the training-order index, ids the ``seq_idx``); .npz: arrays
    ``tokens``, ``treatment_step`` (or the named column), optional ``lengths`` and ``id``; .npy: the token matrix,
    with the treatment steps in ``treatment_file`` (.npy). ``steps`` defaults to 0 and every treatment step.
    """
    _check_out(out, overwrite)
    path = Path(tokens_file)
    if not path.exists():
        raise MemtuiError(f"{path}: no such token file.")
    ids = lengths = source = None
    if path.suffix == ".parquet":
        seqs, treat, ids, source = _read_table(path, treatment_column, tokens_column)
        lengths = np.array([len(s) for s in seqs])
        tokens = np.full((len(seqs), max(lengths.max(), 1)), PAD, dtype=np.int64)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = s
    elif path.suffix == ".npz":
        z = _load(path)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise MemtuiError(f"{path}: not an .npz archive.")
        with z:
            if tokens_column not in z or treatment_column not in z:
                raise MemtuiError(
                    f"{path}: needs arrays '{clean(tokens_column, 60)}' and '{clean(treatment_column, 60)}' "
                    f"(it has {clean(', '.join(z.files), 200)})."
                )
            tokens, treat = _npz_member(z, tokens_column, path), _npz_member(z, treatment_column, path)
            lengths = _npz_member(z, "lengths", path) if "lengths" in z else None
            ids = _npz_member(z, "id", path) if "id" in z else None
    elif path.suffix == ".npy":
        if treatment_file is None:
            raise MemtuiError(f"{path}: an .npy token matrix needs --treatment-file with one step per row.")
        if not Path(treatment_file).exists():
            raise MemtuiError(f"{treatment_file}: no such treatment file.")
        tokens, treat = load_token_array(path), _load(Path(treatment_file))
    else:
        raise MemtuiError(f"{path}: unsupported token file; use .npy (+ --treatment-file), .npz or .parquet.")
    tokens = _token_ids(tokens, path)
    treat = np.asarray(treat)
    if treat.dtype.kind not in "iu" and not (treat.dtype.kind == "f" and np.all(np.mod(treat, 1) == 0)):
        raise MemtuiError(f"{path}: treatment steps must be whole numbers (-1 for never trained), found {treat.dtype}.")
    treat = treat.astype(np.int64).reshape(-1)
    if len(tokens) != len(treat):
        raise MemtuiError(f"{path}: {len(treat)} treatment steps for token array of shape {tokens.shape}.")
    if len(treat) == 0:
        raise MemtuiError(f"{path}: no rows.")
    if treat.min() < NEVER:
        raise MemtuiError(f"{path}: treatment steps must be >= 0, or -1 for never-trained instances.")
    lengths = _lengths_from_padding(tokens) if lengths is None else np.asarray(lengths).reshape(-1)
    if (
        len(lengths) != len(tokens)
        or lengths.dtype.kind not in "iu"
        or lengths.min() < 1
        or lengths.max() > tokens.shape[1]
    ):
        raise MemtuiError(f"{path}: 'lengths' must give each row's length, 1 .. {tokens.shape[1]}.")
    check_token_range(tokens, lengths, path)
    if steps is None:
        step_list = sorted({0, *treat[treat >= 0].tolist()})
    else:
        step_list = parse_checkpoints(steps) if isinstance(steps, str) else sorted(set(int(s) for s in steps))
        if step_list is None:
            raise MemtuiError("give the panel's checkpoint steps explicitly (e.g. 0:95000:1000), not 'all'.")
    return create_panel(
        out,
        ids=np.arange(len(treat)) if ids is None else ids,
        treatment=treat,
        steps=step_list,
        source_index=np.arange(len(treat)) if source is None else source,
        tokens=tokens,
        lengths=lengths,
        attrs={"source": f"tokens {path}", **(attrs or {})},
        overwrite=overwrite,
    )
