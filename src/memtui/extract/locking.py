"""One writer per panel: an advisory lock file next to it, and a verified answer to "which process writes it?".

The lock is an ``flock`` on ``PANEL.lock``; the kernel drops it when the holding process dies, however it dies, so a
crashed worker never leaves a stale lock. The file also records the holder's pid, but a pid alone proves nothing (it
may be reused, or the file forged): :func:`verified_holder` accepts it only if the kernel confirms that this pid holds
the flock on this very file (``/proc/locks``), which is what lets ``--cancel`` signal a process safely.

The files memtui creates beside a panel are opened without following symbolic links: a link planted at
``PANEL.lock`` would otherwise let a run truncate whatever it points at.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from memtui.errors import MemtuiError


def lock_path(panel: str | os.PathLike) -> Path:
    panel = Path(panel)
    return panel.with_name(panel.name + ".lock")


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


class PanelLock:
    """Exclusive, non-blocking writer lock on a panel (context manager)."""

    def __init__(self, panel: str | os.PathLike):
        self.panel = Path(panel)
        self.path = lock_path(panel)
        self._fd: int | None = None

    def acquire(self) -> PanelLock:
        fd = open_beside(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = holder_pid(self.panel)
            who = f" (pid {holder})" if holder else ""
            raise MemtuiError(
                f"{self.panel} is being written by another extraction{who}; follow it with "
                f"`memtui status {self.panel}` or stop it with `memtui extract {self.panel} --cancel`."
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk: the lock still holds, only the pid note is missing
            if exc.errno != errno.ENOSPC:
                os.close(fd)
                raise MemtuiError(f"cannot write {self.path}: {exc.strerror or exc}.") from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> PanelLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def is_locked(panel: str | os.PathLike) -> bool:
    path = lock_path(panel)
    if not path.exists() or path.is_symlink():
        return False
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


def holder_pid(panel: str | os.PathLike) -> int | None:
    """The pid the lock file names (unverified: for messages only)."""
    path = lock_path(panel)
    if path.is_symlink():
        return None
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


def verified_holder(panel: str | os.PathLike) -> int | None:
    """The pid of the process that holds this panel's writer lock, confirmed by the kernel; None if none does.

    Where /proc/locks exists (Linux) the pid must be one the kernel lists as holding the flock on this lock file's
    inode; elsewhere the lock must be held and the recorded pid alive. Nothing else is ever treated as the writer.
    """
    if not is_locked(panel):
        return None
    pid = holder_pid(panel)
    holders = _flock_holders(lock_path(panel))
    if holders is not None:
        if pid in holders:
            return pid
        return min(holders) if len(holders) == 1 else None
    return pid
