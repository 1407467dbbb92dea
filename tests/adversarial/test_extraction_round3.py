"""Extraction, trust round 3 (issue 17, sections 3 and 4): each case failed before its fix and passes after.

Grouped by what was wrong: touching what is not memtui's (a foreign SLURM job, a same-inode lock elsewhere), hangs
(a claim or heartbeat from the future), silent wrong numbers (a column mixing two models, SLURM times, two
committers at once), misleading reports (a committer nobody can honour, junk parts, a queued array, two launches,
a replaced or read-only work folder, errors knowable before launch, sbatch's refusals, gres on CPU, dry runs with
side effects, status going backwards, long panel names, the log header, a silent hub).

SLURM is faked where a case is about memtui's logic (``squeue``/``scancel``/``sbatch`` scripts on PATH that print
what a real cluster prints and record how they were called); tests/slurm/test_extract_round3.py runs the same
cases on CI's real one-node cluster.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_panel

from memtui.core.errors import MemtuiError
from memtui.extract import jobs
from memtui.extract.progress import log_path
from memtui.extract.units import Owner, WorkDir, plan_units, work_dir
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel

from .conftest import assert_clean_exit, assert_refused, fill, run_memtui

METRICS = ("loglik", "accuracy", "rank", "entropy")
HOST = socket.gethostname()


@pytest.fixture
def checkpoints(tiny_checkpoints) -> Path:
    return tiny_checkpoints


@pytest.fixture
def reference(tiny_reference):
    return tiny_reference


def _quiet(_msg: str) -> None:
    pass


def _same_column(panel: Path, reference, index: int) -> None:
    got = read_panel(panel)
    assert got.done[index]
    for m in METRICS:
        np.testing.assert_allclose(got.metrics[m][:, index], reference.metrics[m][:, index], rtol=1e-6, err_msg=m)


def _run_bounded(panel: Path, timeout: float = 120, **fields) -> tuple[str | None, list[str]]:
    """``run`` in a thread, stopped after ``timeout`` seconds (a hang fails the test instead of the session)."""
    logs: list[str] = []
    result: dict = {}
    stop = threading.Event()

    def work():
        try:
            result["state"] = run(panel, handle_signals=False, log=logs.append, stop=stop, **fields)
        except MemtuiError as exc:
            result["error"] = str(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        stop.set()
        thread.join(60)
        pytest.fail(f"hang: the worker did not finish within {timeout} s; its log: {logs[-5:]}")
    if "error" in result:
        return "error: " + result["error"], logs
    return result.get("state"), logs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _sleeper(*argv: str) -> subprocess.Popen:
    """A process that prints TERM if it is sent SIGTERM (then exits)."""
    code = (
        "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (print('TERM', flush=True), sys.exit(0)))\n"
    )
    code += "print('up', flush=True)\ntime.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def _was_signalled(proc: subprocess.Popen) -> bool:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        return False
    return proc.stdout.read().strip() == "TERM"


# --- a fake SLURM on PATH ----------------------------------------------------------------------------------------


class FakeSlurm:
    """``squeue`` prints ``self.queue`` (squeue's lines for the format memtui asks); ``scancel`` and ``sbatch`` record
    their arguments; ``sbatch`` refuses with ``self.refusal`` (two lines on stderr, exit 1) when set."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.queue_file = folder / "queue.txt"
        self.calls = folder / "calls.txt"
        self.refusal_file = folder / "refusal.txt"
        self.queue_file.write_text("")
        for name, body in {
            "squeue": f'echo "squeue $*" >> {self.calls}\ncat {self.queue_file}\n',
            "scancel": f'echo "scancel $*" >> {self.calls}\n',
            "sbatch": f'echo "sbatch $*" >> {self.calls}\n'
            f"if [ -s {self.refusal_file} ]; then cat {self.refusal_file} >&2; exit 1; fi\n"
            'echo "Submitted batch job 4242"\n',
            "sacct": "exit 0\n",
            "srun": "exit 0\n",
        }.items():
            path = folder / name
            path.write_text(f"#!/bin/sh\n{body}")
            path.chmod(0o755)

    def set_queue(self, lines: list[str]) -> None:
        self.queue_file.write_text("".join(line + "\n" for line in lines))

    def refuse(self, text: str) -> None:
        self.refusal_file.write_text(text)

    def called(self, command: str) -> list[str]:
        if not self.calls.exists():
            return []
        return [line for line in self.calls.read_text().splitlines() if line.startswith(command + " ")]


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "fake-slurm-bin")
    monkeypatch.setenv("PATH", f"{fake.folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return fake


def _genuine_array(panel: Path, job: str = "4242", token: str = "ab" * 16) -> dict:
    """What a real submission leaves: launch.json with the launch's token, and submitit's record of the array."""
    folder = work_dir(panel) / "slurm" / job
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job}_submission.sh").write_text(f"#!/bin/bash\n#SBATCH --comment=memtui:{token}\n")
    launched = {"mode": "slurm", "slurm_job": job, "folder": str(work_dir(panel) / "slurm"), "tasks": 2,
                "token": token, "started": time.time()}  # fmt: skip
    (work_dir(panel) / "launch.json").write_text(json.dumps(launched))
    return launched


# --- 1. --cancel never scancels a job that is not the panel's array ----------------------------------------------


@pytest.mark.parametrize("forgery", ["bare job id", "foreign job with a token", "token but no submission record"])
def test_cancel_never_scancels_a_job_that_is_not_the_panels_array(cli, tmp_path, fake_slurm, forgery):
    panel = make_panel(tmp_path / "panel.h5")
    WorkDir(panel).ensure()
    if forgery == "bare job id":  # an unrelated running job, named in a launch.json by hand
        launched = {"mode": "slurm", "slurm_job": "4242", "folder": str(tmp_path / "x")}
        (work_dir(panel) / "launch.json").write_text(json.dumps(launched))
        fake_slurm.set_queue(["4242|RUNNING|(null)|/home/someone|train-llm"])
    elif forgery == "foreign job with a token":
        _genuine_array(panel)
        fake_slurm.set_queue(["4242|RUNNING|(null)|/home/someone|train-llm"])
    else:
        launched = _genuine_array(panel)
        (work_dir(panel) / "slurm" / "4242" / "4242_submission.sh").unlink()
        fake_slurm.set_queue([f"4242_0|RUNNING|memtui:{launched['token']}|{tmp_path}|memtui-panel"])
    code, out, err = cli("extract", panel, "--cancel")
    assert not fake_slurm.called("scancel"), fake_slurm.calls.read_text()
    assert code == 1 and "not cancelled" in err, (code, out, err)


def test_cancel_scancels_the_panels_own_array_with_its_queued_tasks(cli, tmp_path, fake_slurm):
    panel = make_panel(tmp_path / "panel.h5")
    WorkDir(panel).ensure()
    token = _genuine_array(panel)["token"]
    fake_slurm.set_queue([f"4242_{t}|PENDING|memtui:{token}|{tmp_path}|memtui-panel" for t in (0, 1)])
    code, out, err = cli("extract", panel, "--cancel")
    assert code == 0, err
    assert fake_slurm.called("scancel") == ["scancel 4242"]


# --- 2. /proc/locks is matched by device and inode ----------------------------------------------------------------


_LOCKER = (
    "import fcntl, os, signal, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "signal.signal(signal.SIGTERM, lambda *a: (print('TERM', flush=True), sys.exit(0)))\n"
    "print('up', flush=True)\ntime.sleep(120)"
)


def _locker(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _LOCKER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_cancel_never_signals_a_process_locking_a_same_inode_file_on_another_filesystem(cli, small_fs):
    """Inode numbers repeat across filesystems (two fresh tmpfs number their files alike). A process that locks the
    file with the panel's lock's inode on another filesystem, named in the panel's lock file, is not its holder."""
    here, elsewhere = small_fs("16m"), small_fs("1m")
    lock_here = here / "panel.h5.work" / "workers" / "w.lock"
    lock_there = elsewhere / "panel.h5.work" / "workers" / "w.lock"
    for lock in (lock_here, lock_there):  # the same creations in the same order: the same inode numbers
        lock.parent.mkdir(parents=True)
        lock.touch()
    if os.stat(lock_here).st_ino != os.stat(lock_there).st_ino:
        pytest.skip("this kernel's tmpfs does not number inodes per filesystem")
    panel = make_panel(here / "panel.h5")
    holder = _locker(lock_here)  # whoever holds the panel's lock (its pid note is forged below)
    decoy = _locker(lock_there)
    lock_here.write_text(f"{decoy.pid}\n")
    try:
        cli("extract", panel, "--cancel")
        for proc in (holder, decoy):  # a signal takes a moment to be handled
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5 if proc is holder else 2)
        assert not _was_signalled(decoy)
        assert _was_signalled(holder)  # the lock's true holder (the kernel says so) is what --cancel stops
    finally:
        for proc in (holder, decoy):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# --- 3, 4. timestamps from the future --------------------------------------------------------------------------


def test_a_claim_from_the_future_does_not_make_a_foreground_worker_wait_forever(
    tmp_path, checkpoints, reference, monkeypatch
):
    panel = make_panel(tmp_path / "panel.h5")
    work = WorkDir(panel).ensure()
    unit = plan_units([0], read_panel(panel).steps, read_panel(panel).n_instances, 1)[0]
    work.claim_path(unit).write_text(Owner("node-far-away", 4321, token="forged").to_json())
    future = time.time() + 10 * 86400
    os.utime(work.claim_path(unit), (future, future))
    monkeypatch.setenv("MEMTUI_STALE_S", "30")
    state, logs = _run_bounded(panel, timeout=90, model=str(checkpoints), checkpoints="0", batch_size=7)
    assert state == "done", logs
    _same_column(panel, reference, 0)


def _remote_record(panel: Path, updated: float, name: str = "node7-77") -> Path:
    path = WorkDir(panel).ensure().workers / f"{name}.json"
    record = {"state": "running", "pid": 77, "host": "node7", "started": time.time() - 60, "updated": updated}
    path.write_text(json.dumps(record))
    return path


def test_a_heartbeat_from_the_future_neither_blocks_the_panel_nor_counts_as_running(cli, tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    _remote_record(panel, time.time() + 30 * 86400)
    assert jobs.live_workers(panel) == []
    assert jobs.read_progress(panel)["state"] == "stale"
    code, out, err = cli("extract", panel, "--model", checkpoints, "--slurm", "--partition", "x", "--dry-run")
    assert code == 0, err  # a launch is accepted: nothing runs
    fresh = _remote_record(panel, time.time(), name="node8-88")  # a true heartbeat still counts
    assert len(jobs.live_workers(panel)) == 1
    fresh.unlink()


# --- 5. a column never mixes two models -----------------------------------------------------------------------


def _foreign_part(panel: Path, unit, **meta) -> None:
    from memtui.extract.units import METRICS as ALL

    cols = {m: np.full(unit.hi - unit.lo, 123.0) for m in ALL}
    WorkDir(panel).ensure().write_part(unit, cols, {"revision": "/models/A/step0", "weights_hash": "a" * 32,
                                                     "model": "/models/A", **meta})  # fmt: skip


def test_a_rerun_with_another_model_discards_the_first_models_parts(tmp_path, checkpoints, reference):
    """A `--split 2` run of model A was cancelled after half of step 0; the rerun with model B must not fold A's
    half into B's column."""
    panel = make_panel(tmp_path / "panel.h5")
    first_half = plan_units([0], read_panel(panel).steps, read_panel(panel).n_instances, 2)[0]
    _foreign_part(panel, first_half)
    state, logs = _run_bounded(panel, model=str(checkpoints), checkpoints="0", split=2, batch_size=7)
    assert state == "done", logs
    _same_column(panel, reference, 0)
    assert read_panel(panel).metrics["loglik"][:, 0].max() < 100
    notes = [m for m in logs if "discarded part" in m]
    assert len(notes) == 1 and first_half.name in notes[0] and "\n" not in notes[0], logs


def test_parts_of_one_step_scored_with_different_weights_are_all_scored_again(tmp_path, checkpoints, reference):
    from memtui.extract.commit import commit_ready

    panel = make_panel(tmp_path / "panel.h5")
    steps, n = read_panel(panel).steps, read_panel(panel).n_instances
    a, b = plan_units([0], steps, n, 2)
    _foreign_part(panel, a, weights_hash="1" * 32)
    _foreign_part(panel, b, weights_hash="2" * 32)
    logs: list[str] = []
    assert commit_ready(panel, WorkDir(panel), Owner.me(), log=logs.append) == 0
    assert not read_panel(panel).done[0] and not WorkDir(panel).has_part(a) and not WorkDir(panel).has_part(b)
    assert any("different weights" in m for m in logs), logs


# --- 6. SLURM's time formats --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("1-2", 1560), ("1-2:30", 1590), ("1-0:0:1", 1441), ("1-02:03:04", 1564), ("90", 90), ("5:30", 6),
     ("0:59", 1), ("1:00:00", 60), ("4:00:00", 240), ("0:90:00", 90), ("2-0", 2880)],
)  # fmt: skip
def test_slurm_times_are_read_as_slurm_reads_them(text, minutes):
    from memtui.extract.options import SlurmOptions

    assert SlurmOptions(time=text).minutes() == minutes


@pytest.mark.parametrize("text", ["1:2:3:4", "1-2-3", "1h", "-5", "0", "0:00", "1:", "1-", "", "1.5", "1-2:3:4:5"])
def test_a_time_slurm_would_not_read_so_is_refused(cli, tmp_path, checkpoints, text):
    panel = make_panel(tmp_path / "panel.h5")
    result = cli("extract", panel, "--model", checkpoints, "--slurm", "--time", text, "--dry-run")
    assert_refused(result, "--time")


# --- 7. one committer at a time, whatever the race -------------------------------------------------------------


def _race(work_root: str, barrier, winners, rounds: int, out) -> None:
    from memtui.extract.commit import Lease
    from memtui.extract.locking import FileLock

    work = WorkDir(Path(work_root).with_suffix(""))
    me = Owner.me()
    with FileLock(work.worker_lock(me)):  # as every committer is a worker that holds its lock
        for _ in range(rounds):
            barrier.wait()  # the main process has planted a dead holder's lease
            lease = Lease(work, me)
            if lease.acquire():
                with winners.get_lock():
                    winners.value += 1
            barrier.wait()  # everyone has tried
            barrier.wait()  # the main process has counted and cleared
    out.put(me.pid)


def test_racing_takers_of_a_dead_holders_lease_never_both_hold_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    panel = tmp_path / "panel.h5"
    work = WorkDir(panel).ensure()
    lease = work.root / "commit.lease"
    n, rounds = 8, 40
    barrier, winners, out = ctx.Barrier(n + 1), ctx.Value("i", 0), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(work.root), barrier, winners, rounds, out)) for _ in range(n)]
    for proc in procs:
        proc.start()
    dead = Owner(HOST, _dead_pid(), token="dead")
    counts = []
    try:
        for _ in range(rounds):
            for leftover in work.root.glob("commit.lease*"):
                leftover.unlink()
            lease.write_text(dead.to_json())
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
            counts.append(winners.value)
            winners.value = 0
            barrier.wait(timeout=60)
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    assert counts == [1] * rounds, counts


def test_a_release_never_removes_a_successors_lease(tmp_path):
    from memtui.extract.commit import Lease

    work = WorkDir(tmp_path / "panel.h5").ensure()
    first = Lease(work, Owner("h", os.getpid(), token="a"))
    assert first.acquire()
    (work.root / "commit.lease").unlink()  # taken from it (it looked stale) ...
    second = Lease(work, Owner("h", os.getpid(), token="b"))
    assert second.acquire()  # ... and a successor holds it now
    first.release()
    assert second.still_ours()


# --- 8. a commit nobody can make is never "done" ----------------------------------------------------------------


@pytest.mark.parametrize("holder", ["empty lease", "garbled lease", "live unrelated pid", "another host, silent"])
def test_a_lease_nobody_honours_is_taken_over_and_the_run_is_truly_done(
    tmp_path, checkpoints, reference, monkeypatch, holder
):
    panel = make_panel(tmp_path / "panel.h5")
    work = WorkDir(panel).ensure()
    lease = work.root / "commit.lease"
    # a dead-looking holder on another host is waited for until its heartbeat ages (4 s here); the others are no
    # holder at all and are taken over at once, long before the stale limit (60 s here) would have done it
    monkeypatch.setenv("MEMTUI_STALE_S", "4" if holder == "another host, silent" else "60")
    monkeypatch.setenv("MEMTUI_HEARTBEAT_S", "1")
    sleeper = None
    if holder == "empty lease":
        lease.write_bytes(b"")  # what a full disk left
    elif holder == "garbled lease":
        lease.write_bytes(b'{"host": "x", "pi')
    elif holder == "live unrelated pid":
        sleeper = _sleeper()
        lease.write_text(Owner(HOST, sleeper.pid, token="unrelated").to_json())
    else:
        lease.write_text(Owner("node-far-away", 99, token="gone").to_json())
    try:
        state, logs = _run_bounded(panel, timeout=150, model=str(checkpoints), checkpoints="0", batch_size=7)
    finally:
        if sleeper is not None:
            assert not _was_signalled(sleeper)
    assert state == "done", logs
    _same_column(panel, reference, 0)
    assert not any("waiting for the committer; last commit" in m for m in logs)


def test_a_full_disk_while_writing_the_lease_leaves_no_lease(small_fs):
    from memtui.extract.commit import Lease

    folder = small_fs("256k")
    work = WorkDir(folder / "panel.h5").ensure()
    fill(folder)
    with pytest.raises((MemtuiError, OSError)):
        if not Lease(work, Owner.me()).acquire():
            raise OSError("not acquired")
    assert not (work.root / "commit.lease").exists()


def test_status_says_when_scored_parts_are_not_committed(cli, tmp_path):
    from memtui.extract.progress import describe

    panel = make_panel(tmp_path / "panel.h5")
    unit = plan_units([0], read_panel(panel).steps, read_panel(panel).n_instances, 1)[0]
    _foreign_part(panel, unit)
    (work_dir(panel) / "commit.lease").write_text(Owner("node-far-away", 5, token="t").to_json())
    record = {"state": "done", "pid": 1, "host": "node-far-away", "updated": time.time(), "K": 1, "k": 1}
    (WorkDir(panel).workers / "node-far-away-1.json").write_text(json.dumps(record))
    line = describe(jobs.read_progress(panel))
    assert "not committed" in line and "node-far-away" in line, line


# --- 9. a part of the wrong types is named, set aside, and the run goes on --------------------------------------


def _bad_part(path: Path, case: str, n: int) -> None:
    meta = {"revision": "r", "model": "m"}
    if case == "FIFO":
        os.mkfifo(path)
        return
    if case == "not an npz":
        path.write_bytes(b"PK\x03\x04 junk")
        return
    from memtui.extract.units import METRICS as ALL

    columns = {m: np.zeros(n) for m in ALL}
    if case == "string column":
        columns["loglik"] = np.array(["-1.5"] * n)
    elif case == "bool column":
        columns["accuracy"] = np.ones(n, dtype=bool)
    elif case == "list meta":
        meta = ["revision", "r"]
    elif case == "meta of wrong types":
        meta = {"revision": 5, "parameters": "many"}
    with open(path, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta)), **columns)


@pytest.mark.parametrize(
    "case", ["string column", "bool column", "list meta", "meta of wrong types", "not an npz", "FIFO"]
)
def test_a_part_of_the_wrong_types_is_named_set_aside_and_scored_again(tmp_path, checkpoints, reference, case):
    panel = make_panel(tmp_path / "panel.h5")
    work = WorkDir(panel).ensure()
    units = plan_units([0], read_panel(panel).steps, read_panel(panel).n_instances, 1)
    _bad_part(work.part_path(units[0]), case, units[0].hi - units[0].lo)
    state, logs = _run_bounded(panel, timeout=90, model=str(checkpoints), checkpoints="0", batch_size=7)
    assert state == "done", logs
    _same_column(panel, reference, 0)
    named = [m for m in logs if units[0].name in m and "set aside" in m]
    assert len(named) == 1 and "\n" not in named[0], logs
    assert len(list((work.root / "rejected").iterdir())) == 1


# --- 10. a queued SLURM array is a running extraction -------------------------------------------------------------


def test_a_pending_array_is_queued_not_stale_blocks_a_launch_and_is_cancelled(cli, tmp_path, checkpoints, fake_slurm):
    panel = make_panel(tmp_path / "panel.h5")
    WorkDir(panel).ensure()
    token = _genuine_array(panel)["token"]
    fake_slurm.set_queue([f"4242_{t}|PENDING|memtui:{token}|{tmp_path}|memtui-panel" for t in (0, 1)])
    progress = jobs.read_progress(panel)
    assert progress["state"] == "queued" and len(jobs.live_workers(panel)) == 2
    code, out, err = cli("status", panel)
    assert code == 0 and "queued" in out and "stale" not in out
    assert_refused(cli("extract", panel, "--model", checkpoints, "--device", "cpu"), "being extracted")
    code, out, err = cli("extract", panel, "--cancel")
    assert code == 0 and fake_slurm.called("scancel") == ["scancel 4242"], (out, err)


# --- 11. two launches at once ---------------------------------------------------------------------------------------


def test_two_simultaneous_launches_start_one_set_of_workers(tmp_path, checkpoints, monkeypatch):
    panel = make_panel(tmp_path / "panel.h5")
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def fake_worker(cmd, **kwargs):  # a stand-in worker: its command line names the module and the panel
        argv = [sys.executable, "-c", "import time; time.sleep(60)", "memtui.extract.worker", str(panel.resolve())]
        proc = real_popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        started.append(proc)
        return proc

    real_live = jobs.live_workers

    def slow_live(path):  # the window between "nothing runs" and "started" that two launches race through
        found = real_live(path)
        time.sleep(0.5)
        return found

    monkeypatch.setattr(jobs.subprocess, "Popen", fake_worker)
    monkeypatch.setattr(jobs, "live_workers", slow_live)
    outcomes: list = []
    barrier = threading.Barrier(2)

    def launch():
        barrier.wait()
        try:
            outcomes.append(jobs.launch(panel, model=str(checkpoints), workers=2, device="cpu"))
        except MemtuiError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=launch) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(started) == 2, outcomes
        assert sum(isinstance(o, list) for o in outcomes) == 1 and sum(isinstance(o, str) for o in outcomes) == 1
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


# --- 12. a work folder replaced or read-only is said as it is -------------------------------------------------


def test_a_work_folder_swapped_for_a_link_mid_run_is_never_written_through(tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "parts").mkdir(parents=True)
    (elsewhere / "claims").mkdir()
    (elsewhere / "workers").mkdir()
    swapped = []

    def on_update(record):
        if record.get("unit") and not swapped:  # inside the first unit: swap the folder for a link
            work_dir(panel).rename(tmp_path / "moved.work")
            work_dir(panel).symlink_to(elsewhere)
            swapped.append(True)

    with pytest.raises(MemtuiError) as raised:
        run(panel, model=str(checkpoints), checkpoints="0", batch_size=7, handle_signals=False, log=_quiet,
            on_update=on_update)  # fmt: skip
    assert swapped
    message = str(raised.value)
    assert "symbolic link" in message and "free space" not in message, message
    assert not list((elsewhere / "parts").iterdir()) and not list((elsewhere / "claims").iterdir())


def test_a_read_only_work_folder_is_refused_at_launch_as_read_only(cli, small_fs, checkpoints):
    folder = small_fs("16m")
    panel = make_panel(folder / "panel.h5")
    work = work_dir(panel)
    work.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(work)], check=True)
    try:
        for sub in ("claims", "parts", "workers"):
            (work / sub).mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(work)], check=True)
        for mode in ([], ["--foreground"]):
            err = assert_refused(cli("extract", panel, "--model", checkpoints, "--device", "cpu", *mode))
            assert "read-only" in err and "free space" not in err, err
    finally:
        subprocess.run(["umount", "-l", str(work)], capture_output=True)


# --- 13. every error knowable before launch is one line at launch -------------------------------------------------


def _no_gpu_here() -> bool:
    return not os.path.exists("/proc/driver/nvidia") and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--model", "{tmp}/nowhere"], "no such folder"),
        (["--model", "{ckpts}", "--checkpoints", "99"], "not in the panel"),
        (["--model", "{ckpts}", "--checkpoints", "0:40:10", "--workers", "2"], None),  # a good launch, for contrast
        (["--model", "{ckpts}", "--gpus", "0"], "GPU 0"),
        (["--model", "{ckpts}", "--device", "cuda"], "CUDA is not available"),
        (["--model", "{ckpts}", "--device", "tpu"], "unknown device"),
    ],
)
def test_errors_knowable_before_launch_are_one_line_at_launch(cli, tmp_path, checkpoints, monkeypatch, args, expect):
    if ("--gpus" in args or "cuda" in args) and not _no_gpu_here():
        pytest.skip("this machine has a GPU")
    panel = make_panel(tmp_path / "panel.h5")
    popen = []

    def no_start(*args, **kwargs):  # the start itself is not under test: stop there
        popen.append(args)
        raise OSError("not started in this test")

    monkeypatch.setattr(jobs.subprocess, "Popen", no_start)
    argv = [a.format(tmp=tmp_path, ckpts=checkpoints) for a in args]
    result = cli("extract", panel, *argv)
    if expect is None:
        assert popen, result  # every check passed: the launch reached the start
        return
    assert_refused(result, expect)
    assert not popen and not (work_dir(panel) / "launch.json").exists()


# --- 14, 15, 16. sbatch: one line on refusal, no leftovers, no gres on CPU, dry runs without side effects -----------


def _previous_run(panel: Path) -> dict[str, str]:
    """A finished run's records and a raised cancel flag, as status reads them."""
    work = WorkDir(panel).ensure()
    record = {"state": "cancelled", "pid": 5, "host": HOST, "updated": time.time() - 100, "K": 5, "k": 2}
    (work.workers / f"{HOST}-5.json").write_text(json.dumps(record))
    (work.workers / f"{HOST}-5.lock").write_text("5\n")
    (work.root / "cancel").write_text("cancelled at 1\n")
    return {str(p.relative_to(work.root)): p.read_text() for p in sorted(work.root.rglob("*")) if p.is_file()}


def _state(panel: Path) -> dict[str, str]:
    """Every file in PANEL.work and its content (the launch lock, one reused file that says nothing, aside)."""
    root = work_dir(panel)
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name != "launch.lock"]
    return {str(p.relative_to(root)): p.read_text() for p in files}


def test_an_sbatch_refusal_is_one_line_and_leaves_nothing_behind(cli, tmp_path, checkpoints, fake_slurm):
    panel = make_panel(tmp_path / "panel.h5")
    before = _previous_run(panel)
    fake_slurm.refuse(
        "sbatch: error: invalid partition specified: nope\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )
    for _ in range(2):
        result = cli("extract", panel, "--model", checkpoints, "--slurm", "--partition", "nope")
        err = assert_refused(result, "SLURM refused the job array")
        assert "Invalid partition name specified" in err
        assert len(fake_slurm.called("sbatch")) >= 1
    assert _state(panel) == before  # no submission file, no pickles; the previous run's records as they were


def test_device_cpu_asks_slurm_for_no_gpu(cli, tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    code, out, err = cli("extract", panel, "--model", checkpoints, "--slurm", "--device", "cpu", "--dry-run")
    assert code == 0, err
    assert "gpus" not in out and "gres" not in out, out
    code, out, err = cli("extract", panel, "--model", checkpoints, "--slurm", "--dry-run")
    assert "#SBATCH --gpus-per-task=1" in out  # GPUs stay the default elsewhere
    assert_refused(cli("extract", panel, "--model", checkpoints, "--slurm", "--device", "cpu", "--gpus-per-task", "2"))


def test_a_dry_run_has_no_side_effects(cli, tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    fresh = make_panel(tmp_path / "fresh.h5")
    before = _previous_run(panel)
    for path in (panel, fresh):
        code, out, err = cli("extract", path, "--model", checkpoints, "--slurm", "--dry-run")
        assert code == 0 and "#SBATCH" in out, err
    assert _state(panel) == before
    assert not work_dir(fresh).exists()
    assert "pid None" not in cli("status", panel)[1]


# --- 17. status --follow: totals that only grow, a line only when something changed -----------------------------


def test_status_follow_with_two_workers_never_goes_backwards_nor_repeats(cli, tmp_path, monkeypatch):
    import memtui.cli.status as status

    panel = make_panel(tmp_path / "panel.h5")
    folder = WorkDir(panel).ensure().workers
    t = time.time()
    # (worker A, worker B) per poll: k, K, unit, state, updated offset. B's later heartbeat used to make its own
    # smaller count the panel's line.
    script = [
        (dict(k=1, unit="u0", u=0), dict(k=1, unit="u1", u=1)),
        (dict(k=2, unit="u2", u=2), dict(k=1, unit="u1", u=1)),
        (dict(k=2, unit="u2", u=2), dict(k=1, unit="u1", u=3)),
        (dict(k=2, unit="u2", u=4), dict(k=1, unit="u1", u=5)),
        (dict(k=2, unit=None, u=6, state="done"), dict(k=2, unit=None, u=7, state="done")),
    ]

    def write(step: int) -> None:
        for name, w in zip(("node1-1", "node2-2"), script[step], strict=True):
            record = {"state": w.get("state", "running"), "pid": int(name[-1]), "host": name[:5], "K": 4,
                      "k": w["k"], "unit": w["unit"], "updated": t + w["u"]}  # fmt: skip
            (folder / f"{name}.json").write_text(json.dumps(record))

    polls = iter(range(1, len(script)))
    write(0)
    monkeypatch.setattr(time, "time", lambda: t + 8)  # every heartbeat fresh
    monkeypatch.setattr(status.time, "sleep", lambda s: write(next(polls)))
    code, out, err = cli("status", panel, "--follow")
    lines = [line for line in out.splitlines() if line.startswith(str(panel))]
    assert code == 0 and len(lines) == len(set(lines)), out
    counts = [tuple(map(int, m.groups())) for line in lines if (m := re.search(r"(\d+)/(\d+) units", line))]
    assert counts and [c[0] for c in counts] == sorted(c[0] for c in counts), lines
    assert lines[-1].startswith(f"{panel}: done") and "4/4 units" in lines[-1], lines


# --- 18. a legal 251-byte panel name ----------------------------------------------------------------------------


def test_a_251_byte_panel_name_extracts(cli, tmp_path, checkpoints, reference):
    panel = tmp_path / ("p" * 248 + ".h5")  # built under a short name (memtui's own temporary name would not fit)
    make_panel(tmp_path / "short.h5").rename(panel)
    assert len(os.fsencode(panel.name)) == 251
    result = cli("extract", panel, "--model", checkpoints, "--checkpoints", "0", "--batch-size", "7", "--foreground")
    assert_clean_exit(result)
    _same_column(panel, reference, 0)
    assert work_dir(panel).is_dir()  # its name shortened to fit, and still this panel's alone
    assert len(os.fsencode(log_path(panel).name)) <= 255 and log_path(panel) != log_path(tmp_path / "q.h5")
    assert cli("status", panel)[0] == 0


# --- 19. the log header names the device ---------------------------------------------------------------------------


def test_the_log_header_names_the_device_used(tmp_path, checkpoints, monkeypatch):
    panel = make_panel(tmp_path / "panel.h5")
    started = []
    real_popen = subprocess.Popen

    def fake_worker(cmd, **kwargs):
        proc = real_popen([sys.executable, "-c", "pass"], stdin=subprocess.DEVNULL)
        started.append(proc)
        return proc

    monkeypatch.setattr(jobs.subprocess, "Popen", fake_worker)
    jobs.launch(panel, model=str(checkpoints), workers=2, device="cpu")
    for proc in started:
        proc.wait()
    headers = [line for line in log_path(panel).read_text().splitlines() if line.startswith("===")]
    assert len(headers) == 2 and all("device cpu" in h and "gpu -" not in h for h in headers), headers


# --- 20. a hub that accepts the connection and never answers -------------------------------------------------------


def test_fetch_from_a_silent_hub_ends_with_one_line(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{server.getsockname()[1]}", "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), "MEMTUI_FETCH_TIMEOUT_S": "2", "HF_HUB_OFFLINE": "",
           "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}  # fmt: skip
    try:
        result = run_memtui("fetch", "--model", "tiny-org/tiny-neox", "--checkpoints", "0", timeout=120, env=env)
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()
    assert result.code == 2 and "Traceback" not in result.err, result.err
    lines = [line for line in result.err.splitlines() if line.startswith("memtui: ")]
    assert lines and "cannot reach the hub" in lines[0], result.err
