"""CPU benchmark: memtui's chunked scorer vs the naive full log-softmax (as in the paper's code).

Both score the same instances (Pythia's vocabulary 50,304 and sequence length 2,049) with the same tiny GPT-NeoX,
each in its own subprocess so that peak memory (ru_maxrss) is measured per approach. Prints tokens/s, peak memory,
their ratios, and the largest disagreement between the two.

    .venv/bin/python benchmarks/extract.py [--batch 4] [--reps 3] [--layers 2] [--hidden 256]

``--extractable`` instead times the scorer with and without the (k, l)-extractability metrics (k = l = 32), in one
process, alternating the two so that drift on a busy machine hits both alike, and prints the median of the per-pair
time ratios, and the time of the extractability reduction alone.

``--invariance`` times the batch-invariant scorer (the CPU default: rows grouped by length, fixed-shape micro-batches,
the head per row) against the padded fast path it replaced (``Scorer(..., invariant=False)``), in one process,
alternating the two, and prints the median of the per-pair time ratios and how far each path's batch scores are from
the same rows scored one at a time (0 for the invariant path).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def make_model(args):
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        intermediate_size=4 * args.hidden,
        max_position_embeddings=args.seq_len,
    )
    return GPTNeoXForCausalLM(cfg).eval()


def naive_scores(model, tokens):
    """The straightforward way: full (batch x length x vocabulary) fp32 logits and log-softmax."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=tokens).logits[:, :-1].float()
        lp = torch.log_softmax(logits, -1)
        y = tokens[:, 1:, None]
        target_lp = lp.gather(-1, y).squeeze(-1)
        rank = (logits > logits.gather(-1, y)).sum(-1)
        entropy = -(lp.exp() * lp).sum(-1)
        return {
            "loglik": target_lp.double().sum(1).numpy(),
            "accuracy": (rank == 0).double().mean(1).numpy(),
            "rank": rank.double().mean(1).numpy(),
            "entropy": entropy.double().mean(1).numpy(),
        }


def worker(args) -> None:
    import torch

    from memtui.extract.scoring import Scorer

    model = make_model(args)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, size=(args.batch, args.seq_len))
    lengths = np.full(args.batch, args.seq_len)
    t = torch.as_tensor(tokens)
    if args.worker == "memtui":
        scorer = Scorer(model, torch.device("cpu"))

        def score():
            return scorer.score(tokens, lengths)
    else:

        def score():
            return naive_scores(model, t)

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = score()  # warm-up (and the peak, which the first call already reaches)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        score()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "tokens_per_s": args.batch * args.seq_len / float(np.median(times)),
                "peak_mb": peak / 1024,
                "base_mb": base / 1024,
                "threads": torch.get_num_threads(),
                "scores": {k: v.tolist() for k, v in out.items()},
            }
        )
    )


def extractable_overhead(args) -> None:
    """The same scorer with and without the extractability flags, same process, alternating A/B."""
    import torch

    from memtui.extract.scoring import Scorer, extractability

    model = make_model(args)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, size=(args.batch, args.seq_len))
    lengths = np.full(args.batch, args.seq_len)
    plain, flags = Scorer(model, torch.device("cpu")), Scorer(model, torch.device("cpu"), extractable=(32, 32))
    out = flags.score(tokens, lengths)  # warm-up, both
    plain.score(tokens, lengths)
    times = {"without": [], "with": []}
    for _ in range(args.reps):
        for name, scorer in (("without", plain), ("with", flags)):
            t0 = time.perf_counter()
            scorer.score(tokens, lengths)
            times[name].append(time.perf_counter() - t0)
    ratios = np.array(times["with"]) / np.array(times["without"])
    # the reduction alone, on this batch's per-target rows and top-1 flags (what it adds to every batch)
    count = torch.full((args.batch,), args.seq_len - 1)
    top1 = torch.as_tensor(rng.random(args.batch * (args.seq_len - 1)) < 0.5)
    t0 = time.perf_counter()
    for _ in range(20):
        extractability(count, top1, 32, 32)
    alone = (time.perf_counter() - t0) / 20
    n_tok = args.batch * args.seq_len
    print(
        f"GPT-NeoX {args.layers}x{args.hidden}, vocabulary {args.vocab}, batch {args.batch} x {args.seq_len} tokens, "
        f"CPU, {torch.get_num_threads()} threads, {args.reps} alternating pairs"
    )
    for name in ("without", "with"):
        print(f"  {name:<8} extractability: {n_tok / float(np.median(times[name])):>9,.0f} tokens/s")
    print(
        f"with / without: time ratio median {np.median(ratios):.4f} (range {ratios.min():.4f} .. {ratios.max():.4f}); "
        f"the extractability reduction alone {alone * 1e3:.2f} ms per batch "
        f"({alone / float(np.median(times['without'])):.2e} of a batch); "
        f"extractable rows in this batch: {int(np.nansum(out['extractable']))} of {args.batch}"
    )


def invariance_ab(args) -> None:
    """The invariant scorer against the fast path it replaced: same process, alternating pairs, and batch dependence."""
    import torch

    from memtui.extract.scoring import Scorer

    model = make_model(args)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, size=(args.batch, args.seq_len))
    lengths = np.full(args.batch, args.seq_len)
    lengths[1::2] -= rng.integers(1, args.seq_len // 2, size=len(lengths[1::2])) if args.unequal else 0
    paths = {
        "fast": Scorer(model, torch.device("cpu"), invariant=False),
        "invariant": Scorer(model, torch.device("cpu")),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    drift = {}
    for name, scorer in paths.items():  # warm-up; and the batch's scores against each row's alone
        batch = scorer.score(tokens, lengths)
        alone = [scorer.score(tokens[i : i + 1, : lengths[i]], lengths[i : i + 1]) for i in range(args.batch)]
        drift[name] = {m: float(np.max(np.abs(batch[m] - np.concatenate([a[m] for a in alone])))) for m in batch}
    for _ in range(args.reps):
        for name, scorer in paths.items():
            t0 = time.perf_counter()
            scorer.score(tokens, lengths)
            times[name].append(time.perf_counter() - t0)
    ratios = np.array(times["invariant"]) / np.array(times["fast"])
    n_tok = int(lengths.sum())
    print(
        f"GPT-NeoX {args.layers}x{args.hidden}, vocabulary {args.vocab}, batch {args.batch} rows of "
        f"{'unequal lengths' if args.unequal else args.seq_len} ({n_tok} tokens), CPU, {torch.get_num_threads()} "
        f"threads, {args.reps} alternating pairs"
    )
    for name in paths:
        worst = ", ".join(f"{m} {d:.2g}" for m, d in drift[name].items())
        print(
            f"  {name:<9} {n_tok / float(np.median(times[name])):>9,.0f} tokens/s; batch vs alone max |diff|: {worst}"
        )
    print(
        f"invariant / fast: time ratio median {np.median(ratios):.4f} (range {ratios.min():.4f} .. {ratios.max():.4f})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq-len", type=int, default=2049)
    p.add_argument("--extractable", action="store_true", help="time the extractability metrics' overhead instead")
    p.add_argument("--invariance", action="store_true", help="time the invariant scorer against the fast path")
    p.add_argument("--unequal", action="store_true", help="with --invariance: every other row shorter (padding)")
    p.add_argument("--worker", choices=["naive", "memtui"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.invariance:
        invariance_ab(args)
        return
    if args.extractable:
        extractable_overhead(args)
        return
    if args.worker:
        worker(args)
        return
    results = {}
    for name in ("naive", "memtui"):
        cmd = [sys.executable, __file__, "--worker", name] + [
            f"--{k.replace('_', '-')}={v}"
            for k, v in vars(args).items()
            if k not in ("worker", "extractable", "invariance", "unequal")
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    n, m = results["naive"], results["memtui"]
    print(
        f"GPT-NeoX {args.layers}x{args.hidden}, vocabulary {args.vocab}, batch {args.batch} x {args.seq_len} tokens, "
        f"CPU, {n['threads']} threads, median of {args.reps}"
    )
    print(f"{'approach':<10}{'tokens/s':>12}{'peak RSS MB':>14}{'above model MB':>16}")
    for name, r in results.items():
        print(f"{name:<10}{r['tokens_per_s']:>12,.0f}{r['peak_mb']:>14,.0f}{r['peak_mb'] - r['base_mb']:>16,.0f}")
    print(
        f"memtui / naive: speed x{m['tokens_per_s'] / n['tokens_per_s']:.2f}, "
        f"peak memory {m['peak_mb'] / n['peak_mb']:.2f} of naive "
        f"({(m['peak_mb'] - m['base_mb']) / (n['peak_mb'] - n['base_mb']):.3f} of naive's working memory)"
    )
    for k in n["scores"]:
        a, b = np.array(n["scores"][k]), np.array(m["scores"][k])
        print(f"  {k:<9} max relative difference {np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-12)):.2e}")


if __name__ == "__main__":
    main()
