"""The layout's cell list (engine.layout._cells, vectorised) equals the definition written as a loop: every cohort's
checkpoints in order, each with its base period, for every estimator, base period and control group."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine.layout import NEVER_INDEX, _cells


def _loop(group_index, cohort_groups, t, estimator, base_period):
    gs, ts, bs, pre = [], [], [], []
    for g in cohort_groups:
        a = group_index[g]
        for c in range(t):
            if estimator in ("difference", "extractable"):
                b = t
            elif c >= a:
                b = a - 1
            elif base_period == "varying":
                if c == 0:
                    continue
                b = c - 1
            else:
                if c == a - 1:
                    continue
                b = a - 1
            gs.append(g), ts.append(c), bs.append(b), pre.append(c < a)
    return gs, ts, bs, pre


@pytest.mark.parametrize("estimator", ["did", "difference", "extractable"])
@pytest.mark.parametrize("base_period", ["varying", "universal"])
def test_cells_follow_their_definition(estimator, base_period):
    rng = np.random.default_rng(0)
    for _ in range(60):
        t = int(rng.integers(1, 12))
        treated = np.sort(rng.choice(t + 2, size=int(rng.integers(1, t + 2)), replace=False))[::-1]
        group_index = np.concatenate([[NEVER_INDEX], treated]).astype(np.int64)
        cohort_groups = np.flatnonzero(group_index < t)[::-1]
        got = _cells(group_index, cohort_groups, t, estimator, base_period, "not_yet_treated")
        gs, ts, bs, pre = _loop(group_index, cohort_groups, t, estimator, base_period)
        assert got["cell_group"].tolist() == gs and got["cell_t"].tolist() == ts
        assert got["cell_b"].tolist() == bs and got["cell_pre"].tolist() == pre
        assert got["cell_group"].dtype == np.int64 and got["cell_pre"].dtype == bool
