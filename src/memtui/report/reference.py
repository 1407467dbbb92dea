"""memtui's estimates beside the ones Lesci et al. published, cell by cell (docs/importing.md).

Their estimates file has one row per (cohort, base_period, time) cell of one model size and statistic, as the
``differences`` package writes ATT(g, t): ``ATT``, ``std_error``, the simultaneous band ``lower``/``upper`` and
``zero_not_in_cband`` ("*" where zero is outside the band). Their statistics are per token, and surprisal has the
opposite sign of a log-likelihood, so each is brought to memtui's convention before comparing:

    memtui estimate = sign(metric) x factor x ATT,   factor = -2048 for sequence_surprisal (loglik sums 2048 targets
    of -surprisal), 1 otherwise,

where sign(metric) is the panel's (+1 when higher is better), since memtui reports tau = sign x ATT.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.importing import read_table
from memtui.panel.model import Panel
from memtui.panel.presets import PYTHIA_TARGETS

REFERENCE_COLUMNS = (
    "cohort",
    "base_period",
    "time",
    "ATT",
    "std_error",
    "lower",
    "upper",
    "zero_not_in_cband",
    "model_size",
    "stat",
)
# the paper's statistic -> (memtui metric, factor from one of its per-token values to the metric's scale)
STATS = {
    "token_accuracy": ("accuracy", 1.0),
    "sequence_surprisal": ("loglik", -float(PYTHIA_TARGETS)),
    "sequence_entropy": ("entropy", 1.0),
    "average_rank": ("rank", 1.0),
}
# The verdict "agree" needs point estimates within this share of the largest |estimate| ... (the same data estimated
# the same way differs by rounding only; a re-extraction in another precision by a little more)
AGREE_RELATIVE = 0.01
# ... and the same significance on this share of cells: bands come from different bootstrap draws, so cells whose
# estimate lies near the band's edge can fall on either side of it.
AGREE_SIGNIFICANCE = 0.95


@dataclass
class ReferenceComparison:
    cells: pl.DataFrame  # one row per matched (cohort, checkpoint) cell
    source: str
    model_size: str
    stat: str
    metric: str
    factor: float  # the reference ATT times sign x factor is on memtui's scale
    settings: Settings
    n_reference: int  # reference cells of this model and statistic (reference cells c = g-1 of universal excluded)
    n_memtui: int
    notes: tuple[str, ...] = ()

    def _estimates(self, side: str) -> np.ndarray:
        return self.cells[f"{side}_estimate"].cast(pl.Float64).fill_null(np.nan).to_numpy()

    @property
    def missing(self) -> dict[str, int]:
        """Matched cells without an estimate, by side (a null or NaN ATT in the file; a NaN cell of memtui's)."""
        return {side: int(np.isnan(self._estimates(side)).sum()) for side in ("reference", "memtui")}

    @property
    def comparable(self) -> np.ndarray:
        return np.isfinite(self._estimates("memtui")) & np.isfinite(self._estimates("reference"))

    @property
    def max_difference(self) -> float:
        """The largest |difference| over the cells both sides estimate (NaN when there is none): a cell without an
        estimate is counted in ``missing``, never skipped as if it agreed."""
        d = np.abs(self._estimates("memtui") - self._estimates("reference"))[self.comparable]
        return float(d.max()) if len(d) else float("nan")

    @property
    def scale(self) -> float:
        """The largest |estimate| of either side: what a difference is measured against."""
        both = np.r_[self.cells["memtui_estimate"].to_numpy(), self.cells["reference_estimate"].to_numpy()]
        return float(np.nanmax(np.abs(both))) if np.isfinite(both).any() else float("nan")

    @property
    def relative_difference(self) -> float:
        scale, most = self.scale, self.max_difference
        if np.isnan(most):
            return float("nan")
        return most / scale if scale > 0 else (0.0 if most == 0 else float("inf"))

    @property
    def significance_agreement(self) -> float:
        return float(self.cells["agree"].mean())

    @property
    def agrees(self) -> bool:
        return (
            not any(self.missing.values())
            and self.comparable.any()
            and self.relative_difference <= AGREE_RELATIVE
            and self.significance_agreement >= AGREE_SIGNIFICANCE
        )

    def lines(self) -> list[str]:
        c = self.cells
        n = c.height
        both = int((c["memtui_significant"] & c["reference_significant"]).sum())
        only_m = int((c["memtui_significant"] & ~c["reference_significant"]).sum())
        only_r = int((~c["memtui_significant"] & c["reference_significant"]).sum())
        scaled = "" if self.factor == 1 else f" (x {self.factor:g}: per-token surprisal to sequence log-likelihood)"
        out = [
            f"reference {clean(self.source)}: model {clean(self.model_size, 40)}, {clean(self.stat, 40)} -> "
            f"{self.metric}{scaled}; memtui: did, {self.settings.base_period} base period, "
            f"{self.settings.control_group.replace('_', '-')} controls, {self.settings.draws} draws",
            f"{n} cells compared ({self.n_reference} in the reference, {self.n_memtui} estimated by memtui; "
            f"{self.n_reference - n} reference and {self.n_memtui - n} memtui cells have no counterpart)",
            self._difference_line(),
            *self._missing_lines(),
            f"significance agrees on {int(c['agree'].sum())} of {n} cells ({100 * self.significance_agreement:.1f}%): "
            f"both significant {both}, memtui only {only_m}, reference only {only_r}",
            *self.notes,
            self.verdict(),
        ]
        return out

    def _difference_line(self) -> str:
        if not self.comparable.any():
            return "no cell has an estimate on both sides, so no difference can be measured"
        d = np.abs(self._estimates("memtui") - self._estimates("reference"))[self.comparable]
        return (
            f"max |difference| {self.max_difference:.4g} = {100 * self.relative_difference:.3g}% of the largest "
            f"|estimate| ({self.scale:.4g}); median {float(np.median(d)):.4g}"
        )

    def _missing_lines(self) -> list[str]:
        where = {"reference": "in the reference (ATT empty or NaN)", "memtui": "from memtui (NaN)"}
        return [
            f"{count} {'cell has' if count == 1 else 'cells have'} no estimate {where[side]}"
            for side, count in self.missing.items()
            if count
        ]

    def verdict(self) -> str:
        if self.agrees:
            return (
                f"verdict: memtui agrees with the reference (estimates within {100 * AGREE_RELATIVE:g}% of their "
                f"scale, significance the same on at least {100 * AGREE_SIGNIFICANCE:g}% of cells)"
            )
        why = []
        missing = sum(self.missing.values())
        if missing:
            why.append(f"{missing} matched {'cell has' if missing == 1 else 'cells have'} no estimate on one side")
        if self.relative_difference > AGREE_RELATIVE:
            why.append(f"estimates differ by up to {100 * self.relative_difference:.3g}% of their scale")
        if self.significance_agreement < AGREE_SIGNIFICANCE:
            why.append(f"significance differs on {100 * (1 - self.significance_agreement):.1f}% of cells")
        return f"verdict: memtui disagrees with the reference ({'; '.join(why)})"


def read_reference(path: str | Path) -> pl.DataFrame:
    """The estimates file (parquet or CSV) with every column the comparison needs, or a one-line refusal."""
    table = read_table(path)
    missing = [c for c in REFERENCE_COLUMNS if c not in table.columns]
    if missing:
        raise MemtuiError(
            f"{clean(path)} is not an estimates file of the paper: no column {', '.join(missing)} "
            f"(expected {', '.join(REFERENCE_COLUMNS)})."
        )
    for col in ("cohort", "base_period", "time", "ATT", "std_error", "lower", "upper"):
        if not table[col].dtype.is_numeric():
            raise MemtuiError(f"{clean(path)}: column '{col}' must hold numbers, not {table[col].dtype}.")
    steps = {col: _whole_steps(table[col], col, path) for col in STEP_COLUMNS}
    return table.with_columns(
        *(pl.Series(col, values) for col, values in steps.items()),
        pl.col("model_size").cast(pl.String),
        pl.col("stat").cast(pl.String),
    )


STEP_COLUMNS = ("cohort", "base_period", "time")
_EXACT = 2.0**53  # beyond it a float64 no longer holds every whole number: another step could be matched


def _whole_steps(column: pl.Series, name: str, path) -> np.ndarray:
    """A step column as int64, refusing what is no checkpoint step: empty, NaN, infinite, fractional (2000.5 was
    truncated to 2000 and matched) or beyond 2^53 (1e30 overflowed the cast). base_period is -1 before the first."""
    values = column.cast(pl.Float64).to_numpy()
    bad = ~np.isfinite(values) | (np.abs(values) > _EXACT)
    bad[~bad] = values[~bad] != np.round(values[~bad])
    if bad.any():
        first = values[bad][0]
        raise MemtuiError(
            f"{clean(path)}: column '{name}' must hold whole checkpoint steps; {int(bad.sum())} cells do not "
            f"(first: {'empty' if np.isnan(first) else f'{first:g}'}); fix the file."
        )
    return values.astype(np.int64)


def _one(table: pl.DataFrame, column: str, wanted: str | None, path, option: str) -> str:
    values = sorted(v for v in table[column].unique().to_list() if v is not None)
    shown = ", ".join(clean(v, 40) for v in values)
    if wanted is not None:
        if wanted not in values:
            raise MemtuiError(f"{clean(path)} has no {column} '{clean(wanted, 40)}' (it has {shown}).")
        return wanted
    if len(values) != 1:
        raise MemtuiError(f"{clean(path)} holds several {column} values ({shown}); choose one with {option}.")
    return values[0]


def _stat_for(table: pl.DataFrame, metric: str, path) -> str:
    """The file's statistic for the metric asked for, or its only statistic; refused when neither is there."""
    present = sorted(v for v in table["stat"].unique().to_list() if v is not None)
    known = [s for s in present if s in STATS]
    for stat in known:
        if STATS[stat][0] == metric:
            return stat
    if len(known) == 1:
        return known[0]
    if not known:
        raise MemtuiError(
            f"{clean(path)}: no statistic memtui knows (it has {clean(', '.join(present), 200)}; "
            f"known: {', '.join(STATS)})."
        )
    choices = ", ".join(f"-m {STATS[s][0]} for {s}" for s in known)
    raise MemtuiError(f"{clean(path)} has no {metric} estimates and several others; pick one: {choices}.")


_MARKED = ("*", "true", "1", "yes")  # how a file marks zero outside the band
_UNMARKED = ("", "false", "0", "no", "nan")  # ... and inside it (the paper's files leave it empty)


def _significant(column: pl.Series, path) -> np.ndarray:
    """zero_not_in_cband as booleans: the paper's files mark a significant cell with "*" and leave others empty; a
    number is 1 (significant) or 0, empty or NaN (not: a float column stores the empty cells as NaN). Any other value
    is refused rather than guessed at (NaN != 0 read as significant)."""
    if column.dtype == pl.Boolean:
        return column.fill_null(False).to_numpy()
    if column.dtype.is_numeric():
        values = column.cast(pl.Float64).fill_null(np.nan).to_numpy()
        known = np.isnan(values) | (values == 0) | (values == 1)
        if not known.all():
            raise MemtuiError(
                f"{clean(path)}: column 'zero_not_in_cband' must be 1 or 0 (or empty) where it holds numbers; "
                f"{int((~known).sum())} cells hold other values (first: {values[~known][0]:g})."
            )
        return values == 1
    text = column.cast(pl.String).fill_null("").str.strip_chars().str.to_lowercase()
    known = text.is_in([*_MARKED, *_UNMARKED])
    if not known.all():
        raise MemtuiError(
            f"{clean(path)}: column 'zero_not_in_cband' must mark significant cells with '*' (or true, 1, yes) and "
            f"leave others empty (or false, 0, no); {int((~known).sum())} cells hold other text "
            f"(first: '{clean(text.filter(~known)[0], 40)}')."
        )
    return text.is_in(list(_MARKED)).to_numpy()


def base_period_of(rows: pl.DataFrame, path) -> str:
    """varying or universal, read from the pre-treatment rows: varying compares with the checkpoint before ``time``,
    universal always with the one before the cohort (at or after ``time``)."""
    pre = rows.filter(pl.col("time") < pl.col("cohort"))
    if pre.height == 0:
        return "varying"  # post-treatment cells are the same under both
    before = (pre["base_period"] < pre["time"]).to_numpy()
    if before.all():
        return "varying"
    if not before.any():
        return "universal"
    raise MemtuiError(
        f"{clean(path)}: the base_period column mixes a varying and a universal base period "
        f"({int(before.sum())} of {len(before)} pre-treatment cells compare with an earlier checkpoint); "
        "memtui estimates one or the other."
    )


def compare_reference(
    panel: Panel, path: str | Path, settings: Settings, model_size: str | None = None
) -> ReferenceComparison:
    """Estimate ``panel`` as the paper did (DiD, the file's base period) and put the file's estimates beside it."""
    table = read_reference(path)
    size = _one(table, "model_size", model_size, path, "--model-size")
    rows = table.filter(pl.col("model_size") == size)
    stat = _stat_for(rows, settings.metric, path)
    metric, factor = STATS[stat]
    rows = rows.filter(pl.col("stat") == stat)
    if rows.select(pl.struct("cohort", "time").is_duplicated().any()).item():
        raise MemtuiError(
            f"{clean(path)}: some (cohort, time) cells of {clean(size, 40)} {stat} appear more than once; "
            "keep one row per cell."
        )
    base = base_period_of(rows, path)
    notes = []
    if settings.estimator != "did" or settings.base_period != base or settings.metric != metric:
        notes.append(f"estimated with did, {base} base period, metric {metric} to match the reference")
    settings = dataclasses.replace(settings, estimator="did", base_period=base, metric=metric)
    if settings.control_group != "never_treated":
        notes.append("the paper used never-treated controls; this comparison uses not-yet-treated ones")
    # universal's reference cell (time = base_period) is 0 by construction, not an estimate: memtui has no such cell
    rows = rows.filter(pl.col("time") != pl.col("base_period"))
    result = estimate(panel, settings)
    sign = panel.sign(metric)
    to_memtui = sign * factor
    ref = _reference_cells(rows, to_memtui, path)
    ours = result.cells.select(
        "cohort",
        "checkpoint",
        "event_time",
        pl.col("estimate").alias("memtui_estimate"),
        pl.col("std_error").alias("memtui_std_error"),
        pl.col("significant").alias("memtui_significant"),
    )
    cells = ours.join(ref, on=["cohort", "checkpoint"], how="inner").sort("cohort", "checkpoint")
    if cells.height == 0:
        raise MemtuiError(
            f"no cell of {clean(path)} ({clean(size, 40)} {stat}: cohorts {_span(ref['cohort'])}, checkpoints "
            f"{_span(ref['checkpoint'])}) matches one memtui estimates from the panel (cohorts "
            f"{_span(ours['cohort'])}, checkpoints {_span(ours['checkpoint'])}); is it the same panel?"
        )
    cells = _agreement(cells)
    return ReferenceComparison(
        cells=cells,
        source=str(path),
        model_size=size,
        stat=stat,
        metric=metric,
        factor=factor,
        settings=settings,
        n_reference=ref.height,
        n_memtui=ours.height,
        notes=tuple(notes),
    )


def _reference_cells(rows: pl.DataFrame, to_memtui: float, path) -> pl.DataFrame:
    """The reference file's cells in memtui's names, units and sign."""
    return rows.select(
        pl.col("cohort").cast(pl.Int64),
        pl.col("time").cast(pl.Int64).alias("checkpoint"),
        (pl.col("ATT").cast(pl.Float64).fill_null(np.nan) * to_memtui).alias("reference_estimate"),
        (pl.col("std_error").cast(pl.Float64) * abs(to_memtui)).alias("reference_std_error"),
        pl.Series("reference_significant", _significant(rows["zero_not_in_cband"], path)),
    )


def _agreement(cells: pl.DataFrame) -> pl.DataFrame:
    """The joined cells with their difference and whether the two agree, in the comparison's column order."""
    m, r = cells["memtui_estimate"], cells["reference_estimate"]
    both = cells["memtui_significant"] & cells["reference_significant"]
    return cells.with_columns(
        (m - r).alias("difference"),
        # a cell without an estimate on either side cannot agree (its significance says nothing)
        (
            (cells["memtui_significant"] == cells["reference_significant"])
            & (~both | (m.sign() == r.sign()))
            & m.is_finite()
            & r.is_finite()
        ).alias("agree"),
    ).select(
        "cohort",
        "checkpoint",
        "memtui_estimate",
        "reference_estimate",
        "difference",
        "memtui_significant",
        "reference_significant",
        "agree",
        "event_time",
        "memtui_std_error",
        "reference_std_error",
    )


def _span(column: pl.Series) -> str:
    return f"{column.min()}..{column.max()}" if len(column) else "none"
