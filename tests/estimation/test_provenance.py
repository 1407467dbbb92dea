"""The provenance test (estimation/provenance.py): it rejects on the shipped real panels (GPT-NeoX models trained
in their recorded order), does not on a panel whose order was shuffled after the fact, holds its level on seeded null
panels, has power where later-trained instances are remembered better, and refuses what it cannot test in one line."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.provenance import provenance
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER, Panel

SAMPLES = Path(__file__).parents[2] / "sample_panels"
# the real panels: models trained from scratch by `memtui demo` in the order the panel records (`memtui info`)
REAL = ["tiny-gptneox.h5", "suite-neox-41k.h5", "suite-neox-132k.h5", "suite-neox-384k.h5", "suite-neox-858k.h5"]


@pytest.mark.parametrize("sample", REAL)
def test_rejects_on_the_shipped_real_panels(sample):
    got = provenance(read_panel(SAMPLES / sample), "loglik", permutations=199, seed=1)
    assert got.rejects and got.p_value <= 0.05 and got.rho > 0, got.as_dict()
    assert got.p_value >= 1 / 200  # (1 + hits) / (P + 1): never 0
    assert got.n_instances == 1920 and got.n_positions == 40 and len(got.rows) == 41


def shuffled(panel: Panel, seed: int) -> Panel:
    """The panel with its training positions permuted among its trained instances after the fact."""
    treatment = panel.treatment.copy()
    trained = np.flatnonzero(treatment != NEVER)
    treatment[trained] = np.random.default_rng(seed).permutation(treatment[trained])
    return replace(panel, treatment=treatment)


def test_does_not_reject_on_a_panel_whose_order_was_shuffled_after_the_fact():
    real = read_panel(SAMPLES / "tiny-gptneox.h5")
    got = provenance(shuffled(real, seed=3), "loglik", permutations=199, seed=1)
    assert not got.rejects and got.p_value > 0.05, got.as_dict()
    assert abs(got.rho) < provenance(real, "loglik", permutations=199, seed=1).rho


def null_panel(rng, positions=6, per=10, never=20, checkpoints=8, effect=0.0) -> Panel:
    """Instances with a difficulty and a skewed random walk; ``effect``: later-trained ones end higher (recency)."""
    treatment = np.concatenate([np.repeat(np.arange(1, positions + 1), per), np.full(never, NEVER)])
    n = len(treatment)
    y = rng.normal(0, 3, (n, 1)) + np.cumsum(rng.exponential(1, (n, checkpoints)) - 1, axis=1)
    y[:, -1] += effect * np.where(treatment == NEVER, 0, treatment)
    return Panel(ids=np.arange(n), treatment=treatment, steps=np.arange(checkpoints), done=np.ones(checkpoints, bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


@pytest.mark.parametrize("statistic", ["change", "level"])
def test_holds_its_level_on_seeded_null_panels(statistic):
    """Likelihoods that do not depend on the order: P(p <= alpha) <= alpha exactly (39 permutations: p <= 0.05 is
    the top 2 of 40 ranks); measured over 400 panels within Monte-Carlo error."""
    rng = np.random.default_rng(2026)
    reps = 400
    hits = sum(
        provenance(null_panel(rng), "loglik", statistic=statistic, permutations=39, seed=i).rejects for i in range(reps)
    )
    assert hits / reps <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / reps), hits


def test_has_power_where_later_trained_instances_are_remembered_better():
    rng = np.random.default_rng(7)
    got = [provenance(null_panel(rng, effect=1.0), "loglik", permutations=99, seed=i).rejects for i in range(20)]
    assert sum(got) >= 16, got


def test_the_same_seed_gives_the_same_p_value_and_the_table_is_per_checkpoint():
    panel = null_panel(np.random.default_rng(0), effect=0.3)
    a = provenance(panel, "loglik", permutations=99, seed=5)
    assert a.as_dict() == provenance(panel, "loglik", permutations=99, seed=5).as_dict()
    assert [r.step for r in a.rows] == list(range(8)) and math.isnan(a.rows[-1].change_rho)
    assert a.rho == pytest.approx(max(r.change_rho for r in a.rows[:-1]))
    assert a.reference_step == max(a.rows[:-1], key=lambda r: r.change_rho).step


def test_refusals_are_one_line():
    rng = np.random.default_rng(0)
    panel = null_panel(rng)
    never = replace(panel, treatment=np.full(panel.n_instances, NEVER))
    few = replace(panel, treatment=np.where(np.arange(panel.n_instances) < 9, 1, NEVER))
    one_position = replace(panel, treatment=np.where(panel.treatment == NEVER, NEVER, 3))
    constant = replace(panel, metrics={"loglik": np.ones((panel.n_instances, 8))})
    for p, kwargs, match in (
        (never, {}, "no instance has a training position"),
        (few, {}, "needs at least 10"),
        (one_position, {}, "2 or more positions"),
        (constant, {}, "does not vary"),
        (panel, {"permutations": 10}, "cannot give a p-value"),
        (panel, {"permutations": 0}, "from 1 to"),
        (panel, {"statistic": "mean"}, "statistic must be one of"),
    ):
        with pytest.raises(MemtuiError, match=match) as exc:
            provenance(p, "loglik", **kwargs)
        assert "\n" not in str(exc.value)
    with pytest.raises(MemtuiError, match="no metric"):
        provenance(panel, "rank")


def test_correlations_are_scipys_and_the_p_value_is_the_exhaustive_one():
    """Against independent implementations: every correlation of the table is scipy's Spearman, and on 10 instances
    at 2 positions the permutation p-value matches the exact one over all C(10, 5) = 252 assignments of the
    positions (within the Monte-Carlo error of 20,000 permutations)."""
    from itertools import combinations

    from scipy.stats import spearmanr

    rng = np.random.default_rng(14)  # a draw whose exact p-value is near alpha (0.048), where the answer matters
    treatment = np.array([1] * 5 + [2] * 5 + [NEVER] * 4)
    y = rng.normal(0, 1, (14, 3)) + np.cumsum(rng.exponential(1, (14, 3)), axis=1)
    y[treatment == 2, 2] += 1.5  # the later position ends higher
    panel = Panel(ids=np.arange(14), treatment=treatment, steps=np.arange(3), done=np.ones(3, bool),
                  metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip
    got = provenance(panel, "loglik", statistic="level", permutations=20_000, seed=2)
    yt = y[:10]
    for c, row in enumerate(got.rows):
        assert row.level_rho == pytest.approx(spearmanr(treatment[:10], yt[:, c])[0], abs=1e-12)
        if c < 2:
            assert row.change_rho == pytest.approx(spearmanr(treatment[:10], yt[:, 2] - yt[:, c])[0], abs=1e-12)
    rho = spearmanr(treatment[:10], yt[:, 2])[0]
    every = []
    for late in combinations(range(10), 5):
        pos = np.ones(10)
        pos[list(late)] = 2
        every.append(spearmanr(pos, yt[:, 2])[0] >= rho - 1e-12)
    exact = float(np.mean(every))
    assert got.p_value == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 20_000) + 1e-4)
