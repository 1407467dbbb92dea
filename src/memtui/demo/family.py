"""`memtui demo --suite`: the paper's findings in miniature — a family of tiny GPT-NeoX models of different sizes,
trained on the same rows in the same order with Pythia's schedule shape, one panel, every model extracted.

Everything the single demo does (:mod:`memtui.demo.train`: corpus, byte tokenizer, memmap, panel, extraction),
once per size, then :mod:`memtui.demo.findings` writes ``report.md``. The panel is built once and copied per model, so
every model is scored on exactly the same instances and checkpoints (what a suite comparison needs).

Speed. On a shared 2-core machine most of the single demo's 13-22 minutes of extraction was not work but waiting:
torch's two intra-op threads spin on each other whenever another process holds a core (measured under a load of ~3:
one thread scores 31-34k tokens/s, two threads 5-17k), while checkpoint loading and committing cost ~40 ms per
checkpoint. So each model runs in its own process with one torch thread, ``parallel`` (2) at a time, largest first.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import h5py
import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.demo.train import DemoConfig, corpus_rows, make_model, train
from memtui.demo.workdir import check_keep, work_folder
from memtui.panel.hdf5 import text_attr

# (hidden, layers, heads): head size a multiple of 8, so GPT-NeoX's rotary quarter of it is even
FULL_SIZES = ((32, 2, 4), (64, 2, 4), (96, 3, 4), (128, 4, 4))  # 42k .. 859k parameters: 20x
SMALL_SIZES = ((16, 2, 2), (32, 2, 4), (64, 3, 4))  # 15k .. 183k: 12x


@dataclass
class SuiteConfig:
    """Training and panel settings shared by every model (``base``), and the model sizes."""

    base: DemoConfig = field(default_factory=lambda: suite_base(DemoConfig()))
    sizes: tuple[tuple[int, int, int], ...] = FULL_SIZES
    parallel: int = 2  # models trained and extracted at once, one process and one torch thread each
    draws: int = 1000  # bootstrap draws of the report's estimates

    @classmethod
    def small(cls) -> SuiteConfig:
        """The ~1-2 minute version for the tests."""
        return cls(base=suite_base(DemoConfig.small()), sizes=SMALL_SIZES, draws=200)

    def models(self) -> list[tuple[str, DemoConfig, int]]:
        """(name, config, parameter count) per size, smallest first."""
        out = []
        for hidden, layers, heads in self.sizes:
            cfg = replace(self.base, hidden=hidden, layers=layers, heads=heads, intermediate=4 * hidden)
            n = n_parameters(cfg)
            out.append((model_name(n), cfg, n))
        return sorted(out, key=lambda m: m[2])


def suite_base(cfg: DemoConfig) -> DemoConfig:
    """Pythia's schedule shape on the single demo's data: warm-up over 1% of the steps (Pythia: 1,430 of 143,000),
    then cosine decay to 10% of the peak; one peak rate (the single demo's 3e-3) for every size, so that only the
    size differs between the models."""
    return replace(cfg, schedule="cosine", min_lr_ratio=0.1, warmup=max(1, round(0.01 * cfg.steps)))


def n_parameters(cfg: DemoConfig) -> int:
    return sum(p.numel() for p in make_model(cfg).parameters())


def model_name(n: int) -> str:
    return f"neox-{n // 1000}k" if n >= 1000 else f"neox-{n}"


def panel_path(out_dir: Path, name: str) -> Path:
    return Path(out_dir) / f"{name}.h5"


_QUEUE: multiprocessing.Queue | None = None  # a model process's line back to the parent's log


def _init_child(q) -> None:
    global _QUEUE
    _QUEUE = q
    import torch

    torch.set_num_threads(1)  # see the module docstring: one spinning thread per process, never two


def _child_log(prefix: str) -> Callable[[str], None]:
    def log(msg: str) -> None:
        if msg.startswith("committed step"):
            return  # one line per scored checkpoint is progress enough
        if _QUEUE is not None:
            _QUEUE.put(f"{prefix}: {msg}")
        else:
            print(f"{prefix}: {msg}", flush=True)

    return log


def model_job(name: str, cfg_json: str, work: str, panel: str, keep: bool, log=None) -> dict:
    """Train one model on the suite's rows, save its checkpoints, extract them into its copy of the panel."""
    from memtui.extract.units import work_dir
    from memtui.extract.worker import run

    cfg = DemoConfig(**json.loads(cfg_json))
    log = log or _child_log(name)
    work_p, panel_p = Path(work), Path(panel)
    ckpt = work_p / name
    rows = np.fromfile(work_p / "train.bin", dtype=np.uint16).reshape(-1, cfg.seq_len)
    t0 = time.time()
    train(cfg, rows, ckpt, log)
    t1 = time.time()
    try:
        run(panel_p, model=str(ckpt), checkpoints="all", device="cpu", dtype="float32", handle_signals=False, log=log)
    finally:
        shutil.rmtree(work_dir(panel_p), ignore_errors=True)
    t2 = time.time()
    _label(panel_p, name, cfg, work_p, {"train_s": t1 - t0, "extract_s": t2 - t1})
    if not keep:
        shutil.rmtree(ckpt, ignore_errors=True)
    log(f"trained in {t1 - t0:.0f} s, extracted in {t2 - t1:.0f} s")
    return {"name": name, "train_s": t1 - t0, "extract_s": t2 - t1}


def _label(panel: Path, name: str, cfg: DemoConfig, work: Path, times: dict[str, float]) -> None:
    """The panel names its model and forgets the temporary folders (still this job's own new file)."""
    description = (
        f"{name}: memtui demo suite, GPT-NeoX {cfg.layers}x{cfg.hidden} trained from scratch for {cfg.steps} steps "
        f"({cfg.batch} x {cfg.seq_len} byte tokens, cosine schedule) on Unicode 3.2 character descriptions"
    )
    with h5py.File(panel, "r+", libver="latest") as f:
        f.attrs["model"] = text_attr(name)  # what `memtui compare` and the suite name the model by
        f.attrs["model_description"] = text_attr(description)
        f.attrs["demo_config"] = text_attr(json.dumps(asdict(cfg)))
        for key, seconds in times.items():
            f.attrs[f"demo_{key}"] = text_attr(f"{seconds:.1f}")
        source = f.attrs.get("source", b"")
        source = source.decode() if isinstance(source, bytes) else str(source)
        f.attrs["source"] = text_attr(source.replace(str(work), "<demo workdir>"))
        rev = f["checkpoints/revision"]
        rev[:] = np.array([Path(r.decode()).name.encode() for r in rev[()]], dtype="S256")
        if "checkpoints/model" in f:
            f["checkpoints/model"][:] = np.array([name.encode()] * len(rev), dtype=f["checkpoints/model"].dtype)


def check_out_dir(out_dir: Path, names: list[str], overwrite: bool) -> None:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise MemtuiError(f"{out_dir} is a file; the suite needs a folder: choose another path.")
    taken = [p.name for p in [*(panel_path(out_dir, n) for n in names), out_dir / "report.md"] if p.exists()]
    if taken and not overwrite:
        raise MemtuiError(f"{out_dir} already holds {', '.join(taken)}; pass --force to overwrite or choose another.")
    if not out_dir.parent.is_dir():
        raise MemtuiError(f"cannot write {out_dir}: {out_dir.parent} is not an existing folder.")


def make_suite(
    out_dir: str | Path,
    cfg: SuiteConfig | None = None,
    *,
    workdir: str | Path | None = None,
    keep: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Train, build, extract every model, write the report. Returns the path of ``report.md``."""
    from memtui.extract.build import build_from_memmap

    cfg = cfg or SuiteConfig()
    out_dir = Path(out_dir)
    models = cfg.models()
    names = [n for n, _, _ in models]
    check_out_dir(out_dir, names, overwrite)
    check_keep(workdir)  # before the output folder is made: a refusal leaves nothing behind
    out_dir.mkdir(exist_ok=True)
    work = work_folder(workdir)
    base = cfg.base
    t0 = time.time()
    timings: dict[str, dict] = {}
    try:
        train_rows, val_rows = corpus_rows(base)
        train_rows.astype(np.uint16).tofile(work / "train.bin")
        np.save(work / "validation.npy", val_rows.astype(np.uint16))
        steps = [0, *range(base.every, base.steps + 1, base.every)]
        shown = ", ".join(f"{n} ({p:,} parameters)" for n, _, p in models)
        log(f"suite of {len(models)} GPT-NeoX models: {shown}")
        log(f"each: {base.steps} steps of {base.batch} x {base.seq_len} tokens, the same rows in the same order; peak "
            f"lr {base.lr:g}, warm-up {base.warmup} steps, cosine to {base.min_lr_ratio:g} of the peak")  # fmt: skip
        common = work / "panel.h5"
        build_from_memmap(
            common, work / "train.bin", work / "validation.npy", steps=steps, batch_size=base.batch,
            macro=base.every, k=base.k, m=base.m, seq_len=base.seq_len, seed=base.seed, overwrite=True,
            attrs={"tokenizer": "bytes (token id = UTF-8 byte)", "suite": json.dumps(names)},
        )  # fmt: skip
        for name in names:
            atomic_write(panel_path(out_dir, name), lambda tmp: shutil.copyfile(common, tmp))
        log(f"one panel for all models ({len(steps)} checkpoints); training and extracting {cfg.parallel} at a time")
        jobs = [(n, json.dumps(asdict(c)), str(work), str(panel_path(out_dir, n)), keep) for n, c, _ in models]
        for result in _run_jobs(list(reversed(jobs)), cfg.parallel, log):  # largest first: the longest job
            timings[result["name"]] = result
        log(f"all models extracted after {time.time() - t0:.0f} s; estimating and writing the report")
        from memtui.demo.findings import write_report

        t1 = time.time()
        report = write_report(
            out_dir, [panel_path(out_dir, n) for n in names], config=cfg, timings=timings, draws=cfg.draws, log=log
        )
        log(f"report written in {time.time() - t1:.0f} s; the whole suite took {time.time() - t0:.0f} s")
    finally:
        if not keep and workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


def _run_jobs(jobs: list[tuple], parallel: int, log: Callable[[str], None], target: Callable[..., dict] = model_job):
    """Run ``target`` (``model_job``, or another module-level job taking the name first and ``log``) for every job,
    ``parallel`` processes at a time (spawned: a fork of a process that has started torch's threads can deadlock),
    their log lines forwarded to ``log`` as they come."""
    if parallel <= 1:
        for job in jobs:
            yield target(*job, log=lambda m, name=job[0]: None if m.startswith("committed") else log(f"{name}: {m}"))
        return
    ctx = multiprocessing.get_context("spawn")
    lines = ctx.Queue()

    def drain(timeout: float) -> None:
        with contextlib.suppress(queue.Empty):
            log(lines.get(timeout=timeout))
            while True:
                log(lines.get_nowait())

    env_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the children's OpenMP pool, before torch starts in them
    try:
        with ProcessPoolExecutor(parallel, mp_context=ctx, initializer=_init_child, initargs=(lines,)) as pool:
            pending = {pool.submit(target, *job) for job in jobs}
            while pending:
                drain(0.5)
                done, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
                for future in done:
                    drain(0)
                    yield future.result()
            drain(0.2)
    finally:
        if env_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env_threads
