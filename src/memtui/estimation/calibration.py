"""`memtui calibrate`: the family-wise error of every band family at a panel's own design, by simulation.

A simultaneous band holds its level only approximately, and how well depends on the design (instances per cohort,
validation instances, cells, how the metric's noise is correlated over training): docs/calibration-study.md measures
it on memtui's own simulated designs. This module measures it on panels *matched to the user's panel*:

- **The design is the panel's own**: its layout (cohorts and their sizes, the validation set, the completed
  checkpoints, the cells of the chosen estimator, controls and base period) is built once and every simulated panel
  reuses it; only the outcomes change.
- **The noise is the panel's own, with every effect removed.** Each instance's trajectory minus its group's mean
  trajectory (group: a cohort, or the never-treated) is a residual that no memorisation effect can reach (an effect
  common to a cohort is in the cohort's mean; what varies between its instances is part of the noise the estimate
  faces). Each group's covariance over the checkpoints is its residuals' (n_g - 1 degrees of freedom), shrunk towards
  the covariance pooled over all groups with a prior weight of T instances (T checkpoints): a cohort with fewer
  instances than checkpoints has a rank-deficient covariance of its own, which would correlate its simulated cells
  more than the real ones; a cohort of one has none and takes the pooled one.
- **The simulated panels have no memorisation**: every group's outcome is zero-mean noise, so every cell's true value
  is 0 (for the extractable estimator too: its level is 0) and any flagged cell is a false positive.
  ``noise="gaussian"`` draws normal noise with each group's covariance. ``noise="resampled"`` (the default) draws each
  instance's noise as a whole residual trajectory of the panel, its changes from checkpoint to checkpoint each scaled
  to its group's variance of that change (shrunk towards the pooled one as above): the panel's own tails, skew and
  serial dependence, the group's own spread of every change, the pooled correlation between changes. The scaling is
  diagonal in the changes on purpose: the estimates are changes (cohort minus controls, checkpoint minus base), and a
  full re-colouring by each group's estimated covariance (whitened by the pooled one, re-coloured by the group's, as
  calibrate once did) is a noisy matrix that mixes every change of a trajectory into every other. Mixing with weights
  of both signs averages the third moments away: on a random walk of skewed steps (30 per cohort, 20 x 21) it
  reported 31-35 % for the pre-trend test where ``estimate`` rejects 44-50 % of independent null panels
  (tests/estimation/test_calibration_skew.py holds the two equal within Monte-Carlo error).

Every band of the registry (``engine.band_registry.BANDS``) is measured on the same simulated panels. One multiplier
bootstrap (the estimate's draws and seed rule) serves every band that reads only its draws: the calibrated one
(``engine.bands``) and the classic one (the same draws: bitwise those of ``did.bootstrap``); a band that forms its own
laws runs its own (``Band.from_draws`` is None). Each is assembled as ``estimation.estimate`` assembles it, the
pre-trend test by the estimate's own function. A band that refuses the settings (``Band.refusal``) or a simulated
panel (a one-line ``MemtuiError`` from its bootstrap) is reported as not calibrated, with the reason. Counted per
panel, as in benchmarks/calibration.py: whether the band of the post-treatment cells flags a cell (``post``), the
same for every cell as one family (``all``), the pre-trend test rejecting (``pretrend``), and the instantaneous
(c = g) and persistent (event times e >= 0) bands.
The family-wise error is the share of panels with a flag; its Monte-Carlo standard error sqrt(p (1 - p) / R).

A verdict ("holds its level", "over-rejects", the table's "!") needs enough panels to tell the nominal level alpha
from twice it: 2 alpha must lie ``EXCESS_SIGMAS`` Monte-Carlo errors above alpha, measured at alpha,
alpha = EXCESS_SIGMAS sqrt(alpha (1 - alpha) / R), i.e. R >= EXCESS_SIGMAS^2 (1 - alpha) / alpha (``panels_needed``:
76 at 5 %, 396 at 1 %). Below that the rates are shown, with no verdict and the number needed (2 panels once read
"post 50.0 +- 35.4 %, holds its level at this design").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.engine import did
from memtui.engine.band_registry import BANDS, band_names
from memtui.engine.layout import NEVER_INDEX, Layout, build_layout
from memtui.engine.summaries import aggregate
from memtui.estimation.estimate import aggregate_members, cell_masks
from memtui.estimation.pretrend import pretrend
from memtui.estimation.settings import DEFAULT_DRAWS, Settings
from memtui.panel.model import NEVER, Panel

FAMILIES = ("post", "all", "pretrend", "instantaneous", "persistent")
BAND_NAMES = band_names()  # every registered band, each measured from the same null panels
NOISES = ("resampled", "gaussian")
BUDGET_S = 30.0  # default: as many panels as fit in about this long
MIN_PANELS, MAX_PANELS = 60, 400  # the default's range: MC error at 5 % from 2.8 to 1.1 points
EXCESS_SIGMAS = 2.0  # a family "over-rejects" when its rate exceeds alpha by this many Monte-Carlo errors


def panels_needed(alpha: float) -> int:
    """The fewest null panels that support a verdict at level ``alpha``: those at which twice alpha lies
    ``EXCESS_SIGMAS`` Monte-Carlo errors (at alpha) above alpha (see the module docstring)."""
    return math.ceil(round(EXCESS_SIGMAS**2 * (1 - alpha) / alpha, 9))


@dataclass
class NullModel:
    """What every simulated null panel shares: the panel's layout (groups, cells) and each group's noise."""

    lay: Layout
    roots: np.ndarray | None  # (G, T, T): symmetric square root of each group's covariance (Gaussian noise)
    pool: np.ndarray | None  # (M, T): residual trajectories' changes, each column of unit mean square (resampled)
    scales: np.ndarray | None  # (G, T): each group's standard deviation of every change (resampled noise)
    own_weight: np.ndarray  # (G,): the weight of each group's own covariance against the pooled one
    noise: str

    @property
    def checkpoints(self) -> int:
        return len(self.lay.steps)


def _sqrt_psd(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric square root of a covariance, and its eigen-decomposition (eigenvalues below rounding are 0)."""
    w, u = np.linalg.eigh((cov + cov.T) / 2)
    w = np.where(w > 1e-12 * max(float(w.max()), 0.0), w, 0.0)
    return (u * np.sqrt(w)) @ u.T, w, u


def _changes(z: np.ndarray) -> np.ndarray:
    """A trajectory's first value and its changes from checkpoint to checkpoint (``np.cumsum`` inverts it)."""
    return np.diff(z, axis=1, prepend=0.0)


def model_from_layout(lay: Layout, noise: str = "resampled", prior: float | None = None) -> NullModel:
    """The null model of a layout built from a real panel: each group's residual covariance (shrunk towards the pooled
    one with ``prior`` instances' weight, default the number of checkpoints) and, for resampled noise, the pool of
    residual trajectories' changes and each group's (shrunk) standard deviation of every change."""
    if noise not in NOISES:
        raise MemtuiError(f"noise must be one of {', '.join(NOISES)}, not '{noise}'.")
    t = len(lay.steps)
    z = lay.y[:, :t] - np.repeat(lay.means[:, :t], lay.group_n, axis=0)
    dof = lay.group_n - 1.0
    if dof.sum() < 1:
        raise MemtuiError("every group of the panel has a single instance, so its noise cannot be measured.")
    prior = float(t if prior is None else prior)
    own_weight = dof / (dof + prior)
    if noise == "gaussian":
        gram = np.stack([z[lay.rows(k)].T @ z[lay.rows(k)] for k in range(lay.n_groups)])  # (G, T, T)
        # ((n_g - 1) S_g + prior S) / (n_g - 1 + prior), S_g = gram_g / (n_g - 1): an inverse-Wishart-like shrinkage
        covs = (gram + prior * (gram.sum(axis=0) / dof.sum())[None]) / (dof + prior)[:, None, None]
        roots = np.stack([_sqrt_psd(c)[0] for c in covs])
        return NullModel(lay=lay, roots=roots, pool=None, scales=None, own_weight=own_weight, noise=noise)
    # resampled: whole trajectories, each change scaled to its group's spread (diagonal: no change mixes into another)
    u = _changes(z)
    squares = np.add.reduceat(u * u, lay.group_start[:-1], axis=0)  # (G, T)
    var = (squares + prior * (squares.sum(axis=0) / dof.sum())[None]) / (dof + prior)[:, None]
    spread = np.sqrt((u * u).mean(axis=0))
    pool = np.divide(u, spread, out=np.zeros_like(u), where=spread > 0)
    return NullModel(lay=lay, roots=None, pool=pool, scales=np.sqrt(var), own_weight=own_weight, noise=noise)


def model_from_panel(panel: Panel, settings: Settings, noise: str = "resampled") -> NullModel:
    """The null model matched to ``panel``'s metric ``settings.metric`` under the settings' estimator and controls."""
    lay = build_layout(
        panel.values(settings.metric),
        panel.treatment,
        panel.done_steps,
        never=NEVER,
        estimator=settings.estimator,
        base_period=settings.base_period,
        control_group=settings.control_group,
    )
    if not len(lay.cell_group):
        raise MemtuiError("no (cohort, checkpoint) cell can be estimated: no treated cohort falls inside the window.")
    if lay.scale == 0:
        raise MemtuiError(f"metric '{settings.metric}' is constant: there is no noise to calibrate against.")
    return model_from_layout(lay, noise)


def model_from_design(
    group_sizes: dict[int, int],
    steps: np.ndarray,
    covariance: Callable[[int], np.ndarray],
    *,
    estimator: str = "did",
    base_period: str = "varying",
    control_group: str = "never_treated",
) -> NullModel:
    """A Gaussian null model of a planned design: ``group_sizes`` maps a treatment step (``NEVER`` for validation) to
    its instances, ``covariance(step)`` gives that group's covariance over ``steps`` (``plan`` passes the pilot's
    variograms)."""
    treatment = np.concatenate([np.full(n, step, dtype=np.int64) for step, n in group_sizes.items()])
    y = np.zeros((len(treatment), len(steps)))
    y[:, 0] = np.arange(len(treatment)) % 2  # any varying values: the layout's structure is all that is used
    lay = build_layout(y, treatment, np.asarray(steps), never=NEVER, estimator=estimator, base_period=base_period,
                       control_group=control_group)  # fmt: skip
    step_of = np.where(
        lay.group_index == NEVER_INDEX, NEVER, np.asarray(steps)[np.minimum(lay.group_index, len(steps) - 1)]
    )
    roots = np.stack([_sqrt_psd(covariance(int(s)))[0] for s in step_of])
    return NullModel(lay=lay, roots=roots, pool=None, scales=None, own_weight=np.ones(lay.n_groups), noise="gaussian")


def simulate(model: NullModel, rng: np.random.Generator) -> Layout:
    """One null panel on the model's layout: zero-mean noise with each group's covariance (Gaussian) or each group's
    spread of every change (resampled), nothing else."""
    lay, t = model.lay, model.checkpoints
    y = np.zeros((lay.n_units, lay.y.shape[1]))
    if model.pool is None:
        base = rng.standard_normal((lay.n_units, t))
        for k in range(lay.n_groups):
            rows = lay.rows(k)
            y[rows, :t] = base[rows] @ model.roots[k]
    else:
        changes = model.pool[rng.integers(len(model.pool), size=lay.n_units)]
        changes *= np.repeat(model.scales, lay.group_n, axis=0)
        y[:, :t] = np.cumsum(changes, axis=1)
    means = np.add.reduceat(y, lay.group_start[:-1], axis=0) / lay.group_n[:, None]
    return replace(lay, y=y, means=means, level=np.zeros(lay.y.shape[1]), notes=[])


@dataclass
class _Structure:
    """The band families of a layout, as ``estimation.estimate`` forms them (computed once per model)."""

    masks: dict[str, np.ndarray]
    events: np.ndarray
    members: list[np.ndarray]  # the aggregates: each event time's cells, then every post-treatment cell
    floor: float

    @classmethod
    def of(cls, lay: Layout) -> _Structure:
        # the same subsets and aggregates an estimate forms (no residual family: calibrate does not report it)
        masks = {k: m for k, m in cell_masks(lay, Settings()).items() if k != "residual"}
        events, _, members = aggregate_members(lay)
        return cls(masks=masks, events=events, members=members, floor=did.se_floor(lay.scale))


def _flags(att, se, crit: dict, theta, agg_se, crit_e, pretrend_p, s: _Structure, alpha: float) -> dict[str, bool]:
    def any_flag(mask, c):
        band = c * se[mask]
        return bool(np.any(np.isfinite(band) & (np.abs(att[mask]) > band)))

    post_e = s.events >= 0
    band_e = crit_e * agg_se[:-1][post_e]
    return {
        "post": any_flag(s.masks["post"], crit["post"]),
        "all": any_flag(s.masks["all"], crit["all"]),
        "instantaneous": any_flag(s.masks["instantaneous"], crit["instantaneous"]),
        "persistent": bool(np.any(np.isfinite(band_e) & (np.abs(theta[:-1][post_e]) > band_e))),
        "pretrend": bool(pretrend_p < alpha),
    }


def panel_flags(
    lay: Layout, s: _Structure, *, draws: int, seed: int, alpha: float, bands: tuple[str, ...] | None = None
) -> dict[str, dict]:
    """Per band (``bands``: default every registered one), which families flag at least one estimate on this (null)
    panel, and the post family's critical value; ``{"error": why}`` for a band that cannot run on this layout (its
    one-line ``MemtuiError``). One bootstrap serves every band that reads only its draws (``Band.from_draws``: the
    classic band reads the calibrated bootstrap's, which are the classic ones); a band that forms laws in the loop runs
    its own, and its aggregates are then formed from its own draws."""
    est = did.point_estimates(lay)
    post_e = s.events >= 0
    rows = slice(0, len(s.events))
    pre = s.masks["pre"]
    shared, aggregates, out = None, {}, {}
    for name in bands or tuple(BANDS):
        band = BANDS[name]
        drawn = band.from_draws(shared) if shared is not None else None
        if drawn is None:
            try:
                drawn = band.bootstrap(lay, est, s.masks, s.members, floor=s.floor, draws=draws, seed=seed,
                                       multiplier="rademacher", progress=None, source=None)  # fmt: skip
            except MemtuiError as exc:  # a band that needs what a simulated panel cannot give: said, not dropped
                out[name] = {"error": str(exc)}
                continue
            shared = drawn.boot if shared is None else shared
        if id(drawn.boot) not in aggregates:  # the aggregates of these draws (one bootstrap: formed once)
            aggregates[id(drawn.boot)] = aggregate(lay, est.att, drawn.boot.cells, drawn.boot.group_w, s.members)
        theta, agg_draws = aggregates[id(drawn.boot)]
        se = drawn.cell_se(s.floor)
        tmax = drawn.cell_laws(s.masks, se)
        crit = {family: drawn.critical_value(law, alpha) for family, law in tmax.items()}
        # the analytic standard errors are not counted: a callable that costs nothing
        _, agg_se = drawn.aggregate_se(agg_draws, s.floor, lambda: np.full(len(s.members), np.nan))
        crit_e = drawn.critical_value(drawn.aggregate_law(agg_draws[:-1], agg_se[:-1], rows, post_e), alpha)
        # the pre-trend test exactly as the estimate runs it (its function; NaN p where there is no placebo cell)
        p = pretrend(drawn.boot.cells, se, est.att, pre, alpha, tmax.get("pre")).p_value
        out[name] = {"flags": _flags(est.att, se, crit, theta, agg_se, crit_e, p, s, alpha), "crit": crit["post"]}
    return out


@dataclass
class Calibration:
    """Family-wise error of each band family on ``panels`` simulated null panels of one design."""

    panels: int
    alpha: float
    draws: int
    noise: str
    seed: int
    hits: dict[str, dict[str, int]]  # band -> family -> panels with a false positive
    crit: dict[str, float]  # band -> mean critical value of the post family
    design: dict  # what was simulated (sizes, cells, checkpoints)
    seconds: float
    notes: list[str] = field(default_factory=list)
    # band -> why it was not calibrated (a setting it refuses, or what a simulated panel cannot give it): every band
    # of the registry is in ``hits`` or here, never silently dropped
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def bands(self) -> tuple[str, ...]:
        """Every band of this calibration, calibrated or not, in the registry's order."""
        return tuple(b for b in BANDS if b in self.hits or b in self.skipped)

    def rate(self, band: str, family: str) -> tuple[float, float]:
        """The family-wise error and its Monte-Carlo standard error (NaN for a band that was not calibrated)."""
        if band not in self.hits:
            return float("nan"), float("nan")
        p = self.hits[band][family] / self.panels
        return p, math.sqrt(max(p * (1 - p), 0.25 / self.panels) / self.panels)  # never 0: a share of 0/R is not exact

    @property
    def supported(self) -> bool:
        """Whether there are enough panels for a verdict (``panels_needed``)."""
        return self.panels >= panels_needed(self.alpha)

    def over(self, band: str, family: str) -> bool:
        """Whether the family's error exceeds alpha by more than ``EXCESS_SIGMAS`` Monte-Carlo errors (never with
        too few panels for a verdict)."""
        p, se = self.rate(band, family)
        return band in self.hits and self.supported and p - EXCESS_SIGMAS * se > self.alpha

    def level(self, band: str) -> str:
        """The verdict in a few words: "holds its level", "over-rejects (post, all)", "no verdict (...)" or "not
        calibrated (why)"."""
        if band in self.skipped:
            return f"not calibrated ({self.skipped[band]})"
        if not self.supported:
            return (
                f"no verdict ({self.panels} null panel(s); {panels_needed(self.alpha)} needed to tell "
                f"{100 * self.alpha:g} % from {200 * self.alpha:g} %)"
            )
        bad = [f for f in FAMILIES if self.over(band, f)]
        return f"over-rejects ({', '.join(bad)})" if bad else "holds its level"

    def verdict(self, band: str) -> str:
        """One line: does ``band`` hold its level at this design, and if not, where not."""
        if band in self.skipped:
            return f"{band} band: not calibrated: {self.skipped[band]}"
        bad = [f for f in FAMILIES if self.over(band, f)]
        post, se = self.rate(band, "post")
        head = f"{band} band: post {100 * post:.1f} ± {100 * se:.1f} % family-wise error (nominal {100 * self.alpha:g})"
        if not self.supported:
            return (
                f"{head}; no verdict from {self.panels} null panel(s): telling {100 * self.alpha:g} % from "
                f"{200 * self.alpha:g} % takes {panels_needed(self.alpha)} (--panels {panels_needed(self.alpha)})"
            )
        if not bad:
            return f"{head}, holds its level at this design"
        worst = ", ".join(f"{f} {100 * self.rate(band, f)[0]:.0f} %" for f in bad)
        return f"{head}, over-rejects at this design: {worst}"

    def as_dict(self) -> dict:
        rates = {
            b: {f: dict(zip(("rate", "mc_se"), self.rate(b, f), strict=True)) for f in FAMILIES} for b in self.hits
        }
        return {
            "panels": self.panels,
            "alpha": self.alpha,
            "draws": self.draws,
            "noise": self.noise,
            "seed": self.seed,
            "design": self.design,
            "family_wise_error": rates,
            "over_nominal": {b: [f for f in FAMILIES if self.over(b, f)] for b in self.hits},
            "panels_needed": panels_needed(self.alpha),
            "verdict": {b: self.level(b) for b in self.bands},
            "not_calibrated": self.skipped,
            "mean_crit_post": self.crit,
            "seconds": self.seconds,
            "notes": self.notes,
        }


def describe(model: NullModel) -> dict:
    lay = model.lay
    cohort_n = lay.group_n[lay.cohort_groups]
    never = lay.group_index == NEVER_INDEX
    return {
        "cohorts": int(len(cohort_n)),
        "per_cohort_min": int(cohort_n.min()) if len(cohort_n) else 0,
        "per_cohort_median": float(np.median(cohort_n)) if len(cohort_n) else 0.0,
        "per_cohort_max": int(cohort_n.max()) if len(cohort_n) else 0,
        "validation": int(lay.group_n[never].sum()),
        "checkpoints": int(len(lay.steps)),
        "cells": int(len(lay.cell_group)),
        "post_cells": int((~lay.cell_pre).sum()),
        "own_covariance_weight_median": float(np.median(model.own_weight[lay.cohort_groups])) if len(cohort_n) else 0,
    }


def _drop_refused(got: dict, hits: dict, crit_sum: dict, skipped: dict) -> tuple[str, ...]:
    """A band that refused a null panel is not calibrated at all: its counts go, its reason joins ``skipped``; the
    bands still running."""
    for b in [b for b in hits if "error" in got[b]]:
        skipped[b] = got[b]["error"]
        del hits[b], crit_sum[b]
    return tuple(hits)


def run_calibration(
    model: NullModel,
    *,
    alpha: float = 0.05,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    panels: int | None = None,
    budget_s: float = BUDGET_S,
    progress: Callable[[float, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    skipped: dict[str, str] | None = None,
) -> Calibration:
    """Simulate null panels of ``model`` and count each band family's false positives, for every registered band
    but those in ``skipped`` (band -> why not; a band whose bootstrap refuses the simulated layout joins them).

    ``panels=None``: as many as fit in ``budget_s`` (timed on the first panels), between ``MIN_PANELS`` (or
    ``panels_needed(alpha)``, if more) and ``MAX_PANELS``. Panel i's noise and bootstrap come from seeds derived
    from (``seed``, i): the same call gives the same table, and a longer run extends a shorter one."""
    if draws < 20:
        raise MemtuiError(f"calibration needs a bootstrap: at least 20 draws, not {draws}.")
    if panels is not None and panels < 1:
        raise MemtuiError(f"--panels must be at least 1, not {panels}.")
    s = _Structure.of(model.lay)
    skipped = dict(skipped or {})
    names = tuple(b for b in BANDS if b not in skipped)
    hits = {b: dict.fromkeys(FAMILIES, 0) for b in names}
    crit_sum = dict.fromkeys(names, 0.0)
    began = time.perf_counter()
    target, done = panels, 0
    while names and (target is None or done < target):
        rng = np.random.default_rng([seed, done])
        lay = simulate(model, rng)
        got = panel_flags(lay, s, draws=draws, seed=int(rng.integers(2**63)), alpha=alpha, bands=names)
        names = _drop_refused(got, hits, crit_sum, skipped)
        for b in names:
            crit_sum[b] += got[b]["crit"]
            for f in FAMILIES:
                hits[b][f] += got[b]["flags"][f]
        done += 1
        elapsed = time.perf_counter() - began
        if target is None and (done >= 3 or elapsed > budget_s / 10):
            fewest = min(MAX_PANELS, max(MIN_PANELS, panels_needed(alpha)))  # a verdict, where MAX_PANELS allows
            target = int(min(MAX_PANELS, max(fewest, budget_s / (elapsed / done))))
        if progress:
            progress(done / target if target else 0.0, f"null panel {done}" + (f" of {target}" if target else ""))
        if cancelled is not None and cancelled():
            break
    return Calibration(
        panels=done,
        alpha=alpha,
        draws=draws,
        noise=model.noise,
        seed=seed,
        hits=hits,
        crit={b: crit_sum[b] / done for b in names},
        design=describe(model),
        seconds=time.perf_counter() - began,
        skipped=skipped,
    )


def calibrate(
    panel: Panel,
    settings: Settings,
    *,
    panels: int | None = None,
    noise: str = "resampled",
    budget_s: float = BUDGET_S,
    progress: Callable[[float, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Calibration:
    """`memtui calibrate`: the family-wise error of each band family on null panels matched to ``panel`` (its metric
    ``settings.metric`` under the settings' estimator, controls, base period, draws and alpha; ``settings.seed``
    seeds the simulation)."""
    if settings.multiplier != "rademacher":
        raise MemtuiError("calibrate needs Rademacher multipliers (the calibrated band's); drop --multiplier mammen.")
    if not settings.draws:
        raise MemtuiError("calibrate needs a bootstrap (-B 0 has pointwise bands only, with no family to calibrate).")
    if settings.covariates:
        raise MemtuiError("calibrate simulates the estimate without covariates; drop --covariates.")
    model = model_from_panel(panel, settings, noise)
    result = run_calibration(model, alpha=settings.alpha, draws=settings.draws, seed=settings.seed, panels=panels,
                             budget_s=budget_s, progress=progress, cancelled=cancelled,
                             skipped=band_refusals(settings))  # fmt: skip
    cohort_n = model.lay.group_n[model.lay.cohort_groups]
    if (cohort_n == 1).any():
        result.notes.append(
            f"{int((cohort_n == 1).sum())} cohort(s) of one instance: the calibrated band gives their cells no band "
            "(no variance of their own); the classic band studentises them by the controls' variance alone"
        )
    return result


def band_refusals(settings: Settings) -> dict[str, str]:
    """Every registered band that refuses these settings (``Band.refusal``, or the settings' own check of the band),
    with its one-line reason: calibrate reports it as not calibrated instead of leaving it out."""
    out = {}
    for name, band in BANDS.items():
        try:
            why = band.refusal(replace(settings, band=name))
        except MemtuiError as exc:
            why = str(exc)
        if why:
            out[name] = why
    return out


# --- a calibration is cached beside the estimate cache (``PANEL.memtui-cache/``), so the workbench can show it ---

_CACHE_SETTINGS = ("metric", "estimator", "base_period", "control_group", "draws", "multiplier", "seed", "alpha")


def cache_path(panel: Panel, settings: Settings, noise: str = "resampled"):
    """Where the calibration of these settings is cached: beside the panel's estimates, keyed by the data and the
    settings a calibration depends on (not the band or family: it measures every family of every band)."""
    import hashlib
    import json

    from memtui import __version__
    from memtui.estimation.cache import cache_dir

    h = hashlib.blake2b(digest_size=16)
    key = {k: getattr(settings, k) for k in _CACHE_SETTINGS}
    # null_model 2: resampled noise scales each change (issue 29); a cache of the re-coloured model is a miss
    record = {"calibrate": key, "noise": noise, "version": __version__, "bands": list(BANDS), "null_model": 2}
    h.update(json.dumps(record, sort_keys=True).encode())
    panel.values(settings.metric)  # the one-line "no such metric" error before hashing
    for arr in (panel.treatment, panel.steps, panel.done, panel.metrics[settings.metric]):
        h.update(np.ascontiguousarray(arr).tobytes())
    return cache_dir(panel) / f"calibrate-{h.hexdigest()}.json"


def from_dict(d: dict) -> Calibration:
    """A Calibration from ``as_dict``'s record (a malformed record, or one of another set of bands than the
    registry's, raises ValueError, KeyError or TypeError)."""
    panels = int(d["panels"])
    hits = {}
    for b, fams in d["family_wise_error"].items():
        if b not in BAND_NAMES or set(fams) != set(FAMILIES):
            raise ValueError("not a calibration record")
        hits[b] = {f: round(float(fams[f]["rate"]) * panels) for f in FAMILIES}
    skipped = {str(b): str(why) for b, why in d["not_calibrated"].items()}
    if panels < 1 or set(hits) | set(skipped) != set(BAND_NAMES) or set(hits) & set(skipped):
        raise ValueError("not a calibration record")
    crit = {b: float(v) for b, v in d["mean_crit_post"].items()}
    return Calibration(panels=panels, alpha=float(d["alpha"]), draws=int(d["draws"]), noise=str(d["noise"]),
                       seed=int(d["seed"]), hits=hits, crit=crit, design=dict(d["design"]),
                       seconds=float(d["seconds"]), notes=[str(n) for n in d["notes"]], skipped=skipped)  # fmt: skip


def load_cached(panel: Panel, settings: Settings, noise: str = "resampled") -> Calibration | None:
    """The cached calibration of these settings, or None (missing, unreadable or malformed: a miss). Cheap: one small
    JSON file and a hash of the metric's matrix, no simulation."""
    import json

    if panel.path is None:
        return None
    try:
        return from_dict(json.loads(cache_path(panel, settings, noise).read_text()))
    except MemtuiError:
        raise
    except Exception:  # noqa: BLE001 - a cache file anyone may have damaged is a miss
        return None


def store(panel: Panel, settings: Settings, result: Calibration) -> str | None:
    """Cache ``result``; returns why it could not be written (None when it was, or the panel has no file)."""
    import json

    from memtui.core.files import atomic_write

    if panel.path is None:
        return None
    try:
        path = cache_path(panel, settings, result.noise)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(result.as_dict(), default=float)
        atomic_write(path, lambda p: p.write_text(text))
    except (OSError, MemtuiError) as exc:
        return str(getattr(exc, "strerror", None) or exc)
    return None


def plan_calibration(pilot, plan, row, *, panels: int, draws: int = DEFAULT_DRAWS, seed: int = 0) -> Calibration:
    """The family-wise error of each band at a planned design (`memtui plan --calibrate N`): cohort k = 1 .. G first
    trained at checkpoint k of T, ``row``'s sizes, Gaussian noise whose changes follow the pilot's variograms."""
    from memtui.engine.power import increment_covariance

    t = plan.checkpoints
    cov_t = increment_covariance(pilot.v_treated, t)
    cov_c = increment_covariance(pilot.v_control, t)
    sizes = {k: row.per_cohort for k in range(1, plan.cohorts + 1)}
    sizes[NEVER] = row.validation
    model = model_from_design(sizes, np.arange(t), lambda step: cov_c if step == NEVER else cov_t)
    return run_calibration(model, alpha=plan.alpha, draws=draws, seed=seed, panels=panels)
