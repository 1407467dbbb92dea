"""`memtui compare A.h5 B.h5 ... --by SPEC [--shared-controls]` as a user runs it: the shipped suite copied, a
domain and a length written into one of its files with ``write_covariates``, compared group by group on the
terminal, the group in every CSV row, each figure the library's (``estimation.suite_by``), and one-line refusals."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memtui.estimation.settings import Settings
from memtui.estimation.suite_by import compare_by
from memtui.estimation.suite_load import load_suite
from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import read_panel
from memtui.panel.samples import SUITE, sample_path


def covariates(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"domain": rng.choice(np.array(["code", "web"], dtype=object), n), "length": rng.gamma(3, 100, n)}


@pytest.fixture(scope="module")
def suite_files(tmp_path_factory) -> list[Path]:
    """The shipped suite, copied; the smallest and the largest model's files carry the covariates (the others take
    them from those)."""
    folder = tmp_path_factory.mktemp("suite")
    paths = [Path(shutil.copy(sample_path(name), folder / f"{name}.h5")) for name in SUITE]
    for path in (paths[0], paths[-1]):
        write_covariates(path, covariates(read_panel(path).n_instances))
    return paths


def test_compare_by_prints_each_group_and_the_differences_and_writes_the_group_in_every_row(cli, suite_files, tmp_path):
    out = tmp_path / "cmp.csv"
    code, stdout, stderr = cli("compare", *suite_files, "--by", "domain", "-B", "200", "-m", "loglik", "-o", out)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("4 models by domain: 2 groups, each group with its own never-treated controls")
    heads = [line for line in lines if line.startswith("=== group")]
    assert [h.split(":")[0] for h in heads] == ["=== group domain=code", "=== group domain=web"]
    assert stdout.count("Pearson correlation of the TRUE profiles") == 2

    res = compare_by(load_suite(suite_files), Settings(metric="loglik", draws=200), "domain")
    for group in res.groups:
        treated, controls = res.group_size(group)
        assert f"=== group {group}: {treated} treated, {controls} never-treated instances ===" in stdout
    for model in res.models:  # each model's difference between the groups, as the library tests it
        (d,) = res.by_model[model].differences
        o = d.overall
        assert f"{model}: domain=code - domain=web: overall {o['estimate']:.4g} [{o['ci_low']:.4g}, " in stdout

    table = pl.read_csv(out)
    assert table.columns[:4] == ["group", "treated", "controls", "model"]
    assert table.height == 8 and table["group"].null_count() == 0
    want = res.headline()
    assert np.array_equal(table["overall"].to_numpy(), want["overall"].to_numpy())
    assert table["model"].to_list() == want["model"].to_list()  # by parameter count within each group
    corr = pl.read_csv(out.with_name("cmp-correlations.csv"))
    assert corr.columns[0] == "group" and set(corr["group"]) == set(res.groups)
    assert corr.height == 2 * 2 * 16  # groups x methods x ordered pairs of 4 models
    diffs = pl.read_csv(out.with_name("cmp-differences.csv"))
    assert set(diffs["model"]) == set(res.models) and set(diffs["group_a"]) == {"domain=code"}
    overall = diffs.filter(pl.col("event_time").is_null())
    assert np.allclose(overall["estimate"].to_numpy(), [res.by_model[m].differences[0].overall["estimate"]
                                                        for m in overall["model"]], rtol=1e-12)  # fmt: skip
    assert "wrote" in lines[-1] and "cmp-differences.csv" in lines[-1]


def test_bins_with_shared_controls_give_a_dose_response_per_model(cli, suite_files):
    code, stdout, stderr = cli("compare", *suite_files, "--by", "length:tertiles", "--shared-controls", "-B", "100")
    assert code == 0, stderr
    assert "3 groups, shared never-treated controls" in stdout.splitlines()[0]
    assert stdout.count(": dose-response trend in length: slope") == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by", "size"], "no covariate 'size' to group by"),
        (["--by", "domain>=x"], "is categorical; use == or !="),
        (["--by", "domain", "--pooled"], "--by and --pooled do not go together"),
        (["--by", "domain", "--engine", "differences", "--band", "classic"], "estimated by memtui's engine"),
        (["--shared-controls"], "--shared-controls goes with --by SPEC"),
        (["--by", "domain", "-o", "out.txt"], "-o writes CSV"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, suite_files, args, message):
    code, stdout, stderr = cli("compare", *suite_files[:2], "-B", "20", *args)
    assert code == 2
    assert stderr.startswith("memtui: ") and stderr.count("\n") == 1, stderr
    assert message in stderr and "Traceback" not in stderr


def test_panels_that_disagree_on_the_covariate_are_refused(cli, suite_files, tmp_path):
    other = Path(shutil.copy(suite_files[0], tmp_path / "other.h5"))
    values = covariates(read_panel(other).n_instances)
    values["domain"][:7] = np.where(values["domain"][:7] == "code", "web", "code")
    write_covariates(other, values, replace=True)
    code, _, stderr = cli("compare", other, *suite_files[1:], "--by", "domain", "-B", "20")
    assert code == 2 and stderr.count("\n") == 1
    assert "the panels disagree on covariate 'domain'" in stderr and "differ at 7 instances" in stderr


def test_one_panel_is_pointed_to_estimate(cli, suite_files):
    code, _, stderr = cli("compare", suite_files[-1], "--by", "domain")
    assert code == 2 and "memtui estimate PANEL --by SPEC" in stderr


def test_subprocess_user_run(suite_files, tmp_path):
    """The entry point as a shell user runs it: output on stdout, a refusal as one line and exit 2."""
    cmd = [sys.executable, "-m", "memtui.cli", "compare", *map(str, suite_files[:2]), "-B", "20"]
    ok = subprocess.run([*cmd, "--by", "domain"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "=== group domain=web" in ok.stdout
    bad = subprocess.run([*cmd, "--by", "domain:9x"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("memtui: ") and bad.stderr.count("\n") == 1
