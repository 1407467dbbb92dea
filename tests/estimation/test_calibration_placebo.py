"""benchmarks/placebo.py: placebo panels from a panel's never-trained rows keep every row's real values and give fake
cohorts at random (the truth is zero), and each band is run as `memtui estimate` runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from memtui.engine.band_registry import BANDS
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER

ROOT = Path(__file__).parents[2]
SAMPLES = ROOT / "sample_panels"
_spec = importlib.util.spec_from_file_location("placebo_benchmark", ROOT / "benchmarks" / "placebo.py")
pb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pb)  # the benchmark is a script, not part of the package


def test_a_placebo_panel_is_the_never_trained_rows_with_fake_cohorts():
    panel = read_panel(SAMPLES / "tiny-gptneox.h5")
    y = pb.never_rows(panel, "loglik")
    assert len(y) == int((panel.treatment == NEVER).sum()) == 512
    cohorts, per = pb.design(len(y), len(panel.done_steps), None, None)
    assert (cohorts, per) == (8, 32)
    a = pb.placebo(y, panel.done_steps, cohorts, per, np.random.default_rng(1))
    b = pb.placebo(y, panel.done_steps, cohorts, per, np.random.default_rng(2))
    assert np.array_equal(a.metrics["loglik"], y)  # the real values, untouched
    steps, counts = np.unique(a.treatment[a.treatment != NEVER], return_counts=True)
    assert len(steps) == 8 and (counts == 32).all() and (a.treatment == NEVER).sum() == 256
    assert set(steps) <= set(panel.done_steps[1:])
    assert not np.array_equal(a.treatment, b.treatment)  # fake cohorts drawn at random


def test_every_band_runs_on_a_placebo_or_says_why_not():
    panel = read_panel(SAMPLES / "suite-neox-41k.h5")
    y = pb.never_rows(panel, "loglik")
    fake = pb.placebo(y, panel.done_steps, 4, 40, np.random.default_rng(0))
    for band in BANDS:
        s = pb.band_settings(band, 100, 0.05)
        assert isinstance(s, Settings | str)
        if isinstance(s, Settings):
            post, pre, share = pb.flags(fake, s, seed=3)
            assert isinstance(post, bool) and isinstance(pre, bool) and 0 <= share <= 1 and (share > 0) == post


def test_the_skewed_design_has_its_effect_on_post_cells_only():
    base = pb.skewed(30, 0.0, np.random.default_rng(4))
    moved = pb.skewed(30, 0.5, np.random.default_rng(4))
    d = moved.metrics["loglik"] - base.metrics["loglik"]
    treated = base.treatment != NEVER
    assert (base.treatment == NEVER).sum() == 200 and treated.sum() == 600 and base.n_checkpoints == 21
    after = base.steps[None, :] >= base.treatment[:, None]
    assert np.allclose(d[treated][after[treated]], 0.5) and np.allclose(d[treated][~after[treated]], 0)
    assert np.allclose(d[~treated], 0)
