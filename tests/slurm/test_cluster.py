"""The test cluster runs submitit job arrays, and submitit sees a task that scancel ended (CANCELLED)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import submitit

import memtui

from .conftest import diagnostics, wait_done


def task_identity(i: int) -> tuple[int, str, str, str]:
    """What one array task knows about itself: its input, SLURM's task index, its python, and where memtui is."""
    return i, os.environ["SLURM_ARRAY_TASK_ID"], sys.prefix, memtui.__file__


def wait_or_finish(i: int, folder: str) -> int:
    """Task 0 announces it is running and then waits to be cancelled (at most 60 s); other tasks return at once."""
    if i == 0:
        Path(folder, "task0-running").touch()
        time.sleep(60)
    return i


def test_job_array_runs_both_tasks(slurm_executor, slurm_accounting):
    executor = slurm_executor()
    jobs = executor.map_array(task_identity, [10, 11])
    assert len(jobs) == 2
    wait_done(jobs)
    try:
        results = [job.result() for job in jobs]
    except Exception:
        pytest.fail(diagnostics(jobs), pytrace=False)
    # The job's python is this venv's, and imports the same memtui.
    assert results == [(10, "0", sys.prefix, memtui.__file__), (11, "1", sys.prefix, memtui.__file__)]
    # submitit's job states come from sacct, which hears of job ends a moment after the results appear.
    deadline = time.monotonic() + 20
    while (states := [job.get_info(mode="force").get("State") for job in jobs]) != ["COMPLETED"] * 2:
        if time.monotonic() > deadline:
            pytest.fail(f"sacct states {states}, expected COMPLETED\n{diagnostics(jobs)}", pytrace=False)
        time.sleep(0.5)


def test_scancel_of_running_array_task_is_reported(slurm_executor, slurm_accounting, tmp_path):
    executor = slurm_executor()
    jobs = executor.map_array(wait_or_finish, [0, 1], [str(tmp_path)] * 2)
    running, other = jobs

    deadline = time.monotonic() + 30
    while not (tmp_path / "task0-running").exists():
        if time.monotonic() > deadline:
            pytest.fail(f"array task 0 did not start in 30 s\n{diagnostics(jobs)}", pytrace=False)
        time.sleep(0.2)
    running.cancel(check=True)  # scancel <array job>_0

    wait_done(jobs, timeout=45)
    assert other.result() == 1  # cancelling one task leaves its sibling alone
    assert running.state.upper().startswith("CANCELLED"), running.state
    running._results_timeout_s = 1  # no result file will come; don't wait the default 15 s for it
    with pytest.raises(submitit.core.utils.UncompletedJobError, match="CANCELLED"):
        running.result()
