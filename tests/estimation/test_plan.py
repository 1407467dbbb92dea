"""`memtui plan`: the power formula, the solved cohort size, the band model, the command line and its refusals, and
(slow) a simulation check that panels of the planned size detect the planned effect with the planned power."""

from __future__ import annotations

import math
import re
import sys
from statistics import NormalDist

import numpy as np
import pytest

from memtui.cli.main import main
from memtui.core.errors import MemtuiError
from memtui.engine import power as pw
from memtui.estimation.estimate import estimate, z_value
from memtui.estimation.plan import (
    H100_FAST_TOKENS_PER_S,
    H100_INVARIANT_COST,
    PYTHIA_ROW,
    VALIDATION_MODES,
    gpu_hours,
    minimum_detectable_effect,
    pilot_variances,
    plan_sizes,
    t_power,
    validation_ratio,
)
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate, write_synthetic

PHI = NormalDist().cdf
NOISE_VAR = 2 * 8.0**2  # synthetic loglik: noise sd 8 per checkpoint, so a change has variance 128 at every lag


def panel_of(sim: Simulation) -> Panel:
    d = simulate(sim)
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics=d["values"], signs=d["signs"], truth=d["truth"])  # fmt: skip


@pytest.fixture(scope="module")
def pilot():
    return pilot_variances(panel_of(Simulation(n_cohorts=8, per_cohort=100, n_never=800, n_checkpoints=10)), "loglik")


@pytest.fixture
def plan_cli(capsys):
    """`memtui plan ARGS...` in-process, as cli.main runs a subcommand: (exit code, stdout, stderr)."""

    def run(*args):
        try:
            code = main(["plan", *map(str, args)])
        except SystemExit as exc:
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


# ---------------------------------------------------------------- the power formula and the solved size


def test_power_is_the_two_sided_normal_rejection_probability():
    for effect, se, crit in [(0.0, 1.0, 1.96), (2.0, 1.0, 1.96), (-3.0, 0.5, 3.2), (10.0, 4.0, 2.5)]:
        lam = abs(effect) / se
        assert pw.power(effect, se, crit) == pytest.approx(1 - PHI(crit - lam) + PHI(-crit - lam), abs=1e-12)
    assert pw.power(0.0, 1.0, z_value(0.05)) == pytest.approx(0.05, abs=1e-12)  # no effect: the false-positive rate


@pytest.mark.parametrize("target", [0.5, 0.8, 0.9, 0.99])
@pytest.mark.parametrize("crit", [1.0, 1.96, 3.5])
def test_detectable_ratio_inverts_power(target, crit):
    ratio = pw.detectable_ratio(target, crit)
    assert pw.power(ratio, 1.0, crit) == pytest.approx(target, abs=1e-10)
    # the far tail adds power, so the exact ratio is at most the one-tail closed form crit + z_power
    closed = crit + NormalDist().inv_cdf(target)
    assert ratio <= closed + 1e-12
    if crit >= 1.96:
        assert ratio == pytest.approx(closed, abs=2e-4)  # the far tail is at most Phi(-2 crit) ~ 4e-5
    # a target below the false-positive rate needs no effect
    assert pw.detectable_ratio(0.5 * float(pw.power(0.0, 1.0, crit)), crit) == 0.0
    with pytest.raises(ValueError):
        pw.detectable_ratio(1.0, crit)


def test_pilot_variances_recover_the_simulated_noise(pilot):
    # treated instances also vary in their memorisation: none in the simulation, so both are the noise's 128
    assert pilot.s_treated == pytest.approx(NOISE_VAR, rel=0.08)
    assert pilot.s_control == pytest.approx(NOISE_VAR, rel=0.08)
    assert np.allclose(pilot.v_control[1:], NOISE_VAR, rtol=0.08)
    assert np.allclose(pilot.v_treated[1:], NOISE_VAR, rtol=0.15)
    assert pilot.v_treated[0] == 0 == pilot.v_control[0]
    assert (pilot.n_cohorts, pilot.n_treated, pilot.n_control, pilot.checkpoints) == (8, 800, 800, 10)
    assert pilot.treated_lags == 9 and pilot.row_length is None


def test_solved_size_equals_the_closed_form_with_pointwise_bands(pilot):
    """-B 0: the band is pointwise, crit = z, and n_g = (z_alpha/2 + z_power)^2 (V_T + V_C / kappa) / D^2."""
    effects = [("D", 6.0), ("D/2", 3.0), ("x", 1.7)]
    for power, alpha in [(0.8, 0.05), (0.9, 0.01)]:
        plan = plan_sizes(pilot, effects, cohorts=5, checkpoints=8, power=power, alpha=alpha, draws=0)
        kappa = validation_ratio(pilot, "optimal", 5)
        z = NormalDist().inv_cdf
        for row, (_, d) in zip(plan.rows, effects, strict=True):
            closed = (z(1 - alpha / 2) + z(power)) ** 2 * (pilot.s_treated + pilot.s_control / kappa) / d**2
            assert row.per_cohort == math.ceil(closed)
            assert row.validation == math.ceil(kappa * row.per_cohort)
            assert row.crit == z_value(alpha) and row.power >= power
            # one instance fewer per cohort (same validation share) falls short
            n = row.per_cohort - 1
            se = math.sqrt(pilot.s_treated / n + pilot.s_control / (kappa * n))
            assert pw.power(d, se, row.crit) < power


def test_cost_optimal_validation_minimises_the_instances_to_score(pilot):
    """For one standard error, kappa = sqrt(G V_C / V_T) needs fewer instances in all than any other share."""
    g = 20
    best = validation_ratio(pilot, "optimal", g)
    assert best == pytest.approx(math.sqrt(g * pilot.s_control / pilot.s_treated))

    def instances(kappa):  # G n + n_0 for se^2 = 1, n = V_T + V_C / kappa
        n = pilot.s_treated + pilot.s_control / kappa
        return g * n + kappa * n

    assert all(instances(best) < instances(best * f) for f in (0.5, 0.8, 1.25, 2.0))
    assert validation_ratio(pilot, "pilot", g) == pytest.approx(800 / 800 * g)


def test_required_size_is_monotone_in_effect_power_and_alpha(pilot):
    kw = {"cohorts": 5, "checkpoints": 8, "draws": 400}
    sizes = [r.per_cohort for r in plan_sizes(pilot, [("a", d) for d in (2.0, 3.0, 5.0, 8.0)], **kw).rows]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4  # a larger effect needs fewer
    by_power = [plan_sizes(pilot, [("D", 4.0)], power=p, **kw).rows[0].per_cohort for p in (0.5, 0.8, 0.95)]
    assert by_power == sorted(by_power) and len(set(by_power)) == 3
    by_alpha = [plan_sizes(pilot, [("D", 4.0)], alpha=a, **kw).rows[0].per_cohort for a in (0.2, 0.05, 0.01)]
    assert by_alpha == sorted(by_alpha) and len(set(by_alpha)) == 3
    # the simultaneous band needs more than a pointwise one; a larger family more than a smaller one
    pointwise = plan_sizes(pilot, [("D", 4.0)], cohorts=5, checkpoints=8, draws=0).rows[0]
    small = plan_sizes(pilot, [("D", 4.0)], **kw).rows[0]
    large = plan_sizes(pilot, [("D", 4.0)], cohorts=30, checkpoints=40, draws=400).rows[0]
    assert pointwise.crit < small.crit < large.crit
    assert pointwise.per_cohort < small.per_cohort


def test_fixed_validation_count(pilot):
    plan = plan_sizes(pilot, [("D", 4.0), ("tiny", 0.5)], cohorts=5, checkpoints=8, validation=300, draws=400)
    row, unreachable = plan.rows
    assert row.validation == 300 and row.power >= 0.8
    se = math.sqrt(pilot.s_treated / row.per_cohort + pilot.s_control / 300)
    assert t_power(4.0, se, row.crit, row.df) == pytest.approx(row.power)  # the calibrated band's Welch t power
    classic = plan_sizes(pilot, [("D", 4.0)], cohorts=5, checkpoints=8, validation=300, draws=400, band="classic")
    c = classic.rows[0]
    se = math.sqrt(pilot.s_treated / c.per_cohort + pilot.s_control / 300)
    assert pw.power(4.0, se, c.crit) == pytest.approx(c.power) and c.per_cohort <= row.per_cohort
    # 300 validation instances alone give the cell a standard error of ~0.65: an effect of 0.5 is out of reach
    assert unreachable.per_cohort is None and unreachable.validation is None


# ---------------------------------------------------------------- the band model


def test_band_model_critical_values():
    flat = np.r_[0.0, np.full(10, NOISE_VAR)]
    # one cell: the band is the pointwise one
    one, used = pw.simultaneous_crit(flat, flat, cohorts=1, checkpoints=2, n_treated=50, n_control=50, alpha=0.05,
                                     draws=20000)  # fmt: skip
    assert used == 20000 and one == pytest.approx(z_value(0.05), abs=0.05)
    # many correlated cells: above z, at most the Sidak bound for independent ones (plus Monte-Carlo error)
    for g, t in [(3, 5), (10, 12), (20, 21)]:
        crit, _ = pw.simultaneous_crit(flat, flat, cohorts=g, checkpoints=t, n_treated=20, n_control=200,
                                       alpha=0.05, draws=4000)  # fmt: skip
        assert z_value(0.05) < crit < pw.sidak_crit(pw.n_post_cells(g, t), 0.05) + 0.05
    # cells of one cohort share the base checkpoint: a random walk (V(L) = L) correlates them far more than white
    # noise, so its band is narrower
    walk = np.arange(12.0)
    narrow, _ = pw.simultaneous_crit(walk, walk, cohorts=10, checkpoints=12, n_treated=20, n_control=200,
                                     alpha=0.05, draws=4000)  # fmt: skip
    assert narrow < crit - 0.2
    # a design too large to simulate quickly falls back to the Sidak bound
    big, used = pw.simultaneous_crit(flat, flat, cohorts=2000, checkpoints=2001, n_treated=1, n_control=1,
                                     alpha=0.05, draws=1000)  # fmt: skip
    assert used == 0 and big == pytest.approx(pw.sidak_crit(pw.n_post_cells(2000, 2001), 0.05))


def test_band_model_matches_the_engine_on_large_cohorts():
    """The model's crit is the large-sample one the bootstrap approaches (docs/methods.md, "Planning a panel")."""
    sim = Simulation(n_cohorts=6, per_cohort=300, n_never=1500, n_checkpoints=9, seed=4)
    panel = panel_of(sim)
    res = estimate(panel, Settings(draws=4000))
    p = pilot_variances(panel, "loglik")
    crit, _ = pw.simultaneous_crit(p.v_treated, p.v_control, cohorts=6, checkpoints=9, n_treated=300,
                                   n_control=1500, alpha=0.05, draws=20000)  # fmt: skip
    assert crit == pytest.approx(res.crit, abs=0.08)


def test_increment_covariance_is_positive_semidefinite_even_for_an_invalid_variogram():
    bad = np.array([0.0, 10.0, 1.0, 30.0, 0.5])  # no process has this variogram
    cov = pw.increment_covariance(bad, 7)
    assert np.linalg.eigvalsh(cov).min() > -1e-9
    good = pw.increment_covariance(np.r_[0.0, np.full(5, 2.0)], 4)
    np.testing.assert_allclose(good, [[0, 0, 0, 0], [0, 2, 1, 1], [0, 1, 2, 1], [0, 1, 1, 2]], atol=1e-12)


# ---------------------------------------------------------------- minimum detectable effect


def test_minimum_detectable_effect_of_a_panel():
    panel = panel_of(Simulation(n_cohorts=5, per_cohort=40, n_never=200, n_checkpoints=7, seed=2))
    settings = Settings(draws=500)
    res = estimate(panel, settings)
    mde = minimum_detectable_effect(panel, settings, 0.8, result=res)
    se = float(np.median(res.instantaneous["std_error"].to_numpy()))
    assert pw.power(mde, se, res.crit) == pytest.approx(0.8, abs=1e-9)
    assert minimum_detectable_effect(panel, settings, 0.8) == pytest.approx(mde)  # estimates itself when not given
    assert minimum_detectable_effect(panel, settings, 0.5, result=res) < mde
    pointwise = Settings(draws=0)
    assert minimum_detectable_effect(panel, pointwise, 0.8) < mde  # a pointwise band detects smaller effects
    with pytest.raises(MemtuiError, match="power must be between 0 and 1"):
        minimum_detectable_effect(panel, settings, 1.0, result=res)


# ---------------------------------------------------------------- the command line


def _table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if re.match(r"\s+[\d.]+ \(", line)]


def test_plan_command_on_a_simulated_pilot(plan_cli, tmp_path):
    path = write_synthetic(tmp_path / "pilot.h5", Simulation(n_cohorts=6, per_cohort=40, n_never=200, n_checkpoints=8))
    code, out, err = plan_cli(path, "--cohorts", "10", "--checkpoints", "12", "-B", "300", "--effect", "3")
    assert code == 0, err
    assert "pilot          " in out and "6 cohorts (240 instances) + 200 validation, 8 checkpoints" in out
    assert "10 cohorts x 12 checkpoints, 65 post-treatment cells" in out
    assert f"{PYTHIA_ROW} tokens a row (Pythia's; the pilot stores no tokens)" in out
    assert "pilot MDE" in out
    rows = _table(out)
    assert [r[1] for r in rows] == ["(D)", "(D/2)", "(D/4)", "(--effect)"]
    d = float(rows[0][0])
    assert [float(r[0]) for r in rows[:3]] == pytest.approx([d, d / 2, d / 4], rel=1e-3)
    per_cohort = [int(r[2].replace(",", "")) for r in rows]
    assert per_cohort[0] < per_cohort[1] < per_cohort[2]
    for r in rows:
        n, n0, size = (int(v.replace(",", "")) for v in r[2:5])
        assert size == 10 * n + n0
        assert float(r[5].rstrip("%")) >= 80.0


def test_plan_counts_tokens_from_the_pilot_rows(plan_cli, tmp_path):
    d = simulate(Simulation(n_cohorts=4, per_cohort=30, n_never=100, n_checkpoints=6))
    n = len(d["ids"])
    lengths = np.where(np.arange(n) % 2, 100, 60)  # mean row: 80 tokens
    path = create_panel(tmp_path / "tok.h5", ids=d["ids"], treatment=d["treatment"], steps=d["steps"],
                        values=d["values"], signs=d["signs"], tokens=np.zeros((n, 100), np.int32),
                        lengths=lengths)  # fmt: skip
    code, out, err = plan_cli(path, "-B", "200", "--validation", "pilot")
    assert code == 0, err
    assert "80 tokens a row (the pilot's mean)" in out and "validation: the pilot's share" in out
    for r in _table(out):
        size = int(r[4].replace(",", ""))
        assert r[8] == _shown(size * 80) and r[9] == _shown(size * 80 * 6)  # 6 checkpoints (r[7]: Welch df)
        n, n0 = int(r[2].replace(",", "")), int(r[3].replace(",", ""))
        assert n0 == math.ceil(100 / 120 * 4 * n)  # the pilot's 100 validation per 120 treated


def test_plan_prints_the_gpu_hours_each_row_costs(plan_cli, tmp_path):
    """Each feasible row's tokens for every checkpoint, as hours of one H100 at the rates measured there (the
    batch-invariant scorer's cost included), per measured model shape."""
    path = write_synthetic(tmp_path / "pilot.h5", Simulation(n_cohorts=6, per_cohort=40, n_never=200, n_checkpoints=8))
    code, out, err = plan_cli(path, "--cohorts", "10", "--checkpoints", "12", "-B", "300")
    assert code == 0, err
    assert "GPU time       hours of one H100 to score all 12 checkpoints" in out
    lines = out.splitlines()
    gpu = lines[[i for i, line in enumerate(lines) if line.startswith("GPU time")][0] + 1 :]
    for r in _table(out):
        size = int(r[4].replace(",", ""))
        want = {k: size * PYTHIA_ROW * 12 * H100_INVARIANT_COST / v / 3600 for k, v in H100_FAST_TOKENS_PER_S.items()}
        line = next(g for g in gpu if g.startswith(f"  for {r[0]} {r[1]}: "))
        shown = dict(re.findall(r"(pythia-[\d.]+b) ([\d.,e+-]+) h", line))
        assert set(shown) == set(want)
        for name, hours in want.items():
            assert float(shown[name].replace(",", "")) == pytest.approx(hours, rel=5e-3)
    assert gpu_hours(3600 * 126_371.0)["pythia-1.4b"] == pytest.approx(H100_INVARIANT_COST)


def _shown(tokens: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if tokens >= size:
            return f"{tokens / size:.3g}{unit}"
    return f"{tokens:.0f}"


def test_plan_with_a_fixed_validation_set_too_small(plan_cli, tmp_path):
    path = write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=4, per_cohort=30, n_never=100, n_checkpoints=6))
    code, out, _ = plan_cli(path, "--validation", "3", "-B", "200")
    assert code == 0
    assert "not reachable with 3 validation instances" in out and "add validation instances" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--power", "1.5"], "--power must be between 0 and 1"),
        (["--power", "0"], "--power must be between 0 and 1"),
        (["--alpha", "1"], "--alpha must be from 0.0001 to 0.5"),
        (["--effect", "0"], "the effect to detect must be a positive number"),
        (["--effect", "-2"], "the effect to detect must be a positive number"),
        (["--effect", "nan"], "the effect to detect must be a positive number"),
        (["--cohorts", "0"], "--cohorts must be at least 1"),
        (["--checkpoints", "0"], "--checkpoints must be at least 1"),
        (["--cohorts", "5", "--checkpoints", "5"], "5 cohorts need at least 6 checkpoints"),
        (["--cohorts", "9"], "9 cohorts need at least 10 checkpoints"),  # the pilot's 8 checkpoints
        (["--validation", "1"], "--validation needs at least 2 instances"),
        (["--validation", "many"], "'many' is neither optimal nor pilot nor a number"),
        (["-m", "nope"], "no metric 'nope'"),
        (["-B", "5"], "draws must be 0"),
    ],
)
def test_bad_input_is_one_line(plan_cli, small_panel, args, message):
    code, out, err = plan_cli(small_panel, *args)
    assert code == 2 and not out
    assert err.startswith("memtui: ") and err.count("\n") == 1
    assert message in err


def test_a_pilot_without_post_treatment_cells_is_refused(plan_cli, tmp_path):
    n, steps = 40, np.array([0, 1000, 2000])
    treatment = np.where(np.arange(n) < 20, 5000, NEVER)  # every cohort after the last checkpoint
    rng = np.random.default_rng(0)
    path = create_panel(tmp_path / "late.h5", ids=np.arange(n), treatment=treatment, steps=steps,
                        values={"loglik": rng.normal(size=(n, 3))})  # fmt: skip
    code, _, err = plan_cli(path)
    assert code == 2 and err.count("\n") == 1
    assert "the pilot has no post-treatment cell" in err


def test_a_pilot_without_memorisation_needs_an_effect(plan_cli, tmp_path):
    sim = Simulation(n_cohorts=4, per_cohort=30, n_never=100, n_checkpoints=6, effect=-1.0)  # the "wrong" sign
    path = write_synthetic(tmp_path / "none.h5", sim)
    code, _, err = plan_cli(path, "-B", "200")
    assert code == 2 and "shows no instantaneous memorisation" in err and "--effect" in err
    code, out, _ = plan_cli(path, "-B", "200", "--effect", "10")
    assert code == 0 and [r[1] for r in _table(out)] == ["(--effect)"]


# ---------------------------------------------------------------- the simulation check


def walk_panel(cohorts, per_cohort, n_never, checkpoints, effect, seed, walk_sd=4.0, noise_sd=6.0) -> Panel:
    """Outcomes with a random walk under the white noise, so the variogram grows with the lag, V(L) = L walk_sd^2 +
    2 noise_sd^2, and cells of one cohort are correlated more than with white noise alone. Memorisation is
    ``effect`` at c = g and halves with every checkpoint after it."""
    rng = np.random.default_rng(seed)
    steps = np.arange(checkpoints) * 1000
    treatment = np.r_[np.repeat(np.arange(1, cohorts + 1) * 1000, per_cohort), np.full(n_never, NEVER)]
    n = len(treatment)
    walk = np.cumsum(rng.normal(0, walk_sd, (n, checkpoints)), axis=1)
    y = rng.normal(0, 50, (n, 1)) + 30 * np.sqrt(steps / 1000) + walk + rng.normal(0, noise_sd, (n, checkpoints))
    e = (steps[None, :] - treatment[:, None]) // 1000
    y += np.where((treatment[:, None] != NEVER) & (e >= 0), effect * 0.5 ** np.clip(e, 0, None), 0.0)
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(checkpoints, bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


def white_panel(cohorts, per_cohort, n_never, checkpoints, effect, seed) -> Panel:
    """The synthetic simulation, its instantaneous memorisation made ``effect`` for every cohort."""
    sim = Simulation(
        n_cohorts=cohorts,
        per_cohort=per_cohort,
        n_never=n_never,
        n_checkpoints=checkpoints,
        late_boost=0.0,
        effect=effect / 12.0,
        seed=seed,
    )  # fmt: skip (12: synthetic loglik's peak)
    return panel_of(sim)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "true_variance", "cohorts", "checkpoints", "effect", "target"),
    [
        (white_panel, lambda lag: NOISE_VAR, 5, 8, 5.0, 0.8),
        (walk_panel, lambda lag: 16.0 * lag + 72.0, 6, 10, 4.0, 0.7),
    ],
    ids=["white-noise", "random-walk"],
)
@pytest.mark.simulation
def test_planned_size_detects_the_effect_with_the_planned_power(make, true_variance, cohorts, checkpoints, effect,
                                                                 target):  # fmt: skip
    """Panels of the planned size with a true instantaneous effect D: the share of c = g cells whose simultaneous band
    excludes 0 is the planned power within Monte-Carlo error."""
    p = pilot_variances(make(10, 300, 1500, 12, effect, seed=21), "loglik")  # a large pilot: its error stays small
    row = plan_sizes(p, [("D", effect)], cohorts=cohorts, checkpoints=checkpoints, power=target).rows[0]
    assert 60 <= row.per_cohort <= 250  # large enough for the bootstrap to be near its asymptotics
    # the power at the rounded sizes with the simulation's true variances (the pilot only estimates them)
    se = math.sqrt(true_variance(1) / row.per_cohort + true_variance(1) / row.validation)
    planned = float(pw.power(effect, se, row.crit))
    runs = 600
    shares = np.empty(runs)
    for r in range(runs):
        res = estimate(make(cohorts, row.per_cohort, row.validation, checkpoints, effect, seed=1000 + r),
                       Settings(draws=300, seed=r))  # fmt: skip
        cells = res.cells.filter(res.cells["cohort"] == res.cells["checkpoint"])  # c = g, in the profile's band
        assert cells.height == cohorts
        shares[r] = cells["significant"].mean()
    mc_error = shares.std(ddof=1) / math.sqrt(runs)  # cells of one panel share a band: runs are the replicates
    print(
        f"\nplanned power {planned:.3f} (plan from the pilot {row.power:.3f}, target {target}), simulated "
        f"{shares.mean():.3f} +- {mc_error:.3f}; n_g {row.per_cohort}, n_0 {row.validation}, crit {row.crit:.3f}"
    )
    assert abs(shares.mean() - planned) < 3.5 * mc_error + 0.01
    assert abs(shares.mean() - row.power) < 3.5 * mc_error + 0.03  # the plan itself, the pilot's error included


def test_the_command_module_spells_the_plans_constants_alike():
    """plan_cmd repeats two constants so that building the parser imports no numerics: they must not drift."""
    import memtui.cli.plan as cmd

    assert cmd.PYTHIA_ROW == PYTHIA_ROW and cmd.VALIDATION_MODES == VALIDATION_MODES


def test_building_the_parser_imports_no_numerics():
    """Every `memtui` start builds the whole parser: it must not pay for scipy, polars or the estimation modules."""
    import subprocess

    code = (
        "import sys, memtui.cli.main; memtui.cli.main.build_parser(); "
        "heavy = ('scipy', 'polars', 'memtui.estimation.plan', 'memtui.estimation.estimate', 'torch'); "
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
