"""The pooled estimate across seeds (estimation.seeds): the pooled profile is the seeds' mean in a fixed float64
order, the seeds' bootstraps share one multiplier per instance (keyed by id, whatever each panel's row order), the
shared draws give the standard error a simulation with a known truth asks for, and bad input is one line."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.seeds import estimate_pooled, pooled_mean
from memtui.estimation.settings import Settings
from memtui.panel.model import Panel
from memtui.panel.synthetic_seeds import SeedSimulation, simulate_seeds

SETTINGS = Settings(draws=300, band="classic")


@pytest.fixture(scope="module")
def panels() -> list[Panel]:
    return simulate_seeds(SeedSimulation(seed=3))


@pytest.fixture(scope="module")
def pooled(panels):
    return estimate_pooled(panels, SETTINGS)


def _permuted(panel: Panel, seed: int) -> Panel:
    order = np.random.default_rng(seed).permutation(panel.n_instances)
    return replace(panel, ids=panel.ids[order], treatment=panel.treatment[order],
                   metrics={k: v[order] for k, v in panel.metrics.items()})  # fmt: skip


def test_pooled_profile_is_the_seeds_mean_bitwise(pooled):
    key = ["cohort", "checkpoint"]
    joined = pooled.cells.select(*key, "estimate")
    for name in pooled.names:
        mine = pooled.seeds[name].cells.select(*key, pl.col("estimate").alias(name))
        joined = joined.join(mine, on=key, how="left")
    seeds = [joined[name].to_numpy() for name in pooled.names]
    assert joined.height == pooled.cells.height > 40
    assert np.array_equal(joined["estimate"].to_numpy(), sum(seeds) / len(seeds))  # seeds summed in order, then / S
    assert np.array_equal(pooled_mean(np.stack(seeds)), sum(seeds) / len(seeds))
    spread = np.stack(seeds)
    assert np.allclose(pooled.cells.sort(key)["seed_sd"].to_numpy(), joined.sort(key).select(pooled.names)
                       .to_numpy().std(axis=1, ddof=1))  # fmt: skip
    events = pooled.persistent["event_time"].to_numpy()
    curves = [pooled.seeds[n].persistent.filter(pl.col("event_time").is_in(events.tolist())).sort("event_time")
              ["estimate"].to_numpy() for n in pooled.names]  # fmt: skip
    assert np.array_equal(pooled.persistent.sort("event_time")["estimate"].to_numpy(), sum(curves) / len(curves))
    overall = [pooled.seeds[n].overall["estimate"] for n in pooled.names]
    assert pooled.summaries["overall"].estimate == pytest.approx(np.mean(overall), abs=1e-12)
    assert np.array_equal(pooled.summaries["overall"].seeds, np.array(overall))
    assert spread.shape[0] == 4


def test_each_seed_is_its_own_estimate(panels, pooled):
    """Each seed's point estimates are those of a lone estimate of its panel (only the multipliers are keyed)."""
    from memtui.estimation.estimate import estimate

    lone = estimate(panels[2], SETTINGS)
    assert np.array_equal(lone.cells["estimate"].to_numpy(), pooled.seeds["seed2"].cells["estimate"].to_numpy())


def test_draws_are_keyed_by_instance_not_by_row(panels):
    """The same seed's panel three times, each in another row order: with shared draws every copy's draws are the
    same, so the pooled standard error is one copy's and the seeds agree (to rounding); with independent draws the
    pooled standard error falls by about sqrt(3)."""
    copies = [panels[0], _permuted(panels[0], 1), _permuted(panels[0], 2)]
    shared = estimate_pooled(copies, SETTINGS, names=["a", "b", "c"])
    alone = shared.seeds["a"]
    post = ~alone.cells["pre_treatment"].to_numpy()
    assert np.allclose(shared.cells["std_error"].to_numpy()[post], alone.cells["std_error"].to_numpy()[post],
                       rtol=1e-5)  # fmt: skip
    # identical seeds: no deviation beyond rounding, so no deviation has a standard error and there is no test
    assert all(a.spread < 1e-12 and np.isnan(a.statistic) and not a.rejected for a in shared.agreement.values())
    assert shared.summaries["overall"].std_error == pytest.approx(alone.overall["std_error"], rel=1e-5)
    independent = estimate_pooled(copies, SETTINGS, names=["a", "b", "c"], shared=False)
    ratio = np.median(independent.cells["std_error"].to_numpy()[post] / alone.cells["std_error"].to_numpy()[post])
    assert ratio == pytest.approx(1 / np.sqrt(3), rel=0.1)
    assert any("independent" in n for n in independent.notes)


def test_shared_instances_widen_the_pooled_standard_error(pooled):
    """The seeds share their controls' and their instances' effects: the joint draws' standard error of the overall
    average is well above the one that treats the seeds as independent; with nothing shared the two agree."""
    o = pooled.summaries["overall"]
    assert o.std_error > 1.2 * o.independent_se
    post = pooled.cells.filter(~pl.col("pre_treatment"))
    assert np.median(post["std_error"] / post["independent_se"]) > 1.05
    flat = estimate_pooled(simulate_seeds(SeedSimulation(seed=3, shared_sd=0, effect_sd=0, noise_sd=1.2)), SETTINGS)
    f = flat.summaries["overall"]
    assert f.std_error == pytest.approx(f.independent_se, rel=0.15)


def test_agreement_flags_a_seed_whose_effect_differs():
    odd = estimate_pooled(simulate_seeds(SeedSimulation(seed=3, odd_seed=2.0)), SETTINGS)
    assert odd.agreement["overall"].rejected and odd.agreement["overall"].seed == "seed0"
    assert odd.agreement["overall"].p_value < 0.01


def test_calibrated_settings_pool_with_the_classic_band(panels):
    res = estimate_pooled(panels, replace(SETTINGS, band="calibrated"))
    assert res.seeds["seed0"].band == "calibrated"
    assert any("classic band" in n for n in res.notes)


def _simulation(reps: int, design: SeedSimulation, shared: bool = True) -> dict[str, np.ndarray]:
    out: dict[str, list] = {"overall": [], "se": [], "ind": [], "covers": [], "reject": []}
    for r in range(reps):
        sim = replace(design, seed=100 + r)
        res = estimate_pooled(simulate_seeds(sim), replace(SETTINGS, seed=r), shared=shared)
        post = res.cells.filter(~pl.col("pre_treatment"))
        base = sim.base
        truth = sim.pooled_truth()[np.searchsorted(base.cohorts, post["cohort"].to_numpy()),
                                   np.searchsorted(base.steps, post["checkpoint"].to_numpy())]  # fmt: skip
        o = res.summaries["overall"]
        out["overall"].append(o.estimate - truth.mean())
        out["se"].append(o.std_error)
        out["ind"].append(o.independent_se)
        low, high = post["band_low"].to_numpy(), post["band_high"].to_numpy()
        out["covers"].append(bool(np.all((low <= truth) & (truth <= high))))
        out["reject"].append(res.agreement["overall"].rejected or res.agreement["persistent"].rejected)
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.simulation
def test_simulation_with_a_known_truth():
    """40 simulated suites (~8 s; benchmarks/seeds.py prints the full table): the joint draws' standard error of the
    overall average matches its spread over replications, the independent-seeds one falls short; the pooled band
    covers the truth far more often than the band of independent draws; the agreement test holds its level when the
    seeds share one truth and rejects when seed 0's effect is twice the others'."""
    design = SeedSimulation(per_cohort=40, n_never=100)
    shared = _simulation(40, design)
    spread = shared["overall"].std()
    assert 0.8 < shared["se"].mean() / spread < 1.25
    assert shared["ind"].mean() / spread < 0.85
    assert shared["covers"].mean() >= 0.85
    assert shared["reject"].mean() <= 0.15
    independent = _simulation(40, design, shared=False)
    assert independent["covers"].mean() <= shared["covers"].mean() - 0.15  # measured: 0.70 against 0.95
    odd = _simulation(10, replace(design, odd_seed=2.0))
    assert odd["reject"].mean() >= 0.9


def test_refusals(panels):
    with pytest.raises(MemtuiError, match="two seeds or more"):
        estimate_pooled(panels[:1], SETTINGS)
    other = replace(panels[1], ids=panels[1].ids + 1)
    with pytest.raises(MemtuiError, match="do not hold the same instances") as info:
        estimate_pooled([panels[0], other], SETTINGS)
    assert "\n" not in str(info.value)
    twice = replace(panels[1], ids=np.where(panels[1].ids == 5, 6, panels[1].ids))
    with pytest.raises(MemtuiError, match="ids repeat"):
        estimate_pooled([panels[0], twice], SETTINGS)
    done = panels[1].done.copy()
    done[-1] = False
    with pytest.raises(MemtuiError, match="different completed checkpoints"):
        estimate_pooled([panels[0], replace(panels[1], done=done)], SETTINGS)
    with pytest.raises(MemtuiError, match="bootstrap draws"):
        estimate_pooled(panels, replace(SETTINGS, draws=0))
    with pytest.raises(MemtuiError, match="engine memtui"):
        estimate_pooled(panels, replace(SETTINGS, engine="differences"))
    with pytest.raises(MemtuiError, match="--cluster"):
        estimate_pooled(panels, replace(SETTINGS, cluster="batch"))
    with pytest.raises(MemtuiError, match="^seed0: .*no metric"):
        estimate_pooled(panels, replace(SETTINGS, metric="rank"))
    with pytest.raises(MemtuiError, match="one distinct name"):
        estimate_pooled(panels, SETTINGS, names=["a", "a", "b", "c"])
