"""Fixtures for tests that run jobs on a real SLURM cluster (see tests/slurm/README.md).

CI starts a one-node cluster (tests/slurm/start-cluster.sh) with one partition, ``debug``, and sets
``MEMTUI_REQUIRE_SLURM=1``: there, a missing or unresponsive cluster fails these tests instead of skipping them.
Elsewhere they are skipped with the reason.

- ``slurm_partition``: the partition to submit to (``"debug"``, or ``$MEMTUI_SLURM_PARTITION``); skips/fails as above.
- ``slurm_executor``: a function returning a ``submitit.AutoExecutor`` on that partition, in a fresh folder under
  ``tmp_path``, whose jobs run this interpreter (so they see the venv and memtui) and which pickles the calling test
  module's own functions by value (so jobs need not import the test module).
- ``slurm_accounting``: like ``slurm_partition``, but also needs ``sacct`` to work (slurmdbd). submitit learns job
  states only from sacct: use it in tests where a job ends without a result (scancel, failure outside Python,
  time limit), which submitit would otherwise wait for forever.
- ``wait_done(jobs, timeout)``: poll submitit until every job is finished, failing (with squeue/sacct and the jobs'
  logs) after ``timeout`` seconds instead of hanging.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

REQUIRE = os.environ.get("MEMTUI_REQUIRE_SLURM") == "1"
PARTITION = os.environ.get("MEMTUI_SLURM_PARTITION", "debug")


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"MEMTUI_REQUIRE_SLURM=1 but {reason} (start it with tests/slurm/start-cluster.sh)", pytrace=False)
    pytest.skip(f"needs a SLURM cluster, and {reason} (tests/slurm/README.md says how to start one)")


def slurm_problem(partition: str = PARTITION) -> str | None:
    """Why jobs cannot be submitted to ``partition`` here, or None when they can."""
    for cmd in ("sbatch", "squeue", "scancel", "sinfo"):
        if shutil.which(cmd) is None:
            return f"{cmd} is not on PATH"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-p", partition, "-o", "%a %T"], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 15 s"
    if out.returncode != 0:
        return f"sinfo failed: {(out.stderr or out.stdout).strip()}"
    lines = [line.split() for line in out.stdout.splitlines() if line.strip()]
    if not lines:
        return f"there is no partition {partition!r}"
    usable = ("idle", "mixed", "allocated", "completing")  # a trailing * (not responding) or ~ (powered off) is not
    if not any(avail == "up" and state in usable for avail, state, *_ in lines):
        return f"partition {partition!r} has no usable node (sinfo: {out.stdout.strip()!r})"
    return None


@pytest.fixture(scope="session")
def slurm_partition() -> str:
    """The partition to submit to; skips the test (fails it under MEMTUI_REQUIRE_SLURM=1) without a cluster."""
    problem = slurm_problem(PARTITION)
    if problem:
        _unavailable(problem)
    try:
        import submitit  # noqa: F401
    except ImportError:
        _unavailable("submitit is not installed")
    return PARTITION


@pytest.fixture(scope="session")
def slurm_accounting(slurm_partition) -> str:
    """The partition, where ``sacct`` also works; skips (fails under MEMTUI_REQUIRE_SLURM=1) otherwise."""
    if shutil.which("sacct") is None:
        _unavailable("sacct is not on PATH")
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        _unavailable("sacct did not answer in 15 s")
    if out.returncode != 0:
        _unavailable(f"sacct fails (no job accounting): {(out.stderr or out.stdout).strip()}")
    return slurm_partition


@pytest.fixture
def slurm_executor(slurm_partition, tmp_path, request):
    """``make(**params)`` -> a submitit AutoExecutor on the test cluster; ``params`` go to ``update_parameters``."""
    import cloudpickle
    import submitit

    # Jobs unpickle the submitted function. Functions of memtui are found by import (memtui is installed in the venv
    # that the job's python belongs to); functions defined in the test module are sent by value instead, since the
    # job cannot import tests/ as a package.
    cloudpickle.register_pickle_by_value(request.module)
    made = []

    def make(**params):
        folder = tmp_path / f"submitit-{len(made)}"
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_python=sys.executable)
        executor.update_parameters(
            **{"slurm_partition": slurm_partition, "timeout_min": 5, "cpus_per_task": 1, "nodes": 1, **params}
        )
        made.append(executor)
        return executor

    yield make
    # Leave nothing running on the cluster: cancel what the test submitted (submitit keeps each job's submission
    # script in its folder as <job id>_submission.sh; scancel ignores jobs that have ended).
    ids = sorted({p.name.split("_")[0] for ex in made if ex.folder.exists() for p in ex.folder.glob("*_submission.sh")})
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=15)


def diagnostics(jobs) -> str:
    """squeue, sacct and the last lines of the jobs' logs: what a failure message needs."""
    parts = []
    for cmd in (["squeue"], ["sacct", "-j", ",".join({j.job_id.split("_")[0] for j in jobs})]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
            parts.append(f"$ {' '.join(cmd)}\n{out.stdout}{out.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            parts.append(f"$ {' '.join(cmd)}: {e}")
    for job in jobs:
        for name, path in (("stdout", job.paths.stdout), ("stderr", job.paths.stderr)):
            if path.exists():
                parts.append(f"--- {job.job_id} {name} ({path}) ---\n" + path.read_text(errors="replace")[-2000:])
    return "\n".join(parts)


def wait_done(jobs, timeout: float = 45) -> None:
    """Wait until submitit sees every job finished (result written, or sacct says it ended); fail after timeout."""
    deadline = time.monotonic() + timeout
    pending = list(jobs)
    while pending:
        pending = [job for job in pending if not job.done(force_check=True)]
        if not pending:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"jobs {[j.job_id for j in pending]} not finished after {timeout:.0f} s "
                f"(states {[j.state for j in pending]})\n{diagnostics(jobs)}",
                pytrace=False,
            )
        time.sleep(0.5)


@pytest.fixture
def slurm_wait():
    """``wait_done`` as a fixture, for test modules that prefer fixtures to imports."""
    return wait_done


def pytest_collection_modifyitems(config, items):
    """The SLURM tests share the one-node cluster: under pytest-xdist (`make test`, `--dist loadgroup`) they run one
    after another in one worker, so that their jobs do not wait on each other's slots and time out."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.xdist_group("slurm"))
