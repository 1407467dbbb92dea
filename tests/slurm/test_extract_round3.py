"""Trust round 3 on a real SLURM cluster (CI's one-node cluster, tests/slurm/README.md): a queued array is a running
extraction and --cancel scancels it; --cancel never scancels a job that is not the panel's array; --time is what
SLURM reads; --device cpu asks for no GPU; a refused submission is one line and leaves nothing behind. The same
logic is tested without a cluster in tests/adversarial/test_extraction_round3.py (a fake squeue/scancel/sbatch)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tiny_models import make_panel, wait_until

from memtui.extract import jobs


def _squeue(job: str, fmt: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", fmt], capture_output=True, text=True, timeout=30)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _submit(cli, panel: Path, ckpts: Path, partition: str, *extra: str) -> str:
    argv = ["--slurm", "--workers", "2", "--partition", partition, "--device", "cpu", "--batch-size", "7", *extra]
    code, out, err = cli("extract", panel, "--model", ckpts, *argv)
    assert code == 0, err
    return json.loads((panel.parent / f"{panel.name}.work" / "launch.json").read_text())["slurm_job"]


def test_a_held_array_is_queued_blocks_a_launch_and_is_cancelled(cli, tmp_path, tiny_checkpoints, slurm_partition):
    panel = make_panel(tmp_path / "panel.h5")
    job = _submit(cli, panel, tiny_checkpoints, slurm_partition, "--slurm-extra", "--hold", "--time", "1-2")
    try:
        assert _squeue(job, "%T") == ["PENDING", "PENDING"]
        assert _squeue(job, "%l")[0] == "1-02:00:00"  # --time 1-2 is a day and two hours, as SLURM reads it
        progress = jobs.read_progress(panel)
        assert progress["state"] == "queued" and progress["n_queued"] == 2
        code, out, err = cli("extract", panel, "--model", tiny_checkpoints, "--device", "cpu")
        assert code == 2 and "being extracted" in err
        code, out, err = cli("extract", panel, "--cancel")
        assert code == 0, err
        wait_until(lambda: not _squeue(job, "%T"), timeout=60, what="the held array to leave the queue")
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)


def test_cancel_leaves_a_job_that_is_not_the_panels_alone(cli, tmp_path, slurm_partition):
    panel = make_panel(tmp_path / "panel.h5")
    out = subprocess.run(["sbatch", "--parsable", "-p", slurm_partition, "--hold", "--wrap", "sleep 300"],
                         capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    other = out.stdout.strip().split(";")[0]
    try:
        work = panel.parent / f"{panel.name}.work"
        work.mkdir()
        launched = {"mode": "slurm", "slurm_job": other, "folder": str(work / "slurm"), "token": "ab" * 16}
        (work / "launch.json").write_text(json.dumps(launched))
        code, out, err = cli("extract", panel, "--cancel")
        assert code == 1 and "not cancelled" in err
        assert _squeue(other, "%T") == ["PENDING"]
    finally:
        subprocess.run(["scancel", other], capture_output=True, timeout=30)


def test_device_cpu_asks_for_no_gpu_and_the_array_runs(
    cli, tmp_path, tiny_checkpoints, tiny_reference, slurm_partition
):
    import numpy as np

    from memtui.panel.hdf5 import read_panel

    panel = make_panel(tmp_path / "panel.h5")
    job = _submit(cli, panel, tiny_checkpoints, slurm_partition, "--time", "10")
    script = (panel.parent / f"{panel.name}.work" / "slurm" / job / f"{job}_submission.sh").read_text()
    assert "gpus" not in script and "gres" not in script
    final = wait_until(
        lambda: (p := jobs.read_progress(panel)) and p["state"] not in ("running", "queued") and p,
        timeout=300, every=0.5, what="the array",
    )  # fmt: skip
    assert final["state"] == "done", Path(final["log"]).read_text()[-3000:]
    got = read_panel(panel)
    for m in ("loglik", "accuracy", "rank", "entropy"):
        np.testing.assert_array_equal(got.metrics[m], tiny_reference.metrics[m], err_msg=m)


@pytest.mark.parametrize("partition", ["no-such-partition"])
def test_a_refused_submission_is_one_line_and_leaves_nothing(cli, tmp_path, tiny_checkpoints, slurm_partition,
                                                               partition):  # fmt: skip
    panel = make_panel(tmp_path / "panel.h5")
    code, out, err = cli("extract", panel, "--model", tiny_checkpoints, "--slurm", "--partition", partition)
    assert code == 2 and err.count("\n") == 1 and err.startswith("memtui: SLURM refused the job array"), err
    folder = panel.parent / f"{panel.name}.work" / "slurm"
    assert not (list(folder.glob(".submission_file_*")) if folder.exists() else [])
    assert not (list(folder.glob("*.pkl")) if folder.exists() else [])
