"""How each checkpoint was scored, kept in the panel (`checkpoints/scoring`): the device, the body's dtype and the
scorer's path travel with the file, a panel made before the dataset still opens and commits, and an estimate whose
checkpoints were scored in different ways (bf16 on a GPU, fp32 on a CPU, or one column by both) says so."""

from __future__ import annotations

from dataclasses import replace

import h5py
import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.extract.checkpoints import checkpoint_info_rows
from memtui.panel import scoring
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel, read_scorings
from memtui.panel.model import NEVER
from memtui.panel.samples import sample_path

STEPS = [0, 1000, 2000, 3000]
GPU, CPU = scoring.describe("cuda", "torch.bfloat16", True), scoring.describe("cpu", "float32", True)


def _panel(path):
    return create_panel(path, ids=range(6), treatment=[1000, 2000, 3000, NEVER, NEVER, 2000], steps=STEPS)


def test_the_words():
    assert GPU == "cuda bfloat16 batch-invariant" and CPU == "cpu float32 batch-invariant"
    assert scoring.describe("cuda", "bfloat16", False) == "cuda bfloat16 fast path"
    assert scoring.combine([GPU, "", CPU, GPU]) == f"{CPU} + {GPU}" and scoring.combine(["", ""]) == ""
    assert len(scoring.combine([GPU, CPU, scoring.describe("mps", "float16", False)])) > scoring.SCORING_BYTES - 80


def test_it_round_trips_without_growing_the_file(tmp_path):
    path = _panel(tmp_path / "p.h5")
    size = path.stat().st_size
    with PanelWriter(path) as w:
        for k in range(3):
            w.write_checkpoint(k, {"loglik": np.full(6, float(k))}, scoring=[CPU, CPU, GPU][k])
    assert path.stat().st_size == size  # preallocated, as every checkpoint dataset extraction fills
    p = read_panel(path)
    assert p.scorings == [CPU, CPU, GPU, ""]
    assert scoring.counts(p.scorings, p.done) == {CPU: 2, GPU: 1}


def test_a_panel_made_before_it_opens_and_commits(tmp_path):
    path = _panel(tmp_path / "p.h5")
    with h5py.File(path, "r+") as f:
        del f["checkpoints/scoring"]
    with PanelWriter(path) as w:
        w.write_checkpoint(0, {"loglik": np.zeros(6)}, scoring=GPU)
    p = read_panel(path)
    assert p.scorings == [] and p.done[0]
    assert scoring.mixed_note(p.scorings, p.done) is None
    assert not [r for r in checkpoint_info_rows(p) if r[0] == "scored with"]


def test_a_damaged_dataset_is_refused_in_one_line(tmp_path):
    path = _panel(tmp_path / "p.h5")
    with h5py.File(path, "r+") as f:
        del f["checkpoints/scoring"]
        f["checkpoints/scoring"] = np.zeros((2, 3))
    with pytest.raises(MemtuiError, match="checkpoints/scoring") as exc:
        read_panel(path)
    assert "\n" not in str(exc.value)


def test_the_note_says_when_the_ways_differ():
    done = np.array([True, True, True, False])
    assert scoring.mixed_note([CPU, CPU, CPU, GPU], done) is None  # the GPU column is not done: not read
    assert scoring.mixed_note(["", "", "", ""], done) is None
    note = scoring.mixed_note([CPU, GPU, GPU, ""], done)
    assert note and f"{GPU}: 2; {CPU}: 1" in note and "--dtype" in note
    both = scoring.combine([CPU, GPU])
    assert scoring.mixed_note([both, both, both, both], done)  # one column scored by both ways


def test_an_estimate_and_info_say_it(tmp_path):
    panel = read_panel(sample_path("synthetic"))
    t = len(panel.steps)
    settings = Settings(draws=0)
    same = estimate(replace(panel, scorings=[CPU] * t), settings)
    mixed = estimate(replace(panel, scorings=[CPU] * (t - 3) + [GPU] * 3), settings)
    assert not any("scored in different ways" in n for n in same.notes)
    assert any(f"{CPU}: {t - 3}; {GPU}: 3" in n for n in mixed.notes)
    # said, not changed
    np.testing.assert_array_equal(same.cells["estimate"].to_numpy(), mixed.cells["estimate"].to_numpy())
    rows = dict(checkpoint_info_rows(replace(panel, scorings=[CPU] * (t - 3) + [GPU] * 3, path=None)))
    assert rows["scored with"].startswith(f"{CPU} ({t - 3} checkpoints); {GPU} (3 checkpoints): mixed")
    rows = dict(checkpoint_info_rows(replace(panel, scorings=[CPU] * t, path=None)))
    assert rows["scored with"] == f"{CPU} ({t} checkpoints)"


def test_a_worker_is_warned_before_it_mixes_ways(tmp_path):
    done = np.array([True, True, False, False])
    assert scoring.resume_warning([CPU, CPU, "", ""], done, CPU) is None
    assert scoring.resume_warning(["", "", "", ""], done, GPU) is None  # nothing recorded: nothing to compare
    line = scoring.resume_warning([CPU, CPU, "", ""], done, GPU)
    assert line.startswith(f"warning: this panel's completed checkpoints were scored {CPU} (2), and this worker")
    assert "\n" not in line and "--dtype" in line
    path = _panel(tmp_path / "p.h5")
    with PanelWriter(path) as w:
        w.write_checkpoint(1, {"loglik": np.zeros(6)}, scoring=GPU)
    ways, done = read_scorings(path)
    assert ways == ["", GPU, "", ""] and done.tolist() == [False, True, False, False]
