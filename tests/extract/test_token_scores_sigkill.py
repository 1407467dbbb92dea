"""Per-token scores survive SIGKILL of the worker as the metrics do: killed mid-checkpoint and after a commit, the
resumed run (without the option: the panel remembers its subset) completes them, equal to an uninterrupted run's."""

from __future__ import annotations

import os
import signal
from functools import partial

import numpy as np
import pytest
from tiny_models import STEPS, make_panel, wait_until

from memtui.extract import jobs
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel
from memtui.panel.token_scores import read_layout, read_token_scores

_wait = partial(wait_until, timeout=180.0, every=0.05)  # detached workers report only through their files
SUBSET = "7"


@pytest.mark.slow
def test_sigkill_then_resume_completes_the_per_token_scores(tmp_path, tiny_checkpoints, monkeypatch):
    reference = make_panel(tmp_path / "reference.h5")
    assert run(reference, model=str(tiny_checkpoints), batch_size=4, token_scores=SUBSET, handle_signals=False,
               log=lambda m: None) == "done"  # fmt: skip
    monkeypatch.setenv("MEMTUI_EXTRACT_BATCH_DELAY", "0.3")  # the kills land mid-run even on a busy machine
    panel = make_panel(tmp_path / "panel.h5")
    kills = [
        lambda p: p.get("checkpoint") is not None and (p.get("instances_done") or 0) > 0,  # inside the first unit
        lambda p: (p.get("k") or 0) >= 2 and (p.get("instances_done") or 0) > 0,  # after one commit, inside the next
    ]
    for i, kill_when in enumerate(kills):
        extra = {"token_scores": SUBSET} if i == 0 else {}  # the first launch records the subset in the panel
        (pid,) = jobs.launch(panel, model=str(tiny_checkpoints), batch_size=4, **extra)
        _wait(lambda pid=pid, when=kill_when: (p := jobs.read_progress(panel)) and p.get("pid") == pid and when(p),
              what=f"kill point {i}: {jobs.read_progress(panel)}")  # fmt: skip
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: jobs.read_progress(panel)["state"] == "stale", timeout=30, what="stale")
    layout = read_layout(panel)
    assert layout is not None and 0 < layout.done.sum() < len(STEPS)  # killed with some columns written, not all
    assert np.all(read_panel(panel).done <= layout.done)  # a column's per-token scores commit just before its metrics
    partial_scores = read_token_scores(panel, layout.ids)
    assert all(np.isnan(v[~layout.done]).all() for v in partial_scores.values())  # nothing half-written shows
    monkeypatch.delenv("MEMTUI_EXTRACT_BATCH_DELAY")  # no kill is aimed at the resumed run: full speed
    (pid,) = jobs.launch(panel, model=str(tiny_checkpoints), batch_size=4)  # resumed without the option

    def ended() -> dict | None:
        p = jobs.read_progress(panel)
        mine = [w for w in (p or {}).get("workers", []) if w.get("pid") == pid]
        return p if mine and mine[0]["state"] != "running" else None

    final = _wait(ended, timeout=180)
    assert final["state"] == "done"
    got, want = read_layout(panel), read_layout(reference)
    assert got.done.all() and np.array_equal(got.ids, want.ids)
    a, b = read_token_scores(panel, got.ids), read_token_scores(reference, want.ids)
    for i in got.ids:
        np.testing.assert_array_equal(a[int(i)], b[int(i)], err_msg=f"instance {i}")
    for name, values in read_panel(reference).metrics.items():
        np.testing.assert_array_equal(read_panel(panel).metrics[name], values, err_msg=name)
