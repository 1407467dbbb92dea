"""A theme change restyles with each widget refreshed once and the CSS parsed once per theme (app/restyle.py): the
screen it paints is the one Textual's own restyle paints, and the rules reused are the rules a fresh parse gives."""

from __future__ import annotations

import dataclasses
import gc
from contextlib import contextmanager

import pytest
from app_pilot import idle_work_done, run_async, settle
from textual.css.stylesheet import Stylesheet

from memtui.app import open_app
from memtui.app.main import MemtuiApp
from memtui.app.restyle import batched_refreshes, css_variables
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8, seed=1)
THEMES = ("textual-light", "textual-dark", "textual-light", "nord")


@pytest.fixture
def panel_path(tmp_path):
    return write_synthetic(tmp_path / "panel.h5", SIM)


@pytest.fixture
def suite_paths(tmp_path):
    """Two models of one design: the Compare pane exists (five panes, four hidden)."""
    return [write_synthetic(tmp_path / f"{n}.h5", dataclasses.replace(SIM, seed=s)) for n, s in (("a", 1), ("b", 2))]


def textuals_own(app: MemtuiApp) -> MemtuiApp:
    """The app with Textual's restyle and parse (the instance's wrappers removed, the class's methods show again):
    every node restyled on each change, the hidden panes' too, nothing worked out ahead."""
    for name in ("update", "update_nodes", "reparse", "set_variables", "apply"):
        delattr(app.stylesheet, name)
    return app


@contextmanager
def recording_restyles(app: MemtuiApp, styled: list):
    """Within it, every node the stylesheet restyles is appended to ``styled``."""
    update_nodes = app.stylesheet.update_nodes

    def recorded(nodes, animate=False):
        nodes = list(nodes)
        styled.extend(nodes)
        update_nodes(nodes, animate=animate)

    app.stylesheet.update_nodes = recorded
    try:
        yield styled
    finally:
        app.stylesheet.update_nodes = update_nodes


PANES = ("2", "3", "4", "5", "1")


async def _screens_through_themes(app: MemtuiApp, idle: bool = False, themes: tuple[str, ...] = THEMES) -> list[str]:
    """The screen after each theme change, then each pane shown after the last (each pane shown once before, so
    that each has drawn what the theme recolours: the Compare pane its grid). ``idle``: the app's idle work done
    after each change (the panes left out restyled then), else the panes are shown at once."""
    shots = []
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for key in PANES:
            await pilot.press(key)
            await settle(pilot)
        for theme in themes:
            app.theme = theme
            await settle(pilot)
            if idle:
                await idle_work_done(pilot)
            shots.append(app.export_screenshot())
        for key in PANES:  # shown after the changes: styled for the last theme
            await pilot.press(key)
            await settle(pilot)
            shots.append(app.export_screenshot())
    return shots


@run_async
async def test_theme_changes_paint_what_textuals_own_restyle_paints(suite_paths):
    ours = await _screens_through_themes(open_app(suite_paths))
    theirs = await _screens_through_themes(textuals_own(open_app(suite_paths)))
    assert len(set(ours)) > 2  # the themes do change the screen
    assert ours == theirs


@pytest.mark.spares  # the idle work on: the panes left out restyled while idle, before they are shown
@run_async
async def test_panes_restyled_while_idle_paint_what_textuals_own_restyle_paints(suite_paths):
    app = open_app(suite_paths)
    themes = ("textual-light", "nord")  # to a light theme and to a dark one: the test above takes four changes
    ours = await _screens_through_themes(app, idle=True, themes=themes)
    assert not app.hidden_panes.stale
    theirs = await _screens_through_themes(textuals_own(open_app(suite_paths)), themes=themes)
    assert ours == theirs


@run_async
async def test_a_theme_change_leaves_the_hidden_panes_to_when_they_are_shown(suite_paths):
    app = open_app(suite_paths)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        styled: list = []
        with recording_restyles(app, styled):
            app.theme = "textual-light"
            await settle(pilot)
            panes = {pane.id: pane for pane in app.query("#panes ContentSwitcher > TabPane")}
            assert set(panes) == {"profile", "summaries", "estimates", "extraction", "compare"}
            under = {name: set(pane.walk_children(with_self=False)) for name, pane in panes.items()}
            assert under["profile"] <= set(styled)  # the pane shown: restyled
            assert all(panes[name] in styled for name in under)  # each pane itself too (it holds its display)
            assert not any(under[name] & set(styled) for name in under if name != "profile")  # not what is under them
            styled.clear()
            await pilot.press("3")  # shown: restyled before it is drawn
            assert under["estimates"] <= set(styled)
            assert not under["summaries"] & set(styled)
            assert app.hidden_panes.stale  # the others still to do


def described(rule) -> tuple:
    """What a rule says (layouts are objects compared by identity: their repr says which)."""
    rules = {k: repr(v) for k, v in rule.styles.get_rules().items()}
    return rule.selectors, rule.is_default_rules, rule.tie_breaker, rules


@pytest.mark.spares  # the spare dialogs' CSS sources are part of what a theme parses
@run_async
async def test_a_theme_seen_before_reuses_the_rules_a_fresh_parse_gives(panel_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for _ in range(200):  # the dialogs built ahead while idle (app/spares.py) add their CSS sources once: after
            if app.spares_ready():  # that, a theme seen before has the same variables and sources
                break
            await pilot.pause(0.05)
        assert app.spares_ready()
        sheet = app.stylesheet
        parsed = []
        for theme in THEMES[:3]:
            app.theme = theme
            await settle(pilot)
            parsed.append(sheet.rules)
        assert parsed[2] is parsed[0]  # light again: the rules kept, not parsed anew
        fresh = sheet.copy()
        fresh.parse()
        assert [described(r) for r in sheet.rules] == [described(r) for r in fresh.rules]


@pytest.mark.spares  # the themes are parsed ahead while idle
@run_async
async def test_a_theme_parsed_ahead_is_not_parsed_on_the_change_and_is_a_fresh_parse(panel_path, monkeypatch):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await idle_work_done(pilot)
        sheet = app.stylesheet
        light, nord = (css_variables(app, app.get_theme(name)) for name in ("textual-light", "nord"))
        assert app.parsed_themes.parsed(light)  # the default pair's other half: parsed while idle
        assert not app.parsed_themes.parsed(nord)  # the others: not before the theme is changed
        parses = []
        parse = Stylesheet.parse
        monkeypatch.setattr(Stylesheet, "parse", lambda self: parses.append(self) or parse(self))
        app.theme = "textual-light"
        await settle(pilot)
        assert parses == []  # not parsed on the change
        assert sheet._variables == light  # the variables parsed ahead are those Textual sets for the theme
        fresh = sheet.copy()
        fresh.parse()
        assert [described(r) for r in sheet.rules] == [described(r) for r in fresh.rules]
        await idle_work_done(pilot)  # changed once: every theme parsed ahead
        assert app.parsed_themes.parsed(nord)
        parses.clear()
        app.theme = "nord"
        await settle(pilot)
        assert parses == []
        assert sheet._variables == nord


@run_async
async def test_the_collector_is_paused_from_a_theme_change_to_its_first_frame(panel_path):
    assert gc.isenabled()
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        collecting = []
        display = app._display
        app._display = lambda screen, renderable: collecting.append(gc.isenabled()) or display(screen, renderable)
        app.theme = "textual-light"
        assert not gc.isenabled()
        await settle(pilot)
        assert collecting[0] is False  # the theme's first frame drawn with it paused
        assert gc.isenabled()  # and it runs again after
        app.theme = "textual-dark"
        assert not gc.isenabled()
        app.exit()  # before the frame: it runs again all the same
    assert gc.isenabled()


@run_async
async def test_refreshes_in_a_batch_are_done_once_each_on_leaving_it(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        screen = app.screen
        calls = []
        for widget in screen.walk_children(with_self=True):
            widget.refresh = lambda *a, w=widget, **k: calls.append((w, k.get("layout", False))) or w
        with batched_refreshes():
            screen.styles.base.refresh(children=True)
            screen.styles.base.refresh(children=True, layout=True)
            app.query_one("#title").styles.base.refresh(children=True)
            assert calls == []  # noted, not done
        widgets = list(screen.walk_children(with_self=True))
        assert sorted(map(id, (w for w, _ in calls))) == sorted(map(id, widgets))  # each once
        assert all(layout for _, layout in calls)  # with the layout one of them asked for


def test_the_current_theme_follows_the_theme_and_a_theme_registered_again(panel_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app = MemtuiApp(read_panel(panel_path))
    for name in ("nord", "textual-light", "nord"):
        app.theme = name
        assert app.current_theme is app.get_theme(name)
    again = dataclasses.replace(app.get_theme("nord"), primary="#123456")
    app.register_theme(again)
    assert app.current_theme is again  # the same name, registered anew: not the one looked up before
    app.unregister_theme("nord")
    assert app.current_theme.name == "textual-dark"  # as Textual: a theme gone falls back to textual-dark


def _legend_colours(app: MemtuiApp) -> set:
    from textual.widgets import Static

    from memtui.app.compare import ComparePane

    text = app.query_one(ComparePane).query_one(".compare-legend", Static).content  # the rich Text it was given
    return {span.style.color for span in text.spans if getattr(span.style, "color", None) is not None}


@run_async
async def test_the_compare_pane_is_drawn_in_a_new_theme_when_shown_not_while_hidden(suite_paths):
    """Its legends and grid are coloured by the theme: a change while it is hidden redraws them when it is shown
    (restyled then), not on the theme's key."""
    from memtui.app.legend import swatch
    from memtui.app.plots import plot_colours

    app = open_app(suite_paths)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot)
        dark = _legend_colours(app)
        assert dark == {swatch(c) for c in plot_colours(app.theme_variables, True).models[:2]}
        await pilot.press("1")
        await settle(pilot)
        app.theme = "textual-light"
        await settle(pilot)
        assert _legend_colours(app) == dark  # hidden: not redrawn on the key
        await pilot.press("5")
        await settle(pilot)
        light = {swatch(c) for c in plot_colours(app.theme_variables, False).models[:2]}
        assert light != dark and _legend_colours(app) == light


async def _extraction_rows_through_a_theme(app: MemtuiApp, styled: list | None = None, rows: list | None = None):
    """On the Extraction pane: the theme changed while the SLURM rows are hidden, then each mode shown (its rows
    drawn in the new theme's colours). ``styled`` collects the nodes restyled by the change, ``rows`` the rows of
    the modes hidden then, each with what is in it."""
    shots = []
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        if rows is not None:
            rows += [(row, list(row.walk_children())) for row in app.query("#extract-form > .field") if not row.display]
        with recording_restyles(app, [] if styled is None else styled):
            app.theme = "textual-light"
            await settle(pilot)
        shots.append(app.export_screenshot())
        app.query_one("#ex-mode").focus()
        for _ in range(3):  # this machine's GPUs, a SLURM array, back to this machine
            await pilot.press("right")
            await settle(pilot)
            shots.append(app.export_screenshot())
    return shots


@run_async
async def test_a_forms_hidden_rows_are_restyled_when_shown_and_paint_what_textuals_restyle_paints(suite_paths):
    styled: list = []
    app = open_app(suite_paths)
    rows: list = []
    ours = await _extraction_rows_through_a_theme(app, styled, rows)
    theirs = await _extraction_rows_through_a_theme(textuals_own(open_app(suite_paths)))
    assert len(set(ours)) == 4  # each mode shows other rows (the last, back to the first, with the focus on its choice)
    assert ours == theirs
    assert len(rows) == 6  # the GPUs' row and the SLURM array's five
    assert {row for row, _ in rows} <= set(styled)  # each row restyled by the change (it holds its display)
    assert all(under for _, under in rows)
    assert not any(node in styled for _, under in rows for node in under)  # what is in it was not
