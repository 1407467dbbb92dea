"""One minus sign (U+2212) in every number the workbench shows, and the minimum detectable effect line that keeps the
sign of the estimate it compares (it read "0.1x that" for a mean of -0.08)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import polars as pl
import pytest
from app_pilot import run_async, settle
from app_screens import screen_text

from memtui.app.compare import correlation_grid
from memtui.app.fmt import cell, short_step
from memtui.app.main import MemtuiApp
from memtui.app.summary_lines import mde_line
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

HYPHEN_NUMBER = re.compile(r"(?<![A-Za-z0-9_])-(?=[0-9])")  # "-19k", "-0.5", never "model-a1" or "+/-"


def test_mde_line_keeps_the_sign_of_the_mean():
    negative = SimpleNamespace(instantaneous=pl.DataFrame({"estimate": [-0.06, -0.10]}))
    line = mde_line(0.8, negative)
    assert "−0.08" in line and "is −0.10× that" in line, line
    positive = SimpleNamespace(instantaneous=pl.DataFrame({"estimate": [1.2, 1.2]}))
    assert "+1.200, is 1.5× that" in mde_line(0.8, positive)


def test_formatters_write_the_minus_sign():
    assert short_step(-11000) == "−11k" and short_step(-1500) == "−1.5k" and short_step(-7) == "−7"
    assert cell(-4000) == "−4000" and cell(-0.5, ".3f") == "−0.500" and cell(-1e-9) == "−1e−09"
    import numpy as np

    m = np.array([[1.0, -0.5], [-0.5, 1.0]])
    assert not HYPHEN_NUMBER.search(correlation_grid(["a", "b"], m, m - 0.2, m + 0.1, "Pearson").plain)


def _no_hyphen_numbers(app, where: str) -> None:
    text = screen_text(app)
    found = [line for line in text.splitlines() if HYPHEN_NUMBER.search(line)]
    assert not found, (where, found)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@run_async
async def test_every_pane_writes_one_minus_sign(tmp_path, size):
    sim = Simulation(n_cohorts=8, per_cohort=10, n_never=50, n_checkpoints=10, seed=7)
    paths = [write_synthetic(tmp_path / f"m{i}.h5", Simulation(**{**sim.__dict__, "seed": i})) for i in (1, 2)]
    panels = [read_panel(p) for p in paths]
    app = MemtuiApp(panels[0], models=panels, suite=load_suite(paths))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("G", "home")  # the last cohort at the first checkpoint: c - g < 0
        await settle(pilot)
        assert "c−g −" in screen_text(app)
        _no_hyphen_numbers(app, "profile")
        await pilot.press("2")
        await settle(pilot)
        for _ in range(6):  # down through the plots (negative c - g on the persistent plot's axis)
            _no_hyphen_numbers(app, "summaries")
            await pilot.press("pagedown")
            await pilot.pause()
        await pilot.press("3", "s")  # every row: negative c - g and estimates
        await settle(pilot)
        for _ in range(8):
            _no_hyphen_numbers(app, "estimates")
            await pilot.press("l")
        await pilot.press("5")
        await settle(pilot)
        for _ in range(6):
            _no_hyphen_numbers(app, "compare")
            await pilot.press("pagedown")
            await pilot.pause()
