"""Coverage of the simultaneous bands (classic and calibrated) with and without `--cluster batch`, on panels with a
known truth (no memorisation at all: tau = 0 in every cell) where instances trained in the same batch share a shock.

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


def batch_panel(
    rng, n_cohorts: int, batches: int, batch: int, n_never: int, t: int, shock: float, unequal: bool = False
) -> Panel:
    steps = np.arange(t) * 10
    per = batches * batch
    treatment = np.concatenate([np.repeat(steps[1 : n_cohorts + 1], per), np.full(n_never, NEVER)])
    n = len(treatment)
    trained = treatment != NEVER
    step = np.where(trained, np.arange(n) // batch, -1)  # the optimizer step: one per batch
    if unequal:  # batches of 1 to 2 x batch - 1 instances (batch on average), each inside one cohort
        sizes = [rng.integers(1, 2 * batch, size=per) for _ in range(n_cohorts)]
        within = np.concatenate([np.repeat(np.arange(per), s)[:per] + k * per for k, s in enumerate(sizes)])
        step = np.where(trained, np.concatenate([within, np.zeros(n_never, np.int64)]), -1)
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
    ap.add_argument("--unequal", action="store_true", help="batch sizes from 1 to 2 x --batch - 1")
    args = ap.parse_args()
    rng = np.random.default_rng(2024)
    runs = {  # label: (band, cluster)
        "classic, unclustered": ("classic", ""),
        "classic, --cluster batch": ("classic", "batch"),
        "calibrated, unclustered": ("calibrated", ""),
        "calibrated, --cluster batch": ("calibrated", "batch"),
    }
    counts = {label: [0, 0] for label in runs}
    for _ in range(args.panels):
        panel = batch_panel(
            rng, args.cohorts, args.batches, args.batch, args.never, args.checkpoints, args.shock, args.unequal
        )
        seed = int(rng.integers(1e6))
        for label, (band, cluster) in runs.items():
            res = estimate(panel, Settings(draws=args.draws, band=band, cluster=cluster, seed=seed))
            post = res.cells.filter(~res.cells["pre_treatment"])
            counts[label][0] += bool(post["significant"].any())
            o = res.overall
            counts[label][1] += not (o.ci_low <= 0 <= o.ci_high)
    print(f"{args.panels} panels, tau = 0, {args.cohorts} cohorts x {args.batches} batches of {args.batch}, "
          f"{args.never} controls, {args.checkpoints} checkpoints, batch shock sd {args.shock:g}, "
          f"B = {args.draws}{', unequal batches' if args.unequal else ''}")  # fmt: skip
    se = np.sqrt(0.05 * 0.95 / args.panels)
    for label, (band, overall) in counts.items():
        print(f"{label:28s} family-wise error of the 95% band {band / args.panels:.3f}, of the overall 95% interval "
              f"{overall / args.panels:.3f} (nominal 0.050, Monte-Carlo se {se:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
