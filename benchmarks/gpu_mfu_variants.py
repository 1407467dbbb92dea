"""GPU experiment, one prepared run: where the fast path's time goes, and what the batch-invariant path, cuDNN's
attention and ``torch.compile`` of the model body do to tokens/s (MFU), each against the eager fast path in the same
run, on the shapes of benchmarks/gpu_extract.py.

    PYTHONPATH=src python benchmarks/gpu_mfu_variants.py --out $OUT/mfu.json      # on the GPU machine
    PYTHONPATH=src python benchmarks/gpu_mfu_variants.py --dry-run                # CPU smoke test, tiny shapes

Variants (each: warm-up, then the median of ``--reps`` timed calls on ``--batch`` full-length rows):
``fast`` (padded batch, eager), ``fast, top-k every target`` (the sampling top-k pass for every target, as before it
ran for the (k, l) window's alone), ``fast+cudnn`` (SDPA restricted to cuDNN's attention), ``invariant`` (rows one by
one for rows over 1,024 tokens, eager) and its every-target variant, ``invariant+compile`` (the same with
``torch.compile(body)``; its first call, the compilation, is timed separately; ``--no-compile`` skips it), and a torch
profiler table of one fast call. A time budget (``--budget``)
skips what would not fit.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def _gpu_extract():
    spec = importlib.util.spec_from_file_location("gpu_extract", ROOT / "benchmarks" / "gpu_extract.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Case:
    gx: object  # benchmarks/gpu_extract.py, loaded
    device: torch.device
    dtype: torch.dtype
    batch_rows: int  # rows of 2,049 tokens a batch holds (longer rows: as many tokens)
    args: argparse.Namespace
    left: Callable[[], float]  # seconds of the budget left
    save: Callable[[], None]


def measure(shape: str, case: Case, row: dict) -> None:
    """Every variant on one shape, into ``row``."""
    from memtui.extract.scoring import Scorer

    gx, device, reps = case.gx, case.device, case.args.reps
    model, cfg = gx.build(shape, device, case.dtype)
    seq_len = gx.SHAPES[shape][2]
    params = sum(q.numel() for q in model.parameters()) - model.get_input_embeddings().weight.numel()
    batch = max(1, case.batch_rows * 2049 // seq_len) if device.type == "cuda" else case.batch_rows  # ~same tokens
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(batch, seq_len))
    lengths = np.full(batch, seq_len)
    row.update(params_excl_input_embedding=params, seq_len=seq_len, batch=batch)
    few = min(4, batch)

    def record(name: str, scorer) -> None:
        seconds = gx.timed(lambda: scorer.score(tokens, lengths), device, reps)
        rate = batch * seq_len / seconds
        mfu = 2 * params * rate / (gx.REFERENCE_TFLOPS * 1e12)
        row[name] = {
            "tokens_per_s": rate,
            "mfu_989": mfu,
            "scores": scorer.score(tokens[:few], lengths[:few])["loglik"].tolist(),
        }
        gx.log(f"  {shape:<12} {name:<18} {rate:>10,.0f} tokens/s  MFU {mfu:.1%}  ({case.left():.0f} s of budget left)")
        case.save()

    fast = Scorer(model, device, extractable=(32, 32), invariant=False)
    record("fast", fast)
    fast.window = lambda index: None  # the sampling top-k for every target, as before it was the window's alone
    record("fast, top-k every target", fast)
    del fast.window
    if device.type == "cuda" and case.left() > 60:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                record("fast+cudnn", fast)
        except RuntimeError as exc:
            row["fast+cudnn"] = {"error": str(exc)[:300]}
            gx.log(f"  fast+cudnn failed: {str(exc)[:200]}")
    if case.left() > 60:
        row["profile_fast"] = profile_table(fast, tokens, lengths, device, gx)
    fast.release()
    inv = Scorer(model, device, extractable=(32, 32), invariant=True)
    if case.left() > 60:
        record("invariant", inv)
        inv.window = lambda index: None
        record("invariant, top-k every target", inv)
        del inv.window
    if case.args.compile and case.left() > 150:
        eager_body = inv.body
        # the dry run traces with dynamo but skips inductor's C++ build (CI need not have Python's headers)
        inv.body = torch.compile(eager_body, backend="eager" if case.args.dry_run else "inductor")
        t0 = time.perf_counter()
        inv.score(tokens[:1], lengths[:1])
        gx.sync(device)
        row["compile_s"] = time.perf_counter() - t0
        gx.log(f"  {shape:<12} compile of the body: {row['compile_s']:.1f} s")
        record("invariant+compile", inv)
        a, b = np.array(row["invariant"]["scores"]), np.array(row["invariant+compile"]["scores"])
        row["compile_vs_eager_loglik_max_abs"] = float(np.max(np.abs(a - b)))
        alone = [inv.score(tokens[i : i + 1], lengths[:1])["loglik"][0] for i in range(few)]
        row["compile_batch_vs_alone_max_abs"] = float(np.max(np.abs(np.array(alone) - b)))
        gx.log(f"  compiled vs eager loglik max |diff| {row['compile_vs_eager_loglik_max_abs']:.3g}; "
               f"compiled batch vs alone {row['compile_batch_vs_alone_max_abs']:.3g}")  # fmt: skip
        inv.body = eager_body
        torch._dynamo.reset()
    inv.release()


def profile_table(scorer, tokens, lengths, device: torch.device, gx) -> str:
    """torch's profiler table of one call, sorted by device time (CPU time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        scorer.score(tokens, lengths)
        gx.sync(device)
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=18, max_name_column_width=60)
    gx.log(table)
    return table


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--shapes", default="pythia-1.4b,olmo2-7b")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--budget", type=float, default=420.0, help="seconds; later variants are skipped past it")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the compiled body's variant")
    p.add_argument("--out")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    gx = _gpu_extract()
    shapes = ["tiny-neox"] if args.dry_run else args.shapes.split(",")
    device = torch.device("cpu" if args.dry_run else "cuda")
    dtype = torch.float32 if args.dry_run else torch.bfloat16
    batch_rows = 2 if args.dry_run else args.batch
    t_start = time.perf_counter()
    report: dict = {"card": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (dry run)",
                    "torch": torch.__version__, "batch_2049": batch_rows, "shapes": {}}  # fmt: skip

    def left() -> float:
        return args.budget - (time.perf_counter() - t_start)

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1, default=float))

    for shape in shapes:
        measure(shape, Case(gx, device, dtype, batch_rows, args, left, save), report["shapes"].setdefault(shape, {}))
        gx.free(device)
        if left() < 120:
            break
    report["seconds"] = time.perf_counter() - t_start
    save()
    return report


if __name__ == "__main__":
    main()
