"""Extraction as a SLURM job array, submitted through submitit: each array task is one worker.

Tasks share nothing but the panel's folder (``PANEL.work/``, see :mod:`memtui.extract.units`), so they may run on
any nodes that see it. A task that is preempted or reaches its time limit is requeued by submitit
(:class:`WorkerTask` is ``Checkpointable``) and resumes from what is committed; its own earlier claim is taken over
at once (same array task). Compute nodes often have no internet: a hub model must be in the Hugging Face cache
first (``memtui fetch``), and tasks run with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.extract.checkpoints import Source, parse_checkpoints
from memtui.extract.launches import read_launch, write_launch
from memtui.extract.options import ExtractOptions, SlurmOptions
from memtui.extract.units import WorkDir, cancel_flag, work_dir


def _submitit():
    try:
        import submitit
    except ImportError:
        raise MemtuiError("--slurm needs the submitit package: pip install submitit.") from None
    return submitit


def _task_class():
    submitit = _submitit()

    class WorkerTask(submitit.helpers.Checkpointable):
        """One array task: a worker on the panel. On preemption or time-out submitit requeues the same call."""

        def __call__(self, panel: str, argv: list[str], offline: bool) -> int:
            if offline:
                os.environ["HF_HUB_OFFLINE"] = "1"
            from memtui.extract.locking import open_beside
            from memtui.extract.progress import log_path
            from memtui.extract.worker import main

            # the worker's log goes where `memtui status` points, beside the panel (submitit keeps stderr)
            sys.stdout.flush()
            fd = open_beside(log_path(panel), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.dup2(fd, sys.stdout.fileno())
            os.close(fd)

            code = main([panel, *argv], handle_signals=False)  # submitit's handlers requeue on time-out
            if code == 2:  # an error (cancelled is 1, and is how --cancel ends a task)
                raise RuntimeError(f"memtui worker failed; see {panel}.extract.log")
            return code

    return WorkerTask


def job_name(panel_path: Path) -> str:
    return f"memtui-{panel_path.stem}"


def job_comment(token: str) -> str:
    """The array's ``--comment``: the launch's own token, which ``--cancel`` checks before it scancels anything."""
    return f"memtui:{token}"


def parameters(slurm: SlurmOptions, n_tasks: int, name: str, device: str = "auto", workdir: str | None = None,
               token: str | None = None) -> dict:  # fmt: skip
    """submitit's ``slurm_*`` parameters for these options. ``--device cpu`` asks for no GPU (a CPU cluster refuses
    any gres request)."""
    params = {
        "slurm_job_name": name,
        "slurm_time": slurm.minutes(),
        "slurm_array_parallelism": n_tasks,
        "slurm_signal_delay_s": 120,  # SIGUSR2 two minutes before the limit: submitit requeues the task
    }
    if slurm.partition:
        params["slurm_partition"] = slurm.partition
    if slurm.account:
        params["slurm_account"] = slurm.account
    gpus = slurm.gpus_for(device)
    if gpus:
        params["slurm_gpus_per_task"] = gpus
    if slurm.cpus_per_task:
        params["slurm_cpus_per_task"] = slurm.cpus_per_task
    if slurm.mem:
        params["slurm_mem"] = slurm.mem
    if token:
        params["slurm_comment"] = job_comment(token)
    extra = slurm.extra_parameters()
    if workdir:
        extra = {"chdir": workdir, **extra}
    if extra:
        params["slurm_additional_parameters"] = extra
    return params


def check_cached(options: ExtractOptions, panel_steps) -> bool:
    """For a hub model, refuse unless every wanted revision is in the local Hugging Face cache (compute nodes are
    often offline and many nodes downloading at once get rate-limited). True when the tasks should run offline."""
    source = Source.open(options.model, options.revision_template)
    if source.local is not None:
        return False
    from memtui.extract.fetch import cache_location, checkpoint_spec, missing_revisions

    wanted = parse_checkpoints(options.checkpoints) or [int(s) for s in panel_steps]
    missing = missing_revisions(options.model, wanted, options.revision_template)
    if missing:
        raise MemtuiError(
            f"{len(missing)} of {len(wanted)} revisions of {options.model} are not in the Hugging Face cache "
            f"(HF_HUB_CACHE={cache_location()}); compute nodes may have no internet: run `memtui fetch --model "
            f"{options.model} --checkpoints {checkpoint_spec(missing)}` on a node with internet first."
        )
    return True


def submit(panel_path: Path, options: ExtractOptions, panel_steps) -> str:
    """Submit the array; its job id. ``panel_path`` and ``options`` come from :func:`jobs.check` (or ``prepare``).

    A refusal is one line (sbatch's own last line, which submitit would otherwise print as well) and leaves nothing
    behind: no ``.submission_file_*.sh``, no pickles, the previous run's worker records and cancel flag as they
    were. Only once the array is accepted are the previous run's records removed."""
    submitit = _submitit()
    slurm = options.slurm or SlurmOptions()
    offline = check_cached(options, panel_steps)
    work = WorkDir(panel_path).ensure()
    folder = work.root / "slurm"
    token = uuid.uuid4().hex
    params = parameters(slurm, options.workers, job_name(panel_path), options.device, str(panel_path.parent), token)
    try:
        executor = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
        executor.update_parameters(**params)
    except Exception as exc:  # noqa: BLE001 - no SLURM here (no srun), or parameters submitit refuses
        raise MemtuiError(f"cannot submit to SLURM here: {(str(exc).strip().splitlines() or ['?'])[-1]}") from None
    argv = options.worker_argv()
    n = options.workers
    before = _listing(folder)
    flag = cancel_flag(panel_path)
    flag_text = _read_small(flag)
    with contextlib.suppress(FileNotFoundError):
        flag.unlink()  # the new tasks must not stop at once; put back if the array is refused
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stderr(quiet), contextlib.redirect_stdout(quiet):
            jobs = executor.map_array(_task_class()(), [str(panel_path)] * n, [argv] * n, [offline] * n)
    except Exception as exc:  # noqa: BLE001 - sbatch's refusal (bad partition, account, limits) as one line
        _remove_new(folder, before)
        if flag_text is not None:
            with contextlib.suppress(OSError):
                flag.write_text(flag_text)
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        first = lines[-1] if lines else type(exc).__name__
        first = re.sub(r"^sbatch: error:\s*", "", first)
        raise MemtuiError(f"SLURM refused the job array: {first}") from None
    job_id = str(jobs[0].job_id).split("_")[0]
    _remove_new(folder, before, only=".submission_file_")  # submitit leaves a link to the script it moved
    _forget_other_runs(work, job_id)
    write_launch(panel_path, {"mode": "slurm", "slurm_job": job_id, "folder": str(folder), "tasks": n,
                              "token": token, "model": options.model, "started": time.time()})  # fmt: skip
    return job_id


def _listing(folder: Path) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def _read_small(path: Path) -> str | None:
    try:
        return path.read_text()[:4096]
    except (OSError, UnicodeDecodeError):
        return None


def _remove_new(folder: Path, before: set[str], only: str = "") -> None:
    """Remove what submitit created in ``folder`` since ``before`` (files whose names start with ``only``)."""
    for name in _listing(folder) - before:
        path = folder / name
        if not name.startswith(only) or (path.is_dir() and not path.is_symlink()):
            continue
        with contextlib.suppress(OSError):
            path.unlink()


def _forget_other_runs(work: WorkDir, job_id: str) -> None:
    """The previous run's worker records and locks (none runs: the launch checked); never the new array's."""
    mark = f"-slurm{job_id}_"
    with contextlib.suppress(OSError):
        for old in [*work.workers.glob("*.json"), *work.workers.glob("*.lock")]:
            if mark not in old.name:
                with contextlib.suppress(OSError):
                    old.unlink()


def dry_run_script(panel_path: Path, options: ExtractOptions) -> str:
    """The sbatch script of the same array, for users who submit themselves: each task runs the worker module.
    Writes nothing."""
    submitit = _submitit()
    from submitit.slurm.slurm import _make_sbatch_string

    slurm = options.slurm or SlurmOptions()
    params = {
        k.removeprefix("slurm_"): v
        for k, v in parameters(slurm, options.workers, "memtui", options.device, str(panel_path.parent)).items()
    }
    params["job_name"] = job_name(panel_path)
    params["additional_parameters"] = {**(params.get("additional_parameters") or {}), "requeue": True}
    params["array_parallelism"] = options.workers
    del params["signal_delay_s"]
    command = " ".join(
        shlex.quote(a) for a in [sys.executable, "-m", "memtui.extract.worker", str(panel_path), *options.worker_argv()]
    )
    folder = work_dir(panel_path) / "slurm"
    text = _make_sbatch_string(command=command, folder=folder, map_count=options.workers, **params)
    offline = Source.open(options.model, options.revision_template).local is None
    if offline:
        text = text.replace("# command\n", "# command\nexport HF_HUB_OFFLINE=1\n", 1)
    del submitit
    return text


# --- the queue: what SLURM still holds of the array, and whether it is this panel's ---------------------------------

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD",
          "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED")  # fmt: skip


@dataclass(frozen=True)
class Task:
    """One array task as squeue shows it."""

    job: str
    task: str
    state: str
    name: str
    comment: str
    workdir: str

    @property
    def queued(self) -> bool:
        return self.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")


def squeue_tasks(job_id: str, timeout: float = 15.0) -> list[Task] | None:
    """The tasks of array ``job_id`` that SLURM still holds, one per task (pending ones included); [] when SLURM
    has none (finished, or an id it no longer knows); None when squeue cannot tell (not installed, no answer)."""
    if not re.fullmatch(r"\d+", job_id or ""):
        return []
    cmd = ["squeue", "--noheader", "--array", "--jobs", job_id, "--format", "%i|%T|%k|%Z|%j"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return [] if "invalid job id" in out.stderr.lower() else None
    tasks = []
    for line in out.stdout.splitlines():
        fields = line.strip().split("|", 4)
        if len(fields) != 5:
            continue
        ident, state, comment, workdir, name = fields
        job, _, task = ident.partition("_")
        if job == job_id and state.split()[0] in ACTIVE:
            tasks.append(Task(job, task or "0", state.split()[0], name, comment, workdir))
    return tasks


def ownership_problem(panel_path: Path, launched: dict, tasks: list[Task]) -> str | None:
    """Why the array that ``launch.json`` names is not this panel's (None when it is): the launch must carry its
    token, the array's own submitit record (``PANEL.work/slurm/JOB/JOB_submission.sh``, a file memtui wrote, not a
    link) must carry the same comment, and every task squeue shows must have this panel's job name, that comment and
    the panel's folder as its working directory. ``launch.json`` is anyone's file: nothing is cancelled on its word."""
    job, token = launched.get("slurm_job"), launched.get("token")
    if not isinstance(job, str) or not re.fullmatch(r"\d+", job):
        return "launch.json names no SLURM job id"
    if not isinstance(token, str) or not re.fullmatch(r"[0-9a-f]{32}", token):
        return f"launch.json does not carry the token memtui gives its arrays, so job {job} cannot be verified"
    record = work_dir(panel_path) / "slurm" / job / f"{job}_submission.sh"
    if record.is_symlink() or not record.is_file():
        return f"job {job} has no submission record of this panel ({record})"
    if f"--comment={job_comment(token)}" not in (_read_small(record) or ""):
        return f"job {job}'s submission record ({record}) is not the launch's"
    for task in tasks:
        if task.name != job_name(panel_path) or task.comment != job_comment(token):
            return f"SLURM job {job} is named {task.name!r} with comment {task.comment!r}: not this panel's array"
        if task.workdir and Path(task.workdir) != panel_path.parent:
            return f"SLURM job {job} runs in {task.workdir}, not in {panel_path.parent}: not this panel's array"
    return None


def our_tasks(panel_path: Path, launched: dict | None = None) -> tuple[list[Task], str | None]:
    """The tasks SLURM holds of this panel's last array, verified (:func:`ownership_problem`), and why none are
    counted when the array is not verifiably ours (or squeue cannot tell)."""
    launched = read_launch(panel_path) if launched is None else launched
    if launched.get("mode") != "slurm":
        return [], None
    tasks = squeue_tasks(str(launched.get("slurm_job") or ""))
    if tasks is None:
        return [], "squeue did not answer"
    if not tasks:
        return [], None
    problem = ownership_problem(panel_path, launched, tasks)
    return ([], problem) if problem else (tasks, None)


def cancel_array(panel_path: Path, launched: dict) -> tuple[bool, str | None]:
    """scancel this panel's array, once verified as ours; (whether scancel ran, why not where it did not)."""
    tasks, problem = our_tasks(panel_path, launched)
    if problem or not tasks:
        return False, problem
    try:
        out = subprocess.run(["scancel", tasks[0].job], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"scancel failed: {exc}"
    if out.returncode != 0:
        return False, f"scancel failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    return True, None
