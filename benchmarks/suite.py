"""Time estimating a model suite: 8 paper-size panels (16,300 instances x 96 checkpoints) x 4 metrics, 1000 draws.

    python benchmarks/suite.py                      # estimate_suite, then a loop of estimate(), same process
    python benchmarks/suite.py --models 4 --skip-loop
    python benchmarks/suite.py --skip-loop --band both   # the calibrated band (default), then the classic one

The panels are simulated (memtui.panel.synthetic, one seed and effect size per "model", the same instances and treatment
steps) and written to a temporary folder, then read with ``load_suite`` (timed on its own). Both timings are cold:
nothing is cached, nothing was estimated before in the process (``estimate_suite`` runs first, so it also pays the
first imports of scipy's sparse module). Peak memory is the process's peak RSS (``resource.getrusage``) after the
suite estimate, and the part of it above the RSS with the panels loaded (with ``--band both`` the classic band runs
second, so its peak is the larger of the two). The target (issue 9) is <= 5 s and <= 2 GB
on 2 cores; the machine may be shared, so the load average is printed beside every figure, and which code ran the
bootstrap's cell loop (the compiled one, or numpy's: ``MEMTUI_KERNELS=numpy``).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from memtui.engine import kernels
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import create_panel
from memtui.panel.synthetic import Simulation, simulate

METRICS = ("loglik", "accuracy", "rank", "entropy")
PAPER = Simulation(n_cohorts=95, per_cohort=150, n_never=2050, n_checkpoints=96)  # 16,300 x 96


def write_models(folder: Path, n_models: int, sim: Simulation = PAPER) -> list[Path]:
    """One panel per model over the same instances: its own noise (seed) and memorisation strength (effect)."""
    paths = []
    for i in range(n_models):
        model = Simulation(**{**sim.__dict__, "seed": i, "effect": 0.5 + 0.25 * i})
        data = simulate(model)
        values = dict(data["values"])
        # a fourth metric on the scale of a mean entropy (nats), lower is better like rank
        values["entropy"] = 2.0 + 0.02 * values["rank"]
        signs = {**data["signs"], "entropy": -1}
        path = folder / f"model-{i}.h5"
        attrs = {"model": f"sim-{i}", "model_parameters": str(70_000_000 * 2**i)}
        create_panel(path, ids=data["ids"], treatment=data["treatment"], steps=data["steps"], values=values,
                     signs=signs, attrs=attrs)  # fmt: skip
        paths.append(path)
    return paths


def _rss_gb() -> float:
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 2**20


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kilobytes on Linux


def _load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--skip-loop", action="store_true", help="time only estimate_suite")
    ap.add_argument("--band", choices=["calibrated", "classic", "both"], default="calibrated")
    args = ap.parse_args()
    loop = "compiled" if kernels.available() else "numpy (not built, or MEMTUI_KERNELS=numpy)"
    print(f"{os.cpu_count()} CPUs seen; {_load()}; the bootstrap's cell loop: {loop}")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        paths = write_models(Path(tmp), args.models)
        print(f"wrote {args.models} panels of {PAPER.n_instances:,} x {PAPER.n_checkpoints} in "
              f"{time.perf_counter() - start:.1f} s")  # fmt: skip
        start = time.perf_counter()
        suite = load_suite(paths)
        print(f"load_suite      {time.perf_counter() - start:7.2f} s   ({_load()})")
    n_est = len(suite.names) * len(METRICS)
    before = _rss_gb()
    for band in ("calibrated", "classic") if args.band == "both" else (args.band,):
        settings = Settings(draws=args.draws, band=band)
        start, start_cpu = time.perf_counter(), time.process_time()
        sr = estimate_suite(suite, settings, metrics=METRICS)
        t_suite = time.perf_counter() - start
        cpu = time.process_time() - start_cpu
        peak = _peak_gb()
        print(f"estimate_suite  {t_suite:7.2f} s   ({cpu:.2f} s CPU) {band} band, {n_est} estimates, B = {args.draws}; "
              f"peak RSS {peak:.2f} GB ({peak - before:.2f} GB above the loaded panels) ({_load()})")  # fmt: skip
        del sr
    if args.skip_loop:
        return
    sr = estimate_suite(suite, settings, metrics=METRICS)
    start = time.perf_counter()
    worst = 0.0
    for name, panel in zip(suite.names, suite.panels, strict=True):
        for metric in METRICS:
            res = estimate(panel, replace(settings, metric=metric))
            other = sr.results[name][metric].cells
            assert res.cells["estimate"].equals(other["estimate"])
            se = res.cells["std_error"].to_numpy()
            worst = max(worst, float(np.nanmax(np.abs(se - other["std_error"].to_numpy()) / se)))
    t_loop = time.perf_counter() - start
    print(f"loop estimate() {t_loop:7.2f} s   peak RSS {_peak_gb():.2f} GB ({_load()})")
    print(f"ratio loop / suite = {t_loop / t_suite:.1f}x; point estimates identical, standard errors agree to "
          f"{worst:.1e} (largest relative difference)")  # fmt: skip


if __name__ == "__main__":
    main()
