"""`memtui compare` as a user runs it: several models' panels, one panel's three estimators, the published estimates
beside a panel, and the one-line refusals."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memtui.estimation.compare import compare
from memtui.estimation.correlations import correlations
from memtui.estimation.estimate import estimate
from memtui.estimation.headline import headline
from memtui.estimation.settings import Settings
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.synthetic import Simulation, simulate

SIM = Simulation(n_cohorts=5, per_cohort=15, n_never=40, n_checkpoints=7)
HEADLINE = ["model", "parameters", "metric", "instantaneous", "persistent_1", "persistent_5", "persistent_10",
            "plateau", "residual", "overall", "overall_std_error", "overall_significant", "significant_cells",
            "post_cells", "pretrend_p_value", "pretrend"]  # fmt: skip
CORRELATION = ["metric", "scope", "method", "model_a", "model_b", "correlation", "low", "high", "corrected",
               "corrected_low", "corrected_high", "clipped", "n_cells", "alpha", "draws"]  # fmt: skip


def write_model(path: Path, seed: int, params: int | None = None, *, ids_offset: int = 0) -> Path:
    data = simulate(replace(SIM, seed=seed, effect=1.0 + seed))
    attrs = {"model": f"pythia-{path.stem}"}
    if params is not None:
        attrs["model_parameters"] = str(params)
    return create_panel(path, ids=data["ids"] + ids_offset, treatment=data["treatment"], steps=data["steps"],
                        values=data["values"], signs=data["signs"], attrs=attrs)  # fmt: skip


@pytest.fixture
def models(tmp_path) -> list[Path]:
    # given largest first: the output orders them by parameter count
    return [write_model(tmp_path / name, seed, params)
            for name, seed, params in (("big.h5", 2, 10**9), ("mid.h5", 1, 10**8), ("small.h5", 0, 10**7))]  # fmt: skip


def test_several_panels_print_the_headline_and_correlations(cli, models, tmp_path):
    out = tmp_path / "cmp.csv"
    code, stdout, stderr = cli("compare", *models, "-B", "100", "-m", "loglik", "-o", out)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("3 models on loglik, estimator did")
    rows = [line.split()[0] for line in lines if line.startswith("pythia-")]
    assert rows[:3] == ["pythia-small", "pythia-mid", "pythia-big"]  # by parameter count
    assert "10M" in stdout and "1B" in stdout
    assert "Pearson correlation of the profiles over" in stdout and "Spearman correlation" in stdout

    table = pl.read_csv(out)
    assert table.columns == HEADLINE
    assert table["model"].to_list() == ["pythia-small", "pythia-mid", "pythia-big"]
    assert table["parameters"].to_list() == [10**7, 10**8, 10**9]
    # the same figures as the library computes
    sr = estimate_suite(load_suite(models), Settings(draws=100))
    expected = headline(sr, "loglik")
    assert np.allclose(table["overall"].to_numpy(), expected["overall"].to_numpy(), rtol=1e-12)
    assert table["significant_cells"].to_list() == expected["significant_cells"].to_list()

    corr = pl.read_csv(tmp_path / "cmp-correlations.csv")
    assert corr.columns == CORRELATION
    assert corr.height == 2 * 3 * 3
    c = correlations(sr, "loglik")
    pearson = corr.filter(pl.col("method") == "pearson")
    mid_big = pearson.filter((pl.col("model_a") == "pythia-mid") & (pl.col("model_b") == "pythia-big"))
    assert mid_big["correlation"][0] == pytest.approx(c.pearson[1, 2], rel=1e-12)
    assert mid_big["low"][0] <= mid_big["correlation"][0] <= mid_big["high"][0]
    assert f"wrote {out}" in stdout


def test_scope_option_changes_the_cells_correlated(cli, models, tmp_path):
    out = tmp_path / "inst.csv"
    code, stdout, _ = cli("compare", *models, "-B", "50", "--scope", "instantaneous", "-o", out)
    assert code == 0
    corr = pl.read_csv(tmp_path / "inst-correlations.csv")
    assert corr["scope"].unique().to_list() == ["instantaneous"]
    assert corr["n_cells"][0] == SIM.n_cohorts
    assert f"over {SIM.n_cohorts} instantaneous cells" in stdout


def test_one_panel_shows_the_three_estimators_side_by_side(cli, models, tmp_path):
    out = tmp_path / "three.csv"
    code, stdout, stderr = cli("compare", models[2], "-B", "60", "-m", "accuracy", "-o", out)
    assert code == 0, stderr
    assert "accuracy, the three estimators side by side" in stdout
    for name in ("did", "difference", "extractable", "ease"):
        assert any(line.startswith(name + " ") for line in stdout.splitlines()), name
    assert "instantaneous memorisation (c = g) by cohort" in stdout
    comp = compare(read_panel(models[2]), Settings(metric="accuracy", draws=60))
    written = pl.read_csv(out)
    assert written.columns == comp.cells.columns
    assert written.height == comp.cells.height
    did_line = next(line for line in stdout.splitlines() if line.startswith("did "))
    assert f"{comp.results['did'].overall['estimate']:.4g}" in did_line


def test_reference_puts_the_published_estimates_beside_the_panels(cli, models, tmp_path):
    pytest.importorskip("memtui.report.reference")
    panel = read_panel(models[2])
    res = estimate(panel, Settings(metric="accuracy", draws=60))
    cells = res.cells.filter(~pl.col("pre_treatment"))
    # the paper's file format: their estimates are memtui's here (accuracy: same sign, per token already)
    ref = pl.DataFrame({
        "cohort": cells["cohort"], "base_period": cells["cohort"] - SIM.step, "time": cells["checkpoint"],
        "ATT": cells["estimate"], "std_error": cells["std_error"], "lower": cells["band_low"],
        "upper": cells["band_high"], "zero_not_in_cband": pl.Series(np.where(cells["significant"], "*", "")),
        "model_size": "70m", "stat": "token_accuracy",
    })  # fmt: skip
    path = tmp_path / "paper.csv"
    ref.write_csv(path)
    out = tmp_path / "ref.csv"
    code, stdout, stderr = cli("compare", models[2], "-B", "60", "-m", "accuracy", "--reference", path, "-o", out)
    assert code == 0, stderr
    assert "verdict" in stdout
    written = pl.read_csv(out)
    assert "difference" in written.columns and written.height == cells.height
    assert np.allclose(written["difference"].to_numpy(), 0, atol=1e-12)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reference", "x.csv", "A", "B"], "--reference compares one panel"),
        (["A", "B", "-o", "nofolder/out.csv"], "does not exist"),
        (["A", "B", "-o", "out.txt"], "ending in .csv"),
        (["A", "B", "-m", "nosuch"], "no metric 'nosuch'"),
        (["A", "missing.h5"], "missing.h5: no such file"),
        (["A", "FAR"], "share no instance"),
        (["A", "A"], "given twice"),
        (["A", "B", "--alpha", "2"], "alpha must be from 0.0001 to 0.5"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, message):
    a = write_model(tmp_path / "a.h5", 0)
    b = write_model(tmp_path / "b.h5", 1)
    far = write_model(tmp_path / "far.h5", 2, ids_offset=10**6)
    names = {"A": a, "B": b, "FAR": far, "missing.h5": tmp_path / "missing.h5"}
    argv = [str(names.get(x, tmp_path / x if x.endswith((".csv", ".txt")) else x)) for x in args]
    code, stdout, stderr = cli("compare", "-B", "20", *argv)
    assert code == 2
    assert stderr.startswith("memtui: ") and stderr.count("\n") == 1, stderr
    assert message in stderr
    assert "Traceback" not in stderr


def test_subprocess_user_run(models, tmp_path):
    """The installed entry point, as a shell user runs it: output on stdout, an error as one line and exit 2."""
    ok = subprocess.run([sys.executable, "-m", "memtui.cli", "compare", *map(str, models[:2]), "-B", "20"],
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "2 models on loglik" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "memtui.cli", "compare", str(models[0]), str(tmp_path / "no.h5")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.startswith("memtui: ") and bad.stderr.count("\n") == 1


def test_compare_on_the_shipped_suite_orders_by_recorded_size_and_matches_the_api(cli, tmp_path):
    """The suite `memtui demo --suite` made and memtui ships: models ordered by the parameter count extraction
    recorded, and the printed correlations are the API's."""
    from memtui.panel.samples import SUITE, sample_path

    paths = [sample_path(n) for n in reversed(SUITE)]  # largest first on the command line
    code, out, err = cli("compare", *paths, "-B", "200", "-o", tmp_path / "suite.csv")
    assert code == 0, err
    table = pl.read_csv(tmp_path / "suite.csv")
    sizes = table["parameters"].to_list()
    assert sizes == sorted(sizes) and sizes[-1] >= 10 * sizes[0]
    assert table["model"].to_list() == [f"neox-{s}" for s in ("41k", "132k", "384k", "858k")]
    suite = load_suite(paths)
    corr = correlations(estimate_suite(suite, Settings(draws=200)), "loglik")
    pairs = pl.read_csv(tmp_path / "suite-correlations.csv").filter(pl.col("method") == "pearson")
    got = pairs.filter((pl.col("model_a") == "neox-41k") & (pl.col("model_b") == "neox-858k"))["correlation"][0]
    assert got == pytest.approx(corr.pearson[0, 3], rel=1e-9)
