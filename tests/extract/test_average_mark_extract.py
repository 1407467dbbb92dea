"""Extraction stores the weight-average mark in the panel with each checkpoint's column: a panel extracted with a
checkpoint list that flags an EMA, copied elsewhere without its work folder, still says which checkpoint it was."""

from __future__ import annotations

import shutil

from tiny_models import make_panel

from memtui.extract.checkpoints import panel_averages
from memtui.extract.worker import run
from memtui.orders.revisions import manifest_template
from memtui.panel.hdf5 import read_panel


def test_an_extracted_panel_keeps_its_marks_without_its_work_folder(tmp_path, tiny_checkpoints, cli):
    panel = make_panel(tmp_path / "panel.h5", n_train=8, n_val=8, length=8)
    manifest = tmp_path / "revisions.txt"
    manifest.write_text("step0\nstep10\nstep20 average=soup\nstep30\nstep40 average=ema\n")
    state = run(panel, model=str(tiny_checkpoints), revision_template=manifest_template(manifest), batch_size=8,
                handle_signals=False, log=lambda m: None)  # fmt: skip
    assert state == "done"
    p = read_panel(panel)
    assert p.done.all() and p.averages == ["", "", "soup", "", "ema"]
    moved = tmp_path / "copy" / "panel.h5"
    moved.parent.mkdir()
    shutil.copy(panel, moved)
    assert not moved.with_name("panel.h5.work").exists()
    assert panel_averages(read_panel(moved)) == {20: "soup", 40: "ema"}
    code, out, err = cli("info", moved)
    assert code == 0, err
    assert "step20 (soup), step40 (ema): memorisation of an average is not one model's" in out
