"""How far parallel trends may fail before a memorisation summary stops being significant (Rambachan & Roth 2023).

The event study is memorisation by event time e = c - g (the persistent scope's curve): placebo event times e < 0,
then e >= 0, with the covariance of their multiplier-bootstrap draws. HonestDiD requires the universal base period
(every cell of a cohort differenced against the checkpoint before it is trained, so that a placebo coefficient is
the violation of parallel trends accumulated up to that event time); the reference event time is 0 by construction
and left out. The numerics are in ``engine.honest`` (numpy and scipy).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.engine import honest
from memtui.estimation.estimate import aggregate_members
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

METHODS = ("rm", "sd")  # relative magnitudes (Delta^RM(Mbar)), smoothness (Delta^SD(M))
DEFAULT_MBAR = (0.0, 0.5, 1.0, 1.5, 2.0)
BREAKDOWN_TOL = 0.01  # relative tolerance of the breakdown value (of the largest parameter tried)
# Delta^RM(Mbar)'s rows hold 1 and Mbar side by side; the LP solver (HiGHS) keeps about 1e-7 of a row's largest
# coefficient, so past 1e6 the unit coefficients drown (at 1e10 the LPs stall, at 1e15 the identified set comes back
# as a point). Mbar counts multiples of the largest placebo change: 1e6 is far past any violation worth asking about.
MBAR_MAX = 1e6


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
    all_pre, all_post = np.flatnonzero(is_pre), np.flatnonzero(~is_pre)
    if not len(all_pre) or not len(all_post):
        raise MemtuiError(
            "the event study needs at least one placebo event time (a cohort with a checkpoint two before it is "
            "trained) and one post-treatment event time."
        )
    keep_pre = all_pre[len(all_pre) - _count("pre", pre, len(all_pre), "placebo") :]
    keep_post = all_post[: _count("post", post, len(all_post), "post-treatment")]
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


def _count(option: str, value: int | None, available: int, kind: str) -> int:
    """How many event times of a kind to keep: all when ``value`` is None, else a count from 1 to what the panel has
    (0 is not "all" and -1 is not "all but one": Python's slices would read them so)."""
    if value is None:
        return available
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= available:
        raise MemtuiError(
            f"--{option} {value}: the panel has {available} {kind} event time(s); keep from 1 to {available}, or "
            f"leave --{option} out to keep them all."
        )
    return int(value)


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
    """Robust CIs under Delta^RM(Mbar) for each Mbar in ``mbars`` (HonestDiD's C-LF defaults; each Mbar's theta grid
    from its own identified set unless ``grid`` is given)."""
    es = honest.EventStudyInput.of(betahat, sigma, n_pre, n_post, l_vec)
    mbars = check_grid(mbars, "rm")
    return [honest.rm_interval(es, m, alpha=alpha, grid=kw.get("grid"), **_rm_kw(kw)) for m in mbars]


def smoothness(betahat, sigma, n_pre, n_post, l_vec=None, ms=None, alpha=0.05):
    """Robust FLCIs under Delta^SD(M) for each M in ``ms`` (default: 5 values up to default_m_max)."""
    es = honest.EventStudyInput.of(betahat, sigma, n_pre, n_post, l_vec)
    ms = default_sd_grid(es, alpha) if ms is None else check_grid(ms, "sd")
    return [honest.flci(es, m, alpha=alpha)[0] for m in ms]


def _rm_kw(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k in ("hybrid", "grid_points", "lf_sims", "seed", "cache_lps")}


def check_grid(grid, method: str) -> list[float]:
    """The values of Mbar (rm) or M (sd) to compute, or a one-line refusal of a grid that cannot be honoured: empty,
    not a number, negative, infinite, listed twice, or (Mbar) past what the arithmetic holds (MBAR_MAX). M is in
    the metric's units, so its ceiling is where the interval itself overflows (sensitivity checks that)."""
    name = "Mbar" if method == "rm" else "M"
    try:
        values = [float(v) for v in grid]
    except (TypeError, ValueError):
        raise MemtuiError(f"the grid of {name} must be numbers, not {grid!r}.") from None
    if not values:
        raise MemtuiError(f"the grid of {name} is empty: give at least one value, e.g. 0,0.5,1.")
    bad = [v for v in values if not (np.isfinite(v) and v >= 0)]
    if bad:
        raise MemtuiError(f"the grid of {name} must be finite numbers of 0 or more, not {bad[0]:g}.")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise MemtuiError(f"the grid of {name} lists {twice[0]:g} more than once: give each value once.")
    if method == "rm" and max(values) > MBAR_MAX:
        raise MemtuiError(
            f"Mbar = {max(values):g} is past what the linear programmes can hold (at most {MBAR_MAX:g} times the "
            "largest placebo change): use a smaller Mbar."
        )
    return values


def default_sd_grid(es: honest.EventStudyInput, alpha: float = 0.05, n: int = 5) -> list[float]:
    """M from 0 to an upper confidence bound on the largest second difference of the placebo coefficients (with the
    reference period's 0 after them), as HonestDiD's default takes its Mvec up to DeltaSD_upperBound_Mpre."""
    return list(np.linspace(0, honest.sd_upper_bound_m(es, alpha), n))


def breakdown(es: honest.EventStudyInput, method: str, alpha: float = 0.05, upper: float | None = None,
              tol: float = BREAKDOWN_TOL, known: dict[float, bool] | None = None,
              **kw) -> tuple[float | None, bool, float]:  # fmt: skip
    """The largest parameter (Mbar or M) at which the robust CI still excludes 0, by bisection (the CIs are nested: a
    larger parameter allows more violations), and the width of the bracket it ends in: at most ``tol`` times its
    upper end (``tol`` squared times the parameter's scale near 0). ``known``: parameters already computed -> whether
    their CI excludes 0 (the grid's rows), which narrow the first bracket. None when the CI includes 0 already at 0;
    (upper, True) when it still excludes 0 at ``upper``."""
    upper = upper if upper is not None else (2.0 if method == "rm" else max(default_sd_grid(es, alpha)[-1], 1e-12))
    if method == "rm":
        kw = {**_rm_kw(kw), "grid": kw.get("grid")}  # None: each Mbar's own grid (honest.rm_grid)
    known = dict(known or {})

    def holds(v: float) -> bool:
        if v not in known:
            known[v] = interval(es, method, v, alpha, **kw).excludes_zero()
        return known[v]

    if not holds(0.0):
        return None, False, 0.0
    lo, hi = 0.0, upper
    for v in sorted(known):  # the largest value held by every smaller one, and the first that fails after it
        if v > upper:
            break
        if not known[v]:
            hi = v
            break
        lo = v
    if hi == upper and holds(upper):
        return upper, True, 0.0
    # the parameter's own scale (Mbar: multiples of the largest placebo change; M: the default grid's top) sets the
    # resolution near 0, where a tolerance relative to the value would never end a breakdown at 0 itself
    small = tol * (1.0 if method == "rm" else max(honest.sd_upper_bound_m(es, alpha), 1e-12))
    while hi - lo > tol * max(hi, small):
        # a bracket spanning decades (a grid of 0, 1, 10000) is halved in log scale first, then in steps
        base = max(lo, small)
        mid = np.sqrt(base * hi) if hi > 4 * base else (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo, False, hi - lo


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
    grid = check_grid(grid, method) if grid is not None else None
    if grid is None:
        grid = list(DEFAULT_MBAR) if method == "rm" else default_sd_grid(es, alpha)
    upper = max(grid) if max(grid) > 0 else None
    if method == "rm":
        kw = _rm_kw(kw)  # each Mbar's theta grid from its own identified set (honest.rm_grid)
    with np.errstate(over="ignore", invalid="ignore"):  # an M near 1e308 overflows (inf - inf): refused below
        intervals = [interval(es, method, v, alpha, **kw) for v in grid]
    # an rm interval is NaN where no theta is accepted (an empty set); an FLCI always has finite ends
    overflow = [iv.parameter for iv in intervals if np.isinf([iv.low, iv.high]).any() or method == "sd"
                and not np.isfinite([iv.low, iv.high]).all()]  # fmt: skip
    if overflow:
        raise MemtuiError(
            f"the interval at {'Mbar' if method == 'rm' else 'M'} = {overflow[0]:g} overflows double precision: "
            "use a smaller value."
        )
    known = {iv.parameter: iv.excludes_zero() for iv in intervals}
    value, capped, resolution = breakdown(es, method, alpha, upper, tol, known, **kw)
    notes = list(study.notes)
    if any(iv.open_end for iv in intervals):
        notes.append("an interval reaches the end of the theta grid it was inverted over: it may be longer")
    original = honest.original_ci(es, alpha)
    return Sensitivity(method, words, es.theta, original, intervals, value, capped, notes, resolution)


def with_pretrend(study: EventStudy, slope: float) -> EventStudy:
    """The event study with a linear violation of parallel trends added: slope x (periods from the reference), on
    placebo and post coefficients alike (what a trend in the treated instances' metric would add)."""
    k = np.r_[np.arange(-study.n_pre, 0), np.arange(1, study.n_post + 1)]
    return replace(study, betahat=study.betahat + slope * k)
