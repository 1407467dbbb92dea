"""`memtui estimate/export --by SPEC [--shared-controls]` and `--cluster batch|NAME`: a profile per group and the
difference test on the terminal, a `group` column in the CSV, one-line refusals. The panel is the small simulated
one, written with each instance's optimizer step (instances/provenance/step, what --cluster batch reads) and given
a domain and a length with ``write_covariates``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, simulate

# the small simulated panel of tests/conftest.py (a name of its own: `from conftest` finds whichever conftest is first)
SMALL = Simulation(n_cohorts=5, per_cohort=15, n_never=40, n_checkpoints=7, seed=3)


@pytest.fixture
def with_covariates(tmp_path) -> Path:
    data = simulate(SMALL)
    n = len(data["treatment"])
    step = np.where(data["treatment"] == NEVER, -1, np.arange(n) // 5)
    path = create_panel(tmp_path / "small.h5", metrics=list(data["values"]), provenance={"step": step}, **data)
    rng = np.random.default_rng(0)
    write_covariates(
        path,
        {"domain": rng.choice(np.array(["code", "web"], dtype=object), n), "length": rng.gamma(3, 100, n)},
    )
    assert set(read_panel(path).covariates) == {"domain", "length"}
    return path


def test_estimate_by_prints_groups_and_the_difference(cli, with_covariates):
    code, out, err = cli("estimate", with_covariates, "-B", "200", "--by", "domain")
    assert code == 0, err
    assert "by domain: 2 groups" in out and "joint band" in out
    assert "group domain=code" in out and "group domain=web" in out
    assert "difference     domain=code - domain=web" in out and "exceeds that of domain=web at" in out
    code, out, err = cli("estimate", with_covariates, "-B", "200", "--by", "length:quartiles", "--shared-controls")
    assert code == 0, err
    assert "4 groups, shared never-treated controls" in out and "dose-response  trend in length" in out


def test_export_by_has_a_group_column(cli, with_covariates, tmp_path):
    csv = tmp_path / "by.csv"
    code, out, err = cli("export", with_covariates, "-o", csv, "-B", "200", "--all", "--by", "domain")
    assert code == 0, err
    frame = pl.read_csv(csv)
    assert frame.columns[0] == "group" and sorted(frame["group"].unique()) == ["domain=code", "domain=web"]


def test_cluster_option_and_refusals(cli, with_covariates):
    code, out, err = cli("estimate", with_covariates, "-B", "100", "--band", "classic", "--cluster", "batch")
    assert code == 0, err
    assert "bootstrap clustered by batch" in out
    code, out, err = cli("estimate", with_covariates, "-B", "100", "--cluster", "batch")  # the calibrated band
    assert code == 0 and "calibrated simultaneous" in out and "bootstrap clustered by batch" in out, err
    code, out, err = cli("estimate", with_covariates, "-B", "100", "--cluster", "domain")  # clusters span cohorts
    assert code == 2 and "--band classic" in err and err.count("\n") == 1, err
    for args in (["--band", "classic", "--cluster", "nope"], ["--by", "nope"], ["--by", "length>>1"]):
        code, out, err = cli("estimate", with_covariates, "-B", "100", *args)
        assert code == 2 and err.startswith("memtui: ") and err.count("\n") == 1, err
