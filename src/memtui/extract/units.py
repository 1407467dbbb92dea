"""Units of extraction work, claimed by many workers on many hosts through files alone.

A **unit** is (checkpoint, instance range): by default a whole checkpoint (one model load per unit, as the paper
did); ``--split K`` cuts each checkpoint into K ranges. Every worker computes the same list of units from the panel
and the options, so they agree on names without talking to each other.

Everything lives in ``PANEL.work/`` beside the panel, which may be on NFS or Lustre and seen by many hosts, so the
protocol uses only what those filesystems do atomically — ``open(O_CREAT|O_EXCL)`` and ``rename`` — and never
``flock`` across hosts nor HDF5 file locking:

- ``claims/UNIT.claim``: created with O_EXCL by the worker that takes the unit; holds its owner (host, pid, SLURM
  job and task) and is ``touch``-ed every few seconds (the heartbeat). A claim whose heartbeat is older than the
  stale limit — or whose owner is a dead process on this very host, or an earlier run of the same SLURM array task
  (a requeue) — is taken over: renamed away (only one taker can win the rename), then claimed afresh with O_EXCL.
- ``parts/UNIT.npz``: the unit's values, written beside and renamed: a part exists whole or not at all. A unit is
  finished when its part exists or its checkpoint is committed to the panel.
- ``workers/ID.json`` and ``workers/ID.lock``: each worker's progress record, and a lock file it holds for its life
  (on its own host the kernel's lock table tells whether it still runs: :func:`memtui.extract.locking.holder_of`).

Values do not depend on how the work was split: a whole-checkpoint unit is scored in exactly the order and batches
a single worker uses (bitwise identical); split units differ only by batch composition (within 1e-6 relative).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.extract.locking import process_alive

# Every metric extraction can compute, in part-file order. A panel holds some of them (panels made before
# extractability have the first four): workers score and commit only those (``panel_metrics``).
METRICS = ("loglik", "accuracy", "rank", "entropy", "extractable", "extractable_len")


def panel_metrics(names) -> tuple[str, ...]:
    """The extractable metrics among a panel's metric names, in ``METRICS`` order."""
    return tuple(m for m in METRICS if m in set(names))


def heartbeat_s() -> float:
    """How often a worker touches its claim (tests shorten it through the environment)."""
    return float(os.environ.get("MEMTUI_HEARTBEAT_S") or 20)


def stale_s() -> float:
    """A claim or lease untouched this long belongs to a worker that is gone (a few missed heartbeats; hosts' clocks
    must agree to well within it, as NTP keeps them)."""
    return float(os.environ.get("MEMTUI_STALE_S") or 180)


def work_dir(panel: str | os.PathLike) -> Path:
    panel = Path(panel)
    return panel.with_name(panel.name + ".work")


@dataclass(frozen=True)
class Unit:
    step: int
    index: int  # the checkpoint's column in the panel
    lo: int  # instance rows [lo, hi) of the panel
    hi: int
    split: int

    @property
    def name(self) -> str:
        return f"step{self.step:09d}.rows{self.lo:09d}-{self.hi:09d}.of{self.split}"

    @property
    def whole(self) -> bool:
        return self.split == 1


def plan_units(steps: list[int], panel_steps: np.ndarray, n: int, split: int) -> list[Unit]:
    """Units for the given checkpoint steps, in step order, each step cut into ``split`` near-equal row ranges."""
    index = {int(s): i for i, s in enumerate(panel_steps)}
    split = max(1, min(split, n))
    bounds = np.linspace(0, n, split + 1).round().astype(int)
    return [
        Unit(step, index[step], int(lo), int(hi), split)
        for step in steps
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: enough to tell, from any host, whether it is gone."""

    host: str
    pid: int
    slurm_job: str | None = None  # the array job id
    slurm_task: str | None = None  # the array task id
    token: str = ""

    @classmethod
    def me(cls) -> Owner:
        env = os.environ
        job = env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID")
        task = env.get("SLURM_ARRAY_TASK_ID")
        return cls(socket.gethostname(), os.getpid(), job, task, uuid.uuid4().hex)

    @property
    def id(self) -> str:
        base = f"{self.host}-{self.pid}"
        return f"{base}-slurm{self.slurm_job}_{self.slurm_task}" if self.slurm_job else base

    def to_json(self) -> str:
        return json.dumps(
            {
                "host": self.host,
                "pid": self.pid,
                "slurm_job": self.slurm_job,
                "slurm_task": self.slurm_task,
                "token": self.token,
            }  # fmt: skip
        )

    @classmethod
    def from_json(cls, text: str) -> Owner | None:
        try:
            d = json.loads(text)
            return cls(str(d["host"]), int(d["pid"]), d.get("slurm_job"), d.get("slurm_task"), str(d.get("token", "")))
        except (ValueError, KeyError, TypeError):
            return None

    def is_gone(self, me: Owner) -> bool:
        """Gone for certain, without waiting for the heartbeat to age: a dead pid on this host, or the same SLURM
        array task as ``me`` (an earlier, requeued or preempted run of it)."""
        if self.token == me.token:
            return False
        if self.slurm_job and self.slurm_job == me.slurm_job and self.slurm_task == me.slurm_task:
            return True
        if self.host == me.host:
            return not process_alive(self.pid)
        return False


class WorkDir:
    """The shared folder of one panel's extraction."""

    def __init__(self, panel: str | os.PathLike):
        self.panel = Path(panel)
        self.root = work_dir(panel)
        self.claims = self.root / "claims"
        self.parts = self.root / "parts"
        self.workers = self.root / "workers"

    def ensure(self) -> WorkDir:
        for folder in (self.root, self.claims, self.parts, self.workers):
            if folder.is_symlink():
                raise MemtuiError(f"{folder} is a symbolic link; remove it and rerun.")
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise MemtuiError(f"cannot create {folder}: {exc.strerror or exc}.") from None
        return self

    # --- claims ---------------------------------------------------------------------------------------------------

    def claim_path(self, unit: Unit) -> Path:
        return self.claims / f"{unit.name}.claim"

    def try_claim(self, unit: Unit, me: Owner) -> bool:
        """Take ``unit`` if nobody holds it, or if its holder is gone; True if it is now ours."""
        path = self.claim_path(unit)
        if self._create_exclusive(path, me):
            return True
        holder = self.holder(unit)
        if holder is not None and holder.token == me.token:
            return True
        if not self._is_stale(path, holder, me):
            return False
        tomb = path.with_name(f"{path.name}.gone.{me.token}")
        try:
            os.rename(path, tomb)  # only one taker wins: the others find the claim gone
        except FileNotFoundError:
            return False
        with contextlib.suppress(OSError):
            tomb.unlink()
        return self._create_exclusive(path, me)

    def _create_exclusive(self, path: Path, me: Owner) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                return False
            raise MemtuiError(f"cannot claim work in {path.parent}: {exc.strerror or exc}.") from None
        try:
            os.write(fd, me.to_json().encode())
        finally:
            os.close(fd)
        return True

    def holder(self, unit: Unit) -> Owner | None:
        try:
            return Owner.from_json(self.claim_path(unit).read_text()[:4096])
        except (OSError, UnicodeDecodeError):
            return None

    def _is_stale(self, path: Path, holder: Owner | None, me: Owner) -> bool:
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return True
        if holder is None:  # unreadable: a claim being written right now looks like this for a moment
            return age > stale_s()
        return holder.is_gone(me) or age > stale_s()

    def touch_claim(self, unit: Unit, me: Owner) -> bool:
        """The heartbeat; False if the claim is no longer ours (taken over as stale)."""
        holder = self.holder(unit)
        if holder is None or holder.token != me.token:
            return False
        with contextlib.suppress(OSError):
            os.utime(self.claim_path(unit))
        return True

    def release(self, unit: Unit, me: Owner) -> None:
        holder = self.holder(unit)
        if holder is not None and holder.token == me.token:
            with contextlib.suppress(OSError):
                self.claim_path(unit).unlink()

    def claimed_by_live(self, unit: Unit, me: Owner) -> bool:
        path = self.claim_path(unit)
        if not path.exists():
            return False
        return not self._is_stale(path, self.holder(unit), me)

    # --- parts ----------------------------------------------------------------------------------------------------

    def part_path(self, unit: Unit) -> Path:
        return self.parts / f"{unit.name}.npz"

    def has_part(self, unit: Unit) -> bool:
        return self.part_path(unit).exists()

    def write_part(self, unit: Unit, columns: dict[str, np.ndarray], meta: dict) -> None:
        """The unit's columns, exactly the metrics in ``columns`` (each one of ``METRICS``); their names are also
        listed in the part's meta, so what a part carries is explicit."""
        unknown = sorted(set(columns) - set(METRICS))
        if unknown:
            raise ValueError(f"metrics {unknown} are not extraction metrics")
        names = panel_metrics(columns)
        meta = {**meta, "metrics": list(names)}

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, meta=np.array(json.dumps(meta)), **{m: np.asarray(columns[m], np.float64) for m in names})
                f.flush()
                os.fsync(f.fileno())

        atomic_write(self.part_path(unit), write)

    def read_part(self, unit: Unit, metrics) -> tuple[dict[str, np.ndarray], dict]:
        """The part's columns of ``metrics`` (it may carry more, which are left out); a part lacking one of them
        (written for a panel without that metric) is refused, so the committer drops it and the unit is scored again."""
        with np.load(self.part_path(unit), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            missing = [m for m in metrics if m not in z.files]
            if missing:
                raise MemtuiError(f"{self.part_path(unit)} carries no '{missing[0]}' column; remove the part.")
            cols = {m: z[m] for m in metrics}
        for m, col in cols.items():
            if col.shape != (unit.hi - unit.lo,):
                raise MemtuiError(f"{self.part_path(unit)}: column '{m}' has shape {col.shape}; remove the part.")
        return cols, meta

    def drop(self, unit: Unit) -> None:
        for path in (self.part_path(unit), self.claim_path(unit)):
            with contextlib.suppress(OSError):
                path.unlink()

    def part_files(self) -> list[Path]:
        try:
            return sorted(self.parts.glob("step*.npz"))
        except OSError:
            return []

    # --- workers --------------------------------------------------------------------------------------------------

    def worker_record(self, owner: Owner) -> Path:
        return self.workers / f"{owner.id}.json"

    def worker_lock(self, owner: Owner) -> Path:
        return self.workers / f"{owner.id}.lock"


def parse_unit_name(name: str, panel_steps: np.ndarray) -> Unit | None:
    """The unit a part or claim file is named after (None for anything else in the folder)."""
    stem = name.split(".npz")[0].split(".claim")[0]
    try:
        step_part, rows_part, of_part = stem.split(".")
        step = int(step_part.removeprefix("step"))
        lo, hi = (int(x) for x in rows_part.removeprefix("rows").split("-"))
        split = int(of_part.removeprefix("of"))
    except ValueError:
        return None
    where = np.flatnonzero(panel_steps == step)
    if not len(where):
        return None
    return Unit(step, int(where[0]), lo, hi, split)


MIN_FREE_BYTES = 256 << 10  # the panel is preallocated; this is for progress records, parts' headroom, log, locks


def check_free_space(panel_path: Path, n_instances: int = 0, workers: int = 1) -> None:
    """Refuse to start with too little space beside the panel for the parts the workers write (4 float64 columns a
    unit; the panel itself never grows) and their records and log: a worker that cannot write them stops."""
    try:
        free = shutil.disk_usage(panel_path.parent).free
    except OSError:
        return
    needed = MIN_FREE_BYTES + 2 * workers * n_instances * 4 * 8
    if free < needed:
        raise MemtuiError(
            f"only {free:,} bytes are free on the filesystem of {panel_path}; extraction needs about "
            f"{needed >> 10:,} KiB there for its part files, progress records and log (the panel itself never "
            "grows): free some space and rerun."
        )


def cancel_flag(panel_path: str | os.PathLike) -> Path:
    """While this file exists, every worker of the panel, on any host, stops at its next batch."""
    return work_dir(panel_path) / "cancel"
