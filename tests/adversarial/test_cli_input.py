"""The panel commands (`info`, `estimate`, `export`, `sample`) against hostile files and options: nothing from a file
reaches the terminal raw, a bad option is one line, and no refused command costs an existing file."""

from __future__ import annotations

import h5py
import numpy as np
import polars as pl
import pytest

from memtui.core.errors import MemtuiError
from memtui.core.memory import MAX_CHECKPOINTS, MAX_INSTANCES, human, physical_memory, require_shape
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER

from .conftest import assert_clean_exit, assert_refused, digest, fill

ESC_TITLE = "\x1b]0;pwned\x07"  # would retitle the terminal
ESC_CLEAR = "\x1b[2J\x1b[H"  # would clear the screen
BIDI = "\u202egnp.exe"  # reads backwards


def _hostile_panel(folder, metric="loglik", attrs=None):
    rng = np.random.default_rng(0)
    treatment = np.repeat([1, 2, NEVER], 8)
    y = rng.normal(size=(len(treatment), 4))
    path = create_panel(folder / "p.h5", ids=range(len(treatment)), treatment=treatment, steps=range(4),
                        metrics=["m"], values={"m": y}, attrs=attrs or {})  # fmt: skip
    with h5py.File(path, "r+") as f:  # memtui refuses to write a hostile name; another program may have
        f["metrics"].move("m", metric)
    return path


@pytest.mark.parametrize(
    "attrs",
    [
        {"model": ESC_TITLE + "gpt"},
        {"command": ESC_CLEAR + "rm -rf ~"},
        {"created": "2024\n\rfake line"},
        {"source": BIDI},
        {"custom": "\x9b31mC1 control"},
        {ESC_TITLE: "a key with escapes"},
    ],
    ids=["model-title", "command-clear", "created-newline", "source-bidi", "custom-c1", "key-escape"],
)
def test_info_strips_control_characters_from_attributes(cli, tmp_path, attrs):
    panel = _hostile_panel(tmp_path, attrs=attrs)
    code, out, err = cli("info", panel)
    assert_clean_exit((code, out, err))
    assert "\u202e" not in out and "\x9b" not in out and "\r" not in out
    shown = [line for line in out.splitlines() if "?" in line]
    assert shown, out  # the attribute is shown, its control characters replaced


@pytest.mark.parametrize("name", [ESC_TITLE + "ll", ESC_CLEAR + "ll", BIDI], ids=["title", "clear", "bidi"])
def test_hostile_metric_name_is_never_printed_raw(cli, tmp_path, name):
    panel = _hostile_panel(tmp_path, metric=name)
    for args in (
        ["info", panel],
        ["estimate", panel, "-B", "0"],
        ["export", panel, "-o", tmp_path / "e.csv", "-B", "0"],
    ):
        code, out, err = cli(*args)
        assert_clean_exit((code, out, err))
        assert "\u202e" not in out + err


def test_unknown_metric_lists_hostile_names_cleanly(cli, tmp_path):
    panel = _hostile_panel(tmp_path, metric=ESC_TITLE)
    err = assert_refused(cli("estimate", panel, "-m", "loglik"), "no metric 'loglik' in this panel")
    assert "?]0;pwned?" in err


def test_default_metric_is_the_first_with_values(cli, tmp_path):
    rng = np.random.default_rng(1)
    treatment = np.repeat([1, 2, NEVER], 10)
    panel = create_panel(tmp_path / "p.h5", ids=range(30), treatment=treatment, steps=range(4),
                         metrics=["loglik", "bleu"], values={"bleu": rng.normal(size=(30, 4))})  # fmt: skip
    code, out, err = cli("estimate", panel, "-B", "0")
    assert_clean_exit((code, out, err))
    assert out.startswith(f"{panel}: bleu (bleu)") and "extract" not in out
    assert_refused(cli("estimate", panel, "-m", "loglik"), "choose a metric that has values")


SAMPLE_BAD = {
    "seed-negative": (["--seed", "-1"], "--seed must be 0 or more, not -1"),
    "cohorts-zero": (["--cohorts", "0"], "--cohorts must be at least 1, not 0"),
    "cohorts-negative": (["--cohorts", "-3"], "--cohorts must be at least 1, not -3"),
    "per-cohort-zero": (["--per-cohort", "0"], "--per-cohort must be at least 1"),
    "never-zero": (["--never", "0"], "--never must be at least 1"),
    "checkpoints-one": (["--checkpoints", "1"], "--checkpoints must be at least 2, not 1"),
    "cohorts-past-checkpoints": (["--cohorts", "25"], "25 cohorts need at least 26 checkpoints"),
    "cohorts-text": (["--cohorts", "many"], "argument --cohorts: 'many' is not a whole number"),
    "cohorts-fraction": (["--cohorts", "2.5"], "'2.5' is not a whole number"),
    "cohorts-inf": (["--cohorts", "inf"], "'inf' is not a whole number"),
    "effect-nan": (["--effect", "nan"], "--effect must be a finite number, not nan"),
    "effect-inf": (["--effect", "inf"], "--effect must be a finite number, not inf"),
    "effect-overflows": (["--effect", "1e308"], "an effect of 1e+308 makes the simulated values overflow"),
    "seed-text": (["--seed", "abc"], "argument --seed: invalid int value: 'abc'"),
    "unknown-kind": (None, "invalid choice: 'real'"),
    "huge-1e5-squared": (["--cohorts", "1e5", "--per-cohort", "1e5", "--checkpoints", "100001"], "of memory"),
    "huge-checkpoints": (["--checkpoints", "1e9"], "instances x 1,000,000,000 checkpoints needs about"),
}


# argparse's own refusals exit from inside the parser: these run as a child process
USAGE = {"cohorts-text", "cohorts-fraction", "cohorts-inf", "seed-text", "unknown-kind"}


@pytest.mark.parametrize(("args", "expect"), SAMPLE_BAD.values(), ids=SAMPLE_BAD.keys())
def test_sample_bad_options(request, cli, memtui, tmp_path, args, expect):
    out = tmp_path / "s.h5"
    argv = ["sample", "real", out] if args is None else ["sample", "synthetic", out, *args]
    run = memtui if request.node.callspec.id in USAGE else cli
    assert_refused(run(*argv), expect)
    assert list(tmp_path.iterdir()) == []


def test_sample_memory_message_says_how_much(cli, tmp_path):
    err = assert_refused(cli("sample", "synthetic", tmp_path / "s.h5", "--never", "1e9", "--checkpoints", "1000"))
    have = physical_memory()
    assert f"this machine has {human(have)}" in err
    # 20 x 20 treated + 1e9 never, x 1000 checkpoints, 8 bytes each, 3 metrics + 3 working matrices
    assert f"needs about {human((400 + 10**9) * 1000 * 8 * 6)} of memory" in err


def test_sample_counts_in_1e_notation(cli, tmp_path):
    code, out, err = cli("sample", "synthetic", tmp_path / "s.h5", "--never", "1e2", "--checkpoints", "21")
    assert_clean_exit((code, out, err))
    assert read_panel(tmp_path / "s.h5").never_treated.sum() == 100


def test_sample_seed_reproduces_exactly(cli, tmp_path):
    for name in ("a.h5", "b.h5"):
        assert_clean_exit(cli("sample", "synthetic", tmp_path / name, "--seed", "7", "--cohorts", "3"))
    a, b = read_panel(tmp_path / "a.h5"), read_panel(tmp_path / "b.h5")
    assert all(np.array_equal(a.metrics[m], b.metrics[m]) for m in a.metrics)
    assert list(a.metrics) == ["accuracy", "loglik", "rank"]  # only metrics that have data


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_sample_output_is_a_folder(cli, tmp_path, force):
    (tmp_path / "out").mkdir()
    assert_refused(cli("sample", "synthetic", tmp_path / "out", *force), "is a folder")
    assert list((tmp_path / "out").iterdir()) == []


def test_sample_in_a_missing_folder(cli, tmp_path):
    assert_refused(cli("sample", "synthetic", tmp_path / "no" / "s.h5"), "is not an existing folder")
    assert not (tmp_path / "no").exists()


def test_sample_keeps_an_existing_file_without_force(cli, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("precious")
    assert_refused(cli("sample", "synthetic", target), "already exists; pass --force")
    assert target.read_text() == "precious"


def test_sample_refused_with_force_keeps_the_old_panel(cli, small_panel):
    before = digest(small_panel)
    assert_refused(cli("sample", "synthetic", small_panel, "--force", "--seed", "-4"), "--seed must be 0 or more")
    assert digest(small_panel) == before


def test_sample_onto_a_readonly_filesystem(cli, readonly_fs):
    where = readonly_fs()
    err = assert_refused(cli("sample", "synthetic", where / "s.h5"), str(where / "s.h5"))
    assert "Read-only file system" in err


def test_sample_onto_a_full_filesystem_keeps_the_old_panel(cli, small_fs):
    where = small_fs("1m")
    assert_clean_exit(cli("sample", "synthetic", where / "s.h5", "--cohorts", "3", "--checkpoints", "4"))
    before = digest(where / "s.h5")
    fill(where)
    err = assert_refused(cli("sample", "synthetic", where / "s.h5", "--force"), str(where / "s.h5"))
    assert "No space left on device" in err and digest(where / "s.h5") == before
    assert sorted(p.name for p in where.iterdir()) == [".filler", "s.h5"]


def test_estimate_negative_seed_is_one_line(cli, small_panel):
    assert_refused(cli("estimate", small_panel, "--seed", "-1"), "seed")


def test_export_prints_notes_cleanly(cli, tmp_path):
    # cohort 1500 lies between checkpoints 1000 and 2000: the estimate says so, and export repeats it
    treatment = np.repeat([1000, 1500, NEVER], 10)
    y = np.random.default_rng(2).normal(size=(30, 4))
    panel = create_panel(tmp_path / "p.h5", ids=range(30), treatment=treatment, steps=[0, 1000, 2000, 3000],
                         metrics=["y"], values={"y": y})  # fmt: skip
    code, out, err = cli("export", panel, "-o", tmp_path / "e.csv", "-B", "0", "--all")
    assert_clean_exit((code, out, err))
    assert "estimates of y to" in out and "between" in out
    assert pl.read_csv(tmp_path / "e.csv").height > 0


def test_info_counts_folded_cohorts(cli, tmp_path):
    treatment = np.array([500, 1000, 1500, 2500, 9000, NEVER])
    path = create_panel(tmp_path / "p.h5", ids=range(6), treatment=treatment, steps=[0, 1000, 2000],
                        values={"y": np.zeros((6, 3))})  # fmt: skip
    code, out, err = cli("info", path)
    assert_clean_exit((code, out, err))
    # 500 and 1500 fold forward; 2500 and 9000 lie after the last checkpoint, 1000 is a checkpoint
    assert "folded          2 instances have a treatment step between checkpoints" in out


def test_info_of_a_metric_renamed_in_the_file(cli, small_panel):
    with h5py.File(small_panel, "r+") as f:
        f.move("metrics/rank", "metrics/" + ESC_CLEAR + "rank")
    code, out, err = cli("info", small_panel)
    assert_clean_exit((code, out, err))
    assert "?[2J?[Hrank" in out


def test_full_filesystem_in_a_real_process_exits_cleanly(memtui, small_fs):
    """The whole process, exit included: HDF5 that failed to flush a file must not crash the interpreter later."""
    where = small_fs("1m")
    fill(where, leave=64 * 1024)
    err = assert_refused(memtui("sample", "synthetic", where / "s.h5", timeout=120), str(where / "s.h5"))
    assert "No space left on device" in err
    assert sorted(p.name for p in where.iterdir()) == [".filler"]


@pytest.mark.parametrize(
    ("shape", "expect"),
    [((MAX_INSTANCES + 1, 2), "instances is more than a panel holds"),
     ((10, MAX_CHECKPOINTS + 1), "checkpoints is more than a panel holds")],
    ids=["instances", "checkpoints"],
)  # fmt: skip
def test_shapes_the_file_cannot_store_are_refused(shape, expect):
    with pytest.raises(MemtuiError, match=expect):
        require_shape(*shape, "use fewer")


@pytest.mark.parametrize(
    ("nbytes", "shown"), [(0, "0 bytes"), (1023, "1023 bytes"), (1536, "1.5 KiB"), (5 * 2**40, "5.0 TiB"),
                          (2**70, "1048576.0 PiB")],
)  # fmt: skip
def test_sizes_are_shown_in_binary_units(nbytes, shown):
    assert human(nbytes) == shown
