"""Background extraction jobs: start a detached worker, read its progress, cancel it.

This is the contract the workbench app uses: :func:`launch`, :func:`read_progress`, :func:`cancel`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from memtui.errors import MemtuiError

from .checkpoints import parse_checkpoints
from .locking import is_locked
from .worker import log_path, progress_path, write_json_atomic

__all__ = ["launch", "read_progress", "cancel", "progress_path", "log_path"]


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


def _is_worker(pid: int) -> bool:
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no /proc (macOS): trust the pid
    try:
        return b"memtui" in cmdline.read_bytes()
    except OSError:
        return False


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
    for _ in range(20):  # a worker that was just killed releases its lock a moment after its pid is gone
        if not is_locked(panel_path) or (read_progress(panel_path) or {}).get("state") != "stale":
            break
        time.sleep(0.05)
    if is_locked(panel_path):
        current = read_progress(panel_path) or {}
        who = f" (pid {current['pid']})" if current.get("pid") else ""
        raise MemtuiError(
            f"{panel_path} is being written by another extraction{who}; follow it with "
            f"`memtui status {panel_path}` or stop it with `memtui extract {panel_path} --cancel`."
        )
    cmd = [
        sys.executable,
        "-m",
        "memtui.extract.worker",
        str(panel_path),
        "--model",
        model,
        "--checkpoints",
        str(checkpoints),
        "--device",
        device,
        "--dtype",
        dtype,
        "--batch-size",
        str(batch_size),
        "--revision-template",
        revision_template,
    ]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    log = log_path(panel_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd=str(panel_path.parent),
        )
    current = _read_json(progress_path(panel_path))
    if not current or current.get("pid") != proc.pid:  # the worker has not published yet: say it is starting
        write_json_atomic(
            progress_path(panel_path),
            {
                "state": "running",
                "pid": proc.pid,
                "panel": str(panel_path),
                "model": model,
                "checkpoint": None,
                "k": 0,
                "K": None,
                "instances_done": 0,
                "instances_total": panel.n_instances,
                "tokens_per_s": None,
                "eta_s": None,
                "last_error": None,
                "warnings": [],
                "started": time.time(),
                "updated": time.time(),
                "log": str(log),
            },
        )
    return proc.pid


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_progress(panel_path: str | os.PathLike) -> dict | None:
    """The worker's latest progress, or None if no extraction ever ran on this panel.

    ``state`` is running, done, failed, cancelled, or stale (the worker is gone without saying it finished: killed,
    machine rebooted); rerun `memtui extract` to resume a stale or cancelled run.
    """
    data = None
    for _ in range(3):  # the file is replaced atomically; a retry only covers a transient read error
        data = _read_json(progress_path(panel_path))
        if data is not None:
            break
        if not progress_path(panel_path).exists():
            return None
        time.sleep(0.05)
    if data is None:
        return None
    data.setdefault("log", str(log_path(panel_path)))
    pid = data.get("pid")
    # gone, or its pid reused by another program since (a reboot): either way nobody is extracting
    if data.get("state") == "running" and (not isinstance(pid, int) or not _alive(pid) or not _is_worker(pid)):
        data["state"] = "stale"
    return data


def cancel(panel_path: str | os.PathLike) -> bool:
    """SIGTERM the running worker (it abandons the current checkpoint cleanly). False if none is running."""
    data = read_progress(panel_path)
    if not data or data.get("state") != "running":
        return False
    pid = data["pid"]
    if not _is_worker(pid):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True
