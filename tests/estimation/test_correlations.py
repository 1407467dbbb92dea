"""The correlation of the models' true profiles (estimation.correlations' ``pearson_corrected``): on simulated
suites with a known true correlation its interval covers the truth where the raw r's interval does not, its point
estimate is the cells' covariance less the joint draws' noise covariance, it is clipped to [-1, 1] with a note, and
the raw r is what it was."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from memtui.engine import did
from memtui.engine.layout import build_layout
from memtui.estimation.correlations import (
    _corrected_interval,
    _corrected_pearson,
    _corrected_record,
    _draw_correlations,
    _fieller,
    _hc_layout,
    _interval,
    _spurious,
    correlations,
)
from memtui.estimation.settings import Settings
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import Suite
from memtui.panel.model import NEVER
from memtui.panel.synthetic import SuiteSimulation, simulate_suite


def suite_of(sim: SuiteSimulation) -> tuple[Suite, np.ndarray]:
    panels, truth = simulate_suite(sim)
    return Suite(names=[f"m{k}" for k in range(sim.n_models)], panels=panels), truth


def test_simulated_profiles_have_the_stated_correlation():
    for rho in (0.5, 0.95, 1.0):
        sim = SuiteSimulation(rho=rho, n_models=3)
        truth = sim.true_profiles()
        post = sim.base.steps[None, :] >= sim.base.cohorts[:, None]
        r = np.corrcoef(truth[:, post])
        assert r[0, 1] == pytest.approx(rho, abs=1e-12) and r[0, 2] == pytest.approx(rho, abs=1e-12)
        assert np.all(truth[:, ~post] == 0)
        assert np.std(truth[0][post]) == pytest.approx(1.0)


@pytest.mark.simulation
def test_corrected_interval_covers_the_true_correlation_where_the_raw_one_does_not():
    """60 seeded suites at true correlation 0.9, noise 0.4 of the profiles' sd, half with uncorrelated noise across
    models and half with noise correlated 0.6: the raw interval (about E[r], attenuated) misses the truth in most,
    the corrected one covers it at about its level (a true 95 % coverage gives >= 53 of 60 with probability 0.99)."""
    rho, reps = 0.9, 60
    covered_raw = covered = 0
    raw, corrected = {0.0: [], 0.6: []}, {0.0: [], 0.6: []}
    for rep in range(reps):
        noise_corr = 0.0 if rep % 2 else 0.6
        suite, _ = suite_of(SuiteSimulation(rho=rho, noise=0.4, noise_corr=noise_corr, seed=500 + rep))
        c = correlations(estimate_suite(suite, Settings(draws=300, seed=rep)))
        covered_raw += c.pearson_low[0, 1] <= rho <= c.pearson_high[0, 1]
        covered += c.pearson_corrected_low[0, 1] <= rho <= c.pearson_corrected_high[0, 1]
        raw[noise_corr].append(c.pearson[0, 1])
        corrected[noise_corr].append(c.pearson_corrected[0, 1])
    assert covered >= 53, covered
    assert covered_raw <= 30, covered_raw
    # the raw r is attenuated (by about 1 / (1 + 0.4^2) without correlated noise); the corrected r is not
    assert np.mean(raw[0.0]) < rho - 0.08
    for values in corrected.values():
        assert np.mean(values) == pytest.approx(rho, abs=0.02)


def test_corrected_value_is_the_covariance_less_the_draws_noise_covariance():
    """Independently: each model's lone bootstrap (same seed, so the same multipliers per instance) on its layout with
    every group's rows moved from the group mean by sqrt(n / (n - 1)) (HC1), numpy covariances over the post cells,
    and S - N with N the mean over draws of the draws' covariance over cells."""
    sim = SuiteSimulation(rho=0.8, noise=0.4, noise_corr=0.5, n_models=3, seed=3)
    suite, _ = suite_of(sim)
    settings = Settings(draws=200, seed=5)
    c = correlations(estimate_suite(suite, settings))
    x, d, plain = [], [], []
    for panel in suite.panels:
        lay = build_layout(panel.values("loglik"), panel.treatment, panel.done_steps, never=NEVER)
        est = did.point_estimates(lay)
        scaled = lay.y.copy()
        for k in range(lay.n_groups):
            rows = slice(lay.group_start[k], lay.group_start[k + 1])
            n_k = lay.group_n[k]
            if n_k > 1:
                scaled[rows] = lay.means[k] + np.sqrt(n_k / (n_k - 1)) * (lay.y[rows] - lay.means[k])
        hc = build_layout(panel.values("loglik"), panel.treatment, panel.done_steps, never=NEVER)
        hc.y = scaled
        assert np.allclose(did.point_estimates(hc).att, est.att, atol=1e-12)  # the same estimates, wider draws
        boot = did.bootstrap(hc, est, draws=200, seed=5)
        post = ~lay.cell_pre
        x.append(est.att[post])
        d.append(boot.cells[post].astype(float))
        plain.append(did.bootstrap(lay, est, draws=200, seed=5).cells[post].astype(float))
    x, d, plain = np.array(x), np.array(d), np.array(plain)  # models x cells, models x cells x draws
    s = np.cov(x)
    n = np.mean([np.cov(d[:, :, b]) for b in range(200)], axis=0)
    a = s - n
    expect = a / np.sqrt(np.outer(np.diag(a), np.diag(a)))
    assert np.allclose(c.pearson_corrected, np.clip(expect, -1, 1), atol=1e-6)
    off = ~np.eye(3, dtype=bool)
    assert np.all(c.pearson_corrected_low[off] <= c.pearson_corrected[off])
    assert np.all(c.pearson_corrected[off] <= c.pearson_corrected_high[off])
    assert np.all((c.pearson_corrected_low >= -1) & (c.pearson_corrected_high <= 1))
    # the raw r is unchanged: numpy's and scipy's correlation of the estimates, and its interval from its own draws
    assert np.allclose(c.pearson, np.corrcoef(x), rtol=1e-12)
    assert c.spearman[0, 2] == pytest.approx(stats.spearmanr(x[0], x[2])[0], rel=1e-12)
    draws = [np.asarray(boot_cells, dtype=np.float32) for boot_cells in plain]  # the raw r's: the estimate's draws
    p_draws, _ = _draw_correlations(x, draws, np.arange(x.shape[1]), np.ones(3, np.float32))
    low, high = _interval(c.pearson, p_draws, 0.05)
    assert np.allclose(c.pearson_low[off], low[off], atol=1e-5) and np.allclose(
        c.pearson_high[off], high[off], atol=1e-5
    )
    # the frame: raw beside corrected; Spearman has no corrected value
    frame = c.frame()
    pearson = frame.filter(frame["method"] == "pearson")
    assert np.allclose(pearson["correlation"].to_numpy(), c.pearson.ravel())
    assert np.allclose(pearson["corrected"].to_numpy(), c.pearson_corrected.ravel())
    assert frame.filter(frame["method"] == "spearman")["corrected"].is_nan().all()


def test_a_corrected_value_beyond_one_is_clipped_and_said():
    """True correlation 1 and noisy profiles: about half the corrected values exceed 1; those are shown as 1, flagged,
    noted, and their interval (clipped) still holds 1."""
    seen = 0
    for seed in range(8):
        suite, _ = suite_of(SuiteSimulation(rho=1.0, noise=0.4, seed=seed))
        c = correlations(estimate_suite(suite, Settings(draws=200, seed=seed)))
        if c.pearson_clipped[0, 1]:
            seen += 1
            assert c.pearson_corrected[0, 1] == 1.0 and c.pearson_corrected_high[0, 1] == 1.0
            assert c.pearson_corrected_low[0, 1] <= 1.0  # 1.0 where the unclipped interval lies wholly above 1
            assert any("outside [-1, 1] for m0–m1" in note for note in c.notes)
            assert c.frame().filter(c.frame()["method"] == "pearson")["clipped"].to_list() == [False, True, True, False]
        else:
            assert c.pearson_corrected_low[0, 1] <= 1.0 <= c.pearson_corrected_high[0, 1] + 1e-12
    assert seen >= 2


def test_a_profile_no_larger_than_its_noise_has_no_corrected_value():
    rng = np.random.default_rng(0)
    cells, draws = 50, 200
    noise = [rng.normal(0, 1.0, (cells, draws)).astype(np.float32) for _ in range(2)]
    est = np.stack([rng.normal(0, 3.0, cells), rng.normal(0, 0.3, cells)])  # the second varies less than its noise
    true = _corrected_pearson(est, noise, np.arange(cells), np.ones(2, np.float32), 0.05)
    assert true["no_signal"].tolist() == [False, True]
    assert np.isnan(true["point"][0, 1]) and np.isnan(true["low"][0, 1]) and np.isnan(true["point"][1, 1])
    notes: list[str] = []
    record = _corrected_record(true, ["big", "flat"], notes)
    assert np.isnan(record["pearson_corrected"][0, 1]) and notes and notes[0].startswith("flat: the profile varies")


def test_without_draws_there_is_no_corrected_value():
    suite, _ = suite_of(SuiteSimulation(seed=1))
    c = correlations(estimate_suite(suite, Settings(draws=0)))
    assert np.isfinite(c.pearson).all()
    assert np.isnan(c.pearson_corrected).all() and not c.pearson_clipped.any()


def test_spurious_term_is_the_u_statistic_of_the_influences():
    """``_spurious`` from draws alone equals sum over instance pairs i != j of a_ij a_ij, a_ij = C(psi_i,p, psi_j,q),
    computed from the influences themselves; the V-statistic (all pairs, what the interval used before) adds the
    same-instance terms and is larger."""
    rng = np.random.default_rng(7)
    n, cells, draws = 12, 9, 60_000
    psi = rng.standard_t(5, (2, n, cells))  # per model, instance x cell influences (heavy-tailed)
    psi -= psi.mean(axis=2, keepdims=True)  # centred over cells, as C() centres
    v = rng.choice([-1.0, 1.0], (draws, n))
    d = np.einsum("bi,mic->bmc", v, psi)  # draws x models x cells
    a = {(p, q): psi[p] @ psi[q].T / (cells - 1) for p in range(2) for q in range(2)}  # a_ij per component (n x n)
    order = [(0, 0), (0, 1), (1, 0), (1, 1)]
    off = ~np.eye(n, dtype=bool)
    expect = np.array([[np.sum((a[pq] * a[rs])[off]) for rs in order] for pq in order])
    full = np.array([[np.sum(a[pq] * a[rs]) for rs in order] for pq in order])
    pair_cov = np.einsum("bmc,bkc->bmk", d, np.roll(d, -1, axis=0)) / (cells - 1)  # C(d_b,p, d_(b+1),q)
    noise = np.einsum("bmc,bkc->bmk", d, d) / (cells - 1)
    got = _spurious(pair_cov.reshape(draws, 4), noise)
    scale = np.abs(expect).max()
    assert np.allclose(got, expect, atol=0.05 * scale), (got, expect)
    own = [0, 3]  # C(e_p, d_p): a model's same-instance terms a_ii^2 are squares, far beyond the Monte-Carlo error
    assert np.all(np.diag(full)[own] > np.diag(expect)[own] + 0.5 * scale)


def test_hc_layout_keeps_the_estimates_and_scales_each_groups_spread():
    sim = SuiteSimulation(seed=2)
    panels, _ = simulate_suite(sim)
    lay = build_layout(panels[0].values("loglik"), panels[0].treatment, panels[0].done_steps, never=NEVER)
    hc = _hc_layout(lay)
    assert np.allclose(did.point_estimates(hc).att, did.point_estimates(lay).att, atol=1e-12)
    for k in range(lay.n_groups):
        rows = slice(lay.group_start[k], lay.group_start[k + 1])
        n_k = lay.group_n[k]
        spread = np.var(lay.y[rows], axis=0)
        varies = spread > 0  # not the zero base column
        assert varies.sum() >= lay.y.shape[1] - 2
        assert np.allclose(np.var(hc.y[rows], axis=0)[varies] / spread[varies], n_k / (n_k - 1))
    assert lay.y is not hc.y and np.array_equal(lay.y, build_layout(panels[0].values("loglik"), panels[0].treatment,
                                                                      panels[0].done_steps, never=NEVER).y)  # fmt: skip


def _pivot(a: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """Pivot draws C_b = A - W_b from the errors W_b (B x 3: W00, W01, W11)."""
    w = np.stack([errors[:, 0], errors[:, 1], errors[:, 1], errors[:, 2]], 1).reshape(-1, 2, 2)
    return a[None] - w


def _accepted_by_grid(a: np.ndarray, pivot: np.ndarray, alpha: float = 0.05) -> tuple:
    """Independently, on a fine grid of rho in [-1, 1]: g(rho) = A01 - rho sqrt(A00 A11) and its linearised error's
    copies e_b(rho) = W01_b - rho dS_b, dS_b = (A11 W00_b + A00 W11_b) / (2 sqrt(A00 A11)), W_b = A - C_b; which rho
    the standard-deviation test accepts (|g| <= z sd_b(e)) and which the pivot-side percentile test accepts (g between
    the percentiles of -(e_b - mean e))."""
    s = np.sqrt(a[0, 0] * a[1, 1])
    w = a[None] - pivot
    d_s = (a[1, 1] * w[:, 0, 0] + a[0, 0] * w[:, 1, 1]) / (2 * s)
    grid = np.linspace(-1, 1, 4001)
    sd_ok, pct_ok = [], []
    for rho in grid:
        e = w[:, 0, 1] - rho * d_s
        g = a[0, 1] - rho * s
        sd_ok.append(abs(g) <= stats.norm.ppf(1 - alpha / 2) * np.std(e, ddof=1))
        lo, hi = np.quantile(-(e - e.mean()), [alpha / 2, 1 - alpha / 2])
        pct_ok.append(lo <= g <= hi)
    return grid, np.array(sd_ok), np.array(pct_ok)


@pytest.mark.simulation
def test_corrected_interval_is_the_union_of_the_two_tests_on_the_covariance_scale():
    """The closed form (Fieller's quadratic) and the bisected percentile test against a grid search of the same
    tests, on an interior pair with symmetric errors, a pair near +1 with skewed errors whose diagonal moves with its
    off-diagonal, and one beyond +1 (part of its interval inside): the interval is the hull of both accepted sets."""
    rng = np.random.default_rng(3)
    b = 4000
    common = rng.exponential(1.0, b) - 1.0  # skewed
    near = np.outer(common, [0.1, 0.1, 0.1]) + rng.normal(0, 0.01, (b, 3))
    for a, errors in (
        (np.array([[2.0, 1.2], [1.2, 1.5]]), rng.normal(0, 0.15, (b, 3))),
        (np.array([[1.0, 0.97], [0.97, 1.0]]), near),
        (np.array([[1.0, 1.02], [1.02, 1.0]]), near),
    ):
        pivot = _pivot(a, errors)
        grid, sd_ok, pct_ok = _accepted_by_grid(a, pivot)
        step = grid[1] - grid[0]
        either = sd_ok | pct_ok
        assert sd_ok.any() and pct_ok.any() and not (either[0] and either[-1])
        low, high = _corrected_interval(a, pivot, 0.05)
        assert low == pytest.approx(grid[either][0], abs=step) and high == pytest.approx(grid[either][-1], abs=step)
        assert -1 <= low <= high <= 1


def test_corrected_interval_is_at_least_the_delta_interval_where_the_variances_are_known():
    """No error on the diagonal: the test's standard error is sd(W01) / s at every rho, so Fieller's part is the
    corrected r +- z sd(W01) / sqrt(A00 A11), and with symmetric errors the percentile part hardly adds to it."""
    rng = np.random.default_rng(4)
    a = np.array([[2.0, 1.0], [1.0, 2.0]])
    errors = np.zeros((5000, 3))
    errors[:, 1] = rng.normal(0, 0.1, 5000)
    half = stats.norm.ppf(0.975) * np.std(errors[:, 1], ddof=1) / 2.0
    assert _fieller(1.0, 2.0, errors[:, 1], np.zeros(5000), 0.05) == pytest.approx((0.5 - half, 0.5 + half))
    low, high = _corrected_interval(a, _pivot(a, errors), 0.05)
    assert low <= 0.5 - half + 1e-12 and high >= 0.5 + half - 1e-12
    assert low == pytest.approx(0.5 - half, abs=0.1 * half) and high == pytest.approx(0.5 + half, abs=0.1 * half)


def test_corrected_interval_says_not_determined_or_the_bound():
    """NaN, NaN where sqrt(A00 A11) is within z standard errors of 0 (the data allow a flat true profile) or where
    every rho in [-1, 1] passes; the bound alone where r lies beyond it by more than its noise."""
    rng = np.random.default_rng(5)
    a = np.array([[1.0, 0.5], [0.5, 1.0]])
    flat = _pivot(a, rng.normal(0, [0.8, 0.1, 0.8], (4000, 3)))  # the variances' errors as large as the variances
    assert np.isnan(_corrected_interval(a, flat, 0.05)).all()
    wide = _pivot(a, rng.normal(0, [0.05, 0.9, 0.05], (4000, 3)))  # the covariance's error spans every rho
    assert np.isnan(_corrected_interval(a, wide, 0.05)).all()
    beyond = np.array([[1.0, 1.5], [1.5, 1.0]])
    assert _corrected_interval(beyond, _pivot(beyond, rng.normal(0, 0.01, (4000, 3))), 0.05) == (1.0, 1.0)
    below = np.array([[1.0, -1.5], [-1.5, 1.0]])
    assert _corrected_interval(below, _pivot(below, rng.normal(0, 0.01, (4000, 3))), 0.05) == (-1.0, -1.0)


@pytest.mark.simulation
def test_corrected_interval_holds_its_level_near_one():
    """Near the bound (true rho 0.95 and 0.99, 60 instances a cohort, 300 controls, 8 checkpoints, noise 0.3 of the
    profiles' sd correlated 0.5 between the models: the design on which the interval before the covariance-scale test
    covered 87-88 %), 40 seeded suites each: the interval covers the true correlation in at least 38 of 40 at each rho
    and 77 of 80 in all, or says it is not determined. The interval before covered 38 and 36 of these suites (74 of
    80); the one now covers 40 and 40 (benchmarks/correlations.py --rho measures both on 300 suites per rho)."""
    covered = {}
    for rho in (0.95, 0.99):
        hits = 0
        for rep in range(40):
            sim = SuiteSimulation(rho=rho, noise=0.3, noise_corr=0.5, per_cohort=60, n_never=300, n_checkpoints=8,
                                  seed=700 + rep)  # fmt: skip
            suite, _ = suite_of(sim)
            c = correlations(estimate_suite(suite, Settings(draws=400, seed=rep, band="classic")))
            low, high = c.pearson_corrected_low[0, 1], c.pearson_corrected_high[0, 1]
            hits += bool(c.undetermined[0, 1]) or low <= rho <= high
            assert c.undetermined[0, 1] or -1 <= low <= c.pearson_corrected[0, 1] <= high <= 1
        covered[rho] = hits
    assert min(covered.values()) >= 38 and sum(covered.values()) >= 77, covered
