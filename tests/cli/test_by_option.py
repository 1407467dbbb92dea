"""`memtui estimate/export --by SPEC [--shared-controls]` and `--cluster batch|NAME`: a profile per group and the
difference test on the terminal, a `group` column in the CSV, one-line refusals. Panel files cannot hold covariates
yet (another change adds instances/covariates), so the panel read here gets them attached."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import memtui.panel.hdf5 as hdf5
from memtui.panel.model import NEVER


@pytest.fixture
def with_covariates(monkeypatch):
    read = hdf5.read_panel

    def read_with(path, *a, **k):
        panel = read(path, *a, **k)
        rng = np.random.default_rng(0)
        panel.covariates = {
            "domain": rng.choice(np.array(["code", "web"], dtype=object), panel.n_instances),
            "length": rng.gamma(3, 100, panel.n_instances),
        }
        panel.provenance = {"step": np.where(panel.treatment == NEVER, -1, np.arange(panel.n_instances) // 5)}
        return panel

    monkeypatch.setattr(hdf5, "read_panel", read_with)


def test_estimate_by_prints_groups_and_the_difference(cli, small_panel, with_covariates):
    code, out, err = cli("estimate", small_panel, "-B", "200", "--by", "domain")
    assert code == 0, err
    assert "by domain: 2 groups" in out and "joint band" in out
    assert "group domain=code" in out and "group domain=web" in out
    assert "difference     domain=code - domain=web" in out and "exceeds that of domain=web at" in out
    code, out, err = cli("estimate", small_panel, "-B", "200", "--by", "length:quartiles", "--shared-controls")
    assert code == 0, err
    assert "4 groups, shared never-treated controls" in out and "dose-response  trend in length" in out


def test_export_by_has_a_group_column(cli, small_panel, with_covariates, tmp_path):
    csv = tmp_path / "by.csv"
    code, out, err = cli("export", small_panel, "-o", csv, "-B", "200", "--all", "--by", "domain")
    assert code == 0, err
    frame = pl.read_csv(csv)
    assert frame.columns[0] == "group" and sorted(frame["group"].unique()) == ["domain=code", "domain=web"]


def test_cluster_option_and_refusals(cli, small_panel, with_covariates):
    code, out, err = cli("estimate", small_panel, "-B", "100", "--band", "classic", "--cluster", "batch")
    assert code == 0, err
    assert "bootstrap clustered by batch" in out
    for args in (["--cluster", "batch"], ["--band", "classic", "--cluster", "nope"], ["--by", "nope"],
                 ["--by", "length>>1"]):  # fmt: skip
        code, out, err = cli("estimate", small_panel, "-B", "100", *args)
        assert code == 2 and err.startswith("memtui: ") and err.count("\n") == 1, err
