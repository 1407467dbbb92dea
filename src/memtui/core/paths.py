"""Paths a user names, checked before anything is read or written: one line saying what is wrong with them.

A folder where a file belongs, a FIFO or a device (reading one blocks forever or never ends), a path with a NUL byte
(the OS cannot take it), a file where a folder belongs, a folder that cannot be written (a read-only mount): each is
refused here, naming the option or the file, instead of surfacing later as a traceback, a hang or a wrong size.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.text import clean


def _stat(path, what: str) -> os.stat_result | None:
    """``os.stat`` of the path, None where nothing is there; any other failure is a refusal."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # "embedded null byte"
        raise MemtuiError(f"{clean(path, 200)} ({what}): the path holds a NUL byte; no file can have it.") from None
    except OSError as exc:
        raise MemtuiError(f"{clean(path, 200)} ({what}): cannot reach it ({exc.strerror or exc}).") from None


def input_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` where it is a regular file this process can read, else a one-line refusal naming ``what``."""
    st = _stat(path, what)
    if st is None:
        raise MemtuiError(f"{clean(path, 200)}: no such {what}.")
    if stat.S_ISDIR(st.st_mode):
        raise MemtuiError(f"{clean(path, 200)} is a folder, not a {what}; give the file itself.")
    if not stat.S_ISREG(st.st_mode):
        raise MemtuiError(f"{clean(path, 200)} is not a regular file (a pipe, socket or device); give the {what} as a "
                          "file.")  # fmt: skip
    if not os.access(path, os.R_OK):
        raise MemtuiError(f"{clean(path, 200)}: cannot read the {what} (permission denied).")
    return Path(path)


def writable_folder(path: str | os.PathLike, what: str, move: str | None = None) -> Path:
    """``path`` where it is a folder this process can write into, or where it can be made (its nearest existing
    parent is a writable folder); nothing is created. ``move``: the option that puts the write elsewhere, named in
    the refusal of a folder that cannot be written."""
    hint = f"; {move}" if move else ""
    st = _stat(path, what)
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise MemtuiError(f"{clean(path, 200)} is a file, not a folder; {what} must name a folder{hint}.")
        if not os.access(path, os.W_OK | os.X_OK):
            raise MemtuiError(f"cannot write into {clean(path, 200)} ({what}): {_why_not(path)}{hint}.")
        return Path(path)
    parent = Path(os.path.abspath(path)).parent
    while _stat(parent, what) is None and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise MemtuiError(f"cannot make {clean(path, 200)} ({what}): {clean(parent, 200)} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MemtuiError(f"cannot make {clean(path, 200)} ({what}): {_why_not(parent)} ({clean(parent, 200)}){hint}.")
    return Path(path)


def _why_not(folder) -> str:
    """Why a folder cannot be written: a read-only mount, or permissions."""
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "it is on a read-only file system" if read_only else "permission denied"
