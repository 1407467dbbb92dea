"""One writer per panel: an advisory lock file next to it, and recovery of a panel whose writer was killed.

The lock is an ``flock`` on ``PANEL.lock``; the kernel drops it when the holding process dies, however it dies, so a
crashed worker never leaves a stale lock. HDF5 itself marks a file "open for (SWMR) write" in its superblock and
refuses a new writer while the mark is there; a writer killed with SIGKILL leaves the mark behind. Because SWMR
writes keep the file consistent at every flush, clearing the mark (what ``h5clear -s`` does) is safe once we hold
the lock, and :func:`clear_writer_mark` does exactly that.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from memtui.errors import MemtuiError


def lock_path(panel: str | os.PathLike) -> Path:
    panel = Path(panel)
    return panel.with_name(panel.name + ".lock")


class PanelLock:
    """Exclusive, non-blocking writer lock on a panel (context manager)."""

    def __init__(self, panel: str | os.PathLike):
        self.panel = Path(panel)
        self.path = lock_path(panel)
        self._fd: int | None = None

    def acquire(self) -> PanelLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
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
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we may just have taken
    return False


def holder_pid(panel: str | os.PathLike) -> int | None:
    try:
        return int(lock_path(panel).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# --- HDF5 superblock: clear the "open for write / SWMR write" flags left by a killed writer ---------------------

_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_MASK = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _MASK


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, the checksum HDF5 uses for its metadata."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & _MASK
    i = 0
    while n > 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & _MASK
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _MASK
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _MASK
        a = (a - c) & _MASK
        a ^= _rot(c, 4)
        c = (c + b) & _MASK
        b = (b - a) & _MASK
        b ^= _rot(a, 6)
        a = (a + c) & _MASK
        c = (c - b) & _MASK
        c ^= _rot(b, 8)
        b = (b + a) & _MASK
        a = (a - c) & _MASK
        a ^= _rot(c, 16)
        c = (c + b) & _MASK
        b = (b - a) & _MASK
        b ^= _rot(a, 19)
        a = (a + c) & _MASK
        c = (c - b) & _MASK
        c ^= _rot(b, 4)
        b = (b + a) & _MASK
        n -= 12
        i += 12
    if n == 0:
        return c
    tail = data[i : i + n] + bytes(12 - n)
    a = (a + int.from_bytes(tail[0:4], "little")) & _MASK
    b = (b + int.from_bytes(tail[4:8], "little")) & _MASK
    c = (c + int.from_bytes(tail[8:12], "little")) & _MASK
    c ^= b
    c = (c - _rot(b, 14)) & _MASK
    a ^= c
    a = (a - _rot(c, 11)) & _MASK
    b ^= a
    b = (b - _rot(a, 25)) & _MASK
    c ^= b
    c = (c - _rot(b, 16)) & _MASK
    a ^= c
    a = (a - _rot(c, 4)) & _MASK
    b ^= a
    b = (b - _rot(a, 14)) & _MASK
    c ^= b
    c = (c - _rot(b, 24)) & _MASK
    return c


def clear_writer_mark(path: str | os.PathLike) -> bool:
    """Clear the superblock's write/SWMR-write flags (``h5clear -s``); True if they were set.

    Only call this while holding the panel's lock: it is how a resumed run reopens a panel whose writer was killed.
    """
    with open(path, "r+b") as f:
        head = f.read(48)
        if len(head) < 48 or head[:8] != _SIGNATURE or head[8] not in (2, 3):
            return False  # older superblock versions keep no such flags
        size_offsets = head[9]
        end = 12 + 4 * size_offsets  # base, extension, end-of-file and root-group addresses
        if head[11] == 0:
            return False
        f.seek(0)
        block = bytearray(f.read(end + 4))
        if int.from_bytes(block[end : end + 4], "little") != lookup3(bytes(block[:end])):
            return False  # not a superblock we understand; leave it alone
        block[11] = 0
        block[end : end + 4] = lookup3(bytes(block[:end])).to_bytes(4, "little")
        f.seek(0)
        f.write(block)
        f.flush()
        os.fsync(f.fileno())
    return True
