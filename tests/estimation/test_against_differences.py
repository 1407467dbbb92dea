"""memtui's engine against the `differences` library (an independent implementation) and R `did`'s published
results on the classic minimum-wage panel. Under the classic band (``band="classic"``): the band these libraries share;
the calibrated band is memtui's own (tests/estimation/test_band_calibrated.py, tests/engine/test_bands.py)."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from differences import ATTgt

from memtui.estimation.crosscheck import long_frame
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.importing import ImportSpec, import_table, read_table
from memtui.panel.model import Panel

DATA = Path(__file__).parents[1] / "data"


def differences_cells(frame, base_period, control_group, draws=0, seed=1):
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        att = ATTgt(data=frame, cohort_column="cohort", base_period=base_period)
        att.fit("y", est_method="reg", control_group=control_group, boot_iterations=draws, random_state=seed,
                progress_bar=False)  # fmt: skip
        res = att.results()
    res.columns = [c[-1] for c in res.columns]
    res = res.reset_index()
    res = res[res["base_period"] != res["time"]]  # universal base: drop the zero reference cells
    return res.astype({"cohort": int, "time": int}).set_index(["cohort", "time"]).sort_index()


def ours(panel, **kw):
    res = estimate(panel, Settings(band="classic", **kw))
    frame = res.cells.to_pandas().rename(columns={"checkpoint": "time"}).set_index(["cohort", "time"]).sort_index()
    return res, frame


@pytest.mark.parametrize("base_period", ["varying", "universal"])
@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_point_estimates_and_analytic_se_equal_differences(small_panel, base_period, control_group):
    panel = read_panel(small_panel)
    frame, _ = long_frame(panel, "loglik", control_group)
    theirs = differences_cells(frame, base_period, control_group)
    _, mine = ours(panel, base_period=base_period, control_group=control_group, draws=0, family="all")
    assert list(mine.index) == list(theirs.index)
    np.testing.assert_allclose(mine["estimate"], theirs["ATT"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(mine["std_error"], theirs["std_error"], rtol=1e-9)


def test_rank_metric_reports_memorisation_with_flipped_sign(small_panel):
    panel = read_panel(small_panel)
    frame, _ = long_frame(panel, "rank", "never_treated")
    theirs = differences_cells(frame, "varying", "never_treated")
    _, mine = ours(panel, metric="rank", draws=0)
    np.testing.assert_allclose(mine["estimate"], -theirs["ATT"], atol=1e-9)


def test_bootstrap_se_and_critical_value_agree_with_differences(small_panel):
    panel = read_panel(small_panel)
    frame, _ = long_frame(panel, "loglik", "never_treated")
    theirs = differences_cells(frame, "varying", "never_treated", draws=4000)
    res, mine = ours(panel, draws=4000, family="all", seed=5)
    ratio = mine["std_error"] / theirs["std_error"]
    # Monte-Carlo error of an IQR-based se at B = 4000 is about 2 %; allow 4 sd for the extreme of 30 cells
    assert abs(np.median(ratio) - 1) < 0.03
    assert ratio.between(0.9, 1.1).all()
    their_crit = np.median((theirs["upper"] - theirs["ATT"]) / theirs["std_error"])
    assert res.crit == pytest.approx(their_crit, rel=0.06)
    # and with the analytic (influence-function) ones: the IQR-based bootstrap se runs a few percent high here because a
    # multiplier-weighted sum over 15 instances has lighter tails than a normal
    boot_vs_analytic = mine["std_error"] / mine["analytic_se"]
    assert abs(np.median(boot_vs_analytic) - 1) < 0.06
    assert boot_vs_analytic.between(0.85, 1.2).all()


def test_aggregates_agree_with_differences(small_panel):
    panel = read_panel(small_panel)
    mine = estimate(panel, Settings(band="classic", draws=4000, family="all"))
    theirs = estimate(panel, Settings(band="classic", draws=4000, family="all", engine="differences"))
    a = mine.persistent.to_pandas().set_index("event_time")
    b = theirs.persistent.to_pandas().set_index("event_time")
    np.testing.assert_allclose(a["estimate"], b["estimate"], atol=1e-9)
    assert (a["std_error"] / b["std_error"]).between(0.88, 1.12).all()
    assert mine.overall["estimate"] == pytest.approx(theirs.overall["estimate"], abs=1e-9)
    assert mine.overall["std_error"] == pytest.approx(theirs.overall["std_error"], rel=0.1)


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_analytic_aggregates_equal_differences(small_panel, control_group):
    """With -B 0 the persistent and overall summaries get influence-function standard errors: differences' analytic
    ones for aggte-style aggregations (weight estimation included)."""
    panel = read_panel(small_panel)
    frame, _ = long_frame(panel, "loglik", control_group)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        att = ATTgt(data=frame, cohort_column="cohort", base_period="varying")
        att.fit("y", est_method="reg", control_group=control_group, boot_iterations=0, progress_bar=False)
        att.aggregate("event", boot_iterations=0)
        event = att.results("event")
        att.aggregate("simple", boot_iterations=0)
        simple = att.results("simple")
    event.columns = [c[-1] for c in event.columns]
    simple.columns = [c[-1] for c in simple.columns]
    mine = estimate(panel, Settings(band="classic", draws=0, control_group=control_group))
    pers = mine.persistent.to_pandas().set_index("event_time")
    event = event.reset_index().set_index("relative_period")
    assert list(pers.index) == list(event.index)
    np.testing.assert_allclose(pers["estimate"], event["ATT"], atol=1e-9)
    np.testing.assert_allclose(pers["std_error"], event["std_error"], rtol=1e-9)
    assert mine.overall["std_error"] == pytest.approx(float(simple["std_error"].iloc[0]), rel=1e-9)


def test_differences_engine_counts_folded_instances_and_small_cohorts_alike(small_panel):
    panel = read_panel(small_panel)
    treatment = panel.treatment.copy()
    treatment[np.flatnonzero(treatment == 2000)[:3]] = 1500  # between checkpoints: counted in cohort 2000
    treatment[np.flatnonzero(treatment == 4000)[3:]] = -1  # cohort 4000 keeps 3 instances
    panel = Panel(**{**panel.__dict__, "treatment": treatment})
    a = estimate(panel, Settings(band="classic", draws=0))
    b = estimate(panel, Settings(band="classic", draws=0, engine="differences"))
    cols = ["cohort", "checkpoint", "n_treated", "n_folded", "small_group"]
    assert a.cells.select(cols).sort(cols[:2]).equals(b.cells.select(cols).sort(cols[:2]))
    assert set(a.cells.filter(pl.col("n_folded") > 0)["cohort"]) == {2000}
    assert set(a.cells.filter(pl.col("small_group"))["cohort"]) == {4000}
    for notes in (a.notes, b.notes):
        assert any("2000 (3)" in n and "between completed checkpoints" in n for n in notes)
        assert any("4000 (3)" in n and "fewer than 5 instances" in n for n in notes)


@pytest.fixture(scope="module")
def mpdta(tmp_path_factory):
    path = tmp_path_factory.mktemp("mpdta") / "mpdta.h5"
    spec = ImportSpec(unit="countyreal", time="year", treatment="first.treat", metrics=("lemp",), never_values=(0,))
    import_table(read_table(DATA / "mpdta.csv"), path, spec)
    return read_panel(path)


# R did 2.x, att_gt(yname="lemp", tname="year", idname="countyreal", gname="first.treat", data=mpdta)
R_DID_MPDTA = {
    (2004, 2004): -0.0105, (2004, 2005): -0.0704, (2004, 2006): -0.1373, (2004, 2007): -0.1008,
    (2006, 2004): 0.0065, (2006, 2005): -0.0028, (2006, 2006): -0.0046, (2006, 2007): -0.0412,
    (2007, 2004): 0.0305, (2007, 2005): -0.0027, (2007, 2006): -0.0311, (2007, 2007): -0.0261,
}  # fmt: skip


def test_mpdta_matches_r_did_published_estimates(mpdta):
    _, mine = ours(mpdta, metric="lemp", draws=0)
    assert len(mine) == len(R_DID_MPDTA)
    for key, value in R_DID_MPDTA.items():
        assert mine.loc[key, "estimate"] == pytest.approx(value, abs=5e-5 + 1e-12)


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_mpdta_matches_differences(mpdta, control_group):
    frame, _ = long_frame(mpdta, "lemp", control_group)
    theirs = differences_cells(frame, "varying", control_group)
    _, mine = ours(mpdta, metric="lemp", draws=0, control_group=control_group)
    np.testing.assert_allclose(mine["estimate"], theirs["ATT"], atol=1e-9)
    np.testing.assert_allclose(mine["std_error"], theirs["std_error"], rtol=1e-9)


def test_differences_engine_switch_gives_the_same_profile(small_panel):
    panel = read_panel(small_panel)
    a = estimate(panel, Settings(band="classic", draws=0))
    b = estimate(panel, Settings(band="classic", draws=0, engine="differences"))
    np.testing.assert_allclose(a.matrix(), b.matrix(), atol=1e-9, equal_nan=True)
    # the same table, not just the same point estimates: every column, and the analytic SEs and bands of -B 0
    assert a.cells.columns == b.cells.columns
    for column in ("std_error", "band_low", "band_high"):
        np.testing.assert_allclose(a.matrix(column), b.matrix(column), rtol=1e-7, equal_nan=True, err_msg=column)
    assert a.cells.sort("cohort", "checkpoint")["significant"].equals(
        b.cells.sort("cohort", "checkpoint")["significant"]
    )
