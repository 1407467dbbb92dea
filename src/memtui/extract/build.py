"""Build a panel waiting for extraction: instances (token ids + treatment step) and the checkpoint steps.

Two sources:

- a Pythia-layout token memmap (rows of ``seq_len`` uint16 tokens in training order, ``batch_size`` rows per step),
  sampled like Lesci et al.: per macro-batch of ``macro`` steps, ``k`` batches x ``m`` rows (seeded), plus
  never-trained validation rows from a token-id file;
- any token-id array file (npy / npz / parquet) with a treatment-step column.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.errors import MemtuiError
from memtui.panel import NEVER, PAD, create_panel

from .checkpoints import parse_checkpoints


def _check_out(out, overwrite: bool) -> None:
    if Path(out).exists() and not overwrite:
        raise MemtuiError(f"{out} already exists; pass --force to overwrite it or choose another path.")


def treatment_of_rows(rows: np.ndarray, batch_size: int, macro: int) -> np.ndarray:
    """First checkpoint (every ``macro`` steps) that has trained on memmap row r: ``(r // (B*M) + 1) * M``."""
    return (np.asarray(rows, dtype=np.int64) // (batch_size * macro) + 1) * macro


def open_memmap(path: str | os.PathLike, seq_len: int) -> np.ndarray:
    """Rows x seq_len tokens, memory-mapped: a raw uint16 ``.bin`` (Pythia's layout) or an ``.npy``."""
    path = Path(path)
    if not path.exists():
        raise MemtuiError(f"{path}: no such token file.")
    if path.suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        if arr.ndim != 2:
            raise MemtuiError(f"{path}: expected a 2-D array of token ids, found shape {arr.shape}.")
        return arr
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
        with np.load(path) as z:
            name = key or ("tokens" if "tokens" in z else (z.files[0] if len(z.files) == 1 else None))
            if name is None or name not in z:
                raise MemtuiError(f"{path}: no array named 'tokens' (it has {', '.join(z.files)}).")
            arr = z[name]
    else:
        arr = np.load(path, allow_pickle=False)
    if arr.ndim != 2:
        raise MemtuiError(f"{path}: expected a 2-D array of token ids, found shape {arr.shape}.")
    return arr


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
    treat = treatment_of_rows(rows, batch_size, macro)
    keep = np.isin(treat, step_list)
    rows, treat = rows[keep], treat[keep]
    if len(rows) == 0:
        raise MemtuiError("no training rows fall into the panel's checkpoint steps; check --steps and --macro.")
    val = load_token_array(validation)
    if n_validation is not None and n_validation < len(val):
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(val), size=n_validation, replace=False))
    else:
        pick = np.arange(len(val))
    val = np.asarray(val[pick])
    width = max(length, val.shape[1])
    tokens = np.full((len(rows) + len(val), width), PAD, dtype=np.int64)
    tokens[: len(rows), :length] = np.asarray(data[rows])
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
    import polars as pl

    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any reader error is a user-facing one-liner
        raise MemtuiError(f"{path}: cannot read parquet ({type(exc).__name__}).") from None
    for col in (tokens_column, treatment_column):
        if col not in df.columns:
            raise MemtuiError(f"{path}: no column '{col}' (it has {', '.join(df.columns)}).")
    seqs = df[tokens_column].to_list()
    ids = df["id"].to_numpy() if "id" in df.columns else None
    return seqs, df[treatment_column].to_numpy(), ids


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

    .parquet: a list column of token ids and a treatment column (optional ``id``); .npz: arrays ``tokens``,
    ``treatment_step`` (or the named column), optional ``lengths`` and ``id``; .npy: the token matrix, with the
    treatment steps in ``treatment_file`` (.npy). ``steps`` defaults to 0 and every treatment step.
    """
    _check_out(out, overwrite)
    path = Path(tokens_file)
    if not path.exists():
        raise MemtuiError(f"{path}: no such token file.")
    ids = lengths = None
    if path.suffix == ".parquet":
        seqs, treat, ids = _read_table(path, treatment_column, tokens_column)
        lengths = np.array([len(s) for s in seqs])
        tokens = np.full((len(seqs), max(lengths.max(), 1)), PAD, dtype=np.int64)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = s
    elif path.suffix == ".npz":
        with np.load(path) as z:
            if tokens_column not in z or treatment_column not in z:
                raise MemtuiError(
                    f"{path}: needs arrays '{tokens_column}' and '{treatment_column}' (it has {', '.join(z.files)})."
                )
            tokens, treat = z[tokens_column], z[treatment_column]
            lengths = z.get("lengths", None)
            ids = z.get("id", None)
    elif path.suffix == ".npy":
        if treatment_file is None:
            raise MemtuiError(f"{path}: an .npy token matrix needs --treatment-file with one step per row.")
        tokens, treat = load_token_array(path), np.load(treatment_file)
    else:
        raise MemtuiError(f"{path}: unsupported token file; use .npy (+ --treatment-file), .npz or .parquet.")
    tokens = np.asarray(tokens)
    treat = np.asarray(treat, dtype=np.int64).reshape(-1)
    if tokens.ndim != 2 or len(tokens) != len(treat):
        raise MemtuiError(f"{path}: {len(treat)} treatment steps for token array of shape {tokens.shape}.")
    if treat.min() < NEVER:
        raise MemtuiError(f"{path}: treatment steps must be >= 0, or -1 for never-trained instances.")
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
        source_index=np.arange(len(treat)),
        tokens=tokens,
        lengths=lengths,
        attrs={"source": f"tokens {path}", **(attrs or {})},
        overwrite=overwrite,
    )
