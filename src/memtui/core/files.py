"""Writing files so that a reader or a crash never sees half of one, and a failed write never costs the old one."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from memtui.core.errors import MemtuiError


class WriteError(MemtuiError, OSError):
    """A file could not be written (full disk, read-only filesystem, no permission). One line for the user; still an
    OSError, so callers for whom the file is optional (the estimate cache, progress notes) can ignore it as before."""


def refuse_existing(path: str | os.PathLike, force: bool) -> None:
    """The one refusal of every command that creates a file: an existing one is never replaced without --force."""
    if Path(path).exists() and not force:
        raise MemtuiError(f"{path} already exists; pass --force to overwrite it or choose another path.")


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` to a temporary name beside ``path``, then rename it over ``path`` (atomic on POSIX).

    On any failure the temporary file is removed and ``path`` is left exactly as it was; an OSError becomes a
    :class:`WriteError` naming the file and the reason.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        if tmp.is_symlink():  # never write through a link planted at our temporary name
            tmp.unlink()
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        if isinstance(exc, WriteError):
            raise
        # h5py puts HDF5's whole error stack in strerror; the errno says it in words a user reads
        reason = os.strerror(exc.errno) if exc.errno else (str(exc).splitlines() or [type(exc).__name__])[0]
        kept = "; the existing file is unchanged" if path.exists() else ""
        raise WriteError(f"cannot write {path}: {reason}{kept}.") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
