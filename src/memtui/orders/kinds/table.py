"""``--tokens FILE`` (no --order): a token table that already gives each row's treatment step (.parquet, .npz, or an
.npy matrix with --treatment-file), such as the panel Lesci et al. released. Nothing is sampled: every row is an
instance."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.orders.arrays import (
    check_token_range,
    lengths_from_padding,
    load_array,
    load_token_array,
    npz_member,
    token_matrix,
)
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default
from memtui.panel.model import NEVER, PAD

_TOKENS_DEFAULT = "tokens"  # build's --tokens-column default
PYTHIA_TOKENS, PYTHIA_INDEX = "input_ids", "seq_idx"  # the columns of the panel Lesci et al. released


@dataclass(frozen=True)
class Table(OrderBase):
    name = "table"
    title = "--order table (the default with --tokens FILE: token ids whose treatment steps are given)"
    description = (
        "--tokens FILE: .npz, .parquet, or .npy with --treatment-file; --steps: the panel's checkpoints [default: 0 "
        "and every treatment step]."
    )
    shared = frozenset({"tokens", "steps"})
    selected_by = "tokens"  # --tokens without --order builds a table

    tokens: Path | None = None
    treatment_column: str = "treatment_step"
    tokens_column: str = _TOKENS_DEFAULT
    treatment_file: Path | None = None

    def add_arguments(self, group) -> None:
        group.add_argument(
            "--treatment-column",
            help="column of a --tokens table holding each row's treatment step (derived from seq_idx when the table "
            "has that column instead, as in Lesci et al.'s release) [default: treatment_step]",
        )
        group.add_argument(
            "--tokens-column",
            help="column of a --tokens table holding each row's token ids (input_ids when the table has that "
            "instead) [default: tokens]",
        )
        group.add_argument("--treatment-file", type=Path, help="treatment steps (.npy) for an .npy token matrix")

    def check(self, args: argparse.Namespace) -> Table:
        if not args.tokens:
            raise MemtuiError("--order table needs --tokens FILE (.npz, .parquet, or .npy with --treatment-file).")
        return replace(
            self,
            tokens=Path(args.tokens),
            treatment_file=args.treatment_file,
            treatment_column=or_default(args.treatment_column, "treatment_step"),
            tokens_column=or_default(args.tokens_column, _TOKENS_DEFAULT),
        )

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        path = input_file(self.tokens, "token file")
        tokens, treat, ids, lengths, source = _read_token_file(
            path, self.treatment_column, self.tokens_column, self.treatment_file
        )
        tokens, treat, lengths = _checked_token_rows(tokens, treat, lengths, path)
        check_token_range(tokens, lengths, path)
        step_list = sorted({0, *treat[treat >= 0].tolist()}) if spec.steps is None else list(spec.steps)
        return [
            Instances(
                ids=np.arange(len(treat)) if ids is None else ids,
                treatment=treat,
                steps=step_list,
                tokens=tokens,
                lengths=lengths,
                source_index=np.arange(len(treat)) if source is None else source,
                attrs={"source": f"tokens {path}"},
                checked=False,
            )
        ]


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


def _read_token_file(path: Path, treatment_column: str, tokens_column: str, treatment_file):
    """(tokens, treatment, ids, lengths, source rows) as stored in a .parquet, .npz or .npy (+ treatment file);
    ids, lengths and source are None where the file does not give them."""
    ids = lengths = source = None
    if path.suffix == ".parquet":
        seqs, treat, ids, source = _read_table(path, treatment_column, tokens_column)
        lengths = np.array([len(s) for s in seqs])
        tokens = np.full((len(seqs), max(lengths.max(), 1)), PAD, dtype=np.int64)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = s
    elif path.suffix == ".npz":
        z = load_array(path)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise MemtuiError(f"{path}: not an .npz archive.")
        with z:
            if tokens_column not in z or treatment_column not in z:
                raise MemtuiError(
                    f"{path}: needs arrays '{clean(tokens_column, 60)}' and '{clean(treatment_column, 60)}' "
                    f"(it has {clean(', '.join(z.files), 200)})."
                )
            tokens, treat = npz_member(z, tokens_column, path), npz_member(z, treatment_column, path)
            lengths = npz_member(z, "lengths", path) if "lengths" in z else None
            ids = npz_member(z, "id", path) if "id" in z else None
    elif path.suffix == ".npy":
        if treatment_file is None:
            raise MemtuiError(f"{path}: an .npy token matrix needs --treatment-file with one step per row.")
        tokens, treat = load_token_array(path), load_array(input_file(treatment_file, "treatment file"))
    else:
        raise MemtuiError(f"{path}: unsupported token file; use .npy (+ --treatment-file), .npz or .parquet.")
    return tokens, treat, ids, lengths, source


def _checked_token_rows(tokens, treat, lengths, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, whole treatment steps (>= -1) one per row, and each row's length (from padding if not given)."""
    tokens = token_matrix(tokens, path)
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
    lengths = lengths_from_padding(tokens) if lengths is None else np.asarray(lengths).reshape(-1)
    if (
        len(lengths) != len(tokens)
        or lengths.dtype.kind not in "iu"
        or lengths.min() < 1
        or lengths.max() > tokens.shape[1]
    ):
        raise MemtuiError(f"{path}: 'lengths' must give each row's length, 1 .. {tokens.shape[1]}.")
    return tokens, treat, lengths
