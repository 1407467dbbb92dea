"""Writing files so that a reader or a crash never sees half of one."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` to a temporary name beside ``path``, then rename it over ``path`` (atomic on POSIX)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
