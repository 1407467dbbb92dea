"""A worker's answer handled while the app shuts down does nothing (app/messages.while_running).

Textual clears ``is_running`` and then removes the screens' widgets while the app still dispatches the messages
queued before: an estimate's last progress report, a split's answer, a reload, the extraction poller's status or a
spare-dialog tick that arrived just before quitting looked up a pane that was gone and raised NoMatches (twice in
CI). The state between the two is made here on purpose, since waiting for it to happen by chance is a race.
"""

from __future__ import annotations

import numpy as np
from app_pilot import run_async, settle
from textual.widgets import TabbedContent

from memtui.app.extraction import ExtractionPane
from memtui.app.main import MemtuiApp
from memtui.app.messages import ByProgress, ByReady, EstimateProgress, EstimateReady, PanelReloaded
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=4, per_cohort=8, n_never=30, n_checkpoints=6, seed=3)


@run_async
async def test_answers_that_arrive_while_the_panes_are_removed_are_dropped(tmp_path):
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", SIM)))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        settings = app.settings
        app._running = False  # noqa: SLF001 - what App._shutdown does first
        await app.screen.query_one(TabbedContent).remove()  # and then: the panes are gone
        app.estimates.computing = settings  # an estimate was in flight when the user quit
        app.on_estimate_progress(EstimateProgress(settings, 1.0, "done"))
        app._estimate_ready(EstimateReady(settings, app.estimates.generation, None, "failed"))  # noqa: SLF001
        app.by = key = "cohort_size"
        app.splits.computing = (settings, key)
        app.on_by_progress(ByProgress((settings, key), 0.5, "bootstrap"))
        app._by_ready(ByReady((settings, key), app.splits.generation, None, "failed"))  # noqa: SLF001
        app.on_panel_reloaded(PanelReloaded(None, "damaged"))
        app._job_status(ExtractionPane.Status(None, np.ones(SIM.n_checkpoints, bool), True))  # noqa: SLF001
        app._keep_spares()  # noqa: SLF001 - the idle timer's tick
        app._build_spare()  # noqa: SLF001
        app.estimates.computing = app.splits.computing = None
        app._running = True  # noqa: SLF001 - let run_test shut it down as usual
