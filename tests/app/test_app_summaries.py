"""The Summaries pane's words: the means `memtui estimate` prints, the minimum detectable effect and the three
estimators side by side, each checked against an independent computation from the estimate's own frames."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from app_pilot import APP_GROUPS, run_async, settle

from memtui.app.fmt import num, nums, short_step
from memtui.app.main import MemtuiApp
from memtui.app.summary_lines import estimators_lines, mde_line, means_lines, scope_means
from memtui.estimation.compare import compare
from memtui.estimation.estimate import estimate
from memtui.estimation.plan import minimum_detectable_effect
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8, seed=1)
GROUPS = APP_GROUPS


@pytest.fixture
def panel(tmp_path):
    return read_panel(write_synthetic(tmp_path / "panel.h5", SIM))


@pytest.fixture
def settings(panel):
    return Settings(metric=panel.default_metric, draws=200, seed=3)


def test_means_lines_quote_each_scope_mean_and_significant_count(panel, settings):
    res = estimate(panel, settings)
    lines = means_lines(res, int(res.checkpoints[-1]))
    inst = res.instantaneous["estimate"].to_numpy()
    pers = res.persistent.filter(res.persistent["event_time"] > 0)
    resid = res.residual
    assert lines[0].startswith(f"Instantaneous (c = g): mean {num(inst.mean(), signed=True)} over {len(inst)} cohorts")
    assert f"{int(res.instantaneous['significant'].sum())} significant" in lines[0]
    assert f"mean {num(pers['estimate'].mean(), signed=True)} over {pers.height} event times" in lines[1]
    assert f"{num(pers['estimate'][0], signed=True)} at c − g = {short_step(pers['event_time'][0])}" in lines[1]
    assert lines[2].startswith("Residual (at")
    assert f"mean {num(resid['estimate'].mean(), signed=True)} over {resid.height} cohorts" in lines[2]


def test_mde_line_is_the_plan_figure_and_compares_it_with_the_estimate(panel, settings):
    res = estimate(panel, settings)
    mde = minimum_detectable_effect(panel, settings, result=res)
    assert mde > 0
    line = mde_line(mde, res)
    assert line.startswith(f"Minimum detectable effect: {num(mde)} per cohort at c = g with 80% power")
    ratio = abs(res.instantaneous["estimate"].mean()) / mde
    assert f"is {ratio:.1f}× that" in line
    assert "needs standard errors" in mde_line(float("nan"), res)


def test_estimators_lines_put_each_estimators_means_side_by_side_with_the_ease(panel, settings):
    comparison = compare(panel, settings)
    lines = estimators_lines(comparison)
    assert len(lines) == 5
    for line, name in zip(lines[1:4], ("did", "difference", "extractable"), strict=True):
        res = estimate(panel, dataclasses.replace(settings, estimator=name))
        assert line.strip().startswith(name)
        means = scope_means(res)
        row = nums([means[k] for k in ("instantaneous", "persistent", "residual")], 4, signed=True)
        assert line.split()[-3:] == row  # the three means, on one number of decimals along the row
    post = comparison.cells.filter(~comparison.cells["pre_treatment"])
    ease = post["extractable_estimate"].to_numpy() - post["did_estimate"].to_numpy()
    assert np.allclose(post["ease_estimate"].to_numpy(), ease, equal_nan=True)
    assert f"mean {num(np.nanmean(ease), 3, signed=True)}" in lines[4]


@run_async
async def test_summaries_pane_fills_in_the_mde_and_the_estimators_from_its_own_worker(panel, settings):
    app = MemtuiApp(panel)
    async with app.run_test(size=(130, 50)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot, GROUPS)
        result = app.result
        text = str(app.query_one("#summary-text").render())
        assert means_lines(result, int(result.checkpoints[-1]))[0] in text
        extras = str(app.query_one("#summary-extras").render())
        mde = minimum_detectable_effect(panel, result.settings, result=result)
        assert f"Minimum detectable effect: {num(mde)}" in extras
        for name in ("did", "difference", "extractable"):
            res = estimate(panel, dataclasses.replace(result.settings, estimator=name))
            means = scope_means(res)
            row = nums([means[k] for k in ("instantaneous", "persistent", "residual")], 4, signed=True)
            assert "".join(f"{v:>10}" for v in row) in extras
        await pilot.press("m")  # another metric: the words follow the visible estimate, never a stale one
        await settle(pilot, GROUPS)
        assert app.result.settings.metric != result.settings.metric
        mde = minimum_detectable_effect(panel, app.result.settings, result=app.result)
        assert f"Minimum detectable effect: {num(mde)}" in str(app.query_one("#summary-extras").render())


@pytest.mark.parametrize(
    ("low", "high", "ticks", "labels"),
    [
        (-1.8, 1.5, [-2, -1, 0, 1, 2], ["−2", "−1", "0", "1", "2"]),
        (0.02, 0.37, [0, 0.1, 0.2, 0.3, 0.4], ["0", "0.1", "0.2", "0.3", "0.4"]),
        (0.0, 0.9, [0, 0.25, 0.5, 0.75, 1.0], ["0", "0.25", "0.50", "0.75", "1.00"]),
        (-25, -3, [-30, -20, -10, 0], ["−30", "−20", "−10", "0"]),
    ],
)
def test_plot_y_ticks_are_even_cover_the_data_and_include_zero(low, high, ticks, labels):
    from memtui.app.plots import nice_ticks, tick_label

    got = nice_ticks(low, high)
    assert got == pytest.approx(ticks)
    assert [tick_label(t, got) for t in got] == labels
    steps = np.diff(got)
    assert np.allclose(steps, steps[0]) and got[0] <= min(low, 0) and got[-1] >= max(high, 0)


@run_async
async def test_the_summaries_words_paint_before_their_plots_are_built(panel, settings):
    """`2` spent four fifths of its first paint building three plotext plots: the words paint first, the plots are
    blank in that frame (never the previous estimate's lines) and are built right after it."""
    from memtui.app.plots import BandPlot

    app = MemtuiApp(panel, settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, GROUPS)
        built = []
        for plot in app.query(BandPlot):
            plot._build = (lambda original, p: lambda: built.append(p.id) or original())(plot._build, plot)
        pane = app.query_one("#summaries-pane")
        plots = list(pane.query(BandPlot))
        frames = []  # at each frame Textual hands the driver: the pane shown, the words, the plots held, built
        display = app._display

        def caught(screen, update):
            frames.append((app.active_pane, "Memorisation τ" in str(pane.query_one("#summary-text").render()),
                           all(p._held for p in plots), len(built)))  # fmt: skip
            return display(screen, update)

        app._display = caught
        await pilot.press("2")
        for _ in range(5):
            await pilot.pause()
        first = next(f for f in frames if f[0] == "summaries")
        assert first == ("summaries", True, True, 0), frames  # the words' frame: nothing built before it
        assert not any(p._held for p in plots) and "plot-instantaneous" in built  # (one below the fold: not drawn)
        assert all(p.drawn_title.startswith(("Instantaneous", "Persistent")) for p in plots if p.id in built)
        # a newer estimate before the plots were drawn: only its plots are drawn, never the older one's
        app.change_settings(draws=100)
        await settle(pilot, GROUPS)
        assert all(not p._held for p in plots) and pane._result is app.result
