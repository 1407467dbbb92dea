"""The adversarial suite's tools: run memtui as a user would, under a timeout, and hold it to its promise.

The promise (issue 7): no input and no fault makes memtui hang, print a traceback, report a wrong number with exit 0,
lose or corrupt an existing file, or signal a process that is not its own. Bad input gets one line on stderr,
``memtui: ...``, and exit status 2.

- ``memtui(*args, timeout=...)`` runs the real command in a child process: a hang fails the test at the timeout
  instead of stalling the suite. Use it where a case could hang or touches process state (signals, cwd, mounts).
- ``cli(*args)`` (from the top-level conftest) runs in-process: fast, for the many cases that cannot hang.
- ``assert_refused(result, expect)`` checks the one-line, exit-2 promise (and that nothing raw reaches the terminal).
- ``small_fs(size)`` mounts a tmpfs of that size (a full disk on demand); ``readonly_fs()`` a read-only one. Both need
  root and the mount syscall (CI has them); elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # what must never reach the terminal from a file (ESC included)


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_memtui(*args, timeout: float = 60, cwd=None, env=None) -> Result:
    """`memtui ARGS...` in a child process; a run past ``timeout`` seconds fails the test as a hang."""
    cmd = [sys.executable, "-m", "memtui.cli", *map(str, args)]
    full_env = dict(os.environ, **(env or {}))
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: `memtui {' '.join(map(str, args))}` did not return within {timeout} s")
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def memtui():
    return run_memtui


def assert_refused(result, expect: str | None = None) -> str:
    """Exit 2, one line on stderr starting `memtui: `, no traceback, no control characters; returns the line."""
    code, out, err = (result.code, result.out, result.err) if isinstance(result, Result) else result
    assert "Traceback" not in err and "Traceback" not in out, err
    assert code == 2, f"exit {code}; stderr: {err!r}"
    assert err.startswith("memtui: ") and err.count("\n") == 1, f"not one line: {err!r}"
    assert not CONTROL.search(err) and not CONTROL.search(out), f"control characters shown: {err!r} {out!r}"
    if expect is not None:
        assert expect in err, err
    return err


def assert_clean_exit(result) -> None:
    """A run that succeeded: exit 0, no traceback, nothing raw from a file on the terminal."""
    code, out, err = (result.code, result.out, result.err) if isinstance(result, Result) else result
    assert "Traceback" not in err, err
    assert code == 0, f"exit {code}; stderr: {err!r}"
    assert not CONTROL.search(out) and not CONTROL.search(err), f"control characters shown: {out!r} {err!r}"


def digest(path: Path) -> str:
    """Content hash of a file, to show that a refused command left it exactly as it was."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _can_mount() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs (CI runs as root)"
    if not sys.platform.startswith("linux"):
        return "needs Linux tmpfs"
    probe = tempfile.mkdtemp(prefix="memtui-mount-probe-")
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True)
        if ok.returncode:
            return f"cannot mount a tmpfs here ({ok.stderr.decode(errors='replace').strip()})"
        subprocess.run(["umount", probe], capture_output=True)
        return None
    except FileNotFoundError:
        return "no mount command"
    finally:
        os.rmdir(probe)


_MOUNT_PROBLEM: list[str | None] = []


def _mount_problem() -> str | None:
    if not _MOUNT_PROBLEM:
        _MOUNT_PROBLEM.append(_can_mount())
    return _MOUNT_PROBLEM[0]


@pytest.fixture
def small_fs(tmp_path):
    """``small_fs(size)`` -> a fresh folder on a tmpfs of ``size`` (e.g. "3m", "400k"); unmounted afterwards."""
    mounts: list[Path] = []

    def make(size: str) -> Path:
        problem = _mount_problem()
        if problem:
            pytest.skip(problem)
        where = tmp_path / f"fs{len(mounts)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
        mounts.append(where)
        return where

    yield make
    for where in reversed(mounts):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def readonly_fs(small_fs):
    """``readonly_fs(setup=None)`` -> a read-only folder; ``setup(folder)`` puts files there while it is writable."""

    def make(setup=None) -> Path:
        where = small_fs("8m")
        if setup is not None:
            setup(where)
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        return where

    return make


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the filesystem of ``folder`` until at most ``leave`` bytes are free."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(folder / ".filler", "wb") as f:
        chunk = b"\0" * 65536
        remaining = free - leave
        try:
            while remaining > 0:
                remaining -= f.write(chunk[: min(len(chunk), remaining)])
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            pass
