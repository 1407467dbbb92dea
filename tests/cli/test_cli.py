"""The command line driven as a user would: make a sample, inspect it, estimate, export, import tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

from memtui.panel.hdf5 import read_panel
from memtui.panel.importing import pythia_treatment_step
from memtui.panel.model import NEVER

DATA = Path(__file__).parents[1] / "data"


def test_sample_info_estimate_export_round_trip(cli, tmp_path):
    panel = tmp_path / "s.h5"
    code, out, _ = cli("sample", "synthetic", panel, "--cohorts", "6", "--per-cohort", "30", "--checkpoints", "8")
    assert code == 0 and "6 cohorts" in out
    code, out, _ = cli("info", panel)
    assert code == 0
    assert "instances       380 (180 treated in 6 cohorts, 200 never treated)" in out
    assert "8/8 completed" in out and "rank" in out and "lower is better" in out

    code, out, _ = cli("estimate", panel, "-B", "300")
    assert code == 0
    for section in ("profile", "instantaneous", "persistent", "residual", "overall", "pre-trend"):
        assert section in out
    assert (tmp_path / "s.h5.memtui-cache").is_dir()  # cached next to the panel

    csv = tmp_path / "out.csv"
    code, out, _ = cli("export", panel, "-o", csv, "-B", "300", "--scope", "instantaneous")
    assert code == 0 and f"to {csv}" in out
    frame = pl.read_csv(csv)
    assert frame.height == 6 and frame["significant"].all()
    assert {"band_low", "band_high", "n_treated", "n_control", "alpha", "draws", "seed"} <= set(frame.columns)
    code, _, _ = cli("export", panel, "-o", csv, "-B", "300", "--all")
    every = pl.read_csv(csv)
    assert every.height == 6 * 7 and not every["significant"].all()


def test_cached_estimate_is_reused_and_identical(cli, small_panel):
    from memtui.estimation.cache import cache_dir, cached_estimate
    from memtui.estimation.settings import Settings

    panel = read_panel(small_panel)
    first = cached_estimate(panel, Settings(draws=100))
    files = sorted(cache_dir(panel).iterdir())
    second = cached_estimate(panel, Settings(draws=100))
    assert second.cells.equals(first.cells) and second.overall == first.overall
    assert sorted(cache_dir(panel).iterdir()) == files  # nothing recomputed or rewritten


def test_pythia_treatment_step_derivation():
    seq = np.array([0, 1023, 1024 * 1000 - 1, 1024 * 1000, 5 * 1024 * 1000 + 7, -1, np.nan])
    assert list(pythia_treatment_step(seq)) == [1000, 1000, 1000, 2000, 6000, NEVER, NEVER]


def test_import_pythia_style_table(cli, tmp_path):
    rng = np.random.default_rng(0)
    seqs = np.concatenate([np.arange(0, 3 * 1024_000, 1024_000 // 4), -np.arange(1, 9)])
    rows = [(s, step, rng.normal(), rng.random()) for s in seqs for step in range(0, 4000, 1000)]
    table = pl.DataFrame(rows, schema=["seq_idx", "step", "loglik", "rank"], orient="row")
    src = tmp_path / "stats.parquet"
    table.write_parquet(src)
    code, out, err = cli("import", src, tmp_path / "p.h5", "--from-seq-idx")
    assert code == 0, err
    panel = read_panel(tmp_path / "p.h5")
    assert panel.n_instances == len(seqs) and list(panel.steps) == [0, 1000, 2000, 3000]
    assert sorted(set(panel.treatment)) == [NEVER, 1000, 2000, 3000]
    assert panel.sign("rank") == -1 and panel.done.all()
    code, out, _ = cli("estimate", tmp_path / "p.h5", "-B", "100")
    assert code == 0 and "instantaneous" in out


def test_import_an_economics_panel(cli, tmp_path):
    out_path = tmp_path / "mpdta.h5"
    code, out, err = cli("import", DATA / "mpdta.csv", out_path, "--unit", "countyreal", "--time", "year",
                         "--treatment", "first.treat", "--never-value", "0", "--metrics", "lemp")  # fmt: skip
    assert code == 0, err
    panel = read_panel(out_path)
    assert panel.n_instances == 500 and list(panel.steps) == [2003, 2004, 2005, 2006, 2007]
    assert (panel.treatment == NEVER).sum() == 309
    code, out, _ = cli("estimate", out_path, "--metric", "lemp", "-B", "500")
    assert code == 0 and "12 cells" in out


def test_console_script_reports_errors_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memtui.cli", "info", str(tmp_path / "x.h5")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("memtui: ") and "Traceback" not in proc.stderr


def test_output_piped_into_head_ends_quietly(small_panel):
    """Like `memtui info P | head -1`: the reader is gone before memtui writes (closed at once here)."""
    proc = subprocess.Popen([sys.executable, "-m", "memtui.cli", "info", str(small_panel)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err
