"""Round 4's statistics cases (issue 33): numbers that were silently wrong and verdicts the data cannot support.
Each case is run as a user runs it (the CLI in-process) and refused in one line or answered correctly: a robust
interval at Mbar = 0 whatever else the grid holds, event-time counts from 1 to what the panel has, no band for a
difference with a group that has no variance, no clustered bootstrap that cannot vary, no calibration verdict from
too few panels, and a comparison that says which checkpoints its panels share."""

from __future__ import annotations

import re

import numpy as np
import pytest

from memtui.engine.band_registry import BANDS
from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER

from .conftest import assert_clean_exit, assert_refused

FAST = ("-B", "200", "--no-cache")


# -- sensitivity: each Mbar's theta grid; grids and counts that cannot be honoured --------------------------------


def _rows(out: str) -> dict[str, tuple[float, float] | None]:
    """The robust-CI table: parameter -> (low, high), None for an n/a row."""
    rows = {}
    for m in re.finditer(r"^\s+(\S+)\s+\[(\S+), (\S+)\]", out, re.MULTILINE):
        rows[m[1]] = None if m[2] == "n/a" else (float(m[2]), float(m[3]))
    return rows


def test_a_large_mbar_leaves_mbar_0_the_ordinary_interval(cli, small_panel):
    """`--grid 0,1,10000` once inverted Mbar = 0 over Mbar = 10000's theta grid: [n/a, n/a], "not significant even
    under exact parallel trends", beside an ordinary interval of [17.2, 22.7]."""
    result = cli("sensitivity", small_panel, "--method", "rm", "--grid", "0,1,10000", *FAST)
    assert_clean_exit(result)
    ordinary = re.search(r"CI under parallel trends \[(\S+), (\S+)\]", result[1])
    low, high = float(ordinary[1]), float(ordinary[2])
    rows = _rows(result[1])
    assert rows["0"] is not None, result[1]
    sd = (high - low) / (2 * 1.96)
    assert rows["0"] == pytest.approx((low, high), abs=0.1 * sd)
    assert rows["1"] is not None and rows["1"][0] > 0  # significant at Mbar = 1, as the breakdown must then say
    assert "not significant even under exact parallel trends" not in result[1]
    value = float(re.search(r"breakdown value is Mbar = (\S+) ", result[1])[1])
    assert 1 <= value < 10000


@pytest.mark.parametrize(
    "grid, expect",
    [
        ("1e20", "Mbar = 1e+20 is past what the linear programmes can hold"),
        ("0,1e300", "Mbar = 1e+300 is past what"),
        ("0,nan", "must be finite numbers of 0 or more, not nan"),
        ("0,inf", "must be finite numbers of 0 or more, not inf"),
        ("0,-1", "not -1"),
        ("0,1,1", "lists 1 more than once"),
    ],
)
def test_an_mbar_grid_that_cannot_be_honoured_is_refused(cli, small_panel, grid, expect):
    """1e20 and 1e300 ended in IndexError, LinAlgError or a brentq ValueError."""
    assert_refused(cli("sensitivity", small_panel, "--method", "rm", f"--grid={grid}", *FAST), expect)


@pytest.mark.parametrize("grid", ["0,1e20", "0,1e300"])
def test_a_huge_m_is_honoured(cli, small_panel, grid):
    """M is in the metric's units: a huge one is a huge interval, not a brentq traceback."""
    result = cli("sensitivity", small_panel, "--method", "sd", f"--grid={grid}", *FAST)
    assert_clean_exit(result)
    assert "(includes 0)" in result[1] and "n/a" not in result[1]


@pytest.mark.parametrize(
    "option, value, expect",
    [
        ("--pre", "0", "--pre 0: the panel has 4 placebo event time(s); keep from 1 to 4"),
        ("--pre", "-1", "--pre -1: the panel has 4 placebo"),
        ("--post", "-1", "--post -1: the panel has 6 post-treatment event time(s); keep from 1 to 6"),
        ("--post", "0", "--post 0"),
        ("--pre", "5", "--pre 5: the panel has 4"),
        ("--post", "1e3", "--post 1000: the panel has 6"),
    ],
)
def test_event_time_counts_outside_the_panel_are_refused(cli, small_panel, option, value, expect):
    """`--pre 0` silently used every placebo period; `--pre -1` dropped the earliest, `--post -1` the last."""
    assert_refused(cli("sensitivity", small_panel, "--method", "sd", option, value, *FAST), expect)


def test_event_time_counts_within_the_panel_are_kept(cli, small_panel):
    result = cli("sensitivity", small_panel, "--method", "sd", "--pre", "4", "--post", "1", *FAST)
    assert_clean_exit(result)
    assert "4 placebo and 1 post-treatment event times" in result[1]


# -- --by: a difference with a group that has no variance has no band ---------------------------------------------


def _tiny_group(path) -> None:
    """A covariate `grp`: one treated and one never-treated instance form group `tiny`, the rest `big`."""
    panel = read_panel(path)
    grp = np.array(["big"] * panel.n_instances, dtype=object)
    grp[np.flatnonzero(panel.treatment != NEVER)[0]] = "tiny"
    grp[np.flatnonzero(panel.treatment == NEVER)[0]] = "tiny"
    write_covariates(path, {"grp": grp})


@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_a_difference_with_a_group_without_variance_has_no_band(cli, small_panel, band):
    """The group of 1 + 1 showed "se n/a" for itself, yet its difference with the other group had an interval, p = 0
    and "exceeds ... at 3 of 4 checkpoints": the other group's spread alone."""
    _tiny_group(small_panel)
    result = cli("estimate", small_panel, "--by", "grp", "--band", band, *FAST)
    assert_clean_exit(result)
    diff = next(line for line in result[1].splitlines() if line.startswith("difference"))
    assert "[n/a, n/a], p = n/a" in diff, result[1]
    assert "exceeds" not in result[1] and "no band at any of the" in result[1]
    assert "grp=tiny has no sampling variation (se n/a), so no verdict" in result[1]


# -- --cluster: a clustering with no variation to draw from is refused ----------------------------------------------


def _panel_with_batches(path, batch_of) -> None:
    """The small panel rewritten with each trained instance's optimizer step from ``batch_of(treatment, index)``."""
    from memtui.panel.hdf5 import create_panel

    panel = read_panel(path)
    path.unlink()
    trained = panel.treatment != NEVER
    step = np.where(trained, batch_of(panel.treatment, np.arange(panel.n_instances)), -1).astype(np.int64)
    create_panel(path, ids=panel.ids, treatment=panel.treatment, steps=panel.steps, metrics=["loglik"],
                 values={"loglik": panel.metrics["loglik"]}, signs={"loglik": 1},
                 provenance={"step": step})  # fmt: skip


@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_cluster_batch_with_one_batch_per_cohort_is_refused(cli, small_panel, band):
    """The `-k 1` design: every cohort one batch. The calibrated band called every cell "no sampling variation", the
    classic one reported "pre-trends detected" on a panel with none (the treated part vanishes within a cohort)."""
    _panel_with_batches(small_panel, lambda treatment, i: treatment - 1)
    assert_refused(
        cli("estimate", small_panel, "--cluster", "batch", "--band", band, *FAST),
        "--cluster batch: each cohort is one cluster, so the clustered bootstrap has no variation within them",
    )


def test_cluster_batch_with_one_cohort_in_one_batch_names_it(cli, small_panel):
    treatment = read_panel(small_panel).treatment
    first = int(treatment[treatment != NEVER].min())
    _panel_with_batches(small_panel, lambda treatment, i: np.where(treatment == first, 7, 1000 + i))
    assert_refused(
        cli("estimate", small_panel, "--cluster", "batch", "--band", "classic", *FAST),
        f"1 cohort(s) are each one cluster, step (n): {first} (15)",
    )


def test_cluster_batch_with_several_batches_per_cohort_is_estimated(cli, small_panel):
    _panel_with_batches(small_panel, lambda treatment, i: 1000 + i // 3)
    result = cli("estimate", small_panel, "--cluster", "batch", "--band", "classic", *FAST)
    assert_clean_exit(result)


@pytest.mark.parametrize(
    "values, expect",
    [
        (lambda tr: np.full(len(tr), "one", dtype=object), "--cluster site has one level"),
        (lambda tr: tr.astype(str).astype(object), "--cluster site: each cohort is one cluster"),
        (lambda tr: np.where(tr == NEVER, "ctl", np.arange(len(tr)).astype(str)).astype(object),
         "--cluster site: the 40 never-treated controls are one cluster"),
    ],
)  # fmt: skip
def test_a_covariate_cluster_without_variation_is_refused(cli, small_panel, values, expect):
    """A one-level cluster variable gave "se n/a" and "no sampling variation", not a refusal."""
    write_covariates(small_panel, {"site": values(read_panel(small_panel).treatment)})
    for band in ("calibrated", "classic"):
        assert_refused(cli("estimate", small_panel, "--cluster", "site", "--band", band, *FAST), expect)


def test_clusters_spanning_cohorts_are_honoured_by_the_classic_band(cli, small_panel):
    """Clusters that hold instances of several cohorts share a multiplier across their cells (R did's clustervars):
    the classic band takes them, the calibrated one refuses them (its variance parts are per cohort)."""
    write_covariates(small_panel, {"site": (np.arange(read_panel(small_panel).n_instances) % 9).astype(str)})
    assert_clean_exit(cli("estimate", small_panel, "--cluster", "site", "--band", "classic", *FAST))
    assert_refused(cli("estimate", small_panel, "--cluster", "site", *FAST), "some cluster spans several")


# -- calibrate: no verdict from too few null panels -----------------------------------------------------------------


def test_calibrate_on_two_null_panels_gives_no_verdict(cli, small_panel):
    """2 panels once read "classic band: post 50.0 ± 35.4 % ... holds its level at this design"."""
    result = cli("calibrate", small_panel, "--panels", "2", "-B", "100", "--no-cache")
    assert_clean_exit(result)
    out = result[1]
    assert "holds its level" not in out and "over-rejects" not in out and "!" not in out.split("(! :")[0]
    verdicts = [line for line in out.splitlines() if "band: post" in line]
    assert len(verdicts) == len(BANDS) and all(
        "no verdict from 2 null panel(s)" in v and "takes 76" in v for v in verdicts
    )


def test_the_workbench_line_of_a_two_panel_calibration_gives_no_verdict(small_panel):
    from memtui.app.summary_lines import calibration_line
    from memtui.estimation import calibration as cb
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings

    panel = read_panel(small_panel)
    settings = Settings(draws=100)
    line = calibration_line(estimate(panel, settings), cb.calibrate(panel, settings, panels=2))
    assert "holds its level" not in line and "no verdict (2 null panel(s); 76 needed to tell 5 % from 10 %)" in line


# -- compare: panels that share one checkpoint are told so -----------------------------------------------------------


def _panels_sharing_step_0(folder, b_steps=(0, 50, 150, 250, 350, 450)):
    """Two panels of the same instances, six completed checkpoints each, that share only step 0 (or ``b_steps``)."""
    from memtui.panel.hdf5 import create_panel

    rng = np.random.default_rng(0)
    treatment = np.r_[np.repeat([100, 200, 300], 10), np.full(20, NEVER)]
    paths = []
    for name, steps in (("a", (0, 100, 200, 300, 400, 500)), ("b", b_steps)):
        path = folder / f"{name}.h5"
        values = rng.normal(size=(len(treatment), len(steps)))
        create_panel(path, ids=np.arange(len(treatment)), treatment=treatment, steps=np.array(steps),
                     metrics=["loglik"], values={"loglik": values}, signs={"loglik": 1})  # fmt: skip
        paths.append(path)
    return paths


def test_compare_says_the_panels_share_one_checkpoint(cli, tmp_path):
    """Two panels with 6 completed checkpoints each that shared only step 0 were told "only 1 completed
    checkpoint(s) ... extract more checkpoints"."""
    a, b = _panels_sharing_step_0(tmp_path)
    err = assert_refused(cli("compare", a, b, *FAST), "the panels share only one completed checkpoint, step 0")
    assert "a has steps 0, 100, 200, 300, 400, 500 (6); b has steps 0, 50, 150, 250, 350, 450 (6)" in err
    assert "extract more checkpoints" not in err


def test_compare_says_the_panels_share_no_checkpoint(cli, tmp_path):
    a, b = _panels_sharing_step_0(tmp_path, b_steps=(50, 150, 250, 350, 450, 550))
    assert_refused(cli("compare", a, b, *FAST), "the panels share no completed checkpoint (a has steps 0,")


def test_compare_with_two_shared_checkpoints_is_estimated(cli, tmp_path):
    a, b = _panels_sharing_step_0(tmp_path, b_steps=(0, 100, 150, 250, 350, 450))
    assert_clean_exit(cli("compare", a, b, *FAST))
