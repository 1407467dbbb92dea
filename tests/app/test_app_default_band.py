"""The workbench runs the band `memtui estimate` runs without --band (estimation.settings.default_band): the
permutation band on a panel whose order is a uniform shuffle with controls drawn from it, the calibrated band where the
settings rule it out; a band chosen in the settings dialog stays whatever else changes."""

from __future__ import annotations

import numpy as np
from app_pilot import run_async, settle

from memtui.app.main import MemtuiApp
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.synthetic import Simulation, simulate

SIM = Simulation(n_cohorts=4, per_cohort=10, n_never=30, n_checkpoints=6, seed=3)


def _shuffled(path, order: str = "neox"):
    """A simulated panel whose provenance says a shuffled order and every instance's position in it (controls drawn
    from the order past the last trained step, as `build --controls beyond` records)."""
    data = simulate(SIM)
    position = np.arange(len(data["ids"]), dtype=np.int64)
    create_panel(path, metrics=list(data["values"]), attrs={"model": "synthetic", "order": order},
                 provenance={"position": position}, **data)  # fmt: skip
    return read_panel(path)


@run_async
async def test_the_workbench_runs_the_clis_default_band_and_keeps_a_chosen_one(tmp_path):
    app = MemtuiApp(_shuffled(tmp_path / "p.h5"))
    assert app.settings.band == "permutation"
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert app.result.settings.band == "permutation"
        app.change_settings(control_group="not_yet_treated")  # controls that move with the labels: not permutable
        await settle(pilot)
        assert app.settings.band == "calibrated" and app.result.settings.band == "calibrated"
        app.change_settings(control_group="never_treated", band="calibrated")  # the band as the dialog sends it
        await settle(pilot)
        assert app.settings.band == "permutation"
        app.change_settings(band="classic")  # chosen: it stays
        app.change_settings(draws=199)
        await settle(pilot)
        assert app.settings.band == "classic" and app.result.settings.band == "classic"


@run_async
async def test_a_panel_not_known_to_be_shuffled_gets_the_calibrated_band(tmp_path):
    app = MemtuiApp(_shuffled(tmp_path / "p.h5", order="memmap"))
    assert app.settings.band == "calibrated"
