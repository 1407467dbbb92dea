"""Rambachan & Roth sensitivity: memtui's robust intervals equal moderndid's (HonestDiD's Python port) on HonestDiD's
own BCdata example (numbers stored by data/honestdid_reference.py), and the breakdown value behaves on panels."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine import honest
from memtui.estimation import sensitivity as sv
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate

REF = json.loads((Path(__file__).parent / "data" / "honestdid_reference.json").read_text())


def bc(l_vec=None) -> honest.EventStudyInput:
    return honest.EventStudyInput.of(REF["betahat"], REF["sigma"], REF["n_pre"], REF["n_post"], l_vec)


def test_original_interval_equals_the_package():
    assert honest.original_ci(bc()) == pytest.approx(REF["original"], rel=1e-12)


@pytest.mark.parametrize("mbar", ["0.5", "1.0", "2.0"])
def test_rm_identified_set_equals_the_package(mbar):
    assert honest.rm_identified_set(bc(), float(mbar)) == pytest.approx(REF["rm_identified_set"][mbar], rel=1e-9)


def test_flci_equals_the_package():
    for m, lo, hi in REF["flci"]:
        iv = honest.flci(bc(), m)[0]
        if m == 0:
            # at M = 0 the FLCI is the least-variance estimator, solved here exactly (a KKT system); the package's
            # conic solver stops at the edge of the feasible set: equal length, centres 6e-5 apart (0.3% of an sd)
            assert iv.high - iv.low == pytest.approx(hi - lo, rel=1e-5)
            assert iv.low == pytest.approx(lo, abs=1e-4)
        else:
            assert (iv.low, iv.high) == pytest.approx((lo, hi), rel=2e-5)


def test_rm_hybrid_and_conditional_intervals_equal_the_package():
    """The same theta grid and the same least-favourable draws: the same grid points, exactly."""
    for key, hybrid in (("rm_clf", True), ("rm_conditional", False)):
        for mbar, lo, hi in REF[key]:
            iv = honest.rm_interval(bc(), mbar, hybrid=hybrid, grid=tuple(REF["theta_grid"]))
            assert (iv.low, iv.high) == pytest.approx((lo, hi), rel=1e-12), key


def random_piece(seed: int):
    """One piece (s, sign) of Delta^RM(Mbar) for a random event study: moments y0 - direction * theta, nuisance x,
    covariance sigma_y, and the theta-hat around which the test's decisions change."""
    rng = np.random.default_rng(seed)
    n_pre, n_post = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    n = n_pre + n_post
    a = rng.normal(size=(n, n + 2))
    sigma = a @ a.T * 10.0 ** rng.integers(-4, 3)
    beta = rng.multivariate_normal(rng.normal(size=n) * np.sqrt(sigma.diagonal()), sigma)
    es = honest.EventStudyInput.of(beta, sigma, n_pre, n_post, rng.normal(size=n_post) if seed % 2 else None)
    mbar = float(rng.choice([0.0, 0.5, 1.0, 3.0]))
    a = honest.rm_constraints(n_pre, n_post, mbar, int(rng.integers(-(n_pre - 1), 1)), bool(rng.integers(2)))
    sigma_y = a @ es.sigma @ a.T
    a_gamma = a[:, n_pre:] @ honest._gamma_inverse(es.l_vec)
    return a @ es.betahat, a_gamma[:, 0], a_gamma[:, 1:], sigma_y, es


def edge_thetas(test, theta_hat: float, width: float, n: int = 8) -> np.ndarray:
    """theta values packed around the edges of the acceptance region of ``test`` (found on a coarse grid), where a
    decision is closest to changing; the coarse grid itself when nothing is accepted."""
    coarse = theta_hat + np.linspace(-1, 1, 101) * width
    accepted = np.flatnonzero([not test(th) for th in coarse])
    if not len(accepted):
        return coarse[::7]
    step = coarse[1] - coarse[0]
    ends = coarse[[accepted[0], accepted[-1]]]
    return np.r_[[e + np.linspace(-1.5, 1.5, n) * step for e in ends]].ravel()


@pytest.mark.parametrize("seed", range(40))
def test_cached_lps_answer_as_linprog_does(seed):
    """Reusing optimal bases (the fast path) gives linprog's statistics and the same test decisions, hybrid and
    conditional, on random pieces, at theta values packed around the edges of the acceptance region."""
    y0, direction, x, sigma_y, es = random_piece(seed)
    sd = np.sqrt(np.diag(sigma_y))
    fast, plain = honest._PieceLps(x, sd), honest._PieceLps(x, sd, cache=False)
    draws = np.random.default_rng(seed).multivariate_normal(np.zeros(len(sd)), sigma_y, size=40)
    etas = fast.etas(draws)
    assert etas == pytest.approx(plain.etas(draws), rel=1e-9, abs=1e-12 * np.abs(etas).max())
    width = 8 * es.sd_theta * (1 + np.abs(direction).max())
    for cv in (float(np.quantile(etas, 0.995)), None):

        def test(theta, lps=fast, cv=cv):
            return honest.arp_test(y0 - direction * theta, x, sigma_y, 0.05, cv, 0.005, lps)

        thetas = edge_thetas(test, es.theta, width)
        assert [test(th) for th in thetas] == [test(th, plain) for th in thetas]
    assert fast.linprog_calls < plain.linprog_calls / 3  # the cache answered most of them


@pytest.mark.parametrize("hybrid", [True, False])
def test_rm_interval_with_cached_lps_equals_linprog_every_time(hybrid):
    es = honest.EventStudyInput.of(REF["betahat"][1:7], np.array(REF["sigma"])[1:7, 1:7], 3, 3, [0.2, 0.5, 0.3])
    kw = {"grid_points": 60, "lf_sims": 60, "seed": 1, "hybrid": hybrid}
    for mbar in (0.0, 0.7):
        fast, plain = honest.rm_interval(es, mbar, **kw), honest.rm_interval(es, mbar, cache_lps=False, **kw)
        assert (fast.low, fast.high, fast.open_end) == (plain.low, plain.high, plain.open_end)
        assert np.isfinite(fast.low) and not fast.open_end


def sim_panel(trend: float = 0.0, curve: float = 0.0, effect: float = 1.0) -> Panel:
    """A simulated panel; ``trend``/``curve`` add to every treated instance's log-likelihood a violation of parallel
    trends, linear / quadratic in checkpoints since treatment (before and after it alike)."""
    sim = Simulation(n_cohorts=5, per_cohort=30, n_never=60, n_checkpoints=7, seed=3, effect=effect)
    data = simulate(sim)
    steps = data["steps"]
    values = dict(data["values"])
    treated = data["treatment"] != NEVER
    e = (steps[None, :] - data["treatment"][treated, None]) / sim.step
    y = values["loglik"].copy()
    y[treated] += trend * e + curve * e * e
    values["loglik"] = y
    return Panel(ids=data["ids"], treatment=data["treatment"], steps=steps, done=np.ones(len(steps), bool),
                 metrics=values, signs=dict(data["signs"]))  # fmt: skip


SETTINGS = Settings(base_period="universal", band="classic", draws=1000)


def test_event_study_is_the_persistent_curve_with_the_bootstrap_covariance():
    study = sv.event_study(sim_panel(), SETTINGS)
    assert list(study.event_times) == [-5000, -4000, -3000, -2000, 0, 1000, 2000, 3000, 4000, 5000]
    assert (study.n_pre, study.n_post) == (4, 6)
    assert not study.notes  # evenly spaced once the omitted reference event time (-1000) is counted
    assert np.allclose(study.sigma, study.sigma.T) and np.linalg.eigvalsh(study.sigma).min() > 0
    assert study.betahat[4] > 5 * np.sqrt(study.sigma[4, 4])  # a real instantaneous effect


def test_breakdown_is_positive_for_a_real_effect_and_none_without_one():
    # (a smooth, e.g. quadratic, injected violation does not shrink the sd breakdown: Delta^SD(M) allows it and the
    # FLCI is built to be robust to it; the relative-magnitudes test below shows the shrinking)
    grid = [0, 25, 50, 100, 200]
    real = sv.sensitivity(sv.event_study(sim_panel(), SETTINGS), "instantaneous", "sd", grid=grid)
    none = sv.sensitivity(sv.event_study(sim_panel(effect=0.0), SETTINGS), "instantaneous", "sd", grid=grid)
    assert real.breakdown is not None and real.breakdown > 0 and not real.breakdown_capped
    assert real.intervals[0].excludes_zero() and not real.intervals[-1].excludes_zero()
    assert "breakdown value is M" in real.sentence()
    assert none.breakdown is None and "not significant" in none.sentence()
    assert all(np.diff([iv.high - iv.low for iv in real.intervals]) > 0)


def test_rm_breakdown_shrinks_with_a_linear_pretrend():
    study = sv.event_study(sim_panel(), SETTINGS, pre=2, post=2)
    trended = sv.event_study(sim_panel(trend=3.0), SETTINGS, pre=2, post=2)
    kw = {"grid": [0, 40], "tol": 0.02, "grid_points": 200, "lf_sims": 300}
    a, b = sv.sensitivity(study, "instantaneous", "rm", **kw), sv.sensitivity(trended, "instantaneous", "rm", **kw)
    assert a.breakdown is not None and a.breakdown > 0
    assert b.breakdown is None or b.breakdown < a.breakdown


@pytest.mark.parametrize(
    "args, message",
    [
        (([1.0, 2.0], np.eye(3), 1, 1), "sigma must be 2 x 2"),
        (([1.0, 2.0], np.eye(2), 2, 1), "betahat has 2 coefficients"),
        (([1.0, 2.0], np.eye(2), 0, 2), "at least one pre-period"),
        (([1.0, np.nan], np.eye(2), 1, 1), "finite"),
        (([1.0, 2.0], np.array([[1.0, 0.5], [0.0, 1.0]]), 1, 1), "symmetric"),
        (([1.0, 2.0], np.array([[1.0, 2.0], [2.0, 1.0]]), 1, 1), "positive semi-definite"),
        (([1.0, 2.0, 3.0], np.eye(3), 1, 2, [0.0, 0.0]), "not all zero"),
    ],
)
def test_bad_input_is_refused_in_one_line(args, message):
    with pytest.raises(MemtuiError, match=message) as err:
        honest.EventStudyInput.of(*args)
    assert "\n" not in str(err.value)


def test_bad_settings_and_targets_are_refused_in_one_line():
    panel = sim_panel()
    with pytest.raises(MemtuiError, match="universal base period"):
        sv.event_study(panel, replace(SETTINGS, base_period="varying"))
    study = sv.event_study(panel, SETTINGS)
    for target, message in (("persistent:99", "not a post-treatment event time"), ("later", "target must be")):
        with pytest.raises(MemtuiError, match=message):
            sv.sensitivity(study, target, "sd")
    with pytest.raises(MemtuiError, match="method must be"):
        sv.sensitivity(study, "instantaneous", "xx")
    with pytest.raises(MemtuiError, match="0 or more"):
        sv.sensitivity(study, "instantaneous", "sd", grid=[-1.0])


# -- each Mbar's theta grid, the grids that cannot be honoured, and the event-time counts (issue 33) --------------


def test_rm_interval_at_mbar_0_is_the_ordinary_interval():
    """At Mbar = 0 the post-treatment violation is exactly 0, so the robust CI is the ordinary CI up to the test's
    small loss of power (HonestDiD's hybrid): same centre, each end within a tenth of an sd."""
    es = bc()
    iv, (lo, hi) = honest.rm_interval(es, 0.0), honest.original_ci(es)
    assert iv.low < es.theta < iv.high and not iv.open_end
    assert (iv.low, iv.high) == pytest.approx((lo, hi), abs=0.1 * es.sd_theta)


def test_rm_interval_covers_the_identified_set_inside_its_own_grid():
    """A robust CI contains the identified set (betahat taken as the truth is accepted) and, with each Mbar's grid
    chosen from its own identified set, ends inside the grid even where the set is 4,000 sd wide (one grid of +-20
    sd around theta-hat cut this interval short)."""
    es = bc()
    for mbar in (1.0, 1000.0):
        iv, (lo, hi) = honest.rm_interval(es, mbar), honest.rm_identified_set(es, mbar)
        assert iv.low <= lo and hi <= iv.high and not iv.open_end, mbar


def test_a_large_mbar_in_the_grid_leaves_mbar_0_its_interval():
    """The grid 0, 1, 10000 once gave Mbar = 0 the theta grid of Mbar = 10000 (points 100 sd apart): no point was
    accepted and the row read [n/a, n/a], "not significant even under exact parallel trends"."""
    study = sv.event_study(sim_panel(), SETTINGS, pre=2, post=2)
    res = sv.sensitivity(study, "instantaneous", "rm", grid=[0, 1, 10000], grid_points=300, lf_sims=300)
    zero = res.intervals[0]
    sd = (res.original[1] - res.original[0]) / (2 * 1.959964)
    step = 40 * sd / 299  # the grid's resolution (theta-hat +- 20 sd in 300 points): the hull lies inside by < 1
    assert (zero.low, zero.high) == pytest.approx(res.original, abs=0.1 * sd + step)
    assert res.breakdown is not None and res.breakdown >= 1  # Mbar = 1 excludes 0 in the table
    assert res.intervals[1].excludes_zero() and not res.intervals[2].excludes_zero()
    assert res.resolution <= sv.BREAKDOWN_TOL * 2 * res.breakdown  # to 1 % of itself, not of 10000


@pytest.mark.parametrize(
    "method, grid, message",
    [
        ("rm", [], "is empty"),
        ("rm", [float("nan")], "finite numbers of 0 or more, not nan"),
        ("sd", [float("inf")], "finite numbers of 0 or more, not inf"),
        ("rm", [0.0, -1.0], "not -1"),
        ("sd", [0.5, 1.0, 0.5], "lists 0.5 more than once"),
        ("rm", [0.0, 1e20], r"Mbar = 1e\+20 is past what"),
        ("rm", [1e300], r"Mbar = 1e\+300 is past what"),
        ("rm", ["x"], "must be numbers"),
    ],
)
def test_grids_that_cannot_be_honoured_are_refused_in_one_line(method, grid, message):
    study = sv.event_study(sim_panel(), SETTINGS, pre=2, post=2)
    with pytest.raises(MemtuiError, match=message) as err:
        sv.sensitivity(study, "instantaneous", method, grid=grid)
    assert "\n" not in str(err.value)


def test_a_huge_m_gives_a_finite_interval_or_a_refusal():
    """M is in the metric's units: 1e20 and 1e300 are honoured (the folded-normal quantile is mu + z once mu swamps
    it, where brentq could not bracket it); where the interval itself overflows, a refusal."""
    for mu in (39.0, 41.0, 1e20, 1e300):
        cv = honest.folded_normal_quantile(0.95, mu)
        assert np.isfinite(cv) and cv == pytest.approx(mu + 1.6448536269514722, rel=1e-12, abs=1e-9)
    es = bc()
    small, huge = honest.flci(es, 1.0)[0], honest.flci(es, 1e300)[0]
    assert np.isfinite(huge.low) and np.isfinite(huge.high) and huge.low < small.low and small.high < huge.high
    study = sv.event_study(sim_panel(), SETTINGS, pre=2, post=2)
    for top in (1e300, 1.7e308):
        try:
            res = sv.sensitivity(study, "instantaneous", "sd", grid=[0.0, top])
        except MemtuiError as err:
            assert "overflows double precision" in str(err)
            continue
        assert all(np.isfinite([iv.low, iv.high]).all() for iv in res.intervals)
        assert res.breakdown is not None and res.resolution < 0.1  # near 0, the resolution is the M scale's


@pytest.mark.parametrize("pre, post", [(0, None), (-1, None), (None, -1), (None, 0), (5, None), (None, 7)])
def test_event_time_counts_below_1_or_above_the_panel_are_refused(pre, post):
    """0 kept every placebo period and -1 dropped the earliest (Python's slices): counts are 1 to what the panel has."""
    option = "--pre" if pre is not None else "--post"
    with pytest.raises(MemtuiError, match=f"{option} -?[0-9]+: the panel has [46] ") as err:
        sv.event_study(sim_panel(), SETTINGS, pre=pre, post=post)
    assert "\n" not in str(err.value)
    full = sv.event_study(sim_panel(), SETTINGS, pre=4, post=6)
    assert (full.n_pre, full.n_post) == (4, 6)
