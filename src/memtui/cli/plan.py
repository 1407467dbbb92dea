"""`memtui plan` on the command line: its options (built without importing the numerics, so that every `memtui`
start stays fast) and its report. The power analysis itself is memtui.estimation.plan."""

from __future__ import annotations

import argparse
import math

from memtui.cli.options import add_band_arg, add_panel_args, panel_path
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine.band_registry import BANDS, get_band

SUMMARY = "instances per cohort a new panel needs to detect memorisation, from a pilot panel (power analysis)"

PYTHIA_ROW = (
    2049  # kept equal to memtui.estimation.plan.PYTHIA_ROW (a test checks): the row length shown when none is stored
)


VALIDATION_MODES = ("optimal", "pilot")  # memtui.estimation.plan.VALIDATION_MODES, likewise


def add_arguments(p) -> None:
    from memtui.estimation.settings import ALPHA_RANGE, Settings

    d = Settings()  # the estimate's defaults, written once there
    add_panel_args(p, help="pilot panel: a smaller model's panel or a short extraction")
    p.add_argument("-m", "--metric", help=f"metric [{d.metric}, else the first metric with values]")
    p.add_argument("--effect", type=float, help="an effect to detect, besides the pilot's instantaneous D, D/2, D/4")
    p.add_argument("--power", type=float, default=0.8, help="probability of detecting it [0.8]")
    p.add_argument(
        "--alpha",
        type=float,
        default=d.alpha,
        help=f"1 - confidence of the simultaneous band; {ALPHA_RANGE} [{d.alpha:g}]",
    )
    p.add_argument("--cohorts", type=_whole_number, help="cohorts of the planned panel [the pilot's]")
    p.add_argument("--checkpoints", type=_whole_number, help="checkpoints of the planned panel [the pilot's]")
    p.add_argument(
        "--validation",
        type=_validation,
        default="optimal",
        help="validation instances: optimal (fewest instances in all), pilot (the pilot's share) or a count [optimal]",
    )
    p.add_argument("-B", "--draws", type=int, default=d.draws, help=f"bootstrap draws (0: pointwise bands) [{d.draws}]")
    p.add_argument(
        "--calibrate",
        type=_whole_number,
        metavar="N",
        help="also simulate N null panels of the planned design (the first effect's sizes; `memtui calibrate`'s "
        "machinery) and report each band's family-wise error there",
    )
    p.add_argument(
        "--seed", type=int, default=d.seed, help="seed of the pilot's bootstrap and of the simulated critical values"
    )
    add_band_arg(p)


def _whole_number(text: str) -> int:
    from memtui.cli.options import count

    return count(text)


def _validation(text: str) -> str | int:
    if text in VALIDATION_MODES:
        return text
    try:
        value = _whole_number(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is neither {' nor '.join(VALIDATION_MODES)} nor a number of instances"
        ) from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"--validation needs at least 2 instances, not {value}")
    return value


def _tokens(n: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def _print_gpu_hours(plan, length: float) -> None:
    """Each feasible row's tokens for all checkpoints as hours of one H100, at the rates measured there."""
    from memtui.estimation.plan import H100_INVARIANT_COST, gpu_hours

    rows = [(row, row.panel_size(plan.cohorts)) for row in plan.rows]
    rows = [(row, size) for row, size in rows if size is not None]
    if not rows:
        return
    print(f"GPU time       hours of one H100 to score all {plan.checkpoints} checkpoints, at the rates measured there "
          f"(docs/extraction.md, \"Speed\"; the batch-invariant scorer, {H100_INVARIANT_COST:.2f}x the fast path's "
          "time; random weights, bf16, rows of 2,049 tokens)")  # fmt: skip
    for row, size in rows:
        hours = gpu_hours(size * length * plan.checkpoints)
        shown = ", ".join(f"{name} {h:,.3g} h" for name, h in hours.items())
        print(f"  for {row.effect:.4g} ({row.label}): {shown}")


def run(args) -> int:
    from memtui.engine import power as pw
    from memtui.estimation.cache import cached_estimate
    from memtui.estimation.plan import check_plan_args, minimum_detectable_effect, pilot_variances, plan_sizes
    from memtui.estimation.settings import Settings
    from memtui.panel.hdf5 import read_panel

    given = [("--effect", args.effect)] if args.effect is not None else []
    # refused before the pilot is read: a typo costs no estimate
    check_plan_args(
        power=args.power, alpha=args.alpha, cohorts=args.cohorts, checkpoints=args.checkpoints, effects=given
    )
    panel = read_panel(panel_path(args))
    metric = args.metric if args.metric is not None else panel.default_metric
    settings = Settings(metric=metric, draws=args.draws, seed=args.seed, alpha=args.alpha, band=args.band).validate()
    if args.calibrate is not None and (args.calibrate < 1 or not args.draws):
        raise MemtuiError("--calibrate needs at least 1 panel and a bootstrap (not -B 0).")
    pilot = pilot_variances(panel, metric)
    cohorts = args.cohorts or pilot.n_cohorts
    checkpoints = args.checkpoints or pilot.checkpoints
    check_plan_args(power=args.power, alpha=args.alpha, cohorts=cohorts, checkpoints=checkpoints)
    res = cached_estimate(panel, settings)
    d0 = float(res.instantaneous["estimate"].mean())
    effects = []
    if math.isfinite(d0) and d0 > 0:
        effects = [("D", d0), ("D/2", d0 / 2), ("D/4", d0 / 4)]
    if args.effect is not None:
        effects.append(("--effect", args.effect))
    if not effects:
        raise MemtuiError(
            f"the pilot shows no instantaneous memorisation of {clean(metric, 80)} (mean {d0:.4g} at c = g), so "
            "there is no effect to plan for; pass --effect D with the memorisation to detect."
        )
    # the planned band is the large-sample one; -B only says whether there is a bootstrap band at all (-B 0: pointwise)
    sim_draws = pw.PLAN_DRAWS if args.draws else 0
    plan = plan_sizes(
        pilot, effects, cohorts=cohorts, checkpoints=checkpoints, power=args.power, alpha=args.alpha,
        validation=args.validation, draws=sim_draws, seed=args.seed, band=args.band,
    )  # fmt: skip
    given_row = next((r for r in plan.rows if r.label == "--effect"), None)
    if given_row is not None and given_row.per_cohort is None and "more than" in given_row.reason:
        raise MemtuiError(
            f"--effect {args.effect:g} is too small to detect with any panel: it {given_row.reason.split(':')[0]} "
            f"(an instance's change at c = g varies by {math.sqrt(pilot.s_treated):.3g} in the pilot); pass a "
            "larger --effect."
        )
    mde = minimum_detectable_effect(panel, settings, args.power, result=res)
    _print_plan(args, panel, pilot, plan, res, mde, _own_crit(args, pilot, sim_draws))
    _print_fwer(args, pilot, plan)
    return 0


def _own_crit(args, pilot, sim_draws: int) -> float:
    """The planning model's critical value at the pilot's own sizes, beside the pilot's bootstrap: how far the pilot
    is from it (z without draws; under a band with a small-sample plan, mapped as ``plan_sizes`` maps it)."""
    from memtui.engine import power as pw
    from memtui.estimation.results import z_value

    if not sim_draws:
        return z_value(args.alpha)
    model = pw.BandModel(pilot.v_treated, pilot.v_control, cohorts=pilot.n_cohorts, checkpoints=pilot.checkpoints)
    own_n = pilot.n_treated / pilot.n_cohorts
    own_crit, _ = model.crit(own_n, pilot.n_control, args.alpha, sim_draws, args.seed)
    band = get_band(args.band)
    if band.small_sample_plan:  # the calibrated band: the Welch t mapping plan_sizes uses
        from memtui.estimation.plan import welch_df

        own_crit = band.plan_crit(own_crit, welch_df(pilot, own_n, pilot.n_control))
    return own_crit


def _print_fwer(args, pilot, plan) -> None:
    """The family-wise error the planned design is known to have: the nearest simulated design of the calibration
    study and, with --calibrate N, a simulation of the planned design itself."""
    from memtui.estimation.evidence import nearest

    row = next((r for r in plan.rows if r.per_cohort is not None), None)
    if row is None or not args.draws:
        return
    m = nearest(row.per_cohort, plan.n_cells)
    studied = [b for b in BANDS if hasattr(m, b)]  # the bands the calibration study simulated
    rates = ", ".join(f"{b} {100 * r[0]:.1f} ± {100 * r[1]:.1f} %" for b, r in ((b, m.rate(b)) for b in studied))
    print(f"family-wise    at {row.per_cohort}/cohort ({row.label}), post family, nearest simulated design "
          f"{m.label}: {rates} (nominal {100 * args.alpha:g}; docs/calibration-study.md)")  # fmt: skip
    if args.calibrate is None:
        return
    from memtui.estimation.calibration import plan_calibration

    got = plan_calibration(pilot, plan, row, panels=args.calibrate, draws=args.draws, seed=args.seed)
    for band in got.hits:  # every registered band, in the registry's order
        print(f"  simulated    {got.verdict(band)} ({got.panels} null panels of the planned design)")


def _pilot_band_line(plan, res, own_crit: float) -> str:
    """The pilot's own critical value beside the plan's, and why they differ."""
    # a band that plans with the large-sample value: its pilot's bootstrap runs lower in small cohorts
    same = get_band(plan.band).small_sample_plan
    why = "the same band" if same else f"the {plan.band} bootstrap runs lower in small cohorts"
    return (f"pilot band     crit {res.crit:.3f} (its bootstrap) vs {own_crit:.3f} (this model at its sizes, "
            f"{plan.band} band; {why})")  # fmt: skip


def _print_plan(args, panel, pilot, plan, res, mde: float, own_crit: float) -> None:
    from memtui.estimation.settings import coverage

    name = clean(pilot.metric, 80)
    print(f"pilot          {clean(panel.path)}: {name}, {pilot.n_cohorts} cohorts ({pilot.n_treated} instances) + "
          f"{pilot.n_control} validation, {pilot.checkpoints} checkpoints")  # fmt: skip
    print(f"variance       of an instance's change at c = g (from the checkpoint before g): treated "
          f"{pilot.s_treated:.4g}, validation {pilot.s_control:.4g}; treated measured up to {pilot.treated_lags} "
          "checkpoints apart, held beyond")  # fmt: skip
    if not args.draws:
        how = f"pointwise bands (-B 0): z = {plan.rows[0].crit:.3f}"
    elif plan.draws_used:
        how = f"simultaneous {coverage(args.alpha)} band, critical value simulated ({plan.draws_used} draws)"
    else:
        how = f"simultaneous {coverage(args.alpha)} band, Sidak bound (too many cells to simulate quickly)"
    if args.draws and get_band(plan.band).small_sample_plan:
        how += "; calibrated: mapped through the c = g cell's Welch t law (df below), non-central t power"
    print(f"planned        {plan.cohorts} cohorts x {plan.checkpoints} checkpoints, {plan.n_cells} post-treatment "
          f"cells: {how}")  # fmt: skip
    if args.draws:
        print(_pilot_band_line(plan, res, own_crit))
    print(f"pilot MDE      {mde:.4g}: the instantaneous memorisation the pilot itself detects with "
          f"{args.power:.0%} power (a median cohort)")  # fmt: skip
    if pilot.row_length is None:
        length, where = PYTHIA_ROW, f"{PYTHIA_ROW} tokens a row (Pythia's; the pilot stores no tokens)"
    else:
        length, where = pilot.row_length, f"{pilot.row_length:.4g} tokens a row (the pilot's mean)"
    mode = {"optimal": "cost-optimal share", "pilot": "the pilot's share"}.get(plan.validation, "fixed")
    print(f"plan           {args.power:.0%} power to detect memorisation D at an instantaneous cell c = g; "
          f"validation: {mode}; {where}")  # fmt: skip
    print(f"  {'effect':>16} {'per cohort':>11} {'validation':>11} {'panel':>9} {'power':>6} {'crit':>6} "
          f"{'df':>6} {'tokens/ckpt':>12} {f'tokens ({plan.checkpoints} ckpts)':>18}")  # fmt: skip
    for row in plan.rows:
        label = f"{row.effect:.4g} ({row.label})"
        size = row.panel_size(plan.cohorts)
        if size is None:
            print(f"  {label:>16} {row.reason:>40}")
            continue
        per_ckpt = size * length
        df = "inf" if math.isinf(row.df) else f"{row.df:.0f}"
        tokens = f"{_tokens(per_ckpt):>12} {_tokens(per_ckpt * plan.checkpoints):>18}"
        print(f"  {label:>16} {row.per_cohort:>11,} {row.validation:>11,} {size:>9,} {row.power:>6.1%} "
              f"{row.crit:>6.3f} {df:>6} {tokens}")  # fmt: skip
    _print_gpu_hours(plan, length)
    from memtui.estimation.evidence import MISCALIBRATED_BELOW
    from memtui.estimation.settings import DEFAULT_BAND

    band = plan.band if args.draws else DEFAULT_BAND
    limit = MISCALIBRATED_BELOW[band]
    small = [r for r in plan.rows if r.per_cohort is not None and r.per_cohort < limit]
    if small and args.draws:
        print(f"note           cohorts under {limit} instances: the {band} band is known to over-reject there "
              "(docs/estimation.md, small cohorts; `memtui calibrate` measures a panel's own design)")  # fmt: skip
    if any(r.per_cohort is None and "validation instances" in r.reason for r in plan.rows):
        print(f"note           with {plan.validation} validation instances the controls' own noise exceeds what "
              "that effect allows; add validation instances")  # fmt: skip
