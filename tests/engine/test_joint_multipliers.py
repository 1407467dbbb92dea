"""Multipliers keyed by the panel's instance (engine.multipliers): layouts built on subsets or reorderings of one
panel see the same multiplier for the same instance in the same draw, under the classic and the calibrated bootstrap;
without a source the draws are what they always were."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import bands, did
from memtui.engine.layout import build_layout
from memtui.engine.multipliers import JointMultipliers
from memtui.panel.model import NEVER

DRAWS, SEED, CHUNK = 96, 7, 32  # three chunks: the keyed draw must follow the generator chunk by chunk


def _panel(seed: int = 0, n_cohorts: int = 4, per: int = 12, n_never: int = 30, t: int = 6):
    rng = np.random.default_rng(seed)
    treatment = np.concatenate([np.repeat(np.arange(1, n_cohorts + 1) * 10, per), np.full(n_never, NEVER)])
    steps = np.arange(t) * 10
    y = rng.normal(size=(len(treatment), 1)) + rng.normal(size=(len(treatment), t))
    return y, treatment, steps


def _layout(y, treatment, steps):
    return build_layout(y, treatment, steps, never=NEVER)


def _direct(lay, est, v: np.ndarray) -> np.ndarray:
    """Each cell's draw from per-row multipliers ``v`` (layout order), straight from its definition in float64:
    (1/n_T) sum_T v_i (dY_i - dM) - (1/n_C) sum_C v_i (dY_i - dmu)."""
    out = np.empty((len(lay.cell_group), v.shape[1]))
    for k, (g, t, b) in enumerate(zip(lay.cell_group, lay.cell_t, lay.cell_b, strict=True)):
        dy = lay.y[:, t] - lay.y[:, b]
        tr, ct = lay.rows(g), lay.rows(0)
        out[k] = v[tr].T @ (dy[tr] - est.dm[k]) / lay.group_n[g] - v[ct].T @ (dy[ct] - est.dmu[k]) / lay.group_n[0]
    return out


def _keyed(source: JointMultipliers, lay, kind: str = "rademacher") -> np.ndarray:
    """The multipliers ``source`` gives ``lay``'s rows, from the generator as the bootstrap draws it, chunk by chunk."""
    rng = np.random.default_rng(SEED)
    parts = []
    for start in range(0, DRAWS, CHUNK):
        drawn = did.multipliers(rng, (source.n_keys, min(CHUNK, DRAWS - start)), kind, np.float32)
        parts.append(source.take(drawn, lay.source_rows))
    return np.concatenate(parts, axis=1).astype(float)


def test_without_a_source_the_draws_are_unchanged():
    y, treatment, steps = _panel()
    lay = _layout(y, treatment, steps)
    est = did.point_estimates(lay)
    plain = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK)
    again = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK, source=None)
    assert np.array_equal(plain.cells, again.cells)
    # and a source keyed by instance draws other multipliers than the layout-ordered default
    keyed = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK, source=JointMultipliers.per_instance(len(y)))
    assert not np.allclose(plain.cells, keyed.cells)


@pytest.mark.parametrize("kind", ["rademacher", "mammen"])
def test_a_subset_gets_the_full_panels_multiplier_for_each_instance(kind):
    y, treatment, steps = _panel()
    source = JointMultipliers.per_instance(len(y))
    full = _layout(y, treatment, steps)
    rows = np.flatnonzero(np.random.default_rng(1).random(len(y)) < 0.6)
    part = _layout(y[rows], treatment[rows], steps)
    sub = source.subset(rows)
    v_full, v_part = _keyed(source, full, kind), _keyed(sub, part, kind)
    # the same instance, the same multiplier in every draw
    panel_row_full = full.source_rows
    panel_row_part = rows[part.source_rows]
    where = {int(r): i for i, r in enumerate(panel_row_full)}
    assert np.array_equal(v_part, v_full[[where[int(r)] for r in panel_row_part]])
    # and the bootstrap uses exactly those: its draws are the direct sums with them (float32 accumulation)
    est = did.point_estimates(part)
    boot = did.bootstrap(part, est, draws=DRAWS, seed=SEED, chunk=CHUNK, multiplier=kind, source=sub)
    assert np.allclose(boot.cells, _direct(part, est, v_part), atol=1e-4)
    assert np.allclose(boot.group_w, np.add.reduceat(v_part, part.group_start[:-1], axis=0))


def test_a_reordered_panel_gives_the_same_draws_classic_and_calibrated():
    y, treatment, steps = _panel(seed=3)
    perm = np.random.default_rng(2).permutation(len(y))
    lay, lay_p = _layout(y, treatment, steps), _layout(y[perm], treatment[perm], steps)
    est, est_p = did.point_estimates(lay), did.point_estimates(lay_p)
    src = JointMultipliers.per_instance(len(y))
    a = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK, source=src)
    b = did.bootstrap(lay_p, est_p, draws=DRAWS, seed=SEED, chunk=CHUNK, source=src.subset(perm))
    assert np.allclose(a.cells, b.cells, atol=1e-5)  # same sums, another order of the additions
    masks = {"all": np.ones(len(lay.cell_group), bool)}
    kw = {"draws": DRAWS, "seed": SEED, "floor": did.se_floor(lay.scale)}
    ca = bands.calibrated_bootstrap(lay, est, masks, source=src, **kw)
    cb = bands.calibrated_bootstrap(lay_p, est_p, masks, source=src.subset(perm), **kw)
    # the calibrated bootstrap draws in chunks of 128: the same draws as the classic one with that chunk, bit for bit
    assert np.array_equal(ca.boot.cells, did.bootstrap(lay, est, draws=DRAWS, seed=SEED, source=src).cells)
    assert np.allclose(ca.boot.cells, cb.boot.cells, atol=1e-5)
    assert np.allclose(ca.tmax["all"], cb.tmax["all"], rtol=1e-4)
    # the unkeyed bootstrap of the reordered panel is another set of draws altogether
    c = did.bootstrap(lay_p, est_p, draws=DRAWS, seed=SEED, chunk=CHUNK)
    assert not np.allclose(a.cells, c.cells, atol=1e-3)


def test_clustered_multipliers_are_shared_within_a_cluster():
    y, treatment, steps = _panel(seed=4)
    cluster = np.where(treatment == NEVER, -1, np.arange(len(y)) // 4)  # treated in fours; controls alone
    source = JointMultipliers.clustered(cluster)
    assert source.n_keys == len(np.unique(cluster[cluster >= 0])) + int((cluster < 0).sum())
    lay = _layout(y, treatment, steps)
    v = _keyed(source, lay)
    panel_row = lay.source_rows
    for c in np.unique(cluster[cluster >= 0]):
        members = np.flatnonzero(cluster[panel_row] == c)
        assert (v[members] == v[members[0]]).all()
    controls = np.flatnonzero(cluster[panel_row] < 0)
    assert len(np.unique(v[controls], axis=0)) > len(controls) // 2  # alone: independent rows
    est = did.point_estimates(lay)
    boot = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK, source=source)
    assert np.allclose(boot.cells, _direct(lay, est, v), atol=1e-4)
