"""`memtui instances`: ranked instances with their text, one line each; --json, -o CSV, selections and refusals."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER

SAMPLE = ["--sample", "tiny-gptneox"]


def _ranked_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["rank", "id"]) + 1
    return [line for line in lines[start:] if line[:5].strip().isdigit()]


def test_the_tiny_sample_prints_five_ranked_instances_with_text_one_line_each(cli):
    code, out, err = cli("instances", *SAMPLE, "--top", "5")
    assert code == 0, err
    lines = _ranked_lines(out)
    assert [int(line.split()[0]) for line in lines] == [1, 2, 3, 4, 5]
    scores = [float(line.split()[3]) for line in lines]
    assert scores == sorted(scores, reverse=True)
    for line in lines:  # rank, id, cohort, score, p_ctrl, then the decoded text (bytes: letters, not ids)
        text = line.split(maxsplit=5)[5]
        assert sum(ch.isalpha() for ch in text) > 10
    assert "not a population estimate" in out and "bytes (token id = UTF-8 byte)" in out


def test_json_and_csv_hold_the_same_rows(cli, tmp_path):
    out_csv = tmp_path / "ranked.csv"
    code, out, err = cli("instances", *SAMPLE, "--cell", "64,128", "--top", "3", "--json", "-o", out_csv)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["metric"] == "loglik" and doc["n_scored"] == 48 and doc["n_controls"] == 512
    rows = doc["instances"]
    assert [r["rank"] for r in rows] == [1, 2, 3] and {r["cohort"] for r in rows} == {64}
    assert all(r["base_step"] == 56 and r["checkpoint"] == 128 for r in rows)
    assert bytes(rows[0]["tokens"]).decode("utf-8", "replace").replace("\n", "↵") == rows[0]["text"]
    table = pl.read_csv(out_csv)
    assert table["id"].to_list() == [r["id"] for r in rows]
    assert table["score"].to_list() == pytest.approx([r["score"] for r in rows])


def test_cohort_and_final_step_pick_the_checkpoint(cli):
    code, out, err = cli("instances", *SAMPLE, "--cohort", "64", "--final-step", "100", "--top", "2", "--json")
    assert code == 0, err
    rows = json.loads(out)["instances"]
    assert all(r["cohort"] == 64 and r["checkpoint"] == 96 for r in rows)  # the last completed at or before 100


def _byte_panel(path, rows: list[bytes], covariates=None):
    width = max(map(len, rows))
    tokens = np.full((len(rows), width), -1, dtype=np.int32)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = list(row)
    n = len(rows)
    treatment = [10] * (n // 2) + [NEVER] * (n - n // 2)
    rng = np.random.default_rng(0)
    values = {"loglik": rng.normal(size=(n, 3))}
    create_panel(
        path,
        ids=np.arange(n),
        treatment=treatment,
        steps=[0, 10, 20],
        metrics=["loglik"],
        values=values,
        tokens=tokens,
        lengths=[len(r) for r in rows],
        attrs={"tokenizer": "bytes (token id = UTF-8 byte)"},
    )
    if covariates:
        write_covariates(path, covariates)
    return path


def test_escape_sequences_in_the_text_and_covariates_never_reach_the_terminal(cli, tmp_path):
    rows = [b"\x1b[2J\x1b]0;pwned\x07clear", b"ok \x1b[31mred", "\u202eevil".encode(), b"x\ty", b"a", b"b"]
    kind = np.array(["\x1b[5mblink", "b", "c", "d", "e", "f"], dtype=object)
    path = _byte_panel(tmp_path / "esc.h5", rows, {"kind": kind})
    for extra in ([], ["--json"]):
        code, out, err = cli("instances", path, *extra)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\x1b" not in err
    code, out, _ = cli("instances", path)
    assert "?[2J?]0;pwned?clear" in out and "?[5mblink"[:10] in out


def test_a_panel_without_token_ids_says_so(cli, small_panel):
    code, out, err = cli("instances", small_panel, "--top", "2")
    assert code == 0, err
    assert len(_ranked_lines(out)) == 2 and "(no token ids in the panel)" in out


def test_where_selects_a_subgroup_and_shows_the_covariate(cli, tmp_path):
    rows = [b"alpha", b"beta", b"gamma", b"delta", b"eps", b"zeta", b"eta", b"theta"]
    path = _byte_panel(tmp_path / "cov.h5", rows, {"length": np.array([len(r) for r in rows], float)})
    code, out, err = cli("instances", path, "--where", "length>=5", "--json")
    assert code == 0, err
    found = json.loads(out)["instances"]
    assert {r["text"] for r in found} == {"alpha", "gamma", "delta"}
    assert all(r["covariates"]["length"] >= 5 for r in found)
    code, out, _ = cli("instances", path, "--where", "length>=5")
    assert " length " in out.splitlines()[1]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--cell", "64"], "COHORT,CHECKPOINT"),
        (["--cell", "a,b"], "COHORT,CHECKPOINT"),
        (["--cell", "64,128", "--cohort", "64"], "not allowed with"),
        (["--cell", "64,128", "--final-step", "200"], "--cell names its checkpoint"),
        (["--cohort", "-8"], "not a checkpoint step"),
        (["--cohort", "63"], "no cohort at step 63"),
        (["--cell", "64,32"], "comes before cohort 64"),
        (["--cell", "64,100"], "no completed checkpoint at step 100"),
        (["--top", "-1"], "--top -1"),
        (["--top", "1e20"], "not a count"),
        (["--where", "length>=3"], "no covariate 'length'"),
        (["--final-step", "-5"], "before the first completed checkpoint"),
        (["--metric", "nope"], "no metric 'nope'"),
        (["--draws", "10"], "does not take --draws"),
        (["--covariates", "x"], "unrecognized arguments"),
    ],
)
def test_bad_options_are_refused_in_one_line(cli, argv, says, capsys):
    try:
        code, out, err = cli("instances", *SAMPLE, *argv)
    except SystemExit as exc:  # argparse's refusals
        code, captured = exc.code, capsys.readouterr()
        out, err = captured.out, captured.err
    assert code == 2 and not out
    assert says in err and err.count("\n") == 1, err


@pytest.mark.parametrize("where", ["folder", "missing"])
def test_an_output_that_cannot_be_written_is_refused_and_nothing_is_printed(cli, tmp_path, where):
    target = tmp_path if where == "folder" else tmp_path / "no" / "x.csv"
    code, out, err = cli("instances", *SAMPLE, "-o", target)
    assert code == 2 and not out and err.startswith("memtui: ") and err.count("\n") == 1


def test_the_csv_never_replaces_the_panel_or_another_hdf5_file(cli, tmp_path):
    import shutil

    from memtui.panel.samples import sample_paths

    panel = tmp_path / "copy.h5"
    shutil.copy(sample_paths("tiny-gptneox")[0], panel)
    other = tmp_path / "other.h5"
    shutil.copy(panel, other)
    before = panel.read_bytes()
    for target in (panel, other, tmp_path / "." / "copy.h5"):
        code, out, err = cli("instances", panel, "-o", target)
        assert code == 2 and not out and err.count("\n") == 1, err
    assert panel.read_bytes() == before and other.read_bytes() == before
