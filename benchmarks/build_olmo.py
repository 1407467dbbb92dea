"""Benchmark: a panel of 16,300 instances from an OLMo config of 10 token files and 3 x 10^8 instances.

The files are sparse (their sizes fix the numbering; only the panel's instances are read, as zeros), so the instance
filter is off for the build and timed on its own on 16,300 random instances. The baseline is the libraries' own
cost in the same process: building the global indices (arange + PCG64 shuffle of 3e8 uint32), which any exact
reader must pay once. Prints times, the ratio to the baseline and the peak resident memory.

    python benchmarks/build_olmo.py [--instances 3e8] [--folder DIR]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from memtui.orders.olmo import build_global_indices, olmo_stage
from memtui.orders.repetition import RepetitionFilter
from memtui.orders.sampling import sample_order

SEQ_LEN, BATCH, FILES = 2048, 1024, 10


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=float, default=3e8)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args()
    n = int(args.instances)
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        tmp = Path(tmp)
        per_file = np.full(FILES, n // FILES)
        per_file[: n % FILES] += 1
        paths = []
        for i, count in enumerate(per_file):
            path = tmp / f"part-{i:02d}-00000.npy"
            with open(path, "wb") as f:
                f.truncate(int(count) * SEQ_LEN * 2 + 1000)  # uint16 tokens, a tail that makes no instance
            paths.append(str(path))
        config = tmp / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "seed": 6198,
                    "model": {"max_sequence_length": SEQ_LEN},
                    "global_train_batch_size": BATCH,
                    "data": {"paths": paths, "memmap_dtype": "uint16"},
                }
            )
        )

        t0 = time.perf_counter()
        baseline = build_global_indices(n, 6198)
        t_base = time.perf_counter() - t0
        del baseline

        steps = list(range(0, 143_001, 1000))  # 143 cohorts x 10 batches x 10 instances + 2,000 controls
        t0 = time.perf_counter()
        stage = olmo_stage(config)
        panel = sample_order([stage], steps, k=10, m=10, n_controls=2000, seed=0)
        t_build = time.perf_counter() - t0

        tokens = np.random.default_rng(0).integers(0, 100_000, size=(len(panel.ids), SEQ_LEN))
        t0 = time.perf_counter()
        kept = RepetitionFilter().keep(tokens)
        t_filter = time.perf_counter() - t0

    print(f"{n:,} instances in {FILES} files, {len(panel.ids):,} panel instances ({int(kept.sum()):,} kept by filter)")
    print(f"baseline (global indices alone): {t_base:6.1f} s")
    print(f"panel build (config -> tokens):   {t_build:6.1f} s  ({t_build / t_base:.2f} x baseline)")
    print(f"instance filter on the panel:     {t_filter:6.1f} s")
    print(f"total (build + filter):           {t_build + t_filter:6.1f} s; peak memory {peak_mb():,.0f} MB")


if __name__ == "__main__":
    main()
