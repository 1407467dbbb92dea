"""The full collection done while the app is idle (MemtuiApp._collect_ahead): only once the heap is frozen and the
collector has come part of the way to its own full collection."""

from __future__ import annotations

import gc

import pytest

from memtui.app import main
from memtui.app.main import GC_AHEAD, MemtuiApp
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic


@pytest.fixture
def app(tmp_path):
    return MemtuiApp(read_panel(write_synthetic(tmp_path / "panel.h5", Simulation(n_cohorts=3, n_checkpoints=4))))


@pytest.mark.parametrize(
    ("frozen", "since_full", "collected"),
    [(True, GC_AHEAD, True), (True, GC_AHEAD - 1, False), (False, GC_AHEAD + 3, False)],
)
def test_an_idle_app_does_the_coming_full_collection(app, monkeypatch, frozen, since_full, collected):
    calls = []
    monkeypatch.setattr(main.gc, "get_count", lambda: (0, 0, since_full))
    monkeypatch.setattr(main.gc, "collect", lambda *args: calls.append(args))
    app._heap_frozen = frozen  # noqa: SLF001 - what the first estimate shown sets
    app._collect_ahead()  # noqa: SLF001 - the idle tick's
    assert calls == ([()] if collected else [])


def test_the_count_read_is_the_one_python_starts_a_full_collection_on():
    assert gc.get_threshold()[2] > GC_AHEAD  # before Python's own
    gc.collect()
    assert gc.get_count()[2] == 0  # a full collection starts the count again
