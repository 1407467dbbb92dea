"""Benchmark: a panel of 16,300 instances from an OLMo config of 10 token files and 3 x 10^8 instances.

The files are sparse (their sizes fix the numbering; only the panel's instances are read, as zeros), so the instance
filter is off for the build and timed on its own on 16,300 random instances. In one process:

- the **first build** (config -> panel, an empty cache folder): the shuffle's swap partners replayed from the PCG64
  stream (uint32), the panel's positions traced back through them, the instances read;
- the **cached build** (the same run again: another stage, panel or more steps): the partners read back from the
  cache (checked by size and CRC-32), then traced;
- the **baseline**, the libraries' own cost: ``arange(N, uint32)`` shuffled by numpy's ``Generator(PCG64).shuffle``
  (what OLMo's and OLMo-core's ``_build_global_indices`` run, and what memtui ran before), last, so that the
  builds' peak memory is their own.

Prints times, their ratios to the baseline, the load average (the machine may be shared) and peak memory.

    python benchmarks/build_olmo.py [--instances 3e8] [--folder DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from memtui.orders import shuffle
from memtui.orders.olmo import olmo_stage
from memtui.orders.repetition import RepetitionFilter
from memtui.orders.sampling import sample_order

SEQ_LEN, BATCH, FILES, SEED = 2048, 1024, 10, 6198
STEPS = list(range(0, 143_001, 1000))  # 143 cohorts x 10 batches x 10 instances + 2,000 controls


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def write_run(tmp: Path, n: int) -> Path:
    per_file = np.full(FILES, n // FILES)
    per_file[: n % FILES] += 1
    paths = []
    for i, count in enumerate(per_file):
        path = tmp / f"part-{i:02d}-00000.npy"
        with open(path, "wb") as f:
            f.truncate(int(count) * SEQ_LEN * 2 + 1000)  # uint16 tokens, a tail that makes no instance
        paths.append(str(path))
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump({"seed": SEED, "model": {"max_sequence_length": SEQ_LEN},
                                      "global_train_batch_size": BATCH,
                                      "data": {"paths": paths, "memmap_dtype": "uint16"}}))  # fmt: skip
    return config


def timed_build(config: Path, cache: Path):
    t0 = time.perf_counter()
    stage = olmo_stage(config, cache=cache)
    panel = sample_order([stage], STEPS, k=10, m=10, n_controls=2000, seed=0)
    return time.perf_counter() - t0, panel, stage.indices()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=float, default=3e8)
    parser.add_argument("--folder", type=Path, default=None, help="where the token files and the cache go")
    args = parser.parse_args()
    n = int(args.instances)
    print(f"load average at start (1/5/15 min): {load()}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        tmp = Path(tmp)
        config = write_run(tmp, n)
        t_first, panel, order = timed_build(config, tmp / "cache")
        assert not order.cached
        peak_build = peak_mb()
        t_cached, again, order = timed_build(config, tmp / "cache")
        assert order.cached and np.array_equal(again.ids, panel.ids)

        t0 = time.perf_counter()  # the two parts of the first build's order, on their own
        partners = shuffle.swap_partners(n, SEED)
        t_partners = time.perf_counter() - t0
        t0 = time.perf_counter()
        traced = shuffle.trace_back(partners, np.unique(panel.position))
        t_trace = time.perf_counter() - t0
        del partners

        t0 = time.perf_counter()
        baseline = np.arange(n, dtype=np.uint32)
        np.random.Generator(np.random.PCG64(SEED)).shuffle(baseline)
        t_base = time.perf_counter() - t0
        same = np.array_equal(baseline[np.unique(panel.position)], traced)
        del baseline

        tokens = np.random.default_rng(0).integers(0, 100_000, size=(len(panel.ids), SEQ_LEN))
        t0 = time.perf_counter()
        kept = RepetitionFilter().keep(tokens)
        t_filter = time.perf_counter() - t0

    print(f"{n:,} instances in {FILES} files, {len(panel.ids):,} panel instances ({int(kept.sum()):,} kept by filter)")
    print(f"baseline: numpy's shuffle of arange(N, uint32):  {t_base:6.1f} s")
    print(f"first build (config -> panel, empty cache):      {t_first:6.1f} s  ({t_first / t_base:.2f} x baseline)")
    print(f"  of which: swap partners replayed {t_partners:.1f} s, {len(traced):,} positions traced {t_trace:.1f} s")
    print(f"cached build (partners read back and checked):   {t_cached:6.1f} s  ({t_cached / t_base:.2f} x baseline)")
    print(f"instance filter on the panel:                    {t_filter:6.1f} s")
    print(f"traced values equal numpy's shuffle there: {same}")
    print(f"peak memory: {peak_build:,.0f} MB during the builds, {peak_mb():,.0f} MB with the baseline")
    print(f"load average at end (1/5/15 min): {load()}")


if __name__ == "__main__":
    main()
