"""Extraction as a SLURM job array, submitted through submitit: each array task is one worker.

Tasks share nothing but the panel's folder (``PANEL.work/``, see :mod:`memtui.extract.units`), so they may run on
any nodes that see it. A task that is preempted or reaches its time limit is requeued by submitit
(:class:`WorkerTask` is ``Checkpointable``) and resumes from what is committed; its own earlier claim is taken over
at once (same array task). Compute nodes often have no internet: a hub model must be in the Hugging Face cache
first (``memtui fetch``), and tasks run with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.extract.checkpoints import Source, parse_checkpoints
from memtui.extract.launches import write_launch
from memtui.extract.options import ExtractOptions, SlurmOptions
from memtui.extract.units import work_dir


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


def parameters(slurm: SlurmOptions, n_tasks: int, name: str) -> dict:
    """submitit's ``slurm_*`` parameters for these options."""
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
    if slurm.gpus_per_task:
        params["slurm_gpus_per_task"] = slurm.gpus_per_task
    if slurm.cpus_per_task:
        params["slurm_cpus_per_task"] = slurm.cpus_per_task
    if slurm.mem:
        params["slurm_mem"] = slurm.mem
    extra = slurm.extra_parameters()
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
    """Submit the array; its job id. ``panel_path`` and ``options`` come from :func:`jobs.prepare`."""
    submitit = _submitit()
    slurm = options.slurm or SlurmOptions()
    offline = check_cached(options, panel_steps)
    folder = work_dir(panel_path) / "slurm"
    executor = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
    executor.update_parameters(**parameters(slurm, options.workers, f"memtui-{panel_path.stem}"))
    argv = options.worker_argv()
    n = options.workers
    try:
        jobs = executor.map_array(_task_class()(), [str(panel_path)] * n, [argv] * n, [offline] * n)
    except Exception as exc:  # noqa: BLE001 - sbatch's refusal (bad partition, account, limits) as one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        raise MemtuiError(f"SLURM refused the job array: {first}") from None
    job_id = str(jobs[0].job_id).split("_")[0]
    write_launch(panel_path, {"mode": "slurm", "slurm_job": job_id, "folder": str(folder), "tasks": n,
                                       "model": options.model, "started": time.time()})  # fmt: skip
    return job_id


def dry_run_script(panel_path: Path, options: ExtractOptions) -> str:
    """The sbatch script of the same array, for users who submit themselves: each task runs the worker module."""
    submitit = _submitit()
    from submitit.slurm.slurm import _make_sbatch_string

    slurm = options.slurm or SlurmOptions()
    params = {k.removeprefix("slurm_"): v for k, v in parameters(slurm, options.workers, "memtui").items()}
    params["job_name"] = f"memtui-{panel_path.stem}"
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


def cancel_array(launched: dict) -> bool:
    """scancel the array (through submitit's job object); True if the command ran."""
    submitit = _submitit()
    job_id, folder = launched.get("slurm_job"), launched.get("folder")
    if not isinstance(job_id, str) or not isinstance(folder, str):
        return False
    try:
        submitit.SlurmJob(folder=Path(folder) / "%j", job_id=job_id).cancel(check=False)
    except (OSError, ValueError):
        return False
    return True
