"""What the permutation band costs against the calibrated band, in one process: one estimate at the paper's size and a
suite (docs/methods.md, "The permutation band").

    python benchmarks/permutation_cost.py           # estimate: best of 3, alternated; suite: 4 models x 2 metrics
    python benchmarks/permutation_cost.py --quick          # a smaller panel and suite, one repeat

**Estimate**: ``memtui.estimation.estimate`` of one metric on a panel of 16,300 instances x 144 checkpoints (143
cohorts of 100, 2,000 never trained: memtui.panel.synthetic), P = 999 permutations against B = 1000 draws of the
calibrated band, the two alternated (best of ``--repeats``, wall and CPU). **Suite**: ``estimate_suite`` of
``--models`` panels of 16,300 x 96 (benchmarks/suite.py's, the same instances) x ``--metrics`` metrics under either
band, alternated. Each band runs once untimed first (50 draws: its imports and first calls, which a one-repeat
``--quick`` run would otherwise charge to whichever band meets them). The machine is shared: quote the ratios (the load
average is printed beside them), not the seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.suite import METRICS, PAPER, write_models
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import load_suite
from memtui.panel.model import Panel
from memtui.panel.synthetic import Simulation, simulate

FULL = Simulation(n_cohorts=143, per_cohort=100, n_never=2000, n_checkpoints=144)  # 16,300 x 144
QUICK = Simulation(n_cohorts=47, per_cohort=100, n_never=700, n_checkpoints=48)
DRAWS = {"permutation": 999, "calibrated": 1000}
WARM = 50  # draws of the untimed first run of each band


def _load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def timed(fn) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def one_estimate(sim: Simulation, repeats: int) -> dict[str, list[tuple[float, float]]]:
    d = simulate(sim)
    panel = Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                  metrics={"loglik": d["values"]["loglik"]}, signs=d["signs"])  # fmt: skip
    for band in DRAWS:  # warm: imports and first calls are not the band's cost
        estimate(panel, Settings(band=band, draws=WARM))
    times: dict[str, list[tuple[float, float]]] = {band: [] for band in DRAWS}
    for r in range(repeats):
        for band in DRAWS if r % 2 == 0 else tuple(reversed(DRAWS)):  # alternated: neither always runs first
            times[band].append(timed(lambda band=band: estimate(panel, Settings(band=band, draws=DRAWS[band]))))
    return times


def suite_times(n_models: int, metrics: tuple[str, ...], sim: Simulation, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        suite = load_suite(write_models(Path(tmp), n_models, sim))
    for band in DRAWS:
        estimate_suite(suite, Settings(band=band, draws=WARM), metrics=metrics)
    times: dict[str, list[tuple[float, float]]] = {band: [] for band in DRAWS}
    for r in range(repeats):
        for band in DRAWS if r % 2 == 0 else tuple(reversed(DRAWS)):
            settings = Settings(band=band, draws=DRAWS[band])
            times[band].append(timed(lambda s=settings: estimate_suite(suite, s, metrics=metrics)))
    return times


def report(what: str, times: dict) -> None:
    best = {band: min(t[0] for t in ts) for band, ts in times.items()}
    cpu = {band: min(t[1] for t in ts) for band, ts in times.items()}
    print(f"{what}: permutation (P = 999) {best['permutation']:.2f} s wall / {cpu['permutation']:.2f} s CPU, "
          f"calibrated (B = 1000) {best['calibrated']:.2f} s / {cpu['calibrated']:.2f} s; ratio "
          f"{best['permutation'] / best['calibrated']:.2f}x wall, {cpu['permutation'] / cpu['calibrated']:.2f}x CPU "
          f"(best of {len(times['calibrated'])}; {_load()})", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 5,400 x 48 panel, a 2-model suite, one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--metrics", type=int, default=2, help="metrics per model (of loglik, accuracy, rank, entropy)")
    ap.add_argument("--skip-suite", action="store_true")
    args = ap.parse_args()
    sim, suite_sim = (QUICK, QUICK) if args.quick else (FULL, PAPER)
    repeats = 1 if args.quick else args.repeats
    print(f"{os.cpu_count()} CPUs seen; {_load()}")
    report(f"estimate {sim.n_instances:,} x {sim.n_checkpoints}", one_estimate(sim, repeats))
    if not args.skip_suite:
        models = 2 if args.quick else args.models
        metrics = METRICS[: args.metrics]
        report(f"suite {models} models x {len(metrics)} metrics, {suite_sim.n_instances:,} x "
               f"{suite_sim.n_checkpoints}", suite_times(models, metrics, suite_sim, repeats))  # fmt: skip


if __name__ == "__main__":
    main()
