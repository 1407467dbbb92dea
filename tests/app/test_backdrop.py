"""The panes dimmed behind a dialog, drawn while idle (app/backdrop.py): a dialog drawn on them paints what Textual's
own see-through background paints, and they are drawn anew whenever the panes changed since."""

from __future__ import annotations

import dataclasses

import pytest
from app_pilot import run_async, settle
from test_app_spares import _dialog_shot, _spares_built

from memtui.app.dialogs import ExportDialog, HelpScreen, SettingsDialog
from memtui.app.heatmap import Heatmap
from memtui.app.main import MemtuiApp
from memtui.app.open_dialog import OpenPanelDialog
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8, seed=1)

pytestmark = pytest.mark.spares  # drawn ahead from a built dialog's colour: the spares on


@pytest.fixture
def panel_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    # built by hand (_spares_built, _dim_ahead): the idle timer drawing the panes ahead again between two steps of
    # a test would hide what it tests
    monkeypatch.setattr(MemtuiApp, "spares_every_s", None)
    return write_synthetic(tmp_path / "panel.h5", SIM)


async def _dimmed_ahead(app: MemtuiApp, pilot) -> None:
    await _spares_built(app, pilot)
    app._dim_ahead()
    colour = app.spares.background()
    assert colour is not None and colour.a < 1
    assert app.backdrop.fresh(app.screen, colour) and app._backdrop_colour() is None


@run_async
async def test_a_dialog_on_the_panes_dimmed_ahead_paints_what_textual_paints(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for key, kind in (("o", SettingsDialog), ("e", ExportDialog), ("question_mark", HelpScreen),
                          ("ctrl+o", OpenPanelDialog)):  # fmt: skip
            await _dimmed_ahead(app, pilot)
            hits, lines = app.backdrop.hits, app.backdrop.lines_kept
            kept = await _dialog_shot(app, pilot, key, kind)
            assert app.backdrop.lines_kept > lines, key  # drawn on the lines cut ahead from the segments made ahead
            assert app.backdrop.hits == hits, key
            await _spares_built(app, pilot)
            app.backdrop._key = None  # nothing kept: Textual's BackgroundScreen draws the panes, as it always did
            misses = app.backdrop.misses
            drawn = await _dialog_shot(app, pilot, key, kind)
            assert app.backdrop.misses > misses, key
            assert kept == drawn, key


@run_async
async def test_the_panes_changed_since_are_dimmed_anew(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _dimmed_ahead(app, pilot)
        before = app.export_screenshot()
        await pilot.press("right")  # the cursor moves: the main screen draws a frame
        await pilot.pause()
        assert app.export_screenshot() != before
        colour = app.spares.background()
        assert not app.backdrop.fresh(app.screen, colour) and app._backdrop_colour() == colour
        hits, misses = app.backdrop.hits, app.backdrop.misses
        moved = await _dialog_shot(app, pilot, "o", SettingsDialog)
        assert app.backdrop.hits == hits and app.backdrop.misses > misses  # not the panes as they were: drawn anew
        await _spares_built(app, pilot)
        app.backdrop._key = None
        assert moved == await _dialog_shot(app, pilot, "o", SettingsDialog)


@run_async
async def test_the_lines_kept_are_taken_only_by_a_dialog_of_the_size_and_styles_they_were_cut_for(panel_path):
    """A dialog's lines are the dimmed panes with its own style added to each segment: lines cut for a dialog of
    another size or style are not its lines. It then cuts its own from the segments kept, and keeps them (its own
    next render, before the panes draw again, takes those)."""
    from textual.geometry import Size

    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        shots = []
        for other in ("size", "style"):
            await _dimmed_ahead(app, pilot)
            key, lines = app.backdrop._lines
            made, panes, size, style, *rest = key
            if other == "size":
                size = Size(size.width - 1, size.height)
            else:
                style = dataclasses.replace(style, italic=True)  # each segment of that dialog's made italic
            app.backdrop._lines = ((made, panes, size, style, *rest), lines)
            hits = app.backdrop.hits
            shots.append(await _dialog_shot(app, pilot, "o", SettingsDialog))
            assert app.backdrop.hits > hits, other  # its first frame cut them anew from the segments kept
            assert app.backdrop._lines[0] == key  # and kept them
        await _spares_built(app, pilot)
        app.backdrop._key = None  # Textual's own
        assert shots[0] == shots[1] == await _dialog_shot(app, pilot, "o", SettingsDialog)


@run_async
async def test_panes_waiting_to_be_drawn_are_not_taken_as_kept(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _dimmed_ahead(app, pilot)
        heatmap = app.query_one(Heatmap)
        heatmap.refresh()  # marked to be drawn, no frame yet: the next frame may differ from the one kept
        assert not app.backdrop.fresh(app.screen, app.spares.background())
        await pilot.pause()
        await pilot.pause()


@run_async
async def test_the_command_palette_on_the_panes_dimmed_ahead_paints_what_textual_paints(panel_path):
    from textual.command import CommandPalette

    app = MemtuiApp(read_panel(panel_path))
    shots = []
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for kept in (True, False):
            await _dimmed_ahead(app, pilot)
            if not kept:
                app.backdrop._key = None  # Textual's BackgroundScreen draws the panes
            hits, misses = app.backdrop.hits, app.backdrop.misses
            await pilot.press("ctrl+p")
            await settle(pilot, (CommandPalette._GATHER_COMMANDS_GROUP,))
            assert isinstance(app.screen, CommandPalette)
            assert (app.backdrop.hits > hits) if kept else (app.backdrop.misses > misses)
            shots.append(app.export_screenshot())
            await pilot.press("escape")
            await pilot.pause()
    assert shots[0] == shots[1]


def test_the_panes_are_dimmed_ahead_once_they_drew_nothing_for_a_tick():
    from memtui.app.backdrop import Backdrop

    backdrop = Backdrop()
    assert not backdrop.quiet()  # never asked: a tick first
    assert backdrop.quiet()
    backdrop.drawn()  # a frame (a cursor held down draws one after another)
    assert not backdrop.quiet()
    backdrop.drawn()
    assert not backdrop.quiet()
    assert backdrop.quiet()  # a tick without a frame


@run_async
async def test_a_pane_filled_while_idle_paints_what_one_filled_on_its_key_paints(panel_path):
    """The Estimates and Profile panes, not shown when a new estimate comes, are filled with it while idle: their
    key then paints what it painted when it filled them."""
    shots = {}
    for ahead in (True, False):
        app = MemtuiApp(read_panel(panel_path))
        async with app.run_test(size=(100, 32)) as pilot:
            await settle(pilot)
            await pilot.press("2")  # Summaries shown: the next estimate reaches the other panes later
            await settle(pilot)
            await pilot.press("m")  # another metric: a new estimate
            await settle(pilot)
            assert app._pane_to_fill() == "estimates"
            if ahead:
                app._fill_pane_ahead()
                assert app._pane_to_fill() == "profile"
                app._fill_pane_ahead()
                assert app._pane_to_fill() is None
            for key in ("3", "1"):
                await pilot.press(key)
                await settle(pilot)
                shots.setdefault(key, []).append(app.export_screenshot())
    assert shots["3"][0] == shots["3"][1] and shots["1"][0] == shots["1"][1]
