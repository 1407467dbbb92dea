"""The permutation band's numerics (engine.permutations): each permutation's cells are the real estimate's formulas,
the compiled loops and numpy make the same permutations and statistics, permutations are keyed by instance (the same
relabelling for layouts of the same instances), and the test is exact: over random assignments of the cohort labels
to fixed outcomes its p-values are uniform on {1, ..., P + 1} / (P + 1), which a variant that does not permute fails."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import did, permutations
from memtui.engine.band_permutation import PERMUTATION
from memtui.engine.layout import build_layout
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, simulate

DESIGNS = [("did", "varying"), ("did", "universal"), ("difference", "varying"), ("extractable", "varying")]


def _data(seed: int = 1):
    d = simulate(Simulation(n_cohorts=6, per_cohort=12, n_never=40, n_checkpoints=8, seed=seed, effect=1.0))
    return d["values"]["loglik"], d["treatment"], d["steps"]


def _layout(estimator="did", base_period="varying", seed=1, checkpoints=8):
    y, treatment, steps = _data(seed) if checkpoints == 8 else _wide(seed, checkpoints)
    lay = build_layout(y, treatment, steps, never=NEVER, estimator=estimator, base_period=base_period)
    return lay, did.point_estimates(lay)


def _wide(seed: int, checkpoints: int):
    """A panel wide enough that the compiled sums run in tiles of 16 columns and a narrower tail."""
    d = simulate(Simulation(n_cohorts=5, per_cohort=20, n_never=60, n_checkpoints=checkpoints, seed=seed, effect=1.0))
    return d["values"]["loglik"], d["treatment"], d["steps"]


@pytest.fixture(params=["compiled", "numpy"])
def loops(request, monkeypatch):
    if request.param == "compiled" and not permutations.compiled():
        pytest.skip("the compiled loops are not built")
    if request.param == "numpy":
        monkeypatch.setenv("MEMTUI_KERNELS", "numpy")
    return request.param


@pytest.mark.parametrize("estimator,base_period", DESIGNS)
def test_the_identity_permutation_gives_the_estimate_and_its_standard_error(loops, estimator, base_period):
    lay, est = _layout(estimator, base_period)
    p = permutations.plan(lay, est, centred=False)
    att, var = permutations.cell_stats(p, *permutations.sums(p, np.arange(len(p.keys))[None]))
    scale = np.abs(est.att).max()
    np.testing.assert_allclose(att[0], est.att, atol=1e-5 * scale)
    np.testing.assert_allclose(np.sqrt(var[0]), est.se, rtol=1e-4)


@pytest.mark.parametrize("estimator,base_period", [d for d in DESIGNS if d[0] != "extractable"])
def test_with_the_controls_permuted_the_identity_gives_the_estimate_and_its_standard_error(loops, estimator,
                                                                                          base_period):  # fmt: skip
    """The controls' label permuted too: their change and their part of the variance are each permutation's own, so
    the identity (every instance in its own group) is the estimate with its own standard error."""
    lay, est = _layout(estimator, base_period)
    p = permutations.plan(lay, est, controls=True)
    assert len(p.keys) == lay.n_units and p.ctrl_group == 0
    identity = np.arange(len(p.keys))[None]
    att, var = permutations.cell_stats(p, *permutations.sums(p, identity),
                                       ctrl_var=permutations._control_parts(p, identity))  # fmt: skip
    scale = np.abs(est.att).max()
    np.testing.assert_allclose(att[0], est.att, atol=1e-5 * scale)
    np.testing.assert_allclose(np.sqrt(var[0]), est.se, rtol=1e-4)


def test_with_the_controls_permuted_a_cell_is_its_rows_less_the_rows_given_the_controls(loops):
    lay, est = _layout()
    p = permutations.plan(lay, est, controls=True)
    order = permutations.orders(p, np.arange(1, 3, dtype=np.uint64))[:1]
    assert sorted(order[0]) == list(range(lay.n_units))
    att, var = permutations.cell_stats(p, *permutations.sums(p, order), ctrl_var=permutations._control_parts(p, order))
    rows = lay.y[order[0]]
    ctrl, mine = rows[p.starts[0] : p.starts[1]], rows[p.starts[1] : p.starts[2]]  # the controls' and group 1's slots
    cell = np.flatnonzero(lay.cell_group == 1)[-1]
    t, b = lay.cell_t[cell], lay.cell_b[cell]
    d, dc = mine[:, t] - mine[:, b], ctrl[:, t] - ctrl[:, b]
    assert att[0, cell] == pytest.approx(d.mean() - dc.mean(), abs=1e-5)
    expected = ((d - d.mean()) ** 2).sum() / len(d) ** 2 + ((dc - dc.mean()) ** 2).sum() / len(dc) ** 2
    assert var[0, cell] == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("estimator,base_period", DESIGNS)
def test_the_centred_rows_estimate_zero_at_every_post_cell_under_the_identity(loops, estimator, base_period):
    """Centred (each treated row less its own cohort's estimated effects): under the observed labelling every
    post-treatment cell estimates 0 with its own standard error, every placebo cell is as observed."""
    lay, est = _layout(estimator, base_period)
    p = permutations.plan(lay, est, centred=True)
    att, var = permutations.cell_stats(p, *permutations.sums(p, np.arange(len(p.keys))[None]))
    scale = np.abs(est.att).max()
    post = ~lay.cell_pre
    assert np.abs(est.att[post]).max() > 0.1 * scale  # the effects were there to take out
    np.testing.assert_allclose(att[0][post], 0.0, atol=1e-5 * scale)
    np.testing.assert_allclose(att[0][~post], est.att[~post], atol=1e-5 * scale)
    np.testing.assert_allclose(np.sqrt(var[0]), est.se, rtol=1e-4)


def test_a_permutation_is_a_relabelling_of_the_treated_rows_with_the_cohort_sizes_kept(loops):
    lay, est = _layout()
    p = permutations.plan(lay, est, centred=False)  # the raw rows: a relabelling of the layout's own
    orders = permutations.orders(p, np.arange(1, 6, dtype=np.uint64))
    for row in orders:
        assert sorted(row) == list(range(len(p.keys)))
    assert len({tuple(row) for row in orders}) == len(orders)
    # a permuted cohort's estimate is the difference of means of the rows it was given, as a layout built on them
    treated = lay.y[p.treated_rows]
    att, _ = permutations.cell_stats(p, *permutations.sums(p, orders[:1]))
    relabelled = treated[orders[0]]
    cohort = 0  # the first treated group's slots
    rows = slice(p.starts[cohort], p.starts[cohort + 1])
    cell = np.flatnonzero((p.cohort == cohort) & (lay.cell_t == lay.group_index[1]))[0]
    t, b = lay.cell_t[cell], lay.cell_b[cell]
    expected = relabelled[rows, t].mean() - relabelled[rows, b].mean() - p.shift[cell]
    assert att[0, cell] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("checkpoints", [8, 37])
@pytest.mark.parametrize("controls", [False, True])
def test_the_compiled_loops_and_numpy_make_the_same_permutations_and_laws(controls, checkpoints, monkeypatch):
    if not permutations.compiled():
        pytest.skip("the compiled loops are not built")
    lay, est = _layout(checkpoints=checkpoints)
    masks = {"post": ~lay.cell_pre, "pre": lay.cell_pre}
    se = did.floored(est.se, did.se_floor(lay.scale))
    kw = {"count": 40, "seed": 3, "floor": did.se_floor(lay.scale), "controls": controls}
    fast = permutations.permute(lay, est, masks, se, **kw)
    monkeypatch.setenv("MEMTUI_KERNELS", "numpy")
    slow = permutations.permute(lay, est, masks, se, **kw)
    for name in masks:
        np.testing.assert_allclose(fast.laws[name], slow.laws[name], rtol=1e-4)
    np.testing.assert_allclose(fast.cells, slow.cells, atol=1e-4 * np.abs(est.att).max())


@pytest.mark.parametrize("checkpoints", [8, 20, 37])
@pytest.mark.parametrize("controls", [False, True])
def test_the_compiled_sums_and_control_grams_are_numpys(controls, checkpoints, monkeypatch):
    # the compiled sums hold 16 columns at a time in registers over blocks of rows, the rest column by column, and
    # gather the permuted controls' rows for their Gram matrices as they read them: each is the numpy code's
    if not permutations.compiled():
        pytest.skip("the compiled loops are not built")
    lay, est = _layout(checkpoints=checkpoints)
    p = permutations.plan(lay, est, controls=controls)
    order = permutations.orders(p, np.arange(1, 6, dtype=np.uint64))
    fast, grams, means = permutations._compiled_sums(p, order)
    monkeypatch.setenv("MEMTUI_KERNELS", "numpy")
    slow = permutations.sums(p, order)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a[:, :, 1:], b[:, :, 1:], rtol=1e-5, atol=1e-5 * np.abs(b).max())
    if not controls:
        assert grams is None and means is None
        return
    grams_np, means_np = permutations._control_grams(p, order)
    np.testing.assert_allclose(grams, grams_np, rtol=1e-6, atol=1e-6 * np.abs(grams_np).max())
    np.testing.assert_allclose(means, means_np, rtol=1e-9, atol=1e-12)
    # and each Gram is the permuted controls' own (rows less their first checkpoint, in double)
    first, last = p.starts[0], p.starts[1]
    z = p.y[order[0, first:last], : p.rebased.shape[1]].astype(float)
    z = z - z[:, 1:2]
    z -= z.mean(axis=0)
    centred = grams_np[0] - (last - first) * np.outer(means_np[0], means_np[0])
    np.testing.assert_allclose(centred, z.T @ z, atol=1e-4 * np.abs(z.T @ z).max())


def test_layouts_of_the_same_instances_in_another_row_order_get_the_same_relabelling():
    y, treatment, steps = _data()
    lay = build_layout(y, treatment, steps, never=NEVER)
    est = did.point_estimates(lay)
    flip = np.arange(len(treatment))[::-1]  # the same instances, listed in reverse
    lay_r = build_layout(y[flip], treatment[flip], steps, never=NEVER)
    est_r = did.point_estimates(lay_r)
    keys = np.arange(len(treatment))
    p = permutations.plan(lay, est, keys, len(keys))
    p_r = permutations.plan(lay_r, est_r, flip, len(keys))  # row i of the flipped data is instance flip[i]
    seeds = np.arange(7, 12, dtype=np.uint64)
    np.testing.assert_array_equal(_new_cohorts(p, seeds, p.keys), _new_cohorts(p_r, seeds, p_r.keys))


def _new_cohorts(p, seeds, keys) -> np.ndarray:
    """Per permutation, the cohort (slot group) each instance gets, indexed by its key."""
    slot_group = np.repeat(np.arange(len(p.starts) - 1), np.diff(p.starts))
    out = np.full((len(seeds), int(keys.max()) + 1), -1)
    for j, order in enumerate(permutations.orders(p, seeds)):
        out[j, keys[order]] = slot_group
    return out


def _null_p_values(lay, est, *, count: int, seed: int, broken: bool, monkeypatch, controls=False) -> dict[str, float]:
    """The post family's and the placebo family's p-values of one labelling, under the uncentred law (the exact
    one: the centred law subtracts estimates, so it is exact only asymptotically)."""
    masks = {"post": ~lay.cell_pre, "pre": lay.cell_pre}
    se = did.floored(est.se, did.se_floor(lay.scale))
    if broken:  # the labels not permuted: every "permutation" is the observed labelling
        monkeypatch.setattr(permutations, "orders", lambda p, seeds: np.tile(np.arange(len(p.keys)), (len(seeds), 1)))
    drawn = permutations.permute(lay, est, masks, se, count=count, seed=seed, floor=did.se_floor(lay.scale),
                                 centred=False, controls=controls)  # fmt: skip
    return {name: float(np.mean(law >= law[0])) for name, law in drawn.laws.items()}


@pytest.mark.parametrize("broken,controls", [(False, False), (True, False), (False, True), (True, True)])
def test_p_values_are_uniform_over_random_labellings_of_fixed_skewed_outcomes(broken, controls, monkeypatch):
    """Exactness (the uncentred law), whatever the noise: fixed outcomes (skewed, persistent: a random walk of centred
    exponential steps), the cohort labels assigned at random again and again (the design's own randomisation); the
    p-value of each labelling is uniform on {1, ..., P + 1} / (P + 1), so P(p <= k / (P + 1)) = k / (P + 1). With the
    controls permuted too (the band), their label is assigned at random with the cohorts' (controls drawn from the
    shuffled order). A band that does not permute the labels (p = 1 always) fails."""
    rng = np.random.default_rng(5)
    cohorts, per, never, t = 5, 6, 20, 7
    steps = np.arange(t) * 1000
    y = rng.normal(0, 1, (cohorts * per + never, 1)) + np.cumsum(rng.exponential(1, (cohorts * per + never, t)) - 1, 1)
    labels = np.repeat(steps[1 : cohorts + 1], per)
    count, reps = 19, 200
    got = {"post": [], "pre": []}
    for r in range(reps):
        treatment = np.concatenate([labels, np.full(never, NEVER)])
        if controls:
            treatment = rng.permutation(treatment)
        else:
            treatment[: len(labels)] = rng.permutation(labels)
        lay = build_layout(y, treatment, steps, never=NEVER)
        for name, p in _null_p_values(lay, did.point_estimates(lay), count=count, seed=r, broken=broken,
                                      monkeypatch=monkeypatch, controls=controls).items():  # fmt: skip
            got[name].append(p)
    exact = True
    for ps in got.values():
        ps = np.asarray(ps)
        for level in (1 / 20, 10 / 20):  # attainable levels k / (P + 1)
            rate = np.mean(ps <= level + 1e-12)
            mc = np.sqrt(level * (1 - level) / reps)
            exact &= abs(rate - level) <= 4 * mc
    assert exact != broken


def test_the_band_refuses_designs_it_cannot_permute():
    from types import SimpleNamespace

    base = {"draws": 99, "control_group": "never_treated", "covariates": (), "cluster": "", "engine": "memtui"}
    assert PERMUTATION.refusal(SimpleNamespace(**base)) is None
    for change, word in (
        ({"control_group": "not_yet_treated"}, "not-yet-treated"),
        ({"covariates": ("x",)}, "covariates"),
        ({"cluster": "batch"}, "cluster"),
        ({"engine": "differences"}, "differences"),
    ):
        why = PERMUTATION.refusal(SimpleNamespace(**{**base, **change}))
        assert why is not None and word in why and "\n" not in why
    assert PERMUTATION.refusal(SimpleNamespace(**{**base, "draws": 0, "control_group": "not_yet_treated"})) is None


def test_a_layout_with_not_yet_treated_controls_is_not_permuted():
    y, treatment, steps = _data()
    lay = build_layout(y, treatment, steps, never=NEVER, control_group="not_yet_treated")
    assert "not-yet-treated" in permutations.unsupported(lay)


def test_without_keys_layouts_of_the_same_treated_instances_get_the_same_relabelling():
    """A suite's layouts carry no source: the treated instances are keyed by rank, so a layout that lost some
    never-trained rows (missing values) relabels its treated instances as the whole panel's does."""
    y, treatment, steps = _data()
    lay = build_layout(y, treatment, steps, never=NEVER)
    last_never = np.flatnonzero(treatment == NEVER)[-3:]
    holes = y.copy()
    holes[last_never, 2] = np.nan
    lay_h = build_layout(holes, treatment, steps, never=NEVER)
    assert lay_h.n_units == lay.n_units - 3
    p, p_h = permutations.plan(lay, did.point_estimates(lay)), permutations.plan(lay_h, did.point_estimates(lay_h))
    seeds = np.arange(3, dtype=np.uint64)
    by_row = _new_cohorts(p, seeds, lay.source_rows[p.treated_rows])
    np.testing.assert_array_equal(by_row, _new_cohorts(p_h, seeds, lay_h.source_rows[p_h.treated_rows]))
    assert (by_row >= 0).sum() == len(seeds) * len(p.keys)


def test_seeds_are_relabelled_by_one_permutation_of_the_instances():
    """Two labellings of the same instances (two seeds' orders): each permutation relabels both by the same pi of the
    instances (an instance takes the cohort its image had, a_s o pi), so each seed keeps its own cohort sizes and
    their joint law is invariant: joint statements across seeds stay exact."""
    y, treatment, steps = _data()
    other = treatment.copy()
    trained = other != NEVER
    other[trained] = np.random.default_rng(0).permutation(other[trained])  # another seed: other cohorts
    keys = np.arange(len(treatment))
    seeds = np.arange(3, dtype=np.uint64)
    maps = []
    for t in (treatment, other):
        lay = build_layout(y, t, steps, never=NEVER)
        p = permutations.plan(lay, did.point_estimates(lay), keys, len(keys))
        key_of = keys[lay.source_rows[p.treated_rows]]
        pi = np.full((len(seeds), len(keys)), -1)
        for j, order in enumerate(permutations.orders(p, seeds)):
            pi[j, key_of[order]] = key_of  # the instance that takes slot p takes the cohort of the one observed there
        maps.append(pi)
    np.testing.assert_array_equal(maps[0], maps[1])
    assert not np.array_equal(maps[0][0][maps[0][0] >= 0], np.flatnonzero(maps[0][0] >= 0))  # not the identity
