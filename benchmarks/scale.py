"""Scale benchmark: extraction throughput with 1 and 2 local CPU workers, and the committer's cost per checkpoint.

1. Throughput: the same tiny-GPT-NeoX panel extracted by one detached worker, then by two (each pinned to one
   thread, so on a 2-core machine each has a core), timed from launch to the last commit. Prints tokens/s and the
   ratio 2 workers / 1 worker. Values are checked to be identical.
2. Committer: at the paper's panel size (16,300 instances x 4 metrics), the time to fold one checkpoint's part into
   the panel, against writing the same columns directly with PanelWriter (what the single worker used to do) in the
   same process.

    .venv/bin/python benchmarks/scale.py [--instances 1200] [--length 256] [--checkpoints 6] [--commits 8] [--quick]

The default throughput run (1200 x 256 tokens x 6 checkpoints: 1.8M tokens, tens of minutes on 2 cores) is long
enough that the workers' start-up (loading torch and each checkpoint) no longer dominates: issue 17 measured two
workers at 1.03x one at 240 x 128 x 6 and 1.70x at 1200 x 256 x 6. ``--quick`` (240 x 128 x 6, 3 commits) only
checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

METRICS = ("loglik", "accuracy", "rank", "entropy")


def make_study(root: Path, n: int, length: int, n_ckpt: int, vocab: int = 512) -> tuple[Path, Path, list[int]]:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    from transformers.utils import logging as hf_logging

    from memtui.panel.hdf5 import create_panel
    from memtui.panel.model import NEVER

    hf_logging.disable_progress_bar()

    steps = [i * 10 for i in range(n_ckpt)]
    for step in steps:
        torch.manual_seed(step)
        cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=512, max_position_embeddings=length)  # fmt: skip
        GPTNeoXForCausalLM(cfg).eval().save_pretrained(root / "ckpts" / f"step{step}")
    rng = np.random.default_rng(0)
    treatment = np.r_[np.repeat(steps[1:], n // 2 // (n_ckpt - 1) + 1)[: n // 2], np.full(n - n // 2, NEVER)]
    panel = create_panel(root / "panel.h5", ids=np.arange(n), treatment=treatment, steps=steps,
                         tokens=rng.integers(0, vocab, size=(n, length)))  # fmt: skip
    return panel, root / "ckpts", steps


def timed_extraction(panel: Path, ckpts: Path, workers: int) -> float:
    from memtui.extract import jobs
    from memtui.extract.options import ExtractOptions

    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    options = ExtractOptions(model=str(ckpts), device="cpu", batch_size="8", workers=workers, extra_env=one_thread)
    t0 = time.perf_counter()
    jobs.launch(panel, options)
    while True:
        progress = jobs.read_progress(panel)
        if progress and progress["state"] != "running":
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - t0
    assert progress["state"] == "done", progress
    return elapsed


def throughput(args) -> None:
    from memtui.panel.hdf5 import read_panel

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "one").mkdir()
        (root / "two").mkdir()
        one, ckpts, steps = make_study(root / "one", args.instances, args.length, args.checkpoints)
        two = Path(root / "two" / "panel.h5")
        two.write_bytes(one.read_bytes())
        tokens = args.instances * args.length * len(steps)
        t1 = timed_extraction(one, ckpts, 1)
        t2 = timed_extraction(two, ckpts, 2)
        a, b = read_panel(one), read_panel(two)
        same = all(np.array_equal(a.metrics[m], b.metrics[m], equal_nan=True) for m in METRICS)
    print(f"throughput ({args.instances} x {args.length} tokens x {len(steps)} checkpoints, launch to last commit, "
          "one thread per worker)")  # fmt: skip
    print(f"  1 worker   {t1:7.1f} s  {tokens / t1:9,.0f} tokens/s")
    print(f"  2 workers  {t2:7.1f} s  {tokens / t2:9,.0f} tokens/s   ratio {t1 / t2:.2f}x   values identical: {same}")


def committer(args) -> None:
    from memtui.extract.commit import commit_ready
    from memtui.extract.units import Owner, WorkDir, plan_units
    from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel
    from memtui.panel.model import NEVER

    n, t = 16_300, 96
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        treatment = np.r_[np.repeat(np.arange(1, 96) * 1000, 151)[: n - 2000], np.full(2000, NEVER)]
        steps = np.arange(t) * 1000
        paths = [create_panel(Path(tmp) / f"p{i}.h5", ids=np.arange(n), treatment=treatment, steps=steps)
                 for i in range(2)]  # fmt: skip
        # every metric the panel holds (the extractability ones too): the committer refuses a part that lacks one
        names = list(read_panel(paths[0]).metrics)
        columns = [{m: rng.normal(size=n) for m in names} for _ in range(args.commits)]
        # baseline: the columns written straight into the panel, as a single worker did before parts existed
        t0 = time.perf_counter()
        with PanelWriter(paths[0]) as writer:
            for i, cols in enumerate(columns):
                writer.write_checkpoint(i, cols, revision=f"step{i * 1000}", weights_hash="ab" * 16, model="m")
        direct = (time.perf_counter() - t0) / args.commits
        work, me = WorkDir(paths[1]).ensure(), Owner.me()
        units = plan_units([int(s) for s in steps[: args.commits]], steps, n, 1)
        t0 = time.perf_counter()
        for unit, cols in zip(units, columns, strict=True):
            work.write_part(unit, cols, {"revision": f"step{unit.step}", "weights_hash": "ab" * 16, "model": "m"})
        write_parts = (time.perf_counter() - t0) / args.commits
        t0 = time.perf_counter()
        said: list[str] = []
        folded = commit_ready(paths[1], work, me, log=said.append)
        fold = (time.perf_counter() - t0) / args.commits
        if folded != args.commits:
            raise SystemExit(f"the committer folded {folded} of {args.commits} parts: {said[:1]}")
    print(f"committer at the paper's size ({n:,} instances x {len(names)} metrics, {t} checkpoints), per checkpoint:")
    print(f"  write the part (worker side)      {write_parts * 1e3:7.1f} ms")
    print(f"  fold it into the panel            {fold * 1e3:7.1f} ms")
    print(f"  baseline: write columns directly  {direct * 1e3:7.1f} ms   (fold / direct {fold / direct:.2f}x)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=1200)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--checkpoints", type=int, default=6)
    p.add_argument("--commits", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="240 x 128 x 6 and 3 commits: that it runs, not how fast")
    args = p.parse_args()
    if args.quick:
        args.instances, args.length, args.checkpoints, args.commits = 240, 128, 6, 3
    print(f"cores: {os.cpu_count()}")
    committer(args)
    throughput(args)


if __name__ == "__main__":
    main()
