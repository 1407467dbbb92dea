"""Lock files, and a verified answer to "which process holds it?".

Each extraction worker holds an ``flock`` on its own lock file for its life (``PANEL.work/workers/ID.lock``); the
kernel drops it when the process dies, however it dies. The file also records the holder's pid, but a pid alone
proves nothing (it may be reused, or the file forged): :func:`holder_of` accepts it only if the kernel confirms that
this pid holds the flock on this very file (``/proc/locks``), which is what lets ``--cancel`` signal a process
safely. flock is only trusted on the host that holds it; across hosts, claims and heartbeats decide
(:mod:`memtui.extract.units`).

The files memtui creates beside a panel are opened without following symbolic links: a link planted at
``PANEL.lock`` would otherwise let a run truncate whatever it points at.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from memtui.core.errors import MemtuiError


def open_beside(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` for a file memtui keeps beside a panel, refusing a symbolic link there (one-line error)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise MemtuiError(
                f"{path} is a symbolic link; memtui does not follow links for the files it keeps beside a panel: "
                "remove it and rerun."
            ) from None
        raise MemtuiError(f"cannot open {path}: {exc.strerror or exc}.") from None


class FileLock:
    """An exclusive, non-blocking ``flock`` on ``path`` held for a process's life (context manager); the kernel drops
    it when the process dies, however it dies."""

    def __init__(self, path: str | os.PathLike, busy: str | None = None):
        self.path = Path(path)
        self.busy = busy
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        fd = open_beside(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise MemtuiError(self.busy or f"{self.path} is locked by another process.") from None
        with contextlib.suppress(OSError):  # a full disk: the lock still holds, only the pid note is missing
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holder_of(path: str | os.PathLike) -> int | None:
    """The pid holding the flock on ``path``, confirmed by the kernel (``/proc/locks``); None if nobody holds it.

    The pid written in the file counts only if the kernel lists it as a holder of this file's inode; where there is
    no /proc/locks, only if the lock is held and that pid is alive. Nothing else is ever treated as the holder.
    """
    path = Path(path)
    if path.is_symlink() or not path.exists() or not _is_locked(path):
        return None
    pid = _pid_in(path)
    holders = _flock_holders(path)
    if holders is not None:
        if pid in holders:
            return pid
        return next(iter(holders)) if len(holders) == 1 else None
    return pid


def _is_locked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we may just have taken
    return False


def _pid_in(path: Path) -> int | None:
    try:
        pid = int(path.read_text()[:32].split()[0])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    return pid if pid > 0 else None


def _flock_holders(path: Path) -> set[int] | None:
    """Pids holding an flock on ``path`` according to the kernel, or None where /proc/locks is not available."""
    try:
        st = os.stat(path, follow_symlinks=False)
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    holders = set()
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 08:01:123456 0 EOF" (blocked waiters carry a "->" and are skipped)
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        try:
            pid = int(parts[4])
            inode = int(parts[5].rsplit(":", 1)[1])
        except (ValueError, IndexError):
            continue
        if inode == st.st_ino:
            holders.add(pid)
    return holders


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process of this host (a zombie is not; our own exited child is reaped first)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our exited child, or it stays a zombie that looks alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True
