"""`memtui calibrate` measures the pre-trend family as `estimate` runs it, on skewed persistent noise (issue 29).

A random walk of centred exponential steps (benchmarks/skewed_noise.py's ``rwexp``): each change is skewed, and the
pre-trend test's maximum over hundreds of placebo cells lives where that skew matters. Calibrate once re-coloured its
resampled residual trajectories by each group's estimated covariance, a noisy matrix that mixed the changes of a
trajectory and averaged their skew away: it reported 31-35 % for the pre-trend test where `estimate` rejects 44-50 % of
independent null panels of the same design. Here the two are measured side by side, and must agree within their
Monte-Carlo errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memtui.estimation import calibration as cb
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

COHORTS, PER_COHORT, NEVER_N, CHECKPOINTS = 20, 30, 200, 21  # the design
PANELS, DRAWS = 240, 200


def skewed_null_panel(seed: int) -> Panel:
    """No memorisation: instance levels plus a random walk of centred exponential steps (skewed changes)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(CHECKPOINTS) * 1000
    treatment = np.concatenate([np.repeat(steps[1 : COHORTS + 1], PER_COHORT), np.full(NEVER_N, NEVER)])
    n = len(treatment)
    walk = np.cumsum(rng.exponential(1.0, (n, CHECKPOINTS)) - 1.0, axis=1) / math.sqrt(CHECKPOINTS)
    y = rng.normal(0, 1, (n, 1)) + walk
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(CHECKPOINTS, bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


@pytest.mark.simulation
def test_calibrates_pretrend_rejection_is_the_estimates_on_skewed_noise():
    settings = Settings(draws=DRAWS, seed=7)
    truth = np.mean([estimate(skewed_null_panel(10_000 + i), settings).pretrend.p_value < 0.05 for i in range(PANELS)])
    got = cb.calibrate(skewed_null_panel(1), settings, panels=PANELS)
    p, _ = got.rate("calibrated", "pretrend")
    mc = math.sqrt(truth * (1 - truth) / PANELS + p * (1 - p) / PANELS)
    assert truth > 0.3, truth  # the design does over-reject: the comparison has something to find
    assert abs(p - truth) < 3 * mc, (p, truth, mc)
