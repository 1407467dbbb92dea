"""Background extraction jobs: start workers (detached on this machine, or a SLURM array), read their progress,
cancel them.

This is the contract the workbench app uses: :func:`launch`, :func:`read_progress`, :func:`cancel`. Whether a worker
runs is decided by its lock on this host, verified with the kernel (:func:`locking.holder_of`), and by its heartbeat
on other hosts — never by a pid read from a file: a pid may be reused, and a record may be forged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.extract import progress as records
from memtui.extract.launches import launch_record, read_launch, write_launch
from memtui.extract.locking import FileLock, holder_of, open_beside, process_alive
from memtui.extract.options import ExtractOptions
from memtui.extract.progress import log_path
from memtui.extract.units import WorkDir, age_s, cancel_flag, check_free_space, stale_s, work_dir

__all__ = ["launch", "read_progress", "cancel", "log_path", "check_free_space", "cancel_flag", "live_workers", "check",
           "submit_slurm", "launch_record", "work_dir"]  # fmt: skip

STARTUP_GRACE_S = 120  # a launched worker imports its libraries before it takes its lock


def _starting_worker(pid: int, panel_path: Path) -> bool:
    """A live process that is (or is about to be) a worker of *this* panel: where /proc shows command lines, it must
    name the worker module and the panel; where none can be read (some sandboxes), a live pid is enough. Used for
    status and for waiting on a just-launched worker, never as the reason to signal one (that needs its lock)."""
    if not isinstance(pid, int) or pid <= 0 or not process_alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True
    return (b"memtui.extract.worker" in args and os.fsencode(str(panel_path)) in args) or not any(args)


def _resolve_model(model: str) -> str:
    """A local checkpoint folder as an absolute path: detached workers run in the panel's folder."""
    local = Path(model).expanduser()
    return str(local.resolve()) if local.exists() else model


def check(panel_path: str | os.PathLike, options: ExtractOptions, *, local: bool = True) -> tuple[Path, ExtractOptions]:
    """Every check a launch makes before anything starts, and the options as workers will get them. Writes nothing
    (a ``--dry-run`` makes only these checks). Every error knowable now is one line here, never a worker that is
    "started" and then fails in the background: the panel, the space beside it, the model and the checkpoints it
    has, and (``local``: workers on this machine) the device."""
    from memtui.panel.hdf5 import read_panel

    panel_path = Path(panel_path).resolve()
    options = options.validate()
    panel = read_panel(panel_path)  # a clear error now rather than in the log
    if not panel.has_tokens:
        raise MemtuiError(
            f"{panel_path}: the panel stores no token ids, so it cannot be extracted; build it with `memtui build`."
        )
    options.metrics_for(panel_path, panel)  # a wrong --extractable is refused here, not after "started"
    _check_folder(panel_path)
    check_free_space(panel_path, panel.n_instances, options.n_workers)
    from memtui.extract import token_scores  # reads the panel's HDF5: not on the import path of the job API

    token_scores.check_space(panel_path, panel, options.token_scores)  # and a --token-scores that does not fit
    log = log_path(panel_path)
    if log.is_symlink():  # the workers would refuse it too, but only after we had said "started"
        raise MemtuiError(
            f"{log} is a symbolic link; memtui does not follow links for the files it keeps beside a panel: "
            "remove it and rerun."
        )
    _check_source(panel_path, panel, options)
    if local:
        _check_device(options)
    _refuse_if_live(panel_path)
    return panel_path, options.with_model(_resolve_model(options.model))


def _check_folder(panel_path: Path) -> None:
    """The panel's folder and ``PANEL.work`` must be writable folders of their own: say which is wrong, and how."""
    work = WorkDir(panel_path).root
    if work.is_symlink():
        raise MemtuiError(
            f"{work} is a symbolic link; memtui does not follow links for the files it keeps beside a panel: "
            "remove it and rerun."
        )
    if work.exists() and not work.is_dir():
        raise MemtuiError(f"{work} is not a folder; remove it and rerun.")
    for where in (panel_path.parent, *([work] if work.exists() else [])):
        try:
            read_only = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        if read_only:
            raise MemtuiError(
                f"{where} is on a read-only filesystem; extraction writes into the panel and beside it: remount it "
                "read-write or copy the panel somewhere writable."
            )
        if not os.access(where, os.W_OK | os.X_OK):
            raise MemtuiError(f"{where} is not writable by this user; extraction writes into the panel and beside it.")
    if not os.access(panel_path, os.W_OK):
        raise MemtuiError(f"{panel_path} is not writable here; extraction writes into the panel and beside it.")


def _check_source(panel_path: Path, panel, options: ExtractOptions) -> None:
    """The model exists (a local folder of stepN/ folders, or a name that can be a hub repo), and every requested
    checkpoint is one of the panel's and, for a local model, has its folder."""
    from memtui.extract.checkpoints import Source, parse_checkpoints, plan_steps

    source = Source.open(options.model, options.revision_template)
    plan_steps(panel.steps, panel.done, parse_checkpoints(options.checkpoints), source)


def _check_device(options: ExtractOptions) -> None:
    """The device exists on this machine (:meth:`ExtractOptions.check_local_device`)."""
    options.check_local_device()


def _refuse_if_live(panel_path: Path) -> None:
    live = live_workers(panel_path)
    if live:
        queued = sum(1 for w in live if w.get("state") == "queued")
        more = f", {queued} of them queued in SLURM" if queued else ""
        raise MemtuiError(
            f"{panel_path} is being extracted by {len(live)} worker(s){more}; follow with `memtui status "
            f"{panel_path}` or stop them with `memtui extract {panel_path} --cancel`."
        )


@contextlib.contextmanager
def launch_lock(panel_path: Path):
    """Held while a launch checks that nothing runs and starts its workers (and by a ``--foreground`` run for its
    whole life): two launches at once would both see no worker and both start theirs. Non-blocking: the second
    launch is refused with one line."""
    work = WorkDir(panel_path).ensure()
    busy = (
        f"another `memtui extract` is starting or running workers on {panel_path} right now; follow with "
        f"`memtui status {panel_path}` or stop it with `memtui extract {panel_path} --cancel`."
    )
    with FileLock(work.root / "launch.lock", busy=busy):
        yield work


def begin_run(panel_path: Path) -> None:
    """A new local run: an earlier --cancel is over, and the last run's worker records go (none is live: checked
    under the launch lock). SLURM submissions do this only once the array is accepted (:func:`slurm.submit`)."""
    work = WorkDir(panel_path).ensure()
    with contextlib.suppress(FileNotFoundError):
        cancel_flag(panel_path).unlink()
    for old in [*work.workers.glob("*.json"), *work.workers.glob("*.lock")]:
        with contextlib.suppress(OSError):
            old.unlink()


def prepare(panel_path: str | os.PathLike, options: ExtractOptions) -> tuple[Path, ExtractOptions]:
    """:func:`check`, then make the work folder and, for a local run, :func:`begin_run` (the app's route; the CLI
    takes :func:`launch_lock` around these itself)."""
    panel_path, options = check(panel_path, options, local=options.slurm is None)
    WorkDir(panel_path).ensure()
    if options.slurm is None:
        begin_run(panel_path)
    return panel_path, _token_group(panel_path, options)


def _token_group(panel_path: Path, options: ExtractOptions) -> ExtractOptions:
    """Record the --token-scores subset in the panel before any worker starts; the workers read it from there."""
    from memtui.extract.token_scores import ensure_group

    ensure_group(panel_path, options.token_scores)
    return dataclasses.replace(options, token_scores=None)


def submit_slurm(panel_path: str | os.PathLike, options: ExtractOptions) -> tuple[Path, str]:
    """Check, then submit the SLURM array under the launch lock; (panel path, job id)."""
    from memtui.extract import slurm
    from memtui.panel.hdf5 import read_panel

    panel_path, options = check(panel_path, options, local=False)
    with launch_lock(panel_path):
        _refuse_if_live(panel_path)  # again, under the lock: the first look may be a launch old
        options = _token_group(panel_path, options)
        return panel_path, slurm.submit(panel_path, options, read_panel(panel_path).steps)


def _device_label(gpu: str | None, options: ExtractOptions) -> str:
    """The device a launched worker uses, for the log's header (the worker's first line confirms it)."""
    from memtui.extract.options import cuda_devices_without_torch

    if gpu is not None:
        return f"cuda (GPU {gpu})"
    if options.device != "auto":
        return options.device
    count = cuda_devices_without_torch()
    if count is None:
        return "auto (CUDA if torch sees a GPU, else cpu)"
    return "cuda (auto)" if count else "cpu (auto: no GPU here)"


def launch(panel_path: str | os.PathLike, options: ExtractOptions | None = None, **fields) -> list[int]:
    """Start detached workers on this machine (own sessions, survive the terminal); their pids.

    One worker per entry of ``options.gpus`` (each sees only its GPU through CUDA_VISIBLE_DEVICES), else
    ``options.workers`` workers on ``options.device``. ``fields`` build the options when none are given.
    """
    options = options or ExtractOptions(**fields)
    panel_path, options = check(panel_path, options)
    with launch_lock(panel_path):
        _refuse_if_live(panel_path)  # again, under the lock: the first look may be a launch old
        begin_run(panel_path)
        return _spawn(panel_path, _token_group(panel_path, options))


def _spawn(panel_path: Path, options: ExtractOptions) -> list[int]:
    slots = [(str(g), "cuda") for g in options.gpus] if options.gpus is not None else [(None, None)] * options.workers
    log = log_path(panel_path)
    fd = open_beside(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    pids = []
    try:
        for i, (gpu, device) in enumerate(slots, 1):
            cmd = [sys.executable, "-m", "memtui.extract.worker", str(panel_path), *options.worker_argv(device=device)]
            env = dict(os.environ, PYTHONUNBUFFERED="1", **options.extra_env)
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            header = f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} worker {i} of {len(slots)}, device "
            os.write(fd, f"{header}{_device_label(gpu, options)}: {' '.join(cmd)}\n".encode())
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=env,
                cwd=str(panel_path.parent),
            )
            pids.append(proc.pid)
    except OSError as exc:
        raise MemtuiError(f"cannot start an extraction worker: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
        # written even when a later worker failed to start: the ones that did run must be known to status and cancel
        if pids:
            record = {"mode": "local", "host": socket.gethostname(), "pids": pids, "gpus": options.gpus,
                      "model": options.model, "started": time.time()}  # fmt: skip
            write_launch(panel_path, record)
    return pids


def _worker_records(panel_path: Path) -> list[tuple[Path, dict]]:
    folder = WorkDir(panel_path).workers
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    out = []
    for path in paths[:4096]:
        record = records.read(path)
        if record is not None:
            record["id"] = path.stem
            out.append((path, record))
    return out


def _is_alive(panel_path: Path, path: Path, record: dict) -> bool:
    """Whether the worker behind ``record`` still runs. On this host: the kernel confirms it holds its lock, or (for
    status only, never for signalling) its pid is alive and its command line is this panel's worker module."""
    if record["host"] in (None, socket.gethostname()):
        holder = holder_of(path.with_suffix(".lock"))
        if holder is not None and (record["pid"] is None or holder == record["pid"]):
            return True
        return isinstance(record["pid"], int) and _starting_worker(record["pid"], panel_path)
    return age_s(record.get("updated")) < stale_s()  # another host: its heartbeat decides (none from the future)


def live_workers(panel_path: str | os.PathLike) -> list[dict]:
    """The records of the workers that run now (verified: lock on this host, heartbeat elsewhere), and the tasks of
    this panel's SLURM array that are queued or starting (squeue, verified as the panel's own array)."""
    panel_path = Path(panel_path).resolve()
    found = _worker_records(panel_path)
    launched = read_launch(panel_path)
    live = [r for p, r in found if r["state"] == "running" and _is_alive(panel_path, p, r)]
    return live + _not_yet_reporting(panel_path, found, launched) + _queued_tasks(panel_path, found, launched)


def _queued_tasks(panel_path: Path, found: list[tuple[Path, dict]], launched: dict) -> list[dict]:
    """Tasks SLURM holds of this panel's array that have no worker record yet: pending ones as ``queued``, started
    ones as ``running`` (a task imports its libraries before its first record)."""
    if launched.get("mode") != "slurm":
        return []
    from memtui.extract.slurm import our_tasks

    tasks, _ = our_tasks(panel_path, launched)
    reported = {(r.get("slurm_job"), r.get("slurm_task")) for _, r in found}
    return [
        records.parse(
            {"state": "queued" if t.queued else "running", "slurm_job": t.job, "slurm_task": t.task, "host": None}
        )  # fmt: skip
        for t in tasks
        if (t.job, t.task) not in reported
    ]


def _not_yet_reporting(panel_path: Path, found: list[tuple[Path, dict]], launched: dict) -> list[dict]:
    """Workers launched here moments ago that have no record in ``found`` yet, as running records: for status, a live
    pid of ours is enough (where /proc shows command lines they must name this panel's worker; signalling asks for
    the lock). ``found`` must be the very listing the caller judges the others by: a second listing taken a moment
    later may already hold a starting worker's first record, and the worker would then be in neither."""
    if launched.get("mode") != "local" or age_s(_number(launched.get("started"))) >= STARTUP_GRACE_S:
        return []
    known = {r["pid"] for _, r in found}
    return [
        records.parse({"state": "running", "pid": pid, "host": socket.gethostname()})
        for pid in launched.get("pids") or []
        if isinstance(pid, int) and pid not in known and _starting_worker(pid, panel_path)
    ]


def _number(value) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def read_progress(panel_path: str | os.PathLike) -> dict | None:
    """Every worker's latest progress, checked (each field has its documented type), and their sum; None if no
    extraction ever ran on this panel.

    ``state`` is running (some worker runs), done, failed, cancelled, stale (the workers are gone without saying
    they finished: killed, machine rebooted, disk full; then ``last_error`` holds the log's last error line) or
    unreadable (a record file is not a progress record); rerun `memtui extract` to resume a stale or cancelled run.
    ``workers`` lists each worker's own record (with its own state).
    """
    panel_path = Path(panel_path).resolve()
    found = _worker_records(panel_path)
    launched = read_launch(panel_path)
    if not found and not launched:
        return None
    workers = []
    for path, record in found:
        if record["state"] == "running" and not _is_alive(panel_path, path, record):
            record["state"] = "stale"
            record["last_error"] = record["last_error"] or _last_log_error(panel_path)
        workers.append(record)
    workers += _not_yet_reporting(panel_path, found, launched)  # judged against the same listing as the others
    workers += _queued_tasks(panel_path, found, launched)
    if not workers:  # launched, but no worker ever reported and none runs: they died at start (see the log)
        workers.append(records.parse({"state": "stale", "last_error": _last_log_error(panel_path),
                                      "host": socket.gethostname()}))  # fmt: skip
    return _aggregate(panel_path, workers, launched)


def _aggregate(panel_path: Path, workers: list[dict], launched: dict) -> dict:
    from memtui.panel.hdf5 import read_done

    running = [w for w in workers if w["state"] == "running"]
    states = {w["state"] for w in workers}
    # a worker says "done" only once every unit is finished (it waits for, and takes over, the units of workers that
    # die), so one done worker means the run is done, whatever became of the others
    order = ("running", "queued", "done", "failed", "unreadable", "stale", "cancelled")
    state = next((s for s in order if s in states), "done")
    latest = max(running or workers, key=lambda w: w.get("updated") or 0, default={}) if workers else {}
    rate = sum(w.get("tokens_per_s") or 0 for w in running) or None
    eta = None
    if running and latest.get("eta_s") is not None and latest.get("tokens_per_s") and rate:
        eta = latest["eta_s"] * latest["tokens_per_s"] / rate  # its own ETA counts every pending unit, at its rate
    try:
        steps, done = read_done(panel_path)
        checkpoints_done, checkpoints_total = int(done.sum()), len(steps)
    except MemtuiError:
        checkpoints_done = checkpoints_total = None
    warnings = list(dict.fromkeys(w for r in workers for w in r.get("warnings") or []))
    errors = [w["last_error"] for w in workers if w.get("last_error") and w["state"] != "running"]
    record = records.parse(dict(latest, state=state))
    # the run's totals, never one worker's own count (which would jump between workers and go backwards): units
    # finished by every worker together, out of the most any worker had to do
    total_units = max((w.get("K") or 0 for w in workers), default=0)
    finished = sum(max(0, (w.get("k") or 0) - (1 if w.get("unit") else 0)) for w in workers)
    in_hand = 1 if any(w.get("unit") for w in running) else 0
    record.update(
        K=total_units or None,
        k=min(total_units, finished + in_hand) if total_units else None,
        units_done=min(total_units, finished) if total_units else None,
        uncommitted=_uncommitted_note(panel_path, state),
        n_queued=sum(1 for w in workers if w["state"] == "queued"),
    )
    record.update(
        state=state,
        pid=(running[0]["pid"] if running else latest.get("pid")),
        model=latest.get("model") or launched.get("model"),
        tokens_per_s=rate if running else None,
        eta_s=eta,
        last_error=errors[0] if errors and state != "running" else None,
        warnings=warnings,
        checkpoints_done=checkpoints_done,
        checkpoints_total=checkpoints_total,
        log=str(log_path(panel_path)),
        workers=workers,
        n_running=len(running),
        slurm_job=launched.get("slurm_job") if isinstance(launched.get("slurm_job"), str) else None,
    )
    return record


def _uncommitted_note(panel_path: Path, state: str) -> str | None:
    """Once no worker runs, parts still waiting in ``PANEL.work/parts`` are scored work that is not in the panel:
    say so, and who holds the commit lease, rather than let "done" stand alone."""
    if state in ("running", "queued"):
        return None
    work = WorkDir(panel_path)
    parts = work.part_files()
    if not parts:
        return None
    from memtui.extract.commit import describe_lease
    from memtui.extract.units import Owner

    lease = describe_lease(work, Owner.me())
    return (
        f"{len(parts)} scored part(s) are not committed yet"
        + (f" ({lease})" if lease else "")
        + ("; rerun `memtui extract` to commit them")
    )


def _last_log_error(panel_path: Path) -> str | None:
    """Why a worker died without a word, as far as its log says (its last error-like line)."""
    from memtui.core.text import clean

    path = log_path(panel_path)
    if path.is_symlink():
        return None
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 16384))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if any(word in line for word in ("Error", "error", "memtui:", "Killed", "No space")):
            return clean(line.strip(), 200)
    return None


def cancel(panel_path: str | os.PathLike, wait_s: float = 10.0, notes: list[str] | None = None) -> bool:
    """Stop every worker of the panel: raise the cancel flag (workers on any host stop at their next batch), SIGTERM
    the workers of this host that the kernel confirms hold their lock, and scancel the panel's SLURM array (queued
    tasks included) once squeue and the array's own submitit record show it is this panel's. True if any worker
    was running or queued. ``notes`` receives what the user should know (an array that was not cancelled, and why).

    Nothing is signalled or cancelled on a file's word: a pid needs the kernel's lock table, a job id its ownership
    (job name, comment, working folder, submission record); a just-launched worker gets ``wait_s`` seconds to take
    its lock, and only then is signalled.
    """
    panel_path = Path(panel_path).resolve()
    notes = [] if notes is None else notes
    here = socket.gethostname()
    live = live_workers(panel_path)
    remote = [w for w in live if w.get("host") not in (None, here) and w.get("state") == "running"]
    launched = read_launch(panel_path)
    tasks, problem = [], None
    if launched.get("mode") == "slurm":
        from memtui.extract.slurm import our_tasks

        tasks, problem = our_tasks(panel_path, launched)
        if problem:
            notes.append(f"SLURM job {launched.get('slurm_job')} from launch.json was not cancelled: {problem}")
    ours = [p for p in launched.get("pids") or [] if isinstance(p, int) and process_alive(p)]
    if not (remote or tasks or ours or _local_holders(panel_path)):
        return False
    work = WorkDir(panel_path)
    if work.root.is_dir() and not work.root.is_symlink():
        with contextlib.suppress(OSError):
            cancel_flag(panel_path).write_text(f"cancelled at {time.time()}\n")
    signalled = _signal_local_workers(panel_path, wait_s)
    cancelled = False
    if tasks:
        from memtui.extract.slurm import cancel_array

        cancelled, why = cancel_array(panel_path, launched)
        if why:
            notes.append(f"SLURM job {launched.get('slurm_job')} was not cancelled: {why}")
    return signalled or cancelled or bool(remote)


def _local_holders(panel_path: Path) -> set[int]:
    """Processes of this host that the kernel confirms hold a worker lock of the panel (never this process)."""
    holders = set()
    with contextlib.suppress(OSError):
        for lock in WorkDir(panel_path).workers.glob("*.lock"):
            pid = holder_of(lock)
            if pid is not None and pid != os.getpid():
                holders.add(pid)
    return holders


def _signal_local_workers(panel_path: Path, wait_s: float) -> bool:
    """SIGTERM, once each, the processes holding a worker lock of the panel; a worker launched moments ago gets
    ``wait_s`` seconds to take its lock and be signalled too."""
    deadline = time.monotonic() + wait_s
    launched = [p for p in read_launch(panel_path).get("pids") or [] if isinstance(p, int)]
    signalled: set[int] = set()
    while True:
        for pid in _local_holders(panel_path) - signalled:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
                signalled.add(pid)
        launched = [p for p in launched if p not in signalled and _starting_worker(p, panel_path)]
        if not launched or time.monotonic() > deadline:
            return bool(signalled)
        time.sleep(0.2)
