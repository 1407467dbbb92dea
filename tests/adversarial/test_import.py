"""`memtui import` against hostile tables: every bad one is refused in one line, writes nothing and loses nothing; a
good one round-trips exactly, and what the import had to interpret (dropped units, folded cohorts) is said."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER

from .conftest import assert_clean_exit, assert_refused, digest, fill

DATA = Path(__file__).parents[1] / "data"
MPDTA = ["--unit", "countyreal", "--time", "year", "--treatment", "first.treat", "--never-value", "0"]
G = ["--treatment", "g"]

# A small, valid long table: units 1-2 treated at step 1, unit 3 at step 2, units 4-5 never (-1); steps 0, 1, 2.
TREAT = {1: 1, 2: 1, 3: 2, 4: -1, 5: -1}


def _long(treat: dict, steps=(0, 1, 2)) -> str:
    """A long table, one row per unit and step, y = 10 * unit + step."""
    return "u,step,g,y\n" + "".join(f"{u},{t},{g},{u * 10 + t}\n" for u, g in treat.items() for t in steps)


GOOD = _long(TREAT)


def _csv(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _good_with(replace: dict[str, str]) -> str:
    """GOOD with some rows replaced, keyed by their first two fields ("unit,step")."""
    lines = GOOD.splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        key = ",".join(line.split(",")[:2])
        out.append(replace.get(key, line))
    return "\n".join(out) + "\n"


# (table text, extra arguments, what the one-line refusal must say)
BAD_TABLES = {
    "header-only": ("u,step,g,y\n", G, "has no rows"),
    "duplicate-unit-time": (GOOD + "1,0,1,99\n", G, "pairs appear more than once (2 rows)"),
    "unknown-unit": (GOOD, ["--unit", "nope", *G], "no column 'nope' for --unit"),
    "unknown-time": (GOOD, ["--time", "nope", *G], "no column 'nope' for --time"),
    "unknown-treatment": (GOOD, ["--treatment", "nope"], "no column 'nope' for --treatment"),
    "unknown-metric": (GOOD, [*G, "--metrics", "y,nope"], "no metric column nope in the table"),
    "unit-is-time": (GOOD, ["--unit", "step", *G], "must name different columns"),
    "metric-is-treatment": (GOOD, [*G, "--metrics", "g"], "is the unit, time or treatment column"),
    "lower-is-better-unknown": (GOOD, [*G, "--lower-is-better", "rank"], "'rank', which is not an imported metric"),
    "time-strings": (_good_with({"1,1": "1,one,1,11"}), G, "must hold integer checkpoint steps: 1 cells are not"),
    "time-nan": (_good_with({"1,1": "1,NaN,1,11"}), G, "1 rows have no value in column 'step'"),
    "time-empty": (_good_with({"1,1": "1,,1,11"}), G, "1 rows have no value in column 'step', which must hold"),
    "time-inf": (_good_with({"1,1": "1,inf,1,11"}), G, "1 are not whole numbers (first: inf)"),
    "time-fractional": (_good_with({"1,1": "1,0.5,1,11"}), G, "1 are not whole numbers (first: 0.5)"),
    "time-huge": (_good_with({"1,1": "1,1e300,1,11"}), G, "not whole numbers (first: 1e+300)"),
    "treatment-changes": (_good_with({"1,2": "1,2,2,12"}), G, "changes over time for 1 units"),
    "treatment-empty": (_good_with({"1,0": "1,0,,10"}), G, "1 rows (1 units) have no value in treatment column"),
    "treatment-NA": (_good_with({"3,0": "3,0,NA,30"}), G, "pass --drop-missing-treatment"),
    "treatment-nan": (_good_with({"2,2": "2,2,nan,22"}), G, "have no value in treatment column 'g'"),
    "treatment-text": (_good_with({"1,0": "1,0,early,10"}), G, "1 cells are not numbers (first: 'early')"),
    "treatment-fractional": (_long({**TREAT, 2: 1.5}), G, "1 are not whole numbers (first: 1.5)"),
    "treatment-negative": (_long({**TREAT, 3: -5}), G, "1 units have a negative treatment step in 'g' (first: -5)"),
    "treatment-infinite": (_long({**TREAT, 3: "inf"}), G, "are not whole numbers (first: inf)"),
    "treatment-huge": (_long({**TREAT, 3: "1e300"}), G, "are not whole numbers (first: 1e+300)"),
    "no-never-treated": (_long({**TREAT, 4: 2, 5: 2}), G, "no never-treated units, so there is no control group"),
    "zero-needs-never-value": (_long({**TREAT, 4: 0, 5: 0}), G, "--never-value (e.g. 0)"),
    "all-never-treated": (_long(dict.fromkeys(TREAT, -1)), G, "every unit is never treated"),
    "metric-text": (_good_with({"2,1": "2,1,1,abc"}), [*G, "--metrics", "y"], "(first: 'abc')"),
    "metric-infinite": (_good_with({"2,1": "2,1,1,-inf"}), G, "metric column 'y' has 1 infinite values"),
    "metric-all-empty": ("u,step,g,z\n1,0,1,\n2,0,-1,\n", [*G, "--metrics", "z"], "metric column 'z' has no values"),
    "no-metric-column": ("u,step,g\n1,0,1\n", G, "no numeric metric column"),
    "unit-empty": (_good_with({"1,0": ",0,1,10"}), G, "have no value in column 'u', which must hold unit ids"),
    "metric-name-slash": (GOOD.replace(",y\n", ",a/b\n", 1), G, "containing '/'"),
    "metric-name-escape": (GOOD.replace(",y\n", ",\x1b[31my\n", 1), G, "it contains control characters"),
    "metric-name-bell": (GOOD.replace(",y\n", ",\x1b]0;pwned\x07\n", 1), G, "it contains control characters"),
    "header-escape-listed": ("\x1b[2J\x1b]0;x\x07,step,g\n1,0,1\n", ["--unit", "u", *G], "no column 'u' for --unit"),
    "treatment-and-seq-idx": (GOOD, [*G, "--from-seq-idx"], "either --treatment COLUMN or --from-seq-idx, not both"),
    "no-treatment-source": (GOOD, [], "say where treatment steps come from"),
    "never-value-nan": (GOOD, [*G, "--never-value", "nan"], "--never-value nan matches nothing"),
}
SEQ = "seq_idx,step,loglik\n0,0,-3\n0,1000,-2\n-1,0,-4\n-1,1000,-4\n"
BAD_SEQ = {
    "batch-size-zero": (SEQ, ["--batch-size", "0"], "--batch-size must be a positive whole number, not 0"),
    "batch-size-negative": (SEQ, ["--batch-size", "-3"], "--batch-size must be a positive whole number, not -3"),
    "macro-steps-zero": (SEQ, ["--macro-steps", "0"], "--macro-steps must be a positive whole number, not 0"),
    "macro-batch-overflow": (SEQ, ["--batch-size", str(2**40), "--macro-steps", str(2**40)], "larger than any"),
    "seq-idx-text": (SEQ.replace("\n0,0,", "\nfirst,0,"), [], "must hold integer sequence indices"),
    "seq-idx-fractional": (SEQ.replace("\n0,0,", "\n0.5,0,"), [], "1 are not whole numbers (first: 0.5)"),
    "seq-idx-beyond-int64": (SEQ.replace("\n0,0,", "\n99999999999999999999,0,"), [], "beyond the 64-bit range"),
}


@pytest.mark.parametrize(("table", "args", "expect"), BAD_TABLES.values(), ids=BAD_TABLES.keys())
def test_bad_table_is_refused_and_writes_nothing(cli, tmp_path, table, args, expect):
    out = tmp_path / "p.h5"
    assert_refused(cli("import", _csv(tmp_path, table), out, "--unit", "u", *args), expect)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]  # no panel, no temporary file


@pytest.mark.parametrize(("table", "args", "expect"), BAD_SEQ.values(), ids=BAD_SEQ.keys())
def test_bad_pythia_table_is_refused(cli, tmp_path, table, args, expect):
    assert_refused(cli("import", _csv(tmp_path, table), tmp_path / "p.h5", "--from-seq-idx", *args), expect)
    assert not (tmp_path / "p.h5").exists()


def test_escape_sequences_in_header_never_reach_the_terminal(cli, tmp_path):
    table = _csv(tmp_path, "\x1b]0;pwned\x07,\u202eevil,step\n1,2,0\n")
    err = assert_refused(cli("import", table, tmp_path / "p.h5", "--treatment", "g"), "no column 'seq_idx'")
    assert "?]0;pwned?" in err and "\u202e" not in err


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"", "is empty; expected a CSV or parquet table"),
        (b"\x00\xff\xfe\x1b[31m\x89PNG\r\n\x1a\n\x00junk\xc3\x28\n", "cannot read the table"),
        (bytes(range(256)) * 8, "cannot read the table"),
    ],
    ids=["empty-file", "binary-junk", "all-bytes"],
)
def test_unreadable_file(cli, tmp_path, content, expect):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    assert_refused(cli("import", path, tmp_path / "p.h5", "--from-seq-idx"), expect)


def test_csv_named_parquet(cli, tmp_path):
    path = _csv(tmp_path, SEQ, "t.parquet")
    assert_refused(cli("import", path, tmp_path / "p.h5", "--from-seq-idx"), "cannot read the table")


def test_truncated_parquet(cli, tmp_path):
    path = tmp_path / "t.parquet"
    pl.read_csv(SEQ.encode()).write_parquet(path)
    path.write_bytes(path.read_bytes()[:-40])
    assert_refused(cli("import", path, tmp_path / "p.h5", "--from-seq-idx"), "cannot read the table")


PARQUET_TYPES = {
    "time-as-text": ("step", pl.Series(["0", "a"]), "must hold integer checkpoint steps: 1 cells are not numbers"),
    "time-as-date": ("step", pl.Series([0, 1]).cast(pl.Date), "must hold integer checkpoint steps, not Date values"),
    "treatment-as-bool": ("g", pl.Series([True, False]), "must hold integer treatment steps, not Boolean values"),
    "metric-as-list": ("y", pl.Series([[1.0], [2.0]]), "must hold numbers, not List(Float64) values"),
}


@pytest.mark.parametrize(("column", "values", "expect"), PARQUET_TYPES.values(), ids=PARQUET_TYPES.keys())
def test_parquet_with_wrong_types(cli, tmp_path, column, values, expect):
    frame = pl.DataFrame({"u": [1, 2], "step": [0, 1], "g": [1, -1], "y": [0.5, 0.25]})
    path = tmp_path / "t.parquet"
    frame.with_columns(values.alias(column)).write_parquet(path)
    assert_refused(cli("import", path, tmp_path / "p.h5", "--unit", "u", *G, "--metrics", "y"), expect)


def test_missing_table(cli, tmp_path):
    assert_refused(cli("import", tmp_path / "nope.csv", tmp_path / "p.h5", *G), "no such file")


def test_table_path_is_a_folder(cli, tmp_path):
    assert_refused(cli("import", tmp_path, tmp_path / "p.h5", *G), "is a folder; give the CSV or parquet file")


@pytest.mark.parametrize("device", ["/dev/zero", "fifo"])
def test_table_that_never_ends_is_refused_not_read(memtui, tmp_path, device):
    if device == "fifo":
        device = tmp_path / "pipe.csv"
        os.mkfifo(device)  # nobody writes: reading it would block forever
    assert_refused(memtui("import", device, tmp_path / "p.h5", *G, timeout=60), "is not a regular file")


def test_panel_in_a_missing_folder(cli, tmp_path):
    table = _csv(tmp_path, GOOD)
    assert_refused(cli("import", table, tmp_path / "no" / "p.h5", "--unit", "u", *G), "is not an existing folder")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_output_is_a_folder(cli, tmp_path, force):
    (tmp_path / "out.h5").mkdir()
    (tmp_path / "out.h5" / "keep.txt").write_text("mine")
    table = _csv(tmp_path, GOOD)
    assert_refused(cli("import", table, tmp_path / "out.h5", "--unit", "u", *G, *force), "is a folder")
    assert (tmp_path / "out.h5" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("via", ["same-path", "symlink", "hardlink"])
def test_output_is_the_table(cli, tmp_path, via):
    table = _csv(tmp_path, GOOD)
    out = table if via == "same-path" else tmp_path / "p.h5"
    if via == "symlink":
        out.symlink_to(table)
    elif via == "hardlink":
        os.link(table, out)
    before = digest(table)
    assert_refused(cli("import", table, out, "--unit", "u", *G, "--force"), "is the table being imported")
    assert digest(table) == before


def test_panel_inside_a_file(cli, tmp_path):
    table = _csv(tmp_path, GOOD)
    assert_refused(cli("import", table, table / "p.h5", "--unit", "u", *G), "is not an existing folder")


def _existing_panel(cli, folder: Path) -> Path:
    panel = folder / "old.h5"
    assert_clean_exit(cli("import", _csv(folder, GOOD, "old.csv"), panel, "--unit", "u", *G))
    return panel


def test_existing_panel_is_kept_without_force(cli, tmp_path):
    panel = _existing_panel(cli, tmp_path)
    before = digest(panel)
    assert_refused(cli("import", _csv(tmp_path, GOOD), panel, "--unit", "u", *G), "already exists; pass --force")
    assert digest(panel) == before


@pytest.mark.parametrize(
    "name", ["treatment-empty", "metric-text", "no-never-treated", "time-fractional", "duplicate-unit-time"]
)
def test_force_onto_a_panel_refused_for_another_reason_keeps_it(cli, tmp_path, name):
    panel = _existing_panel(cli, tmp_path)
    before = digest(panel)
    table, args, expect = BAD_TABLES[name]
    assert_refused(cli("import", _csv(tmp_path, table), panel, "--unit", "u", *args, "--force"), expect)
    assert digest(panel) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv", "old.h5", "t.csv"]


def test_readonly_filesystem(cli, tmp_path, readonly_fs):
    table = _csv(tmp_path, GOOD)
    where = readonly_fs()
    assert_refused(cli("import", table, where / "p.h5", "--unit", "u", *G), "Read-only file system")
    assert not (where / "p.h5").exists()


def test_readonly_filesystem_keeps_the_old_panel(cli, tmp_path, readonly_fs):
    table = _csv(tmp_path, GOOD)
    where = readonly_fs(lambda folder: _existing_panel(cli, folder))
    before = digest(where / "old.h5")
    err = assert_refused(cli("import", table, where / "old.h5", "--unit", "u", *G, "--force"), str(where / "old.h5"))
    assert "Read-only file system" in err and digest(where / "old.h5") == before


def test_full_filesystem_keeps_the_old_panel(cli, tmp_path, small_fs):
    where = small_fs("1m")
    panel = _existing_panel(cli, where)
    before = digest(panel)
    fill(where)
    table = _csv(tmp_path, GOOD)
    err = assert_refused(cli("import", table, panel, "--unit", "u", *G, "--force"), str(panel))
    assert "No space left on device" in err and digest(panel) == before
    assert sorted(p.name for p in where.iterdir()) == [".filler", "old.csv", "old.h5"]  # no temporary file left


def test_a_sparse_table_too_big_for_memory_is_refused_up_front(cli, tmp_path):
    # every unit at its own time: units x times cells, far more than this machine holds
    n = 300_000
    frame = pl.DataFrame({"u": np.arange(n), "step": np.arange(n), "g": np.full(n, -1), "y": np.zeros(n)})
    frame = frame.with_columns(g=pl.when(pl.col("u") % 2 == 0).then(5).otherwise(-1))
    path = tmp_path / "t.parquet"
    frame.write_parquet(path)
    assert_refused(cli("import", path, tmp_path / "p.h5", "--unit", "u", *G), "of memory, this machine has")


# --- what a good table becomes: exact values, and what was interpreted is said ---


def test_mpdta_round_trips_exactly(cli, tmp_path):
    out = tmp_path / "m.h5"
    code, text, err = cli("import", DATA / "mpdta.csv", out, *MPDTA, "--metrics", "lemp")
    assert_clean_exit((code, text, err))
    assert "500 instances (191 treated in 3 cohorts, 309 never treated), 5 checkpoints, metrics lemp" in text
    table = pl.read_csv(DATA / "mpdta.csv")
    panel = read_panel(out)
    assert list(panel.metrics) == ["lemp"]  # only the metric that has data, no empty loglik/rank/...
    assert list(panel.ids) == sorted(table["countyreal"].unique())
    first = dict(table.select("countyreal", "first.treat").unique().iter_rows())
    expected_g = [NEVER if first[i] == 0 else first[i] for i in panel.ids]
    assert list(panel.treatment) == expected_g
    wide = table.pivot(on="year", index="countyreal", values="lemp").sort("countyreal")
    np.testing.assert_array_equal(panel.metrics["lemp"], wide.select(map(str, panel.steps)).to_numpy())


def test_default_metric_of_an_imported_panel_estimates_without_extraction_advice(cli, tmp_path):
    out = tmp_path / "m.h5"
    assert_clean_exit(cli("import", DATA / "mpdta.csv", out, *MPDTA))
    code, text, err = cli("estimate", out, "-B", "0")
    assert_clean_exit((code, text, err))
    assert text.splitlines()[0].endswith("engine memtui") and ": lemp (lemp)" in text
    assert "extract" not in text + err


def test_missing_treatment_dropped_on_request_and_counted(cli, tmp_path):
    table = _csv(tmp_path, _good_with({"1,0": "1,0,,10", "4,2": "4,2,NA,42"}))
    out = tmp_path / "p.h5"
    code, text, err = cli("import", table, out, "--unit", "u", *G, "--drop-missing-treatment")
    assert_clean_exit((code, text, err))
    assert "dropped 2 units (6 rows) with no treatment value" in text
    panel = read_panel(out)
    assert list(panel.ids) == [2, 3, 5] and list(panel.treatment) == [1, 2, NEVER]
    np.testing.assert_array_equal(panel.metrics["y"], [[20, 21, 22], [30, 31, 32], [50, 51, 52]])


def test_minus_one_and_named_never_values(cli, tmp_path):
    table = _csv(tmp_path, _long({**TREAT, 4: "inf"}))
    out = tmp_path / "p.h5"
    assert_clean_exit(cli("import", table, out, "--unit", "u", *G, "--never-value", "inf"))
    assert list(read_panel(out).treatment) == [1, 1, 2, NEVER, NEVER]


def test_cohort_between_checkpoints_is_folded_and_counted(cli, tmp_path):
    table = _csv(tmp_path, _long({1: 1000, 2: 1500, 3: 1500, 4: -1, 5: -1}, steps=(0, 1000, 2000)))
    out = tmp_path / "p.h5"
    code, text, err = cli("import", table, out, "--unit", "u", *G)
    assert_clean_exit((code, text, err))
    assert "2 instances have a treatment step between checkpoints: each counts from the next checkpoint" in text
    assert list(read_panel(out).treatment) == [1000, 1500, 1500, NEVER, NEVER]  # stored as given, mapped on use
    code, text, _ = cli("info", out)
    assert code == 0 and "folded          2 instances have a treatment step between checkpoints" in text


def test_non_numeric_and_huge_unit_ids_are_numbered_and_said(cli, tmp_path):
    text = "u,step,g,y\n" + "".join(
        f"{u},{t},{g},{t}\n" for u, g in [("alice", 1), ("99999999999999999999", 1), ("bob", -1)] for t in range(3)
    )
    out = tmp_path / "p.h5"
    code, printed, err = cli("import", _csv(tmp_path, text), out, "--unit", "u", *G)
    assert_clean_exit((code, printed, err))
    assert "instances are numbered 0.. in the sorted order of the ids" in printed
    panel = read_panel(out)
    assert list(panel.ids) == [0, 1, 2] and list(panel.treatment) == [1, 1, NEVER]


def test_single_checkpoint_imports_and_estimation_explains(cli, tmp_path):
    out = tmp_path / "p.h5"
    table = _csv(tmp_path, "u,step,g,y\n1,0,0,1.5\n2,0,-1,2.5\n")
    assert_clean_exit(cli("import", table, out, "--unit", "u", *G))
    assert_clean_exit(cli("info", out))
    assert_refused(cli("estimate", out, "-B", "0"), "only 1 completed checkpoint")


def test_non_numeric_columns_left_out_are_named(cli, tmp_path):
    table = _csv(tmp_path, "u,step,g,y,name\n" + "".join(
        f"{line},n{i}\n" for i, line in enumerate(GOOD.splitlines()[1:])))  # fmt: skip
    code, printed, err = cli("import", table, tmp_path / "p.h5", "--unit", "u", *G)
    assert_clean_exit((code, printed, err))
    assert "not imported (not numeric): name" in printed


def test_pythia_steps_exact(cli, tmp_path):
    rows = [(s, step, float(s + step)) for s in (0, 7, 8, 15, 16, -1, -2) for step in (0, 2, 4)]
    path = tmp_path / "t.parquet"
    pl.DataFrame(rows, schema=["seq_idx", "step", "loglik"], orient="row").write_parquet(path)
    out = tmp_path / "p.h5"
    assert_clean_exit(cli("import", path, out, "--from-seq-idx", "--batch-size", "4", "--macro-steps", "2"))
    panel = read_panel(out)
    assert list(panel.ids) == [-2, -1, 0, 7, 8, 15, 16]
    assert list(panel.treatment) == [NEVER, NEVER, 2, 2, 4, 4, 6]
    np.testing.assert_array_equal(panel.metrics["loglik"][3], [7, 9, 11])


def test_whole_float_steps_and_empty_metric_cells_are_fine(cli, tmp_path):
    table = _csv(tmp_path, _good_with({"1,1": "1,1.0,1,", "2,2": "2,2.0,1.0,NA"}))
    out = tmp_path / "p.h5"
    assert_clean_exit(cli("import", table, out, "--unit", "u", *G))
    y = read_panel(out).metrics["y"]
    assert np.isnan(y[0, 1]) and np.isnan(y[1, 2]) and np.isfinite(y).sum() == 13


def test_full_filesystem_in_a_real_process_keeps_the_old_panel(cli, memtui, tmp_path, small_fs):
    where = small_fs("1m")
    panel = _existing_panel(cli, where)
    before = digest(panel)
    fill(where, leave=1024)
    table = _csv(tmp_path, GOOD)
    err = assert_refused(memtui("import", table, panel, "--unit", "u", *G, "--force", timeout=120), str(panel))
    assert "No space left on device" in err and digest(panel) == before
