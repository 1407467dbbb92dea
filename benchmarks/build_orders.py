"""Benchmark: a panel of 16,300 instances read through GPT-NeoX index maps of 150 M sequences (target <= 60 s, <= 2 GB).

Generates, memory-mapped in a temporary folder, a Pythia-sized order: 20 M documents (a Megatron .idx; the .bin is a
sparse file of the right size, so token reads cost no disk I/O: the benchmark measures the maps and the reading code,
not the disk), doc/sample/shuffle maps of 150 M sequences of 2049 tokens. Then, in a fresh process (its peak RSS is
the build's alone), samples 143 cohorts x 100 + 2,000 never-trained controls (batch 1024, checkpoints every 1000
steps to 143000) and reads their tokens (cold: the first time is dominated by one random disk read per map row). Then,
with the pages cached, the same reads again and a baseline, the same ids read one at a time the way GPT-NeoX's
``GPT2Dataset.__getitem__`` does; their ratio is printed.

    python benchmarks/build_orders.py [--sequences 150000000] [--keep DIR]

``--suites N`` instead times the orders of issue 30 at N instances (default 1e8), each in a fresh process (its peak
RSS its own), from sparse token files (their sizes fix the numbering; the panel's instances read as zeros): OLMo-core's
composable loader with ``intra_source`` over three sources, and a one-folder Nanoset (a FineWeb ablation's layout).
Each panel is 100 cohorts x 10 x 10 instances + 1,000 controls. The blended Nanoset (three folders weighted 0.5, 0.3,
0.2) replays nanotron's helper by the compiled loop (memtui.orders.blend) at N too; where it was not built, by the
Python loop, ~1 us a sample and dataset, timed at ``--blend`` samples (default 1e6) to give the rate. Both Nanosets
spend most of their time in numpy's legacy ``RandomState.shuffle`` of the epoch (one random memory access a sample),
which the order needs bit for bit. Pico's order is the row number itself (no arithmetic to time); its cost is the
parquet row groups a panel touches. Levanter's order is computed at the panel's positions only (never built whole): a
three-cache mixture under the linear permutation, and one cache under Feistel era shuffling, from Levanter caches
whose token shards are unwritten (zeros).

    python benchmarks/build_orders.py --suites 100000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SEQ_LEN, BATCH = 2048, 1024


def generate(folder: Path, n_sequences: int, n_documents: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    need = n_sequences * SEQ_LEN + 1
    sizes = rng.integers(1, 2 * need // n_documents, size=n_documents).astype(np.int64)
    sizes[-1] += max(0, need - int(sizes.sum()))  # enough tokens for every sequence
    sizes = sizes.astype(np.int32)
    pointers = np.zeros(n_documents, dtype=np.int64)
    np.cumsum(sizes[:-1].astype(np.int64) * 2, out=pointers[1:])
    prefix = folder / "corpus_text_document"
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<QQ", n_documents, n_documents + 1))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(n_documents + 1, dtype=np.int64).tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        f.truncate(int(pointers[-1]) + 2 * int(sizes[-1]))  # sparse: no disk used
    maps = folder / "corpus_text_document_train_indexmap"
    doc_idx = rng.permutation(n_documents).astype(np.int32)
    np.save(f"{maps}_doc_idx.npy", doc_idx)
    starts = np.r_[0, np.cumsum(sizes[doc_idx].astype(np.int64))[:-1]]
    del doc_idx
    sample = np.lib.format.open_memmap(f"{maps}_sample_idx.npy", mode="w+", dtype=np.int32, shape=(n_sequences + 1, 2))
    for lo in range(0, n_sequences + 1, 10_000_000):
        t = np.arange(lo, min(n_sequences + 1, lo + 10_000_000), dtype=np.int64) * SEQ_LEN
        pos = np.searchsorted(starts, t, "right") - 1
        sample[lo : lo + len(t), 0] = pos
        sample[lo : lo + len(t), 1] = t - starts[pos]
    sample.flush()
    del sample, starts
    shuffle = np.lib.format.open_memmap(f"{maps}_shuffle_idx.npy", mode="w+", dtype=np.uint32, shape=(n_sequences,))
    perm = np.arange(n_sequences, dtype=np.uint32)
    rng.shuffle(perm)
    shuffle[:] = perm
    shuffle.flush()


def build(folder: Path, last: int) -> dict:
    from memtui.orders.neox import IndexedTokens, IndexMaps, NeoxOrder, sample_panel_instances

    t0 = time.perf_counter()
    order = NeoxOrder(
        IndexedTokens(folder / "corpus_text_document"),
        IndexMaps(folder / "corpus_text_document_train_indexmap"),
        BATCH,
        seq_len=SEQ_LEN,
    )
    panel = sample_panel_instances(
        order, steps=range(0, last + 1, 1000), per_cohort=100, n_controls=2000, seed=0, train_steps=last
    )
    elapsed = time.perf_counter() - t0
    t2 = time.perf_counter()
    order.read(panel.ids)  # the same reads again, with the pages now cached: comparable with the baseline below
    warm = time.perf_counter() - t2
    # baseline: GPT2Dataset.__getitem__, one sequence at a time, over the same memory-mapped files
    t1 = time.perf_counter()
    maps = folder / "corpus_text_document_train_indexmap"
    doc_idx = np.load(f"{maps}_doc_idx.npy", mmap_mode="r")
    sample_idx = np.load(f"{maps}_sample_idx.npy", mmap_mode="r")
    shuffle_idx = np.load(f"{maps}_shuffle_idx.npy", mmap_mode="r")
    data = order.tokens_source
    for i in panel.ids:
        j = shuffle_idx[i]
        (f, of), (la, ol) = sample_idx[j], sample_idx[j + 1]
        if f == la:
            seq = data.document(int(doc_idx[f]), int(of), int(ol - of + 1))
        else:
            parts = [data.document(int(doc_idx[f]), int(of))]
            parts += [data.document(int(doc_idx[k])) for k in range(f + 1, la)]
            parts.append(data.document(int(doc_idx[la]), 0, int(ol + 1)))
            seq = np.concatenate(parts)
        assert len(seq) == SEQ_LEN + 1
    baseline = time.perf_counter() - t1
    return {"instances": len(panel.ids), "seconds": elapsed, "warm_seconds": warm, "baseline_seconds": baseline}


def _grid(steps: int) -> list[int]:
    """100 cohorts over the first 90 % of the run's steps (controls come after)."""
    return sorted({int(s) for s in np.linspace(0, max(1, int(0.9 * steps)), 101)})


def build_suite(kind: str, folder: Path, n: int) -> dict:
    """One issue-30 order at n instances, from sparse files written here: config -> panel instances."""
    from memtui.orders.sampling import sample_order

    seq = 2048
    t0 = time.perf_counter()
    if kind == "composable":
        from memtui.orders.olmo import olmo_core_stage

        paths = []
        for k, share in enumerate((0.5, 0.3, 0.2)):
            path = folder / f"source{k}.npy"
            with open(path, "wb") as f:
                f.truncate(int(n * share) * seq * 4)
            paths.append(str(path))
        pkg = "olmo_core.data.composable"
        doc = f"{pkg}.numpy_document_source.NumpyDocumentSourceConfig"
        cfg = {"dataset": [{"_CLASS_": f"{pkg}.concat_and_chunk_instance_source.ConcatAndChunkInstanceSourceConfig",
                            "sequence_length": seq, "label": f"s{k}",
                            "sources": [{"_CLASS_": doc, "source_paths": [p], "dtype": "uint32"}]}
                           for k, p in enumerate(paths)],
               "data_loader": {"_CLASS_": f"{pkg}.data_loader.ComposableDataLoaderConfig", "seed": 7,
                               "global_batch_size": 1024 * seq, "shuffle_strategy": "intra_source"}}  # fmt: skip
        config = folder / "config.json"
        config.write_text(json.dumps(cfg))
        stage = olmo_core_stage(config)
        sampled = sample_order([stage], _grid(n // 1024), k=10, m=10, n_controls=1000, seed=0)
        count = len(sampled.ids)
    elif kind.startswith("levanter"):
        count = _levanter(kind, folder, n)
    else:
        import yaml

        from memtui.orders.nanoset import read_run, sample_nanoset

        folders = []
        for name, share in (("fineweb", 1.0),) if kind == "nanoset" else (("a", 0.5), ("b", 0.3), ("c", 0.2)):
            sub = folder / name
            sub.mkdir(exist_ok=True)
            with open(sub / "000_x.ds", "wb") as f:
                f.truncate(int(n * share) * (seq + 1) * 2)
            folders.append(str(sub))
        steps = n // 1024
        dataset = {"dataset_folder": folders, "token_size_in_bytes": 2}
        cfg = {
            "tokens": {
                "sequence_length": seq,
                "train_steps": steps,
                "micro_batch_size": 4,
                "batch_accumulation_per_replica": 4,
            },
            "parallelism": {"dp": 64},
            "data_stages": [{"name": "s", "data": {"dataset": dataset, "seed": 1234}}],
        }
        (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
        run = read_run(folder / "config.yaml")
        sampled, _ = sample_nanoset(run, _grid(steps), k=10, m=10, n_controls=1000)
        count = len(sampled.ids)
    return {"instances": count, "seconds": time.perf_counter() - t0}


def _sparse_cache(folder: Path, rows: int, seq: int) -> str:
    """A Levanter cache of ``rows`` rows with only its offsets written: the token data is unwritten zarr3 shards,
    read as zeros at no disk cost (the benchmark times the order and the reading code, not the disk)."""
    import tensorstore as ts

    for name, dtype, values in (("offsets", "int64", np.array([1, rows * seq])), ("data", "int32", None)):
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(folder / "input_ids" / name)},
                "metadata": {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2**27]}},
                             "codecs": [{"name": "sharding_indexed", "configuration": {
                                 "chunk_shape": [2**18], "codecs": [{"name": "blosc"}]}}]}}  # fmt: skip
        arr = ts.open(spec, dtype=dtype, shape=[2**54], create=True, delete_existing=True).result()
        if values is not None:
            arr[: len(values)].write(values).result()
    return str(folder)


def _levanter(kind: str, folder: Path, n: int) -> int:
    """``levanter``: three caches (0.5/0.3/0.2 of n rows) mixed, each shuffled by the linear permutation (Marin's old
    default); ``levanter-era``: one cache of n rows, Feistel era shuffling (eras of 2**20 rows). 4096-token rows."""
    from memtui.orders.levanter import LevanterConfig, Source, open_run, sample_levanter

    seq = 4096
    if kind == "levanter":
        sources = [Source(name, _sparse_cache(folder / name, int(n * share), seq), share)
                   for name, share in (("a", 0.5), ("b", 0.3), ("c", 0.2))]  # fmt: skip
        config = LevanterConfig(sources=sources, seq_len=seq, batch=1024, shuffle=True, mixture=True)
    else:
        source = Source("one", _sparse_cache(folder / "one", n, seq))
        config = LevanterConfig(sources=[source], seq_len=seq, batch=1024, shuffle=2**20, permutation="feistel")
    steps = n // 1024
    run = open_run(config, steps)
    sampled, _ = sample_levanter(run, _grid(steps), k=10, m=10, n_controls=1000)
    return len(sampled.ids)


def suites(n: int, blend_n: int) -> None:
    from memtui.orders.blend import compiled

    blended = n if compiled() else blend_n
    runs = (("composable", n), ("nanoset", n), ("nanoset-blended", blended), ("levanter", n), ("levanter-era", n))
    for kind, size in runs:
        folder = Path(tempfile.mkdtemp(prefix="memtui-suites-"))
        try:
            cmd = [sys.executable, __file__, "--suite-only", kind, "--folder", str(folder), "--sequences", str(size)]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(run.stderr)
            r = json.loads(run.stdout.strip().splitlines()[-1])
            load = os.getloadavg()[0]
            how = "" if kind != "nanoset-blended" else " (compiled)" if compiled() else " (Python loop)"
            print(f"{kind}{how}: panel of {r['instances']:,} instances from {size:,}: {r['seconds']:.1f} s "
                  f"({r['cpu_seconds']:.1f} s CPU, the process's whole life), peak RSS "
                  f"{r['peak_rss_mb']:.0f} MB (limits 60 s, 2048 MB; load average {load:.1f})")  # fmt: skip
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _watch_rss() -> dict[str, float]:
    """Peak private (RssAnon) and file-backed (RssFile: pages of the memory-mapped maps, which the kernel can drop and
    other processes share) resident memory, sampled every 10 ms: the peak RSS alone counts both."""
    import threading

    peaks = {"RssAnon": 0.0, "RssFile": 0.0}

    def watch() -> None:
        while True:
            with open("/proc/self/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in peaks:
                        peaks[key] = max(peaks[key], int(value.split()[0]) / 1024)
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()
    return peaks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=150_000_000)
    ap.add_argument("--documents", type=int, default=20_000_000)
    ap.add_argument("--keep", help="generate into (or reuse) this folder and keep it")
    ap.add_argument("--build-only", help=argparse.SUPPRESS)
    ap.add_argument("--last", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--suites", type=float, nargs="?", const=1e8, help="time issue 30's orders at this many instances")
    ap.add_argument("--blend", type=float, default=1e6, help="samples for the blended Nanoset (with --suites)")
    ap.add_argument("--suite-only", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.suite_only:
        result = build_suite(args.suite_only, Path(args.folder), args.sequences)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["peak_rss_mb"] = usage.ru_maxrss / 1024
        result["cpu_seconds"] = usage.ru_utime + usage.ru_stime  # the machine may be shared: CPU time is its own
        print(json.dumps(result))
        return
    if args.suites:
        suites(int(args.suites), int(args.blend))
        return
    if args.build_only:
        peaks = _watch_rss()
        result = build(Path(args.build_only), args.last)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result["peak_anon_mb"], result["peak_file_mb"] = peaks["RssAnon"], peaks["RssFile"]
        print(json.dumps(result))
        return
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="memtui-orders-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if not (folder / "corpus_text_document_train_indexmap_shuffle_idx.npy").exists():
            t = time.perf_counter()
            generate(folder, args.sequences, args.documents)
            os.sync()  # the build starts with the maps on disk, not with gigabytes of dirty pages being written back
            print(f"generated maps of {args.sequences:,} sequences in {time.perf_counter() - t:.1f} s ({folder})")
        # Pythia's schedule: checkpoints every 1000 steps to 143000 (fewer when asked for fewer sequences)
        last = min(143_000, (args.sequences // BATCH - 1000) // 1000 * 1000)
        cmd = [sys.executable, __file__, "--build-only", str(folder), "--last", str(last)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(run.stderr)
        r = json.loads(run.stdout.strip().splitlines()[-1])
        print(
            f"panel of {r['instances']:,} instances from {args.sequences:,} sequences: {r['seconds']:.2f} s, "
            f"peak RSS {r['peak_rss_mb']:.0f} MB, of which at most {r['peak_anon_mb']:.0f} MB private and "
            f"{r['peak_file_mb']:.0f} MB pages of the memory-mapped maps (limits 60 s, 2048 MB). Cached pages: "
            "vectorised reads "
            f"{r['warm_seconds']:.2f} s, one-at-a-time GPT2Dataset-style reads of the same ids "
            f"{r['baseline_seconds']:.2f} s (ratio {r['warm_seconds'] / r['baseline_seconds']:.2f})"
        )
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
