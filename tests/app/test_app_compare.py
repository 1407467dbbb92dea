"""The Compare pane on a suite of three synthetic models: every model overlaid, correlations in a coloured grid, each
figure checked against the suite API and numpy on the point estimates."""

from __future__ import annotations

import numpy as np
import pytest
from app_pilot import run_async, settle
from textual.app import App

from memtui.app import palette
from memtui.app.compare import ComparePane, OverlayPlot, correlation_grid
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.estimation.suite_load import load_suite
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = dict(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8)
GROUPS = ("compare",)


@pytest.fixture
def suite_paths(tmp_path):
    # the same instances and checkpoints (treatment is set by the design, the seed only draws the noise); the
    # three "models" memorise with different strength
    return [
        write_synthetic(tmp_path / f"model-{name}.h5", Simulation(**SIM, effect=effect, seed=seed))
        for name, effect, seed in (("a", 0.5, 1), ("b", 1.0, 2), ("c", 2.0, 3))
    ]


class Host(App):
    computing = None  # what `settle` reads on the workbench: nothing else is estimated here

    def __init__(self, suite) -> None:
        super().__init__()
        self.suite = suite

    def compose(self):
        yield ComparePane(self.suite, id="compare")


def test_correlation_grid_shows_every_pair_and_its_interval():
    names = ["small", "large"]
    m = np.array([[1.0, 0.8], [0.8, 1.0]])
    text = correlation_grid(names, m, m - 0.1, m + 0.05, "Pearson").plain
    assert text.count("+0.80") == 2 and text.count("+1.00") == 2
    assert "1–2 [0.70, 0.85]" in text
    assert "small" in text and "large" in text


@pytest.mark.parametrize("scheme", [palette.DARK, palette.LIGHT], ids=["dark", "light"])
def test_correlation_grid_cells_are_readable_on_either_palette(scheme):
    """Each cell's figure is black on a light colour and white on a dark one (it was black on every colour)."""
    m = np.array([[1.0, 0.05, -0.9], [0.05, 1.0, 0.5], [-0.9, 0.5, 1.0]])
    text = correlation_grid(["a", "b", "c"], m, m - 0.1, m + 0.1, "Pearson", scheme)
    cells = [span.style for span in text.spans if getattr(span.style, "bgcolor", None) is not None]
    assert len(cells) == 9
    ramp = {palette.cube(i): i for i in scheme.ramp}
    for style in cells:
        index = ramp[style.bgcolor]  # every cell on the scheme's ramp
        want = palette.cube(16) if palette.lightness(index) > 60 else palette.cube(231)
        assert style.color == want, (index, style)
    assert len({style.color for style in cells}) == 2  # both kinds occur in this grid


@run_async
async def test_compare_pane_overlays_every_model_and_correlates_their_profiles(suite_paths):
    suite = load_suite(suite_paths)
    settings = Settings(metric="loglik", draws=200, seed=5)
    app = Host(suite)
    async with app.run_test(size=(120, 60)) as pilot:
        pane = app.query_one(ComparePane)
        pane.show_settings(settings)
        await settle(pilot, GROUPS)
        text = str(pane.query_one("#compare-text").render())
        for i, name in enumerate(suite.names):
            res = estimate(suite.panel(name), settings)  # each model alone: the suite's figures are the same
            mean = res.instantaneous["estimate"].mean()
            assert f"{i + 1} {name}" in text
            assert f"mean instantaneous {'+' if mean >= 0 else '−'}{abs(mean):.4g}" in text
        plots = list(pane.query(OverlayPlot))
        assert len(plots) == 3 and all(p.display for p in plots)
        # the grid's Pearson values are numpy's correlation of the models' post-treatment point estimates
        post = [
            estimate(suite.panel(n), settings).cells.filter(~estimate(suite.panel(n), settings).cells["pre_treatment"])
            for n in suite.names
        ]
        r = np.corrcoef(np.vstack([p.sort("cohort", "checkpoint")["estimate"].to_numpy() for p in post]))
        grid = str(pane.query_one("#compare-grid").render())
        assert f"{r[0, 2]:+.2f}" in grid and f"{r[1, 2]:+.2f}" in grid
        assert "Spearman" in grid and "intervals: 1–2 [" in grid
        # the same settings again: shown from memory, no new worker
        before = len([w for w in app.workers if w.group == "compare"])
        pane.show_settings(settings)
        await pilot.pause()
        assert len([w for w in app.workers if w.group == "compare"]) == before


@run_async
async def test_compare_pane_with_one_panel_says_how_to_open_a_suite(suite_paths):
    app = Host(load_suite(suite_paths[:1]))
    async with app.run_test(size=(100, 30)) as pilot:
        pane = app.query_one(ComparePane)
        pane.show_settings(Settings(metric="loglik", draws=0))
        await pilot.pause()
        assert "memtui A.h5 B.h5" in str(pane.query_one("#compare-text").render())


@run_async
async def test_workbench_opens_a_suite_cycles_models_and_compares_them(suite_paths):
    from memtui.app import open_app

    app = open_app(list(reversed(suite_paths)))  # the suite's order, not the command line's, decides
    names = [p.path.name for p in app.models]
    assert names == sorted(names)  # no parameter counts recorded: by name
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        title = str(app.query_one("#title").render())
        assert "model-a.h5 (1/3)" in title
        first = app.result
        await pilot.press("n")
        await settle(pilot)
        assert "model-b.h5 (2/3)" in str(app.query_one("#title").render())
        alone = estimate(app.panel, app.settings)  # the pane shows model b's own estimate, with the same settings
        assert app.result.settings == first.settings
        np.testing.assert_allclose(app.result.matrix(), alone.matrix(), equal_nan=True)
        await pilot.press("N", "N")
        await settle(pilot)
        assert "model-c.h5 (3/3)" in str(app.query_one("#title").render())
        await pilot.press("5")
        await settle(pilot, (*GROUPS, "estimate", "reload"))
        assert app.active_pane == "compare"
        pane = app.query_one(ComparePane)
        assert pane.settings == app.settings
        assert "3 models on loglik" in str(pane.query_one("#compare-text").render())
        assert "Pearson correlation of the profiles" in str(pane.query_one("#compare-grid").render())
        await pilot.press("m")  # the metric applies to every model: the Compare pane follows it
        await settle(pilot, (*GROUPS, "estimate", "reload"))
        assert pane.settings.metric == app.settings.metric != "loglik"
        assert f"3 models on {app.settings.metric}" in str(pane.query_one("#compare-text").render())


@run_async
async def test_one_panel_has_no_suite_keys(suite_paths):
    from memtui.app import open_app

    app = open_app(suite_paths[0])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.suite is None and not app.query(ComparePane)
        assert app.check_action("next_model", (1,)) is False
        await pilot.press("5", "n")
        await pilot.pause()
        assert app.active_pane == "profile"


@run_async
async def test_the_shipped_suite_opens_with_sample_suite_and_compares_four_models():
    from memtui.app import open_app
    from memtui.panel.samples import sample_paths

    app = open_app(sample_paths("suite"))
    assert [p.n_parameters for p in app.models] == sorted(p.n_parameters for p in app.models)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await settle(pilot, (*GROUPS, "estimate", "reload"))
        text = str(app.query_one("#compare-text").render())
        assert "4 models on loglik" in text and "neox-858k" in text and "parameters" in text
        assert "Pearson correlation of the profiles" in str(app.query_one("#compare-grid").render())
