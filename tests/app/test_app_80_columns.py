"""Nothing the workbench needs is cut at 80 columns: the footer's keys with a suite (the model key read `n Mod`), the
Estimates table through its `sig` column, the profile's legend, and the checkpoint axis, which labels the first and
the last column on screen also when the matrix is wider than the terminal."""

from __future__ import annotations

import pytest
from app_pilot import run_async, settle
from app_screens import widget_lines

from memtui.app.estimates import EstimatesTable
from memtui.app.fmt import short_step
from memtui.app.heatmap import Heatmap
from memtui.app.keybar import KeyBar
from memtui.app.main import MemtuiApp
from memtui.app.profile import Legend
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIZES = [(80, 24), (120, 40)]


def _suite_app(tmp_path, n_checkpoints=8) -> MemtuiApp:
    sim = dict(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=n_checkpoints)
    paths = [write_synthetic(tmp_path / f"m{i}.h5", Simulation(**sim, seed=i)) for i in (1, 2, 3)]
    panels = [read_panel(p) for p in paths]
    return MemtuiApp(panels[0], models=panels, suite=load_suite(paths))


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@run_async
async def test_footer_keys_sig_column_and_legend_fit(tmp_path, size, theme):
    app = _suite_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        app.theme = theme
        await settle(pilot)
        for pane in "12345":
            await pilot.press(pane)
            await settle(pilot)
            await pilot.pause()
            bar = app.screen.query_one(KeyBar)
            whole = bar.visible_keys()
            cut = [k.key_display for k in bar.keys if k not in whole]
            assert not cut, (pane, cut)  # every key in the footer whole, the suite's n included
            shown = [k.key_display for k in whole]
            for key in ("m", "d", "o", "e", "?", "q", "n"):
                assert key in shown, (pane, shown)
        await pilot.press("1")
        await settle(pilot)
        legend = app.query_one(Legend)
        assert legend.render().cell_length <= legend.content_region.width
        await pilot.press("3", "s")
        await settle(pilot)
        lines = [line.rstrip() for line in widget_lines(app.query_one(EstimatesTable))]
        head = lines[0].split()
        assert head[:7] == ["cohort", "ckpt", "c−g", "estimate", "band_low", "band_high", "sig"], lines[0]
        at = lines[0].index(" sig") + 1
        rows = [line[at : at + 5].strip() for line in lines[1:] if line.strip()]
        assert rows and set(rows) <= {"true", "false", ""} and "true" in rows, rows  # whole values, on screen


@pytest.mark.parametrize("width", [60, 70, 80])
@run_async
async def test_the_legend_shortens_to_any_width(tmp_path, width):
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=4, n_checkpoints=6, seed=1))))
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot)
        legend = app.query_one(Legend)
        text = legend.render()
        assert text.cell_length <= legend.content_region.width and "n.s." in text.plain, text.plain


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@run_async
async def test_checkpoint_axis_labels_the_first_and_last_column_on_screen(tmp_path, size):
    sim = Simulation(n_cohorts=6, per_cohort=8, n_never=40, n_checkpoints=61, seed=2)
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "wide.h5", sim)))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        heatmap = app.query_one(Heatmap)
        steps = app.result.checkpoints
        for keys in ((), ("end",), ("home",)):
            await pilot.press(*keys)
            await settle(pilot)
            await pilot.pause()
            header = widget_lines(heatmap)[0]
            gutter = heatmap._gutter
            sx, view = heatmap.scroll_offset.x, heatmap.scrollable_content_region.width - gutter
            cw = heatmap.cell_width
            assert sx + view < len(steps) * cw or keys == ("end",)  # wider than the terminal
            first, last = -(-sx // cw), (sx + view) // cw - 1
            labels = header[gutter:].split()
            assert labels[0] == short_step(steps[first]) and labels[-1] == short_step(steps[last]), (keys, header)
