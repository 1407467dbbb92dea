"""Refusing, before any work, a panel too big for this machine's memory (a MemoryError half-way is a traceback)."""

from __future__ import annotations

import os

from memtui.core.errors import MemtuiError

# HDF5 caps a chunk below 4 GiB. A panel stores each per-instance array (8-byte ids, split names up to 16 bytes) and
# each metric column as one chunk, and each per-checkpoint array (256-byte revisions) as one chunk.
_CHUNK = 2**32 - 1
MAX_INSTANCES = _CHUNK // 16
MAX_CHECKPOINTS = _CHUNK // 256


def physical_memory() -> int | None:
    """Bytes of RAM in this machine, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def human(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit (up to PiB) that keeps the number at 1 or more."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    k = 0
    while nbytes >= 1024 and k < len(units) - 1:
        nbytes /= 1024
        k += 1
    return f"{nbytes:.0f} bytes" if k == 0 else f"{nbytes:.1f} {units[k]}"


def human_decimal(n: float) -> str:
    """``n`` bytes in decimal units (KB = 1000 B), as the Hugging Face hub lists file sizes."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1000
        if n < 1000:
            return f"{n:.1f} {unit}"
    return f"{n / 1000:.1f} TB"


def require_memory(nbytes: int, what: str, fix: str) -> None:
    """Refuse ``what`` when it needs more than the machine's memory; ``fix`` says how to make it smaller."""
    have = physical_memory()
    if have is not None and nbytes > have:
        raise MemtuiError(f"{what} needs about {human(nbytes)} of memory, this machine has {human(have)}; {fix}.")


def require_shape(n_instances: int, n_checkpoints: int, fix: str) -> None:
    """Refuse a panel shape the file format cannot store, whatever the memory."""
    for count, limit, what in (
        (n_instances, MAX_INSTANCES, "instances"),
        (n_checkpoints, MAX_CHECKPOINTS, "checkpoints"),
    ):
        if count > limit:
            raise MemtuiError(f"{count:,} {what} is more than a panel holds ({limit:,}); {fix}.")
