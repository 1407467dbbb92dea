"""Build a panel from a long-format table (CSV or parquet): one row per (unit, time) with metric columns.

Works for language-model statistics computed elsewhere (e.g. Pythia ``seq_idx, step, <metrics>``, with the treatment
step derived from ``seq_idx``) and for ordinary economics panels (unit, year, first-treated year, outcome).

A table is data anyone may have written, so the import refuses (one line, nothing written) whatever it would otherwise
have to guess at: a missing or non-numeric treatment, fractional or negative steps, metric cells that are not
numbers, a panel without controls. The rules are in docs/panel-format.md ("Importing a table").
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.memory import require_memory, require_shape
from memtui.core.text import clean
from memtui.panel import metrics as registry
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER

# Steps and treatment values are read through float64 where the column is not integer: beyond 2^53 a float no longer
# holds every whole number, so a larger value could silently become another step.
_EXACT = 2.0**53
# batch_size * macro_steps bounds the step arithmetic of --from-seq-idx; keep (index // it + 1) * macro_steps in int64.
_MAX_MACRO_BATCH = 2**62
_SHOWN_COLUMNS = 12
_TREATMENT_STEPS = "integer treatment steps"
FOLDED_RULE = "each counts from the next checkpoint"  # docs/panel-format.md, "Treatment steps"


@dataclass(frozen=True)
class ImportSpec:
    unit: str = "seq_idx"
    time: str = "step"
    treatment: str | None = None  # column with the treatment step; None with from_seq_idx
    metrics: tuple[str, ...] = ()  # default: every other numeric column
    never_values: tuple[float, ...] = ()  # treatment values meaning "never treated", besides the format's -1
    from_seq_idx: bool = False  # derive the treatment step from the unit (a Pythia training-order index)
    batch_size: int = 1024
    macro_steps: int = 1000
    lower_is_better: tuple[str, ...] = ()
    drop_missing_treatment: bool = False  # leave out units with an empty treatment instead of refusing the table


@dataclass(frozen=True)
class Imported:
    """What an import wrote, and what it left out or had to interpret, for the user to see."""

    path: Path
    n_units: int
    n_treated: int
    n_cohorts: int
    n_checkpoints: int
    metrics: tuple[str, ...]
    dropped_units: int = 0
    dropped_rows: int = 0
    folded: int = 0
    skipped: tuple[str, ...] = ()
    numbered: bool = False  # unit ids were not integers: instances are numbered in the sorted order of the ids
    inferred: bool = False  # the metrics were not named: every other numeric column was taken

    def lines(self) -> list[str]:
        never = self.n_units - self.n_treated
        out = [
            f"wrote {self.path}: {self.n_units} instances ({self.n_treated} treated in {self.n_cohorts} cohorts, "
            f"{never} never treated), {self.n_checkpoints} checkpoints, metrics {', '.join(map(clean, self.metrics))}"
        ]
        if self.inferred:  # a numeric column that is no outcome (a treated dummy, a covariate) would become one
            out.append(
                f"took as metrics every numeric column besides the unit, time and treatment: "
                f"{', '.join(map(clean, self.metrics))}; name the outcomes with --metrics to leave others out"
            )
        if self.dropped_units:
            out.append(f"dropped {self.dropped_units} units ({self.dropped_rows} rows) with no treatment value")
        if self.folded:
            out.append(f"{self.folded} instances have a treatment step between checkpoints: {FOLDED_RULE}")
        if self.skipped:
            out.append(f"not imported (not numeric): {', '.join(clean(c, 60) for c in self.skipped)}")
        if self.numbered:
            out.append("unit ids are not 64-bit integers: instances are numbered 0.. in the sorted order of the ids")
        return out


def count_folded(treatment: np.ndarray, steps: np.ndarray) -> int:
    """Treated instances whose step is no checkpoint but has one after it: the documented rule maps them forward."""
    from memtui.engine.layout import folded

    return int(folded(np.asarray(treatment), np.asarray(steps), NEVER).sum()) if len(steps) else 0


def pythia_treatment_step(seq_idx: np.ndarray, batch_size: int = 1024, macro_steps: int = 1000) -> np.ndarray:
    """First checkpoint that has trained on the sequence at ``seq_idx`` of the training order.

    Row r is in batch r // batch_size; checkpoints are saved every ``macro_steps`` steps, so the first checkpoint that
    has seen it is the end of its macro-batch: (r // (batch_size * macro_steps) + 1) * macro_steps. Negative or missing
    indices (validation data) are never treated.
    """
    seq = np.asarray(seq_idx, dtype=float)
    out = np.full(seq.shape, NEVER, dtype=np.int64)
    ok = np.isfinite(seq) & (seq >= 0)
    out[ok] = (seq[ok].astype(np.int64) // (batch_size * macro_steps) + 1) * macro_steps
    return out


def read_table(path: str | Path) -> pl.DataFrame:
    """The table at ``path`` (parquet by suffix, else CSV), refusing anything that is not a non-empty table file."""
    path = Path(path)
    if not path.exists():
        raise MemtuiError(f"{path}: no such file; give the CSV or parquet table to import.")
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder; give the CSV or parquet file inside it.")
    if not path.is_file():
        raise MemtuiError(f"{path} is not a regular file (a device or a pipe); save the table to a file first.")
    if path.stat().st_size == 0:
        raise MemtuiError(f"{path} is empty; expected a CSV or parquet table with a header row.")
    table = _parse(path)
    if table.height == 0:
        raise MemtuiError(f"{path} has no rows (a header only?); expected one row per unit and time.")
    return table


def open_regular(path: Path):
    """``path`` opened for reading only if it is a regular file, without ever blocking: a FIFO opened for reading
    waits for a writer forever, and a check before the open leaves a moment in which the file can be swapped for one.
    O_NONBLOCK makes that open return at once; fstat of what was opened then decides."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise MemtuiError(f"{clean(path)}: cannot open it ({clean(exc.strerror or exc, 80)}).") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise MemtuiError(f"{clean(path)} is not a regular file (a device or a pipe); save the table to a file first.")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _parse(path: Path) -> pl.DataFrame:
    try:
        with open_regular(path) as source:
            if path.suffix in (".parquet", ".pq"):
                return pl.read_parquet(source)
            # the whole column decides its type, so one bad cell far down is reported by name, not as a parse
            # error; NA is how R writes a missing value
            return pl.read_csv(source, infer_schema_length=None, null_values=["NA"])
    except MemtuiError:
        raise
    except (Exception, pl.exceptions.PanicException) as exc:  # a hostile file can make the reader panic
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MemtuiError(f"{path}: cannot read the table ({clean(first, 160)}); expected CSV or parquet.") from None


def check_spec(spec: ImportSpec) -> None:
    """Options that no table can make right, refused before the table is read."""
    if spec.treatment is None and not spec.from_seq_idx:
        raise MemtuiError("say where treatment steps come from: --treatment COLUMN or --from-seq-idx.")
    if spec.treatment is not None and spec.from_seq_idx:
        raise MemtuiError("pass either --treatment COLUMN or --from-seq-idx, not both.")
    for name, value in (("--batch-size", spec.batch_size), ("--macro-steps", spec.macro_steps)):
        if value < 1:
            raise MemtuiError(f"{name} must be a positive whole number, not {value}.")
    if spec.batch_size * spec.macro_steps > _MAX_MACRO_BATCH:
        raise MemtuiError("--batch-size x --macro-steps is larger than any training run; check both values.")
    if any(np.isnan(v) for v in spec.never_values):
        raise MemtuiError(
            "--never-value nan matches nothing; an empty treatment is missing, see --drop-missing-treatment."
        )


def _columns(table: pl.DataFrame) -> str:
    shown = [clean(c, 60) for c in table.columns[:_SHOWN_COLUMNS]]
    more = len(table.columns) - _SHOWN_COLUMNS
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _check_roles(table: pl.DataFrame, spec: ImportSpec) -> None:
    roles = {"--unit": spec.unit, "--time": spec.time, "--treatment": spec.treatment}
    for option, col in roles.items():
        if col is not None and col not in table.columns:
            raise MemtuiError(
                f"the table has no column '{clean(col, 60)}' for {option} (columns: {_columns(table)}); see --help."
            )
    named = [c for c in roles.values() if c is not None]
    if len(set(named)) != len(named):
        raise MemtuiError("--unit, --time and --treatment must name different columns.")


def _check_metric_name(name: str) -> None:
    why = None
    if name in ("", ".") or "/" in name:
        why = "empty, '.' or containing '/'"
    elif clean(name, limit=None) != name:
        why = "it contains control characters"
    if why:
        raise MemtuiError(
            f"column '{clean(name, 60)}' cannot name a metric ({why}); rename it, or pick metrics with --metrics."
        )


def _metric_names(table: pl.DataFrame, spec: ImportSpec) -> tuple[list[str], list[str]]:
    """The metric columns to import and the other columns left out because they are not numeric."""
    roles = {spec.unit, spec.time, spec.treatment}
    if spec.metrics:
        metrics = list(dict.fromkeys(spec.metrics))
        missing = [m for m in metrics if m not in table.columns]
        if missing:
            raise MemtuiError(
                f"no metric column {', '.join(clean(m, 60) for m in missing)} in the table "
                f"(columns: {_columns(table)})."
            )
        clash = [m for m in metrics if m in roles]
        if clash:
            raise MemtuiError(f"'{clean(clash[0], 60)}' is the unit, time or treatment column, not a metric.")
        skipped = []
    else:
        rest = [c for c in table.columns if c not in roles]
        metrics = [c for c in rest if table[c].dtype.is_numeric()]
        skipped = [c for c in rest if c not in metrics]
    if not metrics:
        raise MemtuiError("the table has no numeric metric column; name them with --metrics.")
    for name in metrics:
        _check_metric_name(name)
    unknown = [m for m in spec.lower_is_better if m not in metrics]
    if unknown:
        raise MemtuiError(f"--lower-is-better names '{clean(unknown[0], 60)}', which is not an imported metric.")
    return metrics, skipped


def _floats(series: pl.Series, column: str, what: str = "numbers") -> np.ndarray:
    """The column as float64, NaN where empty; refuses cells that are not numbers."""
    dtype = series.dtype
    if dtype.is_numeric():
        return series.cast(pl.Float64).to_numpy()
    if dtype != pl.String:
        raise MemtuiError(f"column '{clean(column, 60)}' must hold {what}, not {dtype} values; fix the table.")
    numbers = series.cast(pl.Float64, strict=False)
    bad = series.is_not_null() & numbers.is_null()
    if bad.any():
        raise MemtuiError(
            f"column '{clean(column, 60)}' must hold {what}: {int(bad.sum())} cells are not numbers "
            f"(first: '{clean(series.filter(bad)[0], 40)}'); fix the table."
        )
    return numbers.to_numpy()


def _refuse_missing(count: int, column: str, what: str) -> None:
    if count:
        raise MemtuiError(f"{count} rows have no value in column '{clean(column, 60)}', which must hold {what}.")


def _require_whole(values: np.ndarray, column: str, what: str, hint: str = "fix the table") -> None:
    bad = ~np.isfinite(values) | (np.abs(values) > _EXACT)
    bad[~bad] = values[~bad] != np.round(values[~bad])
    if bad.any():
        raise MemtuiError(
            f"column '{clean(column, 60)}' must hold {what}: {int(bad.sum())} are not whole numbers "
            f"(first: {values[bad][0]:g}); {hint}."
        )


def _integers(series: pl.Series, column: str, what: str) -> np.ndarray:
    """Whole numbers without gaps, exactly as int64."""
    if series.dtype.is_integer():
        _refuse_missing(series.null_count(), column, what)
        try:
            return series.cast(pl.Int64, strict=True).to_numpy()
        except pl.exceptions.PolarsError:
            raise MemtuiError(
                f"column '{clean(column, 60)}' must hold {what}: some are beyond the 64-bit range; fix the table."
            ) from None
    values = _floats(series, column, what)
    _refuse_missing(int(np.isnan(values).sum()), column, what)
    _require_whole(values, column, what)
    return values.astype(np.int64)


def _unit_ids(series: pl.Series, spec: ImportSpec) -> tuple[np.ndarray, np.ndarray, bool]:
    """Instance ids, each row's instance, and whether the ids are numbers made up from the sorted names."""
    missing = series.null_count() + (int(series.is_nan().sum()) if series.dtype.is_float() else 0)
    _refuse_missing(missing, spec.unit, "unit ids")
    if spec.from_seq_idx:
        ids, codes = np.unique(_integers(series, spec.unit, "integer sequence indices"), return_inverse=True)
        return ids, codes, False
    exact = series.cast(pl.Int64, strict=False) if series.dtype.is_numeric() else None
    if exact is not None and exact.null_count() == 0 and (exact.cast(series.dtype) == series).all():
        ids, codes = np.unique(exact.to_numpy(), return_inverse=True)
        return ids, codes, False
    names, codes = np.unique(series.cast(pl.String).to_numpy().astype(str), return_inverse=True)
    return np.arange(len(names), dtype=np.int64), codes, True


def _drop_missing_treatment(table: pl.DataFrame, spec: ImportSpec) -> tuple[pl.DataFrame, int, int]:
    """The table without units whose treatment is empty anywhere, with the units and rows left out (or a refusal)."""
    g = _floats(table[spec.treatment], spec.treatment, _TREATMENT_STEPS)
    empty = np.isnan(g)
    if not empty.any():
        return table, 0, 0
    units = table[spec.unit].filter(pl.Series(empty)).unique()
    rows = table[spec.unit].is_in(units.implode())
    col = clean(spec.treatment, 60)
    if not spec.drop_missing_treatment:
        raise MemtuiError(
            f"{int(empty.sum())} rows ({len(units)} units) have no value in treatment column '{col}'; fill them "
            "in, or pass --drop-missing-treatment to leave those units out."
        )
    kept = table.filter(~rows)
    if kept.height == 0:
        raise MemtuiError(f"every unit has an empty treatment in column '{col}'; nothing is left to import.")
    return kept, len(units), int(rows.sum())


def _treatment(g: np.ndarray, codes: np.ndarray, n_units: int, spec: ImportSpec) -> np.ndarray:
    """One treatment step per unit (NEVER for never-treated) from the rows' values; refuses what it cannot mean."""
    col = clean(spec.treatment, 60)
    per_unit = np.full(n_units, np.nan)
    per_unit[codes] = g
    changes = np.unique(codes[g != per_unit[codes]])
    if len(changes):
        raise MemtuiError(
            f"treatment column '{col}' changes over time for {len(changes)} units; it must be fixed per unit "
            "(the first step that trained on it)."
        )
    never = (per_unit == NEVER) | np.isin(per_unit, spec.never_values)
    steps = per_unit[~never]
    _require_whole(
        steps, spec.treatment, _TREATMENT_STEPS, "fix them, or name a never-treated value with --never-value"
    )
    negative = steps[steps < 0]
    if len(negative):
        raise MemtuiError(
            f"{len(negative)} units have a negative treatment step in '{col}' (first: {negative[0]:g}); "
            "-1 means never treated, name any other never-treated value with --never-value."
        )
    return np.where(never, NEVER, per_unit).astype(np.int64)


def _check_groups(treatment: np.ndarray, spec: ImportSpec) -> None:
    if not (treatment == NEVER).any():
        how = (
            "give validation sequences a negative index"
            if spec.from_seq_idx
            else "mark them with treatment -1, or name the value that means never treated with --never-value (e.g. 0)"
        )
        raise MemtuiError(f"no never-treated units, so there is no control group; {how}.")
    if (treatment == NEVER).all():
        raise MemtuiError("every unit is never treated, so there is nothing to estimate; check the treatment values.")


def _metric_matrix(series: pl.Series, column: str, codes: np.ndarray, col: np.ndarray, shape: tuple) -> np.ndarray:
    values = _floats(series, column)
    infinite = np.isinf(values)
    if infinite.any():
        raise MemtuiError(f"metric column '{clean(column, 60)}' has {int(infinite.sum())} infinite values; fix them.")
    if np.isnan(values).all():
        raise MemtuiError(f"metric column '{clean(column, 60)}' has no values; leave it out of --metrics.")
    out = np.full(shape, np.nan)
    out[codes, col] = values
    return out


def _refuse_duplicates(table: pl.DataFrame, spec: ImportSpec) -> None:
    dup = int(table.select(pl.struct(spec.unit, spec.time).is_duplicated().sum()).item())
    if dup:
        raise MemtuiError(
            f"some ({clean(spec.unit, 60)}, {clean(spec.time, 60)}) pairs appear more than once ({dup} rows); "
            "keep one row per unit and time."
        )


def import_table(
    table: pl.DataFrame, out: str | Path, spec: ImportSpec, *, overwrite: bool = False, attrs=None
) -> Imported:
    """Check the table against ``spec`` and write it as a panel; every refusal happens before anything is written."""
    check_spec(spec)
    _check_roles(table, spec)
    metrics, skipped = _metric_names(table, spec)
    _refuse_missing(table[spec.unit].null_count(), spec.unit, "unit ids")
    dropped_units = dropped_rows = 0
    if spec.treatment is not None:
        table, dropped_units, dropped_rows = _drop_missing_treatment(table, spec)
    times = _integers(table[spec.time], spec.time, "integer checkpoint steps")
    ids, codes, numbered = _unit_ids(table[spec.unit], spec)
    _refuse_duplicates(table, spec)
    if spec.from_seq_idx:
        treatment = pythia_treatment_step(ids, spec.batch_size, spec.macro_steps)
    else:
        g = _floats(table[spec.treatment], spec.treatment, _TREATMENT_STEPS)
        treatment = _treatment(g, codes, len(ids), spec)
    _check_groups(treatment, spec)

    steps, col = np.unique(times, return_inverse=True)
    shape = (len(ids), len(steps))
    fix = "import fewer units or checkpoints"
    require_memory(shape[0] * shape[1] * 8 * (len(metrics) + 2), f"a panel of {shape[0]:,} x {shape[1]:,}", fix)
    require_shape(*shape, fix)
    values = {m: _metric_matrix(table[m], m, codes, col, shape) for m in metrics}
    signs = {m: (-1 if m in spec.lower_is_better else registry.sign(m)) for m in metrics}
    path = create_panel(
        out,
        ids=ids,
        treatment=treatment,
        steps=steps,
        metrics=list(values),
        values=values,
        source_index=ids if spec.from_seq_idx else None,
        signs=signs,
        attrs=attrs,
        overwrite=overwrite,
    )
    treated = treatment != NEVER
    return Imported(
        path=path,
        n_units=len(ids),
        n_treated=int(treated.sum()),
        n_cohorts=len(np.unique(treatment[treated])),
        n_checkpoints=len(steps),
        metrics=tuple(values),
        dropped_units=dropped_units,
        dropped_rows=dropped_rows,
        folded=count_folded(treatment, steps),
        skipped=tuple(skipped),
        numbered=numbered,
        inferred=not spec.metrics,
    )
