"""`memtui serve` as a user runs it, for the tests that drive a real server (tests/cli/test_serve.py and
tests/adversarial/test_round4_serve.py): a child process in its own process group on a free loopback port, the
address it prints (with the launch's token), and the workbench processes it has started."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"
START_S = 120  # bounds on a loaded 2-core machine (measured here under load ~10: page 9 s, first paint 29 s)
STOP_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(panel: Path, port: int, log: Path) -> subprocess.Popen:
    """`memtui serve PANEL --port PORT`, its output to ``log`` (a file, so the access log never fills a pipe)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "memtui.cli", "serve", str(panel), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group, so a failed test can end it and its apps together
        )


def entry_url(server: subprocess.Popen, log: Path) -> str:
    """The address `memtui serve` tells the user to open, once it has printed it (it is listening by then)."""
    deadline = time.monotonic() + START_S
    while (found := re.search(r"Serving the workbench at (\S+)", log.read_text(errors="replace"))) is None:
        assert server.poll() is None, f"the server ended: {log.read_text(errors='replace')[-500:]}"
        assert time.monotonic() < deadline, f"the server printed no address within {START_S} s"
        time.sleep(0.2)
    return found.group(1)


def apps_on(path: Path, server: int) -> list[int]:
    """Pids of the processes other than ``server`` whose command line names ``path``: the workbenches (and their
    shells) the server started on it."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(path).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return [pid for pid in pids if pid != server]


def wait_for_no_apps(panel: Path, server: int) -> list[int]:
    deadline = time.monotonic() + STOP_S
    while (left := apps_on(panel, server)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def stop(server: subprocess.Popen, panel: Path) -> None:
    """End the server's process group if it still runs, and any workbench it left behind (by pid, each ours)."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(STOP_S)
    for pid in apps_on(panel, server.pid):
        os.kill(pid, signal.SIGKILL)
