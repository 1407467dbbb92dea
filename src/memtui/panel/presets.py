"""Import the statistics Lesci et al. released for Pythia, in exactly their schemas (docs/importing.md).

- ``pythia-stats``: one parquet (or CSV) per model size, one row per (sequence, checkpoint): ``seq_idx`` (int32;
  negative = validation, never trained), ``step`` (int32), ``sup_seq`` (mean token surprisal, nats), ``entr_seq``
  (mean entropy), ``acc_seq`` (share of targets with rank 0), ``avg_rank`` (mean 0-based rank).
- ``pythia-tokens``: a folder of parquet files, one per checkpoint (``step{N}`` in the file name), with ``seq_idx`` and
  the per-target lists ``sup``, ``rank`` and ``entropy``; read one record batch at a time, because a real folder
  holds gigabytes.

Both become a long table that :func:`memtui.panel.importing.import_table` checks and writes, with the treatment step
derived from ``seq_idx`` (``pythia_treatment_step``), so every refusal of a plain import applies here too.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.panel import metrics as registry
from memtui.panel.importing import (
    Imported,
    ImportSpec,
    import_table,
    open_regular,
    pythia_treatment_step,
    read_table,
)
from memtui.panel.model import EXTRACTABLE_DEFAULT, NEVER

PRESETS = ("pythia-stats", "pythia-tokens")
# A Pythia training row has 2049 tokens; the first predicts nothing, so 2048 targets. sup_seq is their mean surprisal,
# and the sequence log-likelihood memtui extracts is the sum of their log-probabilities: loglik = -2048 x sup_seq.
PYTHIA_TARGETS = 2048
STATS_COLUMNS = ("seq_idx", "step", "sup_seq", "entr_seq", "acc_seq", "avg_rank")
TOKEN_COLUMNS = ("seq_idx", "sup", "rank", "entropy")
_STEP_IN_NAME = re.compile(r"step(\d+)")
_ROWS_PER_BATCH = 1024  # ~50 MB of float64 per list column of 2048 targets: a real file never sits in memory whole
# read column chunks through a small buffer: a row group can be a whole file of hundreds of MB, and pre-buffering it
# would hold all of it compressed beside the batch being decoded
_READ_BUFFER = 8 << 20


@dataclass(frozen=True)
class PresetImport:
    """What a preset import wrote (``imported``) and what the preset itself had to leave out, for the user to see."""

    imported: Imported
    notes: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return self.imported.path

    def lines(self) -> list[str]:
        return [*self.imported.lines(), *self.notes]


def import_preset(
    name: str,
    source: str | Path,
    out: str | Path,
    *,
    max_step: int | None = None,
    batch_size: int = 1024,
    macro_steps: int = 1000,
    overwrite: bool = False,
) -> PresetImport:
    """Import ``source`` (a file for ``pythia-stats``, a folder for ``pythia-tokens``) as the panel ``out``."""
    if name not in PRESETS:
        raise MemtuiError(f"unknown preset '{clean(name, 60)}'; use one of {', '.join(PRESETS)}.")
    if max_step is not None and max_step < 0:
        raise MemtuiError(f"--max-step must be 0 or more, not {max_step}.")
    source = Path(source)
    if name == "pythia-stats":
        table = stats_table(source)
        if max_step is not None:
            table = table.filter(pl.col("step") <= max_step)
    else:
        table = tokens_table(source, max_step=max_step)
    # the registry's metrics the preset's table maps (stats: the four from the logits; tokens: every one extraction
    # computes, as it computes them), in the registry's order
    metrics = tuple(m for m in registry.NAMES if m in table.columns)
    spec = ImportSpec(
        unit="seq_idx",
        time="step",
        metrics=metrics,
        from_seq_idx=True,
        batch_size=batch_size,
        macro_steps=macro_steps,
    )
    notes = []
    if max_step is not None:
        table, dropped = drop_after_last_checkpoint(table, max_step, batch_size, macro_steps)
        if dropped:
            notes.append(
                f"--max-step {max_step}: left out {dropped} instances first trained on after the last kept checkpoint "
                "(they cannot be estimated, and were trained on, so they are not controls)"
            )
    attrs = {"source": f"{name} {source}" + (f" (steps <= {max_step})" if max_step is not None else "")}
    done = import_table(table, out, spec, overwrite=overwrite, attrs=attrs)
    return PresetImport(done, tuple(notes))


def drop_after_last_checkpoint(
    table: pl.DataFrame, max_step: int, batch_size: int, macro_steps: int
) -> tuple[pl.DataFrame, int]:
    """The table without the instances treated after its last checkpoint, and how many instances that removed.

    Such an instance was trained on (so it must not become a control) but never observed treated (so it has no cell
    to estimate): keeping it only adds instances no estimate uses.
    """
    if table.height == 0:
        raise MemtuiError(f"no checkpoint at or before --max-step {max_step}; raise it.")
    last = table["step"].max()
    seq = table["seq_idx"].cast(pl.Float64).to_numpy()
    g = pythia_treatment_step(seq, batch_size, macro_steps)
    treated = g != NEVER
    late = treated & (g > last)
    if not late.any():
        return table, 0
    if late[treated].all():  # what is wrong is the step, not the treatment values it leaves behind
        first = int(g[treated].min())
        raise MemtuiError(
            f"--max-step {max_step} is before the first cohort: no instance is trained on until the checkpoint at "
            f"step {first}, so no kept checkpoint sees one trained; raise --max-step to {first} or more."
        )
    return table.filter(pl.Series(~late)), int(np.unique(seq[late]).size)


def _numeric(table: pl.DataFrame, columns, source: Path) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        shown = ", ".join(clean(c, 40) for c in table.columns[:12])
        raise MemtuiError(
            f"{source}: no column {', '.join(missing)} for this preset (it has {shown}); expected {', '.join(columns)}."
        )
    for c in columns:
        if not table[c].dtype.is_numeric():
            raise MemtuiError(f"{source}: column '{c}' must hold numbers, not {table[c].dtype}; fix the file.")


def stats_table(source: Path) -> pl.DataFrame:
    """The per-instance statistics as memtui's metrics: seq_idx, step, loglik, accuracy, rank, entropy."""
    table = read_table(source)
    _numeric(table, STATS_COLUMNS, source)
    return table.select(
        "seq_idx",
        "step",
        loglik=-PYTHIA_TARGETS * pl.col("sup_seq").cast(pl.Float64),
        accuracy=pl.col("acc_seq").cast(pl.Float64),
        rank=pl.col("avg_rank").cast(pl.Float64),
        entropy=pl.col("entr_seq").cast(pl.Float64),
    )


# ------------------------------------------------------------------------------------------ per-token statistics


def checkpoint_files(folder: Path, max_step: int | None = None) -> list[tuple[int, Path]]:
    """(step, file) for every parquet file under ``folder`` (sub-folders too), in step order; the step is the last
    ``step{N}`` in the file's name, else in its path below ``folder``."""
    if not folder.exists():
        raise MemtuiError(f"{folder}: no such folder; give the folder of per-checkpoint parquet files.")
    if not folder.is_dir():
        raise MemtuiError(f"{folder} is a file; --preset pythia-tokens reads a folder of per-checkpoint parquet files.")
    found: dict[int, Path] = {}
    for path in sorted(folder.rglob("*.parquet")):
        _require_regular(path)
        steps = _STEP_IN_NAME.findall(path.name) or _STEP_IN_NAME.findall(str(path.relative_to(folder)))
        if not steps:
            raise MemtuiError(f"{clean(path)}: no 'step<N>' in its name, so its checkpoint is unknown; rename it.")
        step = int(steps[-1])
        if step in found:
            raise MemtuiError(f"two files for checkpoint {step}: {clean(found[step])} and {clean(path)}; keep one.")
        found[step] = path
    if not found:
        raise MemtuiError(f"{folder}: no .parquet files in it (or below it).")
    kept = sorted((s, p) for s, p in found.items() if max_step is None or s <= max_step)
    if not kept:
        raise MemtuiError(f"{folder}: no checkpoint at or before --max-step {max_step} (first: {min(found)}).")
    return kept


def _require_regular(path: Path) -> None:
    """Refuse anything but a regular file (a link to one is fine): opening a FIFO for reading waits for a writer
    forever, a device may block or never end, and a folder or a dangling link is no checkpoint file either."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise MemtuiError(
            f"{clean(path)} is not a regular file ({clean(exc.strerror or exc, 80)}); remove it."
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a device or socket"
        raise MemtuiError(f"{clean(path)} is not a regular file ({kind}); remove it or rename it without .parquet.")


_TARGETS = "_targets"  # each row's list length, carried beside the metrics to check it across checkpoints


def tokens_table(folder: Path, max_step: int | None = None) -> pl.DataFrame:
    """The per-instance metrics of every checkpoint file, computed record batch by record batch."""
    frames = [checkpoint_frame(path, step) for step, path in checkpoint_files(folder, max_step)]
    table = pl.concat(frames, how="vertical_relaxed")
    _check_lengths(table)
    return table.drop(_TARGETS)


def _check_lengths(table: pl.DataFrame) -> None:
    """Refuse an instance whose lists have another length at another checkpoint: each checkpoint must score the same
    targets of it, or its metrics (a sum over targets, a share of them) are not comparable across checkpoints and the
    estimate measures the change of length. A missing list (null or empty) is a missing value, not a length."""
    scored = table.filter(pl.col(_TARGETS) > 0)
    spread = scored.group_by("seq_idx").agg(
        pl.col(_TARGETS).min().alias("shortest"), pl.col(_TARGETS).max().alias("longest")
    )
    bad = spread.filter(pl.col("shortest") != pl.col("longest")).sort("seq_idx")
    if bad.height:
        first = bad.row(0, named=True)
        steps = scored.filter(pl.col("seq_idx") == first["seq_idx"]).sort("step")
        seen = ", ".join(f"{n} at step {s}" for s, n in zip(steps["step"], steps[_TARGETS], strict=True))
        raise MemtuiError(
            f"{bad.height} instance{'s have' if bad.height > 1 else ' has'} lists of different lengths at different "
            f"checkpoints (seq_idx {first['seq_idx']}: {clean(seen, 200)}); every checkpoint must score the same "
            "targets of an instance: re-extract the checkpoints that differ."
        )


def checkpoint_frame(path: Path, step: int) -> pl.DataFrame:
    """seq_idx, step, the per-instance metrics and each row's list length of one checkpoint's per-token file."""
    source = open_regular(path)
    try:
        return _read_frame(source, path, step)
    finally:
        source.close()


def _read_frame(source, path: Path, step: int) -> pl.DataFrame:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(source, buffer_size=_READ_BUFFER, pre_buffer=False)
        names = reader.schema_arrow.names
    except Exception as exc:  # noqa: BLE001 - any reader error is a one-line refusal
        raise MemtuiError(f"{clean(path)}: cannot read it as parquet ({clean(type(exc).__name__)}).") from None
    missing = [c for c in TOKEN_COLUMNS if c not in names]
    if missing:
        raise MemtuiError(
            f"{clean(path)}: no column {', '.join(missing)} (it has {clean(', '.join(names[:12]), 200)}); "
            f"expected {', '.join(TOKEN_COLUMNS)}."
        )
    index_type = reader.schema_arrow.field("seq_idx").type
    if not pa.types.is_integer(index_type):
        raise MemtuiError(f"{clean(path)}: column 'seq_idx' must hold whole training-order indices, not {index_type}.")
    parts = []
    try:
        for batch in reader.iter_batches(batch_size=_ROWS_PER_BATCH, columns=list(TOKEN_COLUMNS)):
            metrics = instance_metrics(*(batch.column(c) for c in ("sup", "rank", "entropy")), where=path)
            ids = pl.from_arrow(batch.select(["seq_idx"])).to_series()
            targets = pc.list_value_length(batch.column("sup")).fill_null(0).to_numpy(zero_copy_only=False)
            frame = {"seq_idx": ids, "step": np.full(batch.num_rows, step), **metrics, _TARGETS: targets}
            parts.append(pl.DataFrame(frame))
    except MemtuiError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged file fails mid-read: one line, not a traceback
        raise MemtuiError(f"{clean(path)}: cannot read it ({clean(type(exc).__name__)}); is it damaged?") from None
    if not parts:
        raise MemtuiError(f"{clean(path)}: no rows.")
    return pl.concat(parts)


def _flat(arr, name: str, where: Path) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (values float64 of every row one after another, length of each row; 0 for a missing list)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)):
        raise MemtuiError(f"{clean(where)}: column '{name}' must hold a list per row, not {arr.type}.")
    inner = arr.type.value_type
    if not (pa.types.is_integer(inner) or pa.types.is_floating(inner)):
        raise MemtuiError(f"{clean(where)}: column '{name}' must hold lists of numbers, not {arr.type}.")
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = arr.flatten()  # the values of the non-null lists, in row order, slicing respected
    if values.null_count:
        raise MemtuiError(f"{clean(where)}: column '{name}' has {values.null_count} empty entries inside its lists.")
    return values.to_numpy(zero_copy_only=False).astype(np.float64), lengths


def _row_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths))
    full = lengths > 0
    if full.any():  # reduceat over the non-empty rows' starts: each sums up to the next one's start
        out[full] = np.add.reduceat(values, (np.cumsum(lengths) - lengths)[full])
    return out


def instance_metrics(sup, rank, entropy, *, where: Path, kl: tuple[int, int] = EXTRACTABLE_DEFAULT) -> dict:
    """memtui's per-instance metrics from per-target lists, as the extraction computes them (extract/scoring.py).

    Target j of a list is the prediction of token j + 1 from tokens 0..j (the authors' ``logits[:-1]`` against
    ``input_ids[1:]``), and their rank counts the vocabulary entries with a strictly greater log-probability, memtui's
    tie rule; so the (k, l)-extractability flags are exactly the rank-0 flags of targets k-1 .. k+l-2.
    """
    s, n = _flat(sup, "sup", where)
    r, n_rank = _flat(rank, "rank", where)
    e, n_ent = _flat(entropy, "entropy", where)
    if not (np.array_equal(n, n_rank) and np.array_equal(n, n_ent)):
        bad = int(np.sum((n != n_rank) | (n != n_ent)))
        raise MemtuiError(f"{clean(where)}: {bad} rows have sup, rank and entropy lists of different lengths.")
    top1 = (r == 0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        count = n.astype(np.float64)
        out = {
            "loglik": -_row_sums(s, n),
            "accuracy": _row_sums(top1, n) / count,
            "rank": _row_sums(r, n) / count,
            "entropy": _row_sums(e, n) / count,
        }
    out["loglik"][n == 0] = np.nan
    k, ell = kl
    full = n >= k + ell - 1  # the whole suffix (tokens k+1 .. k+l) is there
    start = np.cumsum(n) - n
    idx = start[full, None] + (k - 1) + np.arange(ell)[None, :]
    run = np.full(len(n), np.nan)
    run[full] = np.cumprod(r[idx] == 0, axis=1).sum(axis=1)
    out["extractable_len"] = run
    out["extractable"] = np.where(np.isnan(run), np.nan, run == ell)
    return out
