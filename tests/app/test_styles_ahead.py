"""A theme change's restyle worked out while the app is idle (app/styles_ahead.py): each widget is given what
Textual's own restyle gives it, after whatever changed since it was worked out, and the work ahead is used."""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager

import pytest
from app_pilot import idle_work_done, run_async, settle
from textual.css.stylesheet import Stylesheet

from memtui.app import open_app
from memtui.app.main import MemtuiApp
from memtui.app.plots import BandPlot
from memtui.app.profile import Legend, ProfilePane
from memtui.app.styles_ahead import _NODE_FLAGS, theme_classes
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8, seed=1)
pytestmark = pytest.mark.spares  # the work ahead is idle work


@pytest.fixture
def suite_paths(tmp_path):
    return [write_synthetic(tmp_path / f"{n}.h5", dataclasses.replace(SIM, seed=s)) for n, s in (("a", 1), ("b", 2))]


def styled(app: MemtuiApp) -> dict:
    """What a restyle sets on each node a theme change restyles: its rules, its component classes' rules, flags."""
    return {
        node: (
            dict(node.styles.base._rules),
            {name: dict(styles.base._rules) for name, styles in node._component_styles.items()},
            tuple(getattr(node, flag) for flag in _NODE_FLAGS),
        )
        for node in app.styles_ahead._nodes(app)
    }


def restyled_by_textual(app: MemtuiApp) -> dict:
    """:func:`styled` after Textual's own ``Stylesheet.apply`` (not the app's) restyled each of those nodes."""
    for node in app.styles_ahead._nodes(app):
        Stylesheet.apply(app.stylesheet, node)
    return styled(app)


@asynccontextmanager
async def worked_ahead(paths):
    """The app running, its idle work (the restyle worked out ahead among it) done."""
    app = open_app(paths)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        await idle_work_done(pilot)
        yield app, pilot


async def change(app: MemtuiApp, pilot, theme: str) -> dict:
    app.styles_ahead.used = 0
    app.theme = theme
    await settle(pilot)
    return styled(app)


@run_async
async def test_a_change_worked_out_ahead_sets_what_textuals_restyle_sets(suite_paths):
    app = open_app(suite_paths)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for pane in ("1", "4"):  # the Profile pane, and the pane with the most widgets (and component classes)
            await pilot.press(pane)
            await settle(pilot)
            for theme in ("textual-light", "textual-dark"):  # to the other default theme, then back to the one left
                await idle_work_done(pilot)
                assert not app.styles_ahead.pending(app)
                ours = await change(app, pilot, theme)
                used = app.styles_ahead.used
                assert used >= 0.9 * len(ours) and used >= 30, (used, len(ours))
                theirs = restyled_by_textual(app)
                assert ours.keys() == theirs.keys()
                for node in ours:
                    assert ours[node] == theirs[node], node
        assert any(rules for rules, components, _ in ours.values() if components)  # component classes were compared


@run_async
async def test_rules_that_read_the_apps_theme_are_worked_out_as_the_change_sets_it(suite_paths, monkeypatch):
    css = (
        "ProfilePane:light { border: solid red; } App.-light-mode Legend { border: round blue; } "
        "App.-theme-textual-light BandPlot { outline: solid green; }"
    )
    monkeypatch.setattr(MemtuiApp, "CSS", css)
    async with worked_ahead(suite_paths) as (app, pilot):
        ours = await change(app, pilot, "textual-light")
        assert app.styles_ahead.used >= 0.9 * len(ours)
        pane = app.query_one(ProfilePane)
        for widget, rule in (
            (pane, "border_top"),
            (pane.query_one(Legend), "border_top"),
            (pane.query_one(BandPlot), "outline_top"),
        ):
            assert rule in ours[widget][0], widget
        assert ours == restyled_by_textual(app)


@run_async
async def test_what_changed_after_the_work_ahead_is_restyled_as_textual_restyles_it(suite_paths):
    async with worked_ahead(suite_paths) as (app, pilot):
        panes = app.query_one("#panes")
        panes.add_class("-stale")  # a class an ancestor's selector reads (#panes.-stale ProfilePane: a tint)
        await pilot.press("tab")  # and the focus moved
        await pilot.pause(0.1)
        ours = await change(app, pilot, "textual-light")
        assert app.styles_ahead.used > 0
        assert "tint" in ours[app.query_one(ProfilePane)][0]
        assert ours == restyled_by_textual(app)


@run_async
async def test_the_work_ahead_is_worked_out_again_for_what_changed(suite_paths):
    async with worked_ahead(suite_paths) as (app, pilot):
        app.query_one("#panes").add_class("-stale")
        await pilot.pause(0.1)
        assert app.styles_ahead.pending(app)  # what was restyled is to be worked out again
        await idle_work_done(pilot)
        ours = await change(app, pilot, "textual-light")
        assert app.styles_ahead.used >= 0.9 * len(ours)
        assert ours == restyled_by_textual(app)


@run_async
async def test_a_change_to_another_theme_uses_nothing_worked_out_ahead(suite_paths):
    async with worked_ahead(suite_paths) as (app, pilot):
        ours = await change(app, pilot, "nord")  # the work ahead was for textual-light
        assert app.styles_ahead.used == 0
        assert ours == restyled_by_textual(app)


@run_async
async def test_the_work_ahead_leaves_the_app_as_it_was(suite_paths):
    """It takes the app's theme classes and theme as the change sets them while it works, and puts them back."""
    app = open_app(suite_paths)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        before = (set(app.classes), app.current_theme, styled(app))
        await idle_work_done(pilot)
        assert app.styles_ahead._worked  # worked out for textual-light
        assert (set(app.classes), app.current_theme, styled(app)) == before
        assert app.current_theme.name == "textual-dark"


@run_async
async def test_the_theme_classes_taken_are_the_ones_textual_sets(suite_paths):
    app = open_app(suite_paths)
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        for theme in ("textual-light", "nord", "textual-dark"):
            expected = theme_classes(app.classes, app.available_themes[theme])
            app.theme = theme
            await settle(pilot)
            assert app.classes == expected
