"""benchmarks/scale_estimate.py cannot rot: its --quick run makes a panel of the Pythia design, estimates it on every
engine device this machine has (and torch's CPU path) and writes figures that parse. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.simulation
def test_the_quick_run_prints_and_writes_every_figure(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale_estimate.py"), "--quick", "--torch-cpu", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    assert report["gemm_madds_per_s"] > 0
    devices = [r["device"] for r in report["runs"]]
    assert devices[:2] == ["cpu", "torch-cpu"]
    for r in report["runs"]:
        assert r["instances"] == 143 * 3 + 200 and r["draws"] == 100
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["floor_s"] > 0 and r["peak_numpy_gb"] > 0
        assert r["cells"] > 143 * 100  # every cell of the 144-checkpoint design
    assert report["runs"][0]["significant"] == report["runs"][1]["significant"]
    assert run.stdout.count("instances") == len(devices)


@pytest.mark.simulation
def test_the_baseline_run_times_both_codes_and_compares_them(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale_estimate.py"), "--quick", "--baseline", str(ROOT / "src"),
         "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["code"] for r in runs] == ["before", "after"] and all(r["cpu_s"] > 0 for r in runs)
    assert runs[0]["digest"] == runs[1]["digest"] and "the same results bit for bit: True" in run.stdout
