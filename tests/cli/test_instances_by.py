"""`memtui instances --by SPEC [--group NAME] [--shared-controls]`: the ranking split into the groups of `estimate --by`
(each row shows its group; --json and -o carry it), one group kept, and the adversarial checklist's classes for the
new options: bad specs, unknown covariates and groups, groups with nothing to score, hostile group names."""

from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl
import pytest

from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.samples import sample_paths


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """The tiny GPT-NeoX sample with a categorical `kind` (three levels) and a numeric `x`."""
    path = tmp_path_factory.mktemp("instances-by") / "tiny.h5"
    shutil.copy(sample_paths("tiny-gptneox")[0], path)
    n = read_panel(path).n_instances
    rng = np.random.default_rng(4)
    kind = np.array(["prose", "code", "list"], dtype=object)[rng.integers(0, 3, n)]
    write_covariates(path, {"kind": kind, "x": rng.normal(size=n)})
    return path


def _run(cli, capsys, *argv):
    try:
        return cli("instances", *argv)
    except SystemExit as exc:  # argparse's refusals
        captured = capsys.readouterr()
        return exc.code, captured.out, captured.err


def _listed(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["rank", "id", "group"]) + 1
    return [line for line in lines[start:] if line[:5].strip().isdigit()]


def test_each_row_shows_its_group_in_the_listing_json_and_csv(cli, grouped, tmp_path):
    code, out, err = cli("instances", grouped, "--by", "kind", "--cell", "64,128", "--top", "0")
    assert code == 0, err
    assert "by kind: kind=code " in out and "each group against its own never-trained ones" in out
    listed = [line.split()[2] for line in _listed(out)]
    out_csv = tmp_path / "by.csv"
    argv = ("instances", grouped, "--by", "kind", "--cell", "64,128", "--top", "0")
    code, out, err = cli(*argv, "--json", "-o", out_csv)
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["instances"]
    assert [r["group"] for r in rows] == listed and set(listed) == {"kind=code", "kind=list", "kind=prose"}
    assert doc["by"] == "kind" and {g["group"] for g in doc["groups"]} == set(listed)
    assert sum(g["n_scored"] for g in doc["groups"]) == doc["n_scored"] == len(rows) == 48
    controls = {g["group"]: g["n_controls"] for g in doc["groups"]}
    assert all(r["n_controls"] == controls[r["group"]] for r in rows) and sum(controls.values()) == 512
    kinds = dict(zip(read_panel(grouped).ids.tolist(), read_panel(grouped).covariates["kind"], strict=True))
    assert all(r["group"] == f"kind={kinds[r['id']]}" for r in rows)
    table = pl.read_csv(out_csv)
    assert table.columns[0] == "group" and table["group"].to_list() == listed
    assert table["n_controls"].to_list() == [r["n_controls"] for r in rows]


def test_group_keeps_one_group_with_the_scores_the_split_gave_it(cli, grouped):
    code, out, err = cli("instances", grouped, "--by", "x:tertiles", "--top", "0", "--json")
    assert code == 0, err
    every = json.loads(out)
    name = every["groups"][1]["group"]
    assert name.startswith("x in [")
    code, out, err = cli("instances", grouped, "--by", "x:tertiles", "--group", name, "--top", "0", "--json")
    assert code == 0, err
    one = json.loads(out)
    mine = [(r["id"], r["score"], r["p_ctrl"]) for r in every["instances"] if r["group"] == name]
    assert [(r["id"], r["score"], r["p_ctrl"]) for r in one["instances"]] == mine and mine
    assert [g["group"] for g in one["groups"]] == [name]


def test_shared_controls_rank_every_group_against_all_the_controls(cli, grouped):
    code, out, err = cli("instances", grouped, "--by", "kind", "--shared-controls", "--top", "0", "--json")
    assert code == 0, err
    shared = json.loads(out)
    code, out, err = cli("instances", grouped, "--top", "0", "--json")
    whole = {r["id"]: r["score"] for r in json.loads(out)["instances"]}
    assert shared["shared_controls"] and shared["n_controls"] == 512
    assert {r["id"]: r["score"] for r in shared["instances"]} == pytest.approx(whole)
    code, out, err = cli("instances", grouped, "--by", "kind", "--shared-controls", "--top", "3")
    assert "all never-trained instances (shared controls)" in out and "less the 512 never-trained" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--by", "kind:quartiles"], "categorical; bins need numbers"),
        (["--by", "nope"], "no covariate 'nope' to group by"),
        (["--by", "x>=abc"], "not a finite number"),
        (["--by", "x>=nan"], "not a finite number"),
        (["--by", "x:1e20"], "a count from 2 to 64"),
        (["--by", "x"], "bin it"),
        (["--by", "x>=1e9"], "makes 1 group(s)"),
        (["--by", ">=3"], "not a subgroup spec"),
        (["--by", "../kind"], "--by '../kind'"),
        (["--by", "k" * 300], "--by '"),
        (["--by", "kind", "--group", "kind=poetry"], "has no group 'kind=poetry'; its groups are kind=code"),
        (["--by", "kind", "--group", "prose"], "its groups are kind=code, kind=list, kind=prose"),
        (["--group", "kind=prose"], "--group NAME goes with --by SPEC"),
        (["--shared-controls"], "--shared-controls goes with --by SPEC"),
        (["--by", ""], "--by is empty"),
        (["--by", " "], "--by is empty"),
        (["--by", "kind", "--group", ""], "--group is empty"),
        (["--by", "kind", "--group", "kind=prose", "--cohort", "63"], "no cohort at step 63"),
        (["--by", "kind", "--cohort", "63"], "no group has an instance to score; group kind=code left out"),
        (["--by", "kind", "--where", "x>=1e9"], "no group has an instance to score"),
        (["--by", "kind", "--draws", "10"], "does not take --draws"),
    ],
)
def test_bad_splits_and_groups_are_refused_in_one_line(cli, grouped, capsys, argv, says, tmp_path):
    out_csv = tmp_path / "never.csv"
    code, out, err = _run(cli, capsys, grouped, *argv, "-o", out_csv)
    assert code == 2 and not out, (out, err)
    assert says in err and err.startswith("memtui: ") and err.count("\n") == 1, err
    assert len(err) < 400 and not out_csv.exists()


def _hostile_panel(path):
    """Eight byte-text instances, four trained at step 10, with a categorical covariate whose levels are hostile."""
    rows = [b"alpha", b"beta", b"gamma", b"delta", b"eps", b"zeta", b"eta", b"theta"]
    tokens = np.full((len(rows), 5), -1, dtype=np.int32)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = list(row)
    n = len(rows)
    create_panel(
        path,
        ids=np.arange(n),
        treatment=[10] * 4 + [NEVER] * 4,
        steps=[0, 10, 20],
        metrics=["loglik"],
        values={"loglik": np.random.default_rng(0).normal(size=(n, 3))},
        tokens=tokens,
        lengths=[len(r) for r in rows],
        attrs={"tokenizer": "bytes (token id = UTF-8 byte)"},
    )
    evil = ["\x1b[2J\x1b]0;pwned\x07", "line\nbreak\r", "\u202eevil", "x" * 300]
    write_covariates(path, {"kind": np.array(evil + evil, dtype=object)})
    return path


def test_hostile_group_names_never_reach_the_terminal_raw(cli, tmp_path, capsys):
    path = _hostile_panel(tmp_path / "evil.h5")
    out_csv = tmp_path / "evil.csv"
    for extra in ([], ["--json"], ["-o", out_csv]):
        code, out, err = cli("instances", path, "--by", "kind", *extra)
        assert code == 0, err
        for bad in ("\x1b", "\x07", "\u202e", "\r", "line\nbreak"):
            assert bad not in out and bad not in err
    assert "?[2J?]0;pwned?" in out_csv.read_text() and "\u202e" not in out_csv.read_text()
    code, out, err = cli("instances", path, "--by", "kind")
    assert max(len(line) for line in out.splitlines()[2:-4]) < 200  # a 300-character level is cut in the listing
    # a group named as printed is found again; a raw escape in --group is never echoed back
    code, out, err = _run(cli, capsys, path, "--by", "kind", "--group", "\x1b[31mred")
    assert code == 2 and "\x1b" not in err and err.count("\n") == 1
    code, out, err = cli("instances", path, "--by", "kind", "--group", "kind=?[2J?]0;pwned?", "--json")
    assert code == 0, err
    assert {r["group"] for r in json.loads(out)["instances"]} == {"kind=?[2J?]0;pwned?"}
