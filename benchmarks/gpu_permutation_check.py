"""GPU check of the permutation band's torch path (engine.torch_permutation), one prepared run (~3 minutes on one H100
with 16 cores):

1. The sums of 16 permutations of a 1,021,000-instance panel of the full Pythia shape (144 checkpoints, 143 cohorts of
   7,000, 20,000 never trained), with the controls fixed and permuted: the compiled path's and the GPU's (s, q, c,
   the permuted controls' Grams and means), their largest differences relative to the largest magnitude.
2. A whole estimate with ``--band permutation`` on the CPU's compiled path and on the GPU with the same P
   (``--cpu-count``, default 199: the CPU's time at 1 M instances): seconds (wall and process CPU), the critical
   values, their relative differences and how many cells' flags differ, against the tolerance the CPU test holds
   (tests/engine/test_torch_permutation.py: 1e-5).
3. The GPU's estimate at P = ``--count`` (default 999, the band's default): seconds, peak CUDA memory.

    PYTHONPATH=src python benchmarks/gpu_permutation_check.py --out gpu_permutation.json    # on the GPU machine
    PYTHONPATH=src python benchmarks/gpu_permutation_check.py --tiny                        # CPU smoke test

``--engine-only``: parts 1 and 2-3 through ``permutations.permute`` (the laws, critical values and permuted cells)
instead of whole estimates, for a machine with torch and numpy but not polars (the panel made as
``scale_estimate.make_panel`` makes it, the same draws). ``--tiny`` runs every part on a small panel with torch's
CPU path in the GPU's place (what tests call); without a GPU, torch's CPU path stands in for it at any ``--shape``
(``--shape 700 10000 144 --count 199``: the 110,100-instance timing docs/estimation.md quotes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from memtui.engine import did, permutations, torch_bootstrap
from memtui.engine.layout import build_layout
from memtui.engine.torch_permutation import METHODS, TorchPermutationSums
from memtui.panel.model import NEVER

TOLERANCE = 1e-5


def _scale_estimate():
    path = Path(__file__).resolve().parent / "scale_estimate.py"
    spec = importlib.util.spec_from_file_location("scale_estimate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("scale_estimate", module)
    spec.loader.exec_module(module)
    return module


def rel(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    ok = ~np.isnan(b)
    scale = np.max(np.abs(b[ok])) if ok.any() else 1.0
    return float(np.max(np.abs(a[ok] - b[ok])) / scale) if ok.any() and scale > 0 else 0.0


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - w0, time.process_time() - c0


def sums_check(panel, device: str) -> dict:
    """Part 1: 16 permutations' sums, Grams and means on the compiled path and on ``device``."""
    lay = build_layout(panel.metrics["loglik"], panel.treatment, panel.steps, never=NEVER)
    return sums_check_layout(lay, did.point_estimates(lay), device)


def sums_check_layout(lay, est, device: str) -> dict:
    """``sums_check`` of a layout, by each of torch_permutation's ways to form the sums (each warmed up once, then
    timed); the faster one is then the class's method for the rest of the run (``method_used``)."""
    out, best = {}, {}
    for method in METHODS:
        TorchPermutationSums.method = method
        out[method] = one_method(lay, est, device)
        best[method] = out[method]["permuted_controls"]["wall_s_16"]
    TorchPermutationSums.method = out["method_used"] = min(best, key=best.get)
    print(f"sums by {out['method_used']} from here on (16 permutations, permuted controls: "
          + ", ".join(f"{m} {t:.3f} s" for m, t in best.items()) + ")", flush=True)  # fmt: skip
    return out


def one_method(lay, est, device: str) -> dict:
    """Part 1 by the method ``TorchPermutationSums.method`` names."""
    out = {}
    for controls in (False, True):
        p = permutations.plan(lay, est, controls=controls)
        order = permutations.orders(p, np.arange(1, 17, dtype=np.uint64))
        if permutations.compiled():
            ref, grams, means = permutations._compiled_sums(p, order)
        else:
            ref = permutations.sums(p, order)
            grams, means = permutations._control_grams(p, order) if controls else (None, None)
        on = TorchPermutationSums(device, p)
        on.sums(order[:2])  # warm: the indicator, cuBLAS's handles, the allocator
        (got, g2, m2), wall, _ = timed(lambda: on.sums(order))  # noqa: B023
        diff = {name: rel(a, b) for name, a, b in zip("sqc", got, ref, strict=True)}
        if controls:
            diff |= {"grams": rel(g2, grams), "means": rel(m2, means)}
        key = "permuted_controls" if controls else "fixed_controls"
        out[key] = {"relative_differences": diff, "wall_s_16": wall}
        print(f"sums ({TorchPermutationSums.method}), {key}: {json.dumps(diff)} ({wall:.3f} s for 16 on {device})",
              flush=True)  # fmt: skip
    return out


def run_estimate(panel, device: str, count: int) -> tuple[dict, object]:
    from memtui.estimation.estimate import estimate  # polars: not imported by --engine-only
    from memtui.estimation.settings import Settings

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with torch_bootstrap.using(device), torch_bootstrap.recording() as used:
        res, wall, cpu = timed(lambda: estimate(panel, Settings(band="permutation", draws=count, seed=0)))
    row = {"wall_s": wall, "cpu_s": cpu, "crit": float(res.crit), "devices": sorted(used)}
    if device == "cuda":
        row["peak_cuda_gb"] = torch.cuda.max_memory_allocated() / 1e9
    print(f"estimate on {device}, P = {count}: {wall:.2f} s wall, {cpu:.2f} s CPU, crit {res.crit:.5f}", flush=True)
    return row, res.cells


def compare(ref_cells, got_cells) -> dict:
    diff = {c: rel(got_cells[c].to_numpy(), ref_cells[c].to_numpy()) for c in ("crit", "band_low", "band_high")}
    a, b = ref_cells["significant"].to_numpy(), got_cells["significant"].to_numpy()
    out = {"relative_differences": diff, "flags_differ": int((a != b).sum()), "significant_cpu": int(a.sum())}
    out["within_tolerance"] = all(v <= TOLERANCE for v in diff.values())
    print(f"estimate differences (tolerance {TOLERANCE:g}): {json.dumps(out)}", flush=True)
    return out


def panel_arrays(per: int, never: int, checkpoints: int, seed: int = 0):
    """``scale_estimate.make_panel``'s outcomes, treatment and steps (the same draws) without polars, which that
    script imports (``--engine-only``: a machine with torch and numpy alone)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(checkpoints, dtype=np.int64) * 1000
    treatment = np.concatenate([np.repeat(steps[1:], per), np.full(never, NEVER)])
    y = rng.standard_normal((len(treatment), checkpoints), dtype=np.float32).astype(np.float64)
    since = (np.arange(checkpoints)[None, :] - np.arange(1, checkpoints)[:, None]).astype(float)
    effect = np.where(since >= 0, 0.1 + 0.4 * np.exp(-np.clip(since, 0, None) / 2.5), 0.0)
    y[treatment != NEVER] += np.repeat(effect, per, axis=0)
    return y, treatment, steps


def engine_only(shape, gpu: str, count: int, cpu_count: int) -> dict:
    """The band's permutations (``permutations.permute``, controls permuted) on the CPU and on ``gpu`` at the same P,
    their laws, critical values and permuted cells compared, then ``gpu``'s at P = ``count``: no estimate, no polars."""
    y, treatment, steps = panel_arrays(*shape)
    lay = build_layout(y, treatment, steps, never=NEVER)
    est = did.point_estimates(lay)
    floor = did.se_floor(lay.scale)
    masks = {"post": ~lay.cell_pre, "all": np.ones(len(lay.cell_pre), bool)}
    se = did.floored(est.se, floor)
    out, runs = {"sums": sums_check_layout(lay, est, "cuda" if gpu == "cuda" else "cpu")}, {}
    for name, device, p in (("cpu", "cpu", cpu_count), (f"{gpu}_same_p", gpu, cpu_count), (gpu, gpu, count)):
        if name == gpu and count == cpu_count:
            continue
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        with torch_bootstrap.using(device):
            runs[name], wall, cpu = timed(
                lambda: permutations.permute(lay, est, masks, se, count=p, seed=0, floor=floor, controls=True)  # noqa: B023
            )
        out[name] = {"wall_s": wall, "cpu_s": cpu, "count": p}
        if device == "cuda":
            out[name]["peak_cuda_gb"] = torch.cuda.max_memory_allocated() / 1e9
        print(f"permute on {device}, P = {p}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    ref, got = runs["cpu"], runs[f"{gpu}_same_p"]
    diff = {"cells": rel(got.cells, ref.cells)}
    for m in masks:
        diff[f"law_{m}"] = rel(got.laws[m], ref.laws[m])
        diff[f"crit_{m}"] = rel(did.critical_value(got.laws[m], 0.05), did.critical_value(ref.laws[m], 0.05))
    out["equal"] = {"relative_differences": diff, "within_tolerance": all(v <= TOLERANCE for v in diff.values())}
    print(f"permute differences (tolerance {TOLERANCE:g}): {json.dumps(diff)}", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a small panel, torch's CPU path for the GPU's (a smoke test)")
    ap.add_argument("--count", type=int, default=999, help="P of the GPU's timed estimate")
    ap.add_argument("--cpu-count", type=int, default=199, help="P of the CPU's estimate and the GPU's equal one")
    ap.add_argument("--shape", type=int, nargs=3, metavar=("PER_COHORT", "NEVER", "CHECKPOINTS"),
                    default=(7000, 20000, 144), help="the panel (scale_estimate.make_panel's arguments)")  # fmt: skip
    ap.add_argument("--engine-only", action="store_true", help="the sums and permute alone (no estimate, no polars)")
    ap.add_argument("--out", help="write the report here (JSON)")
    args = ap.parse_args(argv)
    gpu = "cuda" if torch.cuda.is_available() and not args.tiny else "torch-cpu"
    per, never, checkpoints = (30, 150, 13) if args.tiny else tuple(args.shape)
    count, cpu_count = (99, 49) if args.tiny else (args.count, args.cpu_count)
    card = torch.cuda.get_device_name() if gpu == "cuda" else "cpu (no GPU: torch's CPU path in its place)"
    n = per * (checkpoints - 1) + never
    report = {"card": card, "instances": n, "checkpoints": checkpoints, "count": count, "cpu_count": cpu_count,
              "cores": os.cpu_count(), "torch": torch.__version__, "compiled": permutations.compiled()}  # fmt: skip
    print(f"{card}: {n:,} instances x {checkpoints} checkpoints, P = {cpu_count} (both), {count} ({gpu})", flush=True)
    if args.engine_only:
        report |= engine_only((per, never, checkpoints), gpu, count, cpu_count)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
        return report
    panel = _scale_estimate().make_panel(per, never, checkpoints)
    report["sums"] = sums_check(panel, "cuda" if gpu == "cuda" else "cpu")
    report["cpu"], ref_cells = run_estimate(panel, "cpu", cpu_count)
    report[f"{gpu}_same_p"], got_cells = run_estimate(panel, gpu, cpu_count)
    report["equal"] = compare(ref_cells, got_cells)
    report["equal"]["within_tolerance"] &= all(
        v <= TOLERANCE
        for method in METHODS
        for part in report["sums"][method].values()
        for v in part["relative_differences"].values()
    )
    if count != cpu_count:
        report[gpu], _ = run_estimate(panel, gpu, count)
    report["speedup_same_p"] = report["cpu"]["wall_s"] / report[f"{gpu}_same_p"]["wall_s"]
    print(f"wall ratio cpu / {gpu} at P = {cpu_count}: {report['speedup_same_p']:.2f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
