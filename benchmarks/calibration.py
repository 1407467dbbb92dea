"""Family-wise error and power of the classic and the calibrated simultaneous bands: docs/calibration-study.md.

    python benchmarks/calibration.py            # the full study (about half an hour on one core)
    python benchmarks/calibration.py --quick    # a small version (about a minute)
    python benchmarks/calibration.py --check    # only: the classic band reproduced here equals estimation.estimate's

Null panels (no memorisation): Y_ic = a_i + trend_c + e_ic with memtui.panel.synthetic's loglik scales (instance sd 60,
noise sd 8), e white or AR(1) across checkpoints (stationary sd 8); cohort k first trained at checkpoint k
(k = 1..G), never-treated controls. Per panel, one multiplier bootstrap (B = 1000, Rademacher, seed = panel seed)
serves both bands: the classic band is formed from the engine functions exactly as estimation.estimate's
_Cells/_assemble form it (IQR bootstrap standard errors, sup-t of draw / se), the calibrated one by engine.bands (the
studentised bootstrap-t, HC1 influence-function standard errors). Counted per panel: whether the `post` band flags a
post-treatment cell (family-wise error), the same for family `all`, the pre-trend test (p < alpha), the
instantaneous band (c = g) and the persistent band (event times e >= 0). Monte-Carlo standard error of a share p over
R panels: sqrt(p (1 - p) / R). Power panels add memtui.panel.synthetic's profile (peak 12 x effect, decaying to 15 %):
the share of (truly non-zero) post-treatment cells each band flags. Runs on one thread.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the study runs on one core; set before numpy loads BLAS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from memtui.engine import bands, did
from memtui.engine.layout import build_layout
from memtui.engine.summaries import aggregate
from memtui.estimation.results import final_index
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation

ALPHA = 0.05
INST_SD, NOISE_SD, PEAK = 60.0, 8.0, 12.0  # memtui.panel.synthetic's loglik


@dataclass(frozen=True)
class Design:
    label: str
    cohorts: int
    per_cohort: int
    never: int
    checkpoints: int
    reps: int
    rho: float = 0.0
    estimator: str = "did"
    control_group: str = "never_treated"
    base_period: str = "varying"

    def sim(self, effect: float = 0.0, seed: int = 0) -> Simulation:
        return Simulation(self.cohorts, self.per_cohort, self.never, self.checkpoints, effect=effect, seed=seed)


def panel_arrays(d: Design, seed: int, effect: float = 0.0):
    """(y, treatment, steps, truth) of one simulated panel (truth: cohorts x checkpoints, 0 before treatment)."""
    sim = d.sim(effect, seed)
    rng = np.random.default_rng([seed, 7])
    n_treated = d.cohorts * d.per_cohort
    treatment = np.concatenate([np.repeat(sim.cohorts, d.per_cohort), np.full(d.never, NEVER)])
    n, t = len(treatment), d.checkpoints
    e = rng.normal(0, NOISE_SD, (n, t))
    if d.rho:
        for c in range(1, t):  # stationary AR(1): sd stays NOISE_SD
            e[:, c] = d.rho * e[:, c - 1] + np.sqrt(1 - d.rho**2) * e[:, c]
    steps = sim.steps
    y = rng.normal(0, INST_SD, (n, 1)) + 250 * (1 - np.exp(-steps / (steps[-1] / 3 + 1)))[None, :] + e
    truth = sim.tau(PEAK)
    if effect:
        y[:n_treated] += truth[np.searchsorted(sim.cohorts, treatment[:n_treated])]
    return y, treatment, steps, truth


def setup(d: Design, y, treatment, steps):
    lay = build_layout(y, treatment, steps, never=NEVER, estimator=d.estimator, base_period=d.base_period,
                       control_group=d.control_group)  # fmt: skip
    est = did.point_estimates(lay)
    cohort_step, cell_step = steps[lay.group_index[lay.cell_group]], steps[lay.cell_t]
    event = cell_step - cohort_step
    pre = lay.cell_pre
    masks = {
        "all": np.ones(len(pre), bool),
        "post": ~pre,
        "pre": pre,
        "instantaneous": lay.cell_t == lay.group_index[lay.cell_group],
        "residual": (lay.cell_t == final_index(steps, None)) & ~pre,
    }
    events = np.unique(event)
    members = [np.flatnonzero(event == e) for e in events]
    every = [*members, np.flatnonzero(~pre)]
    return lay, est, masks, events, every


def classic_bands(lay, est, boot, masks, events, every, alpha=ALPHA) -> dict:
    """Critical values, standard errors and flags of the classic band, as estimation.estimate's _Cells/_assemble."""
    floor = did.se_floor(lay.scale)
    se = did.bootstrap_se(boot.cells, floor)
    tmax = dict(zip(masks, did.sup_t_many(boot.cells, se, list(masks.values())), strict=True))
    crit = {name: did.critical_value(law, alpha) for name, law in tmax.items()}
    theta, agg_draws = aggregate(lay, est.att, boot.cells, boot.group_w, every)
    agg_se = did.bootstrap_se(agg_draws, floor)
    post_e = events >= 0
    crit_e = did.critical_value(did.sup_t(agg_draws[:-1], agg_se[:-1], post_e), alpha)
    pre = masks["pre"]
    ok = pre & np.isfinite(se)
    stat = float(np.max(np.abs(est.att[ok]) / se[ok])) if ok.any() else np.nan
    return {"se": se, "crit": crit, "theta": theta, "agg_se": agg_se, "crit_e": crit_e,
            "pretrend_p": float(np.mean(tmax["pre"] >= stat)) if ok.any() else np.nan}  # fmt: skip


def calibrated_bands(lay, est, masks, events, every, *, draws, seed, alpha=ALPHA) -> tuple[dict, did.BootstrapDraws]:
    floor = did.se_floor(lay.scale)
    cal = bands.calibrated_bootstrap(lay, est, masks, draws=draws, seed=seed, floor=floor, members=every)
    crit = {name: did.critical_value(law, alpha) for name, law in cal.tmax.items()}
    theta, agg_draws = aggregate(lay, est.att, cal.boot.cells, cal.boot.group_w, every)
    post_e = events >= 0
    crit_e = bands.aggregate_crit(agg_draws[:-1], cal.agg_se[:-1], cal.agg_correction[:-1], post_e, alpha)
    pre = masks["pre"]
    ok = pre & np.isfinite(cal.se)
    stat = float(np.max(np.abs(est.att[ok]) / cal.se[ok])) if ok.any() else np.nan
    out = {"se": cal.se, "crit": crit, "theta": theta, "agg_se": cal.agg_se, "crit_e": crit_e,
           "pretrend_p": float(np.mean(cal.tmax["pre"] >= stat)) if ok.any() else np.nan}  # fmt: skip
    return out, cal.boot


def flags(b: dict, est, masks, events) -> dict:
    """Per band family: which of its cells are significant."""
    att, se, crit = est.att, b["se"], b["crit"]

    def sig(mask, c):
        band = c * se[mask]
        return np.isfinite(band) & (np.abs(att[mask]) > band)

    post_e = events >= 0
    band_e = b["crit_e"] * b["agg_se"][:-1][post_e]
    return {
        "post": sig(masks["post"], crit["post"]),
        "all": sig(masks["all"], crit["all"]),
        "instantaneous": sig(masks["instantaneous"], crit["instantaneous"]),
        "persistent": np.isfinite(band_e) & (np.abs(b["theta"][:-1][post_e]) > band_e),
        "pretrend": np.array([b["pretrend_p"] < ALPHA]),
    }


def one_panel(d: Design, seed: int, effect: float = 0.0, draws: int = 1000) -> tuple[dict, dict]:
    y, treatment, steps, _ = panel_arrays(d, seed, effect)
    lay, est, masks, events, every = setup(d, y, treatment, steps)
    cal, boot = calibrated_bands(lay, est, masks, events, every, draws=draws, seed=seed)
    cls = classic_bands(lay, est, boot, masks, events, every)
    return flags(cls, est, masks, events), flags(cal, est, masks, events)


FAMILIES = ("post", "all", "pretrend", "instantaneous", "persistent")


def share(x: list[bool]) -> str:
    p, r = float(np.mean(x)), len(x)
    return f"{100 * p:.1f} ± {100 * np.sqrt(max(p * (1 - p), 1e-12) / r):.1f}"


def null_table(designs: list[Design], draws: int) -> None:
    print("\n### Family-wise error under the null (% of panels with a flagged cell; nominal 5; ± MC s.e.)\n")
    head = " | ".join(f"{f} classic | {f} calibrated" for f in FAMILIES)
    print(f"| design | cells (post) | panels | {head} | s/panel |")
    print("|---" * (4 + 2 * len(FAMILIES)) + "|")
    for d in designs:
        began = time.perf_counter()
        hits = {(f, band): [] for f in FAMILIES for band in ("classic", "calibrated")}
        n_cells = n_post = 0
        for seed in range(d.reps):
            cls, cal = one_panel(d, seed, draws=draws)
            for f in FAMILIES:
                hits[f, "classic"].append(bool(cls[f].any()))
                hits[f, "calibrated"].append(bool(cal[f].any()))
            n_cells, n_post = len(cls["all"]), len(cls["post"])
        row = " | ".join(f"{share(hits[f, 'classic'])} | **{share(hits[f, 'calibrated'])}**" for f in FAMILIES)
        per = (time.perf_counter() - began) / d.reps
        print(f"| {d.label} | {n_cells} ({n_post}) | {d.reps} | {row} | {per:.2f} |", flush=True)


def power_table(designs: list[Design], effects: tuple[float, ...], draws: int) -> None:
    print("\n### Power: % of (truly non-zero) post-treatment cells flagged by the `post` band, and of persistent "
          "event times by the persistent band (mean over panels ± MC s.e.)\n")  # fmt: skip
    print("| design | effect (peak) | panels | cells classic | cells calibrated | persistent classic "
          "| persistent calibrated |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for d in designs:
        for effect in effects:
            got = {k: [] for k in ("pc", "pk", "ec", "ek")}
            for seed in range(d.reps):
                cls, cal = one_panel(d, 10_000 + seed, effect, draws=draws)
                got["pc"].append(cls["post"].mean())
                got["pk"].append(cal["post"].mean())
                got["ec"].append(cls["persistent"].mean())
                got["ek"].append(cal["persistent"].mean())

            def m(x):
                return f"{100 * np.mean(x):.1f} ± {100 * np.std(x, ddof=1) / np.sqrt(len(x)):.1f}"

            print(f"| {d.label} | {effect:g} ({PEAK * effect:g}) | {d.reps} | {m(got['pc'])} | **{m(got['pk'])}** "
                  f"| {m(got['ec'])} | **{m(got['ek'])}** |", flush=True)  # fmt: skip


def check_against_estimate(n_panels: int = 3) -> None:
    """The classic band reproduced here equals memtui.estimation.estimate.estimate's (same seed, draws, settings)."""
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings
    from memtui.panel.model import Panel

    for i, d in enumerate([SMALL_20, Design("nyt", 6, 25, 80, 8, 1, control_group="not_yet_treated"),
                           Design("univ-diff", 5, 30, 90, 7, 1, estimator="difference", base_period="universal")]
                          [:n_panels]):  # fmt: skip
        y, treatment, steps, _ = panel_arrays(d, seed=i)
        panel = Panel(ids=np.arange(len(treatment)), treatment=treatment, steps=steps, done=np.ones(len(steps), bool),
                      metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip
        settings = Settings(estimator=d.estimator, base_period=d.base_period, control_group=d.control_group,
                            draws=200, seed=i, band="classic")  # fmt: skip
        res = estimate(panel, settings)
        lay, est, masks, events, every = setup(d, y, treatment, steps)
        boot = did.bootstrap(lay, est, draws=200, seed=i)
        cls = classic_bands(lay, est, boot, masks, events, every)
        _, cal_boot = calibrated_bands(lay, est, masks, events, every, draws=200, seed=i)
        assert np.array_equal(cal_boot.cells, boot.cells), "the calibrated bootstrap's draws differ from did's"
        cells = res.cells.sort(["cohort", "checkpoint"])
        order = np.lexsort((steps[lay.cell_t], steps[lay.group_index[lay.cell_group]]))
        assert res.crit == cls["crit"]["post"], (res.crit, cls["crit"]["post"])
        assert np.array_equal(cells["std_error"].to_numpy(), cls["se"][order], equal_nan=True)
        inst = res.instantaneous.row(0, named=True)["crit"]
        assert inst == cls["crit"]["instantaneous"]
        pers = res.persistent.filter(res.persistent["event_time"] >= 0)["crit"].to_numpy()
        assert np.all(pers == cls["crit_e"])
        assert res.pretrend["p_value"] == cls["pretrend_p"] or not np.isfinite(cls["pretrend_p"])
        print(f"classic band reproduced exactly on panel {d.label} ({len(lay.cell_group)} cells)")


SMALL_20 = Design("20/cohort, 20x21", 20, 20, 200, 21, 1000)


def diagnose(designs: list[Design], draws: int) -> None:
    """Where the classic band's excess comes from, on the same null panels: the post family's family-wise error with
    the same bootstrap draws but (1) the classic IQR bootstrap standard errors, (2) analytic influence-function ones,
    (3) those with n / (n - 1) per group (HC1), (4) HC1 with the Gaussian-copula critical value mapped through a t law
    with Welch-Satterthwaite degrees of freedom per cell, (5) the studentised bootstrap-t; and the tails: how often a
    post cell's |estimate / IQR se| exceeds the classic critical value c, against how often the bootstrap says a
    draw does (mean over cells of P*(|draw / se| > c)), a t law with the cell's Welch df, and the normal law."""
    from scipy import stats

    print("\n### Diagnosis: family-wise error of the post band (%) by standard error and reference law, and the "
          "per-cell tail at the classic critical value c (per million cells)\n")  # fmt: skip
    print("| design | panels | IQR se (classic) | analytic se | HC1 se | HC1 + Welch-t map | bootstrap-t "
          "| P(\\|t\\| > c) sample | bootstrap | t (Welch df) | normal |")  # fmt: skip
    print("|---" * 11 + "|")
    for d in designs:
        hits = {k: 0 for k in ("iqr", "ase", "hc1", "tmap", "boot_t")}
        tails = {k: [] for k in ("sample", "boot", "t", "normal")}
        for seed in range(d.reps):
            y, treatment, steps, _ = panel_arrays(d, seed)
            lay, est, masks, events, every = setup(d, y, treatment, steps)
            post = masks["post"]
            floor = did.se_floor(lay.scale)
            var = bands.cell_variances(lay, est)
            cal = bands.calibrated_bootstrap(lay, est, {"post": post}, draws=draws, seed=seed, floor=floor)
            att = est.att[post]
            for name, se in (("iqr", did.bootstrap_se(cal.boot.cells, floor)), ("ase", did.floored(est.se, floor)),
                             ("hc1", cal.se)):  # fmt: skip
                c = did.critical_value(did.sup_t(cal.boot.cells, se, post), ALPHA)
                hits[name] += bool(np.any(np.abs(att) > c * se[post]))
                if name == "iqr":
                    t_boot = np.abs(cal.boot.cells[post]) / se[post][:, None]
                    tails["sample"].append(np.mean(np.abs(att) / se[post] > c))
                    tails["boot"].append(np.mean(t_boot > c))
                    df = (var.var_t + var.var_c) ** 2 / (var.var_t**2 / np.maximum(var.n_t - 1, 1)
                                                         + var.var_c**2 / np.maximum(var.n_c - 1, 1))  # fmt: skip
                    tails["t"].append(np.mean(2 * stats.t.sf(c, df[post])))
                    tails["normal"].append(2 * stats.norm.sf(c))
                if name == "hc1":
                    p_cell = 2 * stats.norm.sf(c)
                    crit_t = stats.t.isf(p_cell / 2, df[post])
                    hits["tmap"] += bool(np.any(np.abs(att) > crit_t * se[post]))
            c = did.critical_value(cal.tmax["post"], ALPHA)
            hits["boot_t"] += bool(np.any(np.abs(att) > c * cal.se[post]))
        rates = " | ".join(share([True] * v + [False] * (d.reps - v)) for v in hits.values())
        tail = " | ".join(f"{1e6 * np.mean(tails[k]):.0f}" for k in ("sample", "boot", "t", "normal"))
        print(f"| {d.label} | {d.reps} | {rates} | {tail} |", flush=True)


def timing(repeats: int = 3) -> None:
    """One estimate at the paper's full size (16,300 x 144, B = 1000): ``estimate`` under the classic band against
    ``estimate`` under the calibrated band (the default), alternated in this process, best of ``repeats``; wall time
    and the process's CPU time (every thread), with the load average beside them (the machine may be shared)."""
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings
    from memtui.panel.model import Panel

    d = Design("full", 143, 100, 2000, 144, 1)
    y, treatment, steps, _ = panel_arrays(d, seed=0)
    panel = Panel(ids=np.arange(len(treatment)), treatment=treatment, steps=steps, done=np.ones(len(steps), bool),
                  metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip
    runs = {band: Settings(band=band) for band in ("classic", "calibrated")}
    estimate(panel, Settings(draws=20))  # first imports outside the measurement
    wall = {name: [] for name in runs}
    cpu = {name: [] for name in runs}
    for _ in range(repeats):
        for name, settings in runs.items():
            began, began_cpu = time.perf_counter(), time.process_time()
            estimate(panel, settings)
            wall[name].append(time.perf_counter() - began)
            cpu[name].append(time.process_time() - began_cpu)
    load = "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    print(f"\n### One estimate at 16,300 x 144, B = 1000 (best of {repeats}; {os.cpu_count()} cores seen, threads: "
          f"{os.environ.get('OMP_NUM_THREADS')}; {load})\n")  # fmt: skip
    base, base_cpu = min(wall["classic"]), min(cpu["classic"])
    for name in runs:
        t, c = min(wall[name]), min(cpu[name])
        print(f"- estimate, {name} band: {t:.2f} s wall ({t / base:.2f}x), {c:.2f} s CPU ({c / base_cpu:.2f}x); "
              f"all runs: {', '.join(f'{x:.2f}' for x in wall[name])} s")  # fmt: skip


def designs(quick: bool) -> tuple[list[Design], list[Design]]:
    if quick:
        null = [Design("30/cohort, 20x21", 20, 30, 200, 21, 100),
                Design("30/cohort, 20x21, AR(1) 0.8", 20, 30, 200, 21, 100, rho=0.8),
                Design("100/cohort, 40x41", 40, 100, 800, 41, 30)]  # fmt: skip
        power = [Design("30/cohort, 20x21", 20, 30, 200, 21, 30)]
        return null, power
    small = dict(cohorts=20, never=200, checkpoints=21)
    paper = dict(cohorts=95, never=2000, checkpoints=96)
    null = [
        SMALL_20,
        Design("30/cohort, 20x21", per_cohort=30, reps=1000, **small),
        Design("100/cohort, 20x21", per_cohort=100, reps=1000, **small),
        Design("300/cohort, 20x21", per_cohort=300, reps=600, **small),
        Design("30/cohort, 20x21, AR(1) 0.5", per_cohort=30, reps=1000, rho=0.5, **small),
        Design("30/cohort, 20x21, AR(1) 0.9", per_cohort=30, reps=1000, rho=0.9, **small),
        Design("20/cohort, 20x21, AR(1) 0.9", per_cohort=20, reps=1000, rho=0.9, **small),
        Design(
            "30/cohort, 20x21, not-yet-treated", per_cohort=30, reps=1000, control_group="not_yet_treated", **small
        ),  # fmt: skip
        Design("30/cohort, 20x21, universal base", per_cohort=30, reps=1000, base_period="universal", **small),
        Design("30/cohort, 20x21, difference", per_cohort=30, reps=1000, estimator="difference", **small),
        Design("20/cohort, 95x96", per_cohort=20, reps=300, **paper),
        Design("30/cohort, 95x96", per_cohort=30, reps=300, **paper),
        Design("100/cohort, 95x96 (paper)", per_cohort=100, reps=400, **paper),
        Design("100/cohort, 95x96, AR(1) 0.7", per_cohort=100, reps=200, rho=0.7, **paper),
        Design(
            "100/cohort, 95x96, not-yet-treated", per_cohort=100, reps=100, control_group="not_yet_treated", **paper
        ),  # fmt: skip
        Design("300/cohort, 95x96", per_cohort=300, reps=200, **paper),
    ]
    power = [Design("30/cohort, 20x21", per_cohort=30, reps=200, **small),
             Design("100/cohort, 95x96 (paper)", per_cohort=100, reps=30, **paper)]  # fmt: skip
    return null, power


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small version (about a minute)")
    parser.add_argument("--check", action="store_true", help="only check the classic reproduction")
    parser.add_argument("--diagnose", action="store_true", help="only the diagnosis of the classic band's excess")
    parser.add_argument("--timing", action="store_true", help="only time one paper-size estimate, both bands")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--only", action="append", default=[],
                        help="run only the designs whose label contains this text (repeatable)")  # fmt: skip
    parser.add_argument("--reps", type=int, help="panels per design instead of each design's own count")
    parser.add_argument("--no-power", action="store_true", help="skip the power table")
    parser.add_argument("--no-null", action="store_true", help="skip the family-wise error table")
    args = parser.parse_args()
    began = time.perf_counter()
    if args.timing:
        timing()
        return
    if args.diagnose:
        small = dict(cohorts=20, checkpoints=21)
        diagnose([Design("20/cohort, 20x21", per_cohort=20, never=200, reps=300, **small),
                  Design("30/cohort, 20x21", per_cohort=30, never=200, reps=300, **small),
                  Design("30/cohort, 20x21, 60 controls", per_cohort=30, never=60, reps=300, **small),
                  Design("30/cohort, 20x21, 3000 controls", per_cohort=30, never=3000, reps=300, **small),
                  Design("30/cohort, 20x21, universal", per_cohort=30, never=200, reps=300, base_period="universal",
                         **small),
                  Design("100/cohort, 20x21", per_cohort=100, never=200, reps=300, **small),
                  Design("100/cohort, 95x96 (paper)", 95, 100, 2000, 96, 60)], args.draws)  # fmt: skip
        return
    check_against_estimate()
    if args.check:
        return
    null, power = designs(args.quick)
    if args.only:
        null = [d for d in null if any(text in d.label for text in args.only)]
        power = [d for d in power if any(text in d.label for text in args.only)]
    if args.reps:
        null = [replace(d, reps=args.reps) for d in null]
    print(f"B = {args.draws} Rademacher draws, alpha = {ALPHA}, one thread")
    if not args.no_null:
        null_table(null, args.draws)
    if not args.no_power:
        power_table(power, (0.25, 0.5, 1.0), args.draws)
    print(f"\n({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
