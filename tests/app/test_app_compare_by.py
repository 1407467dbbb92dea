"""The Compare pane split by group: on the shipped suite (copied, a domain written into its files with
``write_covariates``), ``b`` splits the workbench and the Compare pane follows: a legend names each group with its
size, the text gives each group's per-model summaries and each model's difference between groups, the plots show one
group at a time and ``v`` / ``V`` switch it, as on the Profile pane. Every figure is checked against
``estimation.suite_by.compare_by`` run on its own."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from app_pilot import run_async, settle

from memtui.app.compare import ComparePane, OverlayPlot
from memtui.app.compare_split import group_legend, split_lines
from memtui.app.fmt import num, nums
from memtui.estimation.settings import Settings
from memtui.estimation.suite_by import compare_by
from memtui.estimation.suite_load import load_suite
from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import read_panel
from memtui.panel.samples import SUITE, sample_path

SIZE = (130, 60)
WORK = ("compare", "estimate", "by", "reload")


@pytest.fixture(scope="module")
def suite_files(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("suite")
    paths = [Path(shutil.copy(sample_path(name), folder / f"{name}.h5")) for name in SUITE]
    n = read_panel(paths[0]).n_instances
    domain = np.where(np.random.default_rng(0).random(n) < 0.4, "code", "web").astype(object)
    for path in paths:  # every model's file: b offers the split on whichever model the panes show
        write_covariates(path, {"domain": domain})
    return paths


def test_the_legend_and_lines_name_every_group_with_its_size_and_each_models_difference(suite_files):
    res = compare_by(load_suite(suite_files), Settings(metric="loglik", draws=100), "domain")
    legend = group_legend(res, 1, 60).plain
    for group in res.groups:
        treated, controls = res.group_size(group)
        assert f"{group} ({treated} treated, {controls} controls)" in legend
    assert legend.startswith("by domain · plots and grids: group 2 (v: next)")
    lines = split_lines(res)
    assert sum(line.startswith("Group ") for line in lines) == 2
    for model in res.models:
        (d,) = res.by_model[model].differences
        o = d.overall  # the estimate on its interval's decimals
        estimate, low, high = nums((o["estimate"], o["ci_low"], o["ci_high"]), signed=True)
        head = f"{model}: domain=code − domain=web overall {estimate} [{low}, {high}]"
        assert any(line.startswith(head) for line in lines)


def _instantaneous(pane: ComparePane) -> list[np.ndarray]:
    return [s.estimate for s in pane.query_one("#compare-instantaneous", OverlayPlot)._series]


@run_async
async def test_b_splits_the_compare_pane_and_v_switches_its_group(suite_files):
    from memtui.app import open_app

    app = open_app(suite_files)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, WORK)
        await pilot.press("5")
        await settle(pilot, WORK)
        pane = app.query_one(ComparePane)
        whole = _instantaneous(pane)
        assert not pane.query_one("#compare-by").display
        await pilot.press("b")  # the split of the current model, which the Compare pane follows
        await settle(pilot, WORK)
        assert app.by == "domain" and pane.by == "domain"
        want = compare_by(app.suite, replace(app.settings, engine="memtui"), "domain")

        legend = str(pane.query_one("#compare-by").render())
        assert pane.query_one("#compare-by").display
        for group in want.groups:
            treated, controls = want.group_size(group)
            assert f"{group} ({treated} treated, {controls} controls)" in legend
        text = str(pane.query_one("#compare-text").render())
        assert "4 models by domain: 2 groups" in text
        for group in want.groups:  # every group's per-model summaries, as compare_by gives them
            for model in want.models:
                res = want.suites[group].results[model][app.settings.metric]
                mean = res.instantaneous["estimate"].mean()
                assert f"mean instantaneous {num(mean, signed=True)}, overall " in text
        for model in want.models:
            (d,) = want.by_model[model].differences
            o = d.overall
            estimate = nums((o["estimate"], o["ci_low"], o["ci_high"]), signed=True)[0]
            assert f"{model}: domain=code − domain=web overall {estimate}" in text

        def shown(group: str) -> list[np.ndarray]:
            return [want.suites[group].results[m][app.settings.metric].instantaneous.sort("cohort")["estimate"]
                    .cast(float).to_numpy() for m in want.models]  # fmt: skip

        for got, exp in zip(_instantaneous(pane), shown("domain=code"), strict=True):
            np.testing.assert_array_equal(got, exp)
        assert not all(np.array_equal(a, b) for a, b in zip(whole, _instantaneous(pane), strict=True))
        await pilot.press("v")  # the next group: its plots and grids, no new estimate
        await pilot.pause()
        assert pane.group == 1 and "group 2 (v: next)" in str(pane.query_one("#compare-by").render())
        for got, exp in zip(_instantaneous(pane), shown("domain=web"), strict=True):
            np.testing.assert_array_equal(got, exp)
        grid = str(pane.query_one("#compare-grid").render())
        r = want.correlations["domain=web"].pearson
        assert f"{r[0, 3]:+.2f}" in grid
        await pilot.press("V")
        await pilot.pause()
        assert pane.group == 0
        for got, exp in zip(_instantaneous(pane), shown("domain=code"), strict=True):
            np.testing.assert_array_equal(got, exp)

        await pilot.press("B")  # no split: the whole suite again, from memory
        await settle(pilot, WORK)
        assert app.by == "" and not pane.query_one("#compare-by").display
        for got, exp in zip(_instantaneous(pane), whole, strict=True):
            np.testing.assert_array_equal(got, exp)


@run_async
async def test_v_on_an_unsplit_compare_pane_says_how_to_split(suite_files):
    from memtui.app import open_app

    app = open_app(suite_files[:2])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, WORK)
        await pilot.press("5")
        await settle(pilot, WORK)
        await pilot.press("v")
        await pilot.pause()
        assert [n.message for n in app._notifications][-1].startswith("Compare is not split: b")
