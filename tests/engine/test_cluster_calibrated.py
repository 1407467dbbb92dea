"""The calibrated band with clustered multipliers (engine.bands.clustered_variances): each draw's variance is
re-estimated cluster by cluster, as the wild cluster bootstrap-t does; singleton clusters give the instance-level
band; clusters that span groups are refused."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine import bands, did
from memtui.engine.layout import build_layout
from memtui.engine.multipliers import JointMultipliers
from memtui.engine.summaries import analytic_se
from memtui.panel.model import NEVER

DRAWS, SEED, CHUNK = 48, 5, 16


def _clustered_panel(seed=0, cohorts=3, clusters=4, size=3, never=12, t=5, shock=1.0):
    """Cohorts of ``clusters`` clusters of ``size`` instances sharing a shock at every checkpoint; controls in
    clusters of ``size`` too (a categorical covariate clustering them), or alone with ``size_never=1``."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 10
    per = clusters * size
    treatment = np.concatenate([np.repeat(steps[1 : cohorts + 1], per), np.full(never, NEVER)])
    cluster = np.arange(len(treatment)) // size
    y = rng.normal(size=(len(treatment), 1)) + rng.normal(size=(len(treatment), t))
    y += shock * rng.normal(size=(cluster.max() + 1, t))[cluster]
    return y, treatment, steps, cluster


def _bootstrap_t(lay, est, v, clusters):
    """Per cell and draw, the bootstrap-t from its definition: the bootstrap sample (v_c times each instance's
    centred change) re-centred at its mean, summed within clusters, the cluster-robust variance with G / (G - 1)."""
    group_of = np.repeat(np.arange(lay.n_groups), lay.group_n)
    out = np.empty((len(est.att), v.shape[1]))
    for k, (g, t, b, p, own) in enumerate(
        zip(lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own, strict=True)
    ):
        change = lay.y[:, t] - lay.y[:, b]
        treated = group_of == g
        control = (group_of < p) & ~(own & treated)
        parts = []
        for rows in (treated, control):
            z = change[rows] - change[rows].mean()
            star = v[rows].astype(float) * z[:, None]
            mean = star.mean(axis=0)
            codes = np.unique(clusters[rows], return_inverse=True)[1]
            sums = np.zeros((codes.max() + 1, v.shape[1]))
            np.add.at(sums, codes, star - mean)
            n_g = len(sums)
            parts.append((mean, (sums**2).sum(axis=0) / rows.sum() ** 2 * n_g / (n_g - 1)))
        (mt, vt), (mc, vc) = parts
        out[k] = np.abs(mt - mc) / np.sqrt(vt + vc)
    return out


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_clustered_studentised_law_is_the_wild_cluster_bootstrap_t(control_group):
    y, treatment, steps, cluster = _clustered_panel()
    lay = build_layout(y, treatment, steps, never=NEVER, control_group=control_group)
    est = did.point_estimates(lay)
    source = JointMultipliers.clustered(cluster)
    clusters = bands.layout_clusters(lay, source)
    assert clusters is not None and clusters.max() + 1 == len(np.unique(cluster))
    var = bands.cell_variances(lay, est, clusters=clusters)
    masks = [~lay.cell_pre, np.ones(len(lay.cell_pre), bool)]
    law = bands.studentized_bootstrap(
        [lay], [est], [var], [masks], draws=DRAWS, seed=SEED, chunk=CHUNK, source=source
    )[0]  # fmt: skip
    rng = np.random.default_rng(SEED)
    v = np.concatenate(
        [source.take(did.multipliers(rng, (source.n_keys, CHUNK), "rademacher", np.float32), lay.source_rows)
         for _ in range(DRAWS // CHUNK)], axis=1,
    )  # fmt: skip
    t_abs = _bootstrap_t(lay, est, v, clusters)
    for mask, got in zip(masks, law.tmax, strict=True):
        np.testing.assert_allclose(got, t_abs[mask].max(axis=0), rtol=2e-4)
    # the studentising standard error: the cluster-robust one with G / (G - 1), from its definition
    group_of = np.repeat(np.arange(lay.n_groups), lay.group_n)
    k = 0
    g, t, b = lay.cell_group[k], lay.cell_t[k], lay.cell_b[k]
    rows = group_of == g
    z = (lay.y[rows, t] - lay.y[rows, b]) - (lay.y[rows, t] - lay.y[rows, b]).mean()
    sums = np.bincount(np.unique(clusters[rows], return_inverse=True)[1], weights=z)
    assert var.var_t[k] == pytest.approx((sums**2).sum() / rows.sum() ** 2 * len(sums) / (len(sums) - 1), rel=1e-10)
    assert var.n_t[k] == pytest.approx(len(sums))


def test_singleton_clusters_are_the_instance_level_band():
    y, treatment, steps, _ = _clustered_panel(seed=1)
    lay = build_layout(y, treatment, steps, never=NEVER, control_group="not_yet_treated")
    est = did.point_estimates(lay)
    assert bands.layout_clusters(lay, JointMultipliers.per_instance(len(y))) is None
    alone = np.arange(lay.n_units)  # every row its own cluster, through the clustered arithmetic
    a, b = bands.cell_variances(lay, est), bands.clustered_variances(lay, est, alone)
    for name in ("var_t", "var_c", "n_t", "n_c"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-9, atol=1e-14)
    members = [np.flatnonzero(~lay.cell_pre), np.arange(len(est.att))]
    np.testing.assert_allclose(analytic_se(lay, est, members, clusters=alone), analytic_se(lay, est, members))


def test_clustered_aggregate_se_is_the_spread_of_the_clustered_draws():
    y, treatment, steps, cluster = _clustered_panel(seed=2, clusters=8, shock=2.0)
    lay = build_layout(y, treatment, steps, never=NEVER)
    est = did.point_estimates(lay)
    source = JointMultipliers.clustered(cluster)
    clusters = bands.layout_clusters(lay, source)
    members = [np.flatnonzero(~lay.cell_pre)]
    ase = analytic_se(lay, est, members, clusters=clusters)[0]
    boot = did.bootstrap(lay, est, draws=4000, seed=3, source=source)
    from memtui.engine.summaries import aggregate

    _, draws = aggregate(lay, est.att, boot.cells, boot.group_w, members)
    assert draws[0].std() == pytest.approx(ase, rel=0.06)  # Monte-Carlo se of an sd from 4000 draws: ~1.1 %
    assert analytic_se(lay, est, members)[0] < 0.8 * ase  # the unclustered one misses the shared shocks


def test_clusters_spanning_groups_are_refused():
    y, treatment, steps, _ = _clustered_panel()
    lay = build_layout(y, treatment, steps, never=NEVER)
    spanning = np.arange(len(y)) % 5  # every cluster has instances of every cohort
    with pytest.raises(MemtuiError, match="inside one cohort"):
        bands.layout_clusters(lay, JointMultipliers.clustered(spanning))
