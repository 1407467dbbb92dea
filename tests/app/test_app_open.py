"""The "Open panel…" picker: another panel replaces what is open; a file that is not a panel is a line in the
dialog, and nothing changes."""

from __future__ import annotations

from app_pilot import run_async, settle

from memtui.app.main import MemtuiApp
from memtui.app.open_dialog import OpenPanelDialog, PanelTree
from memtui.estimation.estimate import estimate
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

GROUPS = ("estimate", "reload", "summary-extras", "compare", "open-panel")


@run_async
async def test_open_panel_replaces_the_panel_and_refuses_a_non_panel_in_the_dialog(tmp_path):
    a = write_synthetic(tmp_path / "a.h5", Simulation(n_cohorts=4, per_cohort=10, n_never=40, n_checkpoints=6))
    b = write_synthetic(tmp_path / "b.h5", Simulation(n_cohorts=5, per_cohort=10, n_never=40, n_checkpoints=7, seed=3))
    (tmp_path / "notes.h5").write_text("not a panel")
    (tmp_path / "readme.txt").write_text("ignored by the tree")
    app = MemtuiApp(read_panel(a))
    async with app.run_test(size=(100, 36)) as pilot:
        await settle(pilot)
        app.action_open_panel()
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, OpenPanelDialog)
        tree = dialog.query_one(PanelTree)
        shown = {p.name for p in tree.filter_paths(tmp_path.iterdir())}
        assert shown == {"a.h5", "b.h5", "notes.h5"}  # panels and folders only
        field = dialog.query_one("#open-path")
        field.focus()
        field.value = str(tmp_path / "notes.h5")
        await pilot.press("enter")
        await settle(pilot, GROUPS)
        assert app.screen is dialog and "notes.h5" in str(dialog.query_one("#open-error").render())
        assert app.panel.path == a
        field.value = str(b)
        await pilot.press("enter")
        await settle(pilot, GROUPS)
        assert not isinstance(app.screen, OpenPanelDialog)
        assert app.panel.path == b and "b.h5" in str(app.query_one("#title").render())
        np_equal = app.result.matrix().shape == estimate(read_panel(b), app.settings).matrix().shape
        assert np_equal and app.result.checkpoints[-1] == read_panel(b).done_steps[-1]
