"""benchmarks/gpu_extract.py cannot rot: its --dry-run runs every part (speed of both shape families against the
naive baseline, batch invariance, bf16 vs fp32, significance on the shipped samples) on CPU with tiny shapes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_extract.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_extract", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_measures_everything_the_gpu_run_will(tmp_path):
    script = load_script()
    assert set(script.GPU_SHAPES) == {"pythia-1.4b", "pythia-6.9b", "pythia-12b", "olmo2-7b"}
    out = tmp_path / "report.json"
    report = script.main(["--dry-run", "--out", str(out)])
    assert json.loads(out.read_text())["card"] == report["card"] == "cpu (dry run)"
    assert report["reference_tflops"] == 989.0
    for shape in ("tiny-neox", "tiny-olmo2"):
        row = report["speed"][shape]
        for path in ("memtui", "naive"):
            assert row[path]["tokens_per_s"] > 0 and 0 < row[path]["mfu_989"] < row[path]["mfu_989_with_attention"]
        assert row["speedup_vs_naive"] > 0
    inv = report["invariance"]
    metrics = {"loglik", "accuracy", "rank", "entropy", "extractable", "extractable_len", "sampled_logp"}
    for key in ("bfloat16_fast", "bfloat16_invariant", "float32_fast", "float32_invariant"):
        assert set(inv[f"{key}_batch_vs_alone_max_abs"]) == metrics
    assert all(d == 0 for d in inv["float32_invariant_batch_vs_alone_max_abs"].values())  # the CPU guarantee
    assert inv["bf16_vs_fp32_max_abs"]["loglik"] > 0 and inv["bfloat16_invariant_vs_fast_time_ratio"] > 0
    sig = report["significance"]
    assert {"tiny-gptneox", "synthetic"} <= set(sig["panels"])
    for row in sig["panels"].values():
        assert row["cells"] > 0 and {f"changed_{k}" for k in sig["deltas"]} <= set(row)
    assert set(inv["per_target_sd"]) == set(sig["per_target_sd"]) == {"bf16_batch", "bf16_vs_fp32"}
    assert inv["per_target_sd"]["bf16_vs_fp32"] > 0  # tiny-neox in bf16 and fp32 differ
    typical = {f"changed_typical_{k}" for k in sig["per_target_sd"]}
    assert typical <= set(sig["panels"]["tiny-gptneox"]) and not typical & set(sig["panels"]["synthetic"])


def test_mfu_variants_dry_run_times_every_variant(tmp_path, monkeypatch):
    """benchmarks/gpu_mfu_variants.py (the next GPU session's first run) cannot rot either: on CPU with a tiny shape it
    times the fast and invariant paths and the compiled body, profiles the fast path, and the compiled invariant path
    scores what the eager one does, a row alone as in its batch."""
    spec = importlib.util.spec_from_file_location("gpu_mfu_variants", SCRIPT.parent / "gpu_mfu_variants.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    out = tmp_path / "mfu.json"
    report = module.main(["--dry-run", "--out", str(out)])
    row = json.loads(out.read_text())["shapes"]["tiny-neox"]
    assert report["card"] == "cpu (dry run)"
    for name in ("fast", "fast, top-k every target", "invariant", "invariant, top-k every target", "invariant+compile"):
        assert row[name]["tokens_per_s"] > 0 and len(row[name]["scores"]) == 2
    assert "profile_fast" in row and row["compile_s"] > 0
    assert row["compile_vs_eager_loglik_max_abs"] < 1e-3 and row["compile_batch_vs_alone_max_abs"] == 0
