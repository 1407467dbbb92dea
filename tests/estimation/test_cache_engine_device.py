"""A cached estimate and the engine device: ``--engine-device auto`` (the default) reads an entry whatever device
computed it, and the entry's notes say when that was a torch device; a device named explicitly reads only an entry
that device computed (a user checking or timing the GPU path gets it run), and an estimate without a bootstrap serves
every device."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from memtui.engine import torch_bootstrap
from memtui.estimation import cache
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=4, per_cohort=10, n_never=30, n_checkpoints=6, seed=2)
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _entry_device(panel, settings) -> str | None:
    base = cache.cache_dir(panel) / cache.cache_key(panel, settings)
    return json.loads(base.with_suffix(".json").read_text()).get("engine_device")


@needs_torch
def test_a_named_device_recomputes_an_entry_another_device_made_and_auto_reads_any(tmp_path):
    panel = read_panel(write_synthetic(tmp_path / "p.h5", SIM))
    settings = Settings(draws=100)
    with torch_bootstrap.using("cpu"):
        on_cpu = cache.cached_estimate(panel, settings)
    assert _entry_device(panel, settings) == "cpu" and not any("torch" in n for n in on_cpu.notes)
    assert cache.load(panel, settings, "cpu") is not None and cache.load(panel, settings, "auto") is not None
    assert cache.load(panel, settings, "torch-cpu") is None  # asked for torch: the CPU's entry is not its answer
    with torch_bootstrap.using("torch-cpu"):
        on_torch = cache.cached_estimate(panel, settings)
    assert _entry_device(panel, settings) == "torch-cpu"
    assert any("engine device torch-cpu" in n for n in on_torch.notes)
    est_cpu, est_torch = on_cpu.cells["estimate"].to_numpy(), on_torch.cells["estimate"].to_numpy()
    assert np.array_equal(est_cpu, est_torch)  # point estimates do not touch the device
    se_cpu, se_torch = on_cpu.cells["std_error"].to_numpy(), on_torch.cells["std_error"].to_numpy()
    assert np.allclose(se_cpu, se_torch, rtol=1e-4, equal_nan=True)
    hit = cache.load(panel, settings, "auto")  # the default reads it, and says which engine computed it
    assert hit is not None and any("engine device torch-cpu" in n for n in hit.notes)
    assert cache.load(panel, settings, "cpu") is None
    with torch_bootstrap.using("cpu"):
        assert cache.load(panel, settings) is None  # the engine setting is what load asks for by default


def test_without_a_bootstrap_every_device_reads_the_entry_and_an_old_entry_only_auto(tmp_path):
    panel = read_panel(write_synthetic(tmp_path / "p.h5", SIM))
    analytic = Settings(draws=0)
    with torch_bootstrap.using("cpu"):
        cache.cached_estimate(panel, analytic)
    assert _entry_device(panel, analytic) == "none"
    assert all(cache.load(panel, analytic, d) is not None for d in torch_bootstrap.DEVICES)
    drawn = Settings(draws=50)
    with torch_bootstrap.using("cpu"):
        cache.cached_estimate(panel, drawn)
    base = cache.cache_dir(panel) / cache.cache_key(panel, drawn)
    meta = json.loads(base.with_suffix(".json").read_text())
    del meta["engine_device"]  # an entry written before entries said which device made them
    base.with_suffix(".json").write_text(json.dumps(meta))
    assert cache.load(panel, drawn, "auto") is not None and cache.load(panel, drawn, "cpu") is None
