"""Background extraction jobs: start a detached worker, read its progress, cancel it.

This is the contract the workbench app uses: :func:`launch`, :func:`read_progress`, :func:`cancel`. Whether a worker
runs is decided by the panel's writer lock, verified with the kernel (:func:`locking.verified_holder`), never by a pid
read from a file: a pid may be reused, and a progress file may be forged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from memtui.errors import MemtuiError

from . import progress as records
from .checkpoints import parse_checkpoints
from .locking import is_locked, lock_path, open_beside, verified_holder
from .progress import log_path, progress_path

__all__ = ["launch", "read_progress", "cancel", "progress_path", "log_path", "check_free_space"]

MIN_FREE_BYTES = 256 << 10  # the panel is preallocated; this is for the progress record, the log and the lock
STARTUP_GRACE_S = 120  # a launched worker imports torch and loads a model before it takes the lock


def check_free_space(panel_path: Path) -> None:
    """Refuse to start with (almost) no space beside the panel: the worker could not even say why it died."""
    try:
        free = shutil.disk_usage(panel_path.parent).free
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise MemtuiError(
            f"only {free:,} bytes are free on the filesystem of {panel_path}; extraction needs about "
            f"{MIN_FREE_BYTES >> 10} KiB there for its progress record and log (the panel itself never grows): "
            "free some space and rerun."
        )


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our exited child, or it stays a zombie that looks alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return True
    return True


def _starting_worker(pid: int, panel_path: Path) -> bool:
    """A worker for *this* panel that has not taken the lock yet: its command line names the worker module and the
    panel (where /proc exists; elsewhere only a live pid)."""
    if not _alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"memtui.extract.worker" in args and os.fsencode(str(panel_path)) in args


def _resolve_model(model: str) -> str:
    """A local checkpoint folder as an absolute path: the detached worker runs in the panel's folder."""
    local = Path(model).expanduser()
    return str(local.resolve()) if local.exists() else model


def launch(
    panel_path: str | os.PathLike,
    *,
    model: str,
    checkpoints: str,
    device: str = "auto",
    dtype: str = "auto",
    batch_size: str | int = "auto",
    chunk: int | None = None,
    revision_template: str = "step{step}",
) -> int:
    """Start a detached extraction worker (own session, survives the terminal) and return its pid."""
    from memtui.panel import read_panel

    panel_path = Path(panel_path).resolve()
    panel = read_panel(panel_path)  # a clear error now rather than in the log
    if not panel.has_tokens:
        raise MemtuiError(
            f"{panel_path}: the panel stores no token ids, so it cannot be extracted; build it with `memtui build`."
        )
    parse_checkpoints(checkpoints)
    if str(batch_size) != "auto" and (not str(batch_size).isdigit() or int(batch_size) <= 0):
        raise MemtuiError(f"batch size must be a positive integer or auto, got {batch_size}.")
    if not os.access(panel_path, os.W_OK) or not os.access(panel_path.parent, os.W_OK):
        raise MemtuiError(f"{panel_path} is not writable here; extraction writes into the panel and beside it.")
    check_free_space(panel_path)
    for beside in (lock_path(panel_path), log_path(panel_path)):
        if beside.is_symlink():  # the worker would refuse it too, but only after we had said "started"
            raise MemtuiError(
                f"{beside} is a symbolic link; memtui does not follow links for the files it keeps beside a panel: "
                "remove it and rerun."
            )
    model = _resolve_model(model)
    for _ in range(20):  # a worker that was just killed releases its lock a moment after its pid is gone
        if not is_locked(panel_path):
            break
        time.sleep(0.05)
    if is_locked(panel_path):
        who = verified_holder(panel_path)
        raise MemtuiError(
            f"{panel_path} is being written by another extraction{f' (pid {who})' if who else ''}; follow it with "
            f"`memtui status {panel_path}` or stop it with `memtui extract {panel_path} --cancel`."
        )
    cmd = [sys.executable, "-m", "memtui.extract.worker", str(panel_path), "--model", model,
           "--checkpoints", str(checkpoints), "--device", device, "--dtype", dtype, "--batch-size", str(batch_size),
           "--revision-template", revision_template]  # fmt: skip
    if chunk:
        cmd += ["--chunk", str(chunk)]
    log = log_path(panel_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    fd = open_beside(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd=str(panel_path.parent),
        )
    except OSError as exc:
        raise MemtuiError(f"cannot start the extraction worker: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    current = records.read(panel_path)
    if not current or current.get("pid") != proc.pid:  # the worker has not published yet: say it is starting
        with contextlib.suppress(OSError):
            records.publish(
                panel_path,
                records.new_record(panel_path, pid=proc.pid, model=model, K=None, instances_total=panel.n_instances),
            )
    return proc.pid


def read_progress(panel_path: str | os.PathLike) -> dict | None:
    """The worker's latest progress (checked: every field has its documented type), or None if no extraction ever
    ran on this panel.

    ``state`` is running, done, failed, cancelled, stale (the worker is gone without saying it finished: killed,
    machine rebooted, disk full) or unreadable (the progress file is not a progress record); rerun `memtui extract`
    to resume a stale or cancelled run.
    """
    panel_path = Path(panel_path)
    data = records.read(panel_path)
    if data is None:
        return None
    if data["log"] is None:
        data["log"] = str(log_path(panel_path))
    if data["state"] == "running" and not _is_running(panel_path, data):
        data["state"] = "stale"
        if not data["last_error"]:
            data["last_error"] = _last_log_error(panel_path)
    return data


def _is_running(panel_path: Path, data: dict) -> bool:
    if verified_holder(panel_path) is not None:
        return True
    pid, started = data.get("pid"), data.get("started") or 0
    return isinstance(pid, int) and time.time() - started < STARTUP_GRACE_S and _starting_worker(pid, panel_path)


def _last_log_error(panel_path: Path) -> str | None:
    """Why a worker died without a word, as far as its log says (its last error-like line)."""
    from memtui.text import clean

    path = log_path(panel_path)
    if path.is_symlink():
        return None
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 16384))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if any(word in line for word in ("Error", "error", "memtui:", "Killed", "No space")):
            return clean(line.strip(), 200)
    return None


def cancel(panel_path: str | os.PathLike, wait_s: float = 10.0) -> bool:
    """SIGTERM the process that holds this panel's writer lock (it abandons the current checkpoint cleanly).

    Only that process is ever signalled: a pid from the progress file counts only once the kernel confirms it holds
    the lock (a just-launched worker gets ``wait_s`` seconds to take it). False if no extraction runs on the panel.
    """
    panel_path = Path(panel_path).resolve()
    holder = verified_holder(panel_path)
    if holder is None:
        data = records.read(panel_path)
        pid = data.get("pid") if data else None
        deadline = time.monotonic() + wait_s
        while holder is None and isinstance(pid, int) and _starting_worker(pid, panel_path):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
            holder = verified_holder(panel_path)
    if holder is None or holder == os.getpid():
        return False
    try:
        os.kill(holder, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    return True
