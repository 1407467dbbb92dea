"""Background extraction jobs: start workers (detached on this machine, or a SLURM array), read their progress,
cancel them.

This is the contract the workbench app uses: :func:`launch`, :func:`read_progress`, :func:`cancel`. Whether a worker
runs is decided by its lock on this host, verified with the kernel (:func:`locking.holder_of`), and by its heartbeat
on other hosts — never by a pid read from a file: a pid may be reused, and a record may be forged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.extract import progress as records
from memtui.extract.launches import read_launch, write_launch
from memtui.extract.locking import holder_of, open_beside, process_alive
from memtui.extract.options import ExtractOptions
from memtui.extract.progress import log_path
from memtui.extract.units import WorkDir, cancel_flag, check_free_space, stale_s

__all__ = ["launch", "read_progress", "cancel", "log_path", "check_free_space", "cancel_flag", "live_workers"]

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


def prepare(panel_path: str | os.PathLike, options: ExtractOptions) -> tuple[Path, ExtractOptions]:
    """The checks every launch makes before anything starts, and the options as workers will get them."""
    from memtui.panel.hdf5 import read_panel

    panel_path = Path(panel_path).resolve()
    options = options.validate()
    panel = read_panel(panel_path)  # a clear error now rather than in the log
    if not panel.has_tokens:
        raise MemtuiError(
            f"{panel_path}: the panel stores no token ids, so it cannot be extracted; build it with `memtui build`."
        )
    options.metrics_for(panel_path, panel)  # a wrong --extractable is refused here, not after "started"
    if not os.access(panel_path, os.W_OK) or not os.access(panel_path.parent, os.W_OK):
        raise MemtuiError(f"{panel_path} is not writable here; extraction writes into the panel and beside it.")
    check_free_space(panel_path, panel.n_instances, options.n_workers)
    log = log_path(panel_path)
    if log.is_symlink():  # the workers would refuse it too, but only after we had said "started"
        raise MemtuiError(
            f"{log} is a symbolic link; memtui does not follow links for the files it keeps beside a panel: "
            "remove it and rerun."
        )
    live = live_workers(panel_path)
    if live:
        raise MemtuiError(
            f"{panel_path} is being extracted by {len(live)} worker(s); follow with `memtui status {panel_path}` "
            f"or stop them with `memtui extract {panel_path} --cancel`."
        )
    work = WorkDir(panel_path).ensure()
    with contextlib.suppress(FileNotFoundError):
        cancel_flag(panel_path).unlink()  # a new run: an earlier --cancel is over
    for old in [*work.workers.glob("*.json"), *work.workers.glob("*.lock")]:  # the last run's records: none is live
        with contextlib.suppress(OSError):
            old.unlink()
    return panel_path, options.with_model(_resolve_model(options.model))


def launch(panel_path: str | os.PathLike, options: ExtractOptions | None = None, **fields) -> list[int]:
    """Start detached workers on this machine (own sessions, survive the terminal); their pids.

    One worker per entry of ``options.gpus`` (each sees only its GPU through CUDA_VISIBLE_DEVICES), else
    ``options.workers`` workers on ``options.device``. ``fields`` build the options when none are given.
    """
    options = options or ExtractOptions(**fields)
    panel_path, options = prepare(panel_path, options)
    slots = [(str(g), "cuda") for g in options.gpus] if options.gpus is not None else [(None, None)] * options.workers
    log = log_path(panel_path)
    fd = open_beside(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    pids = []
    try:
        for gpu, device in slots:
            cmd = [sys.executable, "-m", "memtui.extract.worker", str(panel_path), *options.worker_argv(device=device)]
            env = dict(os.environ, PYTHONUNBUFFERED="1", **options.extra_env)
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            os.write(fd, f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} gpu {gpu or '-'}: {' '.join(cmd)}\n".encode())
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
    write_launch(panel_path, {"mode": "local", "host": socket.gethostname(), "pids": pids, "gpus": options.gpus,
                               "model": options.model, "started": time.time()})  # fmt: skip
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
    updated = record.get("updated") or 0
    return time.time() - updated < stale_s()  # another host: its heartbeat decides


def live_workers(panel_path: str | os.PathLike) -> list[dict]:
    """The records of the workers that run now (verified: lock on this host, heartbeat elsewhere)."""
    panel_path = Path(panel_path).resolve()
    found = _worker_records(panel_path)
    live = [r for p, r in found if r["state"] == "running" and _is_alive(panel_path, p, r)]
    return live + _not_yet_reporting(panel_path, found, read_launch(panel_path))


def _not_yet_reporting(panel_path: Path, found: list[tuple[Path, dict]], launched: dict) -> list[dict]:
    """Workers launched here moments ago that have no record in ``found`` yet, as running records: for status, a live
    pid of ours is enough (where /proc shows command lines they must name this panel's worker; signalling asks for
    the lock). ``found`` must be the very listing the caller judges the others by: a second listing taken a moment
    later may already hold a starting worker's first record, and the worker would then be in neither."""
    if launched.get("mode") != "local" or time.time() - _number(launched.get("started")) >= STARTUP_GRACE_S:
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
    state = next((s for s in ("running", "done", "failed", "unreadable", "stale", "cancelled") if s in states), "done")
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


def cancel(panel_path: str | os.PathLike, wait_s: float = 10.0) -> bool:
    """Stop every worker of the panel: raise the cancel flag (workers on any host stop at their next batch), SIGTERM
    the workers of this host that the kernel confirms hold their lock, and cancel the SLURM array. True if any
    worker was running or queued.

    A pid from a record is never signalled on its own word: a just-launched worker gets ``wait_s`` seconds to take
    its lock, and only then is signalled.
    """
    panel_path = Path(panel_path).resolve()
    here = socket.gethostname()
    remote = [w for w in live_workers(panel_path) if w.get("host") not in (None, here)]  # their heartbeat is fresh
    launched = read_launch(panel_path)
    slurm_job = launched.get("slurm_job") if launched.get("mode") == "slurm" else None
    ours = [p for p in launched.get("pids") or [] if isinstance(p, int) and process_alive(p)]
    if not (remote or slurm_job or ours or _local_holders(panel_path)):
        return False
    work = WorkDir(panel_path)
    if work.root.is_dir():
        with contextlib.suppress(OSError):
            cancel_flag(panel_path).write_text(f"cancelled at {time.time()}\n")
    signalled = _signal_local_workers(panel_path, wait_s)
    cancelled = False
    if isinstance(slurm_job, str):
        from memtui.extract.slurm import cancel_array

        cancelled = cancel_array(launched)
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
