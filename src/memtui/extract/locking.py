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


PROC_LOCKS = Path("/proc/locks")


def _flock_holders(path: Path) -> set[int] | None:
    """Pids holding an flock on ``path`` according to the kernel, or None where /proc/locks is not available.

    A lock is on this file only if the kernel's line names its whole identity, device and inode: inode numbers
    repeat across filesystems, and a process locking a same-inode file elsewhere is not this file's holder."""
    try:
        st = os.stat(path, follow_symlinks=False)
        text = PROC_LOCKS.read_text()
    except OSError:
        return None
    me = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    holders = set()
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 08:01:123456 0 EOF": major and minor in hex, the inode in decimal
        # (blocked waiters carry a "->" and are skipped)
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        try:
            pid = int(parts[4])
            major, minor, inode = parts[5].split(":")
            identity = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if identity == me:
            holders.add(pid)
    return holders


def create_with_content(path: Path, data: bytes, tag: str) -> bool:
    """Create ``path`` holding ``data`` if it does not exist; True if this call created it. The file appears whole
    or not at all: ``data`` goes to a private temporary file that is then hard-linked to ``path`` (``link`` fails if
    the name exists, atomically, on local filesystems and NFS alike). So a full disk never leaves an empty file that
    others would obey. Where hard links are not supported, falls back to O_EXCL and a write (and removes the file
    again if the write fails). OSError for anything but "exists"."""
    fd = create_held(path, data, tag, hold=False)
    if fd is None:
        return False
    os.close(fd)
    return True


def create_held(path: Path, data: bytes, tag: str, *, hold: bool = True) -> int | None:
    """:func:`create_with_content`, and (``hold``) the new file's descriptor with an exclusive ``flock`` on it, taken
    *before* the file appears under ``path``: while its creator lives, the file is never seen unlocked, so a process
    of this host (or of any host where the filesystem shares flock, as NFSv4 does) can tell a live holder from a dead
    one by the lock alone (:func:`lock_state`). None if ``path`` exists. Where the filesystem has no flock (some
    Lustre mounts), the file is created unlocked and the caller's other evidence (pid, heartbeat) decides."""
    tmp = path.with_name(f".{path.name}.{tag}.{os.getpid()}.new")
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, flags, 0o644)
    keep = False
    try:
        if hold:
            _try_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            _write_all(fd, data)
            try:
                os.link(tmp, path, follow_symlinks=False)
                keep = True
                return fd
            except FileExistsError:
                # over NFS a retransmitted link can answer "exists" although it was this call that made the name
                if os.stat(tmp, follow_symlinks=False).st_nlink == 2 and _same_file(fd, path):
                    keep = True
                    return fd
                return None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                    raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    finally:
        if not keep:
            os.close(fd)
    return _create_in_place(path, data, flags, hold)


def _create_in_place(path: Path, data: bytes, flags: int, hold: bool) -> int | None:
    """No hard links here: O_EXCL and a write (the file is briefly empty; readers give it a moment's grace)."""
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return None
    try:
        if hold:
            _try_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _write_all(fd, data)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


_NO_FLOCK = (errno.EINVAL, errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF)


def _try_flock(fd: int, how: int) -> bool:
    """flock where the filesystem has it; False where it has none (the file is then simply not locked)."""
    try:
        fcntl.flock(fd, how)
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return False
        raise
    return True


def lock_state(fd: int) -> bool | None:
    """Whether some process holds an exclusive flock on the file open at ``fd``: True (the kernel says so), False
    (nobody does), None (this filesystem has no flock). Tested with a *shared*, non-blocking lock that is dropped at
    once, so any number of processes may look at the same time without making one another look held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            return True
        return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
