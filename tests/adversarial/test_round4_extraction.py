"""Extraction, trust round 4 (issue 33, sections 4 and 5): each case failed before its fix and passes after.

- 5.1: `extract --dry-run` without `--slurm` started a real extraction. A dry run, in every mode, makes the launch's
  checks and prints its plan; it starts no process and writes nothing (the panel's bytes and mtime, the work
  folder, the log, sbatch). Every option `extract` accepts is honoured or refused (SLURM-only options without
  --slurm, --cancel with launch options, --gpus beside --workers, `fetch --dry-run --workers`).
- 5.8: `status` on a shipped sample said "41/41 checkpoints extracted; no extraction has run on it".
- 4, round 3 leftovers: two committers holding the commit lease at once; a hash file written through a work folder
  swapped for a link mid-run while memtui said nothing was.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_models import make_panel

from memtui.core.errors import MemtuiError
from memtui.extract import jobs
from memtui.extract.progress import log_path
from memtui.extract.units import Owner, WorkDir, work_dir

from .conftest import assert_refused
from .test_extraction_round3 import FakeSlurm, _previous_run, _state


@pytest.fixture
def checkpoints(tiny_checkpoints) -> Path:
    return tiny_checkpoints


# --- 5.1: a dry run never runs anything ---------------------------------------------------------------------------


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> FakeSlurm:
    fake = FakeSlurm(tmp_path / "fake-slurm-bin")
    monkeypatch.setenv("PATH", f"{fake.folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return fake


@pytest.fixture
def nothing_starts(monkeypatch):
    """Every way `extract` starts work, spied on: a detached worker (Popen), a foreground worker (worker.run),
    submitit's submission. A call is recorded and refused, so a test sees it instead of an extraction."""
    import memtui.extract.worker as worker

    started: list[str] = []

    def popen(cmd, *args, **kwargs):
        started.append(f"Popen {cmd}")
        raise OSError("no process may start in this test")

    def run(*args, **kwargs):
        started.append("worker.run")
        raise MemtuiError("no worker may run in this test")

    monkeypatch.setattr(jobs.subprocess, "Popen", popen)
    monkeypatch.setattr(worker, "run", run)
    return started


def _snapshot(panel: Path) -> tuple:
    st = os.stat(panel)
    return panel.read_bytes(), st.st_mtime_ns, sorted(os.listdir(panel.parent))


@pytest.mark.parametrize(
    "mode",
    [[], ["--foreground"], ["--workers", "3"], ["--workers", "2", "--split", "3", "--checkpoints", "0,10"],
     ["--batch-size", "5", "--dtype", "float32", "--device", "cpu"], ["--slurm"], ["--slurm", "--workers", "4"]],
)  # fmt: skip
def test_a_dry_run_starts_nothing_and_writes_nothing(cli, tmp_path, checkpoints, nothing_starts, fake_slurm, mode):
    panel = make_panel(tmp_path / "panel.h5")
    before = _snapshot(panel)
    code, out, err = cli("extract", panel, "--model", checkpoints, *mode, "--dry-run")
    assert code == 0, err
    assert not nothing_starts and not fake_slurm.called("sbatch") and not fake_slurm.called("srun")
    assert _snapshot(panel) == before  # the panel's bytes and mtime; no work folder, no log beside it
    assert not work_dir(panel).exists() and not log_path(panel).exists()
    plan = err if "--slurm" in mode else out
    assert "dry run" in plan and "nothing was started" in plan, plan
    for what in ("workers:", "checkpoints:", "units:", "would write:"):
        assert what in plan, plan
    if "--slurm" in mode:
        assert out.startswith("#!/bin/bash") and "#SBATCH" in out  # stdout stays the script for sbatch


def test_the_plan_says_what_each_option_would_do(cli, tmp_path, checkpoints, nothing_starts):
    panel = make_panel(tmp_path / "panel.h5")
    argv = ["--workers", "3", "--split", "2", "--checkpoints", "0,10", "--batch-size", "5", "--dtype", "float32",
            "--device", "cpu", "--chunk", "64", "--batch-invariant", "on"]  # fmt: skip
    code, out, err = cli("extract", panel, "--model", checkpoints, *argv, "--dry-run")
    assert code == 0, err
    assert "3 detached" in out and "device cpu" in out
    assert "2 to score (steps 0, 10)" in out and "units:       4 " in out and "2 instance ranges" in out
    assert "dtype float32, batch size 5, batch-invariant on, chunk 64" in out
    code, out, err = cli("extract", panel, "--model", checkpoints, "--workers", "4", "--checkpoints", "0", "--dry-run")
    assert "3 would have nothing to do" in out, out  # a plan that wastes workers says so
    code, out, err = cli("extract", panel, "--model", checkpoints, "--foreground", "--dry-run")
    assert "1 in this terminal" in out
    assert not nothing_starts


def test_a_dry_run_keeps_a_previous_runs_records_and_refuses_what_the_launch_refuses(
    cli, tmp_path, checkpoints, nothing_starts
):
    panel = make_panel(tmp_path / "panel.h5")
    before = _previous_run(panel)
    for mode in ([], ["--foreground"], ["--workers", "2"]):
        assert cli("extract", panel, "--model", checkpoints, *mode, "--dry-run")[0] == 0
    assert _state(panel) == before
    assert_refused(cli("extract", panel, "--model", tmp_path / "nowhere", "--dry-run"), "no such folder")
    result = cli("extract", panel, "--model", checkpoints, "--checkpoints", "99", "--dry-run")
    assert_refused(result, "not in the panel")
    # a live worker (a fresh heartbeat from another host): the launch is refused, so is its dry run
    record = {"state": "running", "pid": 7, "host": "node-far", "updated": time.time(), "K": 5, "k": 1}
    (WorkDir(panel).workers / "node-far-7.json").write_text(json.dumps(record))
    assert_refused(cli("extract", panel, "--model", checkpoints, "--dry-run"), "being extracted")
    assert not nothing_starts


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--partition", "gpu"], "--partition is a SLURM option"),
        (["--time", "1:00:00"], "--time is a SLURM option"),
        (["--account", "proj"], "--account is a SLURM option"),
        (["--gpus-per-task", "2"], "--gpus-per-task is a SLURM option"),
        (["--cpus-per-task", "4"], "--cpus-per-task is a SLURM option"),
        (["--mem", "4G"], "--mem is a SLURM option"),
        (["--slurm-extra", "--qos=high"], "--slurm-extra is a SLURM option"),
        (["--partition", "gpu", "--mem", "4G", "--dry-run"], "--partition, --mem are SLURM options"),
        (["--foreground", "--partition", "gpu"], "SLURM option"),
        (["--cancel", "--dry-run"], "--cancel"),
        (["--cancel", "--workers", "2"], "drop --workers"),
        (["--cancel", "--foreground"], "drop --foreground"),
        (["--gpus", "0", "--workers", "2"], "drop --workers"),
        (["--gpus", "0", "--workers", "2", "--dry-run"], "drop --workers"),
        (["--foreground", "--slurm", "--dry-run"], "--foreground"),
        (["--foreground", "--gpus", "0"], "--foreground"),
        (["--foreground", "--workers", "2", "--dry-run"], "--foreground"),
    ],
)
def test_an_option_that_would_be_dropped_is_refused(cli, tmp_path, checkpoints, nothing_starts, fake_slurm, argv,
                                                    expect):  # fmt: skip
    panel = make_panel(tmp_path / "panel.h5")
    before = _snapshot(panel)
    model = [] if "--cancel" in argv and "--model" not in argv else ["--model", str(checkpoints)]
    err = assert_refused(cli("extract", panel, *model, *argv), expect)
    assert "\n" not in err.rstrip("\n")
    assert not nothing_starts and not fake_slurm.called("sbatch") and not fake_slurm.called("scancel")
    assert _snapshot(panel) == before and not work_dir(panel).exists()


def test_cancel_with_launch_options_is_refused_and_signals_nothing(cli, tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    assert_refused(cli("extract", panel, "--cancel", "--model", checkpoints), "drop --model")
    assert cli("extract", panel, "--cancel")[0] == 1  # alone it is honoured: nothing runs, nothing signalled


def test_fetch_dry_run_refuses_the_download_only_option(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may be asked of a hub before the refusal
    err = assert_refused(cli("fetch", "--model", "org/model", "--checkpoints", "0", "--dry-run", "--workers", "8"))
    assert "--workers" in err and "--dry-run" in err
    assert not (tmp_path / "cache").exists()


# --- 5.8: status says what a panel without an extraction record is ---------------------------------------------


@pytest.mark.parametrize("name", ["synthetic", "tiny-gptneox", "suite-neox-41k"])
def test_status_on_a_shipped_sample_is_not_a_contradiction(cli, name):
    from memtui.panel.samples import sample_path

    code, out, err = cli("status", sample_path(name))
    assert code == 0, err
    assert "checkpoints extracted" not in out and "no extraction has run" not in out, out
    assert "complete, all" in out and "hold values" in out and "shipped with memtui" in out, out
    if name == "synthetic":
        assert "simulated" in out and "none can" in out and "no token ids" in out, out
    else:
        assert "`memtui demo`" in out and "nothing is left to extract" in out, out


def test_status_of_a_built_panel_says_how_to_start(cli, tmp_path):
    panel = make_panel(tmp_path / "panel.h5")
    code, out, err = cli("status", panel)
    assert code == 0 and "none of its 5 checkpoints holds values yet" in out and "memtui extract" in out, out


# --- 4: one committer at a time, whoever the committer ----------------------------------------------------------


def _taker(work_root: str, holding, overlaps, acquired, deadline: float, worker: bool) -> None:
    """Take the lease again and again until ``deadline``; count the times another held it at the same moment. A
    ``worker`` holds its worker lock, as extraction's committers do; the others (as `memtui covariates` does) hold
    none."""
    import contextlib

    from memtui.extract.commit import Lease
    from memtui.extract.locking import FileLock

    work = WorkDir(Path(work_root).with_suffix(""))
    me = Owner.me()
    with FileLock(work.worker_lock(me)) if worker else contextlib.nullcontext():
        while time.time() < deadline:
            lease = Lease(work, me)
            if not lease.acquire():
                time.sleep(0.001)
                continue
            with holding.get_lock():
                holding.value += 1
                overlaps.value += holding.value > 1
                acquired.value += 1
            time.sleep(0.02 if worker else 0.3)  # a fold; `covariates` rewrites the whole panel, longer
            with holding.get_lock():
                holding.value -= 1
            lease.release()


def test_racing_committers_never_hold_the_lease_together(tmp_path, monkeypatch):
    """Workers and a committer that holds no worker lock race for the lease. The lease of a live committer with no
    worker lock (`covariates`) used to look gone, and was taken while it wrote."""
    monkeypatch.setenv("MEMTUI_STALE_S", "60")
    ctx = multiprocessing.get_context("fork")
    work = WorkDir(tmp_path / "panel.h5").ensure()
    holding, overlaps, acquired = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)
    deadline = time.time() + 6
    kinds = [True] * 6 + [False] * 2
    procs = [ctx.Process(target=_taker, args=(str(work.root), holding, overlaps, acquired, deadline, kind))
             for kind in kinds]  # fmt: skip
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            pytest.fail("a taker hung")
    assert overlaps.value == 0, f"{overlaps.value} of {acquired.value} holds overlapped another"
    assert acquired.value >= len(kinds)  # the lease went round: every release let the next take it
    assert not (work.root / "commit.lease").exists()


def test_a_lease_released_while_looked_at_is_not_judged_a_dead_holders(tmp_path, monkeypatch):
    """A committer with no worker lock (`covariates`) that released its lease and took it again while a taker
    looked: the taker read the released file unlocked, judged its live holder gone, and went on to remove whatever
    lease was there by then (CI: 1 of 75 holds overlapped in the race above). An observation is of the lease there
    once its lock is tested, never of a file already gone from the name."""
    from memtui.extract import commit
    from memtui.extract.commit import Lease

    work = WorkDir(tmp_path / "panel.h5").ensure()
    holder, taker = Lease(work, Owner.me()), Lease(work, Owner.me())  # live, holding no worker lock
    assert holder.acquire()
    real, calls = commit.lock_state, []

    def holder_lets_go_and_takes_again(fd):
        if not calls:
            calls.append(fd)
            holder.release()  # between the taker's open and its look at the lock ...
            assert holder.acquire()  # ... and at once takes a new lease
        return real(fd)

    monkeypatch.setattr(commit, "lock_state", holder_lets_go_and_takes_again)
    seen = taker.observe()
    monkeypatch.setattr(commit, "lock_state", real)
    assert calls, "the taker never looked at the lock"
    assert seen is not None and seen.held, "the released file was taken for the lease"
    assert not taker.is_stale(seen) and not taker.acquire()
    assert holder.still_ours()
    holder.release()


def test_a_lease_taken_again_by_its_owner_is_another_lease(tmp_path):
    """A lease is known by its inode and its bytes. The same owner taking its lease again wrote the same bytes, and
    the inode just freed is often the one reused: a taker that had judged the first lease gone then removed the
    second, live one as "the same". Each taking writes a nonce, so a reused inode with new bytes is another lease."""
    import hashlib

    from memtui.extract.commit import Lease, Seen

    work = WorkDir(tmp_path / "panel.h5").ensure()
    holder, taker = Lease(work, Owner.me()), Lease(work, Owner.me())
    assert holder.acquire()
    first = (work.root / "commit.lease").read_bytes()
    holder.release()
    assert holder.acquire()
    now = taker.observe()
    assert now is not None and Owner.from_json((work.root / "commit.lease").read_text()) == holder.me
    dev_ino = now.key.rsplit(":", 1)[0]
    # the first lease as the taker saw it, had the second been put on its inode
    as_first = Seen(f"{dev_ino}:{hashlib.blake2b(first, digest_size=8).hexdigest()}", now.mtime, holder.me, False)
    assert as_first.key != now.key
    assert not taker._remove(as_first), "a taker removed the live lease that replaced the one it judged"
    assert holder.still_ours()
    holder.release()


def test_a_takers_marker_is_never_taken_from_it_however_slow(tmp_path, monkeypatch):
    """A taker that is slower than the stale limit between its takeover marker and the lease's removal (a loaded
    machine) used to lose its marker to a second taker: both then took the lease."""
    from memtui.extract.commit import Lease

    monkeypatch.setenv("MEMTUI_STALE_S", "1")
    work = WorkDir(tmp_path / "panel.h5").ensure()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (work.root / "commit.lease").write_text(Owner(Owner.me().host, dead.pid, token="dead").to_json())
    slow = Lease(work, Owner.me())
    seen = slow.observe()
    assert slow.is_stale(seen)
    marker = slow._hold_marker(seen)  # the slow taker is inside its compare-and-swap ...
    assert marker is not None
    past = time.time() - 30
    os.utime(marker[0], (past, past))  # ... for longer than the stale limit
    other = Lease(work, Owner.me())
    assert not other.acquire(), "a second taker took the marker of a live one"
    os.unlink(marker[0])
    os.close(marker[1])
    assert other.acquire()  # once the first is done (or dead), the lease is taken over as before
    other.release()


def test_a_live_committers_lease_is_kept_though_its_heartbeat_is_old(tmp_path, monkeypatch):
    """On this host the kernel's lock on the lease decides, not its age: a long fold is not taken over."""
    from memtui.extract.commit import Lease

    monkeypatch.setenv("MEMTUI_STALE_S", "1")
    work = WorkDir(tmp_path / "panel.h5").ensure()
    holder = Lease(work, Owner.me())
    assert holder.acquire()
    past = time.time() - 3600
    os.utime(work.root / "commit.lease", (past, past))
    assert not Lease(work, Owner.me()).acquire()
    assert holder.still_ours()
    holder.release()
    assert not (work.root / "commit.lease").exists()


# --- 4: a work folder swapped for a link mid-run: nothing is written through it -----------------------------------


@pytest.mark.parametrize("when", ["at the start", "inside the first unit"])
def test_nothing_at_all_is_written_through_a_work_folder_swapped_for_a_link(tmp_path, checkpoints, when):
    """Swapped before the weight files are hashed, the hash cache (PANEL.work/hashes) used to be written through the
    link while memtui said nothing was; so could worker records, shard records and parts. Every write into the
    work folder goes through the folder memtui opened (openat), never through its name."""
    from memtui.extract.worker import run

    panel = make_panel(tmp_path / "panel.h5")
    elsewhere = tmp_path / "elsewhere"
    for sub in ("parts", "claims", "workers", "hashes", "shards", "duplicates", "rejected"):
        (elsewhere / sub).mkdir(parents=True)
    swapped: list[bool] = []

    def on_update(record):
        if not swapped and (when == "at the start" or record.get("unit")):
            work_dir(panel).rename(tmp_path / "moved.work")
            work_dir(panel).symlink_to(elsewhere)
            swapped.append(True)

    with pytest.raises(MemtuiError) as raised:
        run(panel, model=str(checkpoints), checkpoints="0,10", batch_size=7, handle_signals=False,
            log=lambda m: None, on_update=on_update)  # fmt: skip
    assert swapped
    message = str(raised.value)
    assert "symbolic link" in message and "nothing was written through it" in message, message
    written = [p for p in elsewhere.rglob("*") if not p.is_dir()]
    assert written == [], written
    assert (tmp_path / "moved.work" / "workers").is_dir()  # what was written went to the folder memtui opened
