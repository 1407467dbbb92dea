"""One bootstrap pass over several layouts with different cells (subgroups), each with its own keyed multiplier
source: the multipliers are drawn once per chunk for all, and each layout's draws, studentised laws and aggregates'
corrections are those of its lone bootstrap with that source, bit for bit; the cells' draws are formed block by
block, which changes nothing either."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import bands, did
from memtui.engine.layout import build_layout
from memtui.engine.multipliers import JointMultipliers
from memtui.panel.model import NEVER

DRAWS, SEED, CHUNK = 80, 11, 32


def _panel(seed=0, n_cohorts=6, per=15, n_never=40, t=9):
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 10
    treatment = np.concatenate([np.repeat(steps[1 : n_cohorts + 1], per), np.full(n_never, NEVER)])
    y = rng.normal(size=(len(treatment), 1)) + rng.normal(size=(len(treatment), t))
    return y, treatment, steps


def _groups(control_group="never_treated", parts=3):
    """Layouts of ``parts`` random subsets of one panel (each with its own cells) and their keyed sources."""
    y, treatment, steps = _panel()
    label = np.random.default_rng(1).integers(0, parts, len(y))
    source = JointMultipliers.per_instance(len(y))
    lays, subs = [], []
    for k in range(parts):
        rows = np.flatnonzero(label == k)
        if k == parts - 1:  # one group loses its last cohort: not every group has the same cells
            rows = rows[treatment[rows] != steps[6]]
        lays.append(build_layout(y[rows], treatment[rows], steps, never=NEVER, control_group=control_group))
        subs.append(source.subset(rows))
    assert len({len(lay.cell_group) for lay in lays}) > 1
    return lays, [did.point_estimates(lay) for lay in lays], subs


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_one_pass_over_groups_is_each_groups_lone_bootstrap(control_group):
    lays, ests, subs = _groups(control_group)
    joint = did.bootstrap_shared(lays, ests, draws=DRAWS, seed=SEED, chunk=CHUNK, source=subs)
    for lay, est, sub, got in zip(lays, ests, subs, joint, strict=True):
        alone = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK, source=sub)
        assert np.array_equal(got.cells, alone.cells)
        assert np.array_equal(got.group_w, alone.group_w)


def test_one_calibrated_pass_over_groups_is_each_groups_lone_calibrated_bootstrap():
    lays, ests, subs = _groups()
    masks = [{"all": np.ones(len(lay.cell_group), bool), "post": ~lay.cell_pre} for lay in lays]
    members = [[np.flatnonzero(~lay.cell_pre), np.flatnonzero(lay.cell_pre)] for lay in lays]
    floors = [did.se_floor(lay.scale) for lay in lays]
    kw = {"draws": DRAWS, "seed": SEED}
    joint = bands.calibrated_bootstraps(lays, ests, masks, floors=floors, members=members, source=subs, **kw)
    for j, got in enumerate(joint):
        alone = bands.calibrated_bootstrap(
            lays[j], ests[j], masks[j], floor=floors[j], members=members[j], source=subs[j], **kw
        )
        assert np.array_equal(got.boot.cells, alone.boot.cells)
        assert all(np.array_equal(got.tmax[m], alone.tmax[m]) for m in masks[j])
        assert np.array_equal(got.agg_correction, alone.agg_correction)


def test_layouts_without_sources_must_share_their_cells():
    lays, ests, subs = _groups()
    with pytest.raises(ValueError, match="same groups and cells"):
        did.bootstrap_shared(lays, ests, draws=DRAWS, seed=SEED)
    with pytest.raises(ValueError, match="keyed source"):
        did.bootstrap_shared(lays, ests, draws=DRAWS, seed=SEED, source=[None, *subs[1:]])


@pytest.mark.parametrize("control_group", ["never_treated", "not_yet_treated"])
def test_blocks_of_cells_change_no_draw(monkeypatch, control_group):
    lays, ests, subs = _groups(control_group)
    lay, est = lays[0], ests[0]
    masks = {"all": np.ones(len(lay.cell_group), bool), "pre": lay.cell_pre}
    members = [np.flatnonzero(~lay.cell_pre), np.arange(len(lay.cell_group))]
    kw = {"draws": DRAWS, "seed": SEED, "floor": did.se_floor(lay.scale), "members": members}
    whole = bands.calibrated_bootstrap(lay, est, masks, **kw)
    monkeypatch.setattr(did, "_CELL_BLOCK", 7)  # blocks that split cohorts and mask groups anywhere
    blocked = bands.calibrated_bootstrap(lay, est, masks, **kw)
    assert len(lay.cell_group) > 3 * 7
    assert np.array_equal(whole.boot.cells, blocked.boot.cells)
    assert all(np.array_equal(whole.tmax[m], blocked.tmax[m]) for m in masks)
    assert np.array_equal(whole.agg_correction, blocked.agg_correction)
