"""Shared fixtures: small simulated panels and a CLI runner that captures what a user would see."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from memtui.cli.main import main
from memtui.panel.synthetic import Simulation, write_synthetic

SMALL = Simulation(n_cohorts=5, per_cohort=15, n_never=40, n_checkpoints=7, seed=3)
DATA = Path(__file__).parent / "data"


@pytest.fixture
def small_panel(tmp_path) -> Path:
    return write_synthetic(tmp_path / "small.h5", SMALL)


@pytest.fixture(autouse=True)
def _own_config(tmp_path_factory, monkeypatch):
    """Every test reads and writes the workbench's preferences (the theme) in a folder of its own, never the user's:
    a remembered light theme must not change what a test sees."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture(autouse=True)
def _no_spare_dialogs(request, monkeypatch):
    """The workbench builds its dialogs ahead while idle (app/spares.py), ~150 ms of CPU a build: only the tests
    marked ``spares`` (those of the spares, and of what they change) have it on; the rest test other things and
    would pay for it in every test of half a second or more."""
    if request.node.get_closest_marker("spares") is None:
        from memtui.app.main import MemtuiApp

        monkeypatch.setattr(MemtuiApp, "spares_every_s", None)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """Code that installs signal handlers (the extraction worker in the foreground) must put them back: a test that
    leaves one changed fails here, and the handlers are restored so the tests after it see Python's own (ctrl-c as
    KeyboardInterrupt is what the fetch and worker tests rely on)."""
    before = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    yield
    changed = {sig.name: signal.getsignal(sig) for sig in _SIGNALS if signal.getsignal(sig) is not before[sig]}
    for sig in _SIGNALS:
        signal.signal(sig, before[sig])
    assert not changed, f"the test left signal handlers changed: {changed}"


@pytest.fixture
def cli(capsys):
    """Run `memtui ARGS...` in-process; returns (exit code, stdout, stderr)."""

    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> Path:
    """Checkpoint folders of a tiny GPT-NeoX (tests/tiny_models.py), made once per session."""
    from tiny_models import save_checkpoints

    return save_checkpoints(tmp_path_factory.mktemp("tiny-ckpts"))


@pytest.fixture(scope="session")
def tiny_reference(tmp_path_factory, tiny_checkpoints):
    """The tiny panel extracted by one uninterrupted foreground worker (batch 7): what every other way of extracting
    it — many workers, killed and resumed ones, SLURM tasks — must reproduce."""
    from tiny_models import make_panel

    from memtui.extract.worker import run
    from memtui.panel.hdf5 import read_panel

    path = make_panel(tmp_path_factory.mktemp("tiny-reference") / "panel.h5")
    assert run(path, model=str(tiny_checkpoints), batch_size=7, handle_signals=False, log=lambda m: None) == "done"
    return read_panel(path)
