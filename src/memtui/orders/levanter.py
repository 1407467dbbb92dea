"""Levanter's data order (Marin's runs): computed from the seed, no index files.

Transcribed from github.com/stanford-crfm/levanter at commit 9263f81e8b453241332c2c0b2d2001bfb2d2241c (2025-09-26):

- ``src/levanter/main/train_lm.py``: ``data_key = split(PRNGKey(trainer.seed), 4)[0]``, or ``PRNGKey(data_seed)``
  when the config sets ``data_seed``; ``config.data.train_set(Pos, trainer.batch_schedule, key=data_key)``; the loader
  reads global indices ``[offset(s), offset(s) + B(s))`` at (0-based) step s (``data/loader.py``, ``schedule.py``
  ``BatchSchedule.global_data_offset_by_step``: ``s·B`` for one batch size, the segments' sums for a schedule,
  memtui.orders.levanter_schedule): in memtui's convention (a panel step counts updates) position i is trained at
  step ``find_step_containing_offset(i) + 1`` (⌊i / B⌋ + 1 for one batch size). The checkpoints and
  HF exports are named ``step-{info.step}`` (``checkpoint.py``, ``compat/hf_checkpoints.py``) with ``StepInfo.step =
  state.step − 1`` (``callbacks/_core.py``): ``step-N`` holds N + 1 updates, memtui's step N + 1.
- ``src/levanter/data/text.py``: ``TokenSeqDataset`` row i is tokens ``[i·L, (i+1)·L)`` of the cache's
  ``input_ids`` (``data_size // L`` rows, L = the model's ``Pos``; inputs and labels both from those L tokens).
  ``SingleDatasetLMConfigBase.train_set``: ``shuffle=True`` -> ``ds.shuffle(key)`` (``PermutationDataset``), an int
  L -> ``ds.era_shuffle(L, key)``; ``permutation_type`` None means ``linear``. ``LMMixtureDatasetConfig.train_set``:
  ``mix_key, shuffle_key = split(data_key)``; each dataset of positive weight (``build_caches("train")`` skips the
  others), in the config's order, shuffled with the next key of ``key_iterator(shuffle_key)`` (``key, sub =
  split(key)``, yield sub); then ``MixtureDataset(key=mix_key, block_size=mixture_block_size)``
  (memtui.orders.levanter_mixture). ``train_weights`` as a list of stages ``(step, weights)``: each step turned into
  a sequence index by ``rescale_mixture_schedule_for_batch_schedule`` (the batch schedule's offset), a dataset loaded
  and keyed when some stage weights it above 0. A dataset's cache is ``{cache_dir}/train``.
- ``src/levanter/data/_prp.py``, ``permutation.py``: memtui.orders.levanter_perm; jax's PRNG: levanter_prng.
- ``src/levanter/store/jagged_array.py``: a cache's ``input_ids`` is a tensorstore zarr3 pair, ``offsets`` (its
  element 0 the number of documents n, element n the number of tokens) and ``data`` (the tokens); read with
  tensorstore, Levanter's own reader (``pip install tensorstore``).

Levanter's trainer sets ``jax_threefry_partitionable: True`` (``trainer.py`` ``DEFAULT_JAX_CONFIG``, since 2023), and
does not enable 64-bit jax. The permutation code read here is the same from de7fb7cf (2025-04-04, "fix dtypes of
feistel", when the linear map became ``a * x.astype(uint64)`` and so float64 under NumPy 2) to 9263f81; between
04a81ca2 (2025-01-29) and de7fb7cf it was ``a * x`` in int64, exact: ``--numpy-semantics 1`` gives that arithmetic
too. Earlier Levanter drew ``a`` and ``b`` with jax itself: not rebuilt. Weight-0 datasets are skipped by
``build_caches("train")`` since d9a0d57c (2025-01-28).

Weight stages (``--train-weights``) and batch schedules (``--batch-schedule``) are rebuilt, in the YAML forms
Levanter's config takes (memtui.orders.levanter_schedule). What memtui does not rebuild, and refuses or cannot
express: ``epochs``, simulated-epoch (``target_budget``/``experiment_budget``), ``max_train_batches`` and
``num_validation_sequences`` slicing, stop strategies other than ``restart`` (Levanter supports only it), and the
newer Marin ``LmDataConfig`` options (``shuffle_per_epoch``, ``shuffle_before_trainval_split``) written after this
commit.

**Repeats.** A mixture restarts a dataset it has used up (index k reads row ``shuffle(k mod n)``), and a linear
permutation evaluated in float64 (NumPy 2, more than ~10**8 rows) can map two indices to one row: an instance is
treated at its **first** exposure, its exposures below the run's last step are recorded, and a control is an instance
with no exposure by the panel's last step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.arrays import ConcatenatedRows
from memtui.orders.levanter_mixture import Mixture
from memtui.orders.levanter_perm import Shuffle
from memtui.orders.levanter_prng import prng_key, split
from memtui.orders.levanter_schedule import MAX_START, BatchSchedule, stage_offsets

_READS = 1024  # rows read at once


class LevanterCaches(ConcatenatedRows):
    """The caches' rows numbered cache after cache (a sampling ``Stage``'s files)."""

    ignored_tokens = 0

    def __init__(self, paths: list[str], labels: list[str], seq_len: int):
        if seq_len < 1:
            raise MemtuiError(f"--seq-len must be at least 1, not {seq_len}.")
        self.paths, self.labels, self.seq_len = tuple(paths), tuple(labels), seq_len
        self._data = [self._open(p) for p in paths]
        self.counts = np.array([size // seq_len for _, size in self._data], dtype=np.int64)
        for p, n in zip(paths, self.counts.tolist(), strict=True):
            if n < 1:
                raise MemtuiError(f"{clean(p, 200)}: holds fewer than {seq_len} tokens, no whole row.")
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])

    @staticmethod
    def _open(path: str):
        try:
            import tensorstore as ts
        except ImportError:
            raise MemtuiError("reading a Levanter cache needs tensorstore: pip install tensorstore.") from None
        base = path.rstrip("/") + "/input_ids/"
        try:
            offsets = ts.open({"driver": "zarr3", "kvstore": _kvstore(base + "offsets")}, read=True).result()
            data = ts.open({"driver": "zarr3", "kvstore": _kvstore(base + "data")}, read=True).result()
            docs = int(offsets[0].read().result())
            size = int(offsets[docs].read().result()) if docs > 0 else 0
        except (ValueError, OSError, IndexError) as exc:
            raise MemtuiError(
                f"{clean(path, 200)}: not a Levanter cache (input_ids/offsets and input_ids/data, zarr3): "
                f"{clean(exc, 120)}"
            ) from None
        if docs < 0 or size < 0:
            raise MemtuiError(f"{clean(path, 200)}: its offsets are damaged (negative counts).")
        if not np.issubdtype(np.dtype(data.dtype.numpy_dtype), np.integer):
            raise MemtuiError(f"{clean(path, 200)}: input_ids/data holds {clean(data.dtype, 20)}, not token ids.")
        return data, size

    def read(self, index: np.ndarray, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """The rows' tokens, (len(index), seq_len) int64: tensorstore's reads issued a chunk at a time, in parallel."""
        f, row = self.locate(index)
        out = np.empty((len(index), self.seq_len), dtype=np.int64)
        pairs = list(zip(f.tolist(), row.tolist(), strict=True))
        for lo in range(0, len(pairs), _READS):
            futures = [
                self._data[fi][0][r * self.seq_len : (r + 1) * self.seq_len].read() for fi, r in pairs[lo : lo + _READS]
            ]
            for i, fut in enumerate(futures):
                out[lo + i] = fut.result()
            if progress is not None:
                progress(min(lo + _READS, len(pairs)), len(pairs))
        return out


def _kvstore(path: str):
    if "://" in path and not path.startswith("file://"):
        return path  # tensorstore's URL form (gs://, s3://, …)
    return {"driver": "file", "path": path.removeprefix("file://")}


@dataclass(frozen=True)
class Source:
    name: str
    cache: str
    weight: float = 1.0


@dataclass
class LevanterConfig:
    """What of the run's config the order needs (see the module's docstring)."""

    sources: list[Source]
    seq_len: int
    batch: int  # train_batch_size (its first value when ``batch_schedule`` is set)
    seed: int = 0  # trainer.seed
    data_seed: int | None = None
    shuffle: bool | int = False  # True: whole; an int: era length; False: none
    permutation: str = "linear"  # permutation_type (None in the config means linear)
    block_size: int = 2048  # mixture_block_size
    mixture: bool = False  # an LMMixtureDatasetConfig (even with one dataset)
    prng: str = "partitionable"
    numpy_major: int = 2
    notes: list[str] = field(default_factory=list)
    # train_weights as stages: (step, {name: weight} in the config's order); None: one stage, the sources' weights
    weight_stages: list[tuple[int, dict[str, float]]] | None = None
    batch_schedule: BatchSchedule | None = None  # train_batch_size as a schedule; None: ``batch`` every step

    @property
    def schedule(self) -> BatchSchedule:
        return self.batch_schedule if self.batch_schedule is not None else BatchSchedule.constant(self.batch)

    def keyed(self, source: Source) -> bool:
        """Loaded for training and given a shuffle key: weighted above 0 in some stage (``build_caches``)."""
        if self.weight_stages is None:
            return source.weight > 0
        return any(w.get(source.name, 0) > 0 for _, w in self.weight_stages)

    def mixture_stages(self, names: list[str]) -> list[tuple[int, list[float], float | None]]:
        """The mixture's stages over the keyed datasets ``names``: (first sequence index, weights, their sum)."""
        if self.weight_stages is None:
            weights = {s.name: s.weight for s in self.sources}
            return [(0, [weights[n] for n in names], None)]
        starts = stage_offsets(self.weight_stages, self.schedule, self.block_size)
        return [
            (start, [w.get(n, 0.0) for n in names], sum(w.values()))
            for start, (_, w) in zip(starts, self.weight_stages, strict=True)
        ]


class LevanterOrder:
    """The run's order read at positions: the global instance (cache offset + row), first exposures, exposures."""

    def __init__(self, config: LevanterConfig, counts: np.ndarray, total: int):
        self.config, self.counts, self.total = config, np.asarray(counts, dtype=np.int64), int(total)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])
        mode = config.prng
        data_key = (
            prng_key(config.data_seed) if config.data_seed is not None else split(prng_key(config.seed), 4, mode)[0]
        )
        era = None if config.shuffle is True else (int(config.shuffle) if config.shuffle else 0)
        if not config.mixture:
            self.mixture = None
            self.shuffles = [Shuffle(int(self.counts[0]), data_key, config.permutation, era, mode, config.numpy_major)]
            self.epoch = int(self.counts[0])  # the dataset ends: positions beyond it do not exist
            return
        mix_key, key = split(data_key, 2, mode)
        self.shuffles = []
        for n, source in zip(self.counts.tolist(), config.sources, strict=True):
            sub = key
            if config.shuffle and config.keyed(source):  # build_caches("train") skips the others: no key
                key, sub = split(key, 2, mode)
            self.shuffles.append(Shuffle(n, sub, config.permutation, era, mode, config.numpy_major, True))
        self.weighted = [i for i, s in enumerate(config.sources) if config.keyed(s)]
        stages = config.mixture_stages([config.sources[i].name for i in self.weighted])
        self.mixture = Mixture(stages, config.block_size, mix_key, mode)
        self.epoch = max(self.total, 1)

    def _locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        positions = np.asarray(positions, dtype=np.int64)
        if self.mixture is None:
            return np.zeros_like(positions), positions
        d, k = self.mixture.locate(positions)
        return np.asarray(self.weighted, dtype=np.int64)[d], k

    def instance(self, positions: np.ndarray) -> np.ndarray:
        d, k = self._locate(positions)
        out = np.empty_like(d)
        for di in np.unique(d).tolist():
            at = d == di
            out[at] = self.offsets[di] + self.shuffles[di].rows(k[at] % self.counts[di])
        return out

    def _exposed(self, d: int, q: int) -> tuple[int, int]:
        """(first position below ``total`` of dataset d's shuffled index q, or -1; how many positions hold it)."""
        n = int(self.counts[d])
        if self.mixture is None:
            return (q, 1) if q < min(self.total, n) else (-1, 0)
        if d not in self.weighted:
            return -1, 0
        return self.mixture.exposures(self.weighted.index(d), q, n, self.total)

    def exposures(self, instances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first position below ``total``, or -1; the number of positions below ``total``) of each instance."""
        instances = np.asarray(instances, dtype=np.int64)
        first = np.full(len(instances), -1, dtype=np.int64)
        count = np.zeros(len(instances), dtype=np.int64)
        d_of = np.searchsorted(self.offsets, instances, side="right") - 1
        for i, (inst, d) in enumerate(zip(instances.tolist(), d_of.tolist(), strict=True)):
            for q in self.shuffles[d].preimages(inst - int(self.offsets[d])).tolist():
                f, c = self._exposed(d, q)
                count[i] += c
                if f >= 0 and (first[i] < 0 or f < first[i]):
                    first[i] = f
        return first, count

    def never_in_order(self) -> int:
        """Rows no position of the run reaches (a single dataset cut by the run's last step)."""
        if self.mixture is None:
            return max(0, int(self.counts[0]) - self.total)
        return 0


def checkpoint_name(step: int) -> str:
    """Levanter's name for the checkpoint after ``step`` updates: ``step-{step − 1}`` (``StepInfo.step`` is
    ``state.step − 1``); it saves none before the first update."""
    return "init (Levanter saves none)" if step == 0 else f"step-{step - 1}"


@dataclass
class LevanterRun:
    files: LevanterCaches
    order: LevanterOrder
    batch: int  # the first step's batch size
    train_steps: int
    notes: list[str]
    schedule: BatchSchedule | None = None  # None: ``batch`` every step

    @property
    def batches(self) -> BatchSchedule:
        return self.schedule if self.schedule is not None else BatchSchedule.constant(self.batch)


def open_run(config: LevanterConfig, train_steps: int | None) -> LevanterRun:
    """The caches and the order; ``train_steps``: the run's last step (a single dataset: as many as it holds)."""
    if not config.sources:
        raise MemtuiError("--order levanter needs --caches NAME=DIR (one per dataset, in the config's order).")
    if config.batch < 1:
        raise MemtuiError(f"--batch-size must be at least 1, not {config.batch}.")
    if not config.mixture and len(config.sources) > 1:
        raise MemtuiError("a single-dataset config (--single-dataset) reads one cache; give one --caches entry.")
    if not config.mixture and config.weight_stages is not None:
        raise MemtuiError("a single-dataset config has no train_weights: drop --train-weights.")
    if train_steps is None and config.mixture:
        raise MemtuiError("a mixture never runs out: give the run's last step (--train-steps).")
    if train_steps is not None and not 1 <= train_steps <= MAX_START:
        raise MemtuiError(f"--train-steps must be a whole number from 1 to {MAX_START}, not {train_steps}.")
    skipped = [s.name for s in config.sources if not config.keyed(s)]
    if skipped:  # as Levanter: a dataset of weight 0 in every stage is not loaded for training, nor keyed
        config = replace(config, sources=[s for s in config.sources if config.keyed(s)])
        config.notes = [*config.notes, f"weight 0, not read: {', '.join(skipped)}"[:500]]
    schedule = config.schedule
    if config.mixture:
        config.mixture_stages([s.name for s in config.sources])  # refuse stages Levanter refuses, before reading
    files = LevanterCaches([s.cache for s in config.sources], [s.name for s in config.sources], config.seq_len)
    held = schedule.steps_within(files.n_instances) if not config.mixture else None
    steps = held if train_steps is None else (train_steps if held is None else min(train_steps, held))
    if steps < 1:
        raise MemtuiError(f"the caches hold fewer rows ({files.n_instances}) than one batch of {config.batch}.")
    order = LevanterOrder(config, files.counts, int(schedule.offset(np.array([steps]))[0]))
    per_step = f"{config.batch} a step" if schedule.constant_batch else f"batch sizes {schedule.describe()}"
    notes = [f"{files.n_instances:,} rows of {config.seq_len} tokens in {len(files.paths)} cache(s), {per_step}"[:500]]
    if config.weight_stages is not None and len(config.weight_stages) > 1:
        notes.append(f"{len(config.weight_stages)} weight stages, from steps "
                     f"{', '.join(str(st + 1) for st, _ in config.weight_stages)}"[:500])  # fmt: skip
    if any(not s.exact for s in order.shuffles):
        notes.append("linear permutation in float64 (NumPy 2) is inexact here: some rows repeat, others never come")
    notes += _unplaced(config, order)
    return LevanterRun(files, order, config.batch, steps, notes + config.notes, config.batch_schedule)


def _unplaced(config: LevanterConfig, order: LevanterOrder) -> list[str]:
    """Datasets a stage weighs above 0 that get no place in its blocks (Levanter warns "Recommend increasing block
    size"): that stage never serves them."""
    if order.mixture is None:
        return []
    names = [config.sources[i].name for i in order.weighted]
    out = []
    stages = zip(config.mixture_stages(names), order.mixture.stage_counts, strict=True)
    for s, ((_, weights, _), counts) in enumerate(stages):
        lost = [n for n, w, c in zip(names, weights, counts.tolist(), strict=True) if w > 0 and c == 0]
        if lost:
            out.append(f"weight stage {s + 1}: no place in a block of {config.block_size} for {', '.join(lost)}"[:500])
    return out


def _treated_positions(rng, batches: BatchSchedule, cohorts, k: int, m: int) -> np.ndarray:
    """Per cohort, k of its steps and m rows of each step's batch: their positions (memtui step s is Levanter's
    0-based step s − 1, reading global indices from ``global_data_offset_by_step(s − 1)``)."""
    pos = []
    for a, b, _ in cohorts:
        chosen = a + np.sort(rng.choice(b - a + 1, size=min(k, b - a + 1), replace=False))
        for s in chosen.tolist():
            size = int(batches.batch_at(s - 1))
            rows = np.sort(rng.choice(size, size=min(m, size), replace=False))
            pos.append(int(batches.offset(s - 1)) + rows)
    return np.concatenate(pos).astype(np.int64) if pos else np.zeros(0, dtype=np.int64)


def sample_levanter(run: LevanterRun, steps, *, k: int, m: int, n_controls: int, seed: int = 0):
    """A panel: per cohort k steps x m instances, each treated at its first exposure, and controls with no exposure
    by the panel's last step. Returns the sampled order and each instance's exposures and sampled position."""
    from memtui.orders.sampling import NEVER, SampledOrder, Stage, _cohorts, _read

    steps = sorted({int(s) for s in steps})
    stage = Stage(name="levanter", files=run.files, indices=lambda: None, batch=run.batch)
    rng = np.random.default_rng([seed, 0])
    order, batches = run.order, run.batches
    last = min(max(steps), run.train_steps)
    pos = _treated_positions(rng, batches, _cohorts(steps, 0, run.train_steps), k, m)
    inst, keep = np.unique(order.instance(pos), return_index=True)  # a repeat drawn twice is one instance
    pos = pos[keep]
    first, exposures = order.exposures(inst)
    first_step = batches.step_of(first) + 1
    treat = np.array([min(c for c in steps if c >= f) for f in first_step.tolist()], dtype=np.int64)
    counts: dict[str, int] = {}
    parts = [_read(stage, 0, first, treat, inst, counts, "treated", None)]
    extra = [exposures, pos]
    if n_controls:
        cpos, cinst, cexp, dropped = _controls(order, rng, n_controls, int(batches.offset(last)))
        counts["levanter/controls_exposed_earlier"] = dropped
        parts.append(_read(stage, 0, cpos, np.full(len(cpos), NEVER), cinst, counts, "controls", None))
        extra = [np.concatenate([exposures, cexp]), np.concatenate([pos, cpos])]
    merged = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    if not (merged["treatment"] != NEVER).any():
        raise MemtuiError("no training instance falls into the panel's checkpoint steps; check --steps.")
    sampled = SampledOrder(
        ids=merged["ids"], treatment=merged["treatment"], tokens=merged["tokens"],
        stage=merged["stage"].astype(np.int16), file=merged["file"].astype(np.int32), offset=merged["offset"],
        position=merged["position"], stage_names=["levanter"], files=[list(run.files.paths)], steps=steps,
        revisions=[checkpoint_name(s) for s in steps], counts=counts, notes=list(run.notes),
    )  # fmt: skip
    sampled.source = np.array([run.files.labels[f] for f in sampled.file.tolist()])
    return sampled, {"exposures": extra[0], "sampled_position": extra[1]}


def _controls(order: LevanterOrder, rng, n_controls: int, lo: int):
    """Controls: instances at positions after the panel's last step whose first exposure is after it too."""
    hi = order.epoch if order.mixture is None else max(order.epoch, lo + 64 * n_controls)
    if lo >= hi:
        raise MemtuiError(
            "every row is trained by the panel's last step: no never-trained control is left in the order; end the "
            "panel earlier (--steps)."
        )
    cpos = np.sort(rng.choice(hi - lo, size=min(n_controls, hi - lo), replace=False)) + lo
    cinst, keep = np.unique(order.instance(cpos), return_index=True)
    cpos = cpos[keep]
    first, count = order.exposures(cinst)
    fresh = (first < 0) | (first >= lo)  # no exposure before the panel's last step
    return cpos[fresh], cinst[fresh], count[fresh], int((~fresh).sum())
