"""Every bad input a user can hand memtui gets a one-line message and exit status 2, never a traceback."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER


def one_line_error(cli, *args, expect: str):
    code, out, err = cli(*args)
    assert code == 2
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("memtui: ")
    assert expect in err, err
    return err


def test_missing_file(cli, tmp_path):
    one_line_error(cli, "info", tmp_path / "nope.h5", expect="no such file; make one with `memtui sample synthetic")


def test_not_hdf5(cli, tmp_path):
    path = tmp_path / "panel.h5"
    path.write_text("unit,time\n1,2\n")
    one_line_error(cli, "estimate", path, expect="is not an HDF5 panel file")


def test_a_folder(cli, tmp_path):
    one_line_error(cli, "info", tmp_path, expect="is a folder, not a panel file")


def test_truncated_half_written_panel(cli, small_panel):
    data = small_panel.read_bytes()
    small_panel.write_bytes(data[: len(data) // 2])
    one_line_error(cli, "info", small_panel, expect=f"is truncated: {len(data) // 2:,} of its {len(data):,} bytes")


def test_hdf5_but_not_a_panel(cli, tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    one_line_error(cli, "info", path, expect="not a memtui panel")


def test_unknown_format_version(cli, small_panel):
    with h5py.File(small_panel, "r+") as f:
        f.attrs["format_version"] = 99
    one_line_error(cli, "info", small_panel, expect="has panel format version 99, this memtui reads version 1")


def test_wrong_metric_shape(cli, small_panel):
    with h5py.File(small_panel, "r+") as f:
        del f["metrics/loglik"]
        f["metrics/loglik"] = np.zeros((3, 4))
    one_line_error(cli, "estimate", small_panel, expect="metric 'loglik' has shape (3, 4), expected (115, 7)")


def test_wrong_metric_dtype(cli, small_panel):
    with h5py.File(small_panel, "r+") as f:
        shape = f["metrics/accuracy"].shape
        del f["metrics/accuracy"]
        f["metrics/accuracy"] = np.zeros(shape, dtype=np.int32)
    one_line_error(cli, "info", small_panel, expect="metric 'accuracy' is stored as int32, expected floating point")


def test_missing_dataset(cli, small_panel):
    with h5py.File(small_panel, "r+") as f:
        del f["instances/treatment_step"]
    one_line_error(cli, "info", small_panel, expect="dataset 'instances/treatment_step' is missing")


def test_no_never_treated_instances(cli, tmp_path):
    path = create_panel(tmp_path / "p.h5", ids=range(4), treatment=[1, 1, 2, 2], steps=[0, 1, 2],
                        values={"loglik": np.zeros((4, 3))})  # fmt: skip
    one_line_error(cli, "estimate", path, expect="no never-treated (validation) instances")


def test_metric_entirely_nan(cli, tmp_path):
    y = np.random.default_rng(0).normal(size=(6, 3))
    path = create_panel(tmp_path / "p.h5", ids=range(6), treatment=[1, 1, 2, 2, NEVER, NEVER], steps=[0, 1, 2],
                        values={"loglik": y, "rank": np.full((6, 3), np.nan)})  # fmt: skip
    one_line_error(cli, "estimate", path, "--metric", "rank", expect="metric 'rank' has no values yet")
    code, out, _ = cli("estimate", path, "--draws", "0")
    assert code == 0 and "profile" in out


def test_panel_awaiting_extraction(cli, tmp_path):
    kw = dict(ids=range(4), treatment=[1, 2, NEVER, NEVER], steps=[0, 1, 2])
    path = create_panel(tmp_path / "p.h5", tokens=np.ones((4, 3), int), **kw)
    code, out, _ = cli("info", path)
    assert code == 0 and "0/3 completed" in out
    one_line_error(cli, "estimate", path, expect="has no values yet; run `memtui extract")
    # without token ids extraction cannot work, so it is not what the message advises
    bare = create_panel(tmp_path / "bare.h5", **kw)
    err = one_line_error(cli, "estimate", bare, expect="has no values yet; choose a metric that has values")
    assert "memtui extract" not in err


def test_unknown_metric_and_bad_settings(cli, small_panel):
    one_line_error(cli, "estimate", small_panel, "--metric", "bleu", expect="no metric 'bleu' in this panel")
    one_line_error(cli, "estimate", small_panel, "--alpha", "2", expect="alpha must be from 0.0001 to 0.5")


def test_unwritable_export(cli, small_panel, tmp_path):
    one_line_error(cli, "export", small_panel, "-o", tmp_path / "no" / "x.csv", "-B", "0",
                   expect="folder " + str(tmp_path / "no") + " does not exist")  # fmt: skip


@pytest.mark.parametrize(
    ("table", "args", "expect"),
    [
        ("seq_idx,step,loglik\n1,0,-3\n", ["--treatment", "g"], "the table has no column 'g'"),
        ("seq_idx,step,loglik\n1,0,-3\n1,0,-2\n", ["--from-seq-idx"], "appear more than once"),
        ("seq_idx,step,loglik\n1,a,-3\n", ["--from-seq-idx"], "must hold integer checkpoint steps"),
        ("seq_idx,step,g,y\n1,0,5,1\n1,1,6,2\n", ["--treatment", "g"], "changes over time"),
        ("seq_idx,step\n1,0\n", ["--from-seq-idx"], "no numeric metric column"),
    ],
)
def test_bad_import_tables(cli, tmp_path, table, args, expect):
    src = tmp_path / "t.csv"
    src.write_text(table)
    one_line_error(cli, "import", src, tmp_path / "p.h5", *args, expect=expect)


def test_existing_output_is_not_overwritten(cli, small_panel):
    before = small_panel.read_bytes()
    one_line_error(cli, "sample", "synthetic", small_panel, expect="already exists; pass --force")
    assert small_panel.read_bytes() == before
