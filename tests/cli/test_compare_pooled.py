"""`memtui compare SUITE --pooled`: a seed suite's pooled profile, its spread across seeds and the agreement test, as
the library computes them; the files it writes; one-line refusals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memtui.estimation.seeds import estimate_pooled
from memtui.estimation.settings import Settings
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import create_panel
from memtui.panel.synthetic_seeds import SeedSimulation, simulate_seeds

SIM = SeedSimulation(n_seeds=3, n_cohorts=5, per_cohort=20, n_never=40, n_checkpoints=7)


def write_seeds(folder: Path, sim: SeedSimulation = SIM, mark: bool = True) -> list[Path]:
    paths = []
    for k, p in enumerate(simulate_seeds(sim)):
        attrs = dict(p.attrs) if mark else {"model": f"model{k}"}
        path = folder / f"suite-seed{k}.h5"
        create_panel(path, ids=p.ids, treatment=p.treatment, steps=p.steps, values=p.metrics, signs=p.signs,
                     attrs=attrs)  # fmt: skip
        paths.append(path)
    return paths


def test_pooled_prints_and_writes_the_library_estimate(cli, tmp_path):
    paths = write_seeds(tmp_path)
    out = tmp_path / "pooled.csv"
    code, stdout, stderr = cli("compare", *paths, "--pooled", "-B", "100", "--band", "classic", "-o", out)
    assert code == 0, stderr
    suite = load_suite(paths)
    expected = estimate_pooled(suite.panels, Settings(draws=100, band="classic"), suite.names)
    written = pl.read_csv(out)
    assert written.columns == expected.cells.columns
    assert np.allclose(written["estimate"].to_numpy(), expected.cells["estimate"].to_numpy(), rtol=1e-12)
    assert np.allclose(written["band_high"].to_numpy(), expected.cells["band_high"].to_numpy(), rtol=1e-9)
    assert pl.read_csv(tmp_path / "pooled-persistent.csv").height == expected.persistent.height
    assert "pooled over 3 seeds (seed0, seed1, seed2)" in stdout
    overall = next(line for line in stdout.splitlines() if line.startswith("overall "))
    assert f"{expected.summaries['overall'].estimate:.4g}" in overall
    for scope in ("profile", "instantaneous", "persistent", "residual"):
        assert any(line.startswith(scope + " ") and ("agree" in line or "differ" in line) for line in
                   stdout.splitlines()), scope  # fmt: skip
    assert f"wrote {out}" in stdout


def test_a_seed_whose_effect_differs_is_named(cli, tmp_path):
    paths = write_seeds(tmp_path, replace(SIM, odd_seed=2.5))
    code, stdout, stderr = cli("compare", *paths, "--pooled", "-B", "100")
    assert code == 0, stderr
    overall = next(line for line in stdout.splitlines() if line.startswith("overall ") and "verdict" not in line
                   and ("agree" in line or "differ" in line))  # fmt: skip
    assert "differ (seed0)" in overall
    assert "note   the pooled bands are the classic band" in stdout  # the default band is calibrated


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-B", "0"], "needs bootstrap draws"),
        (["--engine", "differences", "--band", "classic"], "engine memtui"),
    ],
)
def test_refusals_are_one_line(cli, tmp_path, extra, message):
    paths = write_seeds(tmp_path)
    code, stdout, stderr = cli("compare", *paths, "--pooled", *extra)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1


def test_not_a_seed_suite_is_refused(cli, tmp_path):
    paths = write_seeds(tmp_path, mark=False)
    code, _, stderr = cli("compare", *paths, "--pooled", "-B", "50")
    assert code == 2 and "not a seed suite" in stderr
    code, _, stderr = cli("compare", paths[0], "--pooled")
    assert code == 2 and "every seed's panel" in stderr
