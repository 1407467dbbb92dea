"""GPU checks for multi-worker extraction, one prepared run (a few minutes on one H100/H200-class GPU):

1. bf16 vs fp32: the four metrics of a few 2,049-token rows scored by a Pythia-1.4b-shaped GPT-NeoX (random weights)
   with a bf16 body and with an fp32 body (the head is fp32 in both): largest relative differences.
2. --workers 2 on one GPU: a Pythia-160m-shaped model's checkpoints extracted into the same panel by one detached
   worker and by two; wall time of each (launch to last commit) and whether the values agree.

    PYTHONPATH=src python benchmarks/gpu_scale_check.py            # on the GPU machine
    PYTHONPATH=src python benchmarks/gpu_scale_check.py --tiny     # CPU smoke test with tiny models
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

METRICS = ("loglik", "accuracy", "rank", "entropy")


def model(hidden: int, layers: int, heads: int, vocab: int, seed: int) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=2048, rotary_pct=0.25)  # fmt: skip
    return GPTNeoXForCausalLM(cfg).eval()


def agreement(args, device: torch.device) -> dict:
    from memtui.extract.scoring import Scorer
    from memtui.extract.worker import to_body_dtype

    shape = (256, 2, 4, 512) if args.tiny else (2048, 24, 16, 50304)  # Pythia-1.4b: 2048 x 24 layers, 16 heads
    rows, length = (4, 129) if args.tiny else (8, 2049)
    tokens = np.random.default_rng(0).integers(0, shape[3], size=(rows, length))
    lengths = np.full(rows, length)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        net = to_body_dtype(model(*shape, seed=0).to(device), dtype)
        out[str(dtype)] = Scorer(net, device).score(tokens, lengths)
        del net
        if device.type == "cuda":
            torch.cuda.empty_cache()
    f32, b16 = out["torch.float32"], out["torch.bfloat16"]
    diff = {}
    for m in METRICS:
        scale = np.maximum(np.abs(f32[m]), 1e-9)
        diff[m] = {"max_rel": float(np.max(np.abs(b16[m] - f32[m]) / scale)), "fp32_mean": float(np.mean(f32[m]))}
    return diff


def workers(args, device: torch.device) -> dict:
    from memtui.extract import jobs
    from memtui.extract.options import ExtractOptions
    from memtui.panel.hdf5 import create_panel, read_panel
    from memtui.panel.model import NEVER

    shape = (128, 2, 4, 512) if args.tiny else (768, 12, 12, 50304)  # Pythia-160m
    n, length, steps = (48, 129, [0, 10, 20, 30]) if args.tiny else (128, 2049, [0, 1000, 2000, 3000])
    root = Path(tempfile.mkdtemp(prefix="memtui-gpu-"))
    for i, step in enumerate(steps):
        model(*shape, seed=i).save_pretrained(root / "ckpts" / f"step{step}")
    tokens = np.random.default_rng(1).integers(0, shape[3], size=(n, length))
    treatment = np.r_[np.repeat(steps[1:], n // 2 // (len(steps) - 1) + 1)[: n // 2], np.full(n - n // 2, NEVER)]
    result = {}
    for count in (1, 2):
        panel = create_panel(root / f"w{count}.h5", ids=np.arange(n), treatment=treatment, steps=steps, tokens=tokens)
        options = ExtractOptions(model=str(root / "ckpts"), device=device.type, batch_size="16", workers=count)
        t0 = time.perf_counter()
        jobs.launch(panel, options)
        while (p := jobs.read_progress(panel)) is None or p["state"] == "running":
            time.sleep(0.1)
        result[f"workers_{count}"] = {"state": p["state"], "seconds": round(time.perf_counter() - t0, 2),
                                      "tokens": int(n * length * len(steps))}  # fmt: skip
        if p["state"] != "done":
            result[f"workers_{count}"]["log_tail"] = Path(p["log"]).read_text()[-1500:]
    a, b = read_panel(root / "w1.h5"), read_panel(root / "w2.h5")
    result["max_rel_diff_1_vs_2_workers"] = {
        m: float(np.nanmax(np.abs(a.metrics[m] - b.metrics[m]) / np.maximum(np.abs(a.metrics[m]), 1e-9)))
        for m in METRICS
    }
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tiny", action="store_true")
    args = p.parse_args()
    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = {"device": name, "bf16_vs_fp32": agreement(args, device), "workers": workers(args, device)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
