"""`memtui plan`: how many instances per cohort a new panel needs, from a pilot panel.

From the pilot it takes the variance of an instance's change in the metric over L checkpoints, for treated instances
(pooled over the cohorts' post-treatment cells, by event time) and for validation instances (pooled over every pair
of checkpoints L apart); from those it simulates the simultaneous critical value of the planned design's band and
solves for the cohort size that makes an instantaneous cell (c = g) with effect D significant with the requested
power. The method and its assumptions are in docs/methods.md ("Planning a panel").

Under the calibrated band (the default) a cell is significant when its Welch t statistic exceeds the bootstrap-t
critical value. That value is the large-sample (normal) one mapped through a t law with the cell's
Welch-Satterthwaite degrees of freedom at the same per-cell level (``Band.plan_crit``); it matches the mean calibrated
critical value of simulated panels within about 1 % from 10 to 100 instances per cohort (tests/estimation/test_plan.py),
and the power is that of a non-central t. Under the classic band (``plan_crit`` None) the plan is the large-sample one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine import did
from memtui.engine import power as pw
from memtui.engine.band_registry import BANDS, DEFAULT_BAND, band_names
from memtui.engine.layout import NEVER_INDEX, build_layout
from memtui.estimation.estimate import EstimateResult, z_value
from memtui.estimation.settings import Settings, check_alpha
from memtui.panel.hdf5 import read_lengths
from memtui.panel.model import NEVER, Panel

PYTHIA_ROW = 2049  # tokens per Pythia training row (2048 + 1): the row length assumed when a pilot stores no tokens
VALIDATION_MODES = ("optimal", "pilot")
# What scoring costs on a GPU: the tokens per second one NVIDIA H100 80GB HBM3 scored with memtui's fast path (bf16
# body, random weights, 2,049-token rows, the largest batch that fit; benchmarks/results/h100-2026-11-28,
# docs/extraction.md "Speed"), and the batch-invariant path's time over the fast path's there with every metric (the
# CUDA default): the larger of the two ratios measured (1.33 at the 1.4b shape, 1.03 at OLMo-2-7B's), so an upper guide
H100_FAST_TOKENS_PER_S = {"pythia-1.4b": 126_371.0, "pythia-6.9b": 36_973.0, "pythia-12b": 22_769.0}
H100_INVARIANT_COST = 1.33


def gpu_hours(tokens: float) -> dict[str, float]:
    """Hours of one H100 to score ``tokens`` with the default (batch-invariant) scorer, per measured model shape."""
    return {name: tokens * H100_INVARIANT_COST / rate / 3600 for name, rate in H100_FAST_TOKENS_PER_S.items()}


# No plan asks for more instances in one cohort or validation set than this: Pythia's whole training set is 146M
# sequences (143,000 steps x 1024), so a larger answer says the effect cannot be detected, not how to detect it.
MAX_INSTANCES = 10**9
PLAN_BANDS = band_names()
# the band a large-sample plan reports (every band's plan without draws is one): the first registered band that
# plans with the large-sample critical value and normal power, asked of the band objects
LARGE_SAMPLE_BAND = next(name for name, band in BANDS.items() if not band.small_sample_plan)
_DEFAULTS = Settings()  # the estimate's alpha and seed, written once there


@dataclass(frozen=True)
class Pilot:
    """What a planned cell's standard error depends on, measured on a pilot panel."""

    metric: str
    v_treated: np.ndarray  # V_T(L), L = 0 .. : variance of a treated instance's change over L checkpoints
    v_control: np.ndarray  # V_C(L): the same for validation (never-treated) instances
    treated_lags: int  # largest L measured on treated instances (later lags hold its value)
    n_cohorts: int
    n_treated: int  # treated instances in the cohorts used
    n_control: int
    checkpoints: int
    row_length: float | None  # mean tokens per instance, None when the pilot stores no tokens

    @property
    def s_treated(self) -> float:
        """Variance of a treated instance's change at c = g (lag 1: from the checkpoint before g to g)."""
        return float(self.v_treated[1])

    @property
    def s_control(self) -> float:
        return float(self.v_control[1])


def _fill_forward(v: np.ndarray) -> np.ndarray:
    """NaN entries take the last finite value before them (lags no pilot cell measured)."""
    idx = np.where(np.isfinite(v), np.arange(len(v)), 0)
    return v[np.maximum.accumulate(idx)]


def pilot_variances(panel: Panel, metric: str) -> Pilot:
    """Variograms of the metric for treated and validation instances, in checkpoints (see engine/power.py)."""
    y = panel.values(metric)
    lay = build_layout(y, panel.treatment, panel.done_steps, never=NEVER)
    t = len(lay.steps)
    post = ~lay.cell_pre
    if not post.any():
        raise MemtuiError(
            "the pilot has no post-treatment cell (no cohort is first trained on inside its completed checkpoints), "
            "so it shows nothing to plan from; use a pilot with treated cohorts."
        )
    if lay.scale == 0:
        raise MemtuiError(f"metric '{clean(metric, 80)}' is constant in the pilot; plan with a metric that varies.")
    yy = lay.y[:, :t]
    v_t, treated_lags = _treated_variogram(lay, post)
    y0, v_c = _validation_variogram(lay, yy)
    _check_noise(lay, metric, v_t, v_c)
    return Pilot(
        metric=metric,
        v_treated=v_t,
        v_control=v_c,
        treated_lags=treated_lags,
        n_cohorts=len(lay.cohort_groups),
        n_treated=int(lay.group_n[lay.cohort_groups].sum()),
        n_control=len(y0),
        checkpoints=t,
        row_length=row_length(panel),
    )


def _treated_variogram(lay, post: np.ndarray) -> tuple[np.ndarray, int]:
    """Treated instances' variance of the change over each lag (pooled over cohorts' post-treatment cells, filled
    forward past the last lag measured), and that last lag."""
    t = len(lay.steps)
    yy = lay.y[:, :t]
    z = yy - np.repeat(lay.means[:, :t], lay.group_n, axis=0)
    # sums of squared centred changes of every cohort's post-treatment cells, from each cohort's t x t Gram matrix
    groups = np.unique(lay.cell_group[post])
    q = np.zeros((lay.n_groups, t, t))
    for k in groups:  # one matrix product per cohort, as in engine/did.py
        q[k] = z[lay.rows(k)].T @ z[lay.rows(k)]
    g, c, b = lay.cell_group[post], lay.cell_t[post], lay.cell_b[post]
    ss = q[g, c, c] + q[g, b, b] - 2 * q[g, c, b]
    lag = c - b
    # pooled over cohorts with n_g - 1 degrees of freedom each: every cohort's deviations around its own mean
    df = np.bincount(lag, weights=lay.group_n[g] - 1.0, minlength=t)
    with np.errstate(invalid="ignore", divide="ignore"):
        v_t = np.bincount(lag, weights=ss, minlength=t) / df
    v_t[0] = 0.0
    if not np.isfinite(v_t[1]):
        raise MemtuiError(
            "every cohort of the pilot has a single instance, so the variance of treated instances cannot be "
            "measured; use a pilot with at least two instances per cohort."
        )
    treated_lags = int(np.flatnonzero(np.isfinite(v_t))[-1])
    v_t = _fill_forward(v_t[: treated_lags + 1])
    return v_t, treated_lags


def _validation_variogram(lay, yy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The validation instances' rows and their variance of the change over each lag (from their covariance)."""
    t = yy.shape[1]
    never = lay.group_index == NEVER_INDEX
    rows = lay.rows(int(np.flatnonzero(never)[0]))
    y0 = yy[rows]
    if len(y0) < 2:
        raise MemtuiError(
            "the pilot has a single validation instance, so the variance of validation instances cannot be "
            "measured; use a pilot with more validation instances."
        )
    s = np.cov(y0, rowvar=False).reshape(t, t)
    d = np.diag(s)
    change = d[:, None] + d[None, :] - 2 * s
    gap = np.abs(np.arange(t)[:, None] - np.arange(t)[None, :])
    v_c = np.bincount(gap.ravel(), weights=change.ravel(), minlength=t) / np.bincount(gap.ravel(), minlength=t)
    v_c[0] = 0.0
    return y0, v_c


def _check_noise(lay, metric: str, v_t: np.ndarray, v_c: np.ndarray) -> None:
    """Refuse a pilot whose one-checkpoint changes are below the engine's standard-error floor."""
    # an instance's change with a standard deviation at the engine's floor (a cell without sampling variation) is
    # rounding, not noise: planning on it would divide by ~0 (a plan of 10^16 validation instances)
    floor = did.se_floor(lay.scale)
    for who, v in (("treated", v_t), ("validation", v_c)):
        if not math.sqrt(max(v[1], 0.0)) > floor:  # the cell's standard error would be 0 whatever the size
            raise MemtuiError(
                f"in the pilot, {who} instances all change alike from one checkpoint to the next in "
                f"'{clean(metric, 80)}' (up to rounding: standard deviation {math.sqrt(max(v[1], 0.0)):.2g}, the "
                f"metric's {lay.scale:.3g}), so its noise cannot be measured; plan with a metric that varies."
            )


def row_length(panel: Panel) -> float | None:
    """Mean tokens per instance of a panel that stores tokens (``instances/length``), else None."""
    if not panel.has_tokens or panel.path is None:
        return None
    lengths = read_lengths(panel.path)
    return float(np.mean(lengths)) if lengths is not None and len(lengths) else None


@dataclass(frozen=True)
class PlanRow:
    label: str
    effect: float
    per_cohort: int | None  # None: not reachable (``reason`` says why)
    validation: int | None
    crit: float
    power: float  # achieved at the rounded sizes
    reason: str = ""  # why a row is not reachable
    df: float = math.inf  # Welch degrees of freedom of a c = g cell at these sizes (inf: the large-sample band)

    def panel_size(self, cohorts: int) -> int | None:
        return None if self.per_cohort is None else cohorts * self.per_cohort + self.validation


@dataclass(frozen=True)
class Plan:
    cohorts: int
    checkpoints: int
    power: float
    alpha: float
    validation: str  # "optimal", "pilot" or a count
    n_cells: int
    draws_used: int  # draws of the critical value's simulation; 0 = Sidak bound (or pointwise, draws = 0)
    rows: list[PlanRow]
    band: str = LARGE_SAMPLE_BAND  # the band planned for: the large-sample plans (without draws, too) say theirs


def _se(pilot: Pilot, n: float, n0: float) -> float:
    return math.sqrt(pilot.s_treated / n + pilot.s_control / n0)


def welch_df(pilot: Pilot, n: float, n0: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a c = g cell with n treated and n0 validation instances."""
    a, b = pilot.s_treated / n, pilot.s_control / n0
    return (a + b) ** 2 / (a**2 / max(n - 1, 1e-9) + b**2 / max(n0 - 1, 1e-9))


def calibrated_crit(normal_crit: float, df: float) -> float:
    """The calibrated band's critical value for a design whose large-sample (normal) one is ``normal_crit``: the t
    quantile with ``df`` degrees of freedom at the same per-cell level (``Band.plan_crit``)."""
    return BANDS[DEFAULT_BAND].plan_crit(normal_crit, df)


def t_power(effect: float, se: float, crit: float, df: float) -> float:
    """P(|T| > crit) for a Welch t statistic with ``df`` degrees of freedom and non-centrality effect / se."""
    from scipy import stats

    delta = abs(effect) / se
    got = float(stats.nct.sf(crit, df, delta) + stats.nct.cdf(-crit, df, delta))
    # scipy's non-central t gives NaN far in the tail (large non-centrality), where the normal law is as good
    return got if math.isfinite(got) else float(pw.power(effect, se, crit))


def _smallest(ok, start: int, limit: int = 10**9) -> int | None:
    """The smallest n >= 2 with ok(n), for ok monotone in n, searching from ``start``; None beyond ``limit``."""
    lo, hi = 1, max(2, start)
    while not ok(hi):
        if hi > limit:
            return None
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def validation_ratio(pilot: Pilot, mode: str, cohorts: int) -> float:
    """Validation instances per instance of one cohort (n_0 / n_g) for a ratio mode.

    ``optimal`` minimises the instances to score, G n_g + n_0, for a given c = g standard error
    (V_T / n_g + V_C / n_0 fixed): n_0 / n_g = sqrt(G V_C / V_T). ``pilot`` keeps the pilot's validation share.
    """
    if mode == "optimal":
        return math.sqrt(cohorts * pilot.s_control / pilot.s_treated)
    return pilot.n_control / pilot.n_treated * cohorts


def plan_sizes(
    pilot: Pilot,
    effects: list[tuple[str, float]],
    *,
    cohorts: int,
    checkpoints: int,
    power: float = 0.8,
    alpha: float = _DEFAULTS.alpha,
    validation: str | int = "optimal",
    draws: int = pw.PLAN_DRAWS,
    seed: int = _DEFAULTS.seed,
    band: str = DEFAULT_BAND,
) -> Plan:
    """Cohort size (and validation count) that detects each effect at c = g with ``power`` under the band.

    ``draws``: of the critical value's simulation (fewer where the design is large, see ``BandModel.crit``); 0 plans
    for pointwise bands (an estimate without bootstrap), crit = z. ``band``: a registered band's name (the
    estimate's default; one whose ``plan_crit`` maps the large-sample value to small samples, as the calibrated one,
    plans with it and a non-central t power; the others plan with the large-sample normal values).
    """
    check_plan_args(power=power, alpha=alpha, cohorts=cohorts, checkpoints=checkpoints, effects=effects)
    if band not in BANDS:
        raise MemtuiError(f"band must be one of {', '.join(BANDS)}, not '{band}'.")
    if draws and BANDS[band].small_sample_plan:
        return _plan_small_sample(pilot, effects, cohorts=cohorts, checkpoints=checkpoints, power=power, alpha=alpha,
                                  validation=validation, draws=draws, seed=seed, band=band)  # fmt: skip
    return _plan_large_sample(pilot, effects, cohorts=cohorts, checkpoints=checkpoints, power=power, alpha=alpha,
                              validation=validation, draws=draws, seed=seed)  # fmt: skip


def _plan_large_sample(pilot: Pilot, effects, *, cohorts, checkpoints, power, alpha, validation, draws, seed) -> Plan:
    """``plan_sizes`` with the large-sample (normal) critical value and power (the classic band's plan; every band's
    without draws)."""
    n_cells = pw.n_post_cells(cohorts, checkpoints)
    used = [0]
    crits: dict[float, float] = {}
    model = pw.BandModel(pilot.v_treated, pilot.v_control, cohorts=cohorts, checkpoints=checkpoints) if draws else None

    def crit_for(kappa: float) -> float:
        """Critical value for n_0 / n_g = kappa: only that ratio shapes the cells' correlations. Rounded to a grid
        of steps of 2^(1/4) (about 19 %, over which the value moves by less than its Monte-Carlo error), so that a
        fixed-point search and the table's rows reuse one simulation."""
        if draws == 0:  # no bootstrap: the estimate's bands are pointwise
            return z_value(alpha)
        kappa = float(2 ** (round(4 * math.log2(kappa)) / 4))
        if kappa not in crits:
            crits[kappa], used[0] = model.crit(1.0, kappa, alpha, draws, seed)
        return crits[kappa]

    rows = []
    if isinstance(validation, str):
        kappa = validation_ratio(pilot, validation, cohorts)
        crit = crit_for(kappa)
        rows += [_row_at_ratio(pilot, label, effect, kappa, crit, power) for label, effect in effects]
    else:
        n0 = int(validation)
        for label, effect in effects:
            rows.append(_row_at_count(pilot, label, effect, n0, crit_for(validation_ratio(pilot, "optimal", cohorts)),
                                      crit_for, power))  # fmt: skip
    return Plan(cohorts, checkpoints, power, alpha, str(validation), n_cells, used[0], rows)


def _row_at_ratio(pilot: Pilot, label: str, effect: float, kappa: float, crit: float, power: float) -> PlanRow:
    """The plan row of one effect with n_0 = kappa n_g: the smallest n_g that reaches ``power`` at ``crit``."""
    ratio = pw.detectable_ratio(power, crit)
    # (ratio * sd / effect)^2 as a product: ** on a float overflows with an exception, * gives inf
    root = ratio * math.sqrt(pilot.s_treated + pilot.s_control / kappa) / effect
    need = root * root
    n = max(2, math.ceil(need)) if need <= MAX_INSTANCES else math.inf
    n0 = max(2, math.ceil(kappa * n)) if kappa * n <= MAX_INSTANCES else math.inf
    if not (n <= MAX_INSTANCES and n0 <= MAX_INSTANCES):
        return PlanRow(label, effect, None, None, crit, float("nan"), _too_many(n, n0))
    return PlanRow(label, effect, n, n0, crit, float(pw.power(effect, _se(pilot, n, n0), crit)))


def _row_at_count(pilot: Pilot, label: str, effect: float, n0: int, crit: float, crit_for, power: float) -> PlanRow:
    """The plan row of one effect with n0 validation instances, starting from ``crit``; ``crit_for(n_0 / n_g)``
    gives the critical value of a ratio."""
    n, seen = None, set()
    # the critical value depends on n_0 / n_g: iterate to a fixed point (a cycle ends at its largest n)
    reason = ""
    while True:
        step = effect / pw.detectable_ratio(power, crit)
        room = step * step - pilot.s_control / n0
        if room <= 0:
            n, reason = None, f"not reachable with {n0} validation instances"
            break
        if not pilot.s_treated / room <= MAX_INSTANCES:
            n, reason = None, _too_many(pilot.s_treated / room, n0)
            break
        n = max(2, math.ceil(pilot.s_treated / room))
        if n in seen:
            n = max(seen)
            crit = crit_for(n0 / n)
            break
        seen.add(n)
        crit = crit_for(n0 / n)
    achieved = float(pw.power(effect, _se(pilot, n, n0), crit)) if n else float("nan")
    return PlanRow(label, effect, n, n0 if n else None, crit, achieved, reason)


def _too_many(per_cohort: float, validation: float) -> str:
    who = "per cohort" if per_cohort > MAX_INSTANCES else "validation"
    return f"needs more than {MAX_INSTANCES:.0e} instances {who}: too small to detect"


def _plan_small_sample(
    pilot: Pilot, effects, *, cohorts, checkpoints, power, alpha, validation, draws, seed, band: str
) -> Plan:
    """``plan_sizes`` under a band with a small-sample ``plan_crit`` (the calibrated one): per candidate size, the
    normal critical value of the design (it depends on n_0 / n_g only) mapped through the c = g cell's Welch t law
    (``plan_crit``), and the non-central t power; it starts from the large-sample plan."""
    normal = _plan_large_sample(pilot, effects, cohorts=cohorts, checkpoints=checkpoints, power=power, alpha=alpha,
                                validation=validation, draws=draws, seed=seed)  # fmt: skip
    model = pw.BandModel(pilot.v_treated, pilot.v_control, cohorts=cohorts, checkpoints=checkpoints)
    crits: dict[float, float] = {}

    def normal_crit(kappa: float) -> float:  # as plan_sizes' crit_for: a grid of ratios, one simulation each
        kappa = float(2 ** (round(4 * math.log2(kappa)) / 4))
        if kappa not in crits:
            crits[kappa] = model.crit(1.0, kappa, alpha, draws, seed)[0]
        return crits[kappa]

    def sizes(n: int) -> int:
        if isinstance(validation, str):
            return max(2, math.ceil(validation_ratio(pilot, validation, cohorts) * n))
        return int(validation)

    def evaluate(n: int, effect: float) -> tuple[float, float, float]:
        n0 = sizes(n)
        df = welch_df(pilot, n, n0)
        crit = BANDS[band].plan_crit(normal_crit(n0 / n), df)
        return t_power(effect, _se(pilot, n, n0), crit, df), crit, df

    rows = []
    for (label, effect), first in zip(effects, normal.rows, strict=True):
        if first.per_cohort is None:
            rows.append(first)
            continue
        n = _smallest(lambda m, effect=effect: evaluate(m, effect)[0] >= power, first.per_cohort)
        if n is None:
            rows.append(PlanRow(label, effect, None, None, first.crit, float("nan"), "not reachable at these sizes"))
            continue
        achieved, crit, df = evaluate(n, effect)
        rows.append(PlanRow(label, effect, n, sizes(n), crit, achieved, df=df))
    return Plan(cohorts, checkpoints, power, alpha, str(validation), normal.n_cells, normal.draws_used, rows,
                band=band)  # fmt: skip


def check_plan_args(*, power: float, alpha: float, cohorts: int | None, checkpoints: int | None, effects=()) -> None:
    """One-line refusals of a plan that makes no sense (None: a size not chosen yet, the pilot's)."""
    if not 0 < power < 1:
        raise MemtuiError(f"--power must be between 0 and 1 (e.g. 0.8), not {power}.")
    check_alpha(alpha, "--alpha")
    for name, value in (("--cohorts", cohorts), ("--checkpoints", checkpoints)):
        if value is not None and value < 1:
            raise MemtuiError(f"{name} must be at least 1, not {value}.")
    if cohorts is not None and checkpoints is not None and cohorts >= checkpoints:
        raise MemtuiError(
            f"{cohorts} cohorts need at least {cohorts + 1} checkpoints (cohort k is first trained at checkpoint k, "
            f"after checkpoint 0); pass --checkpoints {cohorts + 1} or more, or fewer --cohorts."
        )
    for label, effect in effects:
        if not (math.isfinite(effect) and effect > 0):
            raise MemtuiError(f"the effect to detect must be a positive number, not {effect:g} ({label}).")


def minimum_detectable_effect(
    panel: Panel, settings: Settings, power: float = 0.8, result: EstimateResult | None = None
) -> float:
    """The instantaneous memorisation (c = g) the panel detects with probability ``power`` under its own band.

    A cell with standard error se is significant with that power when its effect is ``detectable_ratio(power, crit)
    * se`` (crit: the profile band's critical value, or z without a bootstrap); this is that effect for the median
    standard error of the instantaneous cells, a typical cohort. Pass the panel's ``result`` to skip re-estimating.
    NaN when no instantaneous cell has a standard error.
    """
    if not 0 < power < 1:
        raise MemtuiError(f"power must be between 0 and 1, not {power}.")
    if result is None:
        from memtui.estimation.estimate import estimate

        result = estimate(panel, settings)
    se = result.instantaneous["std_error"].to_numpy()
    se = se[np.isfinite(se)]
    if not len(se) or not math.isfinite(result.crit):
        return float("nan")
    return pw.detectable_ratio(power, result.crit) * float(np.median(se))
