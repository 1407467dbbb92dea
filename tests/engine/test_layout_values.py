"""The layout's outcomes, means and scale are what the plain numpy code made, bit for bit, though they are now built
without a copy of the kept rows, a row block at a time and, on a large layout, on every core: the copy of the rows in
their order, the scale (np.std of the rows over their largest magnitude), the rows' and the columns' centring and the
groups' means (np.add.reduceat)."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import layout
from memtui.engine.layout import build_layout
from memtui.panel.model import NEVER


def _plain(y: np.ndarray, lay, estimator: str):
    """The layout's y, means and scale as the code before made them, from the rows it kept (``source_rows``)."""
    t = y.shape[1]
    kept = np.asarray(y[lay.source_rows], dtype=np.float64)
    top = np.max(np.abs(kept))
    scale = top * float(np.std(kept / top))
    yy = np.zeros((len(kept), t + 1))
    yy[:, :t] = kept
    if estimator == "did":
        yy[:, :t] -= yy[:, :t].mean(axis=1, keepdims=True)
    level = yy[lay.group_start[0] : lay.group_start[1], :t].mean(axis=0)
    yy[:, :t] -= level
    means = np.add.reduceat(yy, lay.group_start[:-1], axis=0) / lay.group_n[:, None]
    return yy, means, scale


@pytest.mark.parametrize("estimator", ["did", "difference", "extractable"])
@pytest.mark.parametrize("big", [False, True])
def test_the_layout_is_the_plain_codes_bit_for_bit(estimator, big):
    rng = np.random.default_rng(11)
    t = 90 if big else 7
    steps = np.arange(t) * 10
    n_cohort, n_never = (700, 9000) if big else (6, 40)  # big: above the size from which the work goes to the cores
    treatment = np.r_[np.repeat(steps[1:6], n_cohort), np.full(n_never, NEVER), np.repeat(steps[2], 3)]
    y = rng.normal(size=(len(treatment), t)) * 3 + rng.normal(size=(len(treatment), 1)) * 5 + 2
    y[1, 2] = np.nan  # dropped: the kept rows are a subset
    order = rng.permutation(len(y))  # rows in no particular order
    y, treatment = y[order], treatment[order]
    lay = build_layout(y, treatment, steps, never=NEVER, estimator=estimator)
    assert (lay.y.size >= 1 << 20) == big
    yy, means, scale = _plain(y, lay, estimator)
    assert np.array_equal(lay.y, yy) and np.array_equal(lay.means, means) and lay.scale == scale


def test_a_read_only_view_of_the_panel_is_enough(monkeypatch):
    """The layout never writes into the values it is given (``Panel.values`` is a read-only view of the panel)."""
    rng = np.random.default_rng(2)
    steps = np.arange(5) * 10
    treatment = np.r_[np.repeat(steps[1:], 4), np.full(20, NEVER)]
    y = rng.normal(size=(len(treatment), 5))
    frozen = y.copy()
    frozen.flags.writeable = False
    monkeypatch.setattr(layout, "_ROWS", 3)  # many blocks
    lay = build_layout(frozen, treatment, steps, never=NEVER)
    assert np.array_equal(frozen, y) and np.array_equal(lay.y, _plain(y, lay, "did")[0])


def test_the_bootstraps_float32_outcomes_are_astypes():
    from memtui.engine import did

    y = np.random.default_rng(4).normal(size=(20_000, 61)) * 1e3  # large: cast a block at a time on every core
    assert np.array_equal(did._float32(y), y.astype(np.float32)) and did._float32(y).flags.c_contiguous
    assert np.array_equal(did._float32(y[:5]), y[:5].astype(np.float32))
