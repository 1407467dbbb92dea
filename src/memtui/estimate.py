"""Memorisation profiles from a panel: settings in, polars frames out.

Memorisation tau(g,c) = sign * ATT(g,c), with sign = +1 for metrics where higher is better (log-likelihood, accuracy)
and -1 where lower is better (rank, entropy), so positive always means "does better on what it trained on".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

import numpy as np
import polars as pl

from memtui.engine import did
from memtui.engine.layout import build_layout
from memtui.engine.summaries import aggregate
from memtui.errors import MemtuiError
from memtui.panel import NEVER, Panel

ESTIMATORS = ("did", "difference")
SCOPES = ("profile", "instantaneous", "persistent", "residual")
Progress = Callable[[float, str], None]


def z_value(alpha: float) -> float:
    """Two-sided normal critical value (statistics.NormalDist: scipy.stats costs a second to import)."""
    return NormalDist().inv_cdf(1 - alpha / 2)


@dataclass(frozen=True)
class Settings:
    metric: str = "loglik"
    estimator: str = "did"  # "did" (Callaway & Sant'Anna ATT(g,c)) or "difference" (paper's estimator 1)
    base_period: str = "varying"  # pre-treatment cells: "varying" (checkpoint before c) or "universal" (before g)
    control_group: str = "never_treated"  # or "not_yet_treated"
    draws: int = 1000  # multiplier-bootstrap draws; 0 = analytic standard errors and pointwise bands only
    multiplier: str = "rademacher"  # or "mammen"
    seed: int = 0
    alpha: float = 0.05
    family: str = "post"  # cells sharing one simultaneous band: "post" (c >= g; pre cells get their own) or "all"
    final_step: int | None = None  # residual memorisation checkpoint; None = last completed
    engine: str = "memtui"  # or "differences" (the paper's pipeline; slow)

    def validate(self) -> Settings:
        choices = {
            "estimator": ESTIMATORS,
            "base_period": ("varying", "universal"),
            "control_group": ("never_treated", "not_yet_treated"),
            "multiplier": ("rademacher", "mammen"),
            "family": ("post", "all"),
            "engine": ("memtui", "differences"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise MemtuiError(f"{name} must be one of {', '.join(allowed)}, not '{getattr(self, name)}'.")
        if not 0 < self.alpha < 1:
            raise MemtuiError(f"alpha must be between 0 and 1, not {self.alpha}.")
        if self.draws < 0 or 0 < self.draws < 20:
            raise MemtuiError(f"draws must be 0 (no bootstrap) or at least 20, not {self.draws}.")
        return self

    def key(self) -> dict:
        return asdict(self)


@dataclass
class EstimateResult:
    settings: Settings
    cells: pl.DataFrame  # the profile: one row per (cohort, checkpoint) cell
    instantaneous: pl.DataFrame
    persistent: pl.DataFrame
    residual: pl.DataFrame
    overall: dict
    pretrend: dict
    crit: float  # simultaneous critical value of the profile's band family
    cohorts: np.ndarray  # cohort steps (rows of the profile)
    checkpoints: np.ndarray  # completed checkpoint steps (columns)
    notes: list[str] = field(default_factory=list)

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


def result_frame(
    settings, scope, *, cohort, checkpoint, event_time, att, sign, se, ase, crit, n_treated, n_control, pre
):
    """One row per estimate, with the columns every scope and the CSV export share."""
    z = z_value(settings.alpha)
    tau = sign * att
    band = crit * se
    significant = np.abs(tau) > band
    significant &= np.isfinite(band)
    return pl.DataFrame(
        {
            "metric": settings.metric,
            "estimator": settings.estimator,
            "scope": scope,
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
            "alpha": settings.alpha,
            "draws": settings.draws,
            "seed": settings.seed,
        }
    )


def _final_index(steps: np.ndarray, final_step: int | None) -> int:
    if final_step is None:
        return len(steps) - 1
    idx = int(np.searchsorted(steps, final_step, side="right")) - 1
    if idx < 0:
        raise MemtuiError(f"final step {final_step} is before the first completed checkpoint ({steps[0]}).")
    return idx


def estimate(panel: Panel, settings: Settings, progress: Progress | None = None) -> EstimateResult:
    """Estimate the memorisation profile of one metric, with its summaries and bootstrap bands."""
    settings = settings.validate()
    if settings.engine == "differences":
        from memtui.engine.differences_engine import estimate_with_differences

        return estimate_with_differences(panel, settings, progress)
    report = progress or (lambda fraction, message: None)
    report(0.0, "preparing")
    y = panel.values(settings.metric)
    steps = panel.done_steps
    lay = build_layout(
        y,
        panel.treatment,
        steps,
        never=NEVER,
        estimator=settings.estimator,
        base_period=settings.base_period,
        control_group=settings.control_group,
    )
    if not len(lay.cell_group):
        raise MemtuiError("no (cohort, checkpoint) cell can be estimated: no treated cohort falls inside the window.")
    est = did.point_estimates(lay)
    report(0.05, "bootstrap")
    boot = None
    if settings.draws:
        boot = did.bootstrap(
            lay,
            est,
            draws=settings.draws,
            seed=settings.seed,
            multiplier=settings.multiplier,
            progress=lambda f: report(0.05 + 0.85 * f, "bootstrap"),
        )
    report(0.9, "summaries")
    result = _assemble(panel, settings, lay, est, boot)
    report(1.0, "done")
    return result


def _assemble(panel: Panel, settings: Settings, lay, est: did.CellEstimates, boot) -> EstimateResult:
    sign = panel.sign(settings.metric)
    steps = lay.steps
    cohort_step = steps[lay.group_index[lay.cell_group]]
    cell_step = steps[lay.cell_t]
    event = cell_step - cohort_step
    pre = lay.cell_pre
    z = z_value(settings.alpha)

    def band_for(draws, se, mask):
        """Simultaneous critical value over the rows in ``mask`` (pointwise z without a bootstrap)."""
        if draws is None:
            return z, np.nan
        tmax = did.sup_t(draws, se, mask)
        return did.critical_value(tmax, settings.alpha), tmax

    se = did.bootstrap_se(boot.cells) if boot is not None else est.se
    draws = boot.cells if boot is not None else None
    crit = np.empty(len(pre))
    if settings.family == "all":
        crit[:], _ = band_for(draws, se, np.ones(len(pre), bool))
    else:
        crit[~pre], _ = band_for(draws, se, ~pre) if (~pre).any() else (np.nan, None)
        crit[pre], _ = band_for(draws, se, pre) if pre.any() else (np.nan, None)
    profile_crit = float(crit[~pre][0]) if (~pre).any() else float("nan")

    common = {"sign": sign}
    cells = result_frame(
        settings,
        "profile",
        cohort=cohort_step,
        checkpoint=cell_step,
        event_time=event,
        att=est.att,
        se=se,
        ase=est.se,
        crit=crit,
        n_treated=est.n_treated,
        n_control=est.n_control,
        pre=pre,
        **common,
    )

    def cell_subset(scope: str, mask: np.ndarray) -> pl.DataFrame:
        c, _ = band_for(draws, se, mask)
        return result_frame(
            settings,
            scope,
            cohort=cohort_step[mask],
            checkpoint=cell_step[mask],
            event_time=event[mask],
            att=est.att[mask],
            se=se[mask],
            ase=est.se[mask],
            crit=np.full(mask.sum(), c),
            n_treated=est.n_treated[mask],
            n_control=est.n_control[mask],
            pre=pre[mask],
            **common,
        )

    a = lay.group_index[lay.cell_group]
    instantaneous = cell_subset("instantaneous", lay.cell_t == a)
    final = _final_index(steps, settings.final_step)
    residual = cell_subset("residual", (lay.cell_t == final) & ~pre)

    # persistent: average over cohorts at each event time e = c - g
    events = np.unique(event)
    members = [np.flatnonzero(event == e) for e in events]
    theta, agg_draws = aggregate(lay, est.att, draws, boot.group_w if boot else None, members)
    agg_se = did.bootstrap_se(agg_draws) if agg_draws is not None else np.full(len(events), np.nan)
    post_e = events >= 0
    fam = post_e if settings.family == "post" else np.ones(len(events), bool)
    crit_e = np.full(len(events), z)
    if agg_draws is not None:
        crit_e[fam] = did.critical_value(did.sup_t(agg_draws, agg_se, fam), settings.alpha)
        if settings.family == "post" and (~post_e).any():
            crit_e[~post_e] = did.critical_value(did.sup_t(agg_draws, agg_se, ~post_e), settings.alpha)
    persistent = result_frame(
        settings,
        "persistent",
        cohort=[None] * len(events),
        checkpoint=[None] * len(events),
        event_time=events,
        att=theta,
        se=agg_se,
        ase=np.full(len(events), np.nan),
        crit=crit_e,
        n_treated=[int(est.n_treated[m].sum()) for m in members],
        n_control=[int(est.n_control[m].max()) for m in members],
        pre=events < 0,
        **common,
    )

    # overall average post-treatment effect (R did's "simple" aggregation)
    post_cells = np.flatnonzero(~pre)
    o_theta, o_draws = aggregate(lay, est.att, draws, boot.group_w if boot else None, [post_cells])
    o_se = float(did.bootstrap_se(o_draws)[0]) if o_draws is not None else float("nan")
    o_tau = float(sign * o_theta[0])
    overall = {
        "estimate": o_tau,
        "std_error": o_se,
        "ci_low": o_tau - z * o_se,
        "ci_high": o_tau + z * o_se,
        "significant": bool(abs(o_tau) > z * o_se),
        "n_cells": len(post_cells),
    }
    pretrend = _pretrend(draws, se, est.att, pre, settings.alpha)
    return EstimateResult(
        settings=settings,
        cells=cells,
        instantaneous=instantaneous,
        persistent=persistent,
        residual=residual,
        overall=overall,
        pretrend=pretrend,
        crit=profile_crit,
        cohorts=np.unique(cohort_step),
        checkpoints=steps,
        notes=list(lay.notes),
    )


def _pretrend(draws, se, att, pre, alpha) -> dict:
    """Joint sup-t test of the placebo cells c < g (no anticipation => all zero)."""
    out = {
        "n_cells": int(pre.sum()),
        "n_significant": 0,
        "sup_t": float("nan"),
        "p_value": float("nan"),
        "crit": float("nan"),
    }
    if draws is None or not pre.any():
        return out
    ok = pre & np.isfinite(se)
    if not ok.any():
        return out
    stat = float(np.max(np.abs(att[ok]) / se[ok]))
    tmax = did.sup_t(draws, se, ok)
    crit = did.critical_value(tmax, alpha)
    out.update(
        sup_t=stat,
        p_value=float(np.mean(tmax >= stat)),
        crit=crit,
        n_significant=int(np.sum(np.abs(att[ok]) / se[ok] > crit)),
    )
    return out
