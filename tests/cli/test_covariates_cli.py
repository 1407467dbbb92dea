"""`memtui covariates` and the covariates `memtui info` lists, driven as a user drives them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zlib

import numpy as np
import polars as pl
import pytest

from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.samples import sample_path


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.h5"
    shutil.copyfile(sample_path("tiny-gptneox"), path)
    return path


def test_covariates_from_the_tokens_are_stored_and_listed_by_info(cli, tiny):
    code, out, err = cli("covariates", tiny)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["length", "numeric", "0", "missing,"]
    assert lines[1].startswith("zlib") and lines[-1] == f"2 covariates stored in {tiny}"
    tokens, lengths = read_tokens(tiny)
    cov = read_panel(tiny).covariates
    raw = tokens[7, : lengths[7]].astype("<u2").tobytes()
    assert cov["length"].tolist() == lengths.tolist() and cov["zlib"][7] == len(raw) / len(zlib.compress(raw, 9))
    code, out, _ = cli("info", tiny)
    rows = [line for line in out.splitlines() if line.startswith("covariate")]
    assert code == 0 and len(rows) == 2
    assert rows[0].split()[1:3] == ["length", "numeric"] and "0 missing" in rows[0] and ".." in rows[1]


def test_info_of_a_panel_without_covariates_lists_none(cli, tiny):
    code, out, _ = cli("info", tiny)
    assert code == 0 and "covariate" not in out


def test_a_table_then_a_replace(cli, tiny, tmp_path):
    ids = read_panel(tiny).ids
    table = tmp_path / "t.csv"
    pl.DataFrame({"id": ids[:10], "domain": ["web", "code"] * 5, "dose": np.arange(10)}).write_csv(table)
    code, out, err = cli("covariates", tiny, "--from", table)
    assert code == 0, err
    assert f"{len(ids) - 10} of the panel's {len(ids)} instances are not in the table" in err
    assert "domain" in out and "categorical" in out and f"{len(ids) - 10} missing, 2 levels: code (5), web (5)" in out
    cov = read_panel(tiny).covariates
    assert cov["domain"][:4].tolist() == ["web", "code", "web", "code"] and cov["domain"][10] == ""
    assert set(cov) == {"length", "zlib", "domain", "dose"}
    code, _, err = cli("covariates", tiny, "--only", "dose", "--from", table)
    assert code == 2 and err.strip() == f"memtui: {tiny} already has the covariate dose; pass --replace to overwrite."
    pl.DataFrame({"id": ids[:2], "dose": [5.0, 6.0]}).write_parquet(tmp_path / "t.parquet")
    code, out, _ = cli("covariates", tiny, "--only", "dose", "--from", tmp_path / "t.parquet", "--replace")
    assert code == 0 and out.splitlines()[-1] == f"1 covariate stored in {tiny}"
    np.testing.assert_array_equal(read_panel(tiny).covariates["dose"][:3], [5.0, 6.0, np.nan])


def test_a_corpus_through_tokengrams(cli, tiny, tmp_path):
    pytest.importorskip("tokengrams")
    tokens, lengths = read_tokens(tiny)
    corpus = tmp_path / "corpus.bin"
    np.concatenate([tokens[0, : lengths[0]], tokens[0, : lengths[0]], tokens[5, : lengths[5]]]).astype(
        np.uint16
    ).tofile(corpus)
    code, out, err = cli("covariates", tiny, "--corpus", corpus, "--only", "duplicates_exact,ngram13_seen")
    assert code == 0, err
    assert "indexing" in err
    cov = read_panel(tiny).covariates
    assert set(cov) == {"duplicates_exact", "ngram13_seen"}
    assert cov["duplicates_exact"][0] == 2 and cov["duplicates_exact"][5] >= 1 and cov["ngram13_seen"][0] == 1.0
    assert (tmp_path / "corpus.bin.tokengrams").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--only", "ngram13_seen"],
            "ngram13_seen cannot be computed for {p} (pass the training corpus with --corpus)",
        ),
        (["--only", "nope"], "nope cannot be computed"),
        (["--only", ","], "--only names no covariate"),
        (["--corpus", "{d}/missing"], "{d}/missing: no such token file"),
        (["--from", "{d}/missing.csv"], "{d}/missing.csv: no such table file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tiny, args, message):
    before = tiny.read_bytes()
    args = [a.format(d=tiny.parent) for a in args]
    code, out, err = cli("covariates", tiny, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message.format(p=tiny, d=tiny.parent) in err
    assert tiny.read_bytes() == before


def test_a_shipped_sample_is_computed_with_dry_run_and_never_written(cli):
    path = sample_path("tiny-gptneox")
    before = path.read_bytes()
    code, out, _ = cli("covariates", path, "--dry-run")
    assert code == 0 and out.splitlines()[-1] == "2 covariates computed (not written: --dry-run)"
    code, _, err = cli("covariates", path)
    assert code == 2 and "shipped sample" in err
    assert path.read_bytes() == before


def test_the_command_line_as_a_process(tiny):
    run = subprocess.run([sys.executable, "-m", "memtui.cli", "covariates", str(tiny), "--only", "length"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == f"1 covariate stored in {tiny}"
    help_text = subprocess.run([sys.executable, "-m", "memtui.cli", "--help"], capture_output=True, text=True).stdout
    assert "covariates" in help_text


def test_tokengrams_progress_goes_to_stderr_not_to_the_table(tiny, tmp_path):
    pytest.importorskip("tokengrams")
    tokens, _ = read_tokens(tiny)
    tokens[:3].astype(np.uint16).tofile(tmp_path / "c.bin")
    args = ["covariates", str(tiny), "--corpus", str(tmp_path / "c.bin"), "--only", "duplicates_exact"]
    run = subprocess.run([sys.executable, "-m", "memtui.cli", *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].startswith("duplicates_exact") and "Sorting indices" in run.stderr
