"""The clustered bootstrap (Settings.cluster): one multiplier per cluster, as R did's clustervars. Its standard errors
equal the exact cluster-robust ones (the variance of the multiplier draw, sum_c (sum_{i in c} psi_i)^2 / n^2) and
`differences`' clustered bootstrap within Monte-Carlo error, on a panel with real within-cluster correlation where
the unclustered bootstrap is far too narrow; panels that cannot be clustered are refused in one line."""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import estimate, estimate_parts
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

M = 6  # instances per cluster, treated and controls alike (differences averages within clusters: equal sizes)


def clustered_panel(seed=0, n_cohorts=3, clusters_per_cohort=8, n_control_clusters=16, t=6, shock=1.5) -> Panel:
    """Y = a_i + trend_c + u_{cluster, c} + noise: the cluster's shock moves its instances together at every
    checkpoint (a batch's shared update). Clusters: ``M`` instances of one cohort, or ``M`` controls."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 10
    per = clusters_per_cohort * M
    treatment = np.concatenate([np.repeat(steps[1 : n_cohorts + 1], per), np.full(n_control_clusters * M, NEVER)])
    n = len(treatment)
    cluster = np.arange(n) // M
    y = rng.normal(0, 1, (n, 1)) + np.linspace(0, 2, t) + rng.normal(0, 1, (n, t))
    y += shock * rng.normal(0, 1, (cluster.max() + 1, t))[cluster]
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool), metrics={"loglik": y},
                 covariates={"site": cluster.astype(str).astype(object)},
                 provenance={"step": np.where(treatment == NEVER, -1, 1000 + cluster)})  # fmt: skip


def coefficients(panel: Panel) -> np.ndarray:
    """(instances x cells) each instance's coefficient a_i in each cell's estimate (never-treated controls, varying
    base): its influence function over n, straight from the definition; the columns in the layout's cell order."""
    y, steps = panel.metrics["loglik"], panel.steps
    lay = build_layout(y, panel.treatment, steps, never=NEVER)
    ctrl = panel.treatment == NEVER
    out = np.zeros((len(y), len(lay.cell_group)))
    for k, (g, t, b) in enumerate(zip(lay.cell_group, lay.cell_t, lay.cell_b, strict=True)):
        mine = panel.treatment == steps[lay.group_index[g]]
        dy = y[:, t] - y[:, b]
        out[mine, k] = (dy[mine] - dy[mine].mean()) / mine.sum()
        out[ctrl, k] = -(dy[ctrl] - dy[ctrl].mean()) / ctrl.sum()
    return out


def differences_cluster_se(coef: np.ndarray, cluster: np.ndarray, draws: int) -> np.ndarray:
    """`differences`' clustered multiplier bootstrap (its mboot: the influence function averaged within clusters,
    one Rademacher weight per cluster, IQR standard error) on the same influence functions. Its ATTgt.fit cannot
    take a cluster_var under pandas 3 (its validator indexes a Series by a list), so its bootstrap is called here on
    the influence functions directly: psi_i = n a_i."""
    from differences.models.attgt.mboot import mboot

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        out = mboot(len(coef) * coef, cluster_groups=cluster, boot_iterations=draws, random_state=11,
                    boot_backend="threading", boot_n_jobs=1, progress_bar=False, release_workers=False)  # fmt: skip
    return out["se"]


def test_clustered_se_is_the_cluster_robust_one_and_agrees_with_differences():
    panel = clustered_panel()
    draws = 4000
    res, parts = estimate_parts(panel, Settings(draws=draws, band="classic", cluster="site"))
    plain = estimate(panel, Settings(draws=draws, band="classic"))
    assert any("clustered by site" in n for n in res.notes)
    cells = res.cells.sort(["cohort", "checkpoint"])
    se = cells["std_error"].to_numpy()
    cluster = np.unique(panel.covariates["site"], return_inverse=True)[1]
    # the draws' spread is the exact cluster-robust standard error (Monte-Carlo error ~1.1 % at B = 4000); the
    # reported se is R did's robust IQR / 1.349 of the draws, a few % above it where a few clusters dominate (a sum of
    # 40 sign flips has lighter tails than a normal), as it is in R did and differences
    coef = coefficients(panel)
    exact = np.sqrt((np.stack([np.bincount(cluster, weights=c) for c in coef.T]) ** 2).sum(axis=1))
    sd = parts.draws.astype(float).std(axis=1)
    assert np.all(np.abs(sd / exact - 1) < 0.06) and abs(np.median(sd / exact) - 1) < 0.025
    order = np.lexsort((parts.cell_step, parts.cohort_step))
    assert np.array_equal(parts.est.att[order], parts.sign * cells["estimate"].to_numpy())
    # the unclustered bootstrap ignores the shared shocks: far narrower
    assert np.median(plain.cells.sort(["cohort", "checkpoint"])["std_error"].to_numpy() / se) < 0.7
    # differences' clustered bootstrap of the same influence functions (its own draws): the same se within MC error
    ref = differences_cluster_se(coef, cluster, draws)[order]
    ratio = se / ref
    assert abs(np.median(ratio) - 1) < 0.03 and np.all(np.abs(ratio - 1) < 0.1)


def test_batch_clusters_from_the_recorded_step():
    panel = clustered_panel(seed=1)
    by_batch = estimate(panel, Settings(draws=400, band="classic", cluster="batch"))
    # controls each their own cluster under batch: 3 x 8 batches + 96 controls
    assert any("120 clusters" in n for n in by_batch.notes)
    by_site = estimate(panel, Settings(draws=400, band="classic", cluster="site"))
    assert any("40 clusters" in n for n in by_site.notes)
    assert np.array_equal(by_batch.cells["estimate"].to_numpy(), by_site.cells["estimate"].to_numpy())


@pytest.mark.parametrize(
    ("settings", "panel_change", "message"),
    [
        ({"cluster": "batch"}, "no_step", "does not record"),
        ({"cluster": "nope"}, None, "no covariate 'nope'"),
        ({"cluster": "mixed", "band": "calibrated"}, "spanning", "--band classic"),
        ({"cluster": "site", "draws": 0}, None, "-B 1000"),
    ],
)
def test_refusals(settings, panel_change, message):
    panel = clustered_panel()
    if panel_change == "no_step":
        panel.provenance = {}
    if panel_change == "spanning":  # clusters with instances of several cohorts: the calibrated band refuses them
        panel.covariates["mixed"] = (np.arange(panel.n_instances) % 5).astype(str).astype(object)
    with pytest.raises(MemtuiError, match=message) as err:
        estimate(panel, Settings(**{"band": "classic", "draws": 100, **settings}))
    assert "\n" not in str(err.value)


def test_calibrated_band_takes_clusters():
    """--band calibrated --cluster: the studentising standard errors are cluster-robust (here about twice the
    instance-level ones: 1.5 sd shocks shared by clusters of 6), the bands wider accordingly, the estimates the same."""
    panel = clustered_panel(seed=2)
    plain = estimate(panel, Settings(draws=400))
    clustered = estimate(panel, Settings(draws=400, cluster="site"))
    assert np.array_equal(plain.cells["estimate"].to_numpy(), clustered.cells["estimate"].to_numpy())
    post = ~plain.cells["pre_treatment"].to_numpy()
    ratio = clustered.cells["std_error"].to_numpy()[post] / plain.cells["std_error"].to_numpy()[post]
    assert np.median(ratio) > 1.5
    assert clustered.crit > 0 and np.isfinite(clustered.overall.std_error)
    assert clustered.overall.std_error > 1.5 * plain.overall.std_error
    assert any("40 clusters" in n for n in clustered.notes)


def test_calibrated_clustered_band_holds_its_level_with_few_batches():
    """Null panels (tau = 0) whose cohorts are 8 batches of 10 sharing a strong shock (sd 2, noise sd 1): the classic
    clustered band flags a cell in about half of them (Rademacher weights on 8 clusters a cohort), the calibrated
    clustered band (the wild cluster bootstrap-t) near 5 % (benchmarks/cluster_coverage.py: 0.500 and 0.050 on 200
    panels)."""
    rng = np.random.default_rng(7)
    steps = np.arange(6) * 10
    treatment = np.concatenate([np.repeat(steps[1:5], 80), np.full(300, NEVER)])
    trained = treatment != NEVER
    step = np.where(trained, np.arange(len(treatment)) // 10, -1)
    flagged = {"classic": 0, "calibrated": 0}
    panels = 40
    for _ in range(panels):
        y = rng.normal(size=(len(treatment), 1)) + np.linspace(0, 2, 6) + rng.normal(size=(len(treatment), 6))
        y[trained] += 2 * rng.normal(size=(step.max() + 1, 6))[step[trained]]
        panel = Panel(ids=np.arange(len(y)), treatment=treatment, steps=steps, done=np.ones(6, bool),
                      metrics={"loglik": y}, provenance={"step": step})  # fmt: skip
        seed = int(rng.integers(1e6))
        for band in flagged:
            res = estimate(panel, Settings(draws=199, band=band, cluster="batch", seed=seed))
            flagged[band] += bool(res.cells.filter(~res.cells["pre_treatment"])["significant"].any())
    assert flagged["calibrated"] <= 0.15 * panels  # 5 % nominal: 2 expected, binomial se 1.4
    assert flagged["classic"] >= 0.3 * panels
