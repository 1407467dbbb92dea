"""Round 4, the options a verb accepts (issue 33, §2 first case, §5.3, §5.8, §5.10): a shared option a verb cannot
honour is refused in one line with the reason (never accepted and ignored); a covariate the panel does not have is
refused by every verb that takes one; `--sample NAME` works for every verb that reads a panel; `export -B 0` says its
significance is pointwise; a refused run prints its one error line and nothing before it; `memtui nosuchverb` says
there is no such command."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memtui.cli.main import build_parser, main


@pytest.fixture
def panel(small_panel):
    """The small panel with a categorical covariate (clusters inside cohorts) and a continuous one."""
    from memtui.panel.covariates import write_covariates
    from memtui.panel.hdf5 import read_panel

    treatment = read_panel(small_panel).treatment
    i = np.arange(len(treatment))
    grp = np.array([f"{g}-{k % 2}" for g, k in zip(treatment, i, strict=True)])
    write_covariates(small_panel, {"grp": grp, "x": np.random.default_rng(0).normal(size=len(i))})
    return small_panel


def run(capsys, *args) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code, out, err, *expect) -> None:
    assert code == 2 and out == "" and err.startswith("memtui: ") and err.count("\n") == 1, err
    for text in expect:
        assert text in err, err


@pytest.mark.parametrize(
    ("verb", "option", "why"),
    [
        ("sensitivity", ["--cluster", "grp"], "covariance is bootstrapped per instance"),
        ("sensitivity", ["--band", "classic"], "HonestDiD's"),
        ("sensitivity", ["--family", "all"], "HonestDiD's"),
        ("sensitivity", ["--final-step", "3000"], "event times"),
        ("sensitivity", ["--engine", "differences"], "memtui's engine"),
        ("calibrate", ["--cluster", "grp"], "per instance, not per cluster"),
        ("calibrate", ["--family", "all"], "every family"),
        ("calibrate", ["--final-step", "3000"], "every checkpoint"),
        ("calibrate", ["--engine", "differences"], "memtui's engine"),
    ],
)
def test_an_option_the_verb_cannot_honour_is_refused_with_the_reason(capsys, panel, verb, option, why):
    code, out, err = run(capsys, verb, panel, "-B", "20", *option)
    one_line(code, out, err, f"{verb} does not take {option[0]}", why)
    # and it is not offered: the verb's --help does not list it
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[verb]  # noqa: SLF001
    assert option[0] not in sub.format_help()


def test_a_cluster_or_covariate_the_panel_lacks_is_refused_by_every_verb_that_takes_it(capsys, panel, tmp_path):
    for argv in (
        ["estimate", panel, "-B", "20", "--cluster", "nosuch"],
        ["estimate", panel, "-B", "20", "--covariates", "x,nosuch"],
        ["estimate", panel, "-B", "0", "--covariates", "nosuch"],
        ["export", panel, "-o", tmp_path / "e.csv", "-B", "20", "--cluster", "nosuch"],
        ["export", panel, "-o", tmp_path / "e.csv", "-B", "20", "--covariates", "nosuch"],
        ["compare", panel, "-B", "20", "--cluster", "nosuch"],
        ["estimate", panel, "-B", "20", "--by", "x>=0", "--cluster", "nosuch"],
    ):
        one_line(*run(capsys, *argv), "no covariate nosuch for --", "(it has: grp, x)")
    assert not (tmp_path / "e.csv").exists()  # nothing written


def test_compare_refuses_what_its_mode_cannot_honour(capsys, panel, tmp_path):
    other = tmp_path / "other.h5"
    other.write_bytes(panel.read_bytes())
    one_line(*run(capsys, "compare", panel, other, "-B", "20", "--cluster", "grp"), "--cluster is not available")
    one_line(*run(capsys, "compare", panel, other, "-B", "20", "--by", "x>=0", "--cluster", "grp"), "--cluster")
    one_line(*run(capsys, "compare", panel, "-B", "20", "--estimator", "difference"), "drop --estimator")
    one_line(*run(capsys, "compare", panel, "-B", "20", "--final-step", "3000"), "drop --final-step")
    code, out, err = run(capsys, "compare", panel, "-B", "20", "--cluster", "grp", "--band", "classic")
    assert code == 0 and "clustered by grp" in out, err  # one panel: its estimators' bootstrap is clustered


def test_shared_controls_without_by_is_refused(capsys, panel, tmp_path):
    one_line(*run(capsys, "estimate", panel, "-B", "20", "--shared-controls"), "goes with --by")
    one_line(*run(capsys, "export", panel, "-o", tmp_path / "e.csv", "--shared-controls"), "goes with --by")


def test_export_final_step_needs_the_residual_scope(capsys, panel, tmp_path):
    out_csv = tmp_path / "e.csv"
    one_line(*run(capsys, "export", panel, "-o", out_csv, "--final-step", "3000"), "--scope residual")
    assert not out_csv.exists()
    code, _, err = run(capsys, "export", panel, "-o", out_csv, "--all", "-B", "20", "--scope", "residual",
                       "--final-step", "3000")  # fmt: skip
    assert code == 0 and pl.read_csv(out_csv)["checkpoint"].unique().to_list() == [3000], err


def test_no_abbreviated_option_is_taken_for_another(capsys, tmp_path, monkeypatch):
    """`memtui demo --seed 7` was `--seeds` (a seed-suite demo written to ./7); `--draw` was `--draws`."""
    monkeypatch.chdir(tmp_path)
    one_line(*run(capsys, "demo", "--seed", "7"), "unrecognized arguments: --seed")
    one_line(*run(capsys, "estimate", "P.h5", "--draw", "20"), "unrecognized arguments: --draw")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "argv",
    [
        ["info"],
        ["estimate", "-B", "0"],
        ["export", "-o", "{tmp}/s.csv", "-B", "0", "--all"],
        ["compare", "-B", "0"],
        ["plan", "-B", "0"],
        ["calibrate", "--panels", "2", "-B", "20"],
        ["sensitivity", "-B", "40", "--method", "sd", "--grid", "1", "--pre", "1", "--post", "1"],
    ],
)
def test_every_verb_that_reads_a_panel_takes_a_sample(capsys, tmp_path, argv, panel):
    from memtui.panel.samples import sample_path

    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = run(capsys, *argv, "--sample", "synthetic")
    assert code == 0, err
    if argv[0] == "export":  # it names its output; the rows are the sample's 20 cohorts
        assert pl.read_csv(tmp_path / "s.csv")["cohort"].n_unique() == 20
    else:
        assert str(sample_path("synthetic")) in out
    one_line(*run(capsys, *argv, "--sample", "synthetic", panel), "not both")
    one_line(*run(capsys, *argv), "--sample NAME")  # neither: both ways are said


def test_compare_takes_the_shipped_suite(capsys):
    code, out, err = run(capsys, "compare", "--sample", "suite", "-B", "0")
    assert code == 0 and out.startswith("4 models on"), err


def test_export_without_draws_says_pointwise(capsys, panel, tmp_path):
    out_csv = tmp_path / "p.csv"
    code, out, err = run(capsys, "export", panel, "-o", out_csv, "-B", "0", "--all")
    assert code == 0, err
    assert pl.read_csv(out_csv)["band"].unique().to_list() == ["pointwise"]
    assert "pointwise" in out and "calibrated" not in out
    code, out, _ = run(capsys, "export", panel, "-o", out_csv, "-B", "0", "--all", "--by", "x>=0")
    assert code == 0 and pl.read_csv(out_csv)["band"].unique().to_list() == ["pointwise"] and "pointwise" in out
    code, out, _ = run(capsys, "export", panel, "-o", out_csv, "-B", "50", "--all")
    assert pl.read_csv(out_csv)["band"].unique().to_list() == ["calibrated"] and "calibrated simultaneous" in out


def test_a_refused_run_prints_its_error_and_nothing_before_it(capsys, panel):
    # --covariates without --band falls back to the classic band with a note; refused, only the error is printed
    one_line(*run(capsys, "estimate", panel, "-B", "20", "--covariates", "x", "--multiplier", "nosuch"))
    one_line(*run(capsys, "estimate", panel, "-B", "20", "--covariates", "x", "--metric", "nosuch"), "nosuch")
    one_line(*run(capsys, "estimate", panel, "-B", "0", "--covariates", "x", "--cluster", "grp"), "-B")


@pytest.mark.parametrize("word", ["nosuchverb", "frobnicate", "x"])
def test_an_unknown_word_is_no_such_command_or_file(capsys, tmp_path, monkeypatch, word):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, word)
    one_line(code, out, err, f"{word}: no such command or file", "memtui --help")
    assert "memtui sample synthetic" not in err
    code, out, err = run(capsys, "estimat")
    one_line(code, out, err, "no such command or file; did you mean `memtui estimate`?")
