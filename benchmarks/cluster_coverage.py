"""Coverage of the classic simultaneous band with and without `--cluster batch`, on panels with a known truth (no
memorisation at all: tau = 0 in every cell) where instances trained in the same batch share a shock.

    python benchmarks/cluster_coverage.py               # 200 panels, B = 499
    python benchmarks/cluster_coverage.py --panels 50 --shock 0

Y_ic = a_i + trend_c + u_{b(i), c} + e_ic: instances of batch b (``--batch`` of them, all of one cohort) move together
at every checkpoint by u_{b, c} ~ N(0, shock^2), the controls (never trained, no batch) do not. The band covers the
truth when no post-treatment cell is significant; its family-wise error (1 - coverage) should be alpha. The pointwise
interval of the overall average is counted too.
"""

from __future__ import annotations

import argparse

import numpy as np

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel


def batch_panel(rng, n_cohorts: int, batches: int, batch: int, n_never: int, t: int, shock: float) -> Panel:
    steps = np.arange(t) * 10
    per = batches * batch
    treatment = np.concatenate([np.repeat(steps[1 : n_cohorts + 1], per), np.full(n_never, NEVER)])
    n = len(treatment)
    trained = treatment != NEVER
    step = np.where(trained, np.arange(n) // batch, -1)  # the optimizer step: one per batch
    y = rng.normal(0, 1, (n, 1)) + np.linspace(0, 2, t) + rng.normal(0, 1, (n, t))
    y[trained] += shock * rng.normal(0, 1, (step.max() + 1, t))[step[trained]]
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool), metrics={"loglik": y},
                 provenance={"step": step})  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--panels", type=int, default=200)
    ap.add_argument("--draws", type=int, default=499)
    ap.add_argument("--cohorts", type=int, default=4)
    ap.add_argument("--batches", type=int, default=20, help="batches per cohort")
    ap.add_argument("--batch", type=int, default=5, help="instances per batch")
    ap.add_argument("--never", type=int, default=300)
    ap.add_argument("--checkpoints", type=int, default=6)
    ap.add_argument("--shock", type=float, default=1.0, help="sd of a batch's shared shock (noise sd is 1)")
    args = ap.parse_args()
    rng = np.random.default_rng(2024)
    counts = {"": [0, 0], "batch": [0, 0]}
    for _ in range(args.panels):
        panel = batch_panel(rng, args.cohorts, args.batches, args.batch, args.never, args.checkpoints, args.shock)
        for cluster in counts:
            res = estimate(
                panel, Settings(draws=args.draws, band="classic", cluster=cluster, seed=int(rng.integers(1e6)))
            )
            post = res.cells.filter(~res.cells["pre_treatment"])
            counts[cluster][0] += bool(post["significant"].any())
            o = res.overall
            counts[cluster][1] += not (o.ci_low <= 0 <= o.ci_high)
    print(f"{args.panels} panels, tau = 0, {args.cohorts} cohorts x {args.batches} batches of {args.batch}, "
          f"{args.never} controls, {args.checkpoints} checkpoints, batch shock sd {args.shock:g}, "
          f"B = {args.draws}")  # fmt: skip
    se = np.sqrt(0.05 * 0.95 / args.panels)
    for cluster, (band, overall) in counts.items():
        name = "--cluster batch" if cluster else "unclustered    "
        print(f"{name}  family-wise error of the 95% band {band / args.panels:.3f}, of the overall 95% interval "
              f"{overall / args.panels:.3f} (nominal 0.050, Monte-Carlo se {se:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
