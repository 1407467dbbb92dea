"""The progress record of an extraction worker: what it publishes in ``PANEL.work/workers/ID.json`` and readers show.

It is built here (:func:`new_record`), written here (:func:`publish`), read and checked here (:func:`parse`), and put
into words here (:func:`describe`), so the worker, the job API, the CLI and the app agree on one schema. A progress
file is data anyone could have written: :func:`parse` keeps only fields of the expected type, so a junk file (a JSON
list, strings where numbers belong, NaN, control characters) reads as "unreadable" or loses the bad fields, and never
crashes a reader or reaches the terminal raw.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from memtui.core.files import atomic_write
from memtui.core.text import clean

STATES = ("running", "queued", "done", "failed", "cancelled", "stale", "unreadable")  # queued: a SLURM task

# field -> accepted types (bool is excluded from numbers explicitly below)
_INT, _NUM, _STR = (int,), (int, float), (str,)
SCHEMA: dict[str, tuple] = {
    "state": _STR,
    "pid": _INT,
    "panel": _STR,
    "model": _STR,
    "checkpoint": _INT,
    "k": _INT,
    "K": _INT,
    "instances_done": _INT,
    "instances_total": _INT,
    "checkpoints_done": _INT,
    "checkpoints_total": _INT,
    "tokens_per_s": _NUM,
    "eta_s": _NUM,
    "last_error": _STR,
    "batch_size": _INT,
    "device": _STR,
    "dtype": _STR,
    "started": _NUM,
    "updated": _NUM,
    "log": _STR,
    "host": _STR,
    "slurm_job": _STR,
    "slurm_task": _STR,
    "unit": _STR,
    "id": _STR,
}
_MAX_WARNINGS = 20


def log_path(panel: str | os.PathLike) -> Path:
    from memtui.extract.units import beside

    return beside(panel, ".extract.log")


def new_record(panel: str | os.PathLike, **fields) -> dict:
    """A fresh record for a run on ``panel``: every field present, unknown ones None."""
    now = time.time()
    record = dict.fromkeys(SCHEMA)
    record.update(
        state="running",
        pid=os.getpid(),
        panel=str(panel),
        model="",
        k=0,
        K=0,
        instances_done=0,
        instances_total=0,
        warnings=[],
        started=now,
        updated=now,
        log=str(log_path(panel)),
    )
    record.update(fields)
    return record


def publish_to(path: Path, record: dict) -> None:
    """Replace a record file atomically (a reader sees the old record or the new one, never half of one)."""
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(record, indent=1)))


def _valid(value, types: tuple) -> bool:
    if isinstance(value, bool) or not isinstance(value, types):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return not (isinstance(value, int) and abs(value) > 2**53)


def parse(data) -> dict:
    """A checked copy of a decoded progress file: wrong-typed fields become None, strings are cleaned, and anything
    that is not a JSON object reads as the ``unreadable`` state."""
    if not isinstance(data, dict):
        record = dict.fromkeys(SCHEMA)
        record.update(state="unreadable", last_error="the progress file is not a progress record", warnings=[])
        return record
    record = {}
    for key, types in SCHEMA.items():
        value = data.get(key)
        record[key] = (clean(value) if isinstance(value, str) else value) if _valid(value, types) else None
    if record["state"] not in STATES:
        record["state"] = "unreadable"
    warnings = data.get("warnings")
    record["warnings"] = (
        [clean(w) for w in warnings[:_MAX_WARNINGS] if isinstance(w, str)] if isinstance(warnings, list) else []
    )
    return record


def read(path: Path) -> dict | None:
    """The checked record in ``path``, None where there is no such file."""
    data = None
    for _ in range(3):  # the file is replaced atomically; a retry only covers a transient read error
        if path.is_symlink() or not path.exists():
            return None
        try:
            data = json.loads(path.read_bytes()[: 1 << 20])
            break
        except (OSError, ValueError, RecursionError):
            data = Ellipsis  # unreadable this time
            time.sleep(0.05)
    return parse(None if data is Ellipsis else data)


def fmt_duration(seconds) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def describe(record: dict) -> str:
    """One line for a record (its strings are already clean). For the run as a whole (``read_progress``), the
    counts are the run's totals: checkpoints in the panel and units scored by every worker together, which only
    grow; for one worker, its own unit count."""
    state = record.get("state") or "?"
    parts = [state]
    whole = "workers" in record
    if whole and record.get("checkpoints_total"):
        parts.append(f"{record.get('checkpoints_done') or 0}/{record['checkpoints_total']} checkpoints extracted")
    if whole and record.get("K"):
        parts.append(f"{record.get('units_done') or 0}/{record['K']} units scored")
    if whole and record.get("n_queued"):
        parts.append(f"{record['n_queued']} task(s) queued in SLURM")
    if not whole and record.get("K"):
        step = record.get("checkpoint")
        parts.append(
            f"checkpoint {record.get('k') or 0}/{record['K']}" + (f" (step {step})" if step is not None else "")
        )
    if not whole and record.get("instances_total"):
        parts.append(f"{record.get('instances_done') or 0}/{record['instances_total']} instances")
    if record.get("tokens_per_s") and state == "running":
        parts.append(f"{record['tokens_per_s']:,.0f} tokens/s")
    if state == "running" and record.get("eta_s") is not None:
        parts.append(f"ETA {fmt_duration(record['eta_s'])}")
    if record.get("last_error"):
        parts.append(f"error: {record['last_error']}")
    if record.get("uncommitted"):
        parts.append(record["uncommitted"])
    return ", ".join(parts)


def describe_worker(record: dict, now: float | None = None) -> str:
    """One line for one worker's record: state, where it runs, the unit it holds, its rate, its last heartbeat."""
    now = time.time() if now is None else now
    where = record.get("host") or "?"
    if record.get("slurm_job"):
        where += f" slurm {record['slurm_job']}_{record.get('slurm_task') or '?'}"
    where += (f" pid {record['pid']}" if record.get("pid") is not None else "") + (
        f" {record['device']}" if record.get("device") else ""
    )
    unit = f"unit {record['unit']}" if record.get("unit") else "no unit"
    running = record.get("state") == "running"
    rate = f"{record['tokens_per_s']:,.0f} tokens/s" if record.get("tokens_per_s") and running else ""
    updated = record.get("updated")
    beat = f"heartbeat {fmt_duration(max(0.0, now - updated))} ago" if isinstance(updated, int | float) else ""
    return ", ".join(x for x in (f"{record.get('state') or '?':<9} {where}", unit, rate, beat) if x)
