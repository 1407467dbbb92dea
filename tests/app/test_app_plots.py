"""The plots at 80 x 24, 100 x 30 and 120 x 40, dark and light: a title at every width, even y ticks on whole rows
that include 0, the Compare pane's legend beside the plots (never over the data), and colours from the theme that
stand out from its background in 256 colours, on no background of the plot's own (solarized-light's was pink)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from app_pilot import run_async, settle
from rich.color import ColorSystem
from rich.text import Text
from textual.app import App

from memtui.app.compare import ComparePane, OverlayPlot, correlation_grid
from memtui.app.main import MemtuiApp
from memtui.app.plots import BandPlot, as_256, lightness, plot_colours
from memtui.estimation.settings import Settings
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIZES = [(80, 24), (100, 30), (120, 40)]
THEMES = ["textual-dark", "textual-light"]
SIM = Simulation(n_cohorts=12, per_cohort=10, n_never=60, n_checkpoints=14, seed=5)
TITLE_WORDS = ("Instantaneous", "Persistent", "Residual", "τ(g =")


def y_ticks(plot) -> list[tuple[int, str]]:
    """(row, label) of every tick on the plot's y axis, read from what it draws."""
    lines = plot.render().plain.splitlines()
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    axis = lines[top].index("┌")
    ticks = []
    for row, line in enumerate(lines[top + 1 :], start=top + 1):
        if "└" in line:
            break
        if line[axis] in "┤├┼":
            ticks.append((row, line[:axis].strip()))
    return ticks


def check_axis(plot, where) -> None:
    ticks = y_ticks(plot)
    assert len(ticks) >= 2, (where, plot.render().plain)
    rows = np.diff([r for r, _ in ticks])
    values = [float(label.replace("−", "-")) for _, label in ticks]  # every tick row is labelled with a number
    assert (rows == rows[0]).all(), (where, ticks)  # evenly spaced rows ...
    assert np.allclose(np.diff(values), np.diff(values)[0]), (where, ticks)  # ... for even steps
    assert 0.0 in values, (where, ticks)


def check_title(plot, where) -> None:
    drawn = plot.render().plain
    assert any(word in drawn for word in TITLE_WORDS), (where, drawn[:400])


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@run_async
async def test_every_plot_has_a_title_and_even_y_ticks(tmp_path, size, theme):
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "panel.h5", SIM)))
    async with app.run_test(size=size) as pilot:
        app.theme = theme
        await settle(pilot)
        for row in range(0, 12, 3):  # the path plot of several cohorts (their ranges differ)
            app.query_one("#heatmap").move_to(row, 0)
            await settle(pilot)
            await pilot.pause(0.15)  # the path plot follows the cursor at most every 0.1 s (PLOT_EVERY_S)
            plot = app.query_one("#path-plot", BandPlot)
            check_title(plot, ("profile", row))
            check_axis(plot, ("profile", row))
        await pilot.press("2")
        await settle(pilot)
        for plot in app.query_one("#summaries-pane").query(BandPlot):
            check_title(plot, plot.id)
            check_axis(plot, plot.id)


@pytest.fixture
def four_models(tmp_path):
    sim = dict(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8)
    return [
        write_synthetic(tmp_path / f"model-{name}.h5", Simulation(**sim, effect=effect, seed=seed))
        for name, effect, seed in (("a", 0.5, 1), ("b", 1.0, 2), ("c", 2.0, 3), ("d", -0.5, 4))
    ]


class Host(App):
    computing = None

    def __init__(self, suite) -> None:
        super().__init__()
        self.suite = suite

    def compose(self):
        yield ComparePane(self.suite, id="compare")


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
@run_async
async def test_compare_legends_beside_the_plots_even_ticks_and_intervals_whole(four_models, size, theme):
    suite = load_suite(four_models)
    app = Host(suite)
    async with app.run_test(size=size) as pilot:
        app.theme = theme
        pane = app.query_one(ComparePane)
        pane.show_settings(Settings(metric="loglik", draws=200, seed=5))
        await settle(pilot, ("compare",))
        await pilot.pause()
        for plot in pane.query(OverlayPlot):
            drawn = plot.render().plain
            assert not any(name in drawn for name in suite.names), drawn  # no legend over the data
            check_title(plot, plot.id)
            check_axis(plot, plot.id)
            legend = str(pane.query_one(f"#{plot.id}-legend").render())
            assert all(f"{i + 1} {name}" in legend for i, name in enumerate(suite.names)), legend
        grid = str(pane.query_one("#compare-grid").render())
        width = pane.query_one("#compare-grid").content_region.width
        # every pair's interval, in all three grids (true, raw Pearson, raw Spearman); the notes under them name
        # pairs with the same dash, so the intervals are counted by their "i–j [" form ("i–j not determined" where the
        # data do not determine a true correlation)
        assert len(re.findall(r"\d–\d (?:\[|not determined)", grid)) == 3 * 6, grid
        for line in grid.splitlines():
            assert len(line) <= width and line.count("[") == line.count("]"), (line, width)


def test_intervals_break_between_pairs_only():
    names = [f"model-{i}" for i in range(5)]
    m = np.eye(5) * 0.5 + 0.5
    for width in (40, 80, 120):
        text = correlation_grid(names, m, m - 0.3, m + 0.1, "Pearson", line_width=width).plain
        intervals = text[text.index("intervals:") :].splitlines()
        assert len(intervals) > 1 or width >= 120
        assert sum(line.count("[") for line in intervals) == 10
        for line in intervals:
            assert len(line) <= width and line.count("[") == line.count("]"), line
            assert re.fullmatch(r"(intervals:)?(\s+\d–\d \[[−\d.]+, [−\d.]+\])+", line), line


async def _drawn(plot, pilot):
    """The plot as drawn once a theme change has settled: the first frame after it draws the plot blank (plots.
    BandPlot.render), the next one the plot."""
    for _ in range(200):
        text = plot.render()
        if text.plain:
            return text
        await pilot.pause(0.01)
    raise AssertionError("the plot was not drawn after the theme change")


async def _spans(plot, pilot):
    text = await _drawn(plot, pilot)
    return [span.style for span in text.spans if not isinstance(span.style, str)]


@run_async
async def test_plot_colours_come_from_the_theme_and_stand_out_in_256_colours_on_every_theme(tmp_path):
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "panel.h5", SIM)))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        plot = app.query_one("#path-plot", BandPlot)
        for theme in sorted(app.available_themes):
            app.theme = theme
            await pilot.pause()
            styles = await _spans(plot, pilot)
            assert styles, theme
            # the plot paints no background: it sits on the pane's (solarized-light's surface is pink in 256 colours)
            assert all(s.bgcolor is None for s in styles), (theme, {str(s.bgcolor) for s in styles})
            colours = plot_colours(app.theme_variables, app.current_theme.dark)
            if colours.background is None:  # ANSI themes: the terminal's own colours
                assert all(s.color is None or s.color.is_system_defined for s in styles), theme
                continue
            background = lightness(as_256(colours.background))
            for style in styles:
                if style.color is None:
                    continue
                shown = style.color.downgrade(ColorSystem.EIGHT_BIT).get_truecolor()
                assert abs(lightness((shown.red, shown.green, shown.blue)) - background) >= 15, (theme, style)
            drawn = {s.color.get_truecolor() for s in styles if s.color is not None}
            line = colours.line
            assert any((c.red, c.green, c.blue) == line for c in drawn), theme  # the estimate in the theme's colour


@run_async
async def test_after_a_theme_change_the_plot_is_drawn_blank_then_in_the_new_colours_never_the_old(tmp_path):
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "panel.h5", SIM)))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        plot = app.query_one("#path-plot", BandPlot)
        drawn = []
        render = plot.render
        plot.render = lambda: drawn.append((app.theme, render())) or drawn[-1][1]
        before = await _drawn(plot, pilot)
        for theme in ("textual-light", "nord", "textual-dark"):
            drawn.clear()
            app.theme = theme
            await settle(pilot)
            text = await _drawn(plot, pilot)
            assert drawn[0] == (theme, Text(""))  # the theme's first frame: blank, not the plot in the old colours
            assert all(t.plain in ("", before.plain) for _, t in drawn)  # then the same plot...
            built = plot._build()  # ... in the theme's colours: what a plot built afresh in the theme draws
            assert (text.plain, text.spans) == (built.plain, built.spans)
            assert [(d, t.spans) for d, t in drawn if t.plain][-1] == (theme, built.spans)
