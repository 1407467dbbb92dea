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
import hashlib
import io
import json
import math
import os
import shutil
import socket
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import WriteError
from memtui.extract.locking import create_with_content, holder_of, process_alive
from memtui.panel.metrics import EXTRACTED

# Every metric extraction can compute (the registry's extracted ones), in part-file order. A panel holds some of
# them (panels made before extractability have the first four): workers score and commit only those
# (``panel_metrics``).
METRICS = EXTRACTED


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


def clock_skew_s() -> float:
    """How far in the future a timestamp may lie and still be believed: hosts' clocks differ a little (NTP keeps
    them within milliseconds), never by a good part of the stale limit."""
    return min(60.0, stale_s() / 4)


def age_s(stamp, now: float | None = None) -> float:
    """Seconds since ``stamp`` (a heartbeat, a claim's or lease's mtime). A stamp further in the future than the
    clock skew allows, or one that is not a finite number, has no age: ``inf``, i.e. stale. A heartbeat from the
    future is no heartbeat: a forged file or a broken clock must never keep a claim, a lease or a worker alive."""
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        return math.inf
    now = time.time() if now is None else now
    if stamp > now + clock_skew_s():
        return math.inf
    return max(0.0, now - stamp)


def work_dir(panel: str | os.PathLike) -> Path:
    return beside(panel, ".work")


def beside(panel: str | os.PathLike, suffix: str) -> Path:
    """The file or folder memtui keeps beside ``panel``: its name plus ``suffix``, or, where that would pass the
    filesystem's name limit (a legal 251-byte panel name plus ".extract.log"), a shortened name that is still the
    panel's alone (a prefix of it and a hash of the whole name)."""
    panel = Path(panel)
    name = panel.name + suffix
    limit = _name_max(panel.parent)
    if len(os.fsencode(name)) <= limit:
        return panel.with_name(name)
    digest = hashlib.blake2b(os.fsencode(panel.name), digest_size=8).hexdigest()
    keep = limit - len(os.fsencode(suffix)) - len(digest) - 1
    prefix = os.fsencode(panel.name)[: max(0, keep)].decode("utf-8", "ignore")  # never half a character
    return panel.with_name(f"{prefix}~{digest}{suffix}")


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, TypeError):
        return 255


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

    def is_gone(self, me: Owner, work: WorkDir | None = None) -> bool:
        """Gone for certain, without waiting for the heartbeat to age: the same SLURM array task as ``me`` (an
        earlier, requeued or preempted run of it), or, on this very host, a pid that is dead or — given the panel's
        ``work`` folder — that does not hold this owner's worker lock (a live but unrelated process: pids are
        reused, and a file may name any pid). Every claim and lease is taken by a worker that holds its lock."""
        if self.token == me.token:
            return False
        if self.slurm_job and self.slurm_job == me.slurm_job and self.slurm_task == me.slurm_task:
            return True
        if self.host == me.host:
            if not process_alive(self.pid):
                return True
            # the kernel's lock table speaks only for this machine (``me.host`` is it, outside tests)
            here = self.host == socket.gethostname()
            return here and work is not None and holder_of(work.worker_lock(self)) != self.pid
        return False


UNREADABLE_GRACE_S = 2.0  # a claim or lease is written whole before it appears; unreadable this long, it is junk


class PartError(MemtuiError):
    """A part file that cannot be folded: unreadable, of the wrong types or shape, or scored by another model."""


class PartMismatch(PartError):
    """A well-formed part scored by another model or revision than this run's."""


# The meta fields of a part and their types (None allowed where the writer may not know the value).
_PART_META = {"revision": (str, type(None)), "weights_hash": (str,), "model": (str,), "parameters": (int,),
              "config": (str,), "worker": (str,), "average": (str,), "scoring": (str,)}  # fmt: skip


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
            if not folder.is_dir():
                raise MemtuiError(f"{folder} is not a folder; remove it and rerun.")
        self._identity = _remember_root(self.root)
        return self

    def _lstat_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.root, follow_symlinks=False)
        except OSError:
            return None
        return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None

    def check(self) -> None:
        """Refuse to go on if ``PANEL.work`` is no longer the folder this run created or found (replaced by a link
        or another folder, or removed): nothing is ever written through it then."""
        known = getattr(self, "_identity", None)
        if known is not None and self._lstat_identity() != known:
            raise MemtuiError(self._replaced())

    def _replaced(self) -> str:
        if self.root.is_symlink():
            verb = "was replaced by a symbolic link"
        else:
            verb = "was replaced by another file" if self.root.exists() else "was removed"
        return (
            f"{self.root} {verb} while extraction ran; nothing was written through it and every committed "
            "checkpoint is intact: put the folder back (or remove what is there) and rerun to resume."
        )

    def why_unwritable(self, reason: str) -> str:
        """What is truly wrong when writing into ``PANEL.work`` failed with ``reason`` (the OS's words), and what to
        do: a replaced folder, a read-only filesystem, missing permissions or a full disk each say so."""
        if getattr(self, "_identity", None) is not None and self._lstat_identity() != self._identity:
            return self._replaced()
        kept = "every committed checkpoint is intact"
        try:
            vfs = os.statvfs(self.root)
        except OSError:
            return f"{reason}; {kept}: check {self.root} and rerun to resume."
        if vfs.f_flag & os.ST_RDONLY:
            return (
                f"{self.root} is on a read-only filesystem; {kept}: remount it read-write (or copy the panel "
                "somewhere writable) and rerun to resume."
            )
        if not os.access(self.root, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
            return f"{self.root} is not writable by this user ({reason}); {kept}: fix its permissions and rerun."
        if vfs.f_bavail * vfs.f_frsize < MIN_FREE_BYTES or "space" in reason.lower() or "quota" in reason.lower():
            return f"{reason}; {kept}: free space on the filesystem of {self.root} and rerun to resume."
        return f"{reason}; {kept}: rerun to resume."

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
            return create_with_content(path, me.to_json().encode(), me.token)
        except OSError as exc:
            raise MemtuiError(f"cannot claim work in {path.parent}: {exc.strerror or exc}.") from None

    def holder(self, unit: Unit) -> Owner | None:
        try:
            return Owner.from_json(self.claim_path(unit).read_text()[:4096])
        except (OSError, UnicodeDecodeError):
            return None

    def _is_stale(self, path: Path, holder: Owner | None, me: Owner) -> bool:
        try:
            age = age_s(os.stat(path, follow_symlinks=False).st_mtime)
        except FileNotFoundError:
            return True
        if holder is None:  # empty or garbled: nobody's claim (claims appear whole), once past a moment's doubt
            return age > min(stale_s(), UNREADABLE_GRACE_S)
        return holder.is_gone(me, self) or age > stale_s()

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

    def write_part(
        self,
        unit: Unit,
        columns: dict[str, np.ndarray],
        meta: dict,
        tokens: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """The unit's columns, exactly the metrics in ``columns`` (each one of ``METRICS``); their names are also
        listed in the part's meta, so what a part carries is explicit. ``tokens``: the per-token scores of the unit's
        rows of the panel's token-score subset, (their panel rows, float32 rows x W NaN-padded)."""
        unknown = sorted(set(columns) - set(METRICS))
        if unknown:
            raise ValueError(f"metrics {unknown} are not extraction metrics")
        names = panel_metrics(columns)
        meta = {**meta, "metrics": list(names)}
        arrays = {m: np.asarray(columns[m], np.float64) for m in names}
        if tokens is not None:
            arrays["token_rows"] = np.asarray(tokens[0], np.int64)
            arrays["token_logp"] = np.asarray(tokens[1], np.float32)

        buffer = io.BytesIO()
        np.savez(buffer, meta=np.array(json.dumps(meta)), **arrays)
        path = self.part_path(unit)
        try:
            write_in_work(self.root, "parts", path.name, buffer.getvalue(), durable=True)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise WriteError(f"cannot write {path}: {reason}.") from None

    def read_part(self, unit: Unit, metrics, expect: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """The part's columns of ``metrics`` (it may carry more, which are left out) and its meta, checked: a regular
        file (never a FIFO or a link), an npz whose meta is an object of the documented types and whose columns are
        real numbers of the unit's length. ``expect`` (model and revision) must match what the part records. Any
        failure is a one-line :class:`PartError` naming the file."""
        meta, cols = self._load_part(self.part_path(unit), metrics, unit.hi - unit.lo)
        if expect is not None:
            self._check_identity(self.part_path(unit), meta, expect)
        return cols, meta

    @staticmethod
    def _check_identity(path: Path, meta: dict, expect: dict) -> None:
        for key in ("model", "revision"):
            if key in expect and meta.get(key) != expect[key]:
                raise PartMismatch(
                    f"{path.name} was scored with {key} {meta.get(key)!r}, this run's is {expect[key]!r}"
                )

    @staticmethod
    def _load_part(path: Path, metrics, length: int | None) -> tuple[dict, dict[str, np.ndarray]]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise PartError(f"{path}: {exc.strerror or exc}") from None
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PartError(f"{path} is not a regular file")
            try:
                with np.load(f, allow_pickle=False) as z:
                    meta = json.loads(str(z["meta"][()]))
                    missing = [m for m in metrics if m not in z.files]
                    if missing:
                        raise PartError(f"{path} carries no '{missing[0]}' column")
                    cols = {m: z[m] for m in metrics}
            except PartError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever numpy's reader raises on junk: one line, named
                raise PartError(f"{path} is not a readable part ({type(exc).__name__}: {exc})") from None
        if not isinstance(meta, dict):
            raise PartError(f"{path}: its meta is a JSON {type(meta).__name__}, not an object")
        for key, types in _PART_META.items():
            value = meta.get(key)
            if key in meta and (isinstance(value, bool) or not isinstance(value, types)):
                raise PartError(f"{path}: meta field '{key}' is {value!r}, not of type {types[0].__name__}")
        for m, col in cols.items():
            if col.dtype.kind not in "fiu":
                raise PartError(f"{path}: column '{m}' holds {col.dtype} values, not numbers")
            if col.shape != (length,):
                raise PartError(f"{path}: column '{m}' has shape {col.shape}, the unit has {length} rows")
        return meta, {m: col.astype(np.float64) for m, col in cols.items()}

    def read_part_tokens(self, unit: Unit, rows: np.ndarray, width: int) -> np.ndarray:
        """The part's per-token scores of panel ``rows`` (the unit's rows of the token-score subset), checked: float
        values of shape (rows, ``width``) for exactly those rows. A part scored before the panel asked for them is a
        :class:`PartMismatch` (it is scored again); anything malformed a :class:`PartError`."""
        path = self.part_path(unit)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise PartError(f"{path}: {exc.strerror or exc}") from None
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PartError(f"{path} is not a regular file")
            try:
                with np.load(f, allow_pickle=False) as z:
                    if "token_rows" not in z.files or "token_logp" not in z.files:
                        raise PartMismatch(f"{path.name} carries no per-token scores, which the panel asks for")
                    got_rows, values = z["token_rows"], z["token_logp"]
            except PartError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever numpy's reader raises on junk: one line, named
                raise PartError(f"{path} is not a readable part ({type(exc).__name__}: {exc})") from None
        if got_rows.dtype.kind not in "iu" or not np.array_equal(got_rows, rows):
            raise PartMismatch(f"{path.name} carries per-token scores of other instances than the panel's subset")
        if values.dtype.kind != "f" or values.shape != (len(rows), width):
            raise PartError(f"{path}: its per-token scores have shape {values.shape}, expected {(len(rows), width)}")
        return values.astype(np.float32)

    def set_aside(self, unit: Unit) -> Path | None:
        """Move a part that cannot be folded to ``PANEL.work/rejected/`` (kept for a look, out of every run's way);
        its unit is then scored again. Where it cannot be moved, it is deleted. The new place, if any."""
        path = self.part_path(unit)
        target = self.root / "rejected" / f"{path.name}.{int(time.time())}"
        try:
            target.parent.mkdir(exist_ok=True)
            os.rename(path, target)
        except OSError:
            target = None
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            self.claim_path(unit).unlink()
        return target

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


# --- writing inside PANEL.work through the folder itself, never through its name -------------------------------------

# work folder path -> (descriptor, device, inode) of the folder WorkDir.ensure() created or found in this process
_ROOTS: dict[str, tuple[int, int, int]] = {}
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _remember_root(root: Path) -> tuple[int, int] | None:
    """Open ``root`` (never through a link: O_NOFOLLOW) and keep its descriptor for every later write of this process
    into it (:func:`write_in_work`); its (device, inode), or None where it cannot be opened."""
    try:
        fd = os.open(root, _DIR)
    except OSError:
        return None
    st = os.fstat(fd)
    old = _ROOTS.pop(str(root), None)
    if old is not None:
        with contextlib.suppress(OSError):
            os.close(old[0])
    _ROOTS[str(root)] = (fd, st.st_dev, st.st_ino)
    return st.st_dev, st.st_ino


def _root_fd(root: Path) -> int:
    """The descriptor of the work folder as this process first opened it; opened now (without following a link)
    where this process has not."""
    known = _ROOTS.get(str(root))
    if known is None:
        if _remember_root(root) is None:
            raise OSError(errno.ELOOP if root.is_symlink() else errno.ENOENT, f"cannot open {root}")
        known = _ROOTS[str(root)]
    return known[0]


def write_in_work(root: Path, sub: str | None, name: str, data: bytes, *, durable: bool = False) -> None:
    """Write ``root/sub/name`` whole (a temporary name, then rename) relative to the work folder's descriptor
    (``openat``): if ``PANEL.work`` or ``sub`` has been swapped for a symbolic link since the folder was opened,
    nothing is written through the link — the write lands in the folder memtui opened, or (a link at ``sub``)
    fails. ``sub`` is created when missing. OSError on failure (the caller decides whether it matters)."""
    root_fd = _root_fd(Path(root))
    folder = root_fd
    if sub is not None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(sub, 0o755, dir_fd=root_fd)
        folder = os.open(sub, _DIR, dir_fd=root_fd)  # ELOOP on a link: never followed
    tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644,
                     dir_fd=folder)  # fmt: skip
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
    finally:
        if folder != root_fd:
            os.close(folder)


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
