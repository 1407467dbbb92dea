"""GPU check: extraction throughput and model-FLOPs utilisation on a Pythia-1.4b-shaped GPT-NeoX (random weights).

One script, under 5 minutes on one H100/H200-class GPU:

    python benchmarks/gpu_extract.py                 # cuda, bf16 body, Pythia-1.4b shape, batch auto
    python benchmarks/gpu_extract.py --naive         # also the full-log-softmax baseline at the same batch
    python benchmarks/gpu_extract.py --tiny          # smoke test on CPU with a tiny model (what CI can run)

Reports tokens/s of memtui's scorer (bf16 body, fp32 chunked head, the four metrics), the batch size that fit, peak
GPU memory, and MFU = 2 * params * tokens / time / peak, with params excluding the input embedding (a lookup) and
including the output head; attention FLOPs are not counted, so MFU is a lower bound. Peak bf16 dense FLOP/s is
looked up from the device name (override with --peak-tflops).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

PEAK_BF16_TFLOPS = {  # dense, no sparsity
    "H200": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "H100": 989.0,  # SXM reports e.g. "NVIDIA H100 80GB HBM3"
    "GH200": 989.0,
    "B200": 2250.0,
    "A100": 312.0,
    "L40S": 362.0,
    "A10G": 125.0,
    "L4": 121.0,
    "RTX 4090": 165.0,
}


def peak_tflops(name: str) -> float | None:
    for key, value in PEAK_BF16_TFLOPS.items():  # most specific first
        if key in name:
            return value
    return None


def build(args, device, dtype):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    if args.tiny:
        shape = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, vocab_size=1024)
    else:  # EleutherAI/pythia-1.4b
        shape = dict(
            hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192, vocab_size=50304
        )
    cfg = GPTNeoXConfig(
        **shape,
        rotary_pct=0.25,
        use_parallel_residual=True,
        max_position_embeddings=max(2048, args.seq_len),
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = GPTNeoXForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval(), cfg


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, reps: int) -> float:
    fn()  # warm-up
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny model on CPU: a smoke test")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--batch", default="auto", help="sequences per batch, or auto (largest that fits, <= 256)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default 2049; --tiny: 129)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--naive", action="store_true", help="also time the full log-softmax at the same batch")
    p.add_argument("--peak-tflops", type=float, default=None)
    args = p.parse_args()
    args.seq_len = args.seq_len or (129 if args.tiny else 2049)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a bare checkout (GPU box)
    from memtui.extract.scoring import Scorer, resolve_device, resolve_dtype

    if not args.tiny and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check is for a GPU (use --tiny for a CPU smoke test)")

    device = resolve_device("cpu" if args.tiny and args.device == "auto" else args.device)
    dtype = resolve_dtype(args.dtype, device)
    t0 = time.perf_counter()
    model, cfg = build(args, device, dtype)
    n_params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), body {dtype}")
    print(
        f"model: {cfg.num_hidden_layers} layers x {cfg.hidden_size}, vocab {cfg.vocab_size}, "
        f"{n_params / 1e9:.3f}B params excluding input embedding (built in {time.perf_counter() - t0:.1f} s)"
    )
    scorer = Scorer(model, device)
    rng = np.random.default_rng(0)

    def batch_of(b):
        tokens = rng.integers(0, cfg.vocab_size, size=(b, args.seq_len))
        return tokens, np.full(b, args.seq_len)

    b = 256 if args.batch == "auto" else int(args.batch)
    if args.tiny and args.batch == "auto":
        b = 4
    while True:  # the extraction worker's policy: halve on out-of-memory
        try:
            tokens, lengths = batch_of(b)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            seconds = timed(lambda tokens=tokens, lengths=lengths: scorer.score(tokens, lengths), device, args.reps)
            break
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            if not is_oom(exc) or b == 1:
                raise
            scorer.release()
            torch.cuda.empty_cache()
            b //= 2
            print(f"  out of memory; batch {b}")
    n_tokens = b * args.seq_len
    rate = n_tokens / seconds
    result = {"batch": b, "seq_len": args.seq_len, "seconds_per_batch": seconds, "tokens_per_s": rate}
    if device.type == "cuda":
        result["peak_gpu_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
        peak = args.peak_tflops or peak_tflops(torch.cuda.get_device_name(device))
        if peak:
            result["peak_tflops"] = peak
            result["mfu"] = 2 * n_params * rate / (peak * 1e12)
    print(
        f"memtui: batch {b} x {args.seq_len}: {rate:,.0f} tokens/s"
        + (f", peak {result['peak_gpu_gb']:.1f} GiB" if "peak_gpu_gb" in result else "")
        + (f", MFU {result['mfu']:.1%} of {result['peak_tflops']:.0f} TFLOP/s" if "mfu" in result else "")
    )

    if args.naive:  # the paper's way, same batch: full fp32 (batch x length x vocabulary) logits and log-softmax
        scorer.release()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        nb = b  # the full fp32 logits (batch x 2048 x 50304 x 4 B) rarely fit at memtui's batch: halve until they do
        while True:
            t = torch.as_tensor(tokens[:nb], device=device)
            try:
                naive_s = timed(lambda t=t: naive(model, t), device, args.reps)
                break
            except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
                if not is_oom(exc) or nb == 1:
                    raise
                del t
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                nb //= 2
        result["naive_batch"] = nb
        result["naive_tokens_per_s"] = nb * args.seq_len / naive_s
        if device.type == "cuda":
            result["naive_peak_gpu_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
        print(
            f"naive:  batch {nb} x {args.seq_len} (largest that fits): {result['naive_tokens_per_s']:,.0f} tokens/s"
            + (f", peak {result['naive_peak_gpu_gb']:.1f} GiB" if "naive_peak_gpu_gb" in result else "")
        )
    print(json.dumps(result))


def naive(model, tokens: torch.Tensor) -> None:
    with torch.inference_mode():
        logits = model(input_ids=tokens).logits[:, :-1].float()
        lp = torch.log_softmax(logits, -1)
        y = tokens[:, 1:, None]
        lp.gather(-1, y).sum()
        (logits > logits.gather(-1, y)).sum(-1)
        (-(lp.exp() * lp).sum(-1)).mean()


if __name__ == "__main__":
    main()
