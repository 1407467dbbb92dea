"""The standard per-instance covariates, computed from a panel's own tokens, its provenance, a training corpus and a
user's table (``memtui covariates``; stored by :func:`memtui.panel.covariates.write_covariates`).

- ``length``: the row's non-padding tokens (``instances/length``).
- ``zlib``: the row's compression ratio, len(raw) / len(zlib.compress(raw, 9)), where raw is the row's non-padding
  token ids as little-endian unsigned integers of the panel's token width (uint16 where every id in the panel is
  below 2**16, as for GPT-NeoX/Pythia, else uint32). Higher = more repetitive. Rows of no token: NaN.
- ``source``: the domain the build recorded (``provenance/source``; text, "" unknown).
- ``duplicates``: Hubble's insertion dose, the copies inserted (``provenance/duplicates``).
- ``duplicates_exact``: occurrences of the row's whole token sequence in the corpus (its own occurrence included:
  a training instance found once in the training corpus has 1; 0 means the sequence is not in the files as given).
- ``ngram13_seen``: the share of the row's 13-gram windows (each window once, L − 12 of them) whose 13-gram occurs
  in the corpus **outside this row**: where the row's whole sequence is in the corpus (``duplicates_exact`` >= 1),
  one copy of the row is taken off each count (count − occurrences of that 13-gram within the row), so a 13-gram
  counts as seen only if it occurs somewhere other than the row's own occurrence. Where the row is not found whole
  nothing is taken off (its own occurrence, if the corpus holds it split, cannot be told apart). Rows shorter than
  13 tokens: NaN.
- any column of a table (``--from``), joined on the instance id.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.panel.model import Panel
from memtui.panel.names import check_covariate_name

NGRAM = 13
TOKEN_COVARIATES = ("length", "zlib")
PROVENANCE_COVARIATES = ("source", "duplicates", "exposures")
CORPUS_COVARIATES = ("duplicates_exact", f"ngram{NGRAM}_seen")
STANDARD = (*TOKEN_COVARIATES, *PROVENANCE_COVARIATES, *CORPUS_COVARIATES)


def rows(tokens: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Each row's non-padding tokens."""
    return [tokens[i, : int(lengths[i])] for i in range(len(lengths))]


def token_width(tokens: np.ndarray, lengths: np.ndarray) -> np.dtype:
    """The narrowest little-endian unsigned integer holding every token id of the panel: what ``zlib`` compresses."""
    valid = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
    top = int(tokens[valid].max()) if valid.any() else 0
    return np.dtype("<u2") if top < 2**16 else np.dtype("<u4")


def zlib_ratio(row: np.ndarray, width: np.dtype) -> float:
    """len(raw) / len(zlib.compress(raw, 9)) of the row's token ids as ``width`` bytes; NaN for an empty row."""
    if not len(row):
        return float("nan")
    raw = np.asarray(row).astype(width).tobytes()
    return len(raw) / len(zlib.compress(raw, 9))


def token_covariates(tokens: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """``length`` and ``zlib`` of every row."""
    width = token_width(tokens, lengths)
    return {
        "length": np.asarray(lengths, dtype=np.float64),
        "zlib": np.array([zlib_ratio(r, width) for r in rows(tokens, lengths)]),
    }


def provenance_covariates(panel: Panel) -> dict[str, np.ndarray]:
    """``source``, ``duplicates`` and ``exposures`` where the panel's build recorded them (one value per instance)."""
    out = {}
    source = panel.provenance.get("source")
    if source is not None and source.ndim == 1:
        out["source"] = np.array([str(v) for v in source], dtype=object)
    for name in ("duplicates", "exposures"):  # Hubble's insertions; the Nanoset's repeats (issue 30)
        dose = panel.provenance.get(name)
        if dose is not None and dose.ndim == 1:
            out[name] = np.asarray(dose, dtype=np.float64)
    return out


def corpus_covariates(
    tokens: np.ndarray, lengths: np.ndarray, count: Callable[[Sequence[int]], int], progress=None
) -> dict[str, np.ndarray]:
    """``duplicates_exact`` and ``ngram13_seen`` of every row, ``count(sequence)`` giving its occurrences in the
    corpus (:class:`memtui.orders.ngrams.CorpusCounts`; the module docstring says what each means)."""
    all_rows = rows(tokens, lengths)
    exact = np.zeros(len(all_rows))
    seen = np.full(len(all_rows), np.nan)
    for i, row in enumerate(all_rows):
        exact[i] = count(row.tolist()) if len(row) else 0
        seen[i] = _seen_share(row, count, own=exact[i] >= 1)
        if progress is not None:
            progress(i + 1, len(all_rows))
    return {"duplicates_exact": exact, f"ngram{NGRAM}_seen": seen}


def _seen_share(row: np.ndarray, count: Callable[[Sequence[int]], int], *, own: bool) -> float:
    """The share of the row's 13-gram windows whose 13-gram occurs in the corpus beyond the row's own copy."""
    if len(row) < NGRAM:
        return float("nan")
    windows = [tuple(w) for w in np.lib.stride_tricks.sliding_window_view(row, NGRAM).tolist()]
    inside = Counter(windows)  # each distinct 13-gram is counted once in the corpus
    seen = {g: count(list(g)) - (inside[g] if own else 0) > 0 for g in inside}
    return sum(inside[g] for g in inside if seen[g]) / len(windows)


def table_covariates(path: str | os.PathLike, ids: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
    """Every column but ``id`` of a parquet or CSV table, in the panel's instance order, and how many of the panel's
    instances the table lacks (their values are NaN or ""). An id the panel does not have is refused."""
    frame = _read_table(Path(path))
    _check_names(frame.columns, path)
    if "id" not in frame.columns:
        raise MemtuiError(f"{path}: no column 'id' (the instance id to join on); it has {', '.join(frame.columns)}.")
    if len(frame.columns) < 2:
        raise MemtuiError(f"{path}: no columns besides 'id'; every other column is a covariate.")
    table_ids = _table_ids(frame["id"], path)
    if len(np.unique(table_ids)) != len(table_ids):
        raise MemtuiError(f"{path}: instance ids repeat in column 'id'; give one row per instance.")
    order = np.argsort(ids)
    at = np.searchsorted(ids, table_ids, sorter=order).clip(0, len(ids) - 1)
    row_of = order[at]
    unknown = ids[row_of] != table_ids
    if unknown.any():
        raise MemtuiError(
            f"{path}: {int(unknown.sum())} ids are not instances of the panel (the first: {table_ids[unknown][0]})."
        )
    out = {}
    for name in frame.columns:
        if name != "id":
            out[name] = _column_in_panel_order(frame[name], row_of, len(ids), f"{path}: column '{clean(name, 40)}'")
    return out, len(ids) - len(table_ids)


def _read_table(path: Path):
    import polars as pl

    input_file(path, "table file")  # a folder, a FIFO or a device is refused, not read
    if path.suffix.lower() != ".parquet":
        _check_names(_csv_header(path), path)  # polars renames a repeated column (x, x -> x, x_duplicated_0)
    try:
        if path.suffix.lower() == ".parquet":
            return pl.read_parquet(path)
        return pl.read_csv(path, infer_schema_length=None)
    except Exception as exc:  # noqa: BLE001 - whatever the reader raises on a bad file is a one-line refusal
        reason = clean((str(exc).strip().splitlines() or [type(exc).__name__])[0], 160)
        raise MemtuiError(f"{path} cannot be read as a {'parquet' if path.suffix == '.parquet' else 'CSV'} table "
                          f"({reason}).") from None  # fmt: skip


def _csv_header(path: Path) -> list[str]:
    """The column names of a CSV table as its first record gives them (quotes and all), before any renaming."""
    import csv

    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        try:
            return next(csv.reader(f), [])
        except csv.Error:
            return []  # the reader refuses it next, with its own reason


def _check_names(names, path) -> None:
    """Each column once, and every covariate named by the one rule every option that names a covariate follows."""
    seen = set()
    for name in names:
        if name in seen:
            raise MemtuiError(f"{path}: the column '{clean(name, 40)}' appears twice; give each column once.")
        seen.add(name)
        if name != "id":
            check_covariate_name(name, f"{path}: column")


def _table_ids(column, path) -> np.ndarray:
    import polars as pl

    if column.null_count() or not column.dtype.is_integer():
        raise MemtuiError(f"{path}: column 'id' must hold whole-number instance ids, without empty cells.")
    try:  # a table's integers may be wider than the panel's int64 ids (i128, u64): such an id is no instance
        return column.cast(pl.Int64, strict=True).to_numpy()
    except pl.exceptions.PolarsError:
        big = column.cast(pl.Float64).abs().max()
        raise MemtuiError(
            f"{path}: column 'id' holds an id beyond int64 (about {big:.3g}); panel ids are 64-bit integers."
        ) from None


def _column_in_panel_order(column, row_of: np.ndarray, n: int, where: str) -> np.ndarray:
    """A table column moved to the panel's rows: numbers as float64 (NaN missing), anything else as text ("")."""
    import polars as pl

    if column.dtype.is_numeric() or column.dtype == pl.Boolean:
        out = np.full(n, np.nan)
        out[row_of] = column.cast(float).fill_null(float("nan")).to_numpy()
        if np.isinf(out).any():
            raise MemtuiError(f"{where} holds infinite values.")
        return out
    out = np.full(n, "", dtype=object)
    out[row_of] = [("" if v is None else str(v)) for v in column.to_list()]
    return out


def compute_covariates(
    panel: Panel,
    *,
    corpus: Sequence[str] = (),
    table: str | os.PathLike | None = None,
    only: Sequence[str] | None = None,
    corpus_dtype: str | None = None,
    index_dir: str | os.PathLike | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, np.ndarray]:
    """The covariates of ``panel`` (read with :func:`memtui.panel.hdf5.read_panel`) that its tokens, provenance,
    ``corpus`` token files and ``table`` give, restricted to ``only`` where given (a name none of them gives is
    refused). The standard ones need the panel's token ids; the corpus ones need ``corpus``."""
    wanted = set(only) if only else None
    out: dict[str, np.ndarray] = {}
    tokens = lengths = None
    if panel.has_tokens and (wanted is None or wanted & {*TOKEN_COVARIATES, *CORPUS_COVARIATES}):
        from memtui.panel.hdf5 import read_tokens

        tokens, lengths = read_tokens(panel.path)
        out.update(token_covariates(tokens, lengths))
    out.update(provenance_covariates(panel))
    if corpus and (wanted is None or wanted & set(CORPUS_COVARIATES)):
        if tokens is None:
            raise MemtuiError(f"{panel.path}: the panel stores no token ids, so nothing can be counted in a corpus.")
        from memtui.orders.ngrams import CorpusCounts, rust_panics

        counts = CorpusCounts(corpus, dtype=corpus_dtype, index_dir=index_dir, log=log)
        log(f"counting {len(lengths):,} rows and their {NGRAM}-grams in {counts.n_tokens:,} corpus tokens")
        with rust_panics(counts.indexes):  # a table that loads but is damaged further in panics while counting
            out.update(corpus_covariates(tokens, lengths, counts.count))
    if table is not None:
        columns, missing = table_covariates(table, panel.ids)
        if missing:
            log(f'{table}: {missing} of the panel\'s {panel.n_instances} instances are not in the table (NaN or "")')
        out.update(columns)
    if wanted is not None:
        absent = sorted(wanted - set(out))
        if absent:
            raise MemtuiError(
                f"--only: {', '.join(absent)} cannot be computed for {panel.path} ({_why(absent[0], panel, corpus)})."
            )
        out = {k: v for k, v in out.items() if k in wanted}
    if not out:
        raise MemtuiError(f"{panel.path}: no covariate can be computed: {_why('length', panel, corpus)}.")
    return out


def _why(name: str, panel: Panel, corpus: Sequence[str]) -> str:
    """Why the covariate ``name`` is not available for the panel."""
    if name in TOKEN_COVARIATES or (name in CORPUS_COVARIATES and corpus):
        return "the panel stores no token ids; pass --from TABLE" if not panel.has_tokens else "no such covariate"
    if name in CORPUS_COVARIATES:
        return "pass the training corpus with --corpus"
    if name in PROVENANCE_COVARIATES:
        return f"the panel's build recorded no provenance '{name}'"
    return f"not a standard covariate ({', '.join(STANDARD)}) nor a column of --from"


def store_covariates(path: str | os.PathLike, columns: dict[str, np.ndarray], *, replace: bool = False) -> None:
    """:func:`write_covariates`, holding the extraction's commit lease where the panel has an extraction folder, so
    no commit starts while the panel is replaced."""
    from memtui.extract.commit import Lease
    from memtui.extract.units import Owner, WorkDir, work_dir
    from memtui.panel.covariates import write_covariates

    if not work_dir(path).is_dir():
        write_covariates(path, columns, replace=replace)
        return
    lease = Lease(WorkDir(path), Owner.me())
    if not lease.acquire():
        raise MemtuiError(f"{path}: an extraction is committing into it; add covariates when it has finished.")
    try:
        write_covariates(path, columns, replace=replace)
    finally:
        lease.release()
