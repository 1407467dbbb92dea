"""Time `estimate --by` (G subgroup profiles from one set of draws) against one estimate of the whole panel.

    python benchmarks/subgroups.py                      # the paper's full size: 16,300 x 144, B = 1000, 8 groups
    python benchmarks/subgroups.py --shape first-epoch --groups 4 --draws 500

The panel is synthetic (panel/synthetic.py, the shapes of benchmarks/estimate.py) with a categorical covariate of G
equally likely levels; both runs use the same settings (the default calibrated band) in this process, one after
the other, and the estimate of the whole panel runs first and last (its two timings bracket the machine's load).
The issue's target: G groups cost at most 1.5 x one estimate + G x the per-group share, where a group's share is
what one estimate of the whole panel costs scaled by the group's share of the instances (so the G shares add up to
one estimate when groups split the controls): at most 2.5 x one estimate for G groups of separate samples. With
``--shared-controls`` every group keeps all never-treated controls: a group's share is then its treated share plus
all the controls.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import estimate_by
from memtui.panel.model import Panel
from memtui.panel.synthetic import Simulation, simulate

SHAPES = {
    "first-epoch": Simulation(n_cohorts=95, per_cohort=100, n_never=2000, n_checkpoints=96),
    "full": Simulation(n_cohorts=143, per_cohort=100, n_never=2000, n_checkpoints=144),
}


def make_panel(sim: Simulation, groups: int) -> Panel:
    d = simulate(sim)
    rng = np.random.default_rng(1)
    levels = np.array([f"d{k}" for k in range(groups)], dtype=object)
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics={"loglik": d["values"]["loglik"]}, signs=d["signs"],
                 covariates={"domain": rng.choice(levels, len(d["ids"]))})  # fmt: skip


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=list(SHAPES), default="full")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--band", choices=["calibrated", "classic"], default="calibrated")
    ap.add_argument("--shared-controls", action="store_true")
    args = ap.parse_args()
    sim = SHAPES[args.shape]
    panel = make_panel(sim, args.groups)
    settings = Settings(draws=args.draws, band=args.band)
    print(f"panel {panel.n_instances} instances x {sim.n_checkpoints} checkpoints, B = {args.draws}, "
          f"{args.band} band, {args.groups} groups{' (shared controls)' if args.shared_controls else ''}")  # fmt: skip
    one_a, res = timed(lambda: estimate(panel, settings))
    by_t, by = timed(lambda: estimate_by(panel, settings, "domain", shared_controls=args.shared_controls))
    one_b, _ = timed(lambda: estimate(panel, settings))
    one = min(one_a, one_b)
    n = panel.n_instances
    n_never = int(panel.never_treated.sum())
    shares = [
        (t + (n_never if args.shared_controls else c)) / n for t, c in (by.sizes[name] for name in by.names)
    ]  # fmt: skip
    target = 1.5 * one + one * sum(shares)
    print(f"one estimate   {one_a:8.1f} s, again {one_b:8.1f} s ({res.cells.height} cells)")
    cells = sum(by.groups[name].cells.height for name in by.names)
    print(f"--by domain    {by_t:8.1f} s ({len(by.names)} groups, {cells} cells, {len(by.differences)} differences)")
    print(f"ratio          {by_t / one:8.2f} x one estimate; target <= {target / one:.2f} x "
          f"(1.5 + the groups' shares {sum(shares):.2f}): {'met' if by_t <= target else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
