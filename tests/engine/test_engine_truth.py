"""The engine on simulated panels with a known true memorisation profile: recovery, band coverage, pre-trend size,
and the hand-computable pieces (one cell by hand, the difference estimator, missing values, windows)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine.did import multipliers
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate


def panel_of(sim: Simulation) -> Panel:
    d = simulate(sim)
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics=d["values"], signs=d["signs"], truth=d["truth"])  # fmt: skip


def post_truth(panel: Panel, res, metric="loglik"):
    mask = panel.steps[None, :] >= panel.truth["cohorts"][:, None]
    return np.where(mask, panel.truth[metric], np.nan)


def test_recovers_the_true_profile_on_a_large_panel():
    panel = panel_of(Simulation(n_cohorts=10, per_cohort=200, n_never=1000, n_checkpoints=12, seed=1))
    res = estimate(panel, Settings(draws=500))
    truth = post_truth(panel, res)
    est, se = res.matrix(), res.matrix("std_error")
    post = np.isfinite(truth)
    z = (est[post] - truth[post]) / se[post]
    assert np.abs(z).max() < 4.5
    assert np.corrcoef(est[post], truth[post])[0, 1] > 0.95
    # instantaneous memorisation is detected for every cohort; the peak is on the diagonal
    assert res.instantaneous["significant"].all()
    np.testing.assert_allclose(res.instantaneous["estimate"], np.diag(truth[:, 1:]), atol=4.5 * se[post].max())


@pytest.mark.parametrize("metric", ["accuracy", "rank"])
def test_every_metric_reports_positive_memorisation(metric):
    panel = panel_of(Simulation(n_cohorts=4, per_cohort=100, n_never=300, n_checkpoints=6, seed=2))
    res = estimate(panel, Settings(metric=metric, draws=200))
    assert (res.instantaneous["estimate"] > 0).all()
    assert res.overall["estimate"] > 0 and res.overall["significant"]


@pytest.mark.simulation
def test_simultaneous_band_covers_the_true_profile_about_95_percent():
    # cohorts of 40: with a dozen instances the influence-function variance (divided by n) runs low, bands under-cover
    sim = Simulation(n_cohorts=4, per_cohort=40, n_never=80, n_checkpoints=6)
    covered, pretrend_fired, persistent_covered = [], [], []
    for seed in range(300):
        panel = panel_of(Simulation(**{**sim.__dict__, "seed": seed}))
        res = estimate(panel, Settings(draws=200, seed=seed))
        truth = post_truth(panel, res)
        post = np.isfinite(truth)
        lo, hi = res.matrix("band_low")[post], res.matrix("band_high")[post]
        covered.append(bool(np.all((lo <= truth[post]) & (truth[post] <= hi))))
        pretrend_fired.append(res.pretrend["p_value"] < 0.05)
        pers = res.persistent.filter(~res.persistent["pre_treatment"])
        true_e = np.array([np.mean(np.diagonal(truth[:, 1:], offset=int(e // 1000))) for e in pers["event_time"]])
        lo, hi = pers["band_low"].to_numpy(), pers["band_high"].to_numpy()
        persistent_covered.append(bool(np.all((lo <= true_e) & (true_e <= hi))))
    # nominal 95 %; 300 runs give a Monte-Carlo sd of about 1.3 points
    assert 0.88 <= np.mean(covered) <= 0.99
    assert 0.01 <= np.mean(pretrend_fired) <= 0.11
    assert 0.88 <= np.mean(persistent_covered) <= 0.995


def test_one_cell_by_hand():
    panel = panel_of(Simulation(n_cohorts=3, per_cohort=7, n_never=9, n_checkpoints=5, seed=4))
    res = estimate(panel, Settings(draws=0))
    y, g = panel.metrics["loglik"], panel.treatment
    treated, never = g == 2000, g == NEVER
    # cohort 2000 at checkpoint 4000, base = checkpoint 1000 (index 1)
    att = (y[treated, 4] - y[treated, 1]).mean() - (y[never, 4] - y[never, 1]).mean()
    d_t, d_c = y[treated, 4] - y[treated, 1], y[never, 4] - y[never, 1]
    se = np.sqrt(d_t.var() / treated.sum() + d_c.var() / never.sum())
    cell = res.cells.filter((res.cells["cohort"] == 2000) & (res.cells["checkpoint"] == 4000)).row(0, named=True)
    assert cell["estimate"] == pytest.approx(att, abs=1e-10)
    assert cell["std_error"] == pytest.approx(se, rel=1e-10)
    assert (cell["n_treated"], cell["n_control"]) == (7, 9)


def test_difference_estimator_is_treated_minus_validation_mean():
    panel = panel_of(Simulation(n_cohorts=3, per_cohort=50, n_never=80, n_checkpoints=5, seed=5))
    res = estimate(panel, Settings(estimator="difference", draws=200))
    y, g = panel.metrics["loglik"], panel.treatment
    expected = y[g == 3000, 2].mean() - y[g == NEVER, 2].mean()
    cell = res.cells.filter((res.cells["cohort"] == 3000) & (res.cells["checkpoint"] == 2000)).row(0, named=True)
    assert cell["estimate"] == pytest.approx(expected, abs=1e-9)
    assert cell["pre_treatment"]


def test_unfinished_checkpoints_and_missing_values():
    panel = panel_of(Simulation(n_cohorts=4, per_cohort=10, n_never=20, n_checkpoints=6, seed=6))
    panel.done[4:] = False  # extraction still running: the last two checkpoints are not done
    panel.metrics["loglik"][:, 4:] = np.nan
    panel.metrics["loglik"][0, 2] = np.nan  # one instance with a hole in a completed checkpoint
    res = estimate(panel, Settings(draws=0))
    assert list(res.checkpoints) == [0, 1000, 2000, 3000]
    assert list(res.cohorts) == [1000, 2000, 3000]  # cohort 4000 is beyond the completed window
    assert any("dropped 1 instances" in n for n in res.notes)
    assert any("after the last completed checkpoint" in n for n in res.notes)


def test_a_cohort_emptied_by_missing_values_is_a_clear_error():
    panel = panel_of(Simulation(n_cohorts=2, per_cohort=5, n_never=10, n_checkpoints=4, seed=7))
    panel.metrics["loglik"][panel.treatment == 2000, 3] = np.nan
    with pytest.raises(MemtuiError, match="every instance of cohort 2000 has missing or infinite values"):
        estimate(panel, Settings(draws=0))


def test_treatment_between_checkpoints_maps_to_the_next_checkpoint():
    panel = panel_of(Simulation(n_cohorts=2, per_cohort=5, n_never=10, n_checkpoints=4, seed=8))
    shifted = panel.treatment.copy()
    shifted[shifted == 2000] = 1500
    a = estimate(panel, Settings(draws=0))
    b = estimate(Panel(**{**panel.__dict__, "treatment": shifted}), Settings(draws=0))
    # the documented rule: the same estimates; and the folding is counted, per cohort, in a column and a note
    assert a.cells.drop("n_folded").equals(b.cells.drop("n_folded"))
    assert a.cells["n_folded"].sum() == 0
    folded = b.cells.group_by("cohort").agg(pl.col("n_folded").max()).sort("cohort")
    assert folded.rows() == [(1000, 0), (2000, 5)]
    assert b.persistent.filter(pl.col("event_time") == 0)["n_folded"].item() == 5
    assert any("5 instances first trained on between completed checkpoints" in n and "2000 (5)" in n for n in b.notes)
    assert not any("between completed checkpoints" in n for n in a.notes)


def test_not_yet_treated_uses_later_cohorts_as_controls():
    panel = panel_of(Simulation(n_cohorts=3, per_cohort=10, n_never=20, n_checkpoints=5, seed=9))
    res = estimate(panel, Settings(control_group="not_yet_treated", draws=0))
    cell = res.cells.filter((res.cells["cohort"] == 1000) & (res.cells["checkpoint"] == 1000)).row(0, named=True)
    assert cell["n_control"] == 20 + 10 + 10  # never treated + cohorts 2000 and 3000
    last = res.cells.filter((res.cells["cohort"] == 1000) & (res.cells["checkpoint"] == 3000)).row(0, named=True)
    assert last["n_control"] == 20


@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_bootstrap_is_reproducible_and_seeded(small_panel, band):
    panel = read_panel(small_panel)
    a = estimate(panel, Settings(draws=100, seed=1, band=band))
    b = estimate(panel, Settings(draws=100, seed=1, band=band))
    c = estimate(panel, Settings(draws=100, seed=2, band=band))
    assert a.cells.equals(b.cells)
    # the classic band's standard errors come from the draws; the calibrated band's are analytic (HC1), its
    # critical value comes from the draws
    moved = "std_error" if band == "classic" else "band_low"
    assert not a.cells[moved].equals(c.cells[moved])
    if band == "calibrated":
        assert a.cells["std_error"].equals(c.cells["std_error"]) and a.crit != c.crit


@pytest.mark.parametrize("kind", ["rademacher", "mammen"])
def test_multipliers_have_mean_zero_and_unit_variance(kind):
    v = multipliers(np.random.default_rng(0), (200_000, 3), kind)
    assert abs(v.mean()) < 0.01 and abs(v.var() - 1) < 0.01
    if kind == "mammen":
        assert abs((v**3).mean() - 1) < 0.05


def test_family_all_shares_one_band_and_post_gives_pre_cells_their_own(small_panel):
    panel = read_panel(small_panel)
    post = estimate(panel, Settings(draws=300, family="post"))
    every = estimate(panel, Settings(draws=300, family="all"))
    assert every.cells["crit"].n_unique() == 1
    assert post.cells["crit"].n_unique() == 2
    assert every.crit >= post.crit  # a larger family needs a wider band


def test_invalid_settings_are_one_line_errors(small_panel):
    panel = read_panel(small_panel)
    with pytest.raises(MemtuiError, match="estimator must be one of"):
        estimate(panel, Settings(estimator="ols"))
    with pytest.raises(MemtuiError, match="no metric 'perplexity'"):
        estimate(panel, Settings(metric="perplexity"))
    with pytest.raises(MemtuiError, match="draws must be"):
        estimate(panel, Settings(draws=5))


def test_settings_cannot_be_invalid_however_made():
    """Construction and dataclasses.replace both check, so no code path holds an invalid Settings."""
    import dataclasses

    from memtui.core.errors import MemtuiError
    from memtui.estimation.settings import Settings

    good = Settings()
    for change in ({"estimator": "naive"}, {"alpha": 1.5}, {"draws": 5}, {"seed": -1}, {"family": "pre"}):
        with pytest.raises(MemtuiError, match=next(iter(change))):
            Settings(**change)
        with pytest.raises(MemtuiError, match=next(iter(change))):
            dataclasses.replace(good, **change)
    assert Settings.CHOICES["estimator"] == ("did", "difference", "extractable")


def test_a_final_step_between_checkpoints_is_said_not_silently_moved(small_panel):
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(small_panel)
    steps = panel.done_steps
    between = int((steps[-2] + steps[-1]) // 2)
    res = estimate(panel, Settings(draws=0, final_step=between))
    assert set(res.residual["checkpoint"]) == {int(steps[-2])}
    assert any(f"final step {between} is not a completed checkpoint" in n and f"read at {steps[-2]}" in n
               for n in res.notes)  # fmt: skip
    exact = estimate(panel, Settings(draws=0, final_step=int(steps[-2])))
    assert not any("final step" in n for n in exact.notes)
