"""Time memtui's full estimate against csdid and `differences` on panels of the paper's shapes.

    python benchmarks/estimate.py                 # both shapes, csdid and differences included
    python benchmarks/estimate.py --shape full --skip-csdid

"Full estimate" = every ATT(g,c) cell, analytic standard errors, a B-draw multiplier bootstrap, the simultaneous band
and the summaries, for one metric. Timings run in this process, one after another, on the same panel; peak memory
is measured in a fresh child process per engine (peak RSS minus the RSS before estimating); csdid and differences
run only in such child processes, so that a crash of theirs does not end the benchmark. `differences` takes
minutes per cohort at these sizes, so it runs with a few cohorts treated (every other instance kept, as never
treated, so a cell costs what it does on the whole panel) and its time is extrapolated per cell (said so).
Needs `pip install csdid` for the csdid column.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pandas as pd

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate

SHAPES = {
    "first-epoch": Simulation(n_cohorts=95, per_cohort=100, n_never=2000, n_checkpoints=96),
    "full": Simulation(n_cohorts=143, per_cohort=100, n_never=2000, n_checkpoints=144),
}


def make_panel(sim: Simulation) -> Panel:
    d = simulate(sim)
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics={"loglik": d["values"]["loglik"]}, signs=d["signs"])  # fmt: skip


def long_frame(panel: Panel, cohorts: np.ndarray | None = None) -> pd.DataFrame:
    """The panel in long form. With ``cohorts``, only those stay treated; the other instances stay in the data as
    never treated, so each cell costs what it costs on the whole panel (its influence function spans every unit)."""
    y = panel.metrics["loglik"]
    g = panel.treatment
    if cohorts is not None:
        g = np.where(np.isin(g, cohorts), g, NEVER)
    n, t = y.shape
    return pd.DataFrame(
        {
            "unit": np.repeat(np.arange(n), t),
            "time": np.tile(panel.steps, n),
            "y": y.ravel(),
            "cohort": np.repeat(np.where(g == NEVER, np.nan, g), t),
            "gname": np.repeat(np.where(g == NEVER, 0, g), t),
        }
    )


def run_memtui(panel: Panel, draws: int) -> int:
    res = estimate(panel, Settings(draws=draws))
    return res.cells.height


def run_csdid(panel: Panel, draws: int) -> int:
    from csdid.att_gt import ATTgt

    frame = long_frame(panel)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        att = ATTgt(yname="y", tname="time", idname="unit", gname="gname", data=frame, control_group="nevertreated",
                    biters=draws, cband=True)  # fmt: skip
        att.fit(est_method="reg", base_period="varying", bstrap=True)
    return len(att.results["att"]) if isinstance(att.results, dict) else 0


def run_differences(panel: Panel, draws: int, cohorts: np.ndarray) -> int:
    from differences import ATTgt

    frame = long_frame(panel, cohorts).set_index(["unit", "time"])
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        att = ATTgt(data=frame, cohort_column="cohort", base_period="varying")
        att.fit("y", est_method="reg", control_group="never_treated", boot_iterations=draws, random_state=1,
                progress_bar=False)  # fmt: skip
    return len(att.results())


def in_child(shape: str, engine: str, draws: int, cohorts: int, env: dict | None = None) -> dict | None:
    """Run one engine in a fresh process: its time, cells and peak memory, or None if the process died."""
    call = f"b._child({shape!r}, {engine!r}, {draws}, {cohorts})"
    code = f"import json, benchmarks.estimate as b; print(json.dumps({call}))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(shape: str, engine: str, draws: int, cohorts: int) -> dict:
    panel = make_panel(SHAPES[shape])
    before = _rss_gb()
    seconds, cells = timed(_engines(panel, draws, cohorts)[engine])
    return {"seconds": seconds, "cells": cells, "peak_gb": _status_gb("VmHWM") - before}


def _rss_gb() -> float:
    return _status_gb("VmRSS")


def _status_gb(field: str) -> float:
    """A memory figure of this process from /proc (ru_maxrss would carry the parent's peak across exec)."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    return kb / 2**20


def _engines(panel: Panel, draws: int, n_cohorts: int):
    subset = np.unique(panel.treatment[panel.treatment != NEVER])[:n_cohorts]
    return {
        "memtui": lambda: run_memtui(panel, draws),
        "csdid": lambda: run_csdid(panel, draws),
        "differences": lambda: run_differences(panel, draws, subset),
    }


def timed(fn) -> tuple[float, int]:
    start = time.perf_counter()
    cells = fn()
    return time.perf_counter() - start, cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3, help="memtui runs (best is reported)")
    ap.add_argument("--differences-cohorts", type=int, default=2, help="cohorts differences runs on (extrapolated)")
    ap.add_argument("--skip-csdid", action="store_true")
    ap.add_argument("--skip-differences", action="store_true")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    shapes = list(SHAPES) if args.shape == "both" else [args.shape]
    report = {}
    for shape in shapes:
        sim = SHAPES[shape]
        panel = make_panel(sim)
        engines = _engines(panel, args.draws, args.differences_cohorts)
        print(f"\n== {shape}: {sim.n_cohorts} cohorts x {sim.per_cohort} + {sim.n_never} never treated = "
              f"{panel.n_instances} instances x {sim.n_checkpoints} checkpoints, B = {args.draws}")  # fmt: skip
        run_memtui(make_panel(SHAPES["first-epoch"]) if shape == "full" else panel, 20)  # warm-up
        best, cells = min(timed(engines["memtui"]) for _ in range(args.repeat))
        row = {"memtui_s": best, "cells": cells}
        print(f"memtui       {best:8.2f} s   ({cells} cells, best of {args.repeat}, in this process)")
        mem = in_child(shape, "memtui", args.draws, args.differences_cohorts)
        row["memtui_peak_gb"] = mem["peak_gb"]
        print(f"             peak memory {mem['peak_gb']:.2f} GB above the loaded panel (fresh process)")
        if not args.skip_csdid:
            # csdid's multi-threaded OpenBLAS products have segfaulted at the full shape here: retry on one thread
            note, res = "", in_child(shape, "csdid", args.draws, args.differences_cohorts)
            if res is None:
                note = " (crashed with threaded OpenBLAS; this is OPENBLAS_NUM_THREADS=1)"
                res = in_child(shape, "csdid", args.draws, args.differences_cohorts, {"OPENBLAS_NUM_THREADS": "1"})
            if res is None:
                print("csdid        crashed (see dmesg), no figure")
            else:
                row["csdid_s"], row["csdid_peak_gb"] = res["seconds"], res["peak_gb"]
                print(f"csdid        {res['seconds']:8.2f} s   peak {res['peak_gb']:.2f} GB; "
                      f"ratio csdid / memtui = {res['seconds'] / best:6.1f}x{note}")  # fmt: skip
        if not args.skip_differences:
            res = in_child(shape, "differences", args.draws, args.differences_cohorts)
            row["differences_s"] = res["seconds"] / res["cells"] * cells
            print(f"differences  {row['differences_s']:8.1f} s   extrapolated from {res['seconds']:.1f} s on "
                  f"{args.differences_cohorts} cohorts ({res['cells']} cells) to {cells} cells; "
                  f"ratio differences / memtui = {row['differences_s'] / best:6.0f}x")  # fmt: skip
        report[shape] = row
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
