"""Shared fixtures: small simulated panels and a CLI runner that captures what a user would see."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtui.cli import main
from memtui.synthetic import Simulation, write_synthetic

SMALL = Simulation(n_cohorts=5, per_cohort=15, n_never=40, n_checkpoints=7, seed=3)
DATA = Path(__file__).parent / "data"


@pytest.fixture
def small_panel(tmp_path) -> Path:
    return write_synthetic(tmp_path / "small.h5", SMALL)


@pytest.fixture
def cli(capsys):
    """Run `memtui ARGS...` in-process; returns (exit code, stdout, stderr)."""

    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
