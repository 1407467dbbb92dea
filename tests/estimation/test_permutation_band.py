"""The permutation band through estimate, export, a suite and subgroups; its default where the panel's order is a
uniform shuffle; and its level on null panels of skewed persistent noise, where the calibrated band is known to
over-reject (a smaller, seeded version of benchmarks/permutation_level.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine import permutations
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import (
    PERMUTATION_DEFAULT,
    Settings,
    controls_not_in_order,
    default_band,
    order_not_shuffled,
)
from memtui.estimation.subgroups import estimate_by
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import Suite
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate

PERM = Settings(band="permutation", draws=99)


def _panel(seed: int = 0, effect: float = 1.0, attrs: dict | None = None, controls: str | None = None) -> Panel:
    """A simulated panel; ``controls``: "beyond" (every instance has a position in the order) or "held-out" (the
    never-trained ones at -1), None: no positions recorded."""
    d = simulate(Simulation(n_cohorts=6, per_cohort=12, n_never=40, n_checkpoints=8, seed=seed, effect=effect))
    dose = np.arange(len(d["ids"])) % 4 * 1.0
    prov = {}
    if controls is not None:
        position = np.arange(len(d["ids"]), dtype=np.int64)
        if controls == "held-out":
            position[d["treatment"] == NEVER] = -1
        prov = {"position": position}
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics=dict(d["values"]), signs=dict(d["signs"]), covariates={"dose": dose},
                 attrs=dict(attrs or {}), provenance=prov)  # fmt: skip


def test_every_result_and_frame_says_the_permutation_band_ran():
    r = estimate(_panel(), PERM)
    assert r.band == "permutation"
    for frame in (r.cells, r.instantaneous, r.persistent, r.residual):
        assert set(frame["band"].to_list()) == {"permutation"}
    assert any(note.startswith("permutation band:") for note in r.notes)
    # the band is estimate +/- crit * se with the estimate's own (analytic) standard errors
    post = r.cells.filter(~r.cells["pre_treatment"])
    half = (post["band_high"] - post["band_low"]).to_numpy() / 2
    np.testing.assert_allclose(half, r.crit * post["std_error"].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(post["std_error"].to_numpy(), post["analytic_se"].to_numpy())


def test_seeded_reproducible_and_its_p_values_are_on_the_grid_of_p_plus_one():
    a, b = estimate(_panel(), PERM), estimate(_panel(), PERM)
    assert a.cells.equals(b.cells) and a.pretrend == b.pretrend
    c = estimate(_panel(), replace(PERM, seed=1))
    assert c.crit != a.crit
    k = a.pretrend.p_value * (PERM.draws + 1)
    assert k == pytest.approx(round(k)) and 1 <= round(k) <= PERM.draws + 1


def test_settings_refuse_what_the_band_cannot_permute_in_one_line():
    for change in ({"control_group": "not_yet_treated"}, {"cluster": "batch"}):
        with pytest.raises(MemtuiError, match="permutation band") as err:
            Settings(band="permutation", **change)
        assert "\n" not in str(err.value)


def test_a_suite_and_subgroups_run_under_it_and_a_suite_model_is_its_lone_estimate():
    panels = [_panel(0), _panel(1, effect=0.5)]
    sr = estimate_suite(Suite(names=["a", "b"], panels=panels), PERM, metrics=("loglik",))
    for name, panel in zip(("a", "b"), panels, strict=True):
        lone = estimate(panel, PERM)
        assert sr.results[name]["loglik"].cells.equals(lone.cells)
    by = estimate_by(_panel(), PERM, "dose")
    assert np.isfinite(by.joint_crit["profile"])


def test_the_default_is_permutation_where_the_order_and_its_controls_are_randomised_else_calibrated_with_why():
    common = {"draws": 999, "control_group": "never_treated", "covariates": (), "cluster": "", "engine": "memtui"}
    for order in ("neox", "olmo-core", "amber"):  # shuffled, controls drawn from the order past the last trained step
        band, reason = default_band(_panel(attrs={"order": order}, controls="beyond"), **common)
        assert band == "permutation" and reason == PERMUTATION_DEFAULT
    for panel, why in ((_panel(controls="beyond"), "not known"),
                       (_panel(attrs={"order": "memmap"}, controls="beyond"), "memmap"),
                       (_panel(attrs={"order": "neox", "inserted_config": "{}"}, controls="beyond"), "inserted"),
                       (_panel(attrs={"order": "neox"}, controls="held-out"), "held out"),
                       (_panel(attrs={"order": "neox"}), "does not record")):  # fmt: skip
        band, reason = default_band(panel, **common)
        assert band == "calibrated" and why in reason and "\n" not in reason
    shuffled = _panel(attrs={"order": "amber"}, controls="beyond")
    assert order_not_shuffled(shuffled) is None and controls_not_in_order(shuffled) is None
    for change, why in (({"control_group": "not_yet_treated"}, "not-yet-treated"), ({"cluster": "batch"}, "cluster"),
                        ({"covariates": ("dose",)}, "covariates"), ({"draws": 0}, "no draws")):  # fmt: skip
        band, reason = default_band(shuffled, **{**common, **change})
        assert band == "calibrated" and why in reason


def test_the_cli_default_is_permutation_on_a_shuffled_panel_and_says_why_where_it_is_not(tmp_path):
    from argparse import Namespace

    from memtui.cli.options import run_notes, settings_from_args

    def args(**kw):
        base = {"metric": None, "estimator": "did", "base_period": "varying", "control_group": "never_treated",
                "draws": 99, "multiplier": "rademacher", "seed": 0, "alpha": 0.05, "family": "post",
                "final_step": None, "engine": "memtui", "band": "calibrated", "covariates": (),
                "cluster": ""}  # fmt: skip
        return Namespace(**{**base, **kw})

    shuffled = _panel(attrs={"order": "neox"}, controls="beyond")
    a = args()
    assert settings_from_args(a, shuffled).band == "permutation"
    assert run_notes(a) == [f"band: permutation ({PERMUTATION_DEFAULT}); --band calibrated for the bootstrap-t band"]
    a = args()
    assert settings_from_args(a, _panel(attrs={"order": "neox"}, controls="held-out")).band == "calibrated"
    assert run_notes(a)[0].startswith("band: calibrated, not permutation: its never-trained controls are held out")
    a = args()
    assert settings_from_args(a, _panel()).band == "calibrated" and run_notes(a) == []
    a = args(control_group="not_yet_treated")
    assert settings_from_args(a, shuffled).band == "calibrated"
    assert "not-yet-treated" in run_notes(a)[0]
    a = args(band_chosen=True)
    assert settings_from_args(a, shuffled).band == "calibrated" and run_notes(a) == []


def _skewed_null(seed: int, per: int = 10, cohorts: int = 6, never: int = 40, t: int = 8) -> Panel:
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 1000
    treatment = np.concatenate([np.repeat(steps[1 : cohorts + 1], per), np.full(never, NEVER)])
    n = len(treatment)
    y = rng.normal(0, 1, (n, 1)) + np.cumsum(rng.exponential(1, (n, t)) - 1, axis=1) / np.sqrt(t)
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool), metrics={"loglik": y},
                 signs={"loglik": 1})  # fmt: skip


@pytest.mark.parametrize("broken", [False, True])
def test_level_on_null_panels_of_skewed_persistent_noise(broken, monkeypatch):
    """120 null panels (a random walk of centred exponential steps, 10 per cohort): the post band flags at most
    5 % + 3 Monte-Carlo s.e., and the pre-trend p-values are uniform (half of them at most 1/2). A variant that does
    not permute the labels fails: its p-values are all 1."""
    if broken:
        monkeypatch.setattr(permutations, "orders", lambda p, seeds: np.tile(np.arange(len(p.keys)), (len(seeds), 1)))
    reps = 120
    flagged, p_values = [], []
    for seed in range(reps):
        r = estimate(_skewed_null(seed), Settings(band="permutation", draws=39, seed=seed))
        flagged.append(bool(r.cells.filter(~r.cells["pre_treatment"])["significant"].any()))
        p_values.append(r.pretrend.p_value)
    mc = np.sqrt(0.05 * 0.95 / reps)
    level_held = np.mean(flagged) <= 0.05 + 3 * mc
    uniform = abs(np.mean(np.asarray(p_values) <= 0.5) - 0.5) <= 4 * np.sqrt(0.25 / reps)
    assert (level_held and uniform) != broken


def test_a_design_with_too_few_labellings_says_nothing_can_be_significant(monkeypatch):
    """One cohort: with the treated labels alone permuted every permutation is the observed labelling; with the
    controls' label permuted too (the band) it is the two-sample permutation test of the cohort against them."""
    from memtui.engine.band_permutation import PERMUTATION

    d = simulate(Simulation(n_cohorts=1, per_cohort=12, n_never=40, n_checkpoints=8, seed=0, effect=5.0))
    panel = Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                  metrics=dict(d["values"]), signs=dict(d["signs"]))  # fmt: skip
    r = estimate(panel, PERM)
    assert not any("distinct labellings" in note for note in r.notes) and r.cells["significant"].any()
    monkeypatch.setattr(PERMUTATION, "controls", False)
    r = estimate(panel, PERM)
    assert any("distinct labellings" in note for note in r.notes)
    assert not r.cells["significant"].any()  # every permutation is the observed labelling


def test_the_centred_law_flags_more_true_cells_than_the_uncentred_one(monkeypatch):
    """Effects in every cohort: relabelled raw rows carry their own cohort's effects into the others and widen the
    law; the centred rows (each less its own cohort's estimates) do not. On the same seeded panels the centred band's
    critical value is lower on every one and it flags more of the (all truly non-zero) post cells in all."""
    from memtui.engine.band_permutation import PERMUTATION

    monkeypatch.setattr(PERMUTATION, "controls", False)  # the treated labels alone (the centred rows need that)
    got = {}
    for centred in (True, False):
        monkeypatch.setattr(PERMUTATION, "centred", centred)
        got[centred] = []
        for seed in range(4):
            r = estimate(_panel(seed, effect=0.5), Settings(band="permutation", draws=99, seed=seed))
            got[centred].append((r.crit, int(r.cells.filter(~r.cells["pre_treatment"])["significant"].sum())))
    crit, flagged = np.asarray(got[True]).T
    crit_raw, flagged_raw = np.asarray(got[False]).T
    assert np.all(crit < crit_raw)
    assert flagged.sum() > flagged_raw.sum()


def test_permuting_the_controls_too_flags_more_true_cells_than_fixing_them(monkeypatch):
    """Effects in every cohort: with the treated labels alone permuted, a permuted cohort carries the effects of the
    cohorts treated inside its window and the fixed controls none, so its estimate is shifted and the law widens; with
    the controls' label permuted too they draw the treated instances alike and the shift cancels. On the same seeded
    panels the band (controls permuted) has a lower critical value and flags more of the (all truly non-zero) post
    cells on every one."""
    from memtui.engine.band_permutation import PERMUTATION

    got = {}
    for controls in (True, False):
        monkeypatch.setattr(PERMUTATION, "controls", controls)
        got[controls] = []
        for seed in range(4):
            d = simulate(Simulation(n_cohorts=6, per_cohort=30, n_never=60, n_checkpoints=8, seed=seed, effect=1.0))
            panel = Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(8, bool),
                          metrics=dict(d["values"]), signs=dict(d["signs"]))  # fmt: skip
            r = estimate(panel, Settings(band="permutation", draws=99, seed=seed))
            got[controls].append((r.crit, int(r.cells.filter(~r.cells["pre_treatment"])["significant"].sum())))
    crit, flagged = np.asarray(got[True]).T
    crit_fixed, flagged_fixed = np.asarray(got[False]).T
    assert np.all(crit < crit_fixed) and np.all(flagged > flagged_fixed)


def _effects_everywhere(seed: int) -> Panel:
    d = simulate(Simulation(n_cohorts=6, per_cohort=30, n_never=15, n_checkpoints=8, seed=seed, effect=1.0))
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics=dict(d["values"]), signs=dict(d["signs"]))  # fmt: skip


@pytest.mark.parametrize("centred", [False, True])
def test_the_pre_trend_level_holds_with_effects_everywhere_and_fails_centred(centred, monkeypatch):
    """Panels with effects in every cohort and no pre-trend (few controls: 15 against cohorts of 30): the band's
    pre-trend check rejects at most 5 % + 3 Monte-Carlo s.e. over 150 panels. The centred law (each treated row less
    its cohort's estimates) fails it: the estimates carry the controls' noise into the treated rows, where a permuted
    estimate cancels it, so its law is too narrow (why the band runs uncentred)."""
    from memtui.engine.band_permutation import PERMUTATION

    monkeypatch.setattr(PERMUTATION, "centred", centred)
    reps = 150
    rejected = [estimate(_effects_everywhere(seed), Settings(band="permutation", draws=39, seed=seed)).pretrend.p_value
                < 0.05 for seed in range(reps)]  # fmt: skip
    assert (np.mean(rejected) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / reps)) != centred


def test_the_header_names_permutations_p_and_bootstrap_draws_b(cli, small_panel):
    code, out, _ = cli("estimate", small_panel, "-B", "99", "--band", "permutation")
    assert code == 0 and "(permutation simultaneous 95% band" in out and ", P=99)" in out and "B=99" not in out
    code, out, _ = cli("estimate", small_panel, "-B", "99")
    assert code == 0 and ", B=99)" in out and "P=99" not in out
