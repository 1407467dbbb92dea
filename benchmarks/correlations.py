"""Coverage of the correlation between models' TRUE profiles: the measurement behind docs/methods.md, "Correlations
of true profiles".

    python benchmarks/correlations.py            # 24 designs x 200 simulated suites, B = 1000 (~6 min on one core)
    python benchmarks/correlations.py --quick    # 8 designs x 40 suites, B = 400 (~30 s)
    python benchmarks/correlations.py --reps 100 --scope profile
    python benchmarks/correlations.py --rho 0,0.5,0.8,0.95,0.99 --noise 0.3 --noise-corr 0.5 --per-cohort 60 \
        --controls 300 --checkpoints 8 --reps 300     # near the bound: the corrected interval before and after

Each suite: two models scoring the same instances (memtui.panel.synthetic.SuiteSimulation: 12 cohorts of 20, 100
never-treated, 14 checkpoints, 90 post-treatment cells), whose true profiles correlate at exactly rho over the post
cells; noise = a post cell's standard error over the profiles' sd; noise_corr = the correlation of the two models'
noise on the same instance and checkpoint (0: uncorrelated; 0.6: the same texts err alike in both models). Estimated
with memtui's defaults (DiD, never-treated controls, family post) and B draws; ``correlations`` over ``--scope``.

Each design has its own noise seeds (``--seed``), so the designs' Monte-Carlo errors are independent (with common
seeds, as before, one unlucky block of seeds moved every design the same way).

Per design: how often the 95 % interval covers the correlation of the true profiles over the scope's cells (computed
from the simulated truth), for the raw r's interval (``pearson_low/high``: what `compare` gave before) and the
corrected one (``pearson_corrected_low/high``), with Monte-Carlo errors sqrt(p(1 - p)/reps); the mean raw r and
corrected r (clipped to [-1, 1]); the intervals' mean widths; and the share of suites whose corrected r was clipped.

With ``--rho``: one design (``--noise``, ``--noise-corr``, ``--per-cohort``, ``--controls``, ``--checkpoints``) at each
rho, and the corrected interval before (``pivot_interval_before``: the union of the pivot's ratio percentiles and r
+- z sd, what memtui gave until the covariance-scale test) and now, both from the same suites and the same pivot draws.
A pair "not determined" (no interval now, [-1, 1] before) counts as covering: it claims nothing; its share is shown.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from statistics import NormalDist

import numpy as np

import memtui.estimation.correlations as corr_module
from memtui.estimation.correlations import CORRELATION_SCOPES, correlations
from memtui.estimation.settings import Settings
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import Suite
from memtui.panel.synthetic import SuiteSimulation, simulate_suite


def true_correlation(result, truth: np.ndarray, scope_cells) -> float:
    """The correlation of the two true profiles over the cells ``correlations`` used (matched by cohort, checkpoint)."""
    cohorts, steps = scope_cells
    g = np.searchsorted(result.cohorts, cohorts)
    c = np.searchsorted(result.checkpoints, steps)
    return float(np.corrcoef(truth[0][g, c], truth[1][g, c])[0, 1])


def scope_cells(result, scope: str):
    """The (cohort, checkpoint) pairs of ``scope`` (all finite in this simulation): as ``correlations`` picks them."""
    from memtui.estimation.correlations import _scope_mask

    mask = _scope_mask(result, scope)
    return result.cells["cohort"].to_numpy()[mask], result.cells["checkpoint"].to_numpy()[mask]


def measure(
    rho: float, noise: float, noise_corr: float, reps: int, draws: int, scope: str, seed0: int = 10_000
) -> dict:
    old, new, raw, fixed, w_old, w_new, clipped, truths = ([] for _ in range(8))
    for rep in range(reps):
        sim = SuiteSimulation(rho=rho, noise=noise, noise_corr=noise_corr, seed=seed0 + rep)
        panels, truth = simulate_suite(sim)
        sr = estimate_suite(Suite(names=["a", "b"], panels=panels), Settings(draws=draws, seed=rep))
        c = correlations(sr, scope=scope)
        first = sr.results["a"]["loglik"]
        target = true_correlation(first, truth, scope_cells(first, scope))
        truths.append(target)
        old.append(c.pearson_low[0, 1] <= target <= c.pearson_high[0, 1])
        new.append(c.pearson_corrected_low[0, 1] <= target <= c.pearson_corrected_high[0, 1])
        raw.append(c.pearson[0, 1])
        fixed.append(c.pearson_corrected[0, 1])
        w_old.append(c.pearson_high[0, 1] - c.pearson_low[0, 1])
        w_new.append(c.pearson_corrected_high[0, 1] - c.pearson_corrected_low[0, 1])
        clipped.append(c.pearson_clipped[0, 1])
    return {
        "truth": float(np.mean(truths)),
        "old": float(np.mean(old)),
        "new": float(np.mean(new)),
        "raw": float(np.nanmean(raw)),
        "corrected": float(np.nanmean(fixed)),
        "w_old": float(np.nanmean(w_old)),
        "w_new": float(np.nanmean(w_new)),
        "clipped": float(np.mean(clipped)),
    }


def pivot_interval_before(point: float, pivot: np.ndarray, alpha: float) -> tuple[float, float]:
    """The corrected interval memtui gave before the covariance-scale test (a verbatim copy, kept as the baseline):
    the union of the pivot draws' ratio percentiles and point +- z sd, [-1, 1] where more than alpha/2 of the draws
    allow a flat profile; then, as ``_corrected_record`` did, held around the point and clipped to [-1, 1]."""
    ok = (pivot[:, 0, 0] > 0) & (pivot[:, 1, 1] > 0)
    if np.mean(~ok) > alpha / 2:
        return -1.0, 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(pivot[:, 0, 1] / np.sqrt(np.where(ok, pivot[:, 0, 0] * pivot[:, 1, 1], 1.0)), -1, 1)
    low, high = np.quantile(np.where(ok, r, -1.0), alpha / 2), np.quantile(np.where(ok, r, 1.0), 1 - alpha / 2)
    half = NormalDist().inv_cdf(1 - alpha / 2) * float(np.std(r[ok], ddof=1))
    low, high = min(float(low), point - half), max(float(high), point + half)
    return float(np.clip(min(low, point), -1, 1)), float(np.clip(max(high, point), -1, 1))


class RecordPivots:
    """Keeps the pair (0, 1)'s corrected covariance and pivot draws of each ``correlations`` call (a wrapper around
    ``_corrected_pivots``), so the interval before can be computed from the very draws the interval now used."""

    def __init__(self) -> None:
        self.last = None
        self.inner = corr_module._corrected_pivots

    def __call__(self, *args):
        a, pivots = self.inner(*args)
        self.last = (a[:2, :2].copy(), pivots.get((0, 1)))
        return a, pivots


def near_bound(args) -> None:
    """Old and new corrected intervals at each ``--rho`` on one design, with Monte-Carlo errors and widths."""
    rhos = [float(r) for r in args.rho.split(",")]
    reps, draws = args.reps or 300, args.draws or 1000
    design = {"noise": args.noise, "noise_corr": args.noise_corr, "per_cohort": args.per_cohort,
              "n_never": args.controls, "n_checkpoints": args.checkpoints}  # fmt: skip
    print(f"{reps} suites per rho, B = {draws}, design {design}, scope {args.scope}, noise seeds {args.seed} + 1000 k "
          "+ rep\n")  # fmt: skip
    print(
        "| rho | true r | corrected r | clipped | before: coverage | width | now: coverage | width | not determined |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    record = RecordPivots()
    corr_module._corrected_pivots = record
    start = time.perf_counter()
    try:
        for k, rho in enumerate(rhos):
            rows = []
            for rep in range(reps):
                sim = SuiteSimulation(rho=rho, seed=args.seed + 1000 * k + rep, **design)
                panels, truth = simulate_suite(sim)
                sr = estimate_suite(Suite(names=["a", "b"], panels=panels), Settings(draws=draws, seed=rep))
                c = correlations(sr, scope=args.scope)
                first = sr.results["a"]["loglik"]
                target = true_correlation(first, truth, scope_cells(first, args.scope))
                a, pivot = record.last
                point = a[0, 1] / math.sqrt(a[0, 0] * a[1, 1])
                old = pivot_interval_before(point, pivot, sr.settings.alpha)
                new = (c.pearson_corrected_low[0, 1], c.pearson_corrected_high[0, 1])
                undetermined = bool(c.undetermined[0, 1])
                rows.append((target, c.pearson_corrected[0, 1], c.pearson_clipped[0, 1], old[0] <= target <= old[1],
                             old[1] - old[0], undetermined or new[0] <= target <= new[1], new[1] - new[0],
                             undetermined))  # fmt: skip
            m = np.array(rows, dtype=float)
            cov_old, cov_new = m[:, 3].mean(), m[:, 5].mean()
            mc_old, mc_new = (math.sqrt(p * (1 - p) / reps) for p in (cov_old, cov_new))
            print(f"| {rho:g} | {m[:, 0].mean():.3f} | {np.nanmean(m[:, 1]):.3f} | {m[:, 2].mean():.0%} | "
                  f"{cov_old:.1%} ± {mc_old:.1%} | {m[:, 4].mean():.3f} | {cov_new:.1%} ± {mc_new:.1%} | "
                  f"{np.nanmean(m[:, 6]):.3f} | {m[:, 7].mean():.0%} |", flush=True)  # fmt: skip
    finally:
        corr_module._corrected_pivots = record.inner
    print(f"\n{time.perf_counter() - start:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 designs x 40 suites, B = 400")
    ap.add_argument("--reps", type=int, help="simulated suites per design [200; --quick 40]")
    ap.add_argument("--draws", type=int, help="multiplier draws [1000; --quick 400]")
    ap.add_argument("--scope", default="post", choices=CORRELATION_SCOPES)
    ap.add_argument(
        "--seed",
        type=int,
        default=10_000,
        help="design k's suites have noise seeds SEED + 1000 k + rep: independent across designs [10000]",
    )
    ap.add_argument("--only", help="run only these designs, e.g. '0:0.8:0.3,0.6:0.95:0.1' (noise corr:rho:noise)")
    ap.add_argument("--rho", help="near the bound: these true correlations (e.g. 0,0.5,0.8,0.95,0.99) on one design, "
                    "the corrected interval before and now")  # fmt: skip
    ap.add_argument("--noise", type=float, default=0.3, help="with --rho: a post cell's se over the profiles' sd [0.3]")
    ap.add_argument("--noise-corr", type=float, default=0.5, help="with --rho: the models' noise correlation [0.5]")
    ap.add_argument("--per-cohort", type=int, default=60, help="with --rho: instances per cohort [60]")
    ap.add_argument("--controls", type=int, default=300, help="with --rho: never-trained instances [300]")
    ap.add_argument("--checkpoints", type=int, default=8, help="with --rho: checkpoints [8]")
    args = ap.parse_args()
    if args.rho:
        near_bound(args)
        return
    reps = args.reps or (40 if args.quick else 200)
    draws = args.draws or (400 if args.quick else 1000)
    rhos = (0.5, 0.8, 0.95, 1.0)
    noises = (0.1, 0.5) if args.quick else (0.1, 0.3, 0.5)
    corrs = (0.0,) if args.quick else (0.0, 0.6)
    print(f"{reps} suites per design, B = {draws}, scope {args.scope}; coverage of the true profiles' correlation by "
          "the 95% interval, +- Monte-Carlo error\n")  # fmt: skip
    print("| noise corr | rho | noise/sd | true r | raw r | corrected r | raw interval | corrected interval | "
          "width raw | width corr. | clipped |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    start = time.perf_counter()
    worst = 1.0
    only = {tuple(float(v) for v in d.split(":")) for d in args.only.split(",")} if args.only else None
    for k, (noise_corr, rho, noise) in enumerate(itertools.product(corrs, rhos, noises)):
        if only is not None and (noise_corr, rho, noise) not in only:
            continue
        m = measure(rho, noise, noise_corr, reps, draws, args.scope, seed0=args.seed + 1000 * k)
        worst = min(worst, m["new"])
        mc = [math.sqrt(p * (1 - p) / reps) for p in (m["old"], m["new"])]
        print(f"| {noise_corr:g} | {rho:g} | {noise:g} | {m['truth']:.3f} | {m['raw']:.3f} | {m['corrected']:.3f} | "
              f"{m['old']:.1%} ± {mc[0]:.1%} | {m['new']:.1%} ± {mc[1]:.1%} | {m['w_old']:.3f} | {m['w_new']:.3f} | "
              f"{m['clipped']:.0%} |", flush=True)  # fmt: skip
    print(f"\nlowest coverage of the corrected interval: {worst:.1%}; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
