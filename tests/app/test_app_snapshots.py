"""Snapshots of the main panes (pytest-textual-snapshot). Regenerate after a deliberate change with
``pytest tests/test_app_snapshots.py --snapshot-update`` and look at the SVGs before committing them.

Deterministic by construction: a fixed simulated panel always named panel.h5, a fixed terminal size, the estimate
settled before the screenshot, no clock, pid or temporary path in view, no blinking cursor.
"""

from __future__ import annotations

import pytest
from app_pilot import settle as settle_app

from memtui.app.main import MemtuiApp
from memtui.app.profile import ProfilePane
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=12, per_cohort=10, n_never=60, n_checkpoints=14, seed=5)


@pytest.fixture
def app(tmp_path) -> MemtuiApp:
    return MemtuiApp(read_panel(write_synthetic(tmp_path / "panel.h5", SIM)))


async def settle(pilot, *keys: str) -> None:
    """Wait for the estimate, press ``keys``, then for the path plot to show the cursor's row."""
    app = pilot.app
    await settle_app(pilot)
    assert app.result is not None, app.message
    if keys:
        await pilot.press(*keys)
        await settle_app(pilot)
    # The path plot follows the cursor at most every PLOT_EVERY_S (a timer replots where the cursor stopped): wait
    # for that replot, which the result decides, not for a length of time.
    profile = app.query_one(ProfilePane)
    for _ in range(1000):
        if app.active_pane != "profile" or profile._plotted == (id(profile.result), profile.heatmap.row):
            break
        await pilot.pause()
    else:
        raise AssertionError("the path plot never caught up with the cursor")
    for widget in app.query("Input"):
        widget.cursor_blink = False
    await pilot.pause()


def moves(*keys: str, theme: str | None = None):
    async def run(pilot):
        if theme is not None:
            pilot.app.theme = theme
        await settle(pilot, *keys)

    return run


def dialog(key: str):
    """Open the dialog ``key`` opens, its fields' cursors steady: a blinking cursor was off in the picture whenever
    the screenshot came more than a blink after the dialog opened (on a loaded machine)."""

    async def run(pilot):
        await settle(pilot)
        await pilot.press(key)
        await pilot.pause()
        for widget in pilot.app.screen.query("Input"):
            widget.cursor_blink = False
        await pilot.pause()

    return run


def test_profile_80x24(snap_compare, app):
    assert snap_compare(app, terminal_size=(80, 24), run_before=moves("j", "j", "l", "l", "l"))


def test_profile_hidden_non_significant_wide(snap_compare, app):
    assert snap_compare(app, terminal_size=(120, 36), run_before=moves("G", "i", "s"))


def test_summaries(snap_compare, app):
    assert snap_compare(app, press=["2"], terminal_size=(100, 44), run_before=settle)


def test_estimates_sorted(snap_compare, app):
    # cursor to the estimate column, sort descending
    keys = ["3", *["l"] * 3, "greater_than_sign", "greater_than_sign"]
    assert snap_compare(app, press=keys, terminal_size=(100, 30), run_before=settle)


def test_settings_dialog_80x24(snap_compare, app):
    assert snap_compare(app, terminal_size=(80, 24), run_before=dialog("o"))


def test_help(snap_compare, app):
    assert snap_compare(app, press=["question_mark"], terminal_size=(100, 30), run_before=settle)


# 80 x 24 and 120 x 40, dark and light: one line of status, the main keys in the footer, every colour from the theme


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_profile_sizes_and_themes(snap_compare, app, size, theme):
    assert snap_compare(app, terminal_size=size, run_before=moves("j", "l", "l", theme=theme))


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_estimates_sizes_and_themes(snap_compare, app, size, theme):
    assert snap_compare(app, press=["3"], terminal_size=size, run_before=moves(theme=theme))


def test_profile_plot_folded_80x24(snap_compare, app):
    assert snap_compare(app, terminal_size=(80, 24), run_before=moves("p", "G"))


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
def test_summaries_120x40(snap_compare, app, theme):
    assert snap_compare(app, press=["2"], terminal_size=(120, 40), run_before=moves(theme=theme))


def test_export_dialog_80x24(snap_compare, app, monkeypatch):
    # the dialog names the folder relative paths are under: the same folder on every machine, or the picture differs
    monkeypatch.chdir("/")
    assert snap_compare(app, terminal_size=(80, 24), run_before=dialog("e"))


def test_help_80x24(snap_compare, app):
    assert snap_compare(app, press=["question_mark"], terminal_size=(80, 24), run_before=settle)
