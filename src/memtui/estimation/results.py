"""What an estimate is: its result type, the table every scope shares, and the helpers every engine (memtui's own,
the `differences` cross-check, the suite) uses to fill it. No estimation happens here, so the engines can share it
without importing each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.engine.band import z_value as z_value
from memtui.engine.evidence import SMALL_GROUP as SMALL_GROUP
from memtui.engine.evidence import r_did_notes as group_notes  # noqa: F401  (R did's small-group notes)

if TYPE_CHECKING:
    from memtui.estimation.settings import Settings

SCOPES = ("profile", "instantaneous", "persistent", "residual")
Progress = Callable[[float, str], None]


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
    band: str = ""  # the band that made the bands and flags (engine.band_registry; default: the settings')

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
