"""Individual memorisation scores (estimation/instances.py): one instance's DiD contrast.

The proof that the score is the cell's contrast for one instance: over every post-treatment cell, the mean of the
cohort's scores is the cell's estimate from `estimate` (never-trained controls, no covariates), to rounding, on the
shipped tiny GPT-NeoX panel and on a simulated one with missing values and instances folded into the next cohort.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.estimate import estimate
from memtui.estimation.instances import Selection, instance_scores, where_mask
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER
from memtui.panel.samples import sample_paths
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = Simulation(n_cohorts=4, per_cohort=10, n_never=25, n_checkpoints=6, seed=11)


def _mean_equals_att(panel, metric: str) -> int:
    """Every post-treatment cell: its cohort's mean score is its estimate (tau); returns the cells checked."""
    result = estimate(panel, Settings(metric=metric, draws=0))
    cells = result.cells.filter(~result.cells["pre_treatment"])
    for row in cells.iter_rows(named=True):
        s = instance_scores(panel, metric, Selection(cohort=row["cohort"], checkpoint=row["checkpoint"]))
        assert len(s) == row["n_treated"]
        assert s.n_controls == row["n_control"]
        assert s.score.mean() == pytest.approx(row["estimate"], rel=1e-10, abs=1e-10 * panel_scale(panel, metric))
    return cells.height


def panel_scale(panel, metric: str) -> float:
    return float(np.nanstd(panel.values(metric))) or 1.0


@pytest.mark.parametrize("metric", ["loglik", "rank"])  # both signs: rank is lower-is-better
def test_the_mean_score_of_a_cohort_is_the_cells_att_on_the_tiny_gptneox_sample(metric):
    panel = read_panel(sample_paths("tiny-gptneox")[0])
    assert _mean_equals_att(panel, metric) == 820


@pytest.fixture(scope="module")
def simulated_path(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("instances") / "sim.h5", SIM)


@pytest.fixture
def _simulated(simulated_path):
    return lambda: _altered(read_panel(simulated_path))


def _altered(panel):
    y = panel.metrics["loglik"]
    y[3, 2] = np.nan  # an incomplete treated row and an incomplete control: both left out, as estimate does
    y[-1, 4] = np.nan
    treatment = panel.treatment.copy()
    treatment[0] = treatment[0] - SIM.step // 2  # first trained on between checkpoints: joins the next cohort
    return dataclasses.replace(panel, treatment=treatment)


def test_the_mean_score_is_the_att_with_missing_values_and_folded_instances(_simulated):
    panel = _simulated()
    assert _mean_equals_att(panel, "loglik") > 0
    s = instance_scores(panel, "loglik")
    assert 3 not in s.rows and len(s.notes) == 1 and "left out 2" in s.notes[0]
    assert 0 in s.rows  # the folded instance is scored in its cohort


def test_the_score_is_the_instances_own_change_less_the_control_mean_change(_simulated):
    panel = _simulated()
    s = instance_scores(panel, "loglik", Selection(cohort=2000, checkpoint=4000))
    y, steps = panel.values("loglik"), panel.done_steps
    c, b = int(np.flatnonzero(steps == 4000)[0]), int(np.flatnonzero(steps == 1000)[0])
    controls = (panel.treatment == NEVER) & np.isfinite(y).all(axis=1)
    r = s.rows[0]
    expected = (y[r, c] - y[r, b]) - (y[controls, c] - y[controls, b]).mean()
    assert s.score[0] == pytest.approx(expected)
    assert (np.diff(s.score) <= 0).all()  # best first
    assert (s.base == 1000).all() and (s.cohort == 2000).all() and (s.checkpoint == 4000).all()


def test_the_control_rank_counts_the_never_trained_scoring_as_high(_simulated):
    panel = _simulated()
    s = instance_scores(panel, "loglik", Selection(cohort=2000, checkpoint=3000))
    y, steps = panel.values("loglik"), panel.done_steps
    c, b = int(np.flatnonzero(steps == 3000)[0]), int(np.flatnonzero(steps == 1000)[0])
    controls = (panel.treatment == NEVER) & np.isfinite(y).all(axis=1)
    d = y[controls, c] - y[controls, b]
    ctrl = d - d.mean()
    for k in range(len(s)):
        assert s.control_rank[k] == int((ctrl >= s.score[k]).sum())
        assert s.p_value[k] == pytest.approx((1 + s.control_rank[k]) / (1 + controls.sum()))


def test_lower_is_better_metrics_rank_the_largest_drop_first(_simulated):
    panel = _simulated()
    s = instance_scores(panel, "rank", Selection(cohort=2000, checkpoint=3000))
    y, steps = panel.values("rank"), panel.done_steps
    r = s.rows[0]
    own = y[s.rows, 3] - y[s.rows, 1]
    assert steps[3] == 3000 and own.argmin() == 0 and r == s.rows[own.argmin()]


def test_the_whole_panel_scores_every_cohort_trained_by_the_checkpoint(_simulated):
    panel = _simulated()
    s = instance_scores(panel, "loglik", Selection(checkpoint=3000))
    assert set(s.cohort.tolist()) == {1000, 2000, 3000}
    assert set(s.base.tolist()) == {0, 1000, 2000}


def test_where_keeps_a_subgroup(_simulated):
    panel = _simulated()
    x = np.arange(panel.n_instances, dtype=float)
    x[5] = np.nan
    kind = np.array(["a" if i % 2 else "b" for i in range(panel.n_instances)], dtype=object)
    panel = dataclasses.replace(panel, covariates={"x": x, "kind": kind})
    s = instance_scores(panel, "loglik", Selection(where="x>=20"))
    assert len(s) and (s.rows >= 20).all()
    s = instance_scores(panel, "loglik", Selection(where="kind==a"))
    assert (s.rows % 2 == 1).all()
    assert not where_mask(panel, "x<100")[5]  # unknown: never selected


@pytest.mark.parametrize(
    ("selection", "says"),
    [
        (Selection(cohort=1234), "no cohort at step 1234"),
        (Selection(cohort=0), "first completed checkpoint"),
        (Selection(cohort=3000, checkpoint=2000), "comes before cohort 3000"),
        (Selection(checkpoint=2500), "no completed checkpoint at step 2500"),
        (Selection(where="x"), "not a comparison"),
        (Selection(where="nope>=1"), "no covariate 'nope'"),
        (Selection(where="kind>=1"), "categorical"),
        (Selection(where="x>=abc"), "not a number"),
        (Selection(where="x>=nan"), "finite"),
        (Selection(where="x>=1e9"), "no instance"),
    ],
)
def test_bad_selections_are_refused_in_one_line(selection, says, _simulated):
    panel = _simulated()
    kind = np.array(["a"] * panel.n_instances, dtype=object)
    panel = dataclasses.replace(panel, covariates={"x": np.arange(panel.n_instances, dtype=float), "kind": kind})
    with pytest.raises(MemtuiError, match=says) as err:
        instance_scores(panel, "loglik", selection)
    assert "\n" not in str(err.value)


def test_one_completed_checkpoint_is_refused(_simulated):
    panel = _simulated()
    done = np.zeros_like(panel.done)
    done[0] = True
    with pytest.raises(MemtuiError, match="needs two"):
        instance_scores(dataclasses.replace(panel, done=done), "loglik")


def test_top_keeps_the_best(_simulated):
    s = instance_scores(_simulated(), "loglik")
    t = s.top(3)
    assert len(t) == 3 and (t.ids == s.ids[:3]).all() and t.n_controls == s.n_controls
    assert len(s.top(0)) == 0


def test_the_path_at_the_cells_checkpoint_is_the_score(_simulated):
    from memtui.estimation.instances import instance_path

    panel = _simulated()
    s = instance_scores(panel, "loglik", Selection(cohort=2000, checkpoint=4000))
    path = instance_path(panel, "loglik", int(s.rows[0]))
    assert path.cohort == 2000 and path.base == 1000
    assert path.score[list(path.steps).index(4000)] == pytest.approx(s.score[0])
    assert path.score[list(path.steps).index(1000)] == pytest.approx(0.0, abs=1e-12)  # the base: no change
    assert (path.low <= path.high).all()


def _with_groups(panel):
    """Covariates for the split tests: kind alternating a/b, x a shuffle of 0..n-1 (controls in every group)."""
    kind = np.array(["a" if i % 2 else "b" for i in range(panel.n_instances)], dtype=object)
    x = np.random.default_rng(3).permutation(panel.n_instances).astype(float)
    return dataclasses.replace(panel, covariates={"kind": kind, "x": x})


@pytest.mark.parametrize("spec", ["kind", "x:tertiles"])
def test_a_groups_mean_score_is_its_tau_from_estimate_by_against_its_own_controls(spec, _simulated):
    """By group, as `estimate --by` and the workbench's split: the group's cohort's mean score is the group's cell
    estimate (its own never-trained controls), over every post-treatment cell of every group."""
    from memtui.estimation.subgroups import estimate_by

    panel = _with_groups(_simulated())
    by = estimate_by(panel, Settings(metric="loglik", draws=0), spec)
    checked = 0
    for name, result in by.groups.items():
        cells = result.cells.filter(~result.cells["pre_treatment"])
        for row in cells.iter_rows(named=True):
            sel = Selection(cohort=row["cohort"], checkpoint=row["checkpoint"], by=spec, group=name)
            s = instance_scores(panel, "loglik", sel)
            assert (len(s), s.n_controls) == (row["n_treated"], row["n_control"])
            assert s.score.mean() == pytest.approx(row["estimate"], rel=1e-10, abs=1e-10 * panel_scale(panel, "loglik"))
            checked += 1
    assert checked >= 2 * 10


def test_a_groups_path_is_set_against_its_own_controls(_simulated):
    from memtui.estimation.instances import instance_path

    panel = _with_groups(_simulated())
    s = instance_scores(panel, "loglik", Selection(by="kind", group="kind=a"))
    row = int(s.rows[0])
    mine = instance_path(panel, "loglik", row, selection=Selection(by="kind", group="kind=a"))
    whole = instance_path(panel, "loglik", row)
    c = list(mine.steps).index(int(s.checkpoint[0]))
    assert mine.score[c] == pytest.approx(s.score[0]) and not np.allclose(mine.score, whole.score)


@pytest.mark.parametrize(
    ("selection", "says"),
    [
        (Selection(by="kind", group="kind=c"), "has no group 'kind=c'; its groups are kind=a, kind=b"),
        (Selection(group="kind=a"), "needs the split"),
        (Selection(by="nope", group="x"), "no covariate 'nope'"),
        (Selection(by="kind:quartiles", group="x"), "categorical"),
        (Selection(by="x>=1e9", group="x>=1e9"), "makes 1 group"),
    ],
)
def test_bad_groups_are_refused_in_one_line(selection, says, _simulated):
    with pytest.raises(MemtuiError, match=says) as err:
        instance_scores(_with_groups(_simulated()), "loglik", selection)
    assert "\n" not in str(err.value)


def test_a_group_without_never_trained_instances_is_refused(_simulated):
    panel = _simulated()
    kind = np.where(panel.never_treated, "control", "treated").astype(object)
    kind[0] = "control"  # one trained instance among the controls: the "treated" group has no control of its own
    panel = dataclasses.replace(panel, covariates={"kind": kind})
    with pytest.raises(MemtuiError, match="no never-trained instance of group kind=treated"):
        instance_scores(panel, "loglik", Selection(by="kind", group="kind=treated"))


@pytest.mark.parametrize("spec", ["kind", "x:tertiles", "x>=20"])
def test_a_split_without_a_group_ranks_every_groups_own_scores_together(spec, _simulated):
    """`--by` alone: each group scored as its own `--group` scores it (against its own controls), ranked together,
    each row carrying its group and the controls it was ranked among."""
    panel = _with_groups(_simulated())
    every = instance_scores(panel, "loglik", Selection(by=spec))
    names = [g for g, _, _ in every.groups]
    assert len(names) >= 2 and every.by == spec and not every.shared_controls
    assert list(every.score) == sorted(every.score, reverse=True)
    assert sum(n for _, n, _ in every.groups) == len(every) and every.n_controls == sum(c for _, _, c in every.groups)
    for name in names:
        one = instance_scores(panel, "loglik", Selection(by=spec, group=name))
        mine = every.group == name
        assert set(every.rows[mine]) == set(one.rows) and set(one.group) == {name}
        by_row = dict(zip(one.rows.tolist(), one.score.tolist(), strict=True))
        assert every.score[mine] == pytest.approx([by_row[r] for r in every.rows[mine]], rel=1e-12)
        assert (every.controls[mine] == one.n_controls).all()
    top = every.top(5)
    assert list(top.group) == list(every.group[:5]) and list(top.controls) == list(every.controls[:5])
    assert top.groups == every.groups


def test_shared_controls_score_each_group_against_every_never_trained_instance(_simulated):
    """With shared controls a group's scores are the whole panel's scores of its instances (the same controls), and
    a cohort's mean is the group's tau from `estimate --by --shared-controls`."""
    from memtui.estimation.subgroups import estimate_by

    panel = _with_groups(_simulated())
    whole = instance_scores(panel, "loglik")
    shared = instance_scores(panel, "loglik", Selection(by="kind", shared_controls=True))
    assert shared.shared_controls and shared.n_controls == whole.n_controls
    assert (shared.controls == whole.n_controls).all()
    assert sorted(shared.rows) == sorted(whole.rows)
    mine = dict(zip(shared.rows, shared.score, strict=True))
    assert mine == pytest.approx(dict(zip(whole.rows, whole.score, strict=True)))
    by = estimate_by(panel, Settings(metric="loglik", draws=0), "kind", shared_controls=True)
    row = by.groups["kind=a"].cells.filter(~by.groups["kind=a"].cells["pre_treatment"]).row(0, named=True)
    sel = Selection(cohort=row["cohort"], checkpoint=row["checkpoint"], by="kind", group="kind=a", shared_controls=True)
    s = instance_scores(panel, "loglik", sel)
    assert (len(s), s.n_controls) == (row["n_treated"], row["n_control"])
    assert s.score.mean() == pytest.approx(row["estimate"], rel=1e-10, abs=1e-10 * panel_scale(panel, "loglik"))


def test_a_group_with_nothing_to_score_is_left_out_with_a_note(_simulated):
    panel = _simulated()
    kind = np.where(panel.never_treated, "control", "treated").astype(object)
    kind[0] = "control"  # the "treated" group has no never-trained instance of its own; "control" has one trained
    panel = dataclasses.replace(panel, covariates={"kind": kind})
    s = instance_scores(panel, "loglik", Selection(by="kind"))
    assert set(s.group) == {"kind=control"} and [g for g, _, _ in s.groups] == ["kind=control"]
    assert any(n.startswith("group kind=treated left out: ") and "no never-trained" in n for n in s.notes)
    with pytest.raises(MemtuiError, match="no group has an instance to score; group kind=control left out: ") as err:
        instance_scores(panel, "loglik", Selection(by="kind", cohort=int(panel.done_steps[-1]) + 10**6))
    assert "\n" not in str(err.value)


def test_instances_with_no_value_belong_to_no_group_and_a_note_says_so(_simulated):
    panel = _with_groups(_simulated())
    x = panel.covariates["x"].copy()
    trained = np.flatnonzero(~panel.never_treated)[:3]
    x[trained] = np.nan
    panel = dataclasses.replace(panel, covariates={"x": x})
    s = instance_scores(panel, "loglik", Selection(by="x:tertiles"))
    assert not set(trained) & set(s.rows.tolist())
    assert "3 trained instances with no value of x belong to no group" in s.notes


def test_shared_controls_without_a_split_are_refused(_simulated):
    with pytest.raises(MemtuiError, match="shared controls go with a split"):
        instance_scores(_simulated(), "loglik", Selection(shared_controls=True))
