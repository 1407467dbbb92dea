"""Time doubly robust DiD with two covariates (``Settings.covariates``, engine/drdid.py) against the same estimate
without covariates (the difference-of-means engine), in this process, on the same panel, under the classic band.

    python benchmarks/covariates.py                      # realistic (20 x 21) and first-epoch shapes
    python benchmarks/covariates.py --shape full -B 1000  # the paper's size (143 cohorts x 144 checkpoints)

Reports seconds for the cells alone (-B 0) and for the full estimate with B bootstrap draws, and the ratio with/without.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import Panel
from memtui.panel.synthetic import Simulation, simulate

SHAPES = {
    "realistic": Simulation(n_cohorts=20, per_cohort=100, n_never=2000, n_checkpoints=21),
    "first-epoch": Simulation(n_cohorts=95, per_cohort=100, n_never=2000, n_checkpoints=96),
    "full": Simulation(n_cohorts=143, per_cohort=100, n_never=2000, n_checkpoints=144),
}


def make_panel(sim: Simulation) -> Panel:
    d = simulate(sim)
    n = len(d["ids"])
    rng = np.random.default_rng(0)
    covariates = {"length": rng.integers(64, 2049, size=n).astype(float), "zlib": rng.uniform(0.2, 0.8, size=n)}
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics={"loglik": d["values"]["loglik"]}, signs=d["signs"], covariates=covariates)  # fmt: skip


def timed(panel: Panel, settings: Settings) -> float:
    start = time.perf_counter()
    estimate(panel, settings)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=list(SHAPES), action="append")
    ap.add_argument("-B", "--draws", type=int, default=1000)
    args = ap.parse_args()
    for name in args.shape or ["realistic", "first-epoch"]:
        panel = make_panel(SHAPES[name])
        n, t = panel.metrics["loglik"].shape
        for draws in (0, args.draws):
            base = Settings(band="classic", draws=draws)
            plain = timed(panel, base)
            dr = timed(panel, Settings(band="classic", draws=draws, covariates=("length", "zlib")))
            print(f"{name:<12} {n} x {t}, B={draws:<5} without covariates {plain:7.2f} s, with length+zlib "
                  f"{dr:7.2f} s: ratio {dr / plain:5.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
