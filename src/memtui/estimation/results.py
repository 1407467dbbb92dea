"""What an estimate is: its result type, the table every scope shares, and the helpers every engine (memtui's own,
the `differences` cross-check, the suite) uses to fill it. No estimation happens here, so the engines can share it
without importing each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.memory import human
from memtui.engine import did
from memtui.engine.layout import listing

if TYPE_CHECKING:
    from memtui.estimation.settings import Settings

SCOPES = ("profile", "instantaneous", "persistent", "residual")
SMALL_GROUP = 5  # R `did` warns about groups smaller than this; measured in docs/methods.md ("Small cohorts")
Progress = Callable[[float, str], None]


def z_value(alpha: float) -> float:
    """Two-sided normal critical value (statistics.NormalDist: scipy.stats costs a second to import); from the lower
    tail, so that a small alpha is not lost in 1 - alpha / 2 rounding to 1."""
    return -NormalDist().inv_cdf(alpha / 2)


class _Record:
    """A typed summary that still reads like the dict it replaced (``o["estimate"]``, ``o.get(...)``), so the
    CSV, the cache and older callers need no change."""

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return getattr(self, key) if key in self.keys() else default

    def keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Overall(_Record):
    """The average post-treatment effect (R did's "simple" aggregation) with its pointwise interval."""

    estimate: float
    std_error: float
    ci_low: float
    ci_high: float
    significant: bool
    n_cells: int
    small_group: bool = False
    analytic_se: float = float("nan")  # the influence-function SE (NaN where the engine gives none)


@dataclass(frozen=True)
class Pretrend(_Record):
    """The joint sup-t test of the placebo cells (c < g): no anticipation means they are all zero."""

    n_cells: int
    n_significant: int = 0
    sup_t: float = float("nan")
    p_value: float = float("nan")
    crit: float = float("nan")


@dataclass
class EstimateResult:
    settings: Settings
    cells: pl.DataFrame  # the profile: one row per (cohort, checkpoint) cell
    instantaneous: pl.DataFrame
    persistent: pl.DataFrame
    residual: pl.DataFrame
    overall: Overall
    pretrend: Pretrend
    crit: float  # simultaneous critical value of the profile's band family
    cohorts: np.ndarray  # cohort steps (rows of the profile)
    checkpoints: np.ndarray  # completed checkpoint steps (columns)
    notes: list[str] = field(default_factory=list)
    band: str = ""  # the band that made the bands and flags: "calibrated" or "classic" (default: the settings')

    def __post_init__(self) -> None:
        self.band = self.band or self.settings.band

    def scope(self, name: str) -> pl.DataFrame:
        if name not in SCOPES:
            raise MemtuiError(f"scope must be one of {', '.join(SCOPES)}, not '{name}'.")
        return self.cells if name == "profile" else getattr(self, name)

    def matrix(self, column: str = "estimate") -> np.ndarray:
        """The profile as a cohorts x checkpoints array (NaN where there is no cell)."""
        out = np.full((len(self.cohorts), len(self.checkpoints)), np.nan)
        r = np.searchsorted(self.cohorts, self.cells["cohort"].to_numpy())
        c = np.searchsorted(self.checkpoints, self.cells["checkpoint"].to_numpy())
        out[r, c] = self.cells[column].cast(pl.Float64).to_numpy()
        return out


def persistent_cells(result: EstimateResult) -> pl.DataFrame:
    """Persistent memorisation as the paper defines it: the event times c - g > 0, by event time (c = g is
    instantaneous; c < g, placebo). ``result.persistent`` holds every event time, the whole event-study curve the
    plots draw; every summary, `memtui estimate` and `export --scope persistent` read this one definition."""
    return result.persistent.filter(pl.col("event_time") > 0).sort("event_time")


def result_frame(
    settings, scope, *, cohort, checkpoint, event_time, att, sign, se, ase, crit, n_treated, n_control, pre, n_folded,
    small, pointwise=None,
):  # fmt: skip
    """One row per estimate, with the columns every scope and the CSV export share.

    ``n_folded``: treated instances first trained on between two completed checkpoints, counted in the next one's
    cohort; ``small``: a cohort or control set under ``SMALL_GROUP`` instances went into the estimate. ``pointwise``:
    each row's pointwise critical value (``ci_low``/``ci_high``; the calibrated band's small-sample ones), else z.
    """
    z = z_value(settings.alpha) if pointwise is None else pointwise
    tau = sign * att
    band = crit * se
    significant = np.abs(tau) > band
    significant &= np.isfinite(band)
    columns = {
        "cohort": pl.Series(cohort, dtype=pl.Int64),
        "checkpoint": pl.Series(checkpoint, dtype=pl.Int64),
        "event_time": pl.Series(event_time, dtype=pl.Int64),
        "estimate": tau,
        "std_error": se,
        "analytic_se": ase,
        "ci_low": tau - z * se,
        "ci_high": tau + z * se,
        "band_low": tau - band,
        "band_high": tau + band,
        "crit": crit,
        "significant": significant,
        "pre_treatment": pre,
        "n_treated": pl.Series(n_treated, dtype=pl.Int64),
        "n_control": pl.Series(n_control, dtype=pl.Int64),
        "n_folded": pl.Series(n_folded, dtype=pl.Int64),
        "small_group": pl.Series(small, dtype=pl.Boolean),
    }
    constant = {"metric": settings.metric, "estimator": settings.estimator, "scope": scope}
    tail = {"alpha": settings.alpha, "draws": settings.draws, "seed": settings.seed, "band": settings.band}
    # the constant columns in one select (polars broadcasts each scalar of a dict with a query of its own: ~0.25 ms a
    # column, a third of the frame's cost); the same columns, types and order as the dict with the scalars in place
    lits = [pl.lit(v).alias(k) for k, v in (constant | tail).items()]
    return pl.DataFrame(columns).select(*lits[:3], *columns, *lits[3:])


def final_index(steps: np.ndarray, final_step: int | None) -> int:
    if final_step is None:
        return len(steps) - 1
    idx = int(np.searchsorted(steps, final_step, side="right")) - 1
    if idx < 0:
        raise MemtuiError(f"final step {final_step} is before the first completed checkpoint ({steps[0]}).")
    return idx


def bootstrap_bytes(draws: int, lay, band: str = "classic") -> int:
    """Peak memory of an estimate's bootstrap under ``band`` (``did.bootstrap_bytes``, ``bands.bootstrap_bytes``)."""
    from memtui.engine import bands

    n_events = len(np.unique(lay.cell_t - lay.group_index[lay.cell_group]))
    size = {"n_cells": len(lay.cell_group), "n_groups": lay.n_groups, "n_aggregates": n_events + 1}
    count = bands.bootstrap_bytes if band == "calibrated" else did.bootstrap_bytes
    return count(draws, **size, n_units=lay.n_units, width=lay.y.shape[1])


def check_memory(draws: int, lay, band: str = "classic") -> None:
    """Refuse, before allocating anything, a bootstrap whose draws cannot fit in the memory available."""
    need = bootstrap_bytes(draws, lay, band)
    have = did.available_memory()
    if have is not None and need > have:
        per_draw = bootstrap_bytes(1, lay, band) - bootstrap_bytes(0, lay, band)
        fits = int((have - (need - draws * per_draw)) / per_draw) // 100 * 100
        advice = f"use at most about {fits} draws (-B {fits})" if fits >= 20 else "use -B 0 (analytic bands)"
        raise MemtuiError(
            f"{draws} bootstrap draws of {len(lay.cell_group)} cells need about {human(need)} of memory and "
            f"{human(have)} is available; {advice}."
        )


def group_notes(lay, est: did.CellEstimates) -> list[str]:
    """Say which cohorts and control sets are too small for the inference to hold (R `did`'s rule)."""
    notes = []
    t = len(lay.steps)
    small = [(int(lay.steps[lay.group_index[g]]), int(lay.group_n[g])) for g in lay.cohort_groups]
    small = [(step, n) for step, n in small if n < SMALL_GROUP]
    if small:
        notes.append(
            f"{len(small)} cohort(s) have fewer than {SMALL_GROUP} instances, step (n): {listing(small)}; their "
            "standard errors run low and bands too narrow (docs/estimation.md, small cohorts): treat their "
            "significance with caution (column small_group)"
        )
    few = (est.n_control < SMALL_GROUP) & lay.controls  # the extractable estimator has no control set at all
    if few.any():
        never = int(lay.group_n[0]) if lay.group_index[0] >= t else 0
        which = (
            f"the control group has only {never} never-treated instance(s)"
            if never < SMALL_GROUP
            else f"{int(few.sum())} cells have fewer than {SMALL_GROUP} control instances"
        )
        notes.append(f"{which}: standard errors run low and bands too narrow (column small_group)")
    return notes
