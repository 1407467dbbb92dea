"""How inference degrades with tiny cohorts: the measurement behind docs/methods.md, "Small cohorts".

    python benchmarks/small_cohorts.py                   # cohorts of 1, 3, 5, 10, 30 instances, 1000 panels each
    python benchmarks/small_cohorts.py --sizes 1,5 --reps 200
    python benchmarks/small_cohorts.py --band classic    # R did's band (the table's first version)

Each panel: 4 cohorts of the given size, 100 never-treated instances, 6 checkpoints (memtui.panel.synthetic, loglik).
Per size, over ``reps`` panels with no true effect (effect 0):
- false positives: share of panels where some post-treatment cell is significant (0 outside its 95 % simultaneous
  band); the nominal rate is 5 %;
- pre-trend size: share of panels where the pre-trend sup-t test rejects at 5 %;
- se ratio: the mean reported (bootstrap) standard error of the first cohort's c = g cell over the standard deviation
  of that estimate across the panels (1 = honest; below 1 = bands too narrow);
and over ``reps`` panels with the default true profile (effect 1):
- coverage: share of panels whose simultaneous band covers the whole true post-treatment profile (nominal 95 %).
Settings: memtui's defaults (DiD, never-treated controls, varying base, family post, the calibrated band unless
``--band classic``) with B draws, seed = panel seed. A cell without a band (a cohort of one instance under the
calibrated band) is never significant and does not cover.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import Panel
from memtui.panel.synthetic import Simulation, simulate


def panel_of(sim: Simulation) -> Panel:
    d = simulate(sim)
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics={"loglik": d["values"]["loglik"]}, signs=d["signs"], truth=d["truth"])  # fmt: skip


def measure(size: int, reps: int, draws: int, n_never: int = 100, band: str = "calibrated") -> dict:
    false_pos, pretrend, first_cell, first_se, covered = [], [], [], [], []
    for effect in (0.0, 1.0):
        for seed in range(reps):
            sim = Simulation(n_cohorts=4, per_cohort=size, n_never=n_never, n_checkpoints=6, effect=effect, seed=seed)
            panel = panel_of(sim)
            res = estimate(panel, Settings(draws=draws, seed=seed, band=band))
            cells = res.cells
            post = cells.filter(~cells["pre_treatment"])
            if effect == 0:
                false_pos.append(bool(post["significant"].any()))
                pretrend.append(res.pretrend["p_value"] < 0.05)
                row = res.instantaneous.sort("cohort").row(0, named=True)
                first_cell.append(row["estimate"])
                first_se.append(row["std_error"])
            else:
                mask = panel.steps[None, :] >= panel.truth["cohorts"][:, None]
                t = np.where(mask, panel.truth["loglik"], np.nan)[np.isin(panel.truth["cohorts"], res.cohorts)]
                lo, hi = res.matrix("band_low"), res.matrix("band_high")
                ok = np.isfinite(t)
                covered.append(bool(np.all((lo[ok] <= t[ok]) & (t[ok] <= hi[ok]))))
    return {
        "size": size,
        "false_positive": float(np.mean(false_pos)),
        "coverage": float(np.mean(covered)),
        "pretrend": float(np.mean(pretrend)),
        "se_ratio": float(np.nanmean(first_se) / np.std(first_cell, ddof=1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,3,5,10,30")
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--band", choices=["calibrated", "classic"], default="calibrated")
    args = parser.parse_args()
    began = time.perf_counter()
    print(f"{args.reps} panels per size and effect, B = {args.draws}, {args.band} band")
    print("| instances per cohort | false positives (nominal 5 %) | band coverage (nominal 95 %) "
          "| pre-trend test size (nominal 5 %) | se / true sd of τ(g, g) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        m = measure(size, args.reps, args.draws, band=args.band)
        print(f"| {size} | {m['false_positive']:.1%} | {m['coverage']:.1%} | {m['pretrend']:.1%} "
              f"| {m['se_ratio']:.2f} |", flush=True)  # fmt: skip
    print(f"({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
