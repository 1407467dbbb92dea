"""Per-instance covariates in the panel file: round trip, old panels, refusals, nothing half-written."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.panel.covariates import read_covariates, write_covariates
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.samples import sample_path
from memtui.panel.superblock import read_superblock

N = 6


def make(tmp_path, **kw):
    return create_panel(tmp_path / "p.h5", ids=range(10, 10 + N), treatment=[1000, 1000, 2000, NEVER, NEVER, 3000],
                        steps=[0, 1000, 2000], tokens=np.arange(N * 4).reshape(N, 4), **kw)  # fmt: skip


def test_round_trip_numbers_and_text(tmp_path):
    path = make(tmp_path)
    write_covariates(path, {
        "length": np.array([4, 4, 3, 4, 2, 4]),  # integers are stored as float64
        "zlib": np.array([1.5, np.nan, 2.0, 0.5, 1.0, 3.25]),
        "domain": np.array(["Pile-CC", "ArXiv", "", "Pile-CC", "Github", "DM Mathematics ∑"], dtype=object),
        "duplicated": np.array([True, False, False, True, False, False]),
    })  # fmt: skip
    cov = read_panel(path).covariates
    assert list(cov) == ["domain", "duplicated", "length", "zlib"]  # HDF5 lists them by name
    assert cov["length"].dtype == np.float64 and list(cov["length"]) == [4, 4, 3, 4, 2, 4]
    np.testing.assert_array_equal(cov["zlib"], [1.5, np.nan, 2.0, 0.5, 1.0, 3.25])
    assert cov["domain"].dtype == object and list(cov["domain"]) == [
        "Pile-CC", "ArXiv", "", "Pile-CC", "Github", "DM Mathematics ∑"]  # fmt: skip
    assert list(cov["duplicated"]) == [1, 0, 0, 1, 0, 0]
    assert read_covariates(path).keys() == cov.keys()
    with h5py.File(path, "r") as f:  # fixed-length UTF-8 and checksummed chunks, as every panel dataset
        ds = f["instances/covariates/domain"]
        assert ds.dtype.kind == "S" and ds.fletcher32
        assert f["instances/covariates/zlib"].dtype == np.float64


def test_the_rest_of_the_panel_is_unchanged(tmp_path):
    y = np.arange(N * 3, dtype=float).reshape(N, 3)
    path = make(tmp_path, values={"loglik": y}, provenance={"source": np.array(list("abcabc"))})
    before = read_panel(path)
    write_covariates(path, {"x": np.arange(N)})
    after = read_panel(path)
    np.testing.assert_array_equal(after.metrics["loglik"], before.metrics["loglik"])
    assert list(after.done) == list(before.done) and list(after.ids) == list(before.ids)
    assert list(after.provenance["source"]) == list("abcabc") and after.has_tokens
    assert not read_superblock(path).open_for_write  # closed cleanly: readers take the fast path
    with PanelWriter(path) as w:  # extraction still commits into it
        w.write_checkpoint(2, {"loglik": np.ones(N)})
    assert read_panel(path).covariates["x"].tolist() == list(range(N))


def test_create_panel_writes_covariates(tmp_path):
    path = make(tmp_path, covariates={"dose": [1, 2, 4, 8, 16, np.nan]})
    np.testing.assert_array_equal(read_panel(path).covariates["dose"], [1, 2, 4, 8, 16, np.nan])


def test_panels_without_covariates_read_as_having_none(tmp_path):
    assert read_panel(make(tmp_path)).covariates == {}
    assert read_panel(sample_path("synthetic")).covariates == {}  # made before covariates existed


def test_an_existing_name_is_refused_unless_replaced_and_others_are_kept(tmp_path):
    path = make(tmp_path)
    write_covariates(path, {"a": np.zeros(N), "b": np.ones(N)})
    before = path.read_bytes()
    with pytest.raises(MemtuiError, match="already has the covariate a; pass --replace"):
        write_covariates(path, {"a": np.ones(N), "c": np.ones(N)})
    assert path.read_bytes() == before  # nothing written, not even "c"
    write_covariates(path, {"a": np.full(N, 7.0)}, replace=True)
    cov = read_covariates(path)
    assert cov["a"].tolist() == [7.0] * N and cov["b"].tolist() == [1.0] * N


def test_a_numeric_covariate_may_become_text_on_replace(tmp_path):
    path = make(tmp_path)
    write_covariates(path, {"a": np.zeros(N)})
    write_covariates(path, {"a": np.array(["x"] * N)}, replace=True)
    assert read_covariates(path)["a"].tolist() == ["x"] * N


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"bad name": np.zeros(N)}, "letters, digits and '_'"),
        ({"a/b": np.zeros(N)}, "letters, digits and '_'"),
        ({"": np.zeros(N)}, "letters, digits and '_'"),
        ({"é": np.zeros(N)}, "letters, digits and '_'"),
        ({"x" * 65: np.zeros(N)}, "letters, digits and '_'"),
        ({"a": np.zeros(N - 1)}, r"shape \(5,\); it must hold one value for each of 6 instances"),
        ({"a": np.zeros((N, 2))}, r"shape \(6, 2\)"),
        ({"a": np.array([1, np.inf, 0, 0, 0, 0])}, "infinite"),
        ({"a": np.array([1, "x", 0, 0, 0, 0], dtype=object)}, "mixes numbers and text"),
        ({"a": np.zeros(N, dtype=complex)}, "numbers or text"),
        ({}, "no covariates"),
    ],
)
def test_bad_covariates_are_refused_and_nothing_is_written(tmp_path, columns, message):
    path = make(tmp_path)
    before = path.read_bytes()
    with pytest.raises(MemtuiError, match=message):
        write_covariates(path, columns)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.h5"]  # no temporary file left beside it


def test_a_panel_being_written_is_refused(tmp_path):
    path = make(tmp_path)
    with PanelWriter(path), pytest.raises(MemtuiError, match="being written"):
        write_covariates(path, {"a": np.zeros(N)})
    assert read_covariates(path) == {}


def test_a_panel_changed_meanwhile_is_not_replaced(tmp_path, monkeypatch):
    """A commit between reading the panel and the rename would be lost in the replaced file: refused instead."""
    import memtui.panel.covariates as module

    path = make(tmp_path)
    real = module._with_covariates

    def commit_meanwhile(image, columns):
        out = real(image, columns)
        with PanelWriter(path) as w:
            w.write_checkpoint(0, {"loglik": np.ones(N)})
        return out

    monkeypatch.setattr(module, "_with_covariates", commit_meanwhile)
    with pytest.raises(MemtuiError, match="changed while covariates were added"):
        write_covariates(path, {"a": np.zeros(N)})
    p = read_panel(path)
    assert p.done[0] and p.covariates == {}


def test_the_shipped_samples_are_not_written(tmp_path):
    with pytest.raises(MemtuiError, match="shipped sample"):
        write_covariates(sample_path("synthetic"), {"a": np.zeros(1)})


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda g: g.create_dataset("a", data=np.zeros(N, dtype=np.int64)), "stored as int64, expected numbers or str"),
        (lambda g: g.create_dataset("a", data=np.zeros(N - 1)), r"has shape \(5,\), expected \(6,\)"),
        (lambda g: g.create_group("a"), "not a dataset"),
        (lambda g: g.create_dataset("a b", data=np.zeros(N)), "not letters, digits and '_'"),
        (lambda g: g.__setitem__("a", h5py.SoftLink("/instances/id")), "link to somewhere else"),
    ],
)
def test_a_damaged_covariate_group_is_refused_in_one_line(tmp_path, damage, message):
    path = make(tmp_path)
    with h5py.File(path, "r+") as f:
        damage(f.require_group("instances/covariates"))
    with pytest.raises(MemtuiError, match=message):
        read_panel(path)


def test_a_covariates_dataset_where_the_group_belongs_is_refused(tmp_path):
    path = make(tmp_path)
    with h5py.File(path, "r+") as f:
        f["instances/covariates"] = np.zeros(N)
    with pytest.raises(MemtuiError, match="'instances/covariates' is not a group"):
        read_panel(path)


def test_covariates_of_a_copied_sample_round_trip(tmp_path):
    path = tmp_path / "tiny.h5"
    shutil.copyfile(sample_path("tiny-gptneox"), path)
    n = read_panel(path).n_instances
    write_covariates(path, {"k": np.arange(n) % 3, "t": np.array(["ab"] * n)})
    cov = read_covariates(path)
    assert cov["k"].tolist() == (np.arange(n) % 3).tolist() and set(cov["t"]) == {"ab"}


def test_a_suite_keeps_each_instance_its_covariates(tmp_path):
    """load_suite puts the panels on the instances they share: covariates follow their instances."""
    from memtui.estimation.suite_load import _restrict

    path = make(tmp_path, covariates={"x": np.arange(N) * 10.0, "t": np.array(list("abcdef"))})
    part = _restrict(read_panel(path), np.array([4, 0, 2]), None)
    assert part.covariates["x"].tolist() == [40, 0, 20] and part.covariates["t"].tolist() == ["e", "a", "c"]
