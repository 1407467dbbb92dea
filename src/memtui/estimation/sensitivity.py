"""How far parallel trends may fail before a memorisation summary stops being significant (Rambachan & Roth 2023).

The event study is memorisation by event time e = c - g (the persistent scope's curve): placebo event times e < 0,
then e >= 0, with the covariance of their multiplier-bootstrap draws. HonestDiD requires the universal base period
(every cell of a cohort differenced against the checkpoint before it is trained, so that a placebo coefficient is
the violation of parallel trends accumulated up to that event time); the reference event time is 0 by construction
and left out. The numerics are in ``estimation.honest``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.estimation import honest
from memtui.estimation.estimate import aggregate_members
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

METHODS = ("rm", "sd")  # relative magnitudes (Delta^RM(Mbar)), smoothness (Delta^SD(M))
DEFAULT_MBAR = (0.0, 0.5, 1.0, 1.5, 2.0)
BREAKDOWN_TOL = 0.01  # relative tolerance of the breakdown value (of the largest parameter tried)


@dataclass(frozen=True)
class EventStudy:
    """Memorisation by event time (sign applied: positive = memorised) and the covariance of the estimates."""

    event_times: np.ndarray  # in training steps, placebo (< 0) first
    betahat: np.ndarray
    sigma: np.ndarray
    n_pre: int
    n_post: int
    notes: list[str] = field(default_factory=list)

    def target(self, target: str) -> tuple[np.ndarray, str]:
        """The post-period weights of a summary and its name in words: "instantaneous" (event time 0), "persistent"
        (the average over every post event time > 0) or "persistent:E" (event time E alone)."""
        post = self.event_times[self.n_pre :]
        l_vec = np.zeros(self.n_post)
        if target == "instantaneous":
            if post[0] != 0:
                raise MemtuiError("the event study has no event time 0, so no instantaneous memorisation.")
            l_vec[0] = 1.0
            return l_vec, "instantaneous memorisation (event time 0)"
        if target == "persistent":
            later = post > 0
            if not later.any():
                raise MemtuiError("the event study has no event time after 0, so no persistent memorisation.")
            l_vec[later] = 1.0 / later.sum()
            return l_vec, f"persistent memorisation (the average over event times {post[later][0]} to {post[-1]})"
        if target.startswith("persistent:"):
            try:
                e = int(target.split(":", 1)[1])
            except ValueError:
                raise MemtuiError(
                    f"target must be instantaneous, persistent or persistent:EVENT, not '{target}'."
                ) from None
            if e not in post:
                raise MemtuiError(
                    f"event time {e} is not a post-treatment event time of this panel: {[int(p) for p in post]}."
                )
            l_vec[np.flatnonzero(post == e)[0]] = 1.0
            return l_vec, f"persistent memorisation at event time {e}"
        raise MemtuiError(f"target must be instantaneous, persistent or persistent:EVENT, not '{target}'.")

    def honest_input(self, l_vec) -> honest.EventStudyInput:
        return honest.EventStudyInput.of(self.betahat, self.sigma, self.n_pre, self.n_post, l_vec)


def event_study(panel: Panel, settings: Settings, pre: int | None = None, post: int | None = None) -> EventStudy:
    """The event study of ``settings.metric``: event-time aggregates (R did's dynamic aggregation, as the persistent
    scope) and the covariance of their bootstrap draws, keeping the last ``pre`` placebo and first ``post``
    post-treatment event times (all by default)."""
    from memtui.engine import did
    from memtui.engine.layout import build_layout
    from memtui.engine.summaries import aggregate

    if settings.base_period != "universal":
        raise MemtuiError(
            "sensitivity needs the universal base period (HonestDiD's requirement: placebo estimates must accumulate "
            "the pre-trend); pass --base-period universal."
        )
    if settings.estimator != "did":
        raise MemtuiError(f"sensitivity is for the did estimator, not {settings.estimator}.")
    if not settings.draws:
        raise MemtuiError("sensitivity needs the bootstrap's covariance: draws must be at least 20, not 0.")
    panel.refuse_mixed_stages()
    lay = build_layout(
        panel.values(settings.metric), panel.treatment, panel.done_steps, never=NEVER, estimator="did",
        base_period="universal", control_group=settings.control_group,
    )  # fmt: skip
    if not len(lay.cell_group):
        raise MemtuiError("no (cohort, checkpoint) cell can be estimated: no treated cohort falls inside the window.")
    est = did.point_estimates(lay)
    boot = did.bootstrap(lay, est, draws=settings.draws, seed=settings.seed, multiplier=settings.multiplier)
    events, members, _ = aggregate_members(lay)
    theta, draws = aggregate(lay, est.att, boot.cells, boot.group_w, members)
    sign = panel.sign(settings.metric)
    draws = np.asarray(draws, dtype=float)
    # the draws are centred multiplier sums: their second moment estimates the influence-function covariance
    sigma = draws @ draws.T / draws.shape[1]
    return _windowed(events, sign * theta, sigma, pre, post)


def _windowed(events, beta, sigma, pre, post) -> EventStudy:
    """The event study cut to the last ``pre`` placebo and first ``post`` post event times, with notes."""
    is_pre = events < 0
    keep_pre = np.flatnonzero(is_pre)[-pre:] if pre else np.flatnonzero(is_pre)
    keep_post = np.flatnonzero(~is_pre)[:post] if post else np.flatnonzero(~is_pre)
    if not len(keep_pre) or not len(keep_post):
        raise MemtuiError(
            "the event study needs at least one placebo event time (a cohort with a checkpoint two before it is "
            "trained) and one post-treatment event time."
        )
    keep = np.r_[keep_pre, keep_post]
    ev = events[keep]
    notes = []
    # evenly spaced means one gap everywhere, the omitted reference event time included (two gaps from the last
    # placebo event time to 0)
    gaps = np.r_[
        np.diff(ev[: len(keep_pre)]), np.diff(ev[len(keep_pre) :]), (ev[len(keep_pre)] - ev[len(keep_pre) - 1]) / 2
    ]
    if len(np.unique(gaps)) > 1:
        notes.append(
            "the event times are not evenly spaced in steps; the restrictions compare consecutive event times, "
            "whatever their spacing"
        )
    return EventStudy(ev, beta[keep], sigma[np.ix_(keep, keep)], len(keep_pre), len(keep_post), notes)


@dataclass(frozen=True)
class Sensitivity:
    """Robust intervals for one summary under one family of violations, the breakdown value and the original CI."""

    method: str  # "rm" or "sd"
    target: str  # the summary in words
    estimate: float
    original: tuple[float, float]
    intervals: list[honest.Interval]
    breakdown: float | None  # None: not significant even under exact parallel trends
    breakdown_capped: bool  # the conclusion still held at the largest parameter tried
    notes: list[str] = field(default_factory=list)
    resolution: float = 0.0  # the bisection's tolerance on the breakdown value

    @property
    def parameter(self) -> str:
        return "Mbar" if self.method == "rm" else "M"

    def sentence(self) -> str:
        """The breakdown value in a sentence a researcher can quote."""
        what = (
            "post-treatment violations of parallel trends up to {v} times the largest change between consecutive "
            "placebo event times"
            if self.method == "rm"
            else "a pre-trend whose slope changes by up to {v} (metric units) between consecutive event times"
        )
        if self.breakdown is None:
            return (
                f"The {self.target} is not significant even under exact parallel trends ({self.parameter} = 0), "
                "so there is no conclusion to break down."
            )
        v = f"{self.breakdown:.3g}"
        if self.breakdown_capped:
            return f"The {self.target} stays significant under {what.format(v=v)} (the largest value tried)."
        return (
            f"The {self.target} stays significant under {what.format(v=v)}; the breakdown value is "
            f"{self.parameter} = {v} (to within {self.resolution:.2g})."
        )


def interval(es: honest.EventStudyInput, method: str, value: float, alpha: float, **kw) -> honest.Interval:
    """One robust interval: ``method`` "rm" (Delta^RM(value), the C-LF test) or "sd" (Delta^SD(value), the FLCI)."""
    if method == "rm":
        return honest.rm_interval(es, value, alpha=alpha, **kw)
    if method == "sd":
        return honest.flci(es, value, alpha=alpha)[0]
    raise MemtuiError(f"method must be one of {', '.join(METHODS)}, not '{method}'.")


def relative_magnitudes(betahat, sigma, n_pre, n_post, l_vec=None, mbars=DEFAULT_MBAR, alpha=0.05, **kw):
    """Robust CIs under Delta^RM(Mbar) for each Mbar in ``mbars`` (HonestDiD's C-LF defaults)."""
    es = honest.EventStudyInput.of(betahat, sigma, n_pre, n_post, l_vec)
    return [
        honest.rm_interval(es, m, alpha=alpha, grid=kw.get("grid") or rm_grid(es, max(mbars)), **_rm_kw(kw))
        for m in mbars
    ]


def smoothness(betahat, sigma, n_pre, n_post, l_vec=None, ms=None, alpha=0.05):
    """Robust FLCIs under Delta^SD(M) for each M in ``ms`` (default: 5 values up to default_m_max)."""
    es = honest.EventStudyInput.of(betahat, sigma, n_pre, n_post, l_vec)
    ms = default_sd_grid(es, alpha) if ms is None else ms
    return [honest.flci(es, m, alpha=alpha)[0] for m in ms]


def _rm_kw(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k in ("hybrid", "grid_points", "lf_sims", "seed", "cache_lps")}


def rm_grid(es: honest.EventStudyInput, mbar_max: float) -> tuple[float, float]:
    """One theta grid for every Mbar up to ``mbar_max``: the identified set at ``mbar_max`` +- 20 sd(theta-hat)
    (moderndid's default per Mbar; one grid for all keeps the intervals comparable and the breakdown monotone)."""
    lo, hi = honest.rm_identified_set(es, mbar_max)
    return lo - 20 * es.sd_theta, hi + 20 * es.sd_theta


def default_sd_grid(es: honest.EventStudyInput, alpha: float = 0.05, n: int = 5) -> list[float]:
    """M from 0 to an upper confidence bound on the largest second difference of the placebo coefficients (with the
    reference period's 0 after them), as HonestDiD's default takes its Mvec up to DeltaSD_upperBound_Mpre."""
    return list(np.linspace(0, honest.sd_upper_bound_m(es, alpha), n))


def breakdown(es: honest.EventStudyInput, method: str, alpha: float = 0.05, upper: float | None = None,
              tol: float = BREAKDOWN_TOL, **kw) -> tuple[float | None, bool]:  # fmt: skip
    """The largest parameter (Mbar or M) at which the robust CI still excludes 0, to ``tol`` times ``upper``, by
    bisection (the CIs are nested: a larger parameter allows more violations). None when the CI includes 0 already at
    0; (upper, True) when it still excludes 0 at ``upper``."""
    upper = upper if upper is not None else (2.0 if method == "rm" else max(default_sd_grid(es, alpha)[-1], 1e-12))
    if method == "rm":
        kw = {**_rm_kw(kw), "grid": kw.get("grid") or rm_grid(es, upper)}

    def holds(v: float) -> bool:
        return interval(es, method, v, alpha, **kw).excludes_zero()

    if not holds(0.0):
        return None, False
    if holds(upper):
        return upper, True
    lo, hi = 0.0, upper
    while hi - lo > tol * upper:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo, False


def sensitivity(
    study: EventStudy,
    target: str = "instantaneous",
    method: str = "rm",
    grid: list[float] | None = None,
    alpha: float = 0.05,
    tol: float = BREAKDOWN_TOL,
    **kw,
) -> Sensitivity:
    """Robust CIs of one summary over a grid of the restriction's parameter, and the breakdown value."""
    if method not in METHODS:
        raise MemtuiError(f"method must be one of {', '.join(METHODS)}, not '{method}'.")
    l_vec, words = study.target(target)
    es = study.honest_input(l_vec)
    if grid is None:
        grid = list(DEFAULT_MBAR) if method == "rm" else default_sd_grid(es, alpha)
    if any(not np.isfinite(v) or v < 0 for v in grid):
        raise MemtuiError(f"the grid of {'Mbar' if method == 'rm' else 'M'} must be numbers of 0 or more.")
    upper = max(grid) if max(grid) > 0 else None
    if method == "rm":
        kw = {**_rm_kw(kw), "grid": rm_grid(es, upper if upper is not None else 2.0)}
    intervals = [interval(es, method, v, alpha, **kw) for v in grid]
    value, capped = breakdown(es, method, alpha, upper, tol, **kw)
    notes = list(study.notes)
    if any(iv.open_end for iv in intervals):
        notes.append("an interval reaches the end of the theta grid it was inverted over: it may be longer")
    resolution = tol * (upper if upper is not None else 2.0)
    original = honest.original_ci(es, alpha)
    return Sensitivity(method, words, es.theta, original, intervals, value, capped, notes, resolution)


def with_pretrend(study: EventStudy, slope: float) -> EventStudy:
    """The event study with a linear violation of parallel trends added: slope x (periods from the reference), on
    placebo and post coefficients alike (what a trend in the treated instances' metric would add)."""
    k = np.r_[np.arange(-study.n_pre, 0), np.arange(1, study.n_post + 1)]
    return replace(study, betahat=study.betahat + slope * k)
