"""Memorisation profiles from a panel: settings in, polars frames out.

Memorisation tau(g,c) = sign * ATT(g,c), with sign = +1 for metrics where higher is better (log-likelihood, accuracy)
and -1 where lower is better (rank, entropy), so positive always means "does better on what it trained on".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.engine import did, drdid, evidence
from memtui.engine.band import Band, BandDraws
from memtui.engine.band_registry import get_band
from memtui.engine.layout import build_layout
from memtui.engine.memory import check_memory as check_memory
from memtui.engine.multipliers import JointMultipliers
from memtui.engine.summaries import aggregate, analytic_se
from memtui.estimation.choices import ESTIMATORS
from memtui.estimation.pretrend import pretrend
from memtui.estimation.results import SCOPES as SCOPES
from memtui.estimation.results import (
    EstimateResult,
    Overall,
    Progress,
    final_index,
    result_frame,
    z_value,
)
from memtui.estimation.settings import Settings
from memtui.panel import scoring
from memtui.panel.model import NEVER, Panel

ALL_ESTIMATORS = ESTIMATORS


def estimate(panel: Panel, settings: Settings, progress: Progress | None = None) -> EstimateResult:
    """Estimate the memorisation profile of one metric, with its summaries and bootstrap bands."""
    return estimate_parts(panel, settings, progress)[0]


def estimate_parts(
    panel: Panel, settings: Settings, progress: Progress | None = None, *, source: JointMultipliers | None = None
) -> tuple[EstimateResult, _Cells | None]:
    """``estimate`` and what its scopes were cut from (the cells' draws, standard errors and sup-t laws; None for
    engine differences). ``source``: the bootstrap's multipliers keyed by panel instance or cluster
    (``engine.multipliers``; subgroups share one); default: ``settings.cluster``'s clusters, else per layout row."""
    settings = settings.validate()
    panel.refuse_mixed_stages()  # controls must come from the instance's own stage (staged curricula)
    if settings.engine == "differences":
        from memtui.estimation.crosscheck import estimate_with_differences

        return estimate_with_differences(panel, settings, progress), None
    report = progress or (lambda fraction, message: None)
    report(0.0, "preparing")
    prep = prepared(panel, settings, source)
    report(0.05, "bootstrap")
    drawn = _bootstrap(prep.lay, prep.est, settings, lambda f: report(0.05 + 0.85 * f, "bootstrap"), prep.source)
    report(0.9, "summaries")
    result, cells = finished(panel, settings, prep, drawn)
    report(1.0, "done")
    return result, cells


@dataclass
class Prepared:
    """What an estimate's bootstrap starts from: the layout, the point estimates and the multiplier source."""

    lay: object
    est: did.CellEstimates
    source: JointMultipliers | None


def prepared(panel: Panel, settings: Settings, source: JointMultipliers | None = None) -> Prepared:
    """The layout and point estimates of ``estimate_parts`` (validated ``settings``, engine memtui), before its
    bootstrap; ``estimation.subgroups`` bootstraps several groups' in one pass."""
    if source is None and settings.cluster:
        from memtui.estimation.clusters import cluster_source

        source = cluster_source(panel, settings.cluster)
    y, treatment = panel.values(settings.metric), panel.treatment
    steps = panel.done_steps
    design = drdid.design_matrix(panel.covariates, settings.covariates) if settings.covariates else None
    if design is not None:  # instances with an unknown covariate are left out (noted), as R did drops them
        y, treatment = y[design.keep], treatment[design.keep]
        source = source.subset(np.flatnonzero(design.keep)) if source is not None else None
    lay = build_layout(
        y,
        treatment,
        steps,
        never=NEVER,
        estimator=settings.estimator,
        base_period=settings.base_period,
        control_group=settings.control_group,
    )
    if not len(lay.cell_group):
        raise MemtuiError("no (cohort, checkpoint) cell can be estimated: no treated cohort falls inside the window.")
    if lay.scale == 0:
        raise MemtuiError(
            f"metric '{settings.metric}' has the same value for every instance and completed checkpoint used, so "
            "there is nothing to estimate; choose a metric that varies."
        )
    if settings.draws:
        check_memory(settings.draws, lay, get_band(settings.band))
    if design is None:
        est = did.point_estimates(lay)
    else:  # doubly robust DiD (Sant'Anna & Zhao 2020) with the covariates; the classic band only (Settings)
        est = drdid.point_estimates(lay, design.matrix[lay.source_rows])
        used = f"doubly robust DiD with covariates {', '.join(settings.covariates)}"
        lay.notes[:0] = [*design.notes, *est.notes, used]
    return Prepared(lay=lay, est=est, source=source)


def finished(
    panel: Panel, settings: Settings, prep: Prepared, drawn: BandDraws | None
) -> tuple[EstimateResult, _Cells]:
    """``estimate_parts``' result from its band's bootstrap (None without draws)."""
    result, cells = _assembled(panel, settings, prep.lay, prep.est, drawn)
    if settings.cluster and settings.draws:
        result.notes.append(
            f"bootstrap clustered by {settings.cluster}: {prep.source.n_clusters} clusters share multipliers (standard "
            "errors and bands); the analytic_se column is not clustered"
        )
    return result, cells


def _bootstrap(
    lay, est: did.CellEstimates, settings: Settings, progress_of, source: JointMultipliers | None
) -> BandDraws | None:
    """The cells' draws and what the settings' band reads from them (``Band.bootstrap``); None without draws."""
    if not settings.draws:
        return None
    return get_band(settings.band).bootstrap(
        lay, est, cell_masks(lay, settings), aggregate_members(lay)[2], floor=did.se_floor(lay.scale),
        draws=settings.draws, seed=settings.seed, multiplier=settings.multiplier, progress=progress_of, source=source,
    )  # fmt: skip


def cell_masks(lay, settings: Settings) -> dict[str, np.ndarray]:
    """The cell subsets with a simultaneous band of their own: every cell, the post-treatment and the placebo cells,
    the instantaneous ones (c = g) and the residual ones (the final checkpoint)."""
    pre = lay.cell_pre
    return {
        "all": np.ones(len(pre), bool),
        "post": ~pre,
        "pre": pre,
        "instantaneous": lay.cell_t == lay.group_index[lay.cell_group],
        "residual": (lay.cell_t == final_index(lay.steps, settings.final_step)) & ~pre,
    }


def aggregate_members(lay) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """The event times, the cells of each (persistent memorisation) and those plus the post-treatment cells (the
    overall average, last): the aggregates every estimate reports."""
    steps = lay.steps
    event = steps[lay.cell_t] - steps[lay.group_index[lay.cell_group]]
    order = np.argsort(event, kind="stable")  # each event time's cells in ascending order, as flatnonzero lists them
    events, starts = np.unique(event[order], return_index=True)
    members = np.split(order, starts[1:])
    return events, members, [*members, np.flatnonzero(~lay.cell_pre)]


@dataclass
class _Cells:
    """What every scope of one estimate is cut from: the cells' coordinates, point estimates, standard errors
    (the band's where drawn, else analytic), draws and flags, and the simultaneous critical value of any subset."""

    settings: Settings
    band: Band
    lay: object
    est: did.CellEstimates
    drawn: BandDraws | None  # the band's bootstrap (None without draws)
    sign: int
    cohort_step: np.ndarray
    cell_step: np.ndarray
    event: np.ndarray
    pre: np.ndarray
    floor: float
    se: np.ndarray
    ase: np.ndarray
    folded: np.ndarray
    small: np.ndarray
    masks: dict[str, np.ndarray]  # the cell subsets with a band of their own
    tmax: dict[str, np.ndarray]  # their sup-t laws (empty without a bootstrap)
    laws: dict = field(default_factory=dict, repr=False)  # the aggregates' laws formed so far (``aggregate_law``)
    point: np.ndarray | None = None  # per cell, the band's pointwise critical value (None: z)

    @classmethod
    def of(cls, panel: Panel, settings: Settings, lay, est: did.CellEstimates, drawn: BandDraws | None) -> _Cells:
        steps = lay.steps
        band = get_band(settings.band)
        cohort_step, cell_step = steps[lay.group_index[lay.cell_group]], steps[lay.cell_t]
        floor = did.se_floor(lay.scale)
        ase = did.floored(est.se, floor)
        pre = lay.cell_pre
        masks = cell_masks(lay, settings)
        se, tmax = ase, {}
        if drawn is not None:  # the band's standard errors and the law of each mask's maximum
            se = drawn.cell_se(floor)
            tmax = drawn.cell_laws(masks, se)
        return cls(
            settings=settings,
            band=band,
            lay=lay,
            est=est,
            drawn=drawn,
            sign=panel.sign(settings.metric),
            cohort_step=cohort_step,
            cell_step=cell_step,
            event=cell_step - cohort_step,
            pre=pre,
            floor=floor,
            se=se,
            ase=ase,
            folded=lay.group_folded[lay.cell_group],
            # the groups under the band's threshold (the classic band keeps R did's 5; the calibrated one flags
            # where simulation shows it does not hold its level)
            small=evidence.small_cells(lay, est, band.small_group_below),
            masks=masks,
            tmax=tmax,
            point=drawn.cell_pointwise(settings.alpha) if drawn is not None else None,
        )

    @property
    def boot(self) -> did.BootstrapDraws | None:
        return self.drawn.boot if self.drawn is not None else None

    @property
    def draws(self) -> np.ndarray | None:
        return self.boot.cells if self.boot is not None else None

    def crit(self, name: str) -> float:
        """Simultaneous critical value over the cells ``masks[name]`` (pointwise z without a bootstrap)."""
        if self.draws is None:
            return z_value(self.settings.alpha)
        return self.drawn.critical_value(self.tmax[name], self.settings.alpha)

    def frame(self, scope: str, mask: np.ndarray, crit: np.ndarray) -> pl.DataFrame:
        e = self.est
        return result_frame(
            self.settings,
            scope,
            cohort=self.cohort_step[mask],
            checkpoint=self.cell_step[mask],
            event_time=self.event[mask],
            att=e.att[mask],
            sign=self.sign,
            se=self.se[mask],
            ase=self.ase[mask],
            crit=crit,
            n_treated=e.n_treated[mask],
            n_control=e.n_control[mask],
            pre=self.pre[mask],
            n_folded=self.folded[mask],
            small=self.small[mask],
            pointwise=self.point[mask] if self.point is not None else None,
        )

    def subset(self, scope: str) -> pl.DataFrame:
        """A scope made of some of the cells (``masks[scope]``), with its own simultaneous band."""
        mask = self.masks[scope]
        return self.frame(scope, mask, np.full(mask.sum(), self.crit(scope)))

    @functools.cached_property
    def aggregates(self):
        """Persistent memorisation by event time and the overall average, in one pass over the draws: event times,
        then point estimates, draws, analytic and band standard errors of each event time and, last, overall (the
        band's ``aggregate_se``: the calibrated band studentises by the analytic one)."""
        events, members, every = aggregate_members(self.lay)
        weighted = self.drawn.agg_weighted if self.drawn is not None else None  # made by the compiled loop, or None
        theta, draws = aggregate(
            self.lay, self.est.att, self.draws, self.boot.group_w if self.boot else None, every, weighted
        )
        influence_se = drdid.analytic_se if isinstance(self.est, drdid.DrEstimates) else analytic_se
        if self.drawn is not None:
            ase, se = self.drawn.aggregate_se(draws, self.floor, lambda: influence_se(self.lay, self.est, every))
            return events, members, theta, draws, ase, se
        ase = did.floored(influence_se(self.lay, self.est, every), self.floor)
        return events, members, theta, draws, ase, ase

    def aggregate_law(self, rows: slice, mask: np.ndarray) -> np.ndarray:
        """The simultaneous law of the aggregates ``rows`` in ``mask``, from their draws and standard errors (the
        band's ``aggregate_law``). Kept: the subgroups' joint band asks for the one of the event times c - g >= 0
        again."""
        key = (rows.start, rows.stop, np.asarray(mask, bool).tobytes())
        if key not in self.laws:
            draws, se = self.aggregates[3][rows], self.aggregates[5][rows]
            self.laws[key] = self.drawn.aggregate_law(draws, se, rows, mask)
        return self.laws[key]

    def aggregate_crit(self, rows: slice, mask: np.ndarray) -> float:
        """Simultaneous critical value of the aggregates ``rows`` in ``mask`` (``aggregate_law``)."""
        return self.drawn.critical_value(self.aggregate_law(rows, mask), self.settings.alpha)


def _profile_crit(c: _Cells) -> np.ndarray:
    """Each cell's critical value: post-treatment and placebo cells are two families, or one with family="all"."""
    pre = c.pre
    crit = np.empty(len(pre))
    if c.settings.family == "all":
        crit[:] = c.crit("all")
    else:
        crit[~pre] = c.crit("post") if (~pre).any() else np.nan
        crit[pre] = c.crit("pre") if pre.any() else np.nan
    return crit


def _persistent(c: _Cells) -> pl.DataFrame:
    """Persistent memorisation: the cells averaged over cohorts at each event time e = c - g, with its own band."""
    est, settings = c.est, c.settings
    events, members, theta, agg_draws, agg_ase, agg_se = c.aggregates
    theta, agg_ase, agg_se = theta[:-1], agg_ase[:-1], agg_se[:-1]
    agg_draws = agg_draws[:-1] if agg_draws is not None else None
    post_e = events >= 0
    fam = post_e if settings.family == "post" else np.ones(len(events), bool)
    crit_e = np.full(len(events), z_value(settings.alpha))
    if agg_draws is not None:
        rows = slice(0, len(events))
        crit_e[fam] = c.aggregate_crit(rows, fam)
        if settings.family == "post" and (~post_e).any():
            crit_e[~post_e] = c.aggregate_crit(rows, ~post_e)
    cells = np.concatenate(members)  # every event time has a cell: its members are runs of this, in order
    starts = np.cumsum([0, *map(len, members[:-1])])

    def per_event(op, values: np.ndarray) -> np.ndarray:  # integer sums and maxima, any: exact in any order
        return op.reduceat(values[cells], starts)

    return result_frame(
        settings,
        "persistent",
        cohort=[None] * len(events),
        checkpoint=[None] * len(events),
        event_time=events,
        att=theta,
        sign=c.sign,
        se=agg_se,
        ase=agg_ase,
        crit=crit_e,
        n_treated=per_event(np.add, est.n_treated),
        n_control=per_event(np.maximum, est.n_control),
        pre=events < 0,
        n_folded=per_event(np.add, c.folded),
        small=per_event(np.logical_or, c.small),
        pointwise=_persistent_pointwise(c, len(events)),
    )


def _persistent_pointwise(c: _Cells, n_events: int) -> np.ndarray | None:
    """The event times' pointwise critical values (the band's ``aggregate_pointwise``: the calibrated band's
    bootstrap-t, as the overall average's); None (z) without draws or where the band has none."""
    if c.drawn is None or c.draws is None:
        return None
    *_, draws, _, se = c.aggregates
    return c.drawn.aggregate_pointwise(draws, se, slice(0, n_events), c.settings.alpha)


def _overall(c: _Cells) -> Overall:
    """The average post-treatment effect (R did's "simple" aggregation) with a pointwise interval: normal (z), or
    its own two-sided bootstrap critical value where the band says so (``pointwise_overall``: the calibrated one)."""
    post_cells = np.flatnonzero(~c.pre)
    z = z_value(c.settings.alpha)
    *_, theta, draws, ase, se = c.aggregates
    if c.drawn is not None and c.drawn.pointwise_overall and draws is not None:
        n = len(theta)
        z = c.aggregate_crit(slice(n - 1, n), np.ones(1, bool))
    o_ase, o_se = float(ase[-1]), float(se[-1])
    o_tau = float(c.sign * theta[-1])
    return Overall(
        estimate=o_tau,
        std_error=o_se,
        analytic_se=o_ase,
        ci_low=o_tau - z * o_se,
        ci_high=o_tau + z * o_se,
        significant=bool(np.isfinite(z * o_se) and abs(o_tau) > z * o_se),
        n_cells=len(post_cells),
        small_group=bool(c.small[post_cells].any()),
    )


def _assemble(panel: Panel, settings: Settings, lay, est: did.CellEstimates, drawn: BandDraws | None) -> EstimateResult:
    """Every scope of the estimate from the cells' point estimates and the band's bootstrap (``Band.bootstrap``;
    None without draws)."""
    return _assembled(panel, settings, lay, est, drawn)[0]


def _assembled(panel: Panel, settings: Settings, lay, est, drawn: BandDraws | None) -> tuple[EstimateResult, _Cells]:
    """``_assemble`` and the ``_Cells`` its scopes were cut from."""
    c = _Cells.of(panel, settings, lay, est, drawn)
    notes = list(lay.notes) + c.band.notes(lay, est, drawn is not None)
    if way := scoring.mixed_note(panel.scorings, panel.done):  # columns scored in different ways: said, not refused
        notes.append(way)
    flat = ~np.isfinite(c.se)
    if drawn is not None:  # the cells the band leaves without a band for a reason of its own, said so
        own, flat = drawn.unbanded(lay, est, flat)
        notes += own
    if flat.any():
        notes.append(
            f"{int(flat.sum())} cells have no sampling variation (standard error under {did.SE_FLOOR_REL:.1e} times "
            "the outcome's standard deviation): no band, never marked significant"
        )
    final = settings.final_step
    if final is not None and final not in lay.steps:  # the documented rule, said where it applies
        read_at = int(lay.steps[final_index(lay.steps, final)])
        notes.append(
            f"final step {final} is not a completed checkpoint: residual memorisation is read at {read_at}, the last "
            "completed checkpoint before it"
        )
    crit = _profile_crit(c)
    result = EstimateResult(
        settings=settings,
        cells=c.frame("profile", c.masks["all"], crit),
        instantaneous=c.subset("instantaneous"),
        persistent=_persistent(c),
        residual=c.subset("residual"),
        overall=_overall(c),
        pretrend=pretrend(c.draws, c.se, est.att, c.pre, settings.alpha, c.tmax.get("pre")),
        crit=float(crit[~c.pre][0]) if (~c.pre).any() else float("nan"),
        cohorts=np.unique(c.cohort_step),
        checkpoints=lay.steps,
        notes=notes,
        band=settings.band,
    )
    return result, c
