"""The split by group in the workbench (b/B, v/V, the settings' split fields): the Profile pane's heatmap shows one
group with the joint band, or the difference of two, its path plot one line per group under a legend naming each
group with its size; the Summaries pane gives each group's means and the difference test; every figure is checked
against ``estimate_by`` run on its own. The panel is the shipped synthetic sample, copied and given a categorical
and a numeric covariate with ``write_covariates``."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from app_pilot import run_async, settle
from textual.app import App

from memtui.app.by_view import View, by_lines, by_options, view_result, views
from memtui.app.compare import ComparePane
from memtui.app.dialogs import SettingsDialog
from memtui.app.fmt import minus_signs, num, nums
from memtui.app.heatmap import Heatmap
from memtui.app.main import MemtuiApp
from memtui.app.plots import BandPlot
from memtui.app.profile import ProfilePane
from memtui.app.summaries import final_checkpoint
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import estimate_by
from memtui.estimation.suite_load import load_suite
from memtui.panel.covariates import covariate_lines, write_covariates
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER
from memtui.panel.samples import sample_path

SIZE = (120, 40)


def with_covariates(tmp_path, name: str = "panel.h5"):
    """The shipped synthetic sample with a domain (code/web) and a length per instance."""
    path = tmp_path / name
    shutil.copy(sample_path("synthetic"), path)
    n = read_panel(path).n_instances
    rng = np.random.default_rng(0)
    domains = rng.choice(np.array(["code", "web"], dtype=object), n)
    write_covariates(path, {"domain": domains, "length": rng.gamma(3, 100, n)})
    return read_panel(path)


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    return with_covariates(tmp_path_factory.mktemp("by"))


def heatmap_matrix(app) -> np.ndarray:
    return app.query_one(Heatmap).data.estimate


def test_offered_specs_are_each_covariates_levels_or_quartiles(panel):
    assert by_options(panel) == ["", "domain", "length:quartiles"]


def test_views_are_every_group_then_the_tested_differences(panel):
    by = estimate_by(panel, Settings(metric=panel.default_metric, draws=200), "domain")
    assert views(by) == [View("domain=code"), View("domain=web"), View("domain=code", "domain=web")]
    diff = view_result(by, View("domain=code", "domain=web"))
    a, b = (by.groups[n].matrix("estimate") for n in by.names)
    # the difference view is group a minus group b, cell by cell (loglik: higher is better, sign +1)
    assert np.allclose(diff.matrix("estimate"), a - b, equal_nan=True)
    lines = by_lines(by, final_checkpoint(by.groups["domain=code"]))
    assert any(by.differences[0].sentence() in line for line in lines)


@run_async
async def test_b_splits_profile_and_summaries_as_estimate_by_does(panel):
    app = MemtuiApp(panel)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        whole = heatmap_matrix(app).copy()
        assert not app.query_one("#by-legend").display
        await pilot.press("b")
        await settle(pilot)
        assert app.by == "domain" and app.by_result is not None
        want = estimate_by(panel, app.settings, "domain")
        assert app.by_result.names == want.names == ["domain=code", "domain=web"]
        assert app.by_result.sizes == want.sizes
        # the legend names each group with its size, and says what the heatmap shows
        legend = str(app.query_one("#by-legend").render())
        assert "by domain · heatmap: domain=code (joint band)" in legend
        for name, (treated, controls) in want.sizes.items():
            assert f"{name} ({treated} treated, {controls} controls)" in legend
        # the heatmap is the first group's profile, with its joint-band significance
        code = want.joint("domain=code")
        assert np.array_equal(heatmap_matrix(app), want.groups["domain=code"].matrix("estimate"), equal_nan=True)
        assert not np.array_equal(heatmap_matrix(app), whole, equal_nan=True)
        sig = app.query_one(Heatmap).data.significant
        assert int(sig.sum()) == int(code["significant"].sum())
        # the path plot: one line per group, each in its own colour
        plot = app.query_one("#path-plot", BandPlot)
        assert [s.colour for s in plot._series] == [0, 1]
        assert "per group" in plot.drawn_title or "per group" in plot._titles[0]
        # v: the next group, then the difference of the two
        await pilot.press("v")
        await settle(pilot)
        assert np.array_equal(heatmap_matrix(app), want.groups["domain=web"].matrix("estimate"), equal_nan=True)
        await pilot.press("v")
        await settle(pilot)
        diff = want.differences[0]
        assert "heatmap: difference domain=code − domain=web" in str(app.query_one("#by-legend").render())
        cells = diff.cells
        matrix = heatmap_matrix(app)
        rows = np.searchsorted(app.query_one(Heatmap).data.cohorts, cells["cohort"].to_numpy())
        cols = np.searchsorted(app.query_one(Heatmap).data.checkpoints, cells["checkpoint"].to_numpy())
        assert np.allclose(matrix[rows, cols], cells["estimate"].to_numpy())
        assert "treated" not in app.query_one(ProfilePane).cell_text(0, 1)  # a difference has no counts of its own
        # the Summaries pane: each group's numbers and the difference test sentence, as estimate_by gives them
        await pilot.press("2")
        await settle(pilot)
        text = str(app.query_one("#summary-text").render())
        for name in want.names:
            res = want.groups[name]
            assert f"Group {name} " in text and f"overall {num(res.overall.estimate, signed=True)}" in text
            inst = res.instantaneous["estimate"].mean()
            assert f"mean {num(inst, signed=True)} over {res.instantaneous.height} cohorts" in text
        o = diff.overall  # the estimate on its interval's decimals
        estimate, low, high = nums((o["estimate"], o["ci_low"], o["ci_high"]), signed=True)
        assert minus_signs(diff.sentence()) in text and f"overall {estimate} [{low}, {high}]" in text
        assert [s.colour for s in app.query_one("#plot-instantaneous", BandPlot)._series] == [0, 1]
        legend = str(app.query_one("#summary-by-legend").render())
        assert all(name in legend for name in want.names)
        # b again: quartiles of length, ordered groups with the dose-response trend; then no split
        await pilot.press("b")
        await settle(pilot)
        assert app.by == "length:quartiles" and len(app.by_result.names) == 4
        assert "Dose-response: trend in length" in str(app.query_one("#summary-text").render())
        await pilot.press("b")
        await settle(pilot)
        assert app.by == "" and app.by_result is None
        await pilot.press("1")
        await settle(pilot)
        assert np.array_equal(heatmap_matrix(app), whole, equal_nan=True)
        assert not app.query_one("#by-legend").display


@run_async
async def test_summaries_list_the_panels_covariates(panel):
    app = MemtuiApp(panel)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        text = str(app.query_one("#summary-text").render())
        lines = covariate_lines(panel.covariates)
        assert len(lines) == 2 and all(line in text for line in lines)
        assert "domain categorical 0 missing, 2 levels" in text and "length numeric 0 missing" in text


@run_async
async def test_settings_dialog_splits_by_a_typed_spec_and_refuses_a_bad_one(panel):
    app = MemtuiApp(panel)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, SettingsDialog)
        field = dialog.query_one("#set-by")
        field.value = "nope>=1"
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is dialog  # refused in the dialog, in one line, and nothing changed
        error = str(dialog.query_one("#settings-error").render())
        assert "no covariate 'nope'" in error and "\n" not in error.strip()
        field.value = "length>=300"
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is not dialog and app.by == "length>=300"
        assert app.by_result.names == ["length>=300", "not length>=300"]
        assert "by length>=300" in str(app.query_one("#title").render())
        # the choice fills the spec field
        await pilot.press("o")
        await settle(pilot)
        choice = app.screen.query_one("#set-by-choice")
        choice.focus()
        await pilot.press("right")
        assert app.screen.query_one("#set-by").value == "domain"


@run_async
async def test_an_invalid_split_is_one_notification_and_the_view_stays(tmp_path):
    panel = with_covariates(tmp_path)
    # a covariate whose groups estimate_by refuses (a group of never-treated instances only): known only when
    # estimated, in the worker
    kind = np.where(panel.treatment == NEVER, "control", "trained").astype(object)
    write_covariates(panel.path, {"kind": kind})
    panel = read_panel(panel.path)
    app = MemtuiApp(panel)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("b")
        await settle(pilot)
        shown, matrix = app.by_result, heatmap_matrix(app).copy()
        assert app.by == "domain"
        before = len(app._notifications)
        assert not app.set_by("dom ain")  # not a spec: refused at once
        assert app.set_by("kind")  # a spec, but its groups cannot be estimated
        await settle(pilot)
        messages = [n.message for n in list(app._notifications)[before:]]
        assert len(messages) == 2 and all("\n" not in m for m in messages), messages
        assert "not a subgroup spec" in messages[0] and messages[1].startswith("Not split by kind: ")
        assert app.by == "domain" and app.by_result is shown
        assert np.array_equal(heatmap_matrix(app), matrix, equal_nan=True)


@run_async
async def test_v_without_a_split_says_how_to_make_one(panel):
    app = MemtuiApp(panel)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("v")
        assert [n.message for n in app._notifications][-1].startswith("No split: b")


class Host(App):
    computing = None

    def __init__(self, suite) -> None:
        super().__init__()
        self.suite = suite

    def compose(self):
        yield ComparePane(self.suite, id="compare")


@run_async
async def test_compare_pane_splits_by_the_same_spec(tmp_path):
    """The Compare pane compares the models group by group (tests/app/test_app_compare_by.py checks its figures): a
    legend names the groups; without a split it is gone."""
    paths = [with_covariates(tmp_path, f"{m}.h5").path for m in ("a", "b")]
    app = Host(load_suite(paths))
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ComparePane)
        pane.show_settings(Settings(metric="loglik", draws=100), "domain")
        await settle(pilot, ("compare",))
        note = str(pane.query_one("#compare-by").render())
        assert note.startswith("by domain · plots and grids: group 1") and "domain=code (" in note
        assert "2 models by domain: 2 groups" in str(pane.query_one("#compare-text").render())
        pane.show_settings(Settings(metric="loglik", draws=100))
        assert not pane.query_one("#compare-by").display


def test_split_profile_snapshot(snap_compare, tmp_path):
    """The split Profile pane: the legend line naming each group and its size, the first group's heatmap, and the
    cursor cohort's path in each group's colour (``--snapshot-update`` after a deliberate change; look at it)."""
    from memtui.panel.synthetic import Simulation, write_synthetic

    path = write_synthetic(
        tmp_path / "panel.h5", Simulation(n_cohorts=8, per_cohort=24, n_never=80, n_checkpoints=10, seed=5)
    )
    n = read_panel(path).n_instances
    write_covariates(path, {"domain": np.where(np.arange(n) % 3 == 0, "code", "web").astype(object)})

    async def split(pilot):
        await settle(pilot)
        await pilot.press("b", "j", "j", "i")
        await settle(pilot)
        profile = pilot.app.query_one(ProfilePane)
        for _ in range(1000):  # the path plot follows the cursor on a timer: wait for it to reach the row
            if profile._plotted == (id(profile.result), profile.heatmap.row):
                break
            await pilot.pause()
        await pilot.pause()

    assert snap_compare(MemtuiApp(read_panel(path)), terminal_size=(110, 32), run_before=split)
