"""GPU check of the bootstrap's torch path (engine.torch_bootstrap), one prepared run (a few minutes on one H100):

1. The calibrated bootstrap of a 1,021,000-instance panel of the full Pythia shape (144 checkpoints, 143 cohorts of
   7,000, 20,000 never trained; B = 1000) on the CPU's compiled path and with the group sums on the GPU: seconds
   (wall and process CPU; the GPU's twice, the first with the outcomes' upload and cuBLAS's start), peak CUDA memory.
2. Their equality: the largest differences of the draws, the studentising standard errors, the sup laws and the
   critical values, each relative to the largest magnitude, against the tolerance the CPU test holds
   (tests/engine/test_torch_bootstrap.py: 1e-5).
3. A whole estimate (``memtui estimate``'s defaults) on each device: seconds, critical value, and how many cells'
   flags differ.
4. The floor: B x N x T multiply-adds at the GPU's float32 GEMM rate (torch, the sums' shape, TF32 off).

    PYTHONPATH=src python benchmarks/gpu_bootstrap_check.py --out gpu_bootstrap.json     # on the GPU machine
    PYTHONPATH=src python benchmarks/gpu_bootstrap_check.py --tiny                         # CPU smoke test

``--tiny`` runs every part on a small panel with torch's CPU path in the GPU's place (what tests call). Its first GPU
run (an H100, 2026-11-28) is in benchmarks/results/h100-2026-11-28/ and quoted in docs/estimation.md.
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

from memtui.engine import bands, did, torch_bootstrap
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
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
    return float(np.max(np.abs(a[ok] - b[ok])) / scale) if ok.any() else 0.0


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - w0, time.process_time() - c0


def gpu_gemm_rate(device: str, rows: int, width: int = 145, chunk: int = 128) -> float:
    """float32 multiply-adds per second of torch's (width x rows) @ (rows x chunk) on ``device``, TF32 off."""
    dev = torch.device(device)
    a = torch.randn(rows, width, device=dev)
    v = torch.randn(rows, chunk, device=dev)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        torch.matmul(a.T, v)
        _, wall, _ = timed(lambda: [torch.matmul(a.T, v) for _ in range(20)])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return rows * width * chunk * 20 / wall


def bootstraps(lay, est, draws: int, gpu: str) -> dict:
    masks = {"post": ~lay.cell_pre, "all": np.ones(len(lay.cell_pre), bool)}
    floor = did.se_floor(lay.scale)
    runs, out = {}, {}
    for name, device in (("cpu", "cpu"), (f"{gpu} (first)", gpu), (gpu, gpu)):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        with torch_bootstrap.using(device):
            res, wall, cpu = timed(
                lambda: bands.calibrated_bootstrap(lay, est, masks, draws=draws, seed=0, floor=floor)  # noqa: B023
            )
        runs[device] = res
        out[name] = {"wall_s": wall, "cpu_s": cpu}
        if device == "cuda":
            out[name]["peak_cuda_gb"] = torch.cuda.max_memory_allocated() / 1e9
        print(f"bootstrap on {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    ref, got = runs["cpu"], runs[gpu]
    diff = {"draws": rel(got.boot.cells, ref.boot.cells), "se": rel(got.se, ref.se)}
    for m in masks:
        diff[f"tmax_{m}"] = rel(got.tmax[m], ref.tmax[m])
        diff[f"crit_{m}"] = rel(did.critical_value(got.tmax[m], 0.05), did.critical_value(ref.tmax[m], 0.05))
    out["relative_differences"] = diff
    out["within_tolerance"] = all(v <= TOLERANCE for v in diff.values())
    print(f"relative differences (tolerance {TOLERANCE:g}): {json.dumps(diff)}", flush=True)
    return out


def estimates(panel, draws: int, gpu: str) -> dict:
    out, cells = {}, {}
    for device in ("cpu", gpu):
        with torch_bootstrap.using(device):
            res, wall, cpu = timed(lambda: estimate(panel, Settings(draws=draws)))  # noqa: B023
        cells[device] = res.cells
        out[device] = {"wall_s": wall, "cpu_s": cpu, "crit": float(res.crit)}
        print(f"estimate on {device}: {wall:.2f} s wall, {cpu:.2f} s CPU, crit {res.crit:.4f}", flush=True)
    a, b = cells["cpu"]["significant"].to_numpy(), cells[gpu]["significant"].to_numpy()
    out["flags_differing"] = int((a != b).sum())
    out["significant_cpu"] = int(a.sum())
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a small panel, torch's CPU path for the GPU's (a smoke test)")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--out", help="write the report here (JSON)")
    args = ap.parse_args(argv)
    gpu = "cuda" if torch.cuda.is_available() and not args.tiny else "torch-cpu"
    per, never, checkpoints = (3, 200, 24) if args.tiny else (7000, 20000, 144)
    draws = 100 if args.tiny else args.draws
    panel = _scale_estimate().make_panel(per, never, checkpoints)
    lay = build_layout(panel.metrics["loglik"], panel.treatment, panel.steps, never=NEVER)
    est = did.point_estimates(lay)
    card = torch.cuda.get_device_name() if gpu == "cuda" else "cpu (tiny run: torch's CPU path)"
    n = len(panel.ids)
    rate = gpu_gemm_rate("cuda" if gpu == "cuda" else "cpu", rows=min(n, 200_000))
    report = {
        "card": card, "instances": n, "checkpoints": checkpoints, "draws": draws, "cores": os.cpu_count(),
        "torch": torch.__version__, "gemm_madds_per_s": rate, "floor_s": draws * n * checkpoints / rate,
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
    }  # fmt: skip
    print(f"{card}: {n:,} instances x {checkpoints} checkpoints, B = {draws}; floor {report['floor_s']:.3f} s")
    report["bootstrap"] = bootstraps(lay, est, draws, gpu)
    report["estimate"] = estimates(panel, draws, gpu)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
