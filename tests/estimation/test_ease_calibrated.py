"""The calibrated ease band of `compare` and the calibrated band's small-sample pointwise intervals.

The ease (extractable - DiD per cell) is a linear functional of several groups' means; its calibrated band is the
bootstrap-t of its group parts (``bands.linear_studentized``), checked against a brute-force bootstrap that rebuilds
every group's bootstrap sample and re-estimates the ease's stratified HC1 standard error on every draw; on null panels
with a known ease it holds its family-wise error where the classic band over-rejects. The classic band's ease and
intervals are those of before, bit for bit. Under the calibrated band ``ci_low``/``ci_high`` use the cell's Welch t
critical value (and each event time's bootstrap-t), checked against a hand-made Welch interval."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from memtui.core.errors import MemtuiError
from memtui.engine import bands, did
from memtui.engine.layout import build_layout
from memtui.estimation.compare import _ease, compare
from memtui.estimation.estimate import estimate
from memtui.estimation.results import z_value
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel


def null_panel(cohorts=4, per_cohort=30, never=200, checkpoints=6, seed=0, noise=8.0) -> tuple[Panel, np.ndarray]:
    """A panel without memorisation (instance levels sd 60, white noise, a common trend) and its trend: every DiD cell
    is 0 and the ease at checkpoint c has expectation trend[c]."""
    rng = np.random.default_rng(seed)
    treatment = np.concatenate([np.repeat(np.arange(1, cohorts + 1), per_cohort), np.full(never, NEVER)])
    n = len(treatment)
    trend = np.linspace(0, 50, checkpoints)
    y = rng.normal(0, 60, (n, 1)) + trend[None, :] + rng.normal(0, noise, (n, checkpoints))
    panel = Panel(ids=np.arange(n), treatment=treatment, steps=np.arange(checkpoints), done=np.ones(checkpoints, bool),
                  metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip
    return panel, trend


def _layouts(panel: Panel, controls: str):
    y, steps = panel.values("loglik"), panel.done_steps
    kw = {"never": NEVER, "base_period": "varying", "control_group": controls}
    return build_layout(y, panel.treatment, steps, estimator="extractable", **kw), build_layout(
        y, panel.treatment, steps, estimator="did", **kw
    )


@pytest.mark.parametrize("controls", ["never_treated", "not_yet_treated"])
def test_studentised_ease_law_is_the_brute_force_bootstrap_t(controls):
    """Every draw: rebuild each group's bootstrap sample (v_i z_i), re-estimate the ease's group parts and their HC1
    variances (each group re-centred at its own bootstrap mean), studentise, take the maximum over the family."""
    panel, _ = null_panel(cohorts=3, per_cohort=6, never=9, checkpoints=5, seed=3)
    lay, ref = _layouts(panel, controls)
    cells, cols, coef, _ = did.ease_terms(lay, ref)
    n, draws, chunk, seed = len(ref.cell_group), 40, 16, 7
    post = ~ref.cell_pre
    ase, se, out, laws = bands.linear_studentized(
        lay, cells, cols, coef, n, [post, np.ones(n, bool)], draws=draws, seed=seed, floor=0.0, chunk=chunk
    )
    width = lay.y.shape[1]
    a = np.zeros((n, lay.n_groups * width))
    np.add.at(a, (cells, cols), coef)
    rng = np.random.default_rng(seed)
    v = np.concatenate([did.multipliers(rng, (lay.n_units, min(chunk, draws - s)), "rademacher", np.float32)
                        for s in range(0, draws, chunk)], axis=1).astype(float)  # fmt: skip
    d_star, var_star = np.zeros((n, draws)), np.zeros((n, draws))
    var_hat = np.zeros(n)
    for h in range(lay.n_groups):
        z = lay.y[lay.rows(h)] - lay.means[h]
        u = z @ a[:, h * width : (h + 1) * width].T  # (rows, functionals): each instance's share of group h's part
        m = len(z)
        var_hat += (u**2).sum(axis=0) * m / (m - 1)
        for b in range(draws):
            ub = v[lay.rows(h), b][:, None] * u  # the bootstrap sample's shares
            d_star[:, b] += ub.sum(axis=0)
            var_star[:, b] += ((ub - ub.mean(axis=0)) ** 2).sum(axis=0) * m / (m - 1)
    np.testing.assert_allclose(se, np.sqrt(var_hat), rtol=1e-12)
    np.testing.assert_allclose(out, d_star, rtol=1e-4, atol=1e-4 * np.abs(d_star).max())
    t = np.abs(d_star) / np.sqrt(var_star)
    np.testing.assert_allclose(laws[0], t[post].max(axis=0), rtol=2e-4)
    np.testing.assert_allclose(laws[1], t.max(axis=0), rtol=2e-4)
    assert np.all(ase < se)  # the plain one lacks the n / (n - 1) factors


def _old_classic_ease(panel: Panel, settings: Settings):
    """The ease's columns as `_ease` made them before the calibrated band (classic, whatever the band)."""
    lay, ref = _layouts(panel, settings.control_group)
    cells, cols, coef, point = did.ease_terms(lay, ref)
    n, floor, pre = len(ref.cell_group), did.se_floor(lay.scale), ref.cell_pre
    se, draws = did.linear_bootstrap(lay, cells, cols, coef, n, draws=settings.draws, seed=settings.seed)
    ase = did.floored(se, floor)
    se = did.bootstrap_se(draws, floor)
    crit = np.full(n, z_value(settings.alpha))
    for fam in (~pre, pre):
        crit[fam] = did.critical_value(did.sup_t(draws, se, fam), settings.alpha)
    return point, se, ase, point - crit * se, point + crit * se


def test_classic_ease_and_intervals_are_unchanged_and_calibrated_ones_differ():
    panel, _ = null_panel(seed=5)
    classic = Settings(draws=200, seed=2, band="classic")
    cmp = compare(panel, classic)
    old = _old_classic_ease(panel, classic)
    got = cmp.cells.filter(cmp.cells["ease_estimate"].is_not_null())
    for name, want in zip(("estimate", "std_error", "analytic_se", "band_low", "band_high"), old, strict=True):
        np.testing.assert_array_equal(got[f"ease_{name}"].to_numpy(), want)
    res = cmp.results["did"]
    for frame in (res.cells, res.persistent, res.instantaneous):  # classic pointwise: estimate +- z * std_error
        z = z_value(classic.alpha)
        np.testing.assert_array_equal(frame["ci_low"].to_numpy(), frame["estimate"].to_numpy() - z * frame["std_error"])
    cal = compare(panel, replace(classic, band="calibrated"))
    assert not any("ease band is the classic band" in note for note in cal.notes)
    c = cal.cells.filter(cal.cells["ease_estimate"].is_not_null())
    np.testing.assert_array_equal(c["ease_estimate"].to_numpy(), got["ease_estimate"].to_numpy())
    assert not np.array_equal(c["ease_band_low"].to_numpy(), got["ease_band_low"].to_numpy())


def test_calibrated_ease_holds_its_level_where_the_classic_over_rejects():
    """Seeded null panels at 12 per cohort (the ease is dominated by the cohort's level at the base, a mean of 12
    instances): the classic band flags a cell in far more than 5 % of panels, the calibrated one near 5 %."""
    miss = {"classic": [], "calibrated": []}
    for seed in range(60):
        panel, trend = null_panel(cohorts=6, per_cohort=12, never=200, checkpoints=8, seed=100 + seed)
        for band in miss:
            frame, _, _ = _ease(panel, Settings(draws=199, seed=seed, band=band, family="all"))
            truth = trend[frame["checkpoint"].to_numpy()]
            lo, hi = frame["ease_band_low"].to_numpy(), frame["ease_band_high"].to_numpy()
            miss[band].append(bool(((lo > truth) | (hi < truth)).any()))
    classic, calibrated = np.mean(miss["classic"]), np.mean(miss["calibrated"])
    assert classic >= 0.2, classic  # measured: see docs/calibration-study.md (benchmarks/ease_calibration.py)
    assert calibrated <= 0.12, calibrated


def test_calibrated_pointwise_interval_is_the_welch_t_interval():
    """A never-treated DiD cell's interval is estimate +- t(0.975, Welch df) * HC1 se, with the df from the cohort's
    and the controls' sample variances of the change, computed by hand."""
    panel, _ = null_panel(cohorts=2, per_cohort=10, never=25, checkpoints=4, seed=9)
    res = estimate(panel, Settings(draws=100, seed=1, estimator="did"))
    row = res.cells.filter((res.cells["cohort"] == 2) & (res.cells["checkpoint"] == 3)).row(0, named=True)
    y = panel.values("loglik")
    change = y[:, 3] - y[:, 1]  # the varying base of a post cell: the checkpoint before the cohort
    va, vb = (np.var(change[panel.treatment == g], ddof=1) / np.sum(panel.treatment == g) for g in (2, NEVER))
    df = (va + vb) ** 2 / (va**2 / 9 + vb**2 / 24)
    assert row["std_error"] == pytest.approx(np.sqrt(va + vb), rel=1e-9)
    assert row["ci_high"] - row["estimate"] == pytest.approx(stats.t.isf(0.025, df) * np.sqrt(va + vb), rel=1e-9)
    assert row["ci_high"] - row["estimate"] > z_value(0.05) * row["std_error"]
    # the event times' intervals: each one's bootstrap-t critical value, above z at 10 per cohort
    p = res.persistent
    crit = ((p["ci_high"] - p["estimate"]) / p["std_error"]).to_numpy()
    assert np.all(crit[np.isfinite(crit)] > z_value(0.05) * 0.9)


def _paired(panel: Panel) -> np.ndarray:
    """A cluster label per instance: the trained ones in pairs inside their cohort, the never-trained alone (no value:
    a covariate's missing value is a cluster of its own; -1 would be a level, one cluster of every control)."""
    labels = np.full(len(panel.ids), np.nan)
    trained = np.flatnonzero(panel.treatment != NEVER)
    order = trained[np.argsort(panel.treatment[trained], kind="stable")]
    labels[order] = np.arange(len(order)) // 2
    return labels


@pytest.mark.parametrize("controls", ["never_treated", "not_yet_treated"])
def test_clustered_ease_law_is_the_wild_cluster_bootstrap_t(controls):
    """With one multiplier per cluster (pairs inside each cohort), every draw: each cluster's bootstrap share v_c S_c,
    the ease's parts, and their cluster-robust variances re-centred at each group's bootstrap mean (G / (G - 1) over
    the G clusters); the calibrated law is the maximum of the studentised draws."""
    from memtui.engine.multipliers import JointMultipliers

    panel, _ = null_panel(cohorts=3, per_cohort=8, never=9, checkpoints=5, seed=4)
    lay, ref = _layouts(panel, controls)
    source = JointMultipliers.clustered(np.nan_to_num(_paired(panel), nan=-1))  # -1: a cluster of its own
    cells, cols, coef, _ = did.ease_terms(lay, ref)
    n, draws, chunk, seed = len(ref.cell_group), 40, 16, 7
    post = ~ref.cell_pre
    _, se, out, laws = bands.linear_studentized(
        lay, cells, cols, coef, n, [post], draws=draws, seed=seed, floor=0.0, chunk=chunk, source=source
    )
    width = lay.y.shape[1]
    a = np.zeros((n, lay.n_groups * width))
    np.add.at(a, (cells, cols), coef)
    rng = np.random.default_rng(seed)
    drawn = [did.multipliers(rng, (source.n_keys, min(chunk, draws - s)), "rademacher", np.float32)
             for s in range(0, draws, chunk)]  # fmt: skip
    v = np.concatenate([source.take(d, lay.source_rows) for d in drawn], axis=1).astype(float)
    keys = source.keys[lay.source_rows]
    d_star, var_star, var_hat = np.zeros((n, draws)), np.zeros((n, draws)), np.zeros(n)
    for h in range(lay.n_groups):
        rows = lay.rows(h)
        z = lay.y[rows] - lay.means[h]
        u = z @ a[:, h * width : (h + 1) * width].T  # (rows, functionals)
        members = [np.flatnonzero(keys[rows] == k) for k in np.unique(keys[rows])]
        sums = np.array([u[m].sum(axis=0) for m in members])  # (clusters, functionals): S_c
        g = len(members)  # equal sizes within a group: the effective number is the count
        var_hat += (sums**2).sum(axis=0) * g / (g - 1)
        for b in range(draws):
            vb = v[rows, b]
            p_star = (vb[:, None] * u).sum(axis=0)
            d_star[:, b] += p_star
            shares = np.array([vb[m[0]] * sums[i] for i, m in enumerate(members)])
            sizes = np.array([len(m) for m in members])[:, None]
            # each instance re-centred at the part's bootstrap mean p_star / n_h, summed within its cluster
            var_star[:, b] += ((shares - sizes * p_star / len(z)) ** 2).sum(axis=0) * g / (g - 1)
    np.testing.assert_allclose(se, np.sqrt(var_hat), rtol=1e-12)
    np.testing.assert_allclose(out, d_star, rtol=1e-4, atol=1e-4 * np.abs(d_star).max())
    t = np.abs(d_star) / np.sqrt(var_star)
    np.testing.assert_allclose(laws[0], t[post].max(axis=0), rtol=2e-4)


def test_compare_clusters_the_ease_band_as_it_clusters_the_estimators():
    """`compare --cluster`: the ease's draws take one multiplier per cluster under either band (its standard error
    moves; the point estimate and the instance-level analytic column do not), and a cluster spanning cohorts is
    refused by the calibrated band in one line, as for the estimators."""
    panel, _ = null_panel(cohorts=4, per_cohort=10, never=60, checkpoints=5, seed=8)
    panel.covariates = {"pair": _paired(panel)}
    for band in ("calibrated", "classic"):
        plain, _, _ = _ease(panel, Settings(draws=150, seed=3, band=band))
        paired, _, _ = _ease(panel, Settings(draws=150, seed=3, band=band, cluster="pair"))
        np.testing.assert_array_equal(paired["ease_estimate"].to_numpy(), plain["ease_estimate"].to_numpy())
        np.testing.assert_array_equal(paired["ease_analytic_se"].to_numpy(), plain["ease_analytic_se"].to_numpy())
        assert not np.allclose(paired["ease_std_error"].to_numpy(), plain["ease_std_error"].to_numpy())
    panel.covariates = {"pair": np.arange(len(panel.ids)) // 3 % 7.0}  # clusters across cohorts and controls
    with pytest.raises(MemtuiError, match="every cluster inside one cohort"):
        _ease(panel, Settings(draws=50, cluster="pair"))


SHOCK = 25.0  # sd of each cluster's shared shock at each checkpoint (the instances' own noise: 8)


@pytest.mark.simulation
def test_clustered_calibrated_ease_holds_its_level_under_shared_cluster_shocks():
    """Null panels whose clusters (four instances of a cohort) share a shock at every checkpoint: the ease band
    clustered by them holds its family-wise error; the instance-level calibrated band over-rejects."""
    miss = {"": [], "site": []}
    for seed in range(200):
        rng = np.random.default_rng(500 + seed)
        panel, trend = null_panel(cohorts=4, per_cohort=24, never=150, checkpoints=6, seed=500 + seed)
        site = np.full(len(panel.ids), np.nan)  # the never-trained: each a cluster of its own
        trained = np.flatnonzero(panel.treatment != NEVER)
        site[trained] = np.arange(len(trained)) // 4  # cohorts are contiguous blocks of 24: clusters stay inside
        shock = rng.normal(0, SHOCK, (int(np.nanmax(site)) + 1, 6))
        y = panel.values("loglik").copy()
        y[trained] += shock[site[trained].astype(int)]
        panel = replace(panel, metrics={"loglik": y}, covariates={"site": site})
        for cluster in miss:
            frame, _, _ = _ease(panel, Settings(draws=199, seed=seed, cluster=cluster, family="all"))
            truth = trend[frame["checkpoint"].to_numpy()]
            lo, hi = frame["ease_band_low"].to_numpy(), frame["ease_band_high"].to_numpy()
            miss[cluster].append(bool(((lo > truth) | (hi < truth)).any()))
    # measured over 1,000 panels (seeds 500-1499): 20.8 ± 1.3 % at the instance level, 6.8 ± 0.8 % clustered (6
    # clusters a cohort, each never-trained control its own); these 200: 22.5 % and 8.5 %. (An earlier version of this
    # test gave every control one cluster, a clustering memtui now refuses, and measured 0 of 40.)
    assert np.mean(miss[""]) >= 0.15, miss  # instance-level: the shared shocks look like signal
    assert np.mean(miss["site"]) <= 0.1, miss
