"""One bootstrap pass over subgroups that share their never-treated controls (``estimate --by --shared-controls``):
the controls' multiplier-weighted sums are one product a chunk, made by the first layout that holds them and copied
by the others, and every layout's draws stay those of its lone bootstrap, bit for bit. Groups that are not the same
instances with the same outcomes are never shared."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import did
from memtui.engine.layout import build_layout
from memtui.engine.multipliers import JointMultipliers
from memtui.panel.model import NEVER

DRAWS, SEED, CHUNK = 60, 5, 16


def _subgroups(shared: bool, parts: int = 3, n_never: int = 150, shift_never: bool = False):
    """Layouts of ``parts`` subsets of one panel: the treated split by a label, the never-treated controls all in
    every subset (``shared``) or split too; ``shift_never``: the last subset's controls have other outcomes."""
    rng = np.random.default_rng(2)
    steps = np.arange(8) * 10
    treatment = np.concatenate([np.repeat(steps[1:6], 30), np.full(n_never, NEVER)])
    y = rng.normal(size=(len(treatment), 1)) + rng.normal(size=(len(treatment), len(steps)))
    never = treatment == NEVER
    label = rng.integers(0, parts, len(y))
    source = JointMultipliers.per_instance(len(y))
    lays, subs = [], []
    for k in range(parts):
        rows = np.flatnonzero((label == k) & ~never | (never if shared else (label == k) & never))
        yk = y[rows].copy()
        if shift_never and k == parts - 1:
            yk[never[rows]] *= 1.5  # the same instances, other outcomes: their sums must not be shared
        lays.append(build_layout(yk, treatment[rows], steps, never=NEVER))
        subs.append(source.subset(rows))
    return lays, [did.point_estimates(lay) for lay in lays], subs


def _shared_groups(lays, ests, subs):
    stacks = did._stacks(lays, ests, subs)
    did._share_groups(stacks)
    return [(dict(stack.reuse), dict(stack.keep)) for stack in stacks]


@pytest.mark.parametrize(("shared", "shift_never"), [(True, False), (False, False), (True, True)])
def test_shared_controls_summed_once_and_every_layout_its_lone_bootstrap(shared, shift_never):
    lays, ests, subs = _subgroups(shared, shift_never=shift_never)
    marks = _shared_groups(lays, ests, subs)
    if shared and not shift_never:  # the never-treated (group 0) are summed by the first layout, copied by the others
        assert marks[0] == ({}, {0: marks[1][0][0]}) and all(reuse.keys() == {0} for reuse, _ in marks[1:])
    elif shared:  # the last layout's controls differ in their outcomes: it sums its own
        assert marks[-1][0] == {} and all(reuse.keys() == {0} for reuse, _ in marks[1:-1])
    else:  # every group's controls are its own
        assert all(reuse == {} and keep == {} for reuse, keep in marks)
    joint = did.bootstrap_shared(lays, ests, draws=DRAWS, seed=SEED, chunk=CHUNK, source=subs)
    for lay, est, sub, got in zip(lays, ests, subs, joint, strict=True):
        alone = did.bootstrap(lay, est, draws=DRAWS, seed=SEED, chunk=CHUNK, source=sub)
        assert np.array_equal(got.cells, alone.cells)
        assert np.array_equal(got.group_w, alone.group_w)
