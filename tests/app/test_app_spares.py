"""Dialogs built ahead (app/spares.py) and panes restyled alone on a focus change (restyle.RestyleSelfOnFocus): the
user sees what a dialog built when the key is pressed shows, and what Textual's own restyle paints."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from app_pilot import run_async, settle
from textual._wait import wait_for_idle
from textual.color import Color
from textual.widgets import Input, Label

from memtui.app.dialogs import ExportDialog, HelpScreen, SettingsDialog
from memtui.app.main import MemtuiApp
from memtui.app.open_dialog import OpenPanelDialog, PanelTree
from memtui.app.restyle import RestyleSelfOnFocus, _focus_ancestor_selectors
from memtui.app.spares import same
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8, seed=1)


pytestmark = pytest.mark.spares  # the spares are what these test


@pytest.fixture
def panel_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the theme is remembered: not in the user's
    monkeypatch.chdir(tmp_path)  # the export dialog names the working folder
    return write_synthetic(tmp_path / "panel.h5", SIM)


def test_same_compares_values_by_value_and_objects_by_identity():
    a, b = Settings(metric="loglik"), Settings(metric="loglik")
    thing = object()
    assert same((a, (1, 2), "x", Path("p"), None, thing), (b, (1, 2), "x", Path("p"), None, thing))
    assert not same((a,), (dataclasses.replace(a, alpha=0.1),))
    assert not same((object(),), (object(),))  # a result equal in value but another object: built again
    assert not same((1, 2), (1,))
    assert not same((1,), (1.0,))  # another type: built again


async def _spares_built(app: MemtuiApp, pilot) -> None:
    """Build every spare now (the app does it on a timer while idle), waiting on their mounting, not a clock."""
    for _ in range(200):
        if app.spares_ready():
            return
        app._build_spare()
        await pilot.pause()
    raise AssertionError("the spares were never built")


async def _shot(app: MemtuiApp, pilot) -> str:
    for field in app.screen.query(Input):
        field.cursor_blink = False  # the cursor shown, whatever the phase of its blink (a clock's, not the dialog's)
    await pilot.pause()
    return app.export_screenshot()


async def _dialog_shot(app: MemtuiApp, pilot, key: str, kind: type) -> str:
    await pilot.press(key)
    await pilot.pause()
    assert isinstance(app.screen, kind)
    assert app.screen.styles.background.a < 1  # ModalScreen's CSS applies: the panes show dimmed behind it
    shot = await _shot(app, pilot)
    await pilot.press("escape")
    await pilot.pause()
    return shot


@run_async
async def test_a_spare_dialog_paints_what_a_dialog_built_on_the_key_paints(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _spares_built(app, pilot)
        spare = app.spares._built["settings"].screen
        from_spare = await _dialog_shot(app, pilot, "o", SettingsDialog)
        assert spare not in app.spares._built.values() and not spare.is_running  # shown once, removed on closing
        fresh = await _dialog_shot(app, pilot, "o", SettingsDialog)  # no spare yet: built on the key, as before
        assert from_spare == fresh
        await _spares_built(app, pilot)
        from_spare = await _dialog_shot(app, pilot, "e", ExportDialog)
        fresh = await _dialog_shot(app, pilot, "e", ExportDialog)
        assert from_spare == fresh
        await _spares_built(app, pilot)
        spare = app.spares._built["help"].screen
        from_spare = await _dialog_shot(app, pilot, "question_mark", HelpScreen)
        assert not spare.is_running
        fresh = await _dialog_shot(app, pilot, "question_mark", HelpScreen)
        assert from_spare == fresh


@run_async
async def test_a_spare_follows_the_settings_and_the_theme_changed_after_it_was_built(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _spares_built(app, pilot)
        await pilot.press("d")  # another estimator: the spare built before is not the dialog for these settings
        await settle(pilot)
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        await pilot.press("o")
        await pilot.pause()
        assert app.screen.settings == app.settings
        shown = app.export_screenshot()
        await pilot.press("escape")
        await _spares_built(app, pilot)  # built for these settings, under the old theme
        app.theme = "nord" if app.theme != "nord" else "textual-dark"
        await pilot.pause()
        from_spare = await _dialog_shot(app, pilot, "o", SettingsDialog)
        fresh = await _dialog_shot(app, pilot, "o", SettingsDialog)
        assert from_spare == fresh  # restyled for the theme shown, not the one it was built under
        assert from_spare != shown


async def _first_frame(app: MemtuiApp, pilot, key: str, kind: type):
    """What the first frame drawn after ``key`` for a screen of ``kind`` is (Textual's update renderable)."""
    frames = []
    display = app._display

    def record(screen, renderable) -> None:
        if isinstance(screen, kind) and renderable is not None:
            frames.append(renderable)
        display(screen, renderable)

    app._display = record
    try:
        await pilot.press(key)
        await pilot.pause()
    finally:
        app._display = display
    assert frames, "no frame drawn for the dialog"
    return frames[0]


@run_async
@pytest.mark.parametrize(("key", "kind"), [("o", SettingsDialog), ("e", ExportDialog), ("question_mark", HelpScreen),
                                         ("ctrl+o", OpenPanelDialog)])  # fmt: skip
async def test_a_spare_dialogs_first_frame_is_the_whole_screen(panel_path, key, kind):
    """A spare is rendered once while idle (its widgets' lines kept): the first frame when it is shown still draws
    the whole screen (the panes dimmed around the dialog), not only what changed since that render."""
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _spares_built(app, pilot)
        kinds = {SettingsDialog: "settings", ExportDialog: "export", HelpScreen: "help", OpenPanelDialog: "open"}
        spare = app.spares._built[kinds[kind]].screen
        first = await _first_frame(app, pilot, key, kind)
        assert app.screen is spare
        assert type(first).__name__ == "LayoutUpdate" and first.region == app.screen.region


class _NoTick:
    """An update timer that never ticks."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@run_async
@pytest.mark.parametrize(("key", "kind"), [("o", SettingsDialog), ("ctrl+o", OpenPanelDialog)])
async def test_a_spare_dialogs_first_frame_does_not_wait_for_the_update_timers_tick(panel_path, key, kind):
    """Textual draws a screen's changes on its update timer's next tick; a spare, laid out ahead, waited for it
    (15 ms of the 30-35 ms from its key to its frame). Its first frame is drawn once the messages of its showing are
    handled: with a timer that never ticks, it is still drawn, whole."""
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _spares_built(app, pilot)
        spare = app.spares._built["settings" if kind is SettingsDialog else "open"].screen
        spare._Screen__update_timer = _NoTick()
        frames, display = [], app._display
        app._display = lambda screen, update: (frames.append(update), display(screen, update))
        try:
            await pilot.press(key)  # (Pilot.pause would draw the frame itself: Textual's tests force the tick)
            await wait_for_idle(0)
        finally:
            app._display = display
        assert app.screen is spare
        assert frames and type(frames[0]).__name__ == "LayoutUpdate" and frames[0].region == app.screen.region


@run_async
async def test_a_spare_built_before_new_rules_joined_the_stylesheet_is_restyled_while_idle(panel_path):
    """A widget class mounted for the first time adds its CSS to the stylesheet (new rules): a spare styled before
    is restyled while idle, not when its key is pressed, and paints what a dialog built on the key paints."""
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _spares_built(app, pilot)
        spare = app.spares._built["settings"].screen
        app.stylesheet.add_source("SettingsDialog Label { color: red !important; }", ("test", "new rules"))
        assert not app.spares_ready()  # styled with the rules before
        await _spares_built(app, pilot)
        assert app.spares._built["settings"].screen is spare  # the same instance, restyled
        styled = []
        apply = app.stylesheet.apply
        app.stylesheet.apply = lambda node, **kw: (styled.append(node), apply(node, **kw))[1]
        await pilot.press("o")
        await pilot.pause()
        assert app.screen is spare and spare.query(Label).first().styles.color == Color.parse("red")  # the new rule
        from_spare = await _shot(app, pilot)
        await pilot.press("escape")
        await pilot.pause()
        restyled_on_show = [node for node in styled if node is spare or spare in node.ancestors]
        assert len(restyled_on_show) < len(list(spare.walk_children(with_self=True))) / 4  # the focus's, not all
        fresh = await _dialog_shot(app, pilot, "o", SettingsDialog)
        assert from_spare == fresh


class FocusStyled(MemtuiApp):
    """A rule that styles the fields under the Extraction pane by the pane's focus: restyling the pane alone would
    leave them as they were."""

    CSS_PATH = str(Path(sys.modules[MemtuiApp.__module__].__file__).with_name(MemtuiApp.CSS_PATH))
    CSS = "ExtractionPane:focus Input { background: red; }"


async def _pane_shots(app: MemtuiApp) -> list[str]:
    shots = []
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for key in ("4", "2", "4", "1", "2"):
            await pilot.press(key)
            await settle(pilot)
            shots.append(app.export_screenshot())
    return shots


@run_async
@pytest.mark.parametrize("kind", [MemtuiApp, FocusStyled])
async def test_a_pane_restyled_on_focus_paints_what_textuals_restyle_paints(panel_path, monkeypatch, kind):
    ours = await _pane_shots(kind(read_panel(panel_path)))
    monkeypatch.delattr(RestyleSelfOnFocus, "watch_has_focus")  # Textual's own: the pane and all under it
    theirs = await _pane_shots(kind(read_panel(panel_path)))
    assert len(set(ours)) >= 3
    assert ours == theirs


@run_async
async def test_the_rules_styling_under_a_focused_widget_are_found(panel_path):
    app = FocusStyled(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        parts = _focus_ancestor_selectors(app.stylesheet)
        assert {part.name for part in parts} >= {"Tabs", "ExtractionPane"}  # Textual's Tabs:focus .underline--bar
        assert _focus_ancestor_selectors(app.stylesheet) is parts  # kept while the rules are the same


async def _open_dialog_shot(app: MemtuiApp, pilot, parses: list) -> str:
    await settle(pilot)
    parse = app.stylesheet.parse
    app.stylesheet.parse = lambda: (parses.append(1), parse())[1]  # counted from the key on
    try:
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, OpenPanelDialog)
        tree = app.screen.query_one(PanelTree)
        for _ in range(200):  # the listing is in (panel.h5)
            if tree.root.children:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.2)
        return await _shot(app, pilot)
    finally:
        app.stylesheet.parse = parse


@run_async
async def test_the_open_dialogs_css_parsed_while_idle_paints_what_its_first_mount_parses(panel_path, monkeypatch):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for _ in range(200):
            if app.idle_work_done():
                break
            await pilot.pause(0.05)
        assert app._open_dialog_ready
        assert any(name == "DirectoryTree.DEFAULT_CSS" for _, name in app.stylesheet.source)
        parses: list = []
        ahead = await _open_dialog_shot(app, pilot, parses)
        assert not parses  # nothing new to parse on the key
    monkeypatch.setattr(MemtuiApp, "spares_every_s", None)  # nothing ahead: the dialog's mount adds its CSS
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        parses = []
        on_the_key = await _open_dialog_shot(app, pilot, parses)
        assert parses  # (what the work ahead saves)
    assert ahead == on_the_key


@run_async
async def test_a_spare_open_dialog_lists_its_folder_as_it_is_when_shown(panel_path, monkeypatch):
    """The open dialog is built ahead like the others, but its tree lists nothing until it is shown: a panel written
    after the spare was built is in the listing, and the dialog paints what one built on the key paints."""
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await _spares_built(app, pilot)
        spare = app.spares._built["open"].screen
        tree = spare.query_one(PanelTree)
        await pilot.pause(0.2)
        assert not tree.root.children and not tree._listing  # nothing listed ahead
        write_synthetic(panel_path.with_name("later.h5"), SIM)
        from_spare = await _open_dialog_shot(app, pilot, [])
        assert app.screen is spare
        assert {child.data.path.name for child in tree.root.children} == {"panel.h5", "later.h5"}
    monkeypatch.setattr(MemtuiApp, "spares_every_s", None)  # nothing ahead: built and listed on the key
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        on_the_key = await _open_dialog_shot(app, pilot, [])
    assert ">later<" in from_spare and from_spare == on_the_key  # (the tree draws a suffix apart)
