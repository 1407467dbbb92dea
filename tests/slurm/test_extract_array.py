"""`memtui extract --slurm` on a real SLURM cluster (CI starts a one-node one with tests/slurm/start-cluster.sh):
a 2-task array fills a panel exactly like one worker; a task killed mid-run is made good by a rerun; --cancel
cancels the array. Each task runs through submitit, as users' tasks do."""

from __future__ import annotations

import json
import subprocess
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_panel, wait_until

from memtui.extract import jobs
from memtui.panel.hdf5 import read_panel

METRICS = ("loglik", "accuracy", "rank", "entropy")


@pytest.fixture
def study(tiny_checkpoints, tiny_reference):
    return tiny_checkpoints, tiny_reference


def _submit(cli, panel: Path, ckpts: Path, partition: str, *extra: str):
    slurm = ["--slurm", "--workers", "2", "--partition", partition, "--gpus-per-task", "0", "--time", "10"]
    code, out, err = cli("extract", panel, "--model", ckpts, *slurm, "--device", "cpu", "--batch-size", "7", *extra)
    assert code == 0, err
    return json.loads((panel.parent / f"{panel.name}.work" / "launch.json").read_text())["slurm_job"]


_wait = partial(wait_until, timeout=300.0, every=0.5)  # detached workers report only through their files


def _queued(job: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True, timeout=30)
    return [line for line in out.stdout.splitlines() if line.strip()]


def _finished(panel: Path, job: str):
    progress = jobs.read_progress(panel)
    return progress if progress and progress["state"] != "running" and not _queued(job) else None


def _same(panel: Path, reference) -> None:
    got = read_panel(panel)
    assert got.done.all()
    for m in METRICS:
        np.testing.assert_array_equal(got.metrics[m], reference.metrics[m], err_msg=m)


def test_a_two_task_array_fills_the_panel_like_one_worker(cli, tmp_path, study, slurm_partition):
    ckpts, reference = study
    panel = make_panel(tmp_path / "panel.h5")
    job = _submit(cli, panel, ckpts, slurm_partition)
    final = _wait(lambda: _finished(panel, job), what="the array")
    assert final["state"] == "done", Path(final["log"]).read_text()[-3000:]
    assert sorted(w["slurm_task"] for w in final["workers"]) == ["0", "1"]
    assert {w["slurm_job"] for w in final["workers"]} == {job}
    _same(panel, reference)
    code, out, err = cli("status", panel)
    assert code == 0 and f"slurm {job}_0" in out and f"slurm {job}_1" in out


def test_a_task_killed_mid_run_is_made_good_by_a_rerun(cli, tmp_path, study, slurm_partition, monkeypatch):
    ckpts, reference = study
    panel = make_panel(tmp_path / "panel.h5")
    monkeypatch.setenv("MEMTUI_EXTRACT_BATCH_DELAY", "0.5")  # tasks inherit the submitting environment
    job = _submit(cli, panel, ckpts, slurm_partition)

    def busy():
        p = jobs.read_progress(panel)
        return any(w.get("slurm_task") == "0" and w.get("unit") for w in (p or {}).get("workers") or [])

    _wait(busy, what="task 0 inside a unit")
    subprocess.run(["scancel", "--signal=KILL", f"{job}_0"], check=True, timeout=30)  # as a node failure would
    _wait(lambda: _finished(panel, job), what="the rest of the array")
    monkeypatch.delenv("MEMTUI_EXTRACT_BATCH_DELAY")
    if not read_panel(panel).done.all():  # the surviving task may already have taken task 0's unit over
        job = _submit(cli, panel, ckpts, slurm_partition)
        final = _wait(lambda: _finished(panel, job), what="the rerun")
        assert final["state"] == "done", Path(final["log"]).read_text()[-3000:]
    _same(panel, reference)


def test_cancel_cancels_the_array(cli, tmp_path, study, slurm_partition, monkeypatch):
    ckpts, _ = study
    panel = make_panel(tmp_path / "panel.h5")
    monkeypatch.setenv("MEMTUI_EXTRACT_BATCH_DELAY", "1")
    job = _submit(cli, panel, ckpts, slurm_partition)
    _wait(lambda: (p := jobs.read_progress(panel)) and p["n_running"] >= 1, what="a running task")
    code, out, err = cli("extract", panel, "--cancel")
    assert code == 0, err
    _wait(lambda: not _queued(job), timeout=120, what="the array to leave the queue")
    final = jobs.read_progress(panel)
    assert final["state"] in ("cancelled", "stale") and not read_panel(panel).done.all()
