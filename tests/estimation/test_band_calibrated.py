"""The calibrated band as memtui's default: ``estimate`` reports what ``engine.bands`` computes (critical values,
standard errors, the summaries' bands), with the classic band's very draws and point estimates; results, frames and
the cache record the band; the settings refuse what the calibrated band cannot do, in one line."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine import bands, did
from memtui.engine.band_registry import BANDS
from memtui.engine.layout import build_layout
from memtui.engine.summaries import aggregate
from memtui.estimation import cache
from memtui.estimation.choices import SETTING_CHOICES
from memtui.estimation.estimate import aggregate_members, cell_masks, estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate, write_synthetic

SIM = Simulation(n_cohorts=5, per_cohort=12, n_never=30, n_checkpoints=7, seed=3)


def sim_panel(sim: Simulation = SIM) -> Panel:
    data = simulate(sim)
    steps = data["steps"]
    return Panel(ids=data["ids"], treatment=data["treatment"], steps=steps, done=np.ones(len(steps), bool),
                 metrics=dict(data["values"]), signs=dict(data["signs"]))  # fmt: skip


def test_the_band_choices_are_the_engines():
    assert SETTING_CHOICES["band"] == tuple(BANDS) == ("calibrated", "classic", "permutation")
    assert Settings().band == "calibrated"
    assert Settings().key()["band"] == "calibrated"


@pytest.mark.parametrize(
    "kw", [{}, {"control_group": "not_yet_treated", "base_period": "universal"}, {"estimator": "difference"},
           {"family": "all", "alpha": 0.1}],
)  # fmt: skip
def test_estimate_reports_the_calibrated_bands_of_the_engine(kw):
    panel = sim_panel()
    s = Settings(draws=200, seed=2, **kw)
    res = estimate(panel, s)
    assert res.band == "calibrated"
    for frame in (res.cells, res.instantaneous, res.persistent, res.residual):
        assert frame["band"].unique().to_list() == ["calibrated"]

    lay = build_layout(panel.values("loglik"), panel.treatment, panel.done_steps, never=NEVER, estimator=s.estimator,
                       base_period=s.base_period, control_group=s.control_group)  # fmt: skip
    est = did.point_estimates(lay)
    masks = cell_masks(lay, s)
    events, members, every = aggregate_members(lay)
    cal = bands.calibrated_bootstrap(lay, est, masks, draws=200, seed=2, floor=did.se_floor(lay.scale), members=every)
    crit = {name: did.critical_value(law, s.alpha) for name, law in cal.tmax.items()}
    order = np.lexsort((lay.steps[lay.cell_t], lay.steps[lay.group_index[lay.cell_group]]))
    cells = res.cells.sort(["cohort", "checkpoint"])
    assert np.array_equal(cells["std_error"].to_numpy(), cal.se[order], equal_nan=True)
    assert res.crit == (crit["all"] if s.family == "all" else crit["post"])
    assert res.instantaneous["crit"][0] == crit["instantaneous"]
    assert res.residual["crit"][0] == crit["residual"]
    # the calibrated standard error is the HC1 (Welch) one: the analytic one times sqrt(n / (n - 1)) per group
    assert np.all(cells["std_error"].to_numpy() > cells["analytic_se"].to_numpy())
    # the summaries: classic draws, analytic standard errors, studentised critical values
    theta, agg_draws = aggregate(lay, est.att, cal.boot.cells, cal.boot.group_w, every)
    fam = events >= 0 if s.family == "post" else np.ones(len(events), bool)
    crit_e = bands.aggregate_crit(agg_draws[:-1], cal.agg_se[:-1], cal.agg_correction[:-1], fam, s.alpha)
    pers = res.persistent
    assert np.all(pers.filter(fam)["crit"].to_numpy() == crit_e)
    assert np.array_equal(pers["std_error"].to_numpy(), cal.agg_se[:-1], equal_nan=True)
    o = res.overall
    crit_o = bands.aggregate_crit(agg_draws[-1:], cal.agg_se[-1:], cal.agg_correction[-1:], np.ones(1, bool), s.alpha)
    assert o.std_error == cal.agg_se[-1] and o.estimate == pytest.approx(theta[-1], rel=1e-12)
    assert o.ci_high - o.estimate == pytest.approx(crit_o * o.std_error, rel=1e-12)
    assert o.significant == (abs(o.estimate) > crit_o * o.std_error)
    # the pre-trend test studentises the placebo cells by the same standard errors, against the same law
    assert res.pretrend.crit == did.critical_value(cal.tmax["pre"], s.alpha)


def test_both_bands_share_point_estimates_and_draws_but_not_flags():
    panel = sim_panel(replace(SIM, per_cohort=8, effect=0.0, seed=11))
    cal, cls = (estimate(panel, Settings(draws=300, seed=5, band=b)) for b in ("calibrated", "classic"))
    for scope in ("cells", "persistent"):
        a, b = getattr(cal, scope), getattr(cls, scope)
        assert np.array_equal(a["estimate"].to_numpy(), b["estimate"].to_numpy(), equal_nan=True)
    # the bootstrap-t critical value is larger with 8 instances per cohort: t-like tails, studentised per draw
    assert cal.crit > cls.crit
    # the calibrated band says where it is known not to hold its level (memtui.estimation.evidence): 8 per cohort
    assert [n for n in cal.notes if "fewer than 10 instances" not in n] == cls.notes
    assert any("fewer than 10 instances" in n for n in cal.notes)


def test_mammen_weights_and_the_differences_engine_need_the_classic_band():
    with pytest.raises(MemtuiError, match="use --band classic for Mammen weights") as err:
        Settings(multiplier="mammen")
    assert "\n" not in str(err.value)
    with pytest.raises(MemtuiError, match="--band classic"):
        Settings(engine="differences", draws=0)
    assert Settings(multiplier="mammen", band="classic").multiplier == "mammen"
    with pytest.raises(MemtuiError, match="band must be one of calibrated, classic"):
        Settings(band="bootstrap-t")


def test_a_cohort_of_one_instance_has_no_band_and_says_why():
    panel = sim_panel()
    treatment = panel.treatment.copy()
    lone = np.flatnonzero(treatment == treatment[treatment != NEVER].min())[1:]
    keep = np.setdiff1d(np.arange(len(treatment)), lone)  # the first cohort keeps one instance
    one = Panel(ids=panel.ids[keep], treatment=treatment[keep], steps=panel.steps, done=panel.done,
                metrics={m: y[keep] for m, y in panel.metrics.items()}, signs=panel.signs)  # fmt: skip
    res = estimate(one, Settings(draws=100))
    single = res.cells.filter(res.cells["n_treated"] == 1)
    assert single.height and single["std_error"].is_nan().all() and not single["significant"].any()
    assert any("cohort or control set has a single instance have no band under the calibrated band" in n
               for n in res.notes)  # fmt: skip
    assert not any("no sampling variation" in n for n in res.notes)
    others = res.cells.filter(res.cells["n_treated"] > 1)
    assert others["std_error"].is_finite().all()


def test_the_cache_keeps_the_bands_apart(tmp_path):
    path = write_synthetic(tmp_path / "p.h5", SIM)
    panel = read_panel(path)
    cal, cls = Settings(draws=100), Settings(draws=100, band="classic")
    assert cache.cache_key(panel, cal) != cache.cache_key(panel, cls)
    first = cache.cached_estimate(panel, cls)
    again = cache.cached_estimate(panel, cal)
    assert again.band == "calibrated" and first.band == "classic"
    hit = cache.load(panel, cal)
    assert hit is not None and hit.band == "calibrated" and hit.cells["band"].unique().to_list() == ["calibrated"]
    assert hit.cells.equals(again.cells) and hit.crit == again.crit


def test_an_entry_from_before_the_small_sample_intervals_is_a_miss(tmp_path, monkeypatch):
    # the same settings came to mean other ci_low/ci_high (Welch t under the calibrated band): an entry written by
    # the code before must not be served as today's
    panel = read_panel(write_synthetic(tmp_path / "p.h5", SIM))
    settings = Settings(draws=100)
    monkeypatch.setattr(cache, "RESULTS_GENERATION", cache.RESULTS_GENERATION - 1)
    old_key = cache.cache_key(panel, settings)
    cache.cached_estimate(panel, settings)
    assert cache.load(panel, settings) is not None
    monkeypatch.undo()
    assert cache.cache_key(panel, settings) != old_key and cache.load(panel, settings) is None
