"""sampled_logp's sampling scheme on resume (extract/scheme.py): a panel recording another scheme than the one this
extraction computes with is refused in one line at launch and by every worker, before anything is written; a
damaged record is refused as inconsistent; the recorded default is Hayes et al.'s top-k 40 at temperature 1."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from tiny_models import make_panel

from memtui.core.errors import MemtuiError
from memtui.extract.scheme import REQUESTED, check, recorded
from memtui.extract.units import work_dir
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel

QUIET = {"handle_signals": False, "log": lambda m: None}


def _set(path, **attrs):
    with h5py.File(path, "r+") as f:
        ds = f["metrics/sampled_logp"]
        for key, value in attrs.items():
            if value is None:
                del ds.attrs[key]
            else:
                ds.attrs[key] = value


def test_a_new_panel_records_the_default_scheme_hayes_top_k_40_at_temperature_1(tmp_path):
    path = make_panel(tmp_path / "p.h5")
    assert REQUESTED == (40, 1.0)
    assert recorded(path) == (40, 1.0) == check(path)


@pytest.mark.parametrize(("attrs", "shown"), [({"top_k": 50}, "top-k 50, temperature 1"),
                                              ({"temperature": 0.7}, "top-k 40, temperature 0.7")])  # fmt: skip
def test_resuming_a_panel_of_another_scheme_is_refused_before_anything_is_written(
    tmp_path, tiny_checkpoints, attrs, shown
):
    path = make_panel(tmp_path / "p.h5")
    _set(path, **attrs)
    before = path.read_bytes()
    with pytest.raises(MemtuiError, match=f"records sampled_logp under {shown}; this extraction samples with top-k 40"):
        run(path, model=str(tiny_checkpoints), **QUIET)
    assert path.read_bytes() == before and not read_panel(path).done.any()


def test_the_launch_refuses_it_too_in_one_line(cli, tmp_path, tiny_checkpoints):
    path = make_panel(tmp_path / "p.h5")
    _set(path, top_k=np.int64(5))
    code, out, err = cli("extract", path, "--model", tiny_checkpoints, "--device", "cpu")
    assert code == 2 and err.count("\n") == 1 and "records sampled_logp under top-k 5" in err
    assert not (work_dir(path) / "launch.json").exists()


@pytest.mark.parametrize(
    "attrs",
    [
        {"top_k": None},
        {"temperature": None},
        {"top_k": "forty"},
        {"top_k": 0},
        {"top_k": 2.5},
        {"top_k": np.array([40, 40])},
        {"temperature": 0.0},
        {"temperature": -1.0},
        {"temperature": np.nan},
        {"temperature": np.inf},
        {"top_k": 1e300},
    ],
)
def test_a_damaged_scheme_record_is_refused_as_inconsistent(tmp_path, attrs):
    path = make_panel(tmp_path / "p.h5")
    _set(path, **attrs)
    with pytest.raises(MemtuiError, match="does not record a sampling scheme"):
        check(path)


def test_a_panel_without_sampled_logp_has_no_scheme_to_check(tmp_path):
    path = make_panel(tmp_path / "p.h5")
    with h5py.File(path, "r+") as f:
        del f["metrics/sampled_logp"]
    assert recorded(path) is None and check(path) is None


def test_the_same_scheme_resumes(tmp_path, tiny_checkpoints):
    path = make_panel(tmp_path / "p.h5")
    _set(path, top_k=np.int64(40), temperature=np.float64(1.0))
    assert run(path, model=str(tiny_checkpoints), checkpoints="0", **QUIET) == "done"
    assert read_panel(path).done[0]  # (its rows are shorter than k + l: sampled_logp is NaN there, as documented)
