"""Doubly robust DiD with covariates (engine/drdid.py) against `differences` (an independent port of R did / DRDID),
R did's published mpdta table with ``xformla = ~lpop``, memtui's own no-covariate engine, and a simulation with a
known truth where the covariates confound the training step."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine import did, drdid, summaries
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import aggregate_members, estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.importing import ImportSpec, import_table, read_table
from memtui.panel.model import NEVER, Panel

DATA = Path(__file__).parents[1] / "data"
STEPS = np.arange(1, 7) * 100


def confounded_panel(seed=0, n=900, tau=0.5, slope=0.3, categorical=True) -> Panel:
    """Instances whose training step depends on covariates that also drive the metric's trend: parallel trends hold
    only given x1, x2 and the category. The true memorisation is ``tau`` (1 + 0.1 (c - g)) for c >= g, 0 before."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    kind = np.array(["web", "code", "books"])[rng.integers(0, 3, size=n)]
    trained = rng.random(n) < 1 / (1 + np.exp(-(0.8 * x1 + 0.4 * x2 - 0.3 + 0.4 * (kind == "code"))))
    treatment = np.where(trained, rng.choice(STEPS[1:4], size=n), NEVER)
    t = np.arange(len(STEPS))
    trend = slope * x1[:, None] * t + (0.2 * (kind == "books") * categorical)[:, None] * t
    after = (STEPS[None, :] >= treatment[:, None]) & (treatment != NEVER)[:, None]
    effect = tau * (1 + 0.1 * (STEPS[None, :] - treatment[:, None]) / 100) * after
    y = rng.normal(size=(n, 1)) + trend + effect + 0.5 * rng.normal(size=(n, len(STEPS)))
    covariates = {"x1": x1, "x2": x2}
    if categorical:
        covariates["kind"] = kind.astype(object)
    return Panel(ids=np.arange(n), treatment=treatment, steps=STEPS, done=np.ones(len(STEPS), bool),
                 metrics={"loglik": y}, covariates=covariates)  # fmt: skip


def long_frame(panel: Panel, metric: str = "loglik") -> pd.DataFrame:
    y = panel.metrics[metric]
    n, t = y.shape
    cohort = np.where(panel.treatment == NEVER, np.nan, panel.treatment).astype(float)
    columns = {"unit": np.repeat(np.arange(n), t), "time": np.tile(panel.steps, n), "y": y.ravel()}
    columns["cohort"] = np.repeat(cohort, t)
    for name, values in panel.covariates.items():
        columns[name] = np.repeat(values, t)
    return pd.DataFrame(columns).set_index(["unit", "time"])


def differences_dr(frame, formula, control_group="never_treated", base_period="varying", aggregate=None):
    from differences import ATTgt

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        att = ATTgt(data=frame, cohort_column="cohort", base_period=base_period)
        att.fit(formula, est_method="dr", control_group=control_group, progress_bar=False)
        if aggregate:
            att.aggregate(aggregate)
        res = att.results(aggregate) if aggregate else att.results()
    res.columns = [c[-1] for c in res.columns]
    if aggregate:
        return res.reset_index()
    res = res.reset_index()
    res = res[res["base_period"] != res["time"]]
    return res.astype({"cohort": int, "time": int}).set_index(["cohort", "time"]).sort_index()


@pytest.fixture
def converged_differences(monkeypatch):
    """differences' logit (statsmodels' IRLS) stops at a deviance change of 1e-8 and takes its covariance from the
    weights of the iteration before: ~1e-5 off the Hessian at the fit, so its standard errors carry ~1e-7 relative
    error. Iterated to full convergence it is the same estimator evaluated exactly (R DRDID now recomputes the Hessian
    at the final fit, as memtui does), and the comparison can be made at 1e-9."""
    import statsmodels.api as sm
    from differences.models.did import did_cal

    def pscore_mle(treated, exog, weights, _freq_weights_flag=False):
        fit = sm.GLM(treated, exog, family=sm.families.Binomial(), var_weights=weights).fit(tol=1e-15, maxiter=200)
        return np.where(fit.predict() > 1 - 1e-16, 1, fit.predict()), fit.cov_params()

    monkeypatch.setattr(did_cal, "pscore_mle", pscore_mle)


def ours(panel, covariates, **kw):
    res = estimate(panel, Settings(band="classic", draws=0, covariates=covariates, **kw))
    frame = res.cells.to_pandas().rename(columns={"checkpoint": "time"}).set_index(["cohort", "time"]).sort_index()
    return res, frame


@pytest.mark.parametrize("base_period", ["varying", "universal"])
@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_cells_equal_differences_dr(converged_differences, control_group, base_period):
    panel = confounded_panel()
    theirs = differences_dr(long_frame(panel), "y ~ x1 + x2 + kind", control_group, base_period)
    _, mine = ours(panel, ("x1", "x2", "kind"), control_group=control_group, base_period=base_period, family="all")
    assert list(mine.index) == list(theirs.index)
    np.testing.assert_allclose(mine["estimate"], theirs["ATT"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(mine["std_error"], theirs["std_error"], rtol=1e-9)
    # and the covariates matter here: without them the estimates differ by far more than their standard errors
    _, plain = ours(panel, ())
    assert np.abs(plain["estimate"] - mine["estimate"]).max() > 3 * mine["std_error"].median()


def test_cells_equal_stock_differences_to_its_convergence():
    """Unpatched differences: point estimates to 1e-9; standard errors to the 1e-6 its logit's stopping rule allows."""
    panel = confounded_panel(seed=1, categorical=False)
    theirs = differences_dr(long_frame(panel), "y ~ x1 + x2")
    _, mine = ours(panel, ("x1", "x2"))
    np.testing.assert_allclose(mine["estimate"], theirs["ATT"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(mine["std_error"], theirs["std_error"], rtol=1e-6)


def test_aggregates_equal_differences_dr(converged_differences):
    """Persistent memorisation (event-time aggregation) and the overall average with influence-function standard
    errors (weight estimation included), as differences' aggte-style aggregations."""
    panel = confounded_panel(seed=2)
    frame = long_frame(panel)
    event = differences_dr(frame, "y ~ x1 + x2 + kind", aggregate="event").set_index("relative_period")
    simple = differences_dr(frame, "y ~ x1 + x2 + kind", aggregate="simple")
    res, _ = ours(panel, ("x1", "x2", "kind"))
    pers = res.persistent.to_pandas().set_index("event_time")
    assert list(pers.index) == list(event.index)
    np.testing.assert_allclose(pers["estimate"], event["ATT"], atol=1e-9)
    np.testing.assert_allclose(pers["std_error"], event["std_error"], rtol=1e-9)
    assert res.overall["estimate"] == pytest.approx(float(simple["ATT"].iloc[0]), abs=1e-9)
    assert res.overall["std_error"] == pytest.approx(float(simple["std_error"].iloc[0]), rel=1e-9)


@pytest.fixture(scope="module")
def mpdta(tmp_path_factory):
    path = tmp_path_factory.mktemp("mpdta") / "mpdta.h5"
    spec = ImportSpec(unit="countyreal", time="year", treatment="first.treat", metrics=("lemp",), never_values=(0,))
    table = read_table(DATA / "mpdta.csv")
    import_table(table, path, spec)
    panel = read_panel(path)
    lpop = pd.read_csv(DATA / "mpdta.csv").groupby("countyreal")["lpop"].first()
    panel.covariates = {"lpop": lpop.loc[panel.ids.astype(int)].to_numpy()}  # time-invariant in mpdta
    return panel


# R did's documentation (docs/reference/att_gt.md of bcallaway11/did, the examples of ?att_gt):
# att_gt(yname="lemp", tname="year", idname="countyreal", gname="first.treat", xformla=~lpop, data=mpdta) and the
# same with control_group="notyettreated"; est_method "dr" (the default). ATT(g,t) as printed (4 decimals).
R_DID_MPDTA_LPOP = {
    "never_treated": {
        (2004, 2004): -0.0145, (2004, 2005): -0.0764, (2004, 2006): -0.1404, (2004, 2007): -0.1069,
        (2006, 2004): -0.0005, (2006, 2005): -0.0062, (2006, 2006): 0.0010, (2006, 2007): -0.0413,
        (2007, 2004): 0.0267, (2007, 2005): -0.0046, (2007, 2006): -0.0284, (2007, 2007): -0.0288,
    },
    "not_yet_treated": {
        (2004, 2004): -0.0212, (2004, 2005): -0.0816, (2004, 2006): -0.1382, (2004, 2007): -0.1069,
        (2006, 2004): -0.0075, (2006, 2005): -0.0046, (2006, 2006): 0.0087, (2006, 2007): -0.0413,
        (2007, 2004): 0.0269, (2007, 2005): -0.0042, (2007, 2006): -0.0284, (2007, 2007): -0.0288,
    },
}  # fmt: skip


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_mpdta_with_lpop_matches_r_did_published_estimates(mpdta, control_group, converged_differences):
    _, mine = ours(mpdta, ("lpop",), metric="lemp", control_group=control_group)
    reference = R_DID_MPDTA_LPOP[control_group]
    assert len(mine) == len(reference)
    for key, value in reference.items():
        assert mine.loc[key, "estimate"] == pytest.approx(value, abs=5e-5 + 1e-12)
    theirs = differences_dr(long_frame(mpdta, "lemp"), "y ~ lpop", control_group)
    np.testing.assert_allclose(mine["estimate"], theirs["ATT"], atol=1e-9)
    np.testing.assert_allclose(mine["std_error"], theirs["std_error"], rtol=1e-9)


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_intercept_only_is_the_difference_of_means_engine(control_group):
    panel = confounded_panel(seed=3)
    lay = build_layout(panel.metrics["loglik"], panel.treatment, STEPS, never=NEVER, control_group=control_group)
    dr = drdid.point_estimates(lay, np.ones((lay.n_units, 1)))
    ref = did.point_estimates(lay)
    np.testing.assert_allclose(dr.att, ref.att, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dr.se, ref.se, rtol=1e-10)
    _, _, every = aggregate_members(lay)
    np.testing.assert_allclose(drdid.analytic_se(lay, dr, every), summaries.analytic_se(lay, ref, every), rtol=1e-10)
    # the bootstrap draws the same multipliers: the same draws up to float32 rounding of different sums
    a = drdid.bootstrap(lay, dr, draws=64, seed=4)
    b = did.bootstrap(lay, ref, draws=64, seed=4)
    np.testing.assert_allclose(a.cells, b.cells, rtol=0, atol=1e-5 * np.abs(b.cells).max())
    np.testing.assert_array_equal(a.group_w, b.group_w)


def test_bootstrap_se_agrees_with_the_analytic_one():
    panel = confounded_panel(seed=5, n=1500)
    res = estimate(panel, Settings(band="classic", draws=2000, covariates=("x1", "x2", "kind"), seed=1))
    ratio = (res.cells["std_error"] / res.cells["analytic_se"]).to_numpy()
    # Monte-Carlo error of an IQR-based se at B = 2000 is ~3 %
    assert abs(np.median(ratio) - 1) < 0.04
    assert ((ratio > 0.85) & (ratio < 1.15)).all()
    o = res.overall
    assert o.std_error / o.analytic_se == pytest.approx(1, abs=0.12)


def test_covariates_remove_the_confounding_bias():
    """Known truth, confounded training step: without the covariates every post-treatment cell is biased by the
    covariate-driven trend (many standard errors), with them the estimates are centred on the truth."""
    with_x, without = [], []
    for seed in range(8):
        panel = confounded_panel(seed=10 + seed, n=1200)
        for covs, sink in ((("x1", "x2", "kind"), with_x), ((), without)):
            res = estimate(panel, Settings(band="classic", draws=0, covariates=covs))
            cells = res.cells.to_pandas()
            post = cells[~cells["pre_treatment"]]
            truth = 0.5 * (1 + 0.1 * (post["checkpoint"] - post["cohort"]) / 100)
            sink.append(((post["estimate"] - truth) / post["std_error"]).to_numpy())
            placebo = cells[cells["pre_treatment"]]
            sink.append((placebo["estimate"] / placebo["std_error"]).to_numpy())
    z_with, z_without = np.concatenate(with_x), np.concatenate(without)
    assert abs(z_with.mean()) < 0.3 and 0.7 < z_with.std() < 1.3  # unbiased, calibrated standard errors
    assert z_without.mean() > 3  # x1 raises the trend of the trained (and earlier-trained) instances


def test_unknown_covariates_refused_and_missing_ones_dropped_with_a_note():
    panel = confounded_panel(seed=6)
    with pytest.raises(MemtuiError, match="no covariate length"):
        estimate(panel, Settings(band="classic", draws=0, covariates=("length",)))
    with pytest.raises(MemtuiError, match="--band classic"):
        Settings(covariates=("x1",))
    with pytest.raises(MemtuiError, match="did estimator"):
        Settings(band="classic", covariates=("x1",), estimator="difference")
    x1 = panel.covariates["x1"].copy()
    x1[:7] = np.nan
    kind = panel.covariates["kind"].copy()
    kind[7:10] = None
    gappy = Panel(**{**panel.__dict__, "covariates": {**panel.covariates, "x1": x1, "kind": kind}})
    res = estimate(gappy, Settings(band="classic", draws=0, covariates=("x1", "kind")))
    assert any("left out 10 instances with an unknown covariate" in n for n in res.notes)
    kept = np.ones(len(x1), bool)
    kept[:10] = False
    subset = Panel(**{**panel.__dict__, "treatment": panel.treatment[kept], "ids": panel.ids[kept],
                      "metrics": {"loglik": panel.metrics["loglik"][kept]},
                      "covariates": {k: v[kept] for k, v in panel.covariates.items()}})  # fmt: skip
    alone = estimate(subset, Settings(band="classic", draws=0, covariates=("x1", "kind")))
    np.testing.assert_array_equal(res.cells["estimate"].to_numpy(), alone.cells["estimate"].to_numpy())


def test_separated_cohort_and_collinear_covariates_refused():
    panel = confounded_panel(seed=7, categorical=False)
    # a covariate that separates one cohort from the controls (above 5 exactly for its instances)
    perfect = np.random.default_rng(0).random(len(panel.treatment)) + 5 * (panel.treatment == STEPS[1])
    separated = Panel(**{**panel.__dict__, "covariates": {**panel.covariates, "marker": perfect}})
    with pytest.raises(MemtuiError, match="no overlap"):
        estimate(separated, Settings(band="classic", draws=0, covariates=("x1", "marker")))
    twice = Panel(**{**panel.__dict__, "covariates": {**panel.covariates, "x1b": 2 * panel.covariates["x1"] + 1}})
    with pytest.raises(MemtuiError, match="collinear"):
        estimate(twice, Settings(band="classic", draws=0, covariates=("x1", "x1b")))


def test_categorical_covariates_are_r_dummies():
    design = drdid.design_matrix({"kind": np.array(["b", "a", "c", "a"], dtype=object), "z": np.arange(4.0)},
                                 ["kind", "z"])  # fmt: skip
    assert design.names == ["(Intercept)", "kindb", "kindc", "z"]
    np.testing.assert_array_equal(design.matrix[:, 1:3], [[1, 0], [0, 0], [0, 1], [0, 0]])


def test_cache_key_follows_the_covariates():
    """The settings key reads back from JSON as itself (the cache compares them), and the key changes with the
    covariates' values, so a cached estimate never outlives the covariates it was made with."""
    import json

    from memtui.estimation.cache import cache_key

    panel = confounded_panel(seed=8)
    settings = Settings(band="classic", covariates=["x1", "kind"])
    assert settings.covariates == ("x1", "kind")
    assert json.loads(json.dumps(settings.key())) == settings.key()
    kind = panel.covariates["kind"].copy()
    kind[0] = "other"
    changed = Panel(**{**panel.__dict__, "covariates": {**panel.covariates, "kind": kind}})
    assert cache_key(panel, settings) != cache_key(changed, settings)
    assert cache_key(panel, settings) != cache_key(panel, Settings(band="classic"))
    assert cache_key(panel, settings) == cache_key(Panel(**panel.__dict__), settings)
