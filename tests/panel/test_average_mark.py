"""The weight-average mark kept in the panel (`checkpoints/average`): a checkpoint whose model is an EMA, a soup or a
merge says so wherever the panel is opened, also without the extraction's work folder beside it; panels made before
the dataset existed still open (their marks come from the revision names and the work folder, as before), and a
dataset of the wrong shape or type is refused in one line, as every other checkpoint dataset is."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.extract.checkpoints import checkpoint_info_rows, panel_averages
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel
from memtui.panel.model import NEVER

STEPS = [0, 1000, 2000, 3000]


def _panel(path, revisions=None):
    treatment = [1000, 2000, 3000, NEVER, NEVER, 2000]
    return create_panel(path, ids=range(6), treatment=treatment, steps=STEPS, revisions=revisions)


def _commit(path, marks: dict[int, str]):
    """Every checkpoint committed, as extraction does, with the marks given (index -> kind)."""
    with PanelWriter(path) as w:
        for k in range(len(STEPS)):
            w.write_checkpoint(k, {"loglik": np.full(6, float(k))}, average=marks.get(k, ""))


def test_the_mark_round_trips_and_travels_with_the_file(tmp_path, cli):
    path = _panel(tmp_path / "p.h5")
    size = path.stat().st_size
    _commit(path, {1: "ema", 3: "soup"})
    assert path.stat().st_size == size  # preallocated: recording the mark never grows the file
    p = read_panel(path)
    assert p.averages == ["", "ema", "", "soup"]
    moved = tmp_path / "elsewhere" / "moved.h5"  # built elsewhere: no PANEL.work beside it
    moved.parent.mkdir()
    shutil.copy(path, moved)
    assert panel_averages(read_panel(moved)) == {1000: "ema", 3000: "soup"}
    code, out, err = cli("info", moved)
    assert code == 0, err
    assert "step1000 (ema), step3000 (soup): memorisation of an average is not one model's" in out


def test_a_mark_of_a_checkpoint_not_done_is_not_shown(tmp_path):
    path = _panel(tmp_path / "p.h5")
    with h5py.File(path, "r+") as f:
        f["checkpoints/average"][2] = b"ema"  # a kill after the mark, before the done flag
    with PanelWriter(path) as w:
        w.write_checkpoint(1, {"loglik": np.zeros(6)})
    assert panel_averages(read_panel(path)) == {}


def test_the_stored_mark_wins_and_names_still_mark_what_was_not_stored(tmp_path):
    revisions = ["step0", "step1000", "step2000-ema", "step3000"]
    path = _panel(tmp_path / "p.h5", revisions=revisions)
    _commit(path, {1: "soup"})
    assert panel_averages(read_panel(path)) == {1000: "soup", 2000: "ema"}


def _without_mark(path):
    """The panel as memtui wrote it before `checkpoints/average` existed."""
    with h5py.File(path, "r+") as f:
        del f["checkpoints/average"]
    return path


def test_an_old_panel_without_the_dataset_opens_and_takes_commits(tmp_path, cli):
    path = _without_mark(_panel(tmp_path / "old.h5", revisions=["step0", "ema-step1000", "step2000", "step3000"]))
    p = read_panel(path)
    assert p.averages == []
    _commit(path, {1: "ema", 2: "soup"})  # a newer extraction into an old panel: the mark is not written, no error
    p = read_panel(path)
    assert p.done.all() and p.averages == []
    assert panel_averages(p) == {1000: "ema"}  # the revision's name still marks it
    code, out, err = cli("info", path)
    assert code == 0 and "step1000 (ema)" in out, err


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (np.zeros(3, dtype="S40"), "has shape (3,), expected (4,)"),
        (np.zeros(5, dtype="S40"), "has shape (5,), expected (4,)"),
        (np.zeros((4, 2), dtype="S40"), "has shape (4, 2), expected (4,)"),
        (np.zeros(4, dtype=np.int64), "is stored as int64, expected strings"),
        (np.zeros(4, dtype=np.float64), "is stored as float64, expected strings"),
    ],
)
def test_a_mark_of_the_wrong_shape_or_type_is_refused_in_one_line(tmp_path, data, says, cli):
    path = _without_mark(_panel(tmp_path / "bad.h5"))
    with h5py.File(path, "r+") as f:
        f["checkpoints"].create_dataset("average", data=data)
    with pytest.raises(MemtuiError, match=f"'checkpoints/average' {says.replace('(', '[(]').replace(')', '[)]')}"):
        read_panel(path)
    code, out, err = cli("info", path)
    assert code == 2 and not out and err.startswith("memtui: ") and err.count("\n") == 1, err


def test_a_mark_that_is_a_group_is_refused(tmp_path):
    path = _without_mark(_panel(tmp_path / "group.h5"))
    with h5py.File(path, "r+") as f:
        f["checkpoints"].create_group("average")
    with pytest.raises(MemtuiError, match="checkpoints/average is not a dataset"):
        read_panel(path)


def test_hostile_marks_are_shown_cleaned(tmp_path, cli):
    path = _panel(tmp_path / "evil.h5")
    with PanelWriter(path) as w:
        w.write_checkpoint(0, {"loglik": np.zeros(6)}, average="\x1b[2J\x1b]0;pwned\x07")
        w.write_checkpoint(1, {"loglik": np.zeros(6)}, average="\u202e" + "x" * 100)  # cut at the dataset's 40 bytes
        w.write_checkpoint(2, {"loglik": np.zeros(6)}, average="x" * 39 + "é")  # cut inside a UTF-8 character
        w.write_checkpoint(3, {"loglik": np.zeros(6)}, average="   ")  # blank: no mark
    p = read_panel(path)
    assert len(p.averages[1].encode()) <= 40 and p.averages[2] == "x" * 39 + "\ufffd"
    assert set(panel_averages(p)) == {0, 1000, 2000}
    rows = dict(checkpoint_info_rows(p))
    assert "\x1b" not in rows["weight average"] and "\u202e" not in rows["weight average"]
    code, out, err = cli("info", path)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "step0 (?[2J?]0;pwned?)" in out
