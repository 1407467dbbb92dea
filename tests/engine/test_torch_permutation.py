"""The permutation band's sums through torch (engine.torch_permutation) equal the compiled path's within float32
rounding, on the CPU through the same torch code the GPU runs: the per-cohort sums, the permuted controls' Grams and
means, the laws, and an estimate's critical values and flags; the torch path is used when the engine setting names a
torch device (and recorded), never under auto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from memtui.engine import did, permutations, torch_bootstrap, torch_permutation
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_estimate.py"

# Relative to the largest magnitude of what is compared: the sums are float32 additions of each cohort's rows (the
# Grams float32 products of the controls' rows) in another order where the device's reduction differs; on torch's
# CPU path they are measured equal (difference 0: index_add_ adds the slots in the compiled loop's order), on a GPU
# its atomics and cuBLAS reorder them (benchmarks/gpu_permutation_check.py measures it). The tolerance allows 100
# float32 ulps, the bootstrap's (tests/engine/test_torch_bootstrap.py).
RTOL = 1e-5
COUNT, SEED = 60, 11


def _scale_estimate():
    spec = importlib.util.spec_from_file_location("scale_estimate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paper_like() -> Panel:
    return _scale_estimate().make_panel(per_cohort=30, n_never=150, checkpoints=13, seed=3)


def _uneven() -> Panel:
    """Cohorts of 6 to 42 instances (every fourth cohort's rows cut to a few) and 90 controls: uneven slots."""
    full = _scale_estimate().make_panel(per_cohort=42, n_never=90, checkpoints=11, seed=5)
    rng = np.random.default_rng(2)
    keep = np.ones(len(full.treatment), bool)
    for k, step in enumerate(full.steps[1:]):
        rows = np.flatnonzero(full.treatment == step)
        keep[rng.choice(rows, size=len(rows) - (6 + 4 * k), replace=False)] = False
    return Panel(ids=full.ids[keep], treatment=full.treatment[keep], steps=full.steps, done=full.done,
                 metrics={"loglik": full.metrics["loglik"][keep]}, signs=full.signs)  # fmt: skip


LAYOUTS = {"paper-like": (_paper_like, "varying"), "uneven": (_uneven, "varying"), "uneven-universal": (_uneven,
           "universal")}  # fmt: skip


def _layout(name: str):
    make, base_period = LAYOUTS[name]
    panel = make()
    lay = build_layout(panel.metrics["loglik"], panel.treatment, panel.steps, never=NEVER, base_period=base_period)
    return lay, did.point_estimates(lay)


def rel(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(b)
    return float(np.max(np.abs(a[ok] - b[ok])) / np.max(np.abs(b[ok])))


@pytest.fixture(params=["compiled", "numpy"])
def reference(request, monkeypatch):
    """The path the torch sums are compared with: the compiled loop's, or numpy's (``sums``, ``_control_grams``)."""
    if request.param == "compiled" and not permutations.compiled():
        pytest.skip("the compiled loops are not built")

    def run(p, order):
        if request.param == "compiled":
            return permutations._compiled_sums(p, order)
        grams = permutations._control_grams(p, order) if p.ctrl_group >= 0 else (None, None)
        monkeypatch.setenv("MEMTUI_KERNELS", "numpy")
        try:
            return (permutations.sums(p, order), *grams)
        finally:
            monkeypatch.delenv("MEMTUI_KERNELS")

    return run


@pytest.mark.parametrize("method", torch_permutation.METHODS)
@pytest.mark.parametrize("controls", [False, True], ids=["fixed-controls", "permuted-controls"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_sums_grams_and_means_are_the_compiled_paths(layout, controls, method, reference, monkeypatch):
    lay, est = _layout(layout)
    p = permutations.plan(lay, est, controls=controls)
    order = permutations.orders(p, np.arange(1, 24, dtype=np.uint64))
    ref_sums, ref_grams, ref_means = reference(p, order)
    # a budget of one permutation per step: the sub-chunks are stitched back in order
    monkeypatch.setattr(torch_permutation, "_CPU_BUDGET", 1)
    monkeypatch.setattr(torch_permutation.TorchPermutationSums, "method", method)
    got_sums, grams, means = torch_permutation.TorchPermutationSums("cpu", p).sums(order)
    for got, ref in zip(got_sums, ref_sums, strict=True):
        assert got.dtype == np.float32 and rel(got, ref) < RTOL
        assert np.all(got[:, :, 0] == 0)
    assert np.abs(got_sums[2]).max() > 0  # the cross products are not all zero
    if not controls:
        assert grams is None and means is None
        return
    assert grams.dtype == np.float32 and means.dtype == np.float64
    assert rel(grams, ref_grams) < RTOL and rel(means, ref_means) < RTOL
    assert not np.allclose(grams[0], grams[1])  # each permutation's own controls


@pytest.mark.parametrize("controls", [False, True], ids=["fixed-controls", "permuted-controls"])
def test_the_laws_and_permuted_cells_are_the_compiled_paths(controls):
    lay, est = _layout("uneven")
    masks = {"post": ~lay.cell_pre, "all": np.ones(len(lay.cell_pre), bool)}
    se = did.floored(est.se, did.se_floor(lay.scale))
    kw = {"count": COUNT, "seed": SEED, "floor": did.se_floor(lay.scale), "controls": controls}
    runs = {}
    for device in ("cpu", "torch-cpu"):
        with torch_bootstrap.using(device):
            runs[device] = permutations.permute(lay, est, masks, se, **kw)
    ref, got = runs["cpu"], runs["torch-cpu"]
    for name in masks:
        assert rel(got.laws[name], ref.laws[name]) < RTOL
        assert abs(did.critical_value(got.laws[name], 0.05) - did.critical_value(ref.laws[name], 0.05)) <= (
            RTOL * did.critical_value(ref.laws[name], 0.05)
        )
    assert rel(got.cells, ref.cells) < RTOL and rel(got.centre, ref.centre) < RTOL


def test_an_estimates_crit_and_flags_are_the_compiled_paths_and_its_device_is_recorded():
    panel = _paper_like()
    y = panel.metrics["loglik"]
    for step in panel.steps[1:]:  # a large effect at each cohort's first checkpoint: some flags, not all
        y[np.ix_(panel.treatment == step, panel.steps == step)] += 1.5
    frames, used = {}, {}
    for device in ("cpu", "torch-cpu"):
        with torch_bootstrap.using(device), torch_bootstrap.recording() as seen:
            frames[device] = estimate(panel, Settings(band="permutation", draws=COUNT, seed=SEED)).cells
        used[device] = seen
    assert used == {"cpu": {"cpu"}, "torch-cpu": {"torch-cpu"}}  # what the cache records as the entry's device
    ref, got = frames["cpu"], frames["torch-cpu"]
    for column in ("crit", "band_low", "band_high"):
        assert rel(got[column].to_numpy(), ref[column].to_numpy()) < RTOL, column
    assert got["significant"].to_list() == ref["significant"].to_list()
    assert 0 < int(ref["significant"].sum()) < ref.height  # the flags are not all one way


def test_the_torch_path_runs_when_named_and_never_under_auto(monkeypatch):
    lay, est = _layout("paper-like")
    masks = {"post": ~lay.cell_pre}
    se = did.floored(est.se, did.se_floor(lay.scale))
    calls = []
    real = torch_permutation.TorchPermutationSums.sums

    def counted(self, order):
        calls.append((self.device.type, len(order)))
        return real(self, order)

    monkeypatch.setattr(torch_permutation.TorchPermutationSums, "sums", counted)
    monkeypatch.delenv("MEMTUI_ENGINE_DEVICE", raising=False)
    monkeypatch.setattr(torch_bootstrap, "_cuda_available", lambda: True)  # auto: even with a GPU, the compiled path
    kw = {"count": 40, "seed": SEED, "floor": did.se_floor(lay.scale), "controls": True}
    with torch_bootstrap.recording() as seen:
        permutations.permute(lay, est, masks, se, **kw)
    assert calls == [] and seen == {"cpu"}
    monkeypatch.setenv("MEMTUI_ENGINE_DEVICE", "torch-cpu")
    with torch_bootstrap.recording() as seen:
        permutations.permute(lay, est, masks, se, **kw)
    assert sum(n for _, n in calls) == 40 and {d for d, _ in calls} == {"cpu"} and seen == {"torch-cpu"}


@pytest.mark.simulation  # a benchmark script's run: once per CI, not again under the second BLAS kernel
def test_the_gpu_checks_tiny_mode_runs_on_the_cpu(tmp_path):
    import subprocess
    import sys

    script = SCRIPT.parent / "gpu_permutation_check.py"
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, str(script), "--tiny", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    report = json.loads(out.read_text())
    assert report["equal"]["within_tolerance"] is True
    assert report["equal"]["flags_differ"] == 0
    engine = subprocess.run([sys.executable, str(script), "--tiny", "--engine-only", "--out", str(out)],
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert engine.returncode == 0, engine.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["equal"]["within_tolerance"] is True and "law_post" in report["equal"]["relative_differences"]


def test_the_cache_records_the_permutation_bands_device(tmp_path):
    # before the band reported its device, its entries said "none" (no bootstrap) and served a request for any device
    import json

    from memtui.estimation import cache
    from memtui.panel.hdf5 import read_panel
    from memtui.panel.synthetic import Simulation, write_synthetic

    panel = read_panel(write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=4, per_cohort=10, n_never=30,
                                                                     n_checkpoints=6, seed=2)))  # fmt: skip
    settings = Settings(band="permutation", draws=50)
    base = cache.cache_dir(panel) / cache.cache_key(panel, settings)
    with torch_bootstrap.using("cpu"):
        on_cpu = cache.cached_estimate(panel, settings)
    assert json.loads(base.with_suffix(".json").read_text())["engine_device"] == "cpu"
    assert cache.load(panel, settings, "torch-cpu") is None  # asked for torch: the CPU's entry is not its answer
    with torch_bootstrap.using("torch-cpu"):
        on_torch = cache.cached_estimate(panel, settings)
    assert json.loads(base.with_suffix(".json").read_text())["engine_device"] == "torch-cpu"
    assert any("engine device torch-cpu" in n for n in on_torch.notes)
    assert rel(on_torch.cells["crit"].to_numpy(), on_cpu.cells["crit"].to_numpy()) < RTOL
