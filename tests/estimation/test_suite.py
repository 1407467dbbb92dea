"""A model suite (estimation.suite): shared-draw estimates equal each model's own estimate, the panels are put on their
common instances and checkpoints, and the correlations and headline figures are what they say."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from memtui.core.errors import MemtuiError
from memtui.engine import did
from memtui.engine.band_registry import get_band
from memtui.engine.layout import build_layout
from memtui.estimation.correlations import correlations
from memtui.estimation.estimate import estimate
from memtui.estimation.headline import headline, plateau
from memtui.estimation.settings import Settings
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, simulate

SIM = Simulation(n_cohorts=6, per_cohort=15, n_never=40, n_checkpoints=8)


def write_model(path: Path, seed: int, effect: float = 1.0, *, sim: Simulation = SIM, keep=None, done=None,
                attrs=None, treatment_shift=None) -> Path:  # fmt: skip
    """A simulated model's panel over SIM's instances: ``keep`` selects (and orders) instances, ``done`` marks the
    completed checkpoints, ``treatment_shift`` moves some instances' treatment step."""
    data = simulate(replace(sim, seed=seed, effect=effect))
    rows = np.arange(len(data["ids"])) if keep is None else np.asarray(keep)
    values = {m: y[rows] for m, y in data["values"].items()}
    if done is not None:
        for y in values.values():
            y[:, ~np.asarray(done)] = np.nan
    treatment = data["treatment"][rows].copy()
    if treatment_shift is not None:
        treatment[treatment_shift] += sim.step
    return create_panel(path, ids=data["ids"][rows], treatment=treatment, steps=data["steps"], values=values,
                        signs=data["signs"], attrs=attrs or {"model": path.stem})  # fmt: skip


@pytest.fixture
def three(tmp_path) -> list[Path]:
    return [write_model(tmp_path / f"m{i}.h5", seed=i, effect=1.0 + i) for i in range(3)]


def assert_same_result(a, b):
    for scope in ("cells", "instantaneous", "persistent", "residual"):
        fa, fb = getattr(a, scope), getattr(b, scope)
        assert fa.equals(fb, null_equal=True), scope
    for key in ("overall", "pretrend"):
        da, db = getattr(a, key), getattr(b, key)
        assert da.keys() == db.keys()
        for k in da:
            assert da[k] == db[k] or (math.isnan(da[k]) and math.isnan(db[k])), (key, k, da[k], db[k])
    assert a.crit == b.crit or (math.isnan(a.crit) and math.isnan(b.crit))
    assert a.notes == b.notes
    assert np.array_equal(a.cohorts, b.cohorts) and np.array_equal(a.checkpoints, b.checkpoints)


SUITE_SETTINGS = {
    "default": {"draws": 150},
    "not-yet-treated": {"draws": 150, "control_group": "not_yet_treated", "seed": 3},
    "extractable": {"draws": 150, "estimator": "extractable"},
    "difference-mammen": {"draws": 150, "estimator": "difference", "multiplier": "mammen"},
    "universal-all": {"draws": 150, "base_period": "universal", "family": "all", "alpha": 0.1, "final_step": 5000},
    "no-draws": {"draws": 0},
}


def _supported(band: str, kw: dict) -> bool:
    """Whether the band serves these settings (Settings refuses some pairs itself, the band object the rest)."""
    try:
        return get_band(band).refusal(Settings(band=band, **kw)) is None
    except MemtuiError:
        return False


@pytest.mark.parametrize(
    ("name", "band"),
    [(name, band) for name, kw in SUITE_SETTINGS.items() for band in Settings.CHOICES["band"]
     if _supported(band, kw)],  # e.g. Mammen weights: classic band only; not-yet-treated: no permutation band
)  # fmt: skip
def test_every_estimate_equals_the_models_own(three, name, band):
    settings = Settings(band=band, **SUITE_SETTINGS[name])
    suite = load_suite(three)
    sr = estimate_suite(suite, settings, metrics=["loglik", "rank"])
    assert sr.metrics == ["loglik", "rank"]
    for name in suite.names:
        for metric in ("loglik", "rank"):
            alone = estimate(read_panel(suite.paths[suite.names.index(name)]), replace(settings, metric=metric))
            assert_same_result(sr.results[name][metric], alone)


def test_shared_bootstrap_is_each_layouts_own_bootstrap():
    """The engine helper: one multiplier per instance for every layout, bit for bit each layout's lone draws."""
    data = simulate(SIM)
    for control in ("never_treated", "not_yet_treated"):
        lays = [build_layout(data["values"][m], data["treatment"], data["steps"], never=NEVER, control_group=control)
                for m in ("loglik", "accuracy", "rank")]  # fmt: skip
        ests = [did.point_estimates(lay) for lay in lays]
        shared = did.bootstrap_shared(lays, ests, draws=60, seed=4)
        for lay, est, boot in zip(lays, ests, shared, strict=True):
            alone = did.bootstrap(lay, est, draws=60, seed=4)
            assert np.array_equal(alone.cells, boot.cells)
            assert np.array_equal(alone.group_w, boot.group_w)


def test_the_draws_do_not_depend_on_the_number_of_cores(monkeypatch):
    """Deterministic by construction: each group's products are made whole by one thread with BLAS on one thread, so
    one core, two or eight give the same bits (a test that would fail if BLAS or our threads split a sum)."""
    data = simulate(SIM)
    lay = build_layout(data["values"]["loglik"], data["treatment"], data["steps"], never=NEVER)
    est = did.point_estimates(lay)
    runs = []
    for cores in (1, 2, 8):
        monkeypatch.setattr(did.os, "cpu_count", lambda cores=cores: cores)
        runs.append(did.bootstrap(lay, est, draws=64, seed=9, chunk=16).cells)
    assert all(np.array_equal(runs[0], other) for other in runs[1:])


def test_partial_overlap_is_restricted_to_the_intersection_and_said(tmp_path):
    n = SIM.n_instances
    a = write_model(tmp_path / "a.h5", seed=0)
    # b: lacks the first 10 instances, has the rest in reverse order, and has not completed the last checkpoint
    done = np.ones(SIM.n_checkpoints, bool)
    done[-1] = False
    b = write_model(tmp_path / "b.h5", seed=1, keep=np.arange(n - 1, 9, -1), done=done)
    suite = load_suite([a, b])
    pa, pb = suite.panel("a"), suite.panel("b")
    assert np.array_equal(pa.ids, pb.ids) and np.array_equal(pa.treatment, pb.treatment)
    assert np.array_equal(pa.ids, np.arange(10, n))  # the first file's order
    assert np.array_equal(pa.done_steps, pb.done_steps) and len(pa.done_steps) == SIM.n_checkpoints - 1
    assert pa.metrics["loglik"].shape == (n - 10, SIM.n_checkpoints - 1)
    assert any(note.startswith(f"a: left out 10 of {n} instances and 1 of {SIM.n_checkpoints}") for note in suite.notes)
    assert not any(note.startswith("b:") for note in suite.notes)  # b only comes in another order: nothing left out
    # each restricted panel holds the file's own values for those instances and checkpoints
    full_b = read_panel(b)
    rows = [int(np.flatnonzero(full_b.ids == i)[0]) for i in pb.ids]
    assert np.array_equal(pb.metrics["rank"], full_b.metrics["rank"][rows][:, :-1])
    sr = estimate_suite(suite, Settings(draws=100))
    assert_same_result(sr.results["b"]["loglik"], estimate(pb, Settings(draws=100)))


def test_instances_with_other_treatment_steps_are_left_out(tmp_path):
    a = write_model(tmp_path / "a.h5", seed=0)
    b = write_model(tmp_path / "b.h5", seed=1, treatment_shift=[0, 1, 2])
    suite = load_suite([a, b])
    assert suite.panels[0].n_instances == SIM.n_instances - 3
    assert any("3 instances have different treatment steps" in note for note in suite.notes)


def test_no_overlap_is_a_one_line_error(tmp_path):
    a = write_model(tmp_path / "a.h5", seed=0)
    data = simulate(SIM)
    other = create_panel(tmp_path / "other.h5", ids=data["ids"] + 10_000, treatment=data["treatment"],
                         steps=data["steps"], values=data["values"])  # fmt: skip
    with pytest.raises(MemtuiError, match="share no instance") as err:
        load_suite([a, other])
    assert "\n" not in str(err.value)
    later = create_panel(tmp_path / "later.h5", ids=data["ids"], treatment=data["treatment"],
                         steps=data["steps"] + 100_000, values=data["values"])  # fmt: skip
    with pytest.raises(MemtuiError, match="share no completed checkpoint"):
        load_suite([a, later])
    with pytest.raises(MemtuiError, match="given twice"):
        load_suite([a, tmp_path / "." / "a.h5"])


def test_models_are_ordered_by_parameter_count_then_name(tmp_path):
    paths = [
        write_model(tmp_path / "x.h5", 0, attrs={"model": "big", "model_parameters": "1000000"}),
        write_model(tmp_path / "y.h5", 1, attrs={"model": "zeta"}),
        write_model(tmp_path / "z.h5", 2, attrs={"model": "small", "model_parameters": "70000"}),
        write_model(tmp_path / "w.h5", 3, attrs={"model": "alpha"}),
    ]
    suite = load_suite(paths)
    assert suite.names == ["small", "big", "alpha", "zeta"]
    assert suite.parameters == [70000, 1000000, None, None]
    assert [p.name for p in suite.paths] == ["z.h5", "x.h5", "w.h5", "y.h5"]
    assert any("record no parameter count" in note for note in suite.notes)
    # the same recorded model twice (two seeds): the file names tell them apart
    twins = [write_model(tmp_path / f"seed{i}.h5", i, attrs={"model": "pythia"}) for i in range(2)]
    assert load_suite(twins).names == ["seed0", "seed1"]


def _post_estimates(sr, metric):
    """Each model's post-treatment estimates on the cells all have, joined by (cohort, checkpoint): independent of the
    suite's own cell bookkeeping."""
    frames = [
        sr.results[n][metric].cells.filter(~pl.col("pre_treatment")).select("cohort", "checkpoint",
                                                                            pl.col("estimate").alias(n))
        for n in sr.names
    ]  # fmt: skip
    joined = frames[0]
    for f in frames[1:]:
        joined = joined.join(f, on=["cohort", "checkpoint"])
    return joined.select(sr.names).to_numpy().T


def test_correlations_match_numpy_and_scipy(three):
    sr = estimate_suite(load_suite(three), Settings(draws=200))
    c = correlations(sr, "loglik")
    x = _post_estimates(sr, "loglik")
    assert c.n_cells == x.shape[1] == SIM.n_cohorts * (SIM.n_checkpoints - 1) - sum(range(SIM.n_cohorts))
    assert np.allclose(c.pearson, np.corrcoef(x), rtol=1e-12)
    for i in range(3):
        for j in range(3):
            assert c.spearman[i, j] == pytest.approx(stats.spearmanr(x[i], x[j])[0], rel=1e-12)
    assert c.names == sr.names and c.metric == "loglik" and c.scope == "post"
    frame = c.frame()
    assert frame.columns == ["metric", "scope", "method", "model_a", "model_b", "correlation", "low", "high",
                             "corrected", "corrected_low", "corrected_high", "clipped", "n_cells", "alpha",
                             "draws"]  # fmt: skip
    assert frame.height == 2 * 9


def test_correlation_intervals_are_percentiles_of_the_joint_draws(tmp_path):
    """Every interval covers its point estimate, inside [-1, 1]; and it is the percentile interval of the correlation
    of (estimate + draw) profiles, re-centred on the point on Fisher's z scale, computed here from each model's own
    lone-bootstrap draws (which share multipliers because the instances are the same)."""
    sim = replace(SIM, per_cohort=40)
    paths = [write_model(tmp_path / f"m{i}.h5", i, effect=6.0 + 3 * i, sim=sim) for i in range(3)]
    settings = Settings(draws=300, seed=7)
    suite = load_suite(paths)
    sr = estimate_suite(suite, settings)
    c = correlations(sr, "loglik")
    off = ~np.eye(3, dtype=bool)
    for method in ("pearson", "spearman"):
        value, low, high = (getattr(c, f"{method}{s}") for s in ("", "_low", "_high"))
        assert np.all(low[off] <= value[off]) and np.all(value[off] <= high[off]), method
        assert np.all((low >= -1) & (high <= 1))
    # independently: each model's lone bootstrap, the same cells, numpy percentiles
    profiles = []
    for panel in suite.panels:
        lay = build_layout(panel.values("loglik"), panel.treatment, panel.done_steps, never=NEVER)
        est = did.point_estimates(lay)
        boot = did.bootstrap(lay, est, draws=300, seed=7)
        post = ~lay.cell_pre
        profiles.append(est.att[post][:, None] + boot.cells[post].astype(float))  # sign +1 for loglik
    r = np.array([np.corrcoef(profiles[0][:, b], profiles[1][:, b])[0, 1] for b in range(300)])
    spread = np.arctanh(r) - np.median(np.arctanh(r))
    low, high = np.tanh(np.arctanh(c.pearson[0, 1]) + np.quantile(spread, [0.025, 0.975]))
    assert c.pearson_low[0, 1] == pytest.approx(low, rel=1e-6)
    assert c.pearson_high[0, 1] == pytest.approx(high, rel=1e-6)
    # the draws' correlations sit below the point (each draw adds noise to noisy profiles): why the interval is
    # re-centred; its plain percentiles would leave the point outside
    assert np.median(r) < c.pearson[0, 1]


def test_correlations_of_a_metric_whose_draws_were_not_kept(three):
    suite = load_suite(three)
    both = estimate_suite(suite, Settings(draws=100), metrics=["loglik", "rank"])  # keeps loglik's draws only
    assert set(both.draws) == {"loglik"}
    alone = estimate_suite(suite, Settings(draws=100, metric="rank"))
    a, b = correlations(both, "rank", scope="profile"), correlations(alone, "rank", scope="profile")
    for field in ("pearson", "pearson_low", "pearson_high", "spearman_low", "spearman_high"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    with pytest.raises(MemtuiError, match="scope must be one of"):
        correlations(both, "rank", scope="nowhere")
    with pytest.raises(MemtuiError, match="was not estimated"):
        correlations(both, "accuracy")


def test_without_draws_correlations_have_no_interval(three):
    sr = estimate_suite(load_suite(three), Settings(draws=0))
    c = correlations(sr, "loglik")
    assert np.isfinite(c.pearson).all() and np.isnan(c.pearson_low).all() and np.isnan(c.spearman_high).all()


def test_headline_figures(three):
    sr = estimate_suite(load_suite(three), Settings(draws=150))
    table = headline(sr, "loglik")
    assert table.columns == [
        "model", "parameters", "metric", "instantaneous", "persistent_1", "persistent_5", "persistent_10", "plateau",
        "residual", "overall", "overall_std_error", "overall_significant", "significant_cells", "post_cells",
        "pretrend_p_value", "pretrend",
    ]  # fmt: skip
    assert table["model"].to_list() == sr.names
    for row in table.iter_rows(named=True):
        res = sr.results[row["model"]]["loglik"]
        assert row["instantaneous"] == pytest.approx(
            float(res.cells.filter(pl.col("event_time") == 0)["estimate"].mean())
        )
        pers = res.persistent.filter(pl.col("event_time") == SIM.step)["estimate"][0]
        assert row["persistent_1"] == pers
        assert row["persistent_10"] is None  # only 7 checkpoints after the first
        assert row["residual"] == pytest.approx(float(res.residual["estimate"].mean()))
        assert row["overall"] == res.overall["estimate"]
        post = res.cells.filter(~pl.col("pre_treatment"))
        assert (row["significant_cells"], row["post_cells"]) == (int(post["significant"].sum()), post.height)
        assert row["pretrend"] == ("ok" if res.pretrend["p_value"] >= 0.05 else "pre-trends")
    # a larger effect memorises more, instantaneously (the simulation's effect grows with the model index)
    assert table["instantaneous"].to_list() == sorted(table["instantaneous"].to_list())


def test_plateau_is_where_the_curve_stays_within_its_band_of_the_final_level():
    def curve(est, half):
        est = np.asarray(est, float)
        return pl.DataFrame({"event_time": np.arange(-1, len(est) - 1) * 10, "estimate": est,
                             "band_low": est - half, "band_high": est + half})  # fmt: skip

    # final level 1.0; from e = 20 on, every band (+-0.5) holds it; at e = 10 (2.0) it does not
    assert plateau(curve([0.0, 5.0, 2.0, 1.2, 0.8, 1.3, 1.0], 0.5)) == 20
    # a point later on that leaves the final level outside its band moves the plateau past it
    assert plateau(curve([0.0, 5.0, 1.0, 3.0, 1.0, 1.0], 0.5)) == 30
    assert plateau(curve([0.0, 1.0, 1.0], 0.5)) == 0
    assert plateau(curve([0.0], 0.5)) is None  # no post-treatment point
    assert plateau(curve([0.0, 1.0, 1.0], np.nan)) is None  # no band


def test_a_metric_one_panel_lacks_is_refused(tmp_path, three):
    data = simulate(SIM)
    only = create_panel(tmp_path / "only.h5", ids=data["ids"], treatment=data["treatment"], steps=data["steps"],
                        values={"loglik": data["values"]["loglik"]})  # fmt: skip
    suite = load_suite([three[0], only])
    with pytest.raises(MemtuiError, match="^only: .*metric 'rank' has no values"):
        estimate_suite(suite, Settings(draws=50, metric="rank"))
