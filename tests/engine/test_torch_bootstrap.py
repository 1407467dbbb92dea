"""The bootstrap's group sums through torch (engine.torch_bootstrap) equal the numpy/compiled path's within float32
rounding, on the CPU through the same torch code the GPU runs: the draws, the studentising standard errors, the
studentised sup laws and critical values, and an estimate's flags."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine import bands, did, torch_bootstrap
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_estimate.py"


def load_script():
    spec = importlib.util.spec_from_file_location("scale_estimate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Relative to the largest magnitude of what is compared: the group sums are float32 GEMMs of ~100 terms blocked
# differently by torch's BLAS and numpy's; the measured differences are ~2e-7 (a float32 ulp or two of the largest
# sums), the tolerance allows 100 ulps.
RTOL = 1e-5
DRAWS, SEED = 200, 7


@pytest.fixture(scope="module")
def panel():
    return load_script().make_panel(per_cohort=30, n_never=150, checkpoints=13, seed=3)


def _layout(panel):
    lay = build_layout(panel.metrics["loglik"], panel.treatment, panel.steps, never=NEVER)
    return lay, did.point_estimates(lay)


def _close(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(a)
    return float(np.max(np.abs(a[ok] - b[ok])) / np.max(np.abs(b[ok])))


def test_the_draws_are_the_compiled_paths_within_float32_rounding(panel):
    lay, est = _layout(panel)
    with torch_bootstrap.using("cpu"):
        ref = did.bootstrap(lay, est, draws=DRAWS, seed=SEED)
    with torch_bootstrap.using("torch-cpu"):
        got = did.bootstrap(lay, est, draws=DRAWS, seed=SEED)
    assert _close(got.cells, ref.cells) < RTOL
    assert np.array_equal(got.group_w, ref.group_w)  # sums of the same multipliers, on the host in both paths
    assert not np.array_equal(got.cells, np.zeros_like(got.cells))


def test_the_calibrated_laws_and_critical_values_are_the_compiled_paths(panel):
    lay, est = _layout(panel)
    masks = {"post": ~lay.cell_pre, "all": np.ones(len(lay.cell_pre), bool)}
    floor = did.se_floor(lay.scale)
    runs = {}
    for device in ("cpu", "torch-cpu"):
        with torch_bootstrap.using(device):
            runs[device] = bands.calibrated_bootstrap(lay, est, masks, draws=DRAWS, seed=SEED, floor=floor)
    ref, got = runs["cpu"], runs["torch-cpu"]
    assert _close(got.se, ref.se) < RTOL
    for name in masks:
        assert _close(got.tmax[name], ref.tmax[name]) < RTOL
        crit_ref, crit_got = did.critical_value(ref.tmax[name], 0.05), did.critical_value(got.tmax[name], 0.05)
        assert abs(crit_got - crit_ref) <= RTOL * crit_ref


def test_an_estimates_errors_bands_and_flags_are_the_compiled_paths(panel):
    frames = {}
    for device in ("cpu", "torch-cpu"):
        with torch_bootstrap.using(device):
            frames[device] = estimate(panel, Settings(draws=DRAWS, seed=SEED)).cells
    ref, got = frames["cpu"], frames["torch-cpu"]
    for column in ("std_error", "crit", "band_low", "band_high"):
        assert _close(got[column].to_numpy(), ref[column].to_numpy()) < RTOL, column
    assert got["significant"].to_list() == ref["significant"].to_list()
    assert 0 < int(ref["significant"].sum()) < ref.height  # the flags are not all one way


def test_the_default_without_cuda_is_the_compiled_path_bit_for_bit(panel, monkeypatch):
    monkeypatch.delenv("MEMTUI_ENGINE_DEVICE", raising=False)
    monkeypatch.setattr(torch_bootstrap, "_cuda_available", lambda: False)
    lay, est = _layout(panel)
    assert torch_bootstrap.device_for(10**9) is None
    auto = did.bootstrap(lay, est, draws=50, seed=SEED)
    with torch_bootstrap.using("cpu"):
        ref = did.bootstrap(lay, est, draws=50, seed=SEED)
    assert np.array_equal(auto.cells, ref.cells)


def test_auto_sends_large_panels_to_cuda_and_small_ones_to_the_cpu(monkeypatch):
    monkeypatch.delenv("MEMTUI_ENGINE_DEVICE", raising=False)
    monkeypatch.setattr(torch_bootstrap, "_cuda_available", lambda: True)
    assert torch_bootstrap.device_for(torch_bootstrap.AUTO_CUDA_ELEMENTS) == "cuda"
    assert torch_bootstrap.device_for(torch_bootstrap.AUTO_CUDA_ELEMENTS - 1) is None
    with torch_bootstrap.using("cpu"):
        assert torch_bootstrap.device_for(10**12) is None


def test_the_environment_setting_is_read_and_a_bad_one_refused(monkeypatch):
    monkeypatch.setenv("MEMTUI_ENGINE_DEVICE", "torch-cpu")
    assert torch_bootstrap.device_for(1) == "cpu"
    monkeypatch.setenv("MEMTUI_ENGINE_DEVICE", "gpu0")
    with pytest.raises(MemtuiError, match="engine device must be one of"):
        torch_bootstrap.device_for(1)
    with pytest.raises(MemtuiError, match="engine device must be one of"), torch_bootstrap.using("tpu"):
        pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="refusal of cuda where there is none")
def test_cuda_is_refused_where_torch_finds_no_device():
    with torch_bootstrap.using("cuda"), pytest.raises(MemtuiError, match="no CUDA device"):
        torch_bootstrap.device_for(1)


def test_estimate_takes_the_engine_device_and_refuses_one_it_cannot_give(tmp_path, capsys):
    from memtui.cli.main import main
    from memtui.panel.synthetic import Simulation, write_synthetic

    path = write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=4, per_cohort=12, n_never=30, n_checkpoints=6))
    outs = {}
    for device in ("cpu", "torch-cpu"):
        assert main(["estimate", str(path), "--draws", "40", "--no-cache", "--engine-device", device]) == 0
        outs[device] = capsys.readouterr().out
    assert outs["cpu"].splitlines()[1:] == outs["torch-cpu"].splitlines()[1:]  # after the panel's line
    with pytest.raises(SystemExit):
        main(["estimate", str(path), "--engine-device", "gpu"])
    assert "invalid choice" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["estimate", str(path), "--engine-device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("memtui: engine device cuda") and err.count("\n") == 1
