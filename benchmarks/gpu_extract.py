"""GPU check of extraction, one prepared run (under 8 minutes on one H100): speed, precision and batch invariance.

    PYTHONPATH=src python benchmarks/gpu_extract.py --out gpu_extract.json     # on the GPU machine, everything
    PYTHONPATH=src python benchmarks/gpu_extract.py --dry-run                  # CPU smoke test, tiny shapes (CI)

1. **Speed**, per model shape (random weights, bf16 body, 2,049-token rows; OLMo 2: 4,096): memtui's scorer (the
   fast path: padded batches, fp32 chunked head, four metrics + extractability) at the largest batch that fits (the
   worker's policy: halve on out-of-memory), and in the same run the naive baseline (full fp32 batch x length x
   vocabulary logits and log-softmax, the paper's way) at the largest batch that fits: tokens/s, peak GPU memory,
   and MFU against 989 TFLOP/s (dense bf16 of an H100/H200 SXM; the card is named, and its own peak given where it
   differs). MFU counts 2 x parameters (input embedding excluded, output head included) per token, and once more
   with the causal attention matmuls (2 x seq x hidden per layer and token).
   Shapes: pythia-1.4b, pythia-6.9b, pythia-12b (EleutherAI's configs) and olmo2-7b (allenai/OLMo-2-1124-7B).
2. **Batch invariance on the GPU**: the same rows (unequal lengths) scored alone and in one batch, by the fast path
   and by the fixed-shape invariant path (``Scorer(invariant=True)``, the CPU default), in bf16 and in fp32; max
   absolute difference per metric, and the invariant path's speed against the fast path's.
3. **bf16 vs fp32 agreement**: the same rows, bf16 body vs fp32 body (fp32 head in both).
4. **Does it matter**: every shipped sample panel re-estimated (loglik, calibrated bands) after adding ±delta to every
   cell (random signs), for delta = the largest bf16 batch-dependence of a row's loglik measured in 2., and the
   bf16-vs-fp32 one of 3.: how many significant cells change; and with Gaussian noise of the typical size, scaled
   to each row's own number of targets (sd per target from 2. and 3.), on the panels with tokens.

The models have random weights with the output head scaled so that logits spread like a trained model's (standard
deviation ~3); numbers about precision are therefore indicative, not a trained checkpoint's.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_TFLOPS = 989.0  # H100/H200 SXM dense bf16: the yardstick
CARD_TFLOPS = {  # dense bf16, no sparsity; most specific first
    "H200": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "A100": 312.0,
    "L40S": 362.0,
    "A10G": 125.0,
    "L4": 121.0,
    "RTX 4090": 165.0,
}
NEOX = dict(rotary_pct=0.25, use_parallel_residual=True, tie_word_embeddings=False)
SHAPES = {  # name: (family, config, tokens per row, batch to start from)
    "pythia-1.4b": ("neox", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                                 intermediate_size=8192, vocab_size=50304), 2049, 256),
    "pythia-6.9b": ("neox", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                 intermediate_size=16384, vocab_size=50432), 2049, 64),
    "pythia-12b": ("neox", dict(hidden_size=5120, num_hidden_layers=36, num_attention_heads=40,
                                intermediate_size=20480, vocab_size=50688), 2049, 32),
    "olmo2-7b": ("olmo2", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                               intermediate_size=11008, vocab_size=100352, rms_norm_eps=1e-6), 4096, 32),
    # --dry-run: the same code paths on CPU in seconds
    "tiny-neox": ("neox", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                               vocab_size=1024), 129, 4),
    "tiny-olmo2": ("olmo2", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                 intermediate_size=172, vocab_size=1024, rms_norm_eps=1e-6, eos_token_id=1,
                                 pad_token_id=1), 129, 4),
}  # fmt: skip
GPU_SHAPES = ("pythia-1.4b", "pythia-6.9b", "pythia-12b", "olmo2-7b")
DRY_SHAPES = ("tiny-neox", "tiny-olmo2")


def log(msg: str) -> None:
    print(msg, flush=True)


def card_peak(name: str) -> float | None:
    return next((v for k, v in CARD_TFLOPS.items() if k in name), None)


def build(shape: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """A randomly initialised model of ``shape`` made directly on ``device`` in ``dtype``."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Olmo2Config, Olmo2ForCausalLM

    family, fields, seq_len, _ = SHAPES[shape]
    if family == "neox":
        cfg, cls = GPTNeoXConfig(**fields, **NEOX, max_position_embeddings=max(2048, seq_len)), GPTNeoXForCausalLM
    else:
        cfg = Olmo2Config(**fields, max_position_embeddings=seq_len, tie_word_embeddings=False)
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": 500000.0}
        cls = Olmo2ForCausalLM
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval(), cfg


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    gc.collect()  # a model dropped by its frame may sit in a reference cycle
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def timed(fn, device: torch.device, reps: int) -> float:
    fn()  # warm-up (and the out-of-memory test)
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def largest_that_fits(make_fn, batch: int, device: torch.device, reps: int, release) -> tuple[int, float, float]:
    """(batch, seconds per batch, peak GiB): halve the batch on out-of-memory, as the extraction worker does."""
    while True:
        free(device)
        try:
            seconds = timed(make_fn(batch), device, reps)
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
            return batch, seconds, peak
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            if not is_oom(exc) or batch == 1:
                raise
            release()
            batch //= 2
            log(f"    out of memory; batch {batch}")


def naive(model, tokens: torch.Tensor) -> None:
    """The paper's way: full fp32 (batch x length x vocabulary) logits, log-softmax, then the four metrics."""
    with torch.inference_mode():
        logits = model(input_ids=tokens).logits[:, :-1].float()
        lp = torch.log_softmax(logits, -1)
        y = tokens[:, 1:, None]
        lp.gather(-1, y).sum(1)
        (logits > logits.gather(-1, y)).sum(-1)
        (-(lp.exp() * lp).sum(-1)).mean(1)


def speed(shape: str, args, device: torch.device, dtype: torch.dtype) -> dict:
    """memtui's fast path and the naive baseline on one shape: tokens/s, peak memory, MFU."""
    from memtui.extract.scoring import Scorer

    t0 = time.perf_counter()
    model, cfg = build(shape, device, dtype)
    seq_len, start = SHAPES[shape][2], SHAPES[shape][3]
    params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    out = {"params_excl_input_embedding": params, "seq_len": seq_len, "build_s": round(time.perf_counter() - t0, 1)}
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, size=(start, seq_len))
    scorer = Scorer(model, device, extractable=(32, 32), invariant=False)

    def memtui_fn(b):
        return lambda: scorer.score(tokens[:b], np.full(b, seq_len))

    def naive_fn(b):
        t = torch.as_tensor(tokens[:b], device=device)
        return lambda: naive(model, t)

    for name, make_fn in (("memtui", memtui_fn), ("naive", naive_fn)):
        batch = start if name == "memtui" else min(start, out["memtui"]["batch"])
        b, seconds, peak = largest_that_fits(make_fn, batch, device, args.reps, scorer.release)
        scorer.release()
        rate = b * seq_len / seconds
        flops = 2 * params * rate
        attn = 2 * seq_len * cfg.hidden_size * cfg.num_hidden_layers * rate  # causal QK^T and AV, forward
        out[name] = {"batch": b, "tokens_per_s": rate, "peak_gib": peak,
                     "mfu_989": flops / (REFERENCE_TFLOPS * 1e12),
                     "mfu_989_with_attention": (flops + attn) / (REFERENCE_TFLOPS * 1e12)}  # fmt: skip
        if args.card_peak:
            out[name]["mfu_card"] = flops / (args.card_peak * 1e12)
        log(f"  {shape:<12} {name:<7} batch {b:>4} x {seq_len}: {rate:>10,.0f} tokens/s, peak {peak or 0:6.1f} GiB, "
            f"MFU {out[name]['mfu_989']:.1%} of {REFERENCE_TFLOPS:.0f} TFLOP/s "
            f"({out[name]['mfu_989_with_attention']:.1%} with attention)")  # fmt: skip
    out["speedup_vs_naive"] = out["memtui"]["tokens_per_s"] / out["naive"]["tokens_per_s"]
    return out  # the model goes with this frame; the caller frees the cache


def trained_like(model, device: torch.device, vocab: int, seq_len: int) -> None:
    """Scale the output head so that logits have a standard deviation of ~3, as a trained LM's do (random weights
    give nearly uniform predictions, whose rounding errors would understate a real model's)."""
    x = torch.randint(0, vocab, (1, min(seq_len, 256)), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.inference_mode():
        sd = float(model(input_ids=x).logits.float().std())
        model.get_output_embeddings().weight.mul_(3.0 / max(sd, 1e-6))


def rows_for_invariance(n: int, seq_len: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, vocab, size=(n, seq_len))
    lengths = np.full(n, seq_len)
    lengths[1::2] = rng.integers(seq_len // 4, seq_len, size=len(lengths[1::2]))  # padding in the batch
    # three rows of one short length share a micro-batch of the invariant path in the batch, and each sits with copies
    # of itself alone: whether a row's slot in a micro-batch moves its scores (the first H100 run had no such rows)
    lengths[1:6:2] = min(seq_len // 3, 700)
    tokens[np.arange(seq_len)[None, :] >= lengths[:, None]] = -1
    return tokens, lengths


def per_target_sd(a: np.ndarray, b: np.ndarray, targets: np.ndarray) -> float:
    """The root mean square of (a - b) / sqrt(targets) over the rows: the spread one target adds to a row's loglik
    difference if the targets' rounding errors were independent (a row of n targets then differs by ~sd * sqrt(n))."""
    z = (np.asarray(a, float) - np.asarray(b, float)) / np.sqrt(targets)
    z = z[np.isfinite(z)]
    return float(np.sqrt(np.mean(z * z))) if len(z) else 0.0


def max_abs(a: dict, b: dict) -> dict[str, float]:
    return {m: float(np.nanmax(np.abs(a[m] - b[m]))) if np.isfinite(a[m]).any() else 0.0 for m in a}


def invariance(args, device: torch.device) -> dict:
    """Same rows alone vs in one batch (fast and invariant paths), bf16 and fp32; and bf16 vs fp32."""
    from memtui.extract.scoring import Scorer

    shape = args.shapes[0]
    seq_len, vocab = SHAPES[shape][2], SHAPES[shape][1]["vocab_size"]
    tokens, lengths = rows_for_invariance(args.rows, seq_len, vocab)
    out, scores = {"shape": shape, "rows": args.rows, "lengths": lengths.tolist()}, {}
    for dtype in (torch.bfloat16, torch.float32):
        model, _ = build(shape, device, dtype)
        trained_like(model, device, vocab, seq_len)
        key = str(dtype).removeprefix("torch.")
        for path in ("fast", "invariant"):
            scorer = Scorer(model, device, extractable=(32, 32), invariant=path == "invariant")
            batch = scorer.score(tokens, lengths)
            alone = [scorer.score(tokens[i : i + 1, : lengths[i]], lengths[i : i + 1]) for i in range(len(lengths))]
            alone = {m: np.concatenate([a[m] for a in alone]) for m in batch}
            out[f"{key}_{path}_batch_vs_alone_max_abs"] = max_abs(batch, alone)
            if (key, path) == ("bfloat16", "fast"):
                alone_ll = alone["loglik"]
            scores[(key, path)] = batch
            diffs = out[f"{key}_{path}_batch_vs_alone_max_abs"]
            log(f"  {key:<8} {path:<9} batch of {len(lengths)} vs alone, max |diff|: "
                + ", ".join(f"{m} {d:.3g}" for m, d in diffs.items()))  # fmt: skip
            scorer.release()
        if key == "bfloat16":
            out["bfloat16_invariant_vs_fast_time_ratio"] = path_speed(model, device, args, seq_len, vocab)
        del model
        free(device)
    out["bf16_vs_fp32_max_abs"] = max_abs(scores[("bfloat16", "fast")], scores[("float32", "fast")])
    targets = np.maximum(lengths - 1, 1)
    out["per_target_sd"] = {  # a row's loglik difference over the square root of its targets, as a typical size
        "bf16_batch": per_target_sd(scores[("bfloat16", "fast")]["loglik"], alone_ll, targets),
        "bf16_vs_fp32": per_target_sd(scores[("bfloat16", "fast")]["loglik"], scores[("float32", "fast")]["loglik"],
                                      targets),
    }  # fmt: skip
    f32 = scores[("float32", "fast")]["loglik"]
    out["bf16_vs_fp32_loglik_max_rel"] = float(
        np.max(np.abs(scores[("bfloat16", "fast")]["loglik"] - f32) / np.abs(f32))
    )
    log("  bf16 vs fp32 (fast path), max |diff|: "
        + ", ".join(f"{m} {d:.3g}" for m, d in out["bf16_vs_fp32_max_abs"].items()))  # fmt: skip
    return out


def path_speed(model, device: torch.device, args, seq_len: int, vocab: int) -> float:
    """Time of the invariant path over the fast path on full-length rows, same model, alternating."""
    from memtui.extract.scoring import Scorer

    tokens = np.random.default_rng(3).integers(0, vocab, size=(args.speed_rows, seq_len))
    lengths = np.full(args.speed_rows, seq_len)
    fast, inv = Scorer(model, device, invariant=False), Scorer(model, device, invariant=True)
    fast.score(tokens, lengths), inv.score(tokens, lengths)  # warm-up
    ratios = []
    for _ in range(args.reps):
        t = []
        for scorer in (fast, inv):
            sync(device)
            t0 = time.perf_counter()
            scorer.score(tokens, lengths)
            sync(device)
            t.append(time.perf_counter() - t0)
        ratios.append(t[1] / t[0])
    log(f"  invariant / fast path time, {args.speed_rows} x {seq_len} tokens: {np.median(ratios):.3f}")
    fast.release(), inv.release()
    return float(np.median(ratios))


def significance(deltas: dict[str, float], draws: int, per_target: dict[str, float] | None = None) -> dict:
    """Re-estimate each shipped sample with ±delta added to every loglik cell (the worst case: the largest difference
    measured, on every cell) and, for each ``per_target`` sd, with Gaussian noise of sd * sqrt(the row's targets) on
    every cell (the typical size, scaled to the sample's own row lengths): significant cells that change."""
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings
    from memtui.panel.hdf5 import read_panel

    out = {}
    rng = np.random.default_rng(4)
    settings = Settings(metric="loglik", draws=draws)
    for path in sorted((ROOT / "sample_panels").glob("*.h5")):
        panel = read_panel(path)
        if "loglik" not in panel.metrics:
            continue
        base = estimate(panel, settings).cells["significant"].to_numpy()
        row = {"cells": len(base), "significant": int(base.sum())}
        for label, delta in deltas.items():
            y = panel.metrics["loglik"]
            noisy = replace(panel, metrics={**panel.metrics, "loglik": y + delta * rng.choice([-1.0, 1.0], y.shape)})
            sig = estimate(noisy, settings).cells["significant"].to_numpy()
            row[f"changed_{label}"] = int((sig != base).sum())
        # a panel without tokens (the synthetic sample) has no row lengths to scale by: the worst case only
        targets = None if panel.lengths is None else np.maximum(panel.lengths - 1, 1)
        for label, sd in (per_target or {}).items() if targets is not None else ():
            y = panel.metrics["loglik"]
            noise = rng.standard_normal(y.shape) * sd * np.sqrt(targets)[:, None]
            sig = estimate(replace(panel, metrics={**panel.metrics, "loglik": y + noise}), settings).cells
            row[f"changed_typical_{label}"] = int((sig["significant"].to_numpy() != base).sum())
        out[path.stem] = row
        log(f"  {path.stem:<18} " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return out


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU: a smoke test of every step (CI)")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the old name of --dry-run
    p.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)  # the baseline always runs now
    p.add_argument(
        "--shapes", default=None, help=f"comma list of {', '.join(SHAPES)} (default: {','.join(GPU_SHAPES)})"
    )
    p.add_argument("--reps", type=int, default=2, help="timed repetitions after a warm-up (median)")
    p.add_argument("--rows", type=int, default=12, help="rows of the invariance and bf16/fp32 checks")
    p.add_argument("--speed-rows", type=int, default=32, help="rows of the invariant-vs-fast timing")
    p.add_argument("--draws", type=int, default=1000, help="bootstrap draws of the significance check")
    p.add_argument("--skip", default="", help="comma list of parts to skip: speed, invariance, significance")
    p.add_argument(
        "--peak-tflops", type=float, default=None, help="the card's own dense bf16 peak (default: looked up)"
    )
    p.add_argument("--out", default=None, help="also write the JSON report here")
    args = p.parse_args(argv)
    args.dry_run = args.dry_run or args.tiny
    args.shapes = (args.shapes or ",".join(DRY_SHAPES if args.dry_run else GPU_SHAPES)).split(",")
    if unknown := [s for s in args.shapes if s not in SHAPES]:
        p.error(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    if args.dry_run:
        args.rows, args.speed_rows, args.draws, args.reps = min(args.rows, 6), min(args.speed_rows, 4), 0, 1
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    sys.path.insert(0, str(ROOT / "src"))  # runs from a bare checkout (GPU box)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check is for a GPU (use --dry-run for a CPU smoke test)")
    device = torch.device("cpu" if args.dry_run else "cuda")
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    args.card_peak = args.peak_tflops or (card_peak(card) if device.type == "cuda" else None)
    dtype = torch.float32 if args.dry_run else torch.bfloat16
    report = {"card": card, "card_peak_tflops": args.card_peak, "reference_tflops": REFERENCE_TFLOPS,
              "torch": torch.__version__, "dtype": str(dtype)}  # fmt: skip
    log(f"device {card}; MFU against {REFERENCE_TFLOPS:.0f} TFLOP/s dense bf16; torch {torch.__version__}")
    skip = set(filter(None, args.skip.split(",")))
    t0 = time.perf_counter()
    if "speed" not in skip:
        log("1. speed: memtui's fast path vs the naive full log-softmax, same run")
        report["speed"] = {}
        for shape in args.shapes:
            report["speed"][shape] = speed(shape, args, device, dtype)
            free(device)
    if "invariance" not in skip:
        log(f"2./3. batch invariance and bf16 vs fp32 ({args.shapes[0]})")
        report["invariance"] = invariance(args, device)
    if "significance" not in skip:
        inv = report.get("invariance", {})
        deltas = {
            "fp32_rounding": 1e-6,  # a reference: how many cells sit so close to their band that any change flips them
            "bf16_batch": inv.get("bfloat16_fast_batch_vs_alone_max_abs", {}).get("loglik", 1e-3),
            "bf16_vs_fp32": inv.get("bf16_vs_fp32_max_abs", {}).get("loglik", 1e-2),
        }
        deltas = {k: v if math.isfinite(v) else 0.0 for k, v in deltas.items()}
        log(f"4. significance on the shipped samples with ±delta on every loglik cell: {deltas}")
        per_target = inv.get("per_target_sd", {})
        log(f"   and Gaussian noise of sd x sqrt(targets) per cell, sd per target: {per_target}")
        report["significance"] = {"deltas": deltas, "per_target_sd": per_target, "draws": args.draws or 200,
                                  "panels": significance(deltas, args.draws or 200, per_target)}  # fmt: skip
    report["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(report, indent=1, default=float)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()
