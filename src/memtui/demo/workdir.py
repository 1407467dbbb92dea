"""The demo's working folder: ``--keep FOLDER`` (kept afterwards) or a temporary one (removed when the demo ends).

``--keep`` is checked before the demo makes anything (its output folder, a log, the job): a file there, a FIFO, a
folder on a read-only mount or one that cannot be made is refused in one line and nothing is left behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from memtui.core.paths import writable_folder


def check_keep(keep: str | os.PathLike | None) -> None:
    """Refuse a ``--keep`` that is not a folder the demo can write into (or make); nothing is created."""
    if keep is not None:
        writable_folder(keep, "--keep")


def work_folder(workdir: str | os.PathLike | None) -> Path:
    """The checked ``--keep`` folder, made where it does not exist yet, or a new temporary folder."""
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="memtui-demo-"))
    check_keep(workdir)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    return work
