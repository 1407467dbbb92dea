"""`memtui demo --seeds`: a seed suite in miniature — one tiny GPT-NeoX trained from the same initialisation under two
data orders (seeds) of one corpus, each seed's panel extracted by its own checkpoints, and the pooled estimate.

Data. The single demo's corpus (:mod:`memtui.demo.train`) cut into documents of ``seq_len - 1`` tokens (repeated
windows dropped, so that a document's tokens name it), written as a Megatron indexed dataset by megatron-core's own
``IndexedDatasetBuilder``; each seed's order is megatron-core's ``GPTDataset`` with that ``random_seed``, which writes
its index maps (document, sample and shuffle index) itself. With one-sequence documents every sample is one whole
document plus the next one's first token as its last label, so an instance is trained whole, at one step, under every
seed (with a real corpus an instance can be split across two sequences under another seed: ``build`` then records
the step of its last piece, and the first in ``seed_first_steps``). The never-trained controls are windows held out
of the dataset: under any seed a sequence past the end of training is trained under the other.

Training. Each seed trains on the rows ``GPTDataset[i]`` (tokens and the last label, as the library reads them) in
position order with :func:`memtui.demo.train.train`: step ``s`` trains positions ``[(s-1)B, sB)``, the convention
:mod:`memtui.orders.neox` assumes; the loop reports every batch it feeds, returned here so that a test compares each
panel's treatment steps with what was actually trained when. Both seeds start from the same weights (the model seed
is ``DemoConfig.seed``); only the order differs. Panels: ``memtui build --order neox --seeds`` (the same instances in
both, each treated at its own seed's step), extracted in a process per seed like the size suite's models
(:mod:`memtui.demo.family`), then :func:`memtui.estimation.seeds.estimate_pooled` and ``report.md``.
"""

from __future__ import annotations

import importlib
import json
import shutil
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.demo.family import _child_log, _run_jobs, check_out_dir, model_name, n_parameters, panel_path
from memtui.demo.train import DemoConfig, _label_demo_panel, corpus_text, encode, train
from memtui.demo.workdir import check_keep, work_folder

STEM = "neox"  # the panels are OUT_DIR/neox-seedN.h5 (build --seeds names them STEM-NAME.h5)


def default_base() -> DemoConfig:
    """The single demo's model and learning rate, half its steps: 20 cohorts of 64 instances per seed."""
    return replace(DemoConfig(), steps=160, every=8, k=4, m=16, n_validation=256)


@dataclass
class SeedsConfig:
    """The training and panel settings both seeds share (``base``), and the data-order seeds (Megatron's
    ``random_seed`` of each ``GPTDataset``; the first is the home seed whose sequences the panel samples)."""

    base: DemoConfig = field(default_factory=default_base)
    seeds: tuple[int, ...] = (1, 2)
    parallel: int = 2  # seeds trained and extracted at once, one process and one torch thread each
    draws: int = 1000  # bootstrap draws of the pooled estimate

    @classmethod
    def small(cls) -> SeedsConfig:
        """The version the tests run (seconds of training per seed)."""
        base = replace(DemoConfig.small(), hidden=32, intermediate=128, steps=48, every=8, k=2, m=8, n_validation=64)
        return cls(base=base, draws=200)

    @property
    def names(self) -> list[str]:
        return [f"seed{s}" for s in self.seeds]

    def panels(self, out_dir: Path) -> list[Path]:
        return [panel_path(out_dir, f"{STEM}-{name}") for name in self.names]


@dataclass
class SeedsDemo:
    """What ``make_seeds`` made: the panels (one per seed), the report, the pooled estimate, and per seed what its
    training loop fed: ``fed[name] = (rows, steps)``, each row (seq_len tokens) with the step it was trained at."""

    panels: list[Path]
    report: Path
    names: list[str]
    pooled: object  # estimation.seeds.PooledResult
    fed: dict[str, tuple[np.ndarray, np.ndarray]]
    timings: dict[str, dict]


def megatron():
    """megatron-core's dataset classes (the library writes the demo's data order), or a one-line refusal."""
    try:
        with warnings.catch_warnings():  # megatron-core warns that Apex and Transformer Engine are absent
            warnings.simplefilter("ignore")
            gpt_dataset = importlib.import_module("megatron.core.datasets.gpt_dataset")
            indexed = importlib.import_module("megatron.core.datasets.indexed_dataset")
            split = importlib.import_module("megatron.core.datasets.utils").Split
            importlib.import_module("megatron.core.datasets.helpers_cpp")  # the sample index is built in C++
    except ImportError:
        raise MemtuiError(
            "`memtui demo --seeds` writes its data orders with megatron-core's own GPTDataset: "
            "pip install 'megatron-core>=0.16' (with its C++ dataset helpers)."
        ) from None
    return gpt_dataset, indexed.IndexedDataset, indexed.IndexedDatasetBuilder, split


def documents(cfg: DemoConfig, n: int) -> np.ndarray:
    """``n`` distinct documents of ``seq_len - 1`` tokens: consecutive windows of the corpus, a window whose text
    already occurred dropped (the corpus repeats some phrases), so that no two documents hold the same tokens."""
    width = cfg.seq_len - 1
    ids = encode(corpus_text(cfg.seed))
    windows = ids[: len(ids) // width * width].reshape(-1, width)
    _, first = np.unique(windows, axis=0, return_index=True)
    distinct = windows[np.sort(first)]
    if len(distinct) < n:
        raise MemtuiError(f"the corpus has {len(distinct)} distinct documents, fewer than the {n} asked for.")
    return distinct[:n]


def write_corpus(work: Path, cfg: DemoConfig) -> tuple[str, Path]:
    """The Megatron indexed dataset (``steps * batch + 1`` documents: one epoch of samples, the last document's
    first token only a label) and the held-out validation rows; (dataset prefix, validation .npy)."""
    _, _, builder_cls, _ = megatron()
    n_train = cfg.steps * cfg.batch
    docs = documents(cfg, n_train + 1 + cfg.n_validation + 1)
    prefix = str(work / "corpus_text_document")
    builder = builder_cls(prefix + ".bin", dtype=np.uint16)
    for doc in docs[: n_train + 1]:
        builder.add_document(doc, [len(doc)])
    builder.finalize(prefix + ".idx")
    held = docs[n_train + 1 :]
    validation = np.column_stack([held[:-1], held[1:, 0]])  # shaped like a training row: a document + one label
    np.save(work / "validation.npy", validation.astype(np.uint16))
    return prefix, work / "validation.npy"


class _Tokenizer:
    """What GPTDataset asks of a tokenizer: the byte vocabulary; pad -1 is no byte (the library masks pad labels)."""

    vocab_size, eod, pad = 256, 0, -1
    unique_identifiers = OrderedDict(cls="memtui-demo-seeds")


def write_order(prefix: str, seed: int, cfg: DemoConfig, cache: Path) -> tuple[str, np.ndarray]:
    """The library's order for ``seed``: GPTDataset writes its index maps into ``cache``; (maps prefix, the
    ``steps * batch`` training rows in position order as ``GPTDataset[i]`` reads them)."""
    gpt, indexed_cls, _, split = megatron()
    n = cfg.steps * cfg.batch
    config = gpt.GPTDatasetConfig(
        random_seed=seed, sequence_length=cfg.seq_len - 1, blend=([prefix], None), split="100,0,0",
        path_to_cache=str(cache), tokenizer=_Tokenizer(), reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False,
    )  # fmt: skip
    corpus = indexed_cls(prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = gpt.GPTDataset(corpus, prefix, np.arange(len(corpus), dtype=np.int32), n, split.train, config)
    items = (ds[i] for i in range(n))
    rows = np.stack([np.r_[item["tokens"].numpy(), item["labels"].numpy()[-1:]] for item in items])
    return str(cache / f"{ds.unique_description_hash}-GPTDataset-train"), rows.astype(np.uint16)


def seed_job(name: str, cfg_json: str, work: str, panel: str, keep: bool, log=None) -> dict:
    """One seed: train on its rows in order (recording what each step fed), save checkpoints, extract its panel."""
    from memtui.extract.units import work_dir
    from memtui.extract.worker import run

    cfg = DemoConfig(**json.loads(cfg_json))
    log = log or _child_log(name)
    work_p, panel_p = Path(work), Path(panel)
    ckpt = work_p / f"{name}-checkpoints"
    rows = np.load(work_p / f"{name}-rows.npy")
    batches: list[np.ndarray] = []
    steps: list[np.ndarray] = []

    def fed(step: int, batch: np.ndarray) -> None:
        batches.append(batch.astype(np.uint16))
        steps.append(np.full(len(batch), step, dtype=np.int64))

    t0 = time.time()
    train(cfg, rows, ckpt, log, fed=fed)
    t1 = time.time()
    try:
        run(panel_p, model=str(ckpt), checkpoints="all", device="cpu", dtype="float32", handle_signals=False, log=log)
    finally:
        shutil.rmtree(work_dir(panel_p), ignore_errors=True)
    t2 = time.time()
    _label(panel_p, cfg, work_p)
    if not keep:
        shutil.rmtree(ckpt, ignore_errors=True)
    log(f"trained in {t1 - t0:.0f} s, extracted in {t2 - t1:.0f} s")
    return {"name": name, "train_s": t1 - t0, "extract_s": t2 - t1, "fed": (np.concatenate(batches),
            np.concatenate(steps))}  # fmt: skip


def _label(panel: Path, cfg: DemoConfig, work: Path) -> None:
    import h5py

    from memtui.panel.hdf5 import text_attr

    model = model_name(n_parameters(cfg))
    _label_demo_panel(panel, f"{model}: GPT-NeoX {cfg.layers}x{cfg.hidden} trained from scratch for {cfg.steps} "
                      f"steps ({cfg.batch} x {cfg.seq_len} byte tokens) by memtui demo --seeds", work)  # fmt: skip
    with h5py.File(panel, "r+", libver="latest") as f:  # still this job's own new file (its seed: attribute seed)
        f.attrs["demo_config"] = text_attr(json.dumps(asdict(cfg)))


def make_seeds(
    out_dir: str | Path,
    cfg: SeedsConfig | None = None,
    *,
    workdir: str | Path | None = None,
    keep: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> SeedsDemo:
    """Write the corpus and every seed's order, build the seed suite, train and extract each seed, estimate pooled
    and write ``out_dir/report.md``."""
    cfg = cfg or SeedsConfig()
    out_dir = Path(out_dir)
    if len(cfg.seeds) < 2 or len(set(cfg.seeds)) != len(cfg.seeds):
        raise MemtuiError("a seed suite needs two distinct data-order seeds or more.")
    if cfg.base.steps % cfg.base.every:  # the panel's checkpoints are the ones train() saves
        raise MemtuiError(f"steps ({cfg.base.steps}) must be a multiple of the checkpoint interval ({cfg.base.every}).")
    check_out_dir(out_dir, [p.stem for p in cfg.panels(out_dir)], overwrite)
    megatron()  # refused before anything is written
    check_keep(workdir)  # before the output folder is made: a refusal leaves nothing behind
    out_dir.mkdir(exist_ok=True)
    work = work_folder(workdir)
    t0 = time.time()
    try:
        panels = _build(out_dir, work, cfg, overwrite, log)
        base = cfg.base
        log(f"training {model_name(n_parameters(base))} under {len(cfg.seeds)} data orders, {cfg.parallel} at a time")
        jobs = [(n, json.dumps(asdict(base)), str(work), str(p), keep) for n, p in zip(cfg.names, panels, strict=True)]
        results = {r["name"]: r for r in _run_jobs(jobs, cfg.parallel, log, target=seed_job)}
        log(f"all seeds extracted after {time.time() - t0:.0f} s; the pooled estimate")
        pooled = _pooled(panels, cfg.draws)
        timings = {n: {k: v for k, v in r.items() if k.endswith("_s")} for n, r in results.items()}
        from memtui.demo.seeds_report import write_report

        report = write_report(out_dir / "report.md", pooled, panels, cfg, timings, time.time() - t0)
        log(f"report written; the demo took {time.time() - t0:.0f} s")
    finally:
        if not keep and workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    fed = {n: results[n]["fed"] for n in cfg.names}
    return SeedsDemo(panels, report, cfg.names, pooled, fed, timings)


def _build(out_dir: Path, work: Path, cfg: SeedsConfig, overwrite: bool, log) -> list[Path]:
    """The corpus, each seed's maps and training rows (in ``work``), and the suite's panels (``build --seeds``)."""
    from memtui.extract.build import build_from_neox

    base = cfg.base
    prefix, validation = write_corpus(work, base)
    maps = []
    for seed, name in zip(cfg.seeds, cfg.names, strict=True):
        prefix_maps, rows = write_order(prefix, seed, base, work / "maps")
        np.save(work / f"{name}-rows.npy", rows)
        maps.append(prefix_maps)
    log(f"corpus of {base.steps * base.batch + 1} documents of {base.seq_len - 1} tokens; megatron-core's GPTDataset "
        f"ordered it under seeds {', '.join(map(str, cfg.seeds))}")  # fmt: skip
    steps = list(range(0, base.steps + 1, base.every))
    panels = build_from_neox(
        out_dir / f"{STEM}.h5", prefix, maps[0], batch_size=base.batch, seq_len=base.seq_len, steps=steps,
        k=base.k, m=base.m, controls="validation", validation=validation, n_controls=base.n_validation,
        seed=base.seed, seeds=maps[1:], seed_names=cfg.names, overwrite=overwrite,
        attrs={"tokenizer": "bytes (token id = UTF-8 byte)", "demo_seeds": json.dumps(list(cfg.seeds))},
    )  # fmt: skip
    if [Path(p) for p in panels] != cfg.panels(out_dir):
        raise MemtuiError(f"build wrote {', '.join(map(str, panels))}, not the demo's panels.")  # a broken promise
    for p in panels:  # the panels name the maps by their temporary folder: keep the file names
        _forget_workdir(Path(p), work)
    return [Path(p) for p in panels]


def _forget_workdir(panel: Path, work: Path) -> None:
    import h5py

    from memtui.panel.hdf5 import text_attr

    with h5py.File(panel, "r+", libver="latest") as f:  # the demo's own new file: no one else has it yet
        for attrs, key in (
            (f.attrs, "source"),
            (f.attrs, "order_notes"),
            (f["instances/provenance"].attrs, "seed_maps"),
        ):
            value = attrs.get(key, b"")
            value = value.decode() if isinstance(value, bytes) else str(value)
            attrs[key] = text_attr(value.replace(str(work), "<demo workdir>"))


def _pooled(panels: list[Path], draws: int):
    from memtui.estimation.seeds import estimate_pooled
    from memtui.estimation.settings import Settings
    from memtui.estimation.suite_load import load_suite

    suite = load_suite(panels)
    return estimate_pooled(suite.panels, Settings(metric="loglik", draws=draws), suite.names)
