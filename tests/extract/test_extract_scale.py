"""Many workers on one panel: claims under contention, a worker killed mid-unit, split units, a dead committer."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import STEPS, make_panel, wait_until

from memtui.extract import jobs
from memtui.extract.commit import Lease, commit_ready
from memtui.extract.units import Owner, WorkDir, plan_units
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel
from memtui.panel.superblock import read_superblock

METRICS = ("loglik", "accuracy", "rank", "entropy")


@pytest.fixture
def checkpoints(tiny_checkpoints) -> Path:
    return tiny_checkpoints


@pytest.fixture
def reference(tiny_reference):
    return tiny_reference


CLAIMER = """
import json, pathlib, sys, time
from memtui.extract.locking import FileLock
from memtui.extract.units import Owner, WorkDir, Unit
work, n_units, out, n_claimers = WorkDir(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3]), int(sys.argv[4])
me = Owner.me()
lock = FileLock(work.worker_lock(me)).acquire()  # as a worker does for its life: how this host knows it is one
units = [Unit(step, step, 0, 10, 1) for step in range(n_units)]
mine = [u.step for u in units if work.try_claim(u, me)]
out.write_text(json.dumps(mine))
# a worker holds its claims while it lives: stay alive until every claimer is through
deadline = time.monotonic() + 120
while len(list(out.parent.glob("c*.json"))) < n_claimers and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_many_claimers_take_each_unit_exactly_once(tmp_path):
    """Eight processes race for 200 units at once: every unit is taken by exactly one of them."""
    panel = tmp_path / "panel.h5"
    WorkDir(panel).ensure()
    procs = [
        subprocess.Popen([sys.executable, "-c", CLAIMER, str(panel), "200", str(tmp_path / f"c{i}.json"), "8"])
        for i in range(8)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    taken = [step for i in range(8) for step in json.loads((tmp_path / f"c{i}.json").read_text())]
    assert sorted(taken) == list(range(200))


def test_a_stale_claim_is_taken_over_by_exactly_one(tmp_path, monkeypatch):
    panel = tmp_path / "panel.h5"
    work = WorkDir(panel).ensure()
    unit = plan_units([10], np.array([0, 10]), 40, 1)[0]
    gone = Owner("another-host", 12345, token="old")
    work.claim_path(unit).write_text(gone.to_json())
    a, b = Owner("h", 1, token="a"), Owner("h", 2, token="b")
    assert not work.try_claim(unit, a)  # on another host: alive until its heartbeat ages
    monkeypatch.setenv("MEMTUI_STALE_S", "5")
    os.utime(work.claim_path(unit), (time.time() - 60, time.time() - 60))
    assert work.try_claim(unit, a) and not work.try_claim(unit, b)
    assert work.holder(unit).token == "a"


def test_a_requeued_slurm_task_takes_its_own_claim_at_once(tmp_path):
    work = WorkDir(tmp_path / "panel.h5").ensure()
    unit = plan_units([10], np.array([0, 10]), 40, 1)[0]
    earlier = Owner("node7", 111, slurm_job="900", slurm_task="3", token="run1")
    work.claim_path(unit).write_text(earlier.to_json())
    other_task = Owner("node8", 222, slurm_job="900", slurm_task="4", token="x")
    assert not work.try_claim(unit, other_task)
    requeued = Owner("node9", 333, slurm_job="900", slurm_task="3", token="run2")
    assert work.try_claim(unit, requeued)


@pytest.mark.slow
def test_a_worker_killed_mid_unit_is_taken_over_and_the_panel_completes_identical(
    tmp_path, checkpoints, reference, monkeypatch
):
    panel = make_panel(tmp_path / "panel.h5")
    monkeypatch.setenv("MEMTUI_EXTRACT_BATCH_DELAY", "0.4")
    pids = jobs.launch(panel, model=str(checkpoints), batch_size=7, workers=2, device="cpu")
    work = WorkDir(panel)

    def victim():
        p = jobs.read_progress(panel)
        busy = [w for w in (p or {}).get("workers") or [] if w.get("unit") and (w.get("instances_done") or 0) > 0]
        return busy[0] if busy else None

    target = wait_until(victim, what="a worker inside a unit")
    os.kill(target["pid"], signal.SIGKILL)
    held = [f.name for f in work.claims.glob("*.claim")]
    monkeypatch.delenv("MEMTUI_EXTRACT_BATCH_DELAY")
    final = wait_until(lambda: (p := jobs.read_progress(panel)) and p["state"] != "running" and p, what="the survivor")
    assert final["state"] == "done", Path(final["log"]).read_text()[-3000:]
    assert held  # the killed worker's claim was there, and the survivor took it over
    got = read_panel(panel)
    assert got.done.all()
    for m in METRICS:
        np.testing.assert_array_equal(got.metrics[m], reference.metrics[m], err_msg=m)
    assert not list(work.parts.glob("*.npz")) and not list(work.claims.glob("*.claim"))
    states = sorted(w["state"] for w in final["workers"])
    assert states == ["done", "stale"] and target["pid"] in pids


def test_a_worker_whose_units_are_all_claimed_waits_says_so_once_and_finishes_them(tmp_path, checkpoints, reference):
    """Every pending unit held by a live worker: this one waits (its log says why, once) rather than ending or
    scoring a unit twice, and takes the units as soon as their holder lets them go."""
    panel = make_panel(tmp_path / "panel.h5")
    work = WorkDir(panel).ensure()
    other = Owner(socket.gethostname(), os.getpid(), token="other")  # alive: it is this very process
    units = plan_units(STEPS, read_panel(panel).steps, read_panel(panel).n_instances, 1)
    assert all(work.try_claim(u, other) for u in units)
    logs, result, stop = [], {}, threading.Event()

    def extract():
        result["state"] = run(panel, model=str(checkpoints), batch_size=7, handle_signals=False, log=logs.append,
                              stop=stop)  # fmt: skip

    worker = threading.Thread(target=extract, daemon=True)
    worker.start()
    try:
        wait_until(lambda: any("waiting" in m for m in logs), timeout=60, what="the worker to say it waits")
        time.sleep(1.0)  # it keeps waiting; it neither ends nor scores a claimed unit
        assert worker.is_alive() and not read_panel(panel).done.any()
    finally:
        for unit in units:
            work.release(unit, other)
        worker.join(timeout=120)
        stop.set()  # only if it still runs: a failure above must not leave it polling for the rest of the session
    assert result == {"state": "done"}
    waits = [m for m in logs if "waiting" in m]
    assert len(waits) == 1 and f"the {len(units)} unit(s) left are claimed by other live workers" in waits[0], logs
    got = read_panel(panel)
    assert got.done.all()
    for m in METRICS:
        np.testing.assert_array_equal(got.metrics[m], reference.metrics[m], err_msg=m)


def test_split_units_agree_with_whole_checkpoints(tmp_path, checkpoints, reference):
    panel = make_panel(tmp_path / "panel.h5")
    assert run(panel, model=str(checkpoints), batch_size=7, split=3, handle_signals=False, log=lambda m: None) == "done"
    got = read_panel(panel)
    for m in METRICS:
        if torch.cuda.is_available():  # device auto: the GPU's fast path, whose batches change kernel paths
            np.testing.assert_allclose(got.metrics[m], reference.metrics[m], rtol=1e-6, atol=1e-9, err_msg=m)
        else:  # the CPU's batch-invariant scorer: other units, other batches, the same bits
            np.testing.assert_array_equal(got.metrics[m], reference.metrics[m], err_msg=m)


def test_a_committer_that_died_holding_the_lease_is_succeeded(tmp_path, checkpoints, reference):
    """A committer killed mid-fold leaves its lease and HDF5's write mark: the next one takes over and finishes."""
    panel = make_panel(tmp_path / "panel.h5")
    work = WorkDir(panel).ensure()
    committer = (
        "import os, sys\nfrom memtui.extract.commit import Lease\nfrom memtui.extract.units import Owner, WorkDir\n"
        "from memtui.panel.hdf5 import PanelWriter\n"
        "assert Lease(WorkDir(sys.argv[1]), Owner.me()).acquire()\nwriter = PanelWriter(sys.argv[1])\n"
        "os.kill(os.getpid(), 9)"
    )
    killed = subprocess.run([sys.executable, "-c", committer, str(panel)], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert (work.root / "commit.lease").exists() and read_superblock(panel).open_for_write
    assert run(panel, model=str(checkpoints), batch_size=7, handle_signals=False, log=lambda m: None) == "done"
    got = read_panel(panel)
    for m in METRICS:
        np.testing.assert_array_equal(got.metrics[m], reference.metrics[m], err_msg=m)
    assert not read_superblock(panel).open_for_write and not (work.root / "commit.lease").exists()


def test_folding_is_idempotent_after_a_crash_between_commit_and_cleanup(tmp_path, checkpoints, reference):
    """Parts of a checkpoint that is already committed (the committer died before deleting them) are only removed."""
    panel = make_panel(tmp_path / "panel.h5")
    assert run(panel, model=str(checkpoints), checkpoints="0", batch_size=7, handle_signals=False,
               log=lambda m: None) == "done"  # fmt: skip
    work = WorkDir(panel)
    unit = plan_units([0], np.array(STEPS), 40, 1)[0]
    cols = {m: np.full(40, 123.0) for m in METRICS}  # if this were folded again, the panel would change
    work.write_part(unit, cols, {"revision": "x"})
    assert commit_ready(panel, work, Owner.me(), log=lambda m: None) == 0
    assert not work.has_part(unit)
    np.testing.assert_array_equal(read_panel(panel).metrics["loglik"][:, 0], reference.metrics["loglik"][:, 0])


def test_a_lease_held_by_a_live_committer_is_respected(tmp_path):
    work = WorkDir(tmp_path / "panel.h5").ensure()
    first, second = Lease(work, Owner("h", os.getpid(), token="a")), Lease(work, Owner("h", os.getpid(), token="b"))
    assert first.acquire() and not second.acquire()
    first.release()
    assert second.acquire()


def test_slurm_dry_run_prints_submitits_script_without_submitting(cli, tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    slurm = ["--slurm", "--workers", "4", "--partition", "gpu", "--time", "2:00:00", "--account", "proj"]
    code, out, err = cli("extract", panel, "--model", checkpoints, *slurm, "--slurm-extra", "--qos=high", "--dry-run")
    assert code == 0, err
    for line in ("#SBATCH --array=0-3%4", "#SBATCH --partition=gpu", "#SBATCH --time=120", "#SBATCH --account=proj",
                 "#SBATCH --qos=high", "#SBATCH --requeue", "#SBATCH --gpus-per-task=1"):  # fmt: skip
        assert line in out, line
    assert f"-m memtui.extract.worker {panel.resolve()} --model {checkpoints}" in out
    assert not (tmp_path / "panel.h5.work" / "launch.json").exists()


def test_slurm_refuses_a_hub_model_that_is_not_cached(cli, tmp_path, monkeypatch):
    panel = make_panel(tmp_path / "panel.h5")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    code, out, err = cli("extract", panel, "--model", "EleutherAI/pythia-14m", "--checkpoints", "0:20:10", "--slurm",
                         "--partition", "gpu")  # fmt: skip
    assert code == 2 and "3 of 3 revisions of EleutherAI/pythia-14m are not in the Hugging Face cache" in err
    assert "memtui fetch --model EleutherAI/pythia-14m --checkpoints 0:20:10" in err


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--slurm", "--time", "soon"], "not a SLURM time"),
        (["--slurm", "--slurm-extra", "qos=high"], "long sbatch options"),
        (["--gpus", "0,0"], "distinct GPU indices"),
        (["--gpus", "x"], "comma list of GPU indices"),
        (["--workers", "0"], "--workers must be between 1"),
        (["--split", "0"], "--split must be between 1"),
        (["--gpus", "0", "--slurm"], "with --slurm use --gpus-per-task"),
        (["--foreground", "--workers", "2"], "--foreground runs one worker"),
    ],
)
def test_bad_launch_options_are_one_line(cli, tmp_path, checkpoints, args, expect):
    panel = make_panel(tmp_path / "panel.h5")
    code, out, err = cli("extract", panel, "--model", checkpoints, *args)
    assert code == 2 and expect in err and err.count("\n") == 1, err
