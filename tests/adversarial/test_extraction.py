"""Hostile surroundings for extraction: links beside the panel, decoy processes, forged or junk progress files,
read-only and full filesystems, token ids no model has, broken checkpoints, junk token files.

The promise: nothing is followed, signalled or overwritten that is not memtui's own; every refusal is one line with
exit 2; a completed checkpoint is never lost, whatever fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tiny_models import VOCAB, make_panel, save_checkpoints, wait_until

from memtui.core.errors import MemtuiError
from memtui.extract import jobs
from memtui.extract.progress import log_path
from memtui.extract.units import WorkDir, plan_units, work_dir
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel

from .conftest import assert_clean_exit, assert_refused, digest, fill

METRICS = ("loglik", "accuracy", "rank", "entropy")


@pytest.fixture
def checkpoints(tiny_checkpoints) -> Path:
    return tiny_checkpoints


@pytest.fixture
def reference(tiny_reference):
    return tiny_reference


def _same_as_reference(path: Path, reference) -> None:
    panel = read_panel(path)
    assert panel.done.all()
    for m in METRICS:
        np.testing.assert_array_equal(panel.metrics[m], reference.metrics[m], err_msg=m)


def _finished(path: Path):
    progress = jobs.read_progress(path)
    return progress if progress and progress["state"] not in ("running",) else None


# --- links beside the panel -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["foreground", "background"])
def test_a_link_at_the_log_is_never_followed(cli, tmp_path, checkpoints, mode):
    panel = make_panel(tmp_path / "panel.h5")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    log_path(panel).symlink_to(victim)
    args = ["extract", panel, "--model", checkpoints, "--device", "cpu"]
    assert_refused(cli(*args, *(["--foreground"] if mode == "foreground" else [])), "symbolic link")
    assert victim.read_text() == "precious\n" and log_path(panel).is_symlink()


@pytest.mark.parametrize("mode", ["foreground", "background"])
def test_a_link_at_the_work_folder_is_never_followed(cli, tmp_path, checkpoints, mode):
    panel = make_panel(tmp_path / "panel.h5")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work_dir(panel).symlink_to(elsewhere)
    args = ["extract", panel, "--model", checkpoints, "--device", "cpu"]
    assert_refused(cli(*args, *(["--foreground"] if mode == "foreground" else [])), "symbolic link")
    assert not any(elsewhere.iterdir())


def test_a_link_planted_at_a_claim_is_moved_aside_not_written_through(tmp_path, checkpoints, reference, monkeypatch):
    panel = make_panel(tmp_path / "panel.h5")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    work = WorkDir(panel).ensure()
    read = read_panel(panel)
    first = plan_units([0], read.steps, read.n_instances, 1)[0]
    work.claim_path(first).symlink_to(victim)
    monkeypatch.setenv("MEMTUI_STALE_S", "1")  # an unreadable claim counts as stale once it is this old
    os.utime(work.claim_path(first), (0, 0), follow_symlinks=False)
    assert run(panel, model=str(checkpoints), batch_size=7, handle_signals=False, log=lambda m: None) == "done"
    assert victim.read_text() == "precious\n"
    _same_as_reference(panel, reference)


# --- processes that are not this panel's writer ----------------------------------------------------------------


def _record(panel: Path, pid: int, name: str | None = None) -> Path:
    """A worker record as a worker writes it (``PANEL.work/workers/HOST-PID.json``)."""
    folder = WorkDir(panel).ensure().workers
    return folder / f"{name or f'{socket.gethostname()}-{pid}'}.json"


def _forge_progress(panel: Path, pid: int) -> None:
    record = {"state": "running", "pid": pid, "host": socket.gethostname(), "started": time.time(),
              "updated": time.time()}  # fmt: skip
    _record(panel, pid).write_text(json.dumps(record))


def _sleeper(*argv: str) -> subprocess.Popen:
    """A process that records whether it was signalled (it prints TERM and exits on SIGTERM)."""
    code = (
        "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (print('TERM', flush=True), sys.exit(0)))\n"
    )
    code += "print('up', flush=True)\ntime.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def _holder(panel: Path, *argv: str) -> subprocess.Popen:
    """A process that holds a worker lock of ``panel``, as a worker does, and records a SIGTERM (``argv`` is added
    to its command line)."""
    WorkDir(panel).ensure()
    code = (
        "import os, signal, socket, sys, time\nfrom memtui.extract.locking import FileLock\n"
        "from memtui.extract.units import WorkDir\n"
        "lock = FileLock(WorkDir(sys.argv[1]).workers / f'{socket.gethostname()}-{os.getpid()}.lock').acquire()\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('TERM', flush=True), sys.exit(0)))\n"
        "print('up', flush=True)\ntime.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(panel), *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def _was_signalled(proc: subprocess.Popen) -> bool:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        return False
    return proc.stdout.read().strip() == "TERM"


def test_cancel_leaves_a_decoy_named_memtui_alone(cli, tmp_path):
    panel = make_panel(tmp_path / "panel.h5")
    decoy = _sleeper("memtui-decoy", "memtui.extract.worker", str(panel))
    _forge_progress(panel, decoy.pid)
    code, out, err = cli("extract", panel, "--cancel")
    assert code == 1 and "nothing was signalled" in out
    assert not _was_signalled(decoy)


def test_cancel_leaves_another_panels_worker_alone(cli, tmp_path):
    panel, other = make_panel(tmp_path / "panel.h5"), make_panel(tmp_path / "other.h5")
    worker = _holder(other)
    _forge_progress(panel, worker.pid)
    code, out, err = cli("extract", panel, "--cancel")
    assert code == 1
    assert not _was_signalled(worker)


def test_cancel_leaves_a_forged_lock_file_alone(cli, tmp_path):
    panel = make_panel(tmp_path / "panel.h5")
    decoy = _sleeper()
    _record(panel, decoy.pid).with_suffix(".lock").write_text(f"{decoy.pid}\n")  # names it, but nobody holds it
    _forge_progress(panel, decoy.pid)
    assert cli("extract", panel, "--cancel")[0] == 1
    assert not _was_signalled(decoy)


@pytest.mark.parametrize("pid", ["self", 1, 2**31 - 1, -1, 0])
def test_cancel_never_signals_a_pid_from_a_file(cli, tmp_path, pid):
    panel = make_panel(tmp_path / "panel.h5")
    _forge_progress(panel, os.getpid() if pid == "self" else pid)
    assert cli("extract", panel, "--cancel")[0] == 1  # and this test process is still here to say so


def test_cancel_signals_the_verified_lock_holder(cli, tmp_path):
    panel = make_panel(tmp_path / "panel.h5")
    worker = _holder(panel)
    record = {"state": "running", "pid": 1, "host": socket.gethostname()}  # a lie: the kernel's lock table decides
    _record(panel, worker.pid).write_text(json.dumps(record))
    code, out, err = cli("extract", panel, "--cancel")
    assert code == 0, err
    worker.wait(timeout=30)
    assert _was_signalled(worker)


@pytest.mark.parametrize("listings_before", [0, 1, 2, 3])
def test_a_starting_worker_is_running_whenever_its_first_record_appears(tmp_path, monkeypatch, listings_before):
    """Until its first record appears, a just-launched worker is known from the launch record; a status read during
    which that record appears must still count it. Whatever the number of listings of the workers folder a read
    takes, the record appears after each in turn (a read once answered "stale" here: its listings disagreed, the
    worker absent from the one judged and known from the other)."""
    panel = make_panel(tmp_path / "panel.h5")
    worker = _holder(panel, "memtui.extract.worker")  # its lock held and its command line a worker's
    launched = {"mode": "local", "host": socket.gethostname(), "pids": [worker.pid], "started": time.time()}
    jobs.launch_record(panel).write_text(json.dumps(launched))
    real_listing, listings = jobs._worker_records, 0

    def listing(panel_path):
        nonlocal listings
        if listings == listings_before:
            _forge_progress(panel, worker.pid)  # the worker publishes its first record now
        listings += 1
        return real_listing(panel_path)

    monkeypatch.setattr(jobs, "_worker_records", listing)
    try:
        for read in (jobs.read_progress, jobs.live_workers):
            listings = 0
            _record(panel, worker.pid).unlink(missing_ok=True)
            got = read(panel)
            running = [w["pid"] for w in (got["workers"] if isinstance(got, dict) else got) if w["state"] == "running"]
            assert running == [worker.pid], (read.__name__, listings, got)
    finally:
        worker.kill()
        worker.wait()


JUNK = {
    "a JSON list": b"[]",
    "null": b"null",
    "a number state": b'{"state": 5}',
    "a string pid": b'{"state": "running", "pid": "x", "started": 1e18}',
    "strings for numbers": b'{"state": "running", "pid": 1, "K": "abc", "k": "x", "tokens_per_s": "fast"}',
    "NaN and huge": b'{"state": "done", "tokens_per_s": 1e308, "eta_s": NaN, "k": 99999999999999999999}',
    "escapes": b'{"state": "failed", "model": "\\u001b]0;pwned\\u0007", "last_error": "\\u001b[2J", '
    b'"warnings": ["\\u009b"]}',
    "unknown state": b'{"state": "\\u001b[31mrunning"}',
    "binary": bytes(range(256)) * 4,
    "empty": b"",
    "deep nesting": b"[" * 100000,
    "a huge file": b" " * (3 << 20) + b"{}",
    "booleans": b'{"state": "running", "pid": true, "k": false}',
    "warnings not a list": b'{"state": "done", "warnings": {"a": 1}}',
}


@pytest.mark.parametrize("case", list(JUNK))
def test_a_junk_progress_file_never_crashes_status_or_cancel(cli, tmp_path, case):
    panel = make_panel(tmp_path / "panel.h5")
    _record(panel, 0, name="somehost-123").write_bytes(JUNK[case])
    code, out, err = cli("status", panel)
    assert code in (0, 1) and "Traceback" not in err
    assert_clean_exit((0, out, err))  # no control characters, whatever the file held
    assert cli("extract", panel, "--cancel")[0] == 1
    data = jobs.read_progress(panel)
    assert data["state"] in ("done", "failed", "cancelled", "stale", "unreadable")


# --- filesystems that refuse to take a byte -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["foreground", "background"])
def test_extract_on_a_read_only_filesystem_is_one_line(cli, readonly_fs, checkpoints, mode):
    where = readonly_fs(lambda d: make_panel(d / "panel.h5"))
    panel = where / "panel.h5"
    before = digest(panel)
    args = ["extract", panel, "--model", checkpoints, "--device", "cpu"]
    assert_refused(cli(*args, *(["--foreground"] if mode == "foreground" else [])))
    assert digest(panel) == before


def test_a_nearly_full_disk_is_refused_up_front_and_loses_nothing(cli, small_fs, checkpoints, reference):
    """The issue's reproduction: most checkpoints done, 12 KB free, a new model string (provenance would change)."""
    where = small_fs("2m")
    panel = make_panel(where / "panel.h5")
    assert run(panel, model=str(checkpoints), checkpoints="0:30:10", handle_signals=False, log=lambda m: None)
    fill(where, leave=12 * 1024)
    before = digest(panel)
    for extra in ([], ["--foreground"]):
        err = assert_refused(cli("extract", panel, "--model", f"{checkpoints}/", "--device", "cpu", *extra))
        assert "bytes are free" in err
    assert digest(panel) == before
    assert read_panel(panel).done.tolist() == [True, True, True, True, False]
    (where / ".filler").unlink()
    assert_clean_exit(cli("extract", panel, "--model", f"{checkpoints}/", "--device", "cpu", "--foreground"))
    _same_as_reference(panel, reference)


def test_a_disk_that_fills_up_mid_run_keeps_every_committed_checkpoint(small_fs, checkpoints, reference):
    """The fault test: the filesystem fills after the first checkpoint commits. The panel, preallocated, never needs
    a byte; the next unit's part cannot be written, so the run stops with one line. Every committed checkpoint is
    intact and readable at every moment, and once space is freed the same command finishes the identical panel."""
    where = small_fs("2m")
    panel = make_panel(where / "panel.h5")
    seen = []

    def on_update(p):
        if p.get("k") == 2 and not seen:
            fill(where, leave=0)
            seen.append(_done_seen_by_another_process(panel))  # readable, with the first checkpoint committed

    with pytest.raises(MemtuiError, match="No space left on device.*committed checkpoint is intact"):
        run(panel, model=str(checkpoints), batch_size=7, handle_signals=False, log=lambda m: None,
            on_update=on_update)  # fmt: skip
    assert seen == [[True, False, False, False, False]]
    now = read_panel(panel)
    assert now.done.tolist() == [True, False, False, False, False]
    for m in METRICS:
        np.testing.assert_array_equal(now.metrics[m][:, 0], reference.metrics[m][:, 0])
    assert jobs.read_progress(panel)["state"] in ("failed", "running", "stale")  # its last record may be unwritten
    # the failed unit's claim is released: a rerun from this same process (whose pid lives on, so the claim would
    # never look dead) takes it at once instead of waiting out the stale limit (three minutes by default)
    assert not list(WorkDir(panel).claims.glob("*.claim"))
    (where / ".filler").unlink()
    assert run(panel, model=str(checkpoints), batch_size=7, handle_signals=False, log=lambda m: None) == "done"
    _same_as_reference(panel, reference)


def _done_seen_by_another_process(panel: Path) -> list[bool]:
    code = "import sys\nfrom memtui.panel.hdf5 import read_panel\n"
    code += "print(read_panel(sys.argv[1]).done.astype(int).tolist())"
    out = subprocess.run([sys.executable, "-c", code, str(panel)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [bool(x) for x in json.loads(out.stdout)]


@pytest.mark.slow
def test_a_worker_killed_on_a_full_disk_resumes_once_space_is_freed(small_fs, checkpoints, reference, monkeypatch):
    where = small_fs("4m")
    panel = make_panel(where / "panel.h5")
    monkeypatch.setenv("MEMTUI_EXTRACT_BATCH_DELAY", "0.2")
    (pid,) = jobs.launch(panel, model=str(checkpoints), checkpoints="all", batch_size=7, device="cpu")
    wait_until(lambda: read_panel(panel).done.sum() >= 2, what="two committed checkpoints")
    fill(where, leave=0)
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: jobs.read_progress(panel)["state"] == "stale", timeout=30, what="stale")
    committed = read_panel(panel)
    assert committed.done.sum() >= 2
    for m in METRICS:  # what was committed is exactly what the uninterrupted run wrote
        np.testing.assert_array_equal(committed.metrics[m][:, committed.done], reference.metrics[m][:, committed.done])
    with pytest.raises(Exception, match="bytes are free"):
        jobs.launch(panel, model=str(checkpoints), checkpoints="all", device="cpu")
    (where / ".filler").unlink()
    monkeypatch.delenv("MEMTUI_EXTRACT_BATCH_DELAY")
    jobs.launch(panel, model=str(checkpoints), checkpoints="all", batch_size=7, device="cpu")
    assert wait_until(lambda: _finished(panel), what="resumed run")["state"] == "done"
    _same_as_reference(panel, reference)


# --- what is in the panel and in the checkpoints ---------------------------------------------------------------


@pytest.mark.parametrize("bad", [-5, VOCAB, 10**6])
def test_token_ids_outside_the_vocabulary_are_refused_before_scoring(cli, tmp_path, checkpoints, bad):
    tokens = np.random.default_rng(1).integers(0, VOCAB, size=(40, 24))
    tokens[3, 1] = bad
    panel = make_panel(tmp_path / "panel.h5", tokens=tokens)
    before = digest(panel)
    err = assert_refused(cli("extract", panel, "--model", checkpoints, "--device", "cpu", "--foreground"))
    assert "outside the model's vocabulary" in err and "1 token ids" in err
    assert digest(panel) == before


def test_a_relative_model_path_works_in_the_background(tmp_path, checkpoints, reference, monkeypatch):
    panel = make_panel(tmp_path / "data" / "panel.h5")
    (tmp_path / "work").mkdir()
    link = tmp_path / "work" / "ckpts"
    link.symlink_to(checkpoints)
    monkeypatch.chdir(tmp_path / "work")
    jobs.launch(panel, model="ckpts", checkpoints="all", batch_size=7, device="cpu")
    assert wait_until(lambda: _finished(panel), what="background run")["state"] == "done"
    _same_as_reference(panel, reference)


@pytest.mark.parametrize("damage", ["junk config", "empty weights", "missing weights"])
def test_a_broken_checkpoint_is_one_line_and_the_details_go_to_the_log(cli, tmp_path, checkpoints, damage):
    broken = tmp_path / "ckpts"
    save_checkpoints(broken, steps=[0, 10])
    folder = broken / "step10"
    weights = next(folder.glob("*.safetensors"))
    if damage == "junk config":
        (folder / "config.json").write_text("{not json")
    elif damage == "empty weights":
        weights.write_bytes(b"")
    else:
        weights.unlink()
    panel = make_panel(tmp_path / "panel.h5")
    assert_refused(cli("extract", panel, "--model", broken, "--device", "cpu", "--foreground", "--checkpoints", "0,10"))
    panel_now = read_panel(panel)
    assert not panel_now.done[1]  # nothing was committed for the broken checkpoint


@pytest.mark.parametrize("mode", ["foreground", "background"])
def test_extract_refuses_a_cut_panel(cli, tmp_path, checkpoints, mode):
    panel = make_panel(tmp_path / "panel.h5")
    data = panel.read_bytes()
    panel.write_bytes(data[: len(data) * 2 // 3])
    args = ["extract", panel, "--model", checkpoints, "--device", "cpu"]
    assert_refused(cli(*args, *(["--foreground"] if mode == "foreground" else [])), "is truncated")


# --- token files given to build --------------------------------------------------------------------------------


def _npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


TOKENS = np.arange(20).reshape(4, 5)
TREAT = np.array([10, 20, -1, -1])
BUILD = {
    "junk bytes as .npz": (lambda d: (d / "t.npz").write_bytes(b"PK\x03\x04junk") and d / "t.npz", "cannot read"),
    "text as .npz": (lambda d: (d / "t.npz").write_text("tokens") and d / "t.npz", "cannot read"),
    "object array .npz": (
        lambda d: _npz(d / "t.npz", tokens=np.array([[1, "a"]], dtype=object), treatment_step=TREAT[:1]),
        "Python objects",
    ),
    "negative ids": (lambda d: _npz(d / "t.npz", tokens=-TOKENS, treatment_step=TREAT), "negative or too large"),
    "float ids": (lambda d: _npz(d / "t.npz", tokens=TOKENS + 0.5, treatment_step=TREAT), "must be integers"),
    "1-D ids": (lambda d: _npz(d / "t.npz", tokens=TOKENS[0], treatment_step=TREAT[:1]), "2-D array"),
    "treatment of the wrong length": (
        lambda d: _npz(d / "t.npz", tokens=TOKENS, treatment_step=TREAT[:3]),
        "3 treatment",
    ),
    "fractional treatment": (lambda d: _npz(d / "t.npz", tokens=TOKENS, treatment_step=TREAT + 0.5), "whole numbers"),
    "treatment below -1": (lambda d: _npz(d / "t.npz", tokens=TOKENS, treatment_step=TREAT - 5), "treatment steps"),
    "lengths out of range": (
        lambda d: _npz(d / "t.npz", tokens=TOKENS, treatment_step=TREAT, lengths=[9, 5, 5, 5]),
        "'lengths'",
    ),
    "no rows": (
        lambda d: _npz(d / "t.npz", tokens=np.zeros((0, 5), int), treatment_step=np.zeros(0, int)),
        "no rows",
    ),
    "missing arrays": (lambda d: _npz(d / "t.npz", other=TOKENS), "needs arrays"),
}


@pytest.mark.parametrize("case", list(BUILD))
def test_build_refuses_a_bad_token_file(cli, tmp_path, case):
    make, expect = BUILD[case]
    source = make(tmp_path)
    assert_refused(cli("build", tmp_path / "out.h5", "--tokens", source), expect)
    assert not (tmp_path / "out.h5").exists()


def test_build_refuses_an_object_npy_and_a_missing_treatment_file(cli, tmp_path):
    np.save(tmp_path / "t.npy", np.array([[1, None]], dtype=object), allow_pickle=True)
    np.save(tmp_path / "treat.npy", np.array([10]))
    assert_refused(cli("build", tmp_path / "o.h5", "--tokens", tmp_path / "t.npy", "--treatment-file",
                       tmp_path / "treat.npy"), "Python objects")  # fmt: skip
    np.save(tmp_path / "ok.npy", TOKENS)
    assert_refused(cli("build", tmp_path / "o.h5", "--tokens", tmp_path / "ok.npy", "--treatment-file",
                       tmp_path / "nope.npy"), "no such treatment file")  # fmt: skip


def test_a_wrong_extractable_is_refused_before_anything_starts(cli, tmp_path, checkpoints):
    panel = make_panel(tmp_path / "panel.h5")
    err = assert_refused(cli("extract", panel, "--model", checkpoints, "--device", "cpu", "--extractable", "8,8"))
    assert "disagrees with" in err and not (work_dir(panel) / "launch.json").exists()
