"""The first bytes of an HDF5 file: enough to tell a truncated or damaged panel, and whether a writer has it open.

HDF5 opens a file in SWMR-read mode without its end-of-file check, so a truncated panel opened that way hangs or
reads lost data as zeros. Reading the superblock ourselves (48 bytes) answers both questions before HDF5 sees the
file: the stored end-of-file address says how long the file must be, and the consistency flags say whether a writer
has it open (only then does a reader need SWMR mode). The superblock of versions 2 and 3 (what ``libver="latest"``
writes) carries a checksum, so a damaged one is caught too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

SIGNATURE = b"\x89HDF\r\n\x1a\n"
_MASK = 0xFFFFFFFF
WRITE_FLAG = 0x01  # file consistency flags of superblock v3: open for write ...
SWMR_WRITE_FLAG = 0x04  # ... and open for SWMR write


@dataclass(frozen=True)
class Superblock:
    version: int
    flags: int
    base: int  # base address: every address in the file is relative to it
    eof: int  # end-of-file address: the file must hold at least base + eof bytes
    checksum_ok: bool
    header_size: int  # bytes of the superblock up to its checksum

    @property
    def needed_size(self) -> int:
        return self.base + self.eof

    @property
    def open_for_write(self) -> bool:
        return bool(self.flags & (WRITE_FLAG | SWMR_WRITE_FLAG))


def read_superblock(path: str | os.PathLike) -> Superblock | None:
    """The superblock at offset 0 if it has version 2 or 3, else None (older formats, user blocks, not HDF5)."""
    with open(path, "rb") as f:
        head = f.read(12 + 4 * 8 + 4)
    if len(head) < 12 or head[:8] != SIGNATURE or head[8] not in (2, 3):
        return None
    size = head[9]
    if size not in (2, 4, 8):
        return None
    end = 12 + 4 * size
    if len(head) < end + 4:
        return None
    addr = [int.from_bytes(head[12 + i * size : 12 + (i + 1) * size], "little") for i in range(4)]
    stored = int.from_bytes(head[end : end + 4], "little")
    return Superblock(
        version=head[8],
        flags=head[11],
        base=addr[0],
        eof=addr[2],
        checksum_ok=stored == lookup3(head[:end]),
        header_size=end,
    )


def clear_writer_flags(path: str | os.PathLike) -> bool:
    """Clear the superblock's write/SWMR-write flags (what ``h5clear -s`` does); True if they were set.

    Only safe while holding the panel's writer lock: it is how a resumed run reopens a panel whose writer was killed
    (SWMR writes keep the file consistent at every flush, so the flags are all that is left of the dead writer).
    """
    sb = read_superblock(path)
    if sb is None or not sb.checksum_ok or sb.flags == 0:
        return False
    with open(path, "r+b") as f:
        block = bytearray(f.read(sb.header_size))
        block[11] = 0
        f.seek(0)
        f.write(bytes(block) + lookup3(bytes(block)).to_bytes(4, "little"))
        f.flush()
        os.fsync(f.fileno())
    return True


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
