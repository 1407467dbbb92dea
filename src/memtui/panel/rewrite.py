"""Rewriting a whole panel file beside itself and renaming it over the original (covariates, the per-token scores'
group): HDF5 cannot add datasets to a file that another process may be committing into, so the file is edited in
memory, written beside, and renamed only if the panel did not change meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.panel.superblock import read_superblock


def identity(path: Path, when_finished: str) -> tuple:
    """What must not change between reading the panel and renaming the new one over it; a panel being written is
    refused, saying what to do ``when_finished`` (e.g. "rerun when it has finished")."""
    try:
        sb = read_superblock(path)
        st = path.stat()
    except OSError as exc:
        raise MemtuiError(f"{path} cannot be read ({exc.strerror or exc}).") from None
    if sb is not None and sb.open_for_write:
        raise MemtuiError(f"{path} is being written (an extraction is committing into it); {when_finished}.")
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def replace_panel(path: Path, image: bytes, before: tuple, changed: str, when_finished: str) -> None:
    """Write ``image`` beside ``path``, fsync it, and rename it over ``path`` unless the panel's ``identity`` is no
    longer ``before`` (then ``changed``, one line, and nothing replaced; ``when_finished``: as ``identity``'s)."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as out:
            out.write(image)
            out.flush()
            os.fsync(out.fileno())
        if identity(path, when_finished) != before:
            raise MemtuiError(changed)

    atomic_write(path, write)
