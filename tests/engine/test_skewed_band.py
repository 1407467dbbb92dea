"""engine.skewed: the Mammen bootstrap-t's draws, its per-draw variances against a brute-force recomputation, and why
it is not a band (its studentised tails are too light: docs/calibration-study.md, "Skewed residuals")."""

import numpy as np
import pytest

from memtui.engine import bands, did, skewed
from memtui.engine.layout import build_layout
from memtui.panel.model import NEVER


def _panel(seed: int = 0, per: int = 12, never: int = 40, t: int = 7, control_group: str = "never_treated"):
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 1000
    treatment = np.concatenate([np.repeat(steps[1:4], per), np.full(never, NEVER)])
    y = rng.normal(0, 1, (len(treatment), 1)) + np.cumsum(rng.exponential(1, (len(treatment), t)) - 1, axis=1)
    lay = build_layout(y, treatment, steps, never=NEVER, control_group=control_group)
    est = did.point_estimates(lay)
    return lay, est, bands.cell_variances(lay, est)


def _brute_force(lay, est, var, draws: int, seed: int, variance: str) -> tuple[np.ndarray, np.ndarray]:
    """max t* and max -t* over all usable cells, each cell's draw and variance formed instance by instance."""
    rng = np.random.default_rng(seed)
    v = np.concatenate(
        [did.multipliers(rng, (lay.n_units, min(128, draws - s)), "mammen", np.float32) for s in range(0, draws, 128)],
        axis=1,
    ).astype(float)
    usable = np.flatnonzero(np.isfinite(var.se))
    t_star = np.empty((len(usable), draws))
    for row, c in enumerate(usable):
        g, t, b = lay.cell_group[c], lay.cell_t[c], lay.cell_b[c]
        z = (lay.y[lay.rows(g), t] - lay.y[lay.rows(g), b]) - est.dm[c]
        x_t = v[lay.rows(g)] * z[:, None]  # the bootstrap world's influence terms of the cohort
        ctrl = [h for h in range(lay.cell_prefix[c]) if not (lay.cell_own[c] and h == g)]
        e = np.concatenate([lay.y[lay.rows(h), t] - lay.y[lay.rows(h), b] for h in ctrl]) - est.dmu[c]
        x_c = np.concatenate([v[lay.rows(h)] for h in ctrl]) * e[:, None]
        n_t, n_c = len(z), len(e)
        mean_t, mean_c = x_t.mean(axis=0), x_c.mean(axis=0)
        var_t = ((x_t - mean_t) ** 2).sum(axis=0) / (n_t * (n_t - 1))
        var_c = ((x_c - mean_c) ** 2).sum(axis=0) / (n_c * (n_c - 1))
        if variance == "recentred":
            var_t = var.var_t[c] - mean_t**2 / (n_t - 1)
        if variance != "exact":
            var_c = var.var_c[c] - mean_c**2 / (n_c - 1)
        t_star[row] = (mean_t - mean_c) / np.sqrt(np.maximum(var_t + var_c, 0))
    return t_star.max(axis=0), (-t_star).max(axis=0)


@pytest.mark.parametrize("variance", skewed.VARIANCES)
def test_laws_match_a_brute_force_recomputation(variance):
    lay, est, var = _panel()
    boot, laws = skewed.skewed_bootstrap(lay, est, var, [np.ones(len(est.att), bool)], draws=300, seed=7,
                                         variance=variance)  # fmt: skip
    top, bottom = _brute_force(lay, est, var, 300, 7, variance)
    # float32 draws against float64 sums: agreement to a few parts in a million of the statistic
    np.testing.assert_allclose(laws.top[0], top, rtol=2e-4)
    np.testing.assert_allclose(laws.bottom[0], bottom, rtol=2e-4)
    assert not np.allclose(laws.top[0], laws.bottom[0], rtol=1e-2)  # skewed draws: the two tails differ


def test_draws_are_the_mammen_bootstrap_and_not_yet_treated_controls_work():
    lay, est, var = _panel(seed=1, control_group="not_yet_treated")
    assert lay.cell_prefix.max() > 1  # cells whose control set spans several groups
    boot, laws = skewed.skewed_bootstrap(lay, est, var, [~lay.cell_pre, lay.cell_pre], draws=200, seed=3,
                                         variance="exact")  # fmt: skip
    plain = did.bootstrap(lay, est, draws=200, seed=3, multiplier="mammen")
    np.testing.assert_array_equal(boot.cells, plain.cells)
    top, bottom = _brute_force(lay, est, var, 200, 3, "exact")
    both = np.maximum(np.maximum(laws.top[0], laws.top[1]), np.maximum(laws.bottom[0], laws.bottom[1]))
    np.testing.assert_allclose(both, np.maximum(top, bottom), rtol=2e-4)


def test_critical_values_equal_and_symmetric():
    laws = skewed.SkewLaws(top=[np.arange(1000.0)], bottom=[np.arange(1000.0) * 2])
    assert skewed.critical_values(laws, 0, 0.05) == (974.0, 1948.0)
    assert skewed.critical_values(laws, 0, 0.05, "symmetric") == (1898.0, 1898.0)


def test_exact_mammen_studentisation_has_lighter_tails_than_rademacher():
    """The reason the skew-aware band is not shipped: on normal noise its sup-t critical value lies well below the
    calibrated (Rademacher) band's, which is near the exact one; at 30 per cohort it flags 13 % of null panels."""
    rng = np.random.default_rng(5)
    steps = np.arange(11) * 1000
    treatment = np.concatenate([np.repeat(steps[1:6], 20), np.full(100, NEVER)])
    lay = build_layout(rng.normal(size=(len(treatment), 11)), treatment, steps, never=NEVER)
    est = did.point_estimates(lay)
    var = bands.cell_variances(lay, est)
    post = ~lay.cell_pre
    laws = skewed.skewed_bootstrap(lay, est, var, [post], draws=1000, seed=1, variance="exact")[1]
    cal = bands.calibrated_bootstrap(lay, est, {"post": post}, draws=1000, seed=1, floor=0)
    mammen = skewed.critical_values(laws, 0, 0.05, "symmetric")[0]
    assert mammen < 0.93 * did.critical_value(cal.tmax["post"], 0.05)


def test_rejects_unknown_variance_and_non_hc():
    lay, est, var = _panel()
    with pytest.raises(ValueError, match="variance"):
        skewed.skewed_bootstrap(lay, est, var, [], draws=10, seed=0, variance="nope")
    plain = bands.cell_variances(lay, est, hc=False)
    with pytest.raises(ValueError, match="HC1"):
        skewed.skewed_bootstrap(lay, est, plain, [], draws=10, seed=0)
