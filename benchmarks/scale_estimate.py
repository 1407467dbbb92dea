"""One estimate of the full Pythia shape at 16 k, 110 k and 1 M instances: seconds, memory, and the ratio to the floor.

The panel (made in memory, one metric): 144 checkpoints, 143 cohorts of equal size (the Pythia design: one cohort per
checkpoint after the first) and never-trained controls, at 16,300 (100 a cohort + 2,000 controls: the paper's
panel), 110,000 (700 + 9,900) and 1,021,000 (7,000 + 20,000) instances. The estimate: every cell, the calibrated
band, B = 1000 multiplier draws (``memtui estimate``'s defaults).

For each size and engine device (``cpu``: the numpy/compiled path; ``torch-cpu`` with ``--torch-cpu``; ``cuda``
where torch finds a CUDA device), printed: wall seconds, the process's CPU seconds (all threads; on a shared machine
the CPU time is the steadier figure), the peak of numpy's allocations during the estimate above those before it
(tracemalloc: the panel itself is not counted; torch's CUDA memory is ``torch.cuda.max_memory_allocated``), and the
ratio to the floor: B x N x T multiply-adds (the bootstrap's group sums) at this machine's float32 GEMM rate,
measured in the same run with a numpy matmul of the sums' shape, in multiply-adds per CPU second of one core (the
CPU floor; an idle machine's wall floor is it over the cores).

With ``--baseline SRC`` (the ``src`` folder of another checkout, its compiled loop built there: the code before a
change), each size runs under that code and under this one, one after the other in the same run (each estimate in a
fresh process of its own, the panel made there before the clock starts), and the ratios before / after are printed.

    PYTHONPATH=src python benchmarks/scale_estimate.py                 # 16 k, 110 k, 1 M; minutes on 2 cores
    PYTHONPATH=src python benchmarks/scale_estimate.py --sizes 16k 110k --torch-cpu
    PYTHONPATH=src python benchmarks/scale_estimate.py --sizes 1m --baseline /tmp/before/src
    PYTHONPATH=src python benchmarks/scale_estimate.py --quick --json out.json   # a smoke run (tests call it)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import polars as pl

from memtui.engine import torch_bootstrap
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

CHECKPOINTS = 144
COHORTS = CHECKPOINTS - 1
SIZES = {"16k": (100, 2000), "110k": (700, 9900), "1m": (7000, 20000)}  # per cohort, never trained
QUICK = {"quick": (3, 200)}


def make_panel(per_cohort: int, n_never: int, checkpoints: int = CHECKPOINTS, seed: int = 0) -> Panel:
    """A synthetic panel of the Pythia design: outcomes N(0, 1) per instance and checkpoint, plus a memorisation
    effect of 0.5 at a cohort's first checkpoint decaying to 0.1 (float32 noise, stored as float64 as panels are)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(checkpoints, dtype=np.int64) * 1000
    treatment = np.concatenate([np.repeat(steps[1:], per_cohort), np.full(n_never, NEVER)])
    n = len(treatment)
    y = rng.standard_normal((n, checkpoints), dtype=np.float32).astype(np.float64)
    since = (np.arange(checkpoints)[None, :] - np.arange(1, checkpoints)[:, None]).astype(float)  # cohort x ckpt
    effect = np.where(since >= 0, 0.1 + 0.4 * np.exp(-np.clip(since, 0, None) / 2.5), 0.0)
    treated = treatment != NEVER
    y[treated] += np.repeat(effect, per_cohort, axis=0)
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(checkpoints, bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


def gemm_rate(rows: int = 20000, width: int = CHECKPOINTS + 1, chunk: int = 128, repeat: int = 5) -> float:
    """Multiply-adds per CPU second of a numpy float32 product of the bootstrap's shape (width x rows) @ (rows x
    chunk) on one BLAS thread (as the bootstrap makes each group's product), the best of ``repeat``. Measured in
    process CPU time, so a loaded machine's waiting is not counted; an idle machine's wall floor is this floor over
    its cores."""
    from memtui.engine.blas import one_blas_thread

    rng = np.random.default_rng(1)
    a = rng.standard_normal((rows, width), dtype=np.float32)
    v = rng.standard_normal((rows, chunk), dtype=np.float32)
    out = np.empty((width, chunk), np.float32)
    best = float("inf")
    with one_blas_thread():
        for _ in range(repeat):
            c0 = time.process_time()
            for _ in range(10):
                np.matmul(a.T, v, out=out)
            best = min(best, (time.process_time() - c0) / 10)
    return rows * width * chunk / max(best, 1e-9)


def one(panel: Panel, draws: int, device: str) -> dict:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    w0, c0 = time.perf_counter(), time.process_time()
    with torch_bootstrap.using(device):
        res = estimate(panel, Settings(draws=draws, band="calibrated"))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    out = {"device": device, "wall_s": wall, "cpu_s": cpu, "peak_numpy_gb": peak / 1e9, "cells": res.cells.height}
    if device == "cuda":
        import torch

        out["peak_cuda_gb"] = torch.cuda.max_memory_allocated() / 1e9
    sig = res.cells["significant"] if "significant" in res.cells.columns else None
    out["significant"] = int(sig.sum()) if sig is not None else None
    out["digest"] = digest(res)
    return out


def digest(res) -> str:
    """A hash of every number the estimate reports (cells, scopes, summaries, critical value): equal digests, equal
    results bit for bit."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for frame in (res.cells, res.instantaneous, res.persistent, res.residual):
        for name in frame.columns:
            if frame[name].dtype.is_numeric() or frame[name].dtype == pl.Boolean:
                h.update(frame[name].to_numpy().tobytes())
    h.update(repr((res.crit, res.overall.as_dict(), res.pretrend.as_dict())).encode())
    return h.hexdigest()


def devices(torch_cpu: bool) -> list[str]:
    found = ["cpu"] + (["torch-cpu"] if torch_cpu else [])
    try:
        import torch

        if torch.cuda.is_available():
            found.append("cuda")
    except ImportError:
        pass
    return found


def in_process(src: str, size: tuple[int, int], draws: int, device: str) -> dict:
    """``one`` of the panel of ``size`` in a fresh Python process running the memtui in ``src``."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", f"{size[0]},{size[1]},{draws},{device}"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def child(spec: str) -> None:
    per, never, draws, device = spec.split(",")
    panel = make_panel(int(per), int(never))
    print(json.dumps(one(panel, int(draws), device)))


def compared(sizes: dict, draws: int, baseline: str, rate: float) -> list[dict]:
    """Each size under the baseline's code, then this checkout's (CPU path), each in a process of its own."""
    here = str(Path(__file__).resolve().parents[1] / "src")
    rows = []
    for name, size in sizes.items():
        n = size[0] * COHORTS + size[1]
        floor = draws * n * CHECKPOINTS / rate
        runs = {}
        for code, src in (("before", baseline), ("after", here)):
            r = runs[code] = in_process(src, size, draws, "cpu")
            r.update(size=name, instances=n, draws=draws, code=code, floor_s=floor, cpu_ratio=r["cpu_s"] / floor,
                     load=os.getloadavg()[0])  # fmt: skip
            rows.append(r)
            print(f"{name:>5} {n:>9,} instances  {code:>6}: {r['wall_s']:7.1f} s wall  {r['cpu_s']:7.1f} s CPU  "
                  f"peak +{r['peak_numpy_gb']:.2f} GB  CPU/floor {r['cpu_ratio']:.1f}  (load {r['load']:.1f}; "
                  f"{r['significant']} significant cells)", flush=True)  # fmt: skip
        b, a = runs["before"], runs["after"]
        print(f"{name:>5} before / after: {b['wall_s'] / a['wall_s']:.2f}x wall, {b['cpu_s'] / a['cpu_s']:.2f}x CPU; "
              f"the same results bit for bit: {b['digest'] == a['digest']}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--torch-cpu", action="store_true", help="also the torch path on the CPU")
    ap.add_argument("--quick", action="store_true", help="a small panel, 100 draws: only checks that it runs")
    ap.add_argument("--baseline", help="the src folder of the code to compare with, run in the same benchmark")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # per,never,draws,device: one estimate, as JSON (in_process)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    sizes = QUICK if args.quick else {k: SIZES[k] for k in args.sizes}
    draws = 100 if args.quick else args.draws
    rate = gemm_rate(rows=2000 if args.quick else 20000)
    load = os.getloadavg()[0]
    print(f"float32 GEMM (numpy, {CHECKPOINTS + 1} x rows @ rows x 128, one thread): {rate / 1e9:.1f} G "
          "multiply-adds per CPU second; "
          f"load average {load:.1f} on {os.cpu_count()} cores")  # fmt: skip
    if args.baseline:
        rows = compared(sizes, draws, args.baseline, rate)
        if args.json:
            Path(args.json).write_text(json.dumps({"gemm_madds_per_s": rate, "load_start": load, "runs": rows}))
        return None
    rows = []
    for name, (per, never) in sizes.items():
        panel = make_panel(per, never)
        n = len(panel.ids)
        floor = draws * n * CHECKPOINTS / rate
        for device in devices(args.torch_cpu):
            r = one(panel, draws, device)
            r.update(size=name, instances=n, draws=draws, floor_s=floor, cpu_ratio=r["cpu_s"] / floor,
                     load=os.getloadavg()[0])  # fmt: skip
            rows.append(r)
            print(f"{name:>5} {n:>9,} instances  {device:>9}: {r['wall_s']:7.1f} s wall  {r['cpu_s']:7.1f} s CPU  "
                  f"peak +{r['peak_numpy_gb']:.2f} GB  CPU floor {floor:.2f} s  CPU/floor {r['cpu_ratio']:.1f}  "
                  f"(load {r['load']:.1f}; {r['significant']} significant cells)",
                  flush=True)  # fmt: skip
        del panel
    if args.json:
        Path(args.json).write_text(json.dumps({"gemm_madds_per_s": rate, "load_start": load, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
