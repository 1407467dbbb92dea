"""A model suite compared group by group (estimation.suite_by): each group's suite comparison is the one run on the
group's own panels (point estimates and raw correlations bit for bit, bands and intervals within Monte Carlo error),
every model's difference between groups is ``estimate_by``'s, the models' draws are joint, and the covariate is read
from the panel that has it, with one-line refusals where the panels disagree."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.correlations import correlations
from memtui.estimation.headline import headline
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import estimate_by
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_by import compare_by
from memtui.estimation.suite_load import Suite, load_suite
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER, Panel

POINT = ["instantaneous", "persistent_1", "persistent_5", "residual", "overall", "post_cells"]  # plateau: a band


def _design(seed=0, n_cohorts=5, per=40, n_never=70, t=8):
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 100
    treatment = np.concatenate([np.repeat(steps[1 : n_cohorts + 1], per), np.full(n_never, NEVER)])
    n = len(treatment)
    covariates = {
        "domain": rng.choice(np.array(["code", "web"], dtype=object), n),
        "length": rng.gamma(3, 100, n),
    }
    # what every model shares about an instance: its level and its ups and downs from checkpoint to checkpoint
    base = rng.normal(0, 2, (n, 1)) + np.linspace(0, 3, t) + rng.normal(0, 1, (n, t))
    return steps, treatment, covariates, base


def _models(effects=(0.5, 1.0, 2.0), missing=False) -> Suite:
    """Three models over the same instances; the larger the effect, the more memorisation, and 'code' is memorised
    twice as much as 'web'; memorisation fades after training and is larger for later cohorts, so the profiles vary
    over the cells and correlate. ``missing``: each model misses its values on a few instances of its own."""
    steps, treatment, covariates, base = _design()
    n, t = base.shape
    on = (treatment[:, None] != NEVER) & (steps[None, :] >= treatment[:, None])
    shape = on * np.exp(-(steps[None, :] - treatment[:, None]) / 300) * (1 + treatment[:, None] / 300)
    code = covariates["domain"] == "code"
    panels = []
    for k, effect in enumerate(effects):
        rng = np.random.default_rng(100 + k)
        y = base + rng.normal(0, 0.5, (n, t)) + 2 * shape * (effect * (1 + code))[:, None]
        if missing:
            y[rng.choice(n, 5, replace=False)] = np.nan
        panels.append(Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool),
                            metrics={"loglik": y}, covariates=dict(covariates)))  # fmt: skip
    return Suite(names=["small", "mid", "large"], panels=panels, parameters=[10**6, 10**7, 10**8])


def _alone(panel: Panel, mask: np.ndarray) -> Panel:
    """The group as its own panel, built from the arrays (not through subset_panel)."""
    return Panel(ids=panel.ids[mask], treatment=panel.treatment[mask], steps=panel.steps, done=panel.done,
                 metrics={"loglik": panel.metrics["loglik"][mask]})  # fmt: skip


def _group_suite(suite: Suite, mask: np.ndarray) -> Suite:
    return Suite(names=suite.names, panels=[_alone(p, mask) for p in suite.panels], parameters=suite.parameters)


def _masks(suite: Suite, shared: bool) -> dict[str, np.ndarray]:
    p = suite.panels[0]
    never = p.treatment == NEVER
    out = {}
    for level in ("code", "web"):
        mine = p.covariates["domain"] == level
        out[f"domain={level}"] = (mine & ~never) | never if shared else mine
    return out


@pytest.mark.parametrize("shared", [False, True], ids=["own-controls", "shared-controls"])
@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_each_group_is_the_suite_comparison_of_its_own_panels(shared, band):
    suite = _models()
    settings = Settings(metric="loglik", draws=400, seed=7, band=band)
    res = compare_by(suite, settings, "domain", shared_controls=shared)
    assert res.groups == ["domain=code", "domain=web"] and res.models == suite.names
    for group, mask in _masks(suite, shared).items():
        ref = estimate_suite(_group_suite(suite, mask), settings)
        got = res.suites[group]
        for model in suite.names:
            a, b = got.results[model]["loglik"], ref.results[model]["loglik"]
            for scope in ("cells", "instantaneous", "persistent", "residual"):
                fa, fb = getattr(a, scope), getattr(b, scope)
                assert fa.select("cohort" if "cohort" in fa.columns else "event_time").equals(
                    fb.select("cohort" if "cohort" in fb.columns else "event_time")
                )
                assert np.array_equal(fa["estimate"].to_numpy(), fb["estimate"].to_numpy(), equal_nan=True)
            assert np.array_equal(a.cells["analytic_se"].to_numpy(), b.cells["analytic_se"].to_numpy(), equal_nan=True)
            assert a.overall["estimate"] == b.overall["estimate"]
            # the bands come from the whole suite's multipliers, not the subset's: equal within Monte Carlo error
            ratio = np.nanmedian(a.cells["std_error"].to_numpy() / b.cells["std_error"].to_numpy())
            assert 0.9 < ratio < 1.1
        table = res.headline().filter(pl.col("group") == group)
        assert table.select(POINT).equals(headline(ref, "loglik").select(POINT))
        assert table["treated"].to_list() == [int((mask & (suite.panels[0].treatment != NEVER)).sum())] * 3
        mine, theirs = res.correlations[group], correlations(ref, "loglik")
        assert np.array_equal(mine.pearson, theirs.pearson) and np.array_equal(mine.spearman, theirs.spearman)
        assert mine.n_cells == theirs.n_cells
        # intervals: percentiles of other draws of the same law, as wide and about as placed
        off = ~np.eye(3, dtype=bool)
        width = (theirs.pearson_high - theirs.pearson_low)[off]
        assert np.all(np.abs(mine.pearson_low - theirs.pearson_low)[off] < 0.25 * width)
        assert np.all(np.abs(mine.pearson_high - theirs.pearson_high)[off] < 0.25 * width)
        assert np.all(np.abs(mine.pearson_corrected - theirs.pearson_corrected)[off] < 0.05)


def test_the_differences_are_each_models_estimate_by_and_find_the_bigger_group():
    suite = _models()
    settings = Settings(metric="loglik", draws=300, seed=3, band="classic")
    res = compare_by(suite, settings, "domain")
    frame = res.difference_frame()
    for model, panel in zip(suite.names, suite.panels, strict=True):
        alone = estimate_by(panel, settings, "domain")
        (d,) = res.by_model[model].differences
        (e,) = alone.differences
        assert (d.a, d.b) == (e.a, e.b) == ("domain=code", "domain=web")
        assert d.overall == e.overall  # the same multipliers per instance: the same draws, bit for bit
        assert d.persistent.equals(e.persistent)
        row = frame.filter((pl.col("model") == model) & pl.col("event_time").is_null())
        assert row["estimate"].item() == d.overall["estimate"] and row["p_value"].item() == d.overall["p_value"]
        assert (
            frame.filter((pl.col("model") == model) & pl.col("event_time").is_not_null()).height == d.persistent.height
        )
    # code is memorised twice as much as web, by every model: each difference is positive, the largest significantly
    overall = frame.filter(pl.col("event_time").is_null())
    assert (overall["estimate"] > 0).all()
    assert overall.filter(pl.col("model") == "large")["significant"].item()


def test_the_models_draws_are_joint_even_where_they_miss_values_on_different_instances():
    """The multipliers follow the instance, so two models' draws of a group share them: the draws of their overall
    estimates are correlated as the models' shared instances make them (each model's noise is partly the instance's),
    and the correlations have intervals where the plain suite, whose rows differ, has none."""
    suite = _models(missing=True)
    settings = Settings(metric="loglik", draws=400, seed=1, band="classic")
    res = compare_by(suite, settings, "domain")
    plain = estimate_suite(suite, settings)
    assert not plain.joint["loglik"] and not np.isfinite(correlations(plain, "loglik").pearson_low[0, 1])
    for group in res.groups:
        corr = res.correlations[group]
        assert np.isfinite(corr.pearson_low[0, 1]) and np.isfinite(corr.pearson_corrected[0, 1])
        draws = res.suites[group].draws["loglik"]
        a, b = (draws[m].astype(np.float64).mean(axis=0) for m in ("small", "large"))
        assert np.corrcoef(a, b)[0, 1] > 0.5  # the shared instance effect moves both models' draws together


def test_bins_with_shared_controls_cut_once_for_every_model():
    suite = _models()
    res = compare_by(suite, Settings(metric="loglik", draws=0), "length:tertiles", shared_controls=True)
    assert len(res.groups) == 3
    sizes = {m: res.sizes[m] for m in res.models}
    assert all(s == sizes["small"] for s in sizes.values())
    assert res.difference_frame().height == 0  # no draws, no differences (said in the CLI)


def _write(path, panel: Panel, params: int, covariates: bool):
    attrs = {"model": path.stem, "model_parameters": str(params)}
    return create_panel(path, ids=panel.ids, treatment=panel.treatment, steps=panel.steps,
                        values={"loglik": panel.metrics["loglik"]}, signs={"loglik": 1}, attrs=attrs,
                        covariates=panel.covariates if covariates else None)  # fmt: skip


def test_the_covariate_comes_from_whichever_panel_has_it(tmp_path):
    suite = _models()
    paths = [
        _write(tmp_path / f"{n}.h5", p, params, covariates=(n == "large"))
        for n, p, params in zip(suite.names, suite.panels, suite.parameters, strict=True)
    ]
    loaded = load_suite(paths[::-1])
    assert loaded.names == suite.names  # by parameter count: the one with the covariates is last
    assert [bool(p.covariates) for p in loaded.panels] == [False, False, True]
    settings = Settings(metric="loglik", draws=100, seed=2)
    got = compare_by(loaded, settings, "domain")
    want = compare_by(suite, settings, "domain")
    for group in want.groups:
        assert (
            got.headline()
            .filter(pl.col("group") == group)
            .select(POINT)
            .equals(want.headline().filter(pl.col("group") == group).select(POINT))
        )


def test_one_line_refusals():
    suite = _models()
    settings = Settings(metric="loglik", draws=50)
    other = dict(suite.panels[1].covariates)
    other["domain"] = other["domain"].copy()
    other["domain"][:3] = np.where(other["domain"][:3] == "code", "web", "code")
    disagree = replace(suite, panels=[suite.panels[0], replace(suite.panels[1], covariates=other), suite.panels[2]])
    cases = [
        (disagree, "domain", "the panels disagree on covariate 'domain' (small and mid differ at 3 instances)"),
        (suite, "size", "no covariate 'size' to group by"),
        (suite, "domain>=x", "is categorical; use == or !="),
        (replace(suite, names=suite.names[:1], panels=suite.panels[:1]), "domain", "needs several models' panels"),
    ]
    for case, spec, message in cases:
        with pytest.raises(MemtuiError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
            compare_by(case, settings, spec)
        assert "\n" not in str(info.value)
    with pytest.raises(MemtuiError, match="covariates are estimated one model at a time"):
        compare_by(suite, replace(settings, covariates=("length",), band="classic"), "domain")
