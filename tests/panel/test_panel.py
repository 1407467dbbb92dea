"""The panel file: round trip, the writing protocol, readers alongside a writer."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel, read_tokens
from memtui.panel.metrics import GOLDFISH
from memtui.panel.model import METRICS, NEVER, PAD


def make(tmp_path, **kw):
    tokens = np.arange(6 * 5).reshape(6, 5)
    tokens[5, 3:] = PAD
    treatment = [1000, 1000, 2000, NEVER, NEVER, 3000]
    return create_panel(tmp_path / "p.h5", ids=[10, 11, 12, 13, 14, 15], treatment=treatment, steps=[0, 1000, 2000],
                        tokens=tokens, lengths=[5, 5, 5, 5, 5, 3], **kw)  # fmt: skip


def test_round_trip_and_defaults(tmp_path):
    path = make(tmp_path, attrs={"model": "tiny"})
    p = read_panel(path)
    assert p.n_instances == 6 and p.n_checkpoints == 3 and not p.done.any()
    assert list(p.split) == ["train", "train", "train", "validation", "validation", "train"]
    # every metric but the trained-target ones, which only a panel recording a loss mask gets
    assert set(p.metrics) == set(METRICS) - set(GOLDFISH) >= {"loglik", "accuracy", "rank", "entropy", "extractable"}
    assert np.isnan(p.metrics["loglik"]).all()
    assert p.sign("rank") == -1 and p.sign("loglik") == 1
    assert p.revisions == ["step0", "step1000", "step2000"]
    assert p.attrs["model"] == "tiny" and p.attrs["format_version"] == "1"
    tokens, lengths = read_tokens(path, slice(4, 6))
    assert tokens.shape == (2, 5) and list(lengths) == [5, 3] and tokens[1, 4] == PAD


def test_values_mark_checkpoints_done(tmp_path):
    y = np.full((6, 3), np.nan)
    y[:, 1] = 1.0
    p = read_panel(make(tmp_path, values={"loglik": y}))
    assert list(p.done) == [False, True, False]
    assert p.values("loglik").shape == (6, 1)


def test_writer_commits_column_then_done_flag_while_a_reader_reads(tmp_path):
    path = make(tmp_path)
    reader = (
        "import sys, time\nfrom memtui.panel.hdf5 import read_panel\n"
        "for _ in range(200):\n"
        "    p = read_panel(sys.argv[1])\n"
        "    y = p.metrics['loglik'][:, p.done]\n"
        "    assert not (p.done.any() and __import__('numpy').isnan(y).any()), 'done column with NaN'\n"
        "    time.sleep(0.005)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", reader, str(path)], stderr=subprocess.PIPE, text=True)
    with PanelWriter(path) as w:
        for k in range(3):
            w.write_checkpoint(k, {m: np.full(6, float(k)) for m in ("loglik", "accuracy", "rank", "entropy")},
                               weights_hash=f"h{k}")  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    p = read_panel(path)
    assert p.done.all() and p.weight_hashes == ["h0", "h1", "h2"]
    np.testing.assert_array_equal(p.metrics["rank"][0], [0.0, 1.0, 2.0])


def test_the_model_is_recorded_per_checkpoint_and_a_writer_works_with_a_reader_open(tmp_path):
    path = make(tmp_path)
    size = path.stat().st_size
    # another process holding the file open for reading does not keep the writer out
    hold = (
        "import sys, time, h5py\n"
        "f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True)\n"
        "print(1, flush=True)\ntime.sleep(3)"
    )
    proc = subprocess.Popen([sys.executable, "-c", hold, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "1"
    with PanelWriter(path) as w:
        w.write_checkpoint(0, {"loglik": np.zeros(6)}, model="pythia-tiny")
        w.write_checkpoint(2, {"loglik": np.ones(6)}, model="pythia-other")
    proc.wait(timeout=30)
    p = read_panel(path)
    assert list(p.done) == [True, False, True]
    assert p.models == ["pythia-tiny", "", "pythia-other"] and p.attrs["model"] == "pythia-tiny, pythia-other"
    assert path.stat().st_size == size  # everything extraction writes was preallocated: the file never grows


def test_create_refuses_bad_shapes(tmp_path):
    with pytest.raises(MemtuiError, match="treatment has shape"):
        create_panel(tmp_path / "x.h5", ids=[1, 2], treatment=[NEVER], steps=[0, 1])
    with pytest.raises(MemtuiError, match="strictly increasing"):
        create_panel(tmp_path / "x.h5", ids=[1, 2], treatment=[NEVER, 1], steps=[1, 0])
    with pytest.raises(MemtuiError, match="unique"):
        create_panel(tmp_path / "x.h5", ids=[1, 1], treatment=[NEVER, 1], steps=[0, 1])
    assert not list(tmp_path.iterdir())  # nothing half-made left behind


@pytest.mark.parametrize("name", ["a/b", "", "x\x1b[2J", ".", "..", "bad\u202ename"])
def test_create_refuses_metric_names_that_cannot_be_datasets(tmp_path, name):
    with pytest.raises(MemtuiError, match="is not allowed"):
        create_panel(tmp_path / "x.h5", ids=[1, 2], treatment=[NEVER, 1], steps=[0, 1], values={name: np.zeros((2, 2))})
    assert not (tmp_path / "x.h5").exists()
