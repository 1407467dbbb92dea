"""A checkpoint that is a weight average (an EMA branch, a soup) is marked `~` on the heatmap's checkpoint axis, and
the legend says what the mark means; a panel without one shows neither."""

from __future__ import annotations

import h5py
from app_pilot import run_async, settle

from memtui.app.heatmap import AVERAGE_MARK, Heatmap
from memtui.app.main import MemtuiApp
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=4, per_cohort=10, n_never=30, n_checkpoints=6, seed=2)


def _with_ema_last_checkpoint(path):
    with h5py.File(path, "r+") as f:
        names = f["checkpoints/revision"]
        names[-1] = b"marin-community/marin-8b-base@deeper-starling"  # the card: every branch but kestrel is an EMA
    return path


@run_async
async def test_the_averaged_checkpoint_is_marked_and_the_legend_says_so(tmp_path):
    path = _with_ema_last_checkpoint(write_synthetic(tmp_path / "p.h5", SIM))
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        header = "".join(seg.text for seg in app.query_one(Heatmap)._header_strip())
        labels = header.split()
        assert labels[-1].endswith(AVERAGE_MARK) and not labels[0].endswith(AVERAGE_MARK), header
        assert f"{AVERAGE_MARK} weight average" in str(app.query_one("#legend").render())


@run_async
async def test_no_mark_without_an_average(tmp_path):
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", SIM)))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        header = "".join(seg.text for seg in app.query_one(Heatmap)._header_strip())
        assert AVERAGE_MARK not in header
        assert "weight average" not in str(app.query_one("#legend").render())


@run_async
async def test_the_mark_stored_in_the_panel_is_shown_without_a_telling_name(tmp_path):
    """`checkpoints/average` (written by extraction; panel-format.md, *Weight averages*) marks a checkpoint whose
    revision name says nothing, in a panel with no work folder beside it."""
    path = write_synthetic(tmp_path / "p.h5", SIM)
    with h5py.File(path, "r+") as f:
        f["checkpoints/average"][1] = b"soup"
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        labels = "".join(seg.text for seg in app.query_one(Heatmap)._header_strip()).split()
        assert [label.endswith(AVERAGE_MARK) for label in labels] == [False, True] + [False] * (len(labels) - 2)
        assert f"{AVERAGE_MARK} weight average" in str(app.query_one("#legend").render())
