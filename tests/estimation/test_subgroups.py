"""Subgroup profiles from one set of draws (estimation.subgroups): each group's point estimates are a stand-alone
estimate's on the subset, bit for bit; the joint band is wider than each group's own; shared controls' draws are
shared (the difference's band is narrower than the naive independent sum); the dose-response trend finds a dose
effect and bad specs are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.estimate import estimate, estimate_parts
from memtui.estimation.group_tests import difference
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import estimate_by, group_labels
from memtui.panel.model import NEVER, Panel

DRAWS = 300


def _panel(seed=0, n_cohorts=5, per=40, n_never=60, t=8, dose_effect=0.0, effect=1.0) -> Panel:
    """Y = a_i + trend_c + (effect + dose_effect * dose_i) * 1{c >= g} + noise; covariates domain, length, dose."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 100
    treatment = np.concatenate([np.repeat(steps[1 : n_cohorts + 1], per), np.full(n_never, NEVER)])
    n = len(treatment)
    dose = np.where(treatment == NEVER, 0.0, rng.choice([1.0, 2.0, 4.0, 8.0], n))
    on = (treatment[:, None] != NEVER) & (steps[None, :] >= treatment[:, None])
    y = rng.normal(0, 2, (n, 1)) + np.linspace(0, 3, t) + rng.normal(0, 1, (n, t))
    y += on * (effect + dose_effect * dose)[:, None]
    covariates = {
        "domain": rng.choice(np.array(["code", "web", "books"], dtype=object), n),
        "length": rng.gamma(3, 100, n),
        "dose": dose,
    }
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool), metrics={"loglik": y},
                 covariates=covariates)  # fmt: skip


def _alone(panel: Panel, mask: np.ndarray) -> Panel:
    """The subset as its own panel, built from the arrays directly (not through subset_panel)."""
    return Panel(ids=panel.ids[mask], treatment=panel.treatment[mask], steps=panel.steps, done=panel.done,
                 metrics={"loglik": panel.metrics["loglik"][mask]})  # fmt: skip


@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_each_group_is_a_standalone_estimate_and_the_joint_band_is_wider(band):
    panel = _panel()
    settings = Settings(draws=DRAWS, band=band)
    by = estimate_by(panel, settings, "domain")
    assert by.names == ["domain=books", "domain=code", "domain=web"]
    levels = panel.covariates["domain"]
    for name in by.names:
        alone = estimate(_alone(panel, levels == name.split("=")[1]), settings)
        got = by.groups[name]
        for scope in ("cells", "persistent"):
            a, b = getattr(got, scope), getattr(alone, scope)
            assert np.array_equal(a["estimate"].to_numpy(), b["estimate"].to_numpy())
            assert np.array_equal(a["analytic_se"].to_numpy(), b["analytic_se"].to_numpy(), equal_nan=True)
        assert got.overall.estimate == alone.overall.estimate
        # the joint family holds every group's cells: its critical value is larger than the group's own
        assert by.joint_crit["profile"] > got.crit
        own = got.persistent.filter(~got.persistent["pre_treatment"])["crit"][0]
        assert by.joint_crit["persistent"] > own
        joint = by.joint(name)
        post = ~joint["pre_treatment"].to_numpy()
        width = (joint["band_high"] - joint["band_low"]).to_numpy()[post]
        own_width = (got.cells["band_high"] - got.cells["band_low"]).to_numpy()[post]
        ok = np.isfinite(own_width)
        assert (width[ok] > own_width[ok]).all()


def test_shared_controls_cancel_in_the_difference():
    # few controls shared by two groups: the controls' part of each group's variance is large, and cancels
    panel = _panel(seed=1, per=60, n_never=25)
    settings = Settings(draws=600, band="classic")
    by = estimate_by(panel, settings, "length>=300", shared_controls=True)
    a, b = by.names
    assert by.groups[a].cells["n_control"].max() == 25 == by.groups[b].cells["n_control"].max()
    diff = by.differences[0]
    assert (diff.a, diff.b) == (a, b)
    ca, cb = by.groups[a].cells, by.groups[b].cells
    post = ~diff.cells["pre_treatment"].to_numpy()
    naive = np.sqrt(ca["std_error"].to_numpy() ** 2 + cb["std_error"].to_numpy() ** 2)
    ratio = diff.cells["std_error"].to_numpy() / naive
    assert np.median(ratio[post]) < 0.8
    # the same groups bootstrapped with unrelated multipliers: no cancellation, the naive sum is right
    rows_a = np.flatnonzero((panel.covariates["length"] >= 300) | panel.never_treated)
    rows_b = np.flatnonzero((panel.covariates["length"] < 300) | panel.never_treated)
    from memtui.estimation.subgroups import subset_panel

    _, cells_a = estimate_parts(subset_panel(panel, rows_a), settings)
    _, cells_b = estimate_parts(subset_panel(panel, rows_b), Settings(draws=600, band="classic", seed=1))
    independent = difference(a, b, cells_a, cells_b, settings.alpha)
    ratio_ind = independent.cells["std_error"].to_numpy() / naive
    assert 0.85 < np.median(ratio_ind[post]) < 1.15
    assert diff.cells["estimate"].to_numpy() == pytest.approx(independent.cells["estimate"].to_numpy(), abs=1e-12)


def test_difference_counts():
    panel = _panel(seed=2, dose_effect=1.0)
    with pytest.raises(MemtuiError, match="group dose>=4: no never-treated instance"):  # controls have dose 0
        estimate_by(panel, Settings(draws=0), "dose>=4")
    by = estimate_by(panel, Settings(draws=DRAWS), "dose>=4", shared_controls=True)
    diff = by.differences[0]
    above, below, n = diff.count()
    assert n == diff.persistent.filter(diff.persistent["event_time"] > 0).height > 0
    assert above >= n - 1 and below == 0  # doses 4 and 8 against 1 and 2: about 4.5 more memorisation
    assert "exceeds that of not dose>=4 at" in diff.sentence()
    assert diff.overall["estimate"] > 0 and diff.overall["p_value"] < 0.01


def test_dose_response_trend():
    panel = _panel(seed=3, dose_effect=0.5, per=60)
    by = estimate_by(panel, Settings(draws=DRAWS), "dose", shared_controls=True)
    assert by.names == ["dose=1", "dose=2", "dose=4", "dose=8"]
    tr = by.trend
    assert tr.table["centre"].to_list() == [1.0, 2.0, 4.0, 8.0]
    assert tr.slope == pytest.approx(0.5, abs=3 * tr.std_error) and tr.p_value < 0.01
    assert tr.increasing == 3
    flat = estimate_by(_panel(seed=3, dose_effect=0.0, per=60), Settings(draws=DRAWS), "dose", shared_controls=True)
    assert flat.trend.ci_low < 0 < flat.trend.ci_high and flat.trend.p_value > 0.05


def test_group_labels():
    panel = _panel()
    labels, names = group_labels(panel, "length:quartiles")
    assert len(names) == 4 and np.bincount(labels).min() >= len(labels) // 4 - 1
    labels, names = group_labels(panel, "length:bins=200,400")
    assert names == ["length<200", "length in [200, 400)", "length>=400"]
    length = panel.covariates["length"]
    assert np.array_equal(labels, (length >= 200).astype(int) + (length >= 400))
    panel.covariates["length"] = np.where(np.arange(len(length)) % 10 == 0, np.nan, length)
    labels, names = group_labels(panel, "length>=300")
    assert names == ["length>=300", "not length>=300"]
    assert (labels[::10] == -1).all() and set(np.unique(labels)) == {-1, 0, 1}
    labels, names = group_labels(panel, "domain==web")
    assert np.array_equal(labels == 0, panel.covariates["domain"] == "web")


@pytest.mark.parametrize(
    "spec",
    ["nope", "length >> 3", "domain>=web", "domain:quartiles", "length", "length:7x", "length:bins=a,b",
     "length>=-1e12", "dose>=abc", ""],
)  # fmt: skip
def test_bad_specs_are_refused_in_one_line(spec):
    with pytest.raises(MemtuiError) as err:
        estimate_by(_panel(), Settings(draws=0), spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_one_pass_gives_each_group_the_draws_of_its_own_keyed_estimate(band):
    """estimate_by bootstraps every group in one pass; each group's draws, laws and critical values are those of
    estimate_parts on its sample with its subset of the panel's keyed multipliers (how it was made group by group),
    up to float32 rounding (here: bit for bit, the same products)."""
    from memtui.engine.multipliers import JointMultipliers
    from memtui.estimation.subgroups import _joint_crits, subset_panel

    panel = _panel(seed=4)
    settings = Settings(draws=DRAWS, band=band)
    by = estimate_by(panel, settings, "domain", shared_controls=True)
    source = JointMultipliers.per_instance(panel.n_instances)
    levels = panel.covariates["domain"]
    cells = {}
    for name in by.names:
        rows = np.flatnonzero((levels == name.split("=")[1]) | panel.never_treated)
        _, cells[name] = estimate_parts(subset_panel(panel, rows), settings, source=source.subset(rows))
        got = by._cells[name]
        np.testing.assert_allclose(got.draws, cells[name].draws, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got.se, cells[name].se, rtol=1e-12)
        for mask in got.tmax:
            np.testing.assert_allclose(got.tmax[mask], cells[name].tmax[mask], rtol=1e-6)
        np.testing.assert_allclose(got.aggregates[3], cells[name].aggregates[3], rtol=1e-6, atol=1e-7)
    for scope, crit in _joint_crits(cells, settings.alpha).items():
        assert by.joint_crit[scope] == pytest.approx(crit, rel=1e-6)


def test_a_difference_with_a_group_without_variance_has_no_band():
    """One treated and one control instance: the group's draws are all 0 (se n/a), so A - B's draws would be B's
    alone: no se, band, interval or p-value, never significant, and the sentence gives no verdict."""
    panel = _panel(per=20, n_never=40)
    grp = np.array(["big"] * len(panel.ids), dtype=object)
    grp[np.flatnonzero(panel.treatment != NEVER)[0]] = "tiny"
    grp[np.flatnonzero(panel.treatment == NEVER)[0]] = "tiny"
    panel.covariates["grp"] = grp
    for band in ("calibrated", "classic"):
        by = estimate_by(panel, Settings(draws=DRAWS, band=band), "grp")
        (diff,) = by.differences
        assert np.isnan([diff.overall[k] for k in ("std_error", "ci_low", "ci_high", "p_value")]).all()
        assert np.isfinite(diff.overall["estimate"])
        for frame in (diff.persistent, diff.cells):
            assert frame["std_error"].is_nan().all() and not frame["significant"].any()
        assert diff.count() == (0, 0, diff.unbanded()) and diff.no_variance == ("grp=tiny",)
        assert "no verdict" in diff.sentence() and "exceeds" not in diff.sentence()


def test_levels_alike_in_what_is_shown_get_names_that_tell_them_apart():
    """Two categories alike in their first 40 characters, or two numbers alike in 6 digits, were printed as two
    groups of one name (read as one); each now has its own name."""
    panel = _panel()
    long = "a" * 45
    n = len(panel.ids)
    panel.covariates["source"] = np.array([long + ("x" if i % 2 else "y") for i in range(n)], dtype=object)
    panel.covariates["level"] = np.where(np.arange(n) % 2 == 0, 1.0, 1.0000001)
    _, names = group_labels(panel, "source")
    assert len(set(names)) == 2 and all(name.startswith("source=" + "a" * 30) for name in names)
    _, names = group_labels(panel, "level")
    assert names == ["level=1.0", "level=1.0000001"]
