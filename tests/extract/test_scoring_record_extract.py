"""Extraction records how it scored each checkpoint (device, dtype, scorer path) in the panel, and a panel resumed
another way says so: here the first checkpoints by the batch-invariant path, the rest by the fast path, as a resume on
another machine or with other options would do. Nothing is refused or rescored; `info` and the estimate's notes say
it."""

from __future__ import annotations

from tiny_models import make_panel

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel


def test_a_resume_scored_another_way_is_said(tmp_path, tiny_checkpoints, cli):
    panel = make_panel(tmp_path / "panel.h5", n_train=8, n_val=8, length=8)
    quiet = dict(handle_signals=False, log=lambda m: None, model=str(tiny_checkpoints), batch_size=8)
    assert run(panel, checkpoints="0,10,20", **quiet) == "done"
    p = read_panel(panel)
    first = "cpu float32 batch-invariant"
    assert p.scorings[:3] == [first] * 3 and not any(p.scorings[3:])
    assert not any("scored in different ways" in n for n in estimate(p, Settings(draws=0)).notes)
    code, out, err = cli("extract", panel, "--model", tiny_checkpoints, "--foreground", "--batch-invariant", "off",
                         "--dry-run")  # fmt: skip
    assert code == 0, err
    said = " ".join(out.split())
    assert "scored as: cpu float32 fast path" in said and f"scored so far: {first} (3)" in said
    assert "and this worker scores cpu float32 fast path: the panel will mix them" in said
    logs = []
    assert run(panel, checkpoints="all", batch_invariant="off", **{**quiet, "log": logs.append}) == "done"
    warned = [m for m in logs if m.startswith("warning: this panel's completed checkpoints were scored")]
    assert len(warned) == 1 and f"{first} (3), and this worker scores cpu float32 fast path" in warned[0]
    code, out, err = cli("status", panel)
    assert code == 0 and "this worker scores cpu float32 fast path" in " ".join(out.split()), (out, err)
    p = read_panel(panel)
    assert p.done.all() and p.scorings == [first] * 3 + ["cpu float32 fast path"] * 2
    assert any(f"{first}: 3; cpu float32 fast path: 2" in n for n in estimate(p, Settings(draws=0)).notes)
    code, out, err = cli("info", panel)
    assert code == 0, err
    assert "cpu float32 batch-invariant (3 checkpoints); cpu float32 fast path (2 checkpoints): mixed" in out
    logs = []  # a worker that scores as the panel's checkpoints were scored says nothing
    assert run(panel, checkpoints="all", **{**quiet, "log": logs.append}) == "done"
    assert not [m for m in logs if m.startswith("warning:")]
