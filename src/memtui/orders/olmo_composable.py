"""OLMo-core's composable data loader (``olmo_core.data.composable``): several instance sources, one of three
shuffle strategies, and the tail that fills no batch dropped.

Read from ai2-olmo-core 3.0.0 (``olmo_core/data/composable/data_loader.py``: ``ComposableDataLoader``,
``_build_global_indices``, ``get_local_indices``, ``instances_in_epoch``; ``utils.py``: ``build_global_indices``;
``concat_and_chunk_instance_source.py``; ``numpy_document_source.py``). A run's ``config.json`` holds ``dataset``, a
list of instance source configs, and ``data_loader`` (``ComposableDataLoaderConfig``: ``seed``,
``global_batch_size`` in tokens, ``shuffle``, ``shuffle_strategy``, ``sources_per_epoch``, ``instance_filter_config``).

- **Instances.** Each source memtui reads is a ``ConcatAndChunkInstanceSource`` over ``NumpyDocumentSource`` token
  files, one file per token source (``source_group_size`` 1): a file holds ``(tokens // M) · (M / L)`` instances of
  L tokens (M: the source's ``max_sequence_length``, default L), numbered file after file; ``source_permutation_seed``
  first reorders a config's files by ``random.Random(seed).shuffle``. The epoch's sources (``sources_per_epoch``: the
  group ``(epoch − 1) mod groups``) are numbered one after another.
- **Strategies** (``ShuffleStrategy``), each a PCG64 shuffle of chunks of M / L instances (``build_global_indices``):
  ``inter_source`` (the default): the epoch's instances as one source, seed + epoch; ``intra_source``: source i
  shuffled alone with seed + epoch + i, the sources concatenated in order (a curriculum); ``interleaved_source``:
  every source cut to the smallest one's size S, source i shuffled alone with seed + epoch + i, and the order takes
  one instance of each source in turn (position p: source p mod k). ``shuffle: false``: the instances in order.
- **The dropped tail.** ``get_local_indices`` keeps ``B · ⌊total / B⌋`` positions: the last ``total mod B`` instances
  of the order fill no batch and are never trained. Interleaving also leaves out every instance of a larger source
  beyond S. Neither is ever sampled (not as treated, not as a control): their counts are recorded in the panel
  (``never_trained`` and ``order_notes``, shown by ``memtui info``).

Any other source (mixing, sampling, packing, sliced, random) or strategy is refused in one line: its instances are
resampled or repacked, which this reading does not follow. tests/orders/test_olmo_composable.py checks every
strategy, two seeds each, against the library's own loader batch by batch, through ``memtui build``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.globalindices import ShuffledOrder
from memtui.orders.repetition import RepetitionFilter
from memtui.orders.tokenfiles import TOKEN_DTYPES, TokenFiles, remap, token_dtype

STRATEGIES = ("inter_source", "intra_source", "interleaved_source")
_CHUNKED = "ConcatAndChunkInstanceSourceConfig"
_NUMPY = "NumpyDocumentSourceConfig"


def is_composable(cfg: dict) -> bool:
    """Whether a config.json is a composable run's: a list of sources, or the composable loader named."""
    dl = cfg.get("data_loader")
    kind = str(dl.get("_CLASS_", "")) if isinstance(dl, dict) else ""
    return isinstance(cfg.get("dataset"), list) or kind.endswith("ComposableDataLoaderConfig")


@dataclass(frozen=True)
class Source:
    """One ``ConcatAndChunkInstanceSource``: its token files in the library's order, its label."""

    label: str
    paths: tuple[str, ...]
    dtype: np.dtype
    seq_len: int
    max_len: int


def _whole(value, what: str, where, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 2**53:
        raise MemtuiError(
            f"{where}: {what} must be a whole number from {minimum} to 2**53, not {clean(repr(value), 60)}."
        )
    return value


def strategy_of(dl: dict, where) -> str | None:
    """The loader's shuffle strategy (None: not shuffled); an unknown one is refused, never taken for another."""
    shuffle = dl.get("shuffle", True)
    if not isinstance(shuffle, bool):
        raise MemtuiError(f"{where}: data_loader.shuffle must be true or false, not {clean(repr(shuffle), 40)}.")
    strategy = dl.get("shuffle_strategy")
    if not shuffle:
        if strategy is not None:
            raise MemtuiError(f"{where}: data_loader.shuffle_strategy is set but shuffle is false (OLMo-core refuses).")
        return None
    if strategy is None:
        return "inter_source"  # ComposableDataLoader's default when shuffling
    if strategy not in STRATEGIES:
        raise MemtuiError(
            f"{where}: data_loader.shuffle_strategy {clean(repr(strategy), 60)} is not one memtui knows "
            f"({', '.join(STRATEGIES)}); its order cannot be rebuilt."
        )
    return strategy


def _dtype(doc: dict, where) -> np.dtype:
    """``NumpyDocumentSourceConfigBase.get_dtype``: the config's dtype, else the smallest that holds the vocabulary."""
    if doc.get("dtype") is not None:
        return token_dtype(doc["dtype"], where)
    tokenizer = doc.get("tokenizer")
    vocab = tokenizer.get("vocab_size") if isinstance(tokenizer, dict) else None
    vocab = _whole(vocab, "tokenizer.vocab_size (needed when dtype is not given)", where)
    return next(np.dtype(d) for d in TOKEN_DTYPES if vocab - 1 <= np.iinfo(d).max)


def _document_paths(doc, where) -> tuple[list[str], np.dtype]:
    """One ``NumpyDocumentSourceConfig``'s token files in the order the library numbers them."""
    if not isinstance(doc, dict) or not str(doc.get("_CLASS_", _NUMPY)).endswith(_NUMPY):
        kind = doc.get("_CLASS_") if isinstance(doc, dict) else type(doc).__name__
        raise MemtuiError(f"{where}: token source {clean(kind, 80)} is not supported (only NumpyDocumentSource files).")
    paths = doc.get("source_paths")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise MemtuiError(f"{where}: source_paths must be a non-empty list of token file paths.")
    if any("\x00" in p or "\n" in p for p in paths):
        raise MemtuiError(f"{where}: source_paths holds a path with a NUL byte or a line break.")
    if doc.get("expand_glob") is not False and any("*" in p for p in paths):
        raise MemtuiError(f"{where}: source_paths holds a glob pattern; list the files it matched instead.")
    if doc.get("source_group_size", 1) != 1:
        raise MemtuiError(
            f"{where}: source_group_size {clean(repr(doc.get('source_group_size')), 20)} joins files into one token "
            "source (instances then span files); memtui reads source_group_size 1 only."
        )
    if doc.get("label_mask_paths"):
        raise MemtuiError(f"{where}: label_mask_paths mask tokens out of the loss; memtui does not read them yet.")
    seed = doc.get("source_permutation_seed")
    if seed is not None:
        order = list(range(len(paths)))
        random.Random(_whole(seed, "source_permutation_seed", where, 0)).shuffle(order)
        paths = [paths[i] for i in order]
    return paths, _dtype(doc, where)


def read_sources(dataset, where) -> list[Source]:
    """The run's instance sources (``dataset``), each a ConcatAndChunkInstanceSource over numpy token files."""
    if not isinstance(dataset, list) or not dataset:
        raise MemtuiError(f"{where}: dataset must be a non-empty list of instance sources.")
    out = []
    for i, src in enumerate(dataset):
        here = f"{where}: dataset[{i}]"
        kind = str(src.get("_CLASS_", "")) if isinstance(src, dict) else type(src).__name__
        if not isinstance(src, dict) or not kind.endswith(_CHUNKED):
            raise MemtuiError(
                f"{here}: {clean(kind or 'a source without _CLASS_', 80).rsplit('.', 1)[-1]} is not supported; "
                "memtui reads ConcatAndChunkInstanceSource only (mixing, sampling and packing resample instances)."
            )
        seq_len = _whole(src.get("sequence_length"), "sequence_length", here)
        max_len = seq_len if src.get("max_sequence_length") is None else src["max_sequence_length"]
        max_len = _whole(max_len, "max_sequence_length", here)
        if max_len % seq_len:
            raise MemtuiError(f"{here}: max_sequence_length {max_len} is not a multiple of {seq_len}.")
        docs = src.get("sources")
        if not isinstance(docs, list) or not docs:
            raise MemtuiError(f"{here}: sources must be a non-empty list of token sources.")
        read = [_document_paths(d, f"{here}.sources[{k}]") for k, d in enumerate(docs)]
        dtypes = {d for _, d in read}
        if len(dtypes) > 1:
            raise MemtuiError(f"{here}: its token sources differ in dtype ({', '.join(sorted(map(str, dtypes)))}).")
        label = src.get("label") if isinstance(src.get("label"), str) and src.get("label") else f"source{i}"
        out.append(Source(label, tuple(p for ps, _ in read for p in ps), dtypes.pop(), seq_len, max_len))
    first = out[0]
    for s in out[1:]:
        if (s.seq_len, s.max_len) != (first.seq_len, first.max_len):
            raise MemtuiError(f"{where}: all sources must share sequence_length and max_sequence_length (OLMo-core).")
        if s.dtype != first.dtype:
            raise MemtuiError(f"{where}: the sources differ in token dtype ({first.dtype}, {s.dtype}).")
    return out


def epoch_sources(sources: list[Source], per_epoch, epoch: int, where) -> list[Source]:
    """``sources_for_epoch``: with ``sources_per_epoch`` k, epoch e trains group (e − 1) mod (n / k)."""
    if per_epoch is None or per_epoch == -1:
        return sources
    per_epoch = _whole(per_epoch, "data_loader.sources_per_epoch (-1 or positive)", where)
    if len(sources) % per_epoch:
        raise MemtuiError(f"{where}: sources_per_epoch {per_epoch} does not divide the {len(sources)} sources.")
    start = ((epoch - 1) % (len(sources) // per_epoch)) * per_epoch
    return sources[start : start + per_epoch]


class SourceOrder:
    """The composable loader's global indices read at positions (``order[positions]``, uint32), never built whole.

    ``counts``: instances per source (file order within each, sources one after another); ``length``: the positions
    trained (whole batches). ``np.asarray(order)`` builds the whole array the library's way."""

    dtype = np.dtype(np.uint32)
    ndim = 1

    def __init__(self, counts: Sequence[int], strategy: str | None, seed: int, chunk: int, batch: int, cache=None):
        self.counts = np.asarray(counts, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])
        self.strategy, self.chunk = strategy, chunk
        k = len(self.counts)
        if strategy == "interleaved_source":
            self.size = int(self.counts.min())
            self.total = k * self.size
        else:
            self.total = int(self.counts.sum())
        self.length = batch * (self.total // batch)  # get_local_indices: the tail that fills no batch is dropped
        if strategy == "inter_source":
            self.parts = [ShuffledOrder(self.total // chunk, seed, chunk, cache=cache)]
        elif strategy == "intra_source":
            self.parts = [ShuffledOrder(int(n) // chunk, seed + i, chunk, cache=cache) for i, n in enumerate(counts)]
        elif strategy == "interleaved_source":
            self.parts = [ShuffledOrder(self.size // chunk, seed + i, chunk, cache=cache) for i in range(k)]
        else:
            self.parts = []

    def __len__(self) -> int:
        return self.length

    @property
    def shape(self) -> tuple[int]:
        return (self.length,)

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.length))
        pos = np.atleast_1d(np.asarray(key)).astype(np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.length):
            raise IndexError(f"positions must lie in 0 .. {self.length - 1}")
        if self.strategy is None:
            return pos.astype(np.uint32)
        if self.strategy == "inter_source":
            return self.parts[0][pos] if pos.size else np.zeros(0, np.uint32)
        if self.strategy == "intra_source":
            source = np.searchsorted(self.offsets, pos, side="right") - 1
            local = pos - self.offsets[source]
        else:
            k = len(self.counts)
            source, local = pos % k, pos // k
        out = np.empty(len(pos), dtype=np.int64)
        for s in np.unique(source):
            rows = source == s
            out[rows] = self.parts[s][local[rows]].astype(np.int64) + self.offsets[s]
        return out.astype(np.uint32)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if self.strategy is None:
            full = np.arange(self.total, dtype=np.uint32)
        elif self.strategy == "inter_source":
            full = np.asarray(self.parts[0])
        elif self.strategy == "intra_source":
            pairs = zip(self.parts, self.offsets, strict=False)
            full = np.concatenate([np.asarray(p) + np.uint32(o) for p, o in pairs])
        else:
            full = np.empty(self.total, dtype=np.uint32)
            for i, (p, o) in enumerate(zip(self.parts, self.offsets, strict=False)):
                full[i :: len(self.parts)] = np.asarray(p) + np.uint32(o)
        full = full[: self.length]
        return full if dtype is None else full.astype(dtype)


@dataclass
class Composed:
    """What :func:`memtui.orders.olmo.olmo_core_stage` needs from a composable run's config."""

    files: TokenFiles
    order: SourceOrder
    batch: int
    tokens: int  # per step
    seed: int
    instance_filter: RepetitionFilter | None
    notes: list[str]
    attrs: dict[str, str]


def composable(cfg: dict, path: Path, *, epoch: int, data_root, cache=None) -> Composed:
    """A composable run's token files, order and notes for ``epoch``, from its config.json ``cfg``."""
    dl = cfg.get("data_loader")
    if not isinstance(dl, dict):
        raise MemtuiError(f"{path}: an OLMo-core config needs a 'data_loader' section.")
    strategy = strategy_of(dl, path)
    sources = epoch_sources(read_sources(cfg.get("dataset"), path), dl.get("sources_per_epoch"), epoch, path)
    first = sources[0]
    tokens = _whole(dl.get("global_batch_size"), "data_loader.global_batch_size", path)
    if tokens % first.seq_len:
        raise MemtuiError(
            f"{path}: data_loader.global_batch_size {tokens} tokens is not a whole number of "
            f"{first.seq_len}-token instances."
        )
    if dl.get("seed") is None:
        raise MemtuiError(f"{path}: data_loader.seed is missing; the order cannot be rebuilt without it.")
    seed = _whole(dl["seed"], "data_loader.seed", path, minimum=0)
    chunk = first.max_len // first.seq_len
    paths = [p for s in sources for p in s.paths]
    labels = [s.label for s in sources for _ in s.paths]
    files = TokenFiles.open(remap(paths, data_root), first.dtype, first.seq_len, block=chunk, labels=labels)
    ends = np.cumsum([len(s.paths) for s in sources])
    counts = [int(files.counts[a:b].sum()) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    if strategy == "interleaved_source" and min(counts) == 0:
        empty = sources[counts.index(0)].label
        raise MemtuiError(f"{path}: source {clean(empty, 60)} holds no whole instance; interleaving trains nothing.")
    batch = tokens // first.seq_len
    order = SourceOrder(counts, strategy, seed + epoch, chunk, batch, cache=cache)
    return Composed(files, order, batch, tokens, seed, _filter(dl, path), *_notes(sources, counts, order, files, seed))


def _filter(dl: dict, path) -> RepetitionFilter | None:
    return RepetitionFilter.from_config(dl.get("instance_filter_config"), f"{path}: data_loader")


def _notes(sources, counts, order: SourceOrder, files: TokenFiles, seed: int) -> tuple[list[str], dict[str, str]]:
    """The order's notes and the panel attributes that say what was never trained."""
    mix = ", ".join(f"{clean(s.label, 40)} {n:,}" for s, n in zip(sources, counts, strict=True))
    strategy = order.strategy or "no shuffle"
    notes = [f"composable loader, {strategy}, seed {seed}: {order.total:,} instances in the order ({mix}), "
             f"{order.length:,} of them in whole batches"]  # fmt: skip
    tail, unused = order.total - order.length, files.n_instances - order.total
    never = []
    if tail:
        never.append(f"{tail:,} instances at the order's tail fill no whole batch (get_local_indices drops them)")
    if unused:
        never.append(f"{unused:,} instances of larger sources beyond the smallest source's {order.size:,} "
                     "are left out by interleaving")  # fmt: skip
    if files.ignored_tokens:
        never.append(f"{files.ignored_tokens:,} tokens at file ends make no whole instance")
    attrs = {"shuffle_strategy": strategy}
    if never:
        attrs["never_trained"] = "; ".join(never) + ": never trained, never sampled (neither treated nor controls)"
    return notes + never, attrs
