"""The launch record (``PANEL.work/launch.json``): how the panel's workers were last launched, by ``jobs.launch``
(local processes) or ``slurm.submit`` (a job array); status and ``--cancel`` read it."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from memtui.extract import progress as records
from memtui.extract.units import work_dir


def launch_record(panel_path: str | os.PathLike) -> Path:
    return work_dir(panel_path) / "launch.json"


def write_launch(panel_path: Path, record: dict) -> None:
    """Record how the panel's workers were launched (local pids or a SLURM array); a failed write is no error."""
    with contextlib.suppress(OSError):
        records.publish_to(launch_record(panel_path), record)


def read_launch(panel_path: Path) -> dict:
    """The launch record, or {} where there is none or it is unreadable (a record is anyone's file)."""
    try:
        data = json.loads(launch_record(panel_path).read_bytes()[: 1 << 20])
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
