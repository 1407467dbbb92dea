"""Issue 33 §5 (the workbench tried as a new user would): each case through Textual's pilot, on small synthetic
panels. Every test failed before its fix."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from app_pilot import HANG_S, run_async, settle
from textual.app import App

from memtui.app.compare import ComparePane, correlation_grid
from memtui.app.dialogs import ConfirmDialog, ExportDialog
from memtui.app.fmt import num
from memtui.app.heatmap import HEADER, Heatmap
from memtui.app.main import MemtuiApp, key_sections
from memtui.app.open_dialog import OpenPanelDialog, PanelTree
from memtui.app.profile import ProfilePane
from memtui.core.errors import MemtuiError
from memtui.estimation.settings import Settings
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.synthetic import Simulation, simulate, write_synthetic

COMPARE = ("compare",)
SIM = Simulation(n_cohorts=4, per_cohort=10, n_never=40, n_checkpoints=6, seed=1)


class CompareHost(App):
    computing = None  # what `settle` reads on the workbench: nothing else is estimated here

    def __init__(self, suite) -> None:
        super().__init__()
        self.suite = suite

    def compose(self):
        yield ComparePane(self.suite, id="compare")


def _suite(tmp_path, per_cohort: int, n_never: int, effects: tuple[float, ...]):
    sim = dict(n_cohorts=6, per_cohort=per_cohort, n_never=n_never, n_checkpoints=8)
    return load_suite([
        write_synthetic(tmp_path / f"m{i}.h5", Simulation(**sim, effect=e, seed=i + 1)) for i, e in enumerate(effects)
    ])  # fmt: skip


async def _compare_grid(suite, size=(120, 60)) -> tuple[str, object]:
    app = CompareHost(suite)
    async with app.run_test(size=size) as pilot:
        pane = app.query_one(ComparePane)
        pane.show_settings(Settings(metric="loglik", draws=200, seed=5))
        await settle(pilot, COMPARE)
        ready = pane._ready[pane.settings, ""]
        return str(pane.query_one("#compare-grid").render()), ready.pearson


# ---- §5.2 the Compare pane's noise-corrected correlation ---------------------------------------------------------


@run_async
async def test_compare_pane_says_not_determined_where_the_corrected_correlation_has_no_interval(tmp_path):
    """Tiny cohorts whose noise is as large as the profiles: the corrected r is not determined (NaN bounds; it was
    [−1, 1]). The pane showed `−0.73` with `[−1, 1]` and no word why; it says "not determined", and the note `memtui
    compare` prints."""
    grid, corr = await _compare_grid(_suite(tmp_path, 3, 10, (0.3, 0.3)))
    assert corr.undetermined[0, 1] and np.isnan(corr.pearson_corrected_high[0, 1])  # the case itself
    corrected = grid.split("Raw Pearson")[0]
    assert "n.d." in corrected and "1–2 not determined" in corrected
    assert f"{corr.pearson_corrected[0, 1]:+.2f}".replace("-", "−") not in corrected  # no number for it
    words = " ".join(corrected.split())  # the key line and the notes are wrapped to the pane
    assert "not determined by these data" in words and "only the raw correlation is informative" in words
    assert "1–2 [" in grid.split("Raw Pearson")[1]  # the raw r keeps its number and interval


@run_async
async def test_compare_pane_marks_a_clipped_corrected_correlation_and_shows_its_note(tmp_path):
    """Equal profiles: the corrected r falls beyond 1 and is held at +1. The pane says so (a mark and the note with
    the value before clipping), instead of a bare `+1.00`."""
    grid, corr = await _compare_grid(_suite(tmp_path, 12, 60, (1.0, 1.0, 1.0)))
    assert np.triu(corr.pearson_clipped, 1).any()
    corrected = grid.split("Raw Pearson")[0]
    assert "+1.00*" in corrected and "fell beyond ±1" in corrected
    words = " ".join(corrected.split())  # the note is wrapped to the pane, with the app's minus sign
    assert "the corrected Pearson correlation fell outside [−1, 1]" in words
    assert all(len(line) <= 120 for line in corrected.splitlines()), corrected


def test_correlation_grid_without_masks_is_unchanged():
    m = np.array([[1.0, 0.8], [0.8, 1.0]])
    text = correlation_grid(["a", "b"], m, m - 0.1, m + 0.05, "Pearson").plain
    assert "n.d." not in text and "*" not in text and "1–2 [0.70, 0.85]" in text


# ---- §5.3 the app's export with 0 draws --------------------------------------------------------------------------


@run_async
async def test_export_with_zero_draws_says_its_significance_is_pointwise(tmp_path):
    """With 0 draws there is no simultaneous band: the dialog and the message say the rows are pointwise-significant
    (the message said only "significant", read as the calibrated band's)."""
    out = tmp_path / "out.csv"
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", SIM)), Settings(metric="loglik", draws=0))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        assert app.result is not None and app.result.settings.draws == 0
        await pilot.press("e")
        dialog = app.screen
        assert isinstance(dialog, ExportDialog)
        assert "pointwise" in str(dialog.query_one("#export-significant").label)
        dialog.query_one("#export-path").value = str(out)
        await pilot.press("enter")
        await pilot.pause()
        assert out.exists() and not isinstance(app.screen, ExportDialog)
        said = [n.message for n in app._notifications if out.name in n.message]  # the path is shortened to fit
        assert said and "pointwise" in said[-1], said
        assert pl.read_csv(out)["draws"].to_list() == [0] * pl.read_csv(out).height  # what the CSV is told
        # with draws, the words stay as they were: the band is simultaneous
        app.change_settings(draws=100)
        await settle(pilot)
        await pilot.press("e")
        assert "pointwise" not in str(app.screen.query_one("#export-significant").label)


# ---- §5.4 the quit prompt while an estimate is computed ----------------------------------------------------------


@pytest.mark.parametrize("outcome", ["result", "error"])
@run_async
async def test_quit_prompt_goes_ahead_once_the_estimate_it_waits_on_is_done(tmp_path, monkeypatch, outcome):
    """q while an estimate is computed asks "still being computed … Quit anyway?". When the estimate ends (done, or
    failed) nothing is lost any more: the prompt stayed up, asking about work that had ended; now the quit asked for
    goes ahead."""
    import memtui.app.estimate_controller as controller

    release, reported = threading.Event(), threading.Event()
    real = controller.cache.cached_estimate

    def slow(panel, settings, progress=None):
        if settings.metric == "accuracy":
            progress(0.0, "bootstrap")
            reported.set()
            release.wait(HANG_S)
            if outcome == "error":
                raise MemtuiError("the estimate failed.")
        return real(panel, settings, progress)

    monkeypatch.setattr(controller.cache, "cached_estimate", slow)
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", SIM)))
    try:
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            await pilot.press("m")
            assert await asyncio.to_thread(reported.wait, HANG_S)
            await pilot.press("q")
            assert isinstance(app.screen, ConfirmDialog) and "still being computed" in app.screen.question
            release.set()
            for _ in range(200):  # until the app has quit (it must not wait for an answer)
                await pilot.pause(0.05)
                if not app.is_running:
                    break
            assert not app.is_running
    finally:
        release.set()
    assert app.return_value == 0


@run_async
async def test_quit_prompt_asks_about_the_estimate_being_computed_now(tmp_path, monkeypatch):
    """Answered "no", the prompt leaves the app as it was; a second estimate started while the prompt is up (a
    re-read panel) keeps it up, asking about that one."""
    import memtui.app.estimate_controller as controller

    release, reported = threading.Event(), threading.Event()
    real = controller.cache.cached_estimate

    def slow(panel, settings, progress=None):
        if settings.metric != "loglik":
            progress(0.0, f"bootstrap of {settings.metric}")
            reported.set()
            release.wait(HANG_S)
        return real(panel, settings, progress)

    monkeypatch.setattr(controller.cache, "cached_estimate", slow)
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", SIM)))
    try:
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            await pilot.press("m")
            assert await asyncio.to_thread(reported.wait, HANG_S)
            await pilot.pause()
            first = app.computing
            await pilot.press("q")
            prompt = app.screen
            assert isinstance(prompt, ConfirmDialog) and first.metric in prompt.question
            app.change_settings(metric=app.metrics[2])  # what a re-read does under the prompt: a new estimate
            await pilot.pause()
            await pilot.pause()
            assert app.screen is prompt and app.is_running
            assert app.computing.metric == app.metrics[2] and app.metrics[2] in str(
                prompt.query_one("#question").render()
            )
            await pilot.press("n")
            assert app.is_running and not isinstance(app.screen, ConfirmDialog)
            release.set()
            await settle(pilot)
            assert app.is_running  # answered no: the estimate's end quits nothing
    finally:
        release.set()


# ---- §5.5 ctrl+o: the open dialog --------------------------------------------------------------------------------

OPEN = ("estimate", "reload", "summary-extras", "compare", "open-panel")


def _footer_keys(screen) -> dict[str, str]:
    return {key: b.binding.description for key, b in screen.active_bindings.items() if b.binding.show and b.enabled}


@run_async
async def test_open_dialog_takes_typing_reads_a_name_in_the_folder_shown_and_lists_enter(tmp_path, monkeypatch):
    """The field has the focus (typed characters went nowhere: the tree had it); a typed name is read from the folder
    the tree shows (it was read from the folder memtui started in); the footer lists enter on the field and the tree
    (the tree's was hidden); a character typed on the tree goes to the field."""
    shown, elsewhere = tmp_path / "shown", tmp_path / "elsewhere"
    shown.mkdir(), elsewhere.mkdir()
    a = write_synthetic(shown / "a.h5", SIM)
    write_synthetic(shown / "b.h5", Simulation(n_cohorts=5, per_cohort=10, n_never=40, n_checkpoints=7, seed=3))
    (elsewhere / "b.h5").write_text("not a panel: the folder memtui started in")
    monkeypatch.chdir(elsewhere)
    app = MemtuiApp(read_panel(a))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot, OPEN)
        await pilot.press("ctrl+o")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, OpenPanelDialog)
        field = dialog.query_one("#open-path")
        assert app.focused is field
        assert _footer_keys(dialog).get("enter") == "Open"
        await pilot.press("tab")  # to the tree: enter is still listed
        assert isinstance(app.focused, PanelTree) and _footer_keys(dialog).get("enter") == "Open"
        await pilot.press("shift+tab")
        assert app.focused is field
        await pilot.press("ctrl+u", *"b.h5")  # the field emptied, then a bare name
        assert field.value == "b.h5"
        assert dialog.resolve(field.value) == shown / "b.h5"
        await pilot.press("enter")
        await settle(pilot, OPEN)
        assert not isinstance(app.screen, OpenPanelDialog), str(dialog.query_one("#open-error").render())
        assert app.panel.path == shown / "b.h5"
        await settle(pilot, OPEN)
        # the tree, given the focus, hands typed characters to the field
        await pilot.press("ctrl+o")
        await pilot.pause()
        dialog = app.screen
        dialog.query_one(PanelTree).focus()
        await pilot.pause()
        await pilot.press("x")
        field = dialog.query_one("#open-path")
        assert app.focused is field and field.value.endswith("/x")
        await pilot.press("escape")


@run_async
async def test_the_cursor_cell_is_on_screen_after_a_new_matrix_changes_the_layout(tmp_path):
    """On the last cohort of a panel whose matrix fits, open one whose matrix is wider than the pane: its horizontal
    scroll bar takes a row, and the cursor's row, scrolled to before that, sat under it, off screen."""
    narrow = write_synthetic(tmp_path / "c.h5", Simulation(n_cohorts=30, per_cohort=4, n_never=40, n_checkpoints=31,
                                                           seed=3, step=3000))  # fmt: skip
    wide = write_synthetic(tmp_path / "b.h5", Simulation(n_cohorts=40, per_cohort=4, n_never=40, n_checkpoints=41,
                                                         seed=2, step=1000))  # fmt: skip
    app = MemtuiApp(read_panel(narrow))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, OPEN)
        await pilot.press("G")
        await pilot.press("ctrl+o")
        await pilot.pause()
        field = app.screen.query_one("#open-path")
        field.value = str(wide)
        field.focus()
        await pilot.press("enter")
        await settle(pilot, OPEN)
        for _ in range(3):
            await pilot.pause()
        heatmap = app.query_one(Heatmap)
        assert app.panel.path == wide and heatmap.row > 20
        sx, sy = heatmap.scroll_offset
        region = heatmap.scrollable_content_region
        assert sy <= heatmap.row < sy + region.height - HEADER, (heatmap.row, sy, region)
        x0 = heatmap.column * heatmap.cell_width
        assert sx <= x0 and x0 + heatmap.cell_width <= sx + region.width - heatmap._gutter


# ---- §5.9 the synthetic sample's truth in the app; the docs' metrics and rows ------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "app.md"


@run_async
async def test_t_overlays_a_simulated_panels_true_profile_and_is_listed(tmp_path):
    """The truth that README sells was shown nowhere but `memtui info`: `t` draws the cursor row's true path over the
    path plot and gives the cell's true τ; the footer and ? list it."""
    path = write_synthetic(tmp_path / "sim.h5", SIM)
    panel = read_panel(path)
    app = MemtuiApp(panel)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        assert _footer_keys(app.screen).get("t") == "Truth"
        profile = app.query_one(ProfilePane)
        heatmap = app.query_one(Heatmap)
        await pilot.press("j")  # a cohort below the first
        await pilot.press("t")
        await settle(pilot)
        await pilot.pause(0.2)  # the path plot redraws at most every 0.1 s
        r, row, col = app.result, heatmap.row, heatmap.column
        g, c = int(r.cohorts[row]), int(r.checkpoints[col])
        truth = panel.truth["loglik"][list(panel.truth["cohorts"]).index(g), list(panel.truth["steps"]).index(c)]
        assert f"(true {num(truth, signed=True)})" in str(app.query_one("#cell-info").render())
        series = app.query_one("#path-plot")._series
        assert len(series) == 2
        cols = [list(panel.truth["steps"]).index(s) for s in r.checkpoints]
        np.testing.assert_allclose(
            series[1].estimate, panel.truth["loglik"][list(panel.truth["cohorts"]).index(g)][cols]
        )
        assert "true τ" in str(app.query_one("#by-legend").render())
        await pilot.press("t")  # off again
        await pilot.pause(0.2)
        assert len(app.query_one("#path-plot")._series) == 1 and "true" not in str(app.query_one("#cell-info").render())
        assert profile.truth_shown is False
        await pilot.press("question_mark")
        help_text = str(app.screen.query_one("#help-text").render())
        assert "true profile" in help_text
        await pilot.press("escape")


@run_async
async def test_t_on_a_panel_without_truth_says_so_and_stays_out_of_the_footer(tmp_path):
    data = simulate(SIM)
    data.pop("truth")
    path = create_panel(tmp_path / "real.h5", metrics=list(data["values"]), **data)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        assert "t" not in _footer_keys(app.screen)
        await pilot.press("t")
        await pilot.pause()
        assert any("No true profile" in n.message for n in app._notifications)
        assert len(app.query_one("#path-plot")._series) == 1


@run_async
async def test_help_and_docs_name_every_metric_m_steps_through():
    """? and docs/app.md said m cycles loglik, accuracy, rank, entropy; the suite samples have six metrics."""
    from memtui.app import open_app
    from memtui.panel.samples import sample_paths

    app = open_app(sample_paths("suite-neox-41k")[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        seen = [app.settings.metric]
        for _ in range(len(app.metrics) - 1):
            app.action_next_metric(1)
            seen.append(app.settings.metric)
        assert len(set(seen)) == 6
        sections = dict(key_sections(app))
        m_line = dict(sections["Everywhere"])["m"]
        assert all(metric in m_line for metric in seen), m_line
        await settle(pilot)
    doc = " ".join(DOCS.read_text().split())
    metrics_sentence = doc[doc.index("`m` steps through") :][:400]
    assert all(f"`{metric}`" in metrics_sentence for metric in seen), metrics_sentence


@run_async
async def test_docs_say_how_many_cohort_rows_p_gives_at_80x24():
    """docs/app.md said `p` gives 16 cohort rows instead of 7; measured on the shipped sample."""
    from memtui.app import open_app
    from memtui.panel.samples import sample_paths

    app = open_app(sample_paths("synthetic")[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        heatmap = app.query_one(Heatmap)
        before = min(heatmap.scrollable_content_region.height - HEADER, len(app.result.cohorts))
        await pilot.press("p")
        await pilot.pause()
        await pilot.pause()
        after = min(heatmap.scrollable_content_region.height - HEADER, len(app.result.cohorts))
    doc = " ".join(DOCS.read_text().split())
    assert f"at 80 × 24 on the shipped sample: {after} cohort rows instead of {before}" in doc, (before, after)


@run_async
async def test_t_works_on_a_suite_of_simulated_panels_whose_footer_has_no_room_for_it(tmp_path):
    paths = [write_synthetic(tmp_path / f"m{i}.h5", Simulation(**{**SIM.__dict__, "seed": i})) for i in (1, 2)]
    panels = [read_panel(p) for p in paths]
    app = MemtuiApp(panels[0], models=panels, suite=load_suite(paths))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "t" not in _footer_keys(app.screen) and "n" in _footer_keys(app.screen)
        await pilot.press("t")
        await pilot.pause()
        assert app.query_one(ProfilePane).truth_shown and "true τ" in str(app.query_one("#by-legend").render())
        assert "true profile" in str(dict(key_sections(app))["Profile (heatmap)"])
