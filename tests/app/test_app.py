"""The workbench driven through Textual's pilot: every pane and key path on small synthetic panels."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import h5py
import numpy as np
import polars as pl
import pytest
from app_pilot import APP_GROUPS, HANG_S, Inbox, run_async, settle
from textual.command import CommandPalette
from textual.widgets import Input, TabbedContent

from memtui.app import open_app, palette, run_app
from memtui.app.dialogs import ConfirmDialog, ExportDialog, HelpScreen, SettingsDialog
from memtui.app.estimates import EstimatesPane, EstimatesTable, table_frame
from memtui.app.extraction import ExtractionPane, job_indicator, progress_text
from memtui.app.fmt import nums, short_step
from memtui.app.heatmap import DIMMED, HIDDEN, PRE, SOLID, Heatmap
from memtui.app.keybar import KeyBar
from memtui.app.main import MemtuiApp, PanelReloaded, key_sections
from memtui.app.messages import EstimateReady
from memtui.app.palette import DARK, LIGHT, levels, robust_scale, xterm_rgb
from memtui.app.profile import Legend
from memtui.estimation.cache import cached_estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, simulate, write_synthetic
from memtui.report.export import export_frame

RAMP = DARK.ramp
SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8, seed=1)
SIZE = (100, 32)
JOB_GROUPS = (*APP_GROUPS, "extract-launch")  # launching and cancelling a job run in workers of their own


@pytest.fixture
def panel_path(tmp_path):
    return write_synthetic(tmp_path / "panel.h5", SIM)


def status(app) -> str:
    return str(app.query_one("#cell-info").render())


def title(app) -> str:
    return str(app.query_one("#title").render())


async def _until(condition) -> None:
    """Sleep until ``condition()`` holds, the app running meanwhile (once it has quit, the pilot cannot wait on it)."""
    while not condition():
        await asyncio.sleep(0.02)


def make_app(path, **kwargs) -> MemtuiApp:
    return MemtuiApp(read_panel(path), **kwargs)


# ---- palette and formatting ------------------------------------------------------------------------------------


def test_palette_is_256_colour_cube_entries_symmetric_around_zero():
    for index in (*DARK.ramp, *LIGHT.ramp):
        assert 16 <= index <= 231
        r, g, b = xterm_rgb(index)
        assert all(v in (0, 95, 135, 175, 215, 255) for v in (r, g, b))
    values = np.array([-10.0, -0.01, 0.0, 0.01, 10.0, np.nan])
    lv = levels(values, 5.0)
    assert lv[0] == 0 and lv[-2] == len(RAMP) - 1  # saturate at +-scale
    assert lv[1] == len(RAMP) // 2 - 1 and lv[3] == len(RAMP) // 2  # tiny values: darkest step of their sign
    assert robust_scale(np.array([1.0, -2.0, np.nan, 100.0]), 0.5) == 2.0


def test_short_step():
    assert [short_step(s) for s in (0, 999, 1000, 1500, 143000, -2000, 2_000_000)] == [
        "0", "999", "1k", "1.5k", "143k", "−2k", "2M",
    ]  # fmt: skip


# ---- profile ---------------------------------------------------------------------------------------------------


@run_async
async def test_the_heap_is_frozen_once_the_first_estimate_shows_and_released_on_exit(panel_path):
    """Keys answer without a full garbage collection walking Textual's and the panel's objects; an app that ends
    gives them back (the tests run hundreds of apps in one process)."""
    import gc

    assert gc.get_freeze_count() == 0
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.pause()
        assert app.result is not None and gc.get_freeze_count() > 10_000
        frozen = gc.get_freeze_count()
        await pilot.press("m")  # later estimates freeze nothing more
        await settle(pilot)
        assert gc.get_freeze_count() <= frozen  # (frozen objects still go when their last reference does)
    assert gc.get_freeze_count() == 0


@run_async
async def test_open_move_cursor_and_read_status_line(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=(160, 40)) as pilot:  # wide: the status line's full wording
        await settle(pilot)
        heatmap = app.query_one(Heatmap)
        assert heatmap.has_focus and heatmap.painted
        result = app.result
        assert "g 1000  c 1000  c−g 0" in status(app)  # opens on the first cohort's instantaneous cell
        await pilot.press("0")
        assert "g 1000  c 0" in status(app)  # the first checkpoint: the base period, no estimate
        await pilot.press("j", "l", "l")
        assert (heatmap.row, heatmap.column) == (1, 2)
        cells = result.cells.filter((pl.col("cohort") == 2000) & (pl.col("checkpoint") == 2000)).row(0, named=True)
        line = status(app)
        assert "g 2000  c 2000  c−g 0" in line
        # the estimate, its SE and its band on one number of decimals
        tau, se, low, high = nums([cells[k] for k in ("estimate", "std_error", "band_low", "band_high")], signed=True)
        assert f"τ {tau}  SE {se.lstrip('+')}" in line and f"band [{low}, {high}]" in line
        assert f"n {cells['n_treated']} treated / {cells['n_control']} control" in line
        assert ("not significant" in line) != cells["significant"]
        await pilot.press("h", "k", "down", "right", "up", "left")
        assert (heatmap.row, heatmap.column) == (0, 1)
        await pilot.press("G")
        assert heatmap.row == len(result.cohorts) - 1
        await pilot.press("g", "dollar_sign")
        assert (heatmap.row, heatmap.column) == (0, len(result.checkpoints) - 1)
        await pilot.press("0")
        assert heatmap.column == 0
        await pilot.press("end", "home", "pagedown")
        assert heatmap.row > 0 and heatmap.column == 0
        await pilot.press("pageup", "j", "j", "j", "i")  # cohort 4000's instantaneous cell
        assert int(result.checkpoints[heatmap.column]) == int(result.cohorts[heatmap.row]) == 4000
        assert "c−g 0" in status(app)
        await pilot.press("h", "h")  # g 4000, c 2000: a placebo cell
        assert "c−g −2000 │ pre-treatment (placebo)" in status(app)
        await pilot.press("plus", "plus", "minus")
        assert heatmap.cell_width == 3
        await pilot.click(Heatmap, offset=(heatmap._gutter + 1, 2))
        assert heatmap.column == 0 and heatmap.row == 1 + heatmap.scroll_offset.y


@run_async
async def test_significance_toggle_dims_hides_and_shows(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        heatmap = app.query_one(Heatmap)
        sig = heatmap.data.significant
        post = np.isfinite(heatmap.data.estimate) & ~heatmap.data.pre
        assert (post & ~sig).any() and (post & sig).any()
        codes = heatmap._codes
        assert ((codes[post & ~sig] >= DIMMED) & (codes[post & ~sig] < DIMMED + len(RAMP))).all()
        assert ((codes[post & sig] >= SOLID) & (codes[post & sig] < SOLID + len(RAMP))).all()
        assert (codes[np.isfinite(heatmap.data.estimate) & heatmap.data.pre & ~sig] == PRE).all()
        assert "n.s. dimmed" in str(app.query_one("#legend").render())
        await pilot.press("s")
        assert heatmap.mode == "hide"
        assert (heatmap._codes[post & ~sig] == HIDDEN).all()
        assert "n.s. hidden" in str(app.query_one("#legend").render())
        await pilot.press("s")
        assert heatmap.mode == "show"
        assert (heatmap._codes[post] < SOLID + len(RAMP)).all()
        await pilot.press("s")
        assert heatmap.mode == "dim"


@run_async
async def test_metric_and_estimator_switch_change_values_and_come_back_from_memory(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("j", "i")  # cohort 2000, c = g
        loglik_line = status(app)
        assert "loglik" in title(app)
        await pilot.press("m")
        await settle(pilot)
        assert app.settings.metric == "accuracy" and "accuracy" in title(app)
        assert status(app) != loglik_line and "g 2000 c 2000" in status(app).replace("  ", " ")  # same cell, new value
        await pilot.press("m")
        await settle(pilot)
        assert app.settings.metric == "rank"
        await pilot.press("m")  # back to loglik: from memory, no worker
        assert app.settings.metric == "loglik" and app.computing is None
        assert status(app) == loglik_line
        await pilot.press("M")
        assert app.settings.metric == "rank" and app.computing is None
        await pilot.press("m", "d")
        await settle(pilot)
        assert app.settings.estimator == "difference" and "difference" in title(app)
        assert app.result.settings.estimator == "difference"
        assert status(app) != loglik_line
        await pilot.press("d")
        await settle(pilot)
        assert app.settings.estimator == "extractable" and app.result.settings.estimator == "extractable"
        await pilot.press("d")  # and round to the causal estimate again, from memory
        assert app.settings.estimator == "did" and status(app) == loglik_line


@run_async
async def test_estimation_runs_in_a_thread_keys_keep_working_and_quit_asks(panel_path, monkeypatch):
    """A slow estimate shows progress, does not block the cursor, and q asks before throwing it away."""
    import memtui.app.estimate_controller as controller

    release = threading.Event()
    reported = threading.Event()
    real = controller.cache.cached_estimate

    def slow(panel, settings, progress=None):
        if settings.metric == "accuracy":
            progress(0.0, "bootstrap")  # posted at once (later ones replace it in the queue until handled)
            reported.set()
            release.wait(HANG_S)
        return real(panel, settings, progress)

    monkeypatch.setattr(controller.cache, "cached_estimate", slow)
    app = make_app(panel_path)
    try:
        await _slow_estimate_session(app, reported, release)
    finally:
        release.set()  # a failed assertion must not leave the estimate thread waiting
    assert app.return_value == 0


async def _slow_estimate_session(app, reported, release):
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("m")
        assert app.computing is not None and app.computing.metric == "accuracy"
        assert await asyncio.to_thread(reported.wait, HANG_S)
        await pilot.pause()  # the progress message was posted before `reported` was set: it is handled now
        assert "bootstrap" in str(app.query_one("#busy-label").render())
        assert app.query_one("#busy").display and app.query_one("#panes").has_class("-stale")
        heatmap = app.query_one(Heatmap)
        before = heatmap.row
        await pilot.press("j")
        assert heatmap.row == before + 1  # keys work while computing
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmDialog) and app.is_running
        release.set()
        await settle(pilot)
        assert app.result.settings.metric == "accuracy"
        assert not app.query_one("#busy").display
        await pilot.press("q")  # nothing is lost now: quits at once
        await pilot.pause()


@run_async
async def test_switching_away_cancels_the_running_estimate(panel_path, monkeypatch):
    import memtui.app.estimate_controller as controller

    real = controller.cache.cached_estimate
    started, cancelled = threading.Event(), threading.Event()

    def slow(panel, settings, progress=None):
        if settings.metric == "accuracy":
            started.set()
            try:
                for i in range(100_000):  # reports until told to stop; never finishes on its own in a test
                    progress(i / 100_000, "bootstrap")
                    time.sleep(0.01)
            except Exception:
                cancelled.set()
                raise
        return real(panel, settings, progress)

    monkeypatch.setattr(controller.cache, "cached_estimate", slow)
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("m")
        assert app.computing is not None
        assert await asyncio.to_thread(started.wait, HANG_S)
        await pilot.press("M")  # back to loglik, which is in memory
        assert app.computing is None and app.settings.metric == "loglik"
        assert await asyncio.to_thread(cancelled.wait, HANG_S)  # the abandoned estimate's next report stops it


# ---- summaries and estimates -----------------------------------------------------------------------------------


@run_async
async def test_summaries_pane(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await pilot.pause()
        text = str(app.query_one("#summary-text").render())
        overall = app.result.overall
        assert "Overall: average memorisation over the" in text
        assert f"{abs(overall['estimate']):.4g}" in text
        assert "Pre-trend check:" in text
        for plot in ("instantaneous", "persistent", "residual"):
            widget = app.query_one(f"#plot-{plot}")
            assert widget.display and widget.size.height >= 7
        await pilot.press("m")
        await settle(pilot)
        assert "accuracy" in str(app.query_one("#summary-text").render())  # the visible pane updates in place


@run_async
async def test_estimates_table_sort_filter_scope_and_open(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one(EstimatesTable)
        assert table.has_focus
        result = app.result
        sig = export_frame(result, "profile", True)
        assert table.frame.columns == table_frame(sig).columns and table.frame.height == sig.height
        # the constants are said once above the table, not in ~35 columns of every row
        assert not set(table.frame.columns) & {"metric", "estimator", "scope", "alpha", "draws", "seed"}
        assert table.frame.columns[:4] == ["cohort", "checkpoint", "event_time", "estimate"]
        assert f"{sig.height} significant rows of {result.cells.height}" in str(
            app.query_one("#estimates-info").render()
        )
        await pilot.press("s")
        assert table.frame.height == result.cells.height
        await pilot.press("s")
        assert table.frame.height == sig.height
        # sort by estimate (column under the cursor), then reverse
        column = table._columns.index("estimate")
        for _ in range(column):
            await pilot.press("l")
        await pilot.press("greater_than_sign")
        values = table.frame["estimate"].to_list()
        assert values == sorted(values)
        await pilot.press("greater_than_sign")
        values = table.frame["estimate"].to_list()
        assert values == sorted(values, reverse=True)
        await pilot.press("G")
        assert table.row == table.frame.height - 1
        await pilot.press("g")
        top = table.row_values(0)
        await pilot.press("enter")
        await pilot.pause()
        assert app.active_pane == "profile"
        heatmap = app.query_one(Heatmap)
        assert int(result.cohorts[heatmap.row]) == top["cohort"]
        assert int(result.checkpoints[heatmap.column]) == top["checkpoint"]
        await pilot.press("3", "t")
        assert app.query_one(EstimatesPane).scope == "instantaneous"
        assert table.frame.height == export_frame(result, "instantaneous", True).height
        await pilot.press("t", "t", "t")
        assert app.query_one(EstimatesPane).scope == "profile"


@run_async
async def test_estimates_table_formats_only_the_rows_on_screen_of_ten_thousand(tmp_path, monkeypatch):
    """~10,000 rows: filling, sorting and paging format only the rows shown, never the whole frame (which is what
    would make them take seconds)."""
    import memtui.app.estimates as estimates

    sim = Simulation(n_cohorts=100, per_cohort=4, n_never=40, n_checkpoints=101, seed=2)
    path = write_synthetic(tmp_path / "big.h5", sim)
    panel = read_panel(path)
    result = cached_estimate(panel, Settings(draws=0))
    assert result.cells.height >= 9000
    app = MemtuiApp(panel, settings=Settings(draws=0))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        pane = app.query_one(EstimatesPane)
        pane.significant_only = False
        await pilot.press("3")
        table = app.query_one(EstimatesTable)
        assert table.frame.height == result.cells.height
        formatted = []
        real_cell = estimates.cell
        monkeypatch.setattr(
            estimates, "cell", lambda value, spec=None: formatted.append(value) or real_cell(value, spec)
        )
        await pilot.press("greater_than_sign", "greater_than_sign", "pagedown", "pagedown", "G", "g")
        await pilot.pause()
        first = table._columns[0]
        assert table.row == 0 and table.sort_by == first and table.descending
        assert table.frame[first].to_list() == sorted(table.frame[first].to_list(), reverse=True)
        # each key repaints a screenful or two (a few dozen rows); formatting the frame would be every row
        screen = table.scrollable_content_region.height * len(table._columns)
        assert 0 < len(formatted) <= 20 * screen < table.frame.height * len(table._columns) / 10


# ---- dialogs ---------------------------------------------------------------------------------------------------


@run_async
async def test_export_writes_the_csv_and_reports_where(panel_path, tmp_path):
    out = tmp_path / "out.csv"
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e")
        assert isinstance(app.screen, ExportDialog)
        path_input = app.screen.query_one("#export-path")
        assert path_input.value == "panel-loglik-did-profile-a0.05-d1000.csv"  # alpha and draws in the name
        path_input.value = str(out)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ExportDialog)
        written = pl.read_csv(out)
        expected = export_frame(app.result, "profile", True)
        assert written.height == expected.height and written.columns == expected.columns
        assert np.allclose(written["estimate"].to_numpy(), expected["estimate"].to_numpy())
        assert any(out.name in n.message for n in app._notifications)  # its path shortened to a notice's line

        # instantaneous, all rows: scope choice and the significant-only checkbox
        await pilot.press("e")
        dialog = app.screen
        dialog.query_one("#export-path").value = str(tmp_path / "inst.csv")
        dialog.query_one("#export-scope").focus()
        await pilot.press("right")
        assert dialog.scope == "instantaneous"
        dialog.query_one("#export-significant").value = False
        await pilot.click("#export-write")
        await pilot.pause()
        inst = pl.read_csv(tmp_path / "inst.csv")
        assert inst.height == app.result.instantaneous.height and set(inst["scope"]) == {"instantaneous"}


@run_async
async def test_export_to_an_unwritable_path_is_a_message_in_the_modal(panel_path, tmp_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e")
        dialog = app.screen
        dialog.query_one("#export-path").value = str(tmp_path / "no" / "such" / "folder" / "x.csv")
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert "does not exist" in str(dialog.query_one("#export-error").render())
        dialog.query_one("#export-path").value = str(tmp_path)  # a folder
        await pilot.press("enter")
        assert "is a folder" in str(dialog.query_one("#export-error").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, ExportDialog)


@run_async
async def test_settings_dialog_changes_alpha_draws_family_and_final_step(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")
        dialog = app.screen
        assert isinstance(dialog, SettingsDialog)
        await pilot.press("q", "m")  # main-screen keys do nothing under a dialog
        assert app.is_running and app.settings.metric == "loglik" and app.screen is dialog
        dialog.query_one("#set-alpha").value = "2"
        await pilot.click("#settings-apply")
        assert app.screen is dialog and "alpha must be from 0.0001 to 0.5" in str(
            dialog.query_one("#settings-error").render()
        )
        dialog.query_one("#set-alpha").value = "0.1"
        dialog.query_one("#set-draws").value = "200"
        dialog.query_one("#set-family").focus()
        await pilot.press("right")
        dialog.query_one("#set-final").focus()
        await pilot.press("left")  # the last completed checkpoint, by name
        await pilot.click("#settings-apply")
        await settle(pilot)
        s = app.settings
        assert (s.alpha, s.draws, s.family, s.final_step) == (0.1, 200, "all", 7000)
        assert app.result.settings == s and "α 0.1 · 200 draws · all" in title(app)
        await pilot.press("o", "escape")
        assert app.settings == s


@run_async
async def test_help_lists_every_key_and_palette_offers_the_actions(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
        for _, keys in key_sections(app):
            for key, description in keys:
                assert key in text and description in text
        for must in ("m", "Next metric", "Dim / hide / show", "Write estimates to CSV", "ctrl+p", "Launch extraction"):
            assert must in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

        titles = [c.title for c in app.get_system_commands(app.screen)]
        for expected in ("Metric: accuracy", "Estimator: DiD / difference / extractable", "Settings…", "Export CSV…",
                         "Go to Summaries", "Launch extraction", "Cancel extraction"):  # fmt: skip
            assert expected in titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Metric: rank")
        await settle(pilot, (*APP_GROUPS, CommandPalette._GATHER_COMMANDS_GROUP))  # the search runs in a worker
        await pilot.press("enter")
        await settle(pilot)
        assert app.settings.metric == "rank"


@run_async
async def test_panes_by_number_and_small_terminal(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for key, pane in zip("2341", ("summaries", "estimates", "extraction", "profile"), strict=True):
            await pilot.press(key)
            await pilot.pause()
            assert app.active_pane == pane
        heatmap = app.query_one(Heatmap)
        assert heatmap.size.height >= 5  # the matrix keeps room at 80 x 24
        await pilot.press("G", "dollar_sign")  # the cursor scrolls into view
        region = heatmap.scrollable_content_region
        assert heatmap.scroll_offset.y <= heatmap.row < heatmap.scroll_offset.y + region.height - 1


# ---- panels that are not (yet) estimable, and bad panels -------------------------------------------------------


def test_bad_panel_is_one_line_before_the_app_starts(tmp_path, capsys):
    bad = tmp_path / "bad.h5"
    bad.write_text("not a panel")
    assert run_app(bad) == 2
    err = capsys.readouterr().err
    assert err.startswith("memtui: ") and err.count("\n") == 1 and "not an HDF5 panel file" in err
    assert run_app(tmp_path / "missing.h5") == 2
    assert "no such file" in capsys.readouterr().err
    no_control = create_panel(tmp_path / "nc.h5", ids=range(4), treatment=[1, 1, 2, 2], steps=[0, 1, 2],
                              values={"loglik": np.zeros((4, 3))})  # fmt: skip
    assert run_app(no_control) == 2
    assert "no never-treated" in capsys.readouterr().err


def test_memtui_panel_opens_the_app(monkeypatch, panel_path):
    """`memtui PANEL` and `memtui` reach run_app with the panel (None = the shipped sample)."""
    import memtui.app

    seen = []
    monkeypatch.setattr(memtui.app, "run_app", lambda path: seen.append(path) or 0)
    from memtui.cli.main import main

    assert main([str(panel_path)]) == 0 and main([]) == 0
    assert seen == [panel_path, None]


@pytest.mark.parametrize("sample", ["synthetic", "tiny-gptneox"])
@run_async
async def test_shipped_samples_open_and_cycle_every_metric(sample):
    from memtui.panel.samples import sample_path

    app = open_app(sample_path(sample))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.result is not None and app.query_one(Heatmap).painted
        seen = [app.settings.metric]
        for _ in app.metrics[1:]:
            await pilot.press("m")
            await settle(pilot)
            assert app.result is not None, app.message
            seen.append(app.result.settings.metric)
        assert seen == app.metrics and seen[:3] == ["loglik", "accuracy", "rank"]


@run_async
async def test_panel_waiting_for_extraction_opens_on_the_extraction_pane(tmp_path):
    path = create_panel(tmp_path / "empty.h5", ids=range(6), treatment=[1000, 1000, 2000, 2000, NEVER, NEVER],
                        steps=[0, 1000, 2000], metrics=["loglik"])  # fmt: skip
    app = make_app(path)
    inbox = Inbox()
    async with app.run_test(size=SIZE, message_hook=inbox) as pilot:
        await settle(pilot)
        assert app.active_pane == "extraction" and app.result is None
        # no tab was ever activated but this one: a later activation of the first tab cannot switch back
        activated = [m.pane.id for m in inbox.seen if isinstance(m, TabbedContent.TabActivated)]
        assert activated and set(activated) == {"extraction"}, activated
        assert "no values yet" in app.message
        await pilot.press("1")
        assert "no values yet" in str(app.query_one("#profile-message").render())
        await pilot.press("e")  # nothing to export: a warning, not a dialog
        assert not isinstance(app.screen, ExportDialog)


@run_async
async def test_completed_checkpoints_update_the_profile(tmp_path):
    """When a checkpoint is written into the panel, the app re-reads it and re-estimates on the completed ones."""
    sim = Simulation(n_cohorts=4, per_cohort=12, n_never=50, n_checkpoints=6, seed=4)
    data = simulate(sim)
    full = data["values"]
    partial = {k: np.where(np.arange(len(data["steps"])) < 4, v, np.nan) for k, v in full.items()}
    path = create_panel(tmp_path / "growing.h5", ids=data["ids"], treatment=data["treatment"], steps=data["steps"],
                        values=partial, signs=data["signs"])  # fmt: skip
    app = make_app(path)
    inbox = Inbox()
    async with app.run_test(size=SIZE, message_hook=inbox) as pilot:
        await settle(pilot)
        assert "4/6 ckpts" in title(app) and len(app.result.checkpoints) == 4
        with PanelWriter(path) as writer:
            writer.write_checkpoint(4, {k: v[:, 4] for k, v in full.items()})
        # the poller notices the new checkpoint and the app re-reads the panel (then settle waits for the estimate)
        await inbox.until(pilot, lambda: inbox.count(PanelReloaded) > 0, PanelReloaded, what="reload")
        assert len(app.result.checkpoints) == 5
        assert "5/6 ckpts" in title(app)
        assert app.query_one(Heatmap).shape == (len(app.result.cohorts), 5)
        await pilot.press("2")
        assert "post-treatment cells" in str(app.query_one("#summary-text").render())


@run_async
async def test_notes_on_an_estimate_are_marked_on_the_profile_and_in_full_in_the_summaries(tmp_path):
    """Cohorts of 2 instances: the estimate's notes (bands unreliable) are a line over the heatmap and in the
    Summaries pane, and a note is shown as written, never read as markup."""
    path = write_synthetic(tmp_path / "small.h5", Simulation(n_cohorts=3, per_cohort=2, n_never=30, n_checkpoints=5))
    app = make_app(path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        notes = app.result.notes
        assert notes and any("small" in note for note in notes)
        line = app.query_one("#profile-notes")
        assert line.display and notes[0][:40] in str(line.render()) and "Summaries (2)" in str(line.render())
        await pilot.press("2")
        summary = str(app.query_one("#summary-text").render())
        for note in notes:
            assert f"Note: {note}" in summary

        hostile = dataclasses.replace(app.result, notes=["[@click=app.quit]q \x1b]0;pwned\x07", "[bold]b[/]"])
        app._set_result(hostile)
        await pilot.pause()
        summary = str(app.query_one("#summary-text").render())
        assert "Note: [@click=app.quit]q ?]0;pwned?" in summary and "Note: [bold]b[/]" in summary
        await pilot.press("1")
        assert "[@click=app.quit]q ?]0;pwned? (+1 more)" in str(app.query_one("#profile-notes").render())
        assert app.is_running


@run_async
async def test_without_notes_there_is_no_notes_line(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.result.notes == [] and not app.query_one("#profile-notes").display


# ---- extraction ------------------------------------------------------------------------------------------------


def test_progress_text():
    assert "No extraction job" in progress_text(None)
    progress = {"state": "running", "pid": 12, "checkpoint": 2000, "k": 2, "K": 5, "instances_done": 10,
                "instances_total": 40, "tokens_per_s": 12345.6, "eta_s": 75, "last_error": "oops"}  # fmt: skip
    text = progress_text(progress)
    assert "job running · pid 12" in text and "checkpoint 2 of 5 (step 2000)" in text
    assert "12,346 tokens/s · ETA 1m 15s" in text and "last error: oops" in text


def test_progress_text_lists_every_worker():
    progress = {"state": "running", "pid": 12, "k": 1, "K": 3, "workers": [
        {"state": "running", "host": "gpu-node-3", "pid": 12, "slurm_job": "991", "slurm_task": "4",
         "unit": "step000001000.rows000000000-000016300.of1", "tokens_per_s": 5e5, "device": "cuda"},
        {"state": "stale", "host": "gpu-node-9", "pid": "junk", "unit": 7},
    ]}  # fmt: skip
    text = progress_text(progress)
    assert "workers (2):" in text
    assert "running   gpu-node-3 slurm 991_4 pid 12 cuda, unit step000001000" in text and "500,000 tokens/s" in text
    assert "stale     gpu-node-9, no unit" in text  # wrong-typed fields read as absent, never crash


STEPS = (0, 1000, 2000, 3000, 4000)


def _tiny_extraction_panel(tmp_path):
    """A panel with token ids and a folder of tiny random GPT-NeoX checkpoints (no training: seconds)."""
    import torch

    from memtui.demo.train import DemoConfig, make_model

    cfg = DemoConfig(hidden=16, layers=1, heads=2, intermediate=32, seq_len=12)
    folder = tmp_path / "ckpts"
    for i, step in enumerate(STEPS):
        model = make_model(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * i)
        model.save_pretrained(folder / f"step{step}")
    rng = np.random.default_rng(0)
    treatment = np.array([1000] * 8 + [2000] * 8 + [3000] * 8 + [NEVER] * 24)
    tokens = rng.integers(0, 256, size=(len(treatment), cfg.seq_len))
    path = create_panel(tmp_path / "tiny.h5", ids=np.arange(len(treatment)), treatment=treatment, steps=STEPS,
                        tokens=tokens)  # fmt: skip
    return path, folder


@run_async
async def test_launch_a_tiny_cpu_extraction_watch_it_and_find_it_again_after_quitting(tmp_path):
    jobs = pytest.importorskip("memtui.extract.jobs")
    path, folder = _tiny_extraction_panel(tmp_path)
    try:
        app = make_app(path)
        inbox = Inbox()
        status = ExtractionPane.Status
        async with app.run_test(size=SIZE, message_hook=inbox) as pilot:
            await settle(pilot)
            assert app.active_pane == "extraction" and app.result is None  # nothing extracted yet
            pane = app.query_one(ExtractionPane)
            await inbox.until(pilot, lambda: inbox.count(status), status, what="the first poll")
            assert "No extraction job" in str(pane.query_one("#ex-status").render())
            pane.query_one("#ex-model").value = str(folder)
            pane.query_one("#ex-device").focus()
            await pilot.press("right")  # auto -> cpu
            pane.query_one("#ex-dtype").focus()
            await pilot.press("right")  # auto -> float32
            pane.query_one("#ex-batch").value = "8"
            await pilot.press("ctrl+r")
            await settle(pilot, JOB_GROUPS)
            assert "launched worker pid" in str(pane.query_one("#ex-error").render())
            # any state but "no job yet": a job that failed at once fails here, with its progress, not by waiting
            await inbox.until(pilot, lambda: pane.progress is not None, status, what="the job's first progress")
            assert pane.running or pane.progress.get("state") == "done", progress_text(pane.progress)
            # checkpoints complete: the app re-reads the panel and estimates on the completed ones
            # ... and no estimate computing: settle's last pause may handle a re-read that starts one, and the busy
            # bar beside the title leaves it room for its shortest wording only (a failure seen at load 4)
            await inbox.until(pilot, lambda: (app.panel.done.sum() >= 2 and app.result is not None
                                              and app.computing is None) or not
                              (pane.running or pane.progress.get("state") == "done"),
                              status, PanelReloaded, EstimateReady,
                              what="the first checkpoints and their profile")  # fmt: skip
            assert app.panel.done.sum() >= 2 and app.result is not None, progress_text(pane.progress)
            assert f"{int(app.panel.done.sum())}/5 ckpts" in title(app)
            assert len(app.result.checkpoints) == int(app.panel.done.sum())
            assert "job " in str(pane.query_one("#ex-status").render())
            await pilot.press("1", "q")  # quitting leaves the job running
            # a re-read may have started an estimate just before: the quit prompt then waits for it, and quits
            await asyncio.wait_for(_until(lambda: app.return_value is not None), HANG_S)
        assert app.return_value == 0
        assert jobs.read_progress(path)["state"] in ("running", "done")

        again = make_app(path)  # reopening the panel shows the job (running, or done by now) and its results
        inbox = Inbox()
        async with again.run_test(size=SIZE, message_hook=inbox) as pilot:
            pane = again.query_one(ExtractionPane)
            await inbox.until(pilot, lambda: pane.progress is not None, status, what="the job's progress")
            await inbox.until(pilot, lambda: (pane.progress.get("state") == "done" and again.panel.done.all()
                                              and again.computing is None) or
                              not (pane.running or pane.progress.get("state") == "done"),
                              status, PanelReloaded, EstimateReady, what="the job to finish")  # fmt: skip
            assert pane.progress.get("state") == "done", progress_text(pane.progress)
            assert "5/5 ckpts" in title(again) and len(again.result.checkpoints) == 5
            await pilot.press("4")
            assert "job done" in str(pane.query_one("#ex-status").render())
            assert "checkpoint" in str(pane.query_one("#ex-status").render())
            await pilot.press("ctrl+t")
            await settle(pilot, JOB_GROUPS)
            assert "no running job" in str(pane.query_one("#ex-error").render())
    finally:
        jobs.cancel(path)
    # as memtui's readers open it (without HDF5's file locking): a re-read the app started just before quitting may
    # still hold it open in a thread of this process, and HDF5 refuses a second open with other locking flags
    with h5py.File(path, "r", locking=False) as f:
        assert f["checkpoints/done"][()].all()


@run_async
async def test_launch_is_disabled_on_a_panel_without_token_ids(panel_path):
    pytest.importorskip("memtui.extract.jobs")
    app = make_app(panel_path)  # a synthetic panel: no token ids
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("4")
        pane = app.query_one(ExtractionPane)
        assert pane.query_one("#ex-launch").disabled and pane.query_one("#ex-cancel").disabled
        await pilot.press("ctrl+r")  # the key says why instead of launching
        assert "stores no token ids" in str(pane.query_one("#ex-error").render())
        assert not [w for w in app.workers if w.group == "extract-launch"]
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0


@run_async
async def test_launch_errors_stay_in_the_form(tmp_path):
    pytest.importorskip("memtui.extract.jobs")
    path = create_panel(tmp_path / "tokens.h5", ids=range(6), treatment=[1000, 1000, 2000, 2000, NEVER, NEVER],
                        steps=[0, 1000, 2000], tokens=np.zeros((6, 8), dtype=np.int64))  # fmt: skip
    app = make_app(path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("4")
        pane = app.query_one(ExtractionPane)
        assert not pane.query_one("#ex-launch").disabled
        pane.query_one("#ex-model").value = ""
        await pilot.press("ctrl+r")
        assert "Give a model" in str(pane.query_one("#ex-error").render())
        pane.query_one("#ex-model").value = str(tmp_path)
        pane.query_one("#ex-batch").value = "lots"
        await pilot.press("ctrl+r")
        assert "batch size must be auto or a whole number" in str(pane.query_one("#ex-error").render())
        await pilot.press("escape", "q")  # leave the form; q quits
        await pilot.pause()
    assert app.return_value == 0


def test_palette_survives_the_256_colour_downgrade():
    """Over SSH without COLORTERM Textual renders in 256 colours: every heatmap colour maps onto itself."""
    from rich.color import ColorSystem

    from memtui.app import palette

    for scheme in (palette.DARK, palette.LIGHT):
        for index in scheme.colours():
            number = palette.cube(index).downgrade(ColorSystem.EIGHT_BIT).number
            if index in scheme.ramp:
                assert number == index
            else:  # a grey may land on the grey ramp's neighbour: no more than one step (10) off
                assert max(abs(a - b) for a, b in zip(xterm_rgb(number), xterm_rgb(index), strict=True)) <= 10


def test_each_palette_moves_away_from_its_background():
    """Dark themes: |tau| = 0 is near-black and larger effects are lighter; light themes the other way round, so
    small effects never stand out against the background and the greys sit just off it."""
    from memtui.app.palette import lightness

    for scheme, sign in ((DARK, 1), (LIGHT, -1)):
        for ramp in (scheme.warm, scheme.cool):
            steps = np.diff([lightness(i) for i in ramp]) * sign
            assert (steps > 0).all(), (scheme, ramp)
        near_zero = [lightness(i) for i in (scheme.warm[0], scheme.cool[0], scheme.hidden_bg, scheme.pre_bg)]
        assert all(v < 25 for v in near_zero) if sign > 0 else all(v > 80 for v in near_zero)


@run_async
async def test_the_form_offers_this_machine_its_gpus_or_a_slurm_array(tmp_path):
    pytest.importorskip("memtui.extract.jobs")
    path, folder = _tiny_extraction_panel(tmp_path)
    app = make_app(path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        pane = app.query_one(ExtractionPane)
        shown = lambda: {w.id for w in pane.query(Input) if w.parent.display}  # noqa: E731
        assert {"ex-workers"} <= shown() and not {"ex-gpus", "ex-partition"} & shown()
        pane.query_one("#ex-mode").focus()
        await pilot.press("right")  # this machine's GPUs
        assert "ex-gpus" in shown() and not {"ex-workers", "ex-partition"} & shown()
        pane.query_one("#ex-model").value = str(folder)
        pane.query_one("#ex-gpus").value = "0,0"
        await pilot.press("ctrl+r")
        assert "distinct GPU indices" in str(pane.query_one("#ex-error").render())
        pane.query_one("#ex-mode").focus()
        await pilot.press("right")  # a SLURM array
        assert {"ex-workers", "ex-partition", "ex-time", "ex-account", "ex-gpt", "ex-extra"} <= shown()
        pane.query_one("#ex-time").value = "soon"
        await pilot.press("ctrl+r")
        assert "not a SLURM time" in str(pane.query_one("#ex-error").render())
        pane.query_one("#ex-time").value = "1:00:00"
        pane.query_one("#ex-extra").value = "qos=high"
        await pilot.press("ctrl+r")
        assert "long sbatch options" in str(pane.query_one("#ex-error").render())
        pane.query_one("#ex-workers").value = "two"
        await pilot.press("ctrl+r")
        assert "workers must be a whole number" in str(pane.query_one("#ex-error").render())


@run_async
async def test_launch_two_workers_from_the_app_and_see_both(tmp_path):
    jobs = pytest.importorskip("memtui.extract.jobs")
    path, folder = _tiny_extraction_panel(tmp_path)
    try:
        app = make_app(path)
        inbox = Inbox()
        status = ExtractionPane.Status
        async with app.run_test(size=SIZE, message_hook=inbox) as pilot:
            await settle(pilot)
            pane = app.query_one(ExtractionPane)
            pane.query_one("#ex-model").value = str(folder)
            pane.query_one("#ex-device").focus()
            await pilot.press("right")  # auto -> cpu
            pane.query_one("#ex-workers").value = "2"
            await pilot.press("ctrl+r")
            await settle(pilot, JOB_GROUPS)
            assert "launched 2 workers" in str(pane.query_one("#ex-error").render())
            finished = lambda: pane.progress and pane.progress.get("state") != "running" and app.panel.done.all()  # noqa: E731
            await inbox.until(pilot, finished, status, PanelReloaded, what="both workers to finish")
            assert pane.progress["state"] == "done", progress_text(pane.progress)
            assert "workers (2):" in str(pane.query_one("#ex-status").render())
    finally:
        jobs.cancel(path)


# ---- layout at 80 x 24, keys, themes (issue 10) ----------------------------------------------------------------


@run_async
async def test_status_line_is_one_line_at_80_columns_and_shortens_in_order(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        info = app.query_one("#cell-info")
        pane = app.query_one("#profile-pane")
        heatmap = app.query_one(Heatmap)
        for keys in ((), ("j", "i"), ("G", "dollar_sign"), ("h", "h", "h", "h")):
            await pilot.press(*keys)
            line = status(app)
            assert "\n" not in line and len(line) <= info.size.width - 2 and info.size.height == 1
            full = pane.cell_text(heatmap.row, heatmap.column)  # no width: the full wording
            assert line == full or len(full) > info.size.width - 2  # shortened only when the full one does not fit
            g = int(app.result.cohorts[heatmap.row])
            assert f"g {g}" in line or f"g {short_step(g)}" in line
            tau = app.result.matrix("estimate")[heatmap.row, heatmap.column]
            if np.isfinite(tau):
                assert "τ " in line and ("sig." in line or "n.s." in line or "significant" in line)
        # the shortest form keeps the place, tau and the band; the counts' words go first
        wide = pane.cell_text(heatmap.row, heatmap.column, 200)
        assert wide == pane.cell_text(heatmap.row, heatmap.column)
        assert len(pane.cell_text(heatmap.row, heatmap.column, 30)) <= 30


def _footer_keys(screen) -> list[str]:
    """The keys the screen's key bar shows whole."""
    return [k.key_display for k in screen.query_one(KeyBar).visible_keys()]


@run_async
async def test_every_pane_has_the_same_main_keys_visible_at_80_columns(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for pane in "1234":
            await pilot.press(pane)
            await settle(pilot)
            await pilot.pause()
            shown = _footer_keys(app.screen)
            # metric, estimator, settings, export and the key list: the same keys on every pane, all on screen
            for key in ("m", "d", "o", "e", "?"):
                assert key in shown, (pane, shown)
        await pilot.press("3")
        assert app.screen.query_one(KeyBar).region.height == 1
        await pilot.press("o")
        assert isinstance(app.screen, SettingsDialog)  # o is Settings on the Estimates pane too
        assert "esc" in _footer_keys(app.screen) and "m" not in _footer_keys(app.screen)  # the dialog's own keys
        await pilot.press("escape")


@run_async
async def test_a_dialog_footer_names_enter_whichever_field_has_the_focus(panel_path):
    """Textual's Input hides its enter binding: a focused text field once left only `esc` in a dialog's footer."""
    from memtui.app.open_dialog import OpenPanelDialog

    app = make_app(panel_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for key, dialog, fields in (
            ("o", SettingsDialog, ("#set-estimator", "#set-alpha", "#set-draws", "#set-seed")),
            ("e", ExportDialog, ("#export-path", "#export-scope")),
            ("ctrl+o", OpenPanelDialog, ("#open-path",)),
        ):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, dialog)
            for field in fields:
                app.screen.query_one(field).focus()
                await pilot.pause()
                shown = _footer_keys(app.screen)
                assert "⏎" in shown and "esc" in shown, (dialog.__name__, field, shown)  # ⏎: how the footer shows enter
                enter = next(b for b in app.screen.active_bindings.values() if b.binding.key == "enter")
                assert enter.binding.description in ("Apply", "Write", "Open"), (field, enter)
            await pilot.press("escape")
            await pilot.pause()


@run_async
async def test_heatmap_axis_labels_first_and_last_checkpoint_and_legend_explains_the_blank_column(tmp_path):
    sim = Simulation(n_cohorts=9, per_cohort=6, n_never=40, n_checkpoints=21, seed=3)  # 0 .. 20k
    app = make_app(write_synthetic(tmp_path / "p.h5", sim))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        heatmap = app.query_one(Heatmap)
        for keys in ((), ("dollar_sign",), ("0",), ("l", "l", "l")):
            await pilot.press(*keys)
            header = "".join(seg.text for seg in heatmap._header_strip())
            labels = header.split()
            first, last = (short_step(s) for s in app.result.checkpoints[[0, -1]])
            assert labels[0] == first and labels[-1] == last, header  # never cut, never dropped
            assert len(header) == len(app.result.checkpoints) * heatmap.cell_width
        assert not np.isfinite(app.result.matrix("estimate")[:, 0]).any()  # the base period column
        assert f"blank c={short_step(app.result.checkpoints[0])}" in str(app.query_one("#legend").render())


@run_async
async def test_p_folds_the_path_plot_so_the_heatmap_gets_the_rows(tmp_path):
    sim = Simulation(n_cohorts=16, per_cohort=4, n_never=40, n_checkpoints=18, seed=3)
    app = make_app(write_synthetic(tmp_path / "p.h5", sim))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        heatmap = app.query_one(Heatmap)
        before = heatmap.size.height
        await pilot.press("p")
        await pilot.pause()
        assert not app.query_one("#path-plot").display and heatmap.size.height >= before + 8
        assert heatmap.size.height - 1 >= 16  # every cohort row on screen
        await pilot.press("m")  # a new estimate keeps the plot folded
        await settle(pilot)
        assert not app.query_one("#path-plot").display
        await pilot.press("p")
        await pilot.pause()
        assert app.query_one("#path-plot").display and heatmap.size.height == before


@run_async
async def test_help_has_one_key_column_and_no_duplicates_and_palette_one_keys_entry(panel_path):
    app = make_app(panel_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        sections = key_sections(app)
        for _, keys in sections:
            assert len(keys) == len(set(keys))
            assert len({k for k, _ in keys}) == len(keys), keys  # one meaning per key in a section
        dialogs = dict(sections)["Dialogs"]
        assert [d for k, d in dialogs if k == "enter"] == ["apply / write / open"]  # not also "Next option"
        await pilot.press("question_mark")
        text = str(app.screen.query_one("#help-text").render())
        width = max(len(k) for _, keys in sections for k, _ in keys) + 2
        for _, keys in sections:
            for key, description in keys:
                # one column for every key, at least two spaces before the words
                assert f"  {key:<{width}}{description.split()[0]}" in text, key
        assert "esc" in _footer_keys(app.screen) and "m" not in _footer_keys(app.screen)
        await pilot.press("escape")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles.count("Keys") == 1


@run_async
async def test_export_asks_before_overwriting(panel_path, tmp_path):
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    app = make_app(panel_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e")
        dialog = app.screen
        dialog.query_one("#export-path").value = str(out)
        await pilot.press("enter")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        assert app.screen is dialog and out.read_text() == "keep me\n"
        await pilot.press("enter")
        await pilot.press("y")
        await pilot.pause()
        assert not isinstance(app.screen, (ConfirmDialog, ExportDialog))
        assert pl.read_csv(out).height == export_frame(app.result, "profile", True).height


RUNNING = {"state": "running", "pid": 99, "checkpoint": 2000, "k": 1, "K": 2, "tokens_per_s": 1500.0, "eta_s": 720}


def test_progress_numbering_and_dead_jobs():
    text = progress_text(RUNNING, steps=[0, 1000, 2000, 3000])
    assert "checkpoint 3 of 4 (step 2000) · this job's 1 of 2" in text and "1,500 tokens/s · ETA 12m 00s" in text
    for state in ("cancelled", "stale", "failed", "done"):
        dead = progress_text({**RUNNING, "state": state}, steps=[0, 1000, 2000, 3000])
        assert "tokens/s" not in dead and "ETA" not in dead and f"job {state}" in dead
    assert job_indicator(RUNNING, np.array([True, True, False, False])) == "extracting 2/4 · ETA 12m 00s"
    assert job_indicator({**RUNNING, "state": "cancelled"}, np.array([True])) == ""
    assert job_indicator(None, None) == ""


@run_async
async def test_a_running_job_shows_on_every_pane_disables_launch_and_ctrl_t_asks(tmp_path, monkeypatch):
    pytest.importorskip("memtui.extract.jobs")
    path = create_panel(tmp_path / "tokens.h5", ids=range(6), treatment=[1000, 1000, 2000, 2000, NEVER, NEVER],
                        steps=[0, 1000, 2000, 3000], tokens=np.zeros((6, 8), dtype=np.int64))  # fmt: skip
    cancels = []
    monkeypatch.setattr(ExtractionPane, "_cancel", lambda self, path: cancels.append(path))
    app = make_app(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        pane = app.query_one(ExtractionPane)
        done = np.array([True, True, False, False])
        pane.post_message(ExtractionPane.Status(RUNNING, done, True))  # what the poller posts for a live job
        await pilot.pause()
        for key in "1234":
            await pilot.press(key)
            assert str(app.query_one("#job").render()) == "extracting 2/4 · ETA 12m 00s"
            assert app.query_one("#job").region.width > 0
        assert pane.query_one("#ex-launch").disabled and not pane.query_one("#ex-cancel").disabled
        await pilot.press("ctrl+r")
        assert "already running" in str(pane.query_one("#ex-error").render())
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, ConfirmDialog) and not cancels
        await pilot.press("n")
        assert not cancels
        await pilot.press("ctrl+t", "y")
        assert cancels == [path]
        pane.post_message(ExtractionPane.Status({**RUNNING, "state": "cancelled"}, done, True))
        await pilot.pause()
        assert not app.query_one("#job").display and not pane.query_one("#ex-launch").disabled
        assert "tokens/s" not in str(pane.query_one("#ex-status").render())


@run_async
async def test_theme_is_taken_from_the_theme_and_remembered(panel_path, tmp_path, monkeypatch):
    from memtui.app import config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    app = make_app(panel_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.theme = "textual-light"
        await pilot.pause()
        from textual.color import Color

        # the top bar, the status line and the heatmap (labels and header strip): dark text on a light ground
        heatmap = app.query_one(Heatmap)
        styles = [app.query_one(s).rich_style for s in ("#title", "#cell-info")]
        styles += [heatmap.get_component_rich_style(c) for c in ("heatmap--header", "heatmap--label")]
        styles.append(heatmap._header_strip()._segments[0].style + heatmap.rich_style)
        for style in styles:
            text, ground = Color.from_rich_color(style.color), Color.from_rich_color(style.bgcolor)
            assert text.brightness < 0.5 < ground.brightness, style
        assert heatmap.background_colors[1] == Color.parse(app.theme_variables["background"])
        # the cells: the light palette (pale near zero), in the matrix and in the legend under it
        light = {palette.cube(i) for i in palette.LIGHT.colours()} | {heatmap.rich_style.bgcolor}
        drawn = {seg.style.bgcolor for row in range(3) for seg in heatmap._row_strip(row)._segments}
        assert drawn <= light and len(drawn) > 2, drawn
        legend = app.query_one(Legend)
        legend_colours = {seg.style.bgcolor for seg in legend.render_line(0)._segments if seg.style} - {
            legend.rich_style.bgcolor,
            None,
        }
        assert legend_colours and legend_colours <= light, legend_colours
        app.theme = "textual-dark"  # and back: the dark palette again
        await pilot.pause()
        assert heatmap.scheme is palette.DARK
        app.theme = "textual-light"
        await pilot.pause()
        assert heatmap.scheme is palette.LIGHT
    assert config.load().theme == "textual-light"
    assert (tmp_path / "cfg" / "memtui" / "config.json").is_file()
    again = make_app(panel_path)
    assert again.theme == "textual-light"


def test_a_mangled_config_file_is_the_defaults(tmp_path, monkeypatch):
    from memtui.app import config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "memtui").mkdir()
    for junk in ("{", "[1]", '{"theme": 5, "animations": "yes"}', "\x00\xff"):
        (tmp_path / "memtui" / "config.json").write_text(junk)
        assert config.load() == config.Preferences()
    config.save(config.Preferences(theme="nord", animations=False))
    assert config.load() == config.Preferences(theme="nord", animations=False)
    assert not [p for p in (tmp_path / "memtui").iterdir() if p.name != "config.json"]  # no temporary left
