"""benchmarks/gpu_bootstrap_check.py cannot rot: its --tiny run measures every part (the bootstrap on both paths,
their differences against the tolerance, a whole estimate on each, the floor) with torch's CPU path in the GPU's
place. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_bootstrap_check.py"


def test_the_tiny_run_measures_everything_the_gpu_run_will(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_bootstrap_check", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "report.json"
    report = script.main(["--tiny", "--out", str(out)])
    assert json.loads(out.read_text())["card"] == report["card"] == "cpu (tiny run: torch's CPU path)"
    assert report["instances"] == 23 * 3 + 200 and report["floor_s"] > 0
    boot = report["bootstrap"]
    assert {"cpu", "torch-cpu (first)", "torch-cpu"} <= set(boot)
    assert set(boot["relative_differences"]) == {"draws", "se", "tmax_post", "tmax_all", "crit_post", "crit_all"}
    assert boot["within_tolerance"] is True
    assert report["estimate"]["flags_differing"] == 0 and report["estimate"]["significant_cpu"] > 0
