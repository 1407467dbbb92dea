"""The data orders of AI2's OLMo models, read from the training configs the runs published.

- **OLMo 1 and 2** (the ``OLMo`` repo, package ``ai2-olmo``): a training config YAML. ``data.paths`` (or
  ``data.datasets``: labels in sorted order, their paths in turn) are flat token files of ``data.memmap_dtype``
  (uint16 by default) cut into ``model.max_sequence_length`` instances (``build_memmap_dataset``). The order is
  ``IterableDataset._build_global_indices``: ``arange(N, uint32)`` shuffled by ``Generator(PCG64(seed + epoch))``
  with ``seed = data.seed`` else ``seed``, ``epoch = epoch`` else 0 (0 when ``restore_dataloader: false``: the
  trainer resets it, as OLMo 2's stage-2 runs do); padding or truncation to the world size only touches the tail.
  Step s trains ``global_indices[(s-1)·B : s·B]``, B = ``global_train_batch_size`` (``scripts/inspect_train_data.py``
  rebuilds a step's batch from ``start_index = (s-1)·B``). A run's own ``global_indices.npy`` (raw uint32, as the
  trainer writes it) can be given instead of rebuilding it.
- **OLMo-core** (``ai2-olmo-core``; OLMo 2 32B, OLMo 3): the ``config.json`` a run writes: ``dataset`` (``paths`` or
  a ``data_paths.txt``, ``sequence_length``, ``dtype``, ``max_target_sequence_length``, ``instance_filter_config``)
  and ``data_loader`` (``global_batch_size`` in tokens, ``seed``). ``NumpyFSLDataLoader._build_global_indices``:
  ``get_rng(seed + epoch)`` (PCG64) shuffles ``arange(N, uint32)``, or, with ``max_target_sequence_length = c·L``,
  shuffles chunks of c instances; epochs count from 1 (``Trainer.epoch``). B = global_batch_size // L, and the
  trainer's step s (incremented before each batch) trains batch s-1. The loader keeps whole batches only: the
  tail of ``N mod B`` instances is never trained (recorded as ``never_trained``). A run of the composable loader
  (``dataset`` a list of sources; its ``shuffle_strategy``) is read by :mod:`memtui.orders.olmo_composable`.

Both shuffles are numpy's ``Generator.shuffle`` of the same uint32 array. A panel reads that order at its positions
only: :class:`memtui.orders.globalindices.ShuffledOrder` traces them back through the shuffle's swaps, replayed from
the PCG64 stream (exact; ~3x faster than the shuffle at 3e8 instances, and cached per N and seed); tests check it
against ``Generator.shuffle`` and against ``ai2-olmo-core``'s loader batch by batch.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.orders.globalindices import ShuffledOrder
from memtui.orders.olmo_composable import composable, is_composable
from memtui.orders.records import load_json
from memtui.orders.repetition import RepetitionFilter
from memtui.orders.sampling import Stage
from memtui.orders.tokenfiles import TokenFiles, remap, token_dtype

_NPY_MAGIC = b"\x93NUMPY"


# -- the shuffles -----------------------------------------------------------------------------------------------------


def build_global_indices(n: int, seed: int, chunk: int = 1) -> np.ndarray:
    """The libraries' whole order of ``n`` instances as uint32, by numpy's own shuffle (what they pay)."""
    return np.asarray(ShuffledOrder(n // chunk, seed, chunk))


def load_global_indices(path: str | os.PathLike, n: int) -> np.ndarray:
    """A run's global indices file, memory-mapped: raw uint32 as OLMo writes it, or a .npy with a header."""
    path = input_file(path, "global indices file")
    with open(path, "rb") as f:
        head = f.read(6)
    if head == _NPY_MAGIC:
        indices = np.load(path, mmap_mode="r", allow_pickle=False)
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            raise MemtuiError(f"{path}: global indices must be a 1-D integer array, not {indices.dtype}.")
    else:
        if path.stat().st_size % 4:
            raise MemtuiError(f"{path}: {path.stat().st_size} bytes is not a whole number of uint32 indices.")
        indices = np.memmap(path, dtype=np.uint32, mode="r")
    if len(indices) < n // 2:  # padding or truncation to the world size changes the length by less than N
        raise MemtuiError(f"{path}: {len(indices):,} indices for {n:,} instances; it belongs to another dataset.")
    return indices


def _lazy(build: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    cache: list[np.ndarray] = []

    def get() -> np.ndarray:
        if not cache:
            cache.append(build())
        return cache[0]

    return get


# -- revision names ---------------------------------------------------------------------------------------------------


def revision_template(prefix: str, tokens_per_step: int) -> Callable[[int], str]:
    """``{prefix}step{N}-tokens{T}B`` as the OLMo hub repos name checkpoints, T = ceil(N · tokens per step / 1e9).

    The hub's names come from the trainer's token count, which can differ from this (OLMo 2 7B's last stage-1
    checkpoint is ``tokens3896B``, not 3895): resolve names against the repo's branches with
    :func:`match_revisions` where the hub can be asked.
    """
    return lambda step: f"{prefix}step{step}-tokens{math.ceil(step * tokens_per_step / 1e9)}B"


def match_revisions(steps: Sequence[int], branches: Sequence[str], prefix: str = "") -> dict[int, str]:
    """The hub branch of each step among ``branches`` (``{prefix}step{N}`` optionally followed by ``-tokens{T}B``)."""
    pattern = re.compile(rf"^{re.escape(prefix)}step(\d+)(?:-tokens\d+B)?$")
    found = {int(mt.group(1)): b for b in branches if (mt := pattern.match(b))}
    missing = [s for s in steps if s not in found]
    if missing:
        raise MemtuiError(
            f"no checkpoint named '{prefix}step{missing[0]}…' in the repo ({len(missing)} step(s) missing); "
            "choose steps the repo has."
        )
    return {s: found[s] for s in steps}


# -- OLMo 1 / 2 -------------------------------------------------------------------------------------------------------


def _read_yaml(path: Path) -> dict:
    import yaml

    input_file(path, "config file")
    try:
        data = yaml.safe_load(path.read_text())
    except RecursionError:
        raise MemtuiError(f"{path}: not a readable YAML config (nested too deeply).") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise MemtuiError(f"{path}: not a readable YAML config ({clean(str(exc).splitlines()[0], 100)}).") from None
    if not isinstance(data, dict):
        raise MemtuiError(f"{path}: expected a training config (a mapping), found {type(data).__name__}.")
    return data


def _whole(value, what: str, where, minimum: int = 1) -> int:
    # at most 2**53: sizes, seeds and steps beyond it overflow the int64 arithmetic that numbers instances
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 2**53:
        raise MemtuiError(
            f"{where}: {what} must be a whole number from {minimum} to 2**53, not {clean(repr(value), 60)}."
        )
    return value


def _path_list(value, what: str, where) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise MemtuiError(f"{where}: {what} must be a non-empty list of token file paths.")
    odd = next((p for p in value if "\x00" in p or "\n" in p), None)
    if odd is not None:  # no file has such a name: a damaged or hand-made config
        raise MemtuiError(f"{where}: {what} holds a path with a NUL byte or a line break ({clean(odd, 80)}).")
    return value


def olmo_stage(
    config: str | os.PathLike,
    *,
    global_indices: str | os.PathLike | None = None,
    data_root: str | os.PathLike | None = None,
    name: str | None = None,
    offset: int = 0,
    heldout: Sequence[str] | None = None,
    revision_prefix: str | None = None,
    cache: str | os.PathLike | None = None,
    seed: int | None = None,
) -> Stage:
    """One stage of an OLMo 1/2 run from its training config (``configs/official-*/*.yaml``). ``cache``: a folder
    keeping the shuffle's swap partners for later builds of the same run (:mod:`memtui.orders.globalindices`).
    ``seed``: the run's seed in place of the config's (a seed suite's other runs, as DataDecide's)."""
    path = Path(config)
    cfg = _read_yaml(path)
    data = cfg.get("data")
    model = cfg.get("model")
    if not isinstance(data, dict) or not isinstance(model, dict):
        raise MemtuiError(f"{path}: an OLMo training config needs 'data' and 'model' sections.")
    if data.get("custom_dataset"):
        raise MemtuiError(f"{path}: a custom_dataset run has no order memtui can read; only data.paths/datasets.")
    labels: list[str] = []
    if data.get("paths") is not None:
        paths = _path_list(data["paths"], "data.paths", path)
    elif data.get("datasets"):
        if not isinstance(data["datasets"], dict):
            raise MemtuiError(f"{path}: data.datasets must map labels to lists of paths.")
        paths = []
        for label in sorted(data["datasets"]):  # build_memmap_dataset's order
            group = _path_list(data["datasets"][label], f"data.datasets.{label}", path)
            paths += group
            labels += [label] * len(group)
    else:
        raise MemtuiError(f"{path}: the config lists no token files (data.paths or data.datasets).")
    seq_len = _whole(model.get("max_sequence_length"), "model.max_sequence_length", path)
    batch = _whole(cfg.get("global_train_batch_size"), "global_train_batch_size", path)
    if seed is None:
        seed = data.get("seed") if data.get("seed") is not None else cfg.get("seed")
    if seed is None:
        raise MemtuiError(f"{path}: no seed (data.seed or seed); the order cannot be rebuilt without it.")
    seed = _whole(seed, "the seed", path, minimum=0)
    epoch = 0 if cfg.get("restore_dataloader") is False else _whole(cfg.get("epoch") or 0, "epoch", path, 0)
    dtype = token_dtype(data.get("memmap_dtype", "uint16"), str(path))
    paths = remap(paths, data_root)
    files = TokenFiles.open(paths, dtype, seq_len, labels=labels)
    n = files.n_instances
    notes = [f"{n:,} instances of {seq_len} tokens in {len(paths)} files, {batch} per step, seed {seed}, epoch {epoch}"]
    if files.ignored_tokens:
        notes.append(f"{files.ignored_tokens:,} tokens at file ends make no whole instance and were never trained")
    if global_indices is not None:
        indices = _lazy(lambda: load_global_indices(global_indices, n))
        notes.append(f"global indices from {global_indices}")
    else:
        indices = _lazy(lambda: ShuffledOrder(n, seed + epoch, cache=cache))  # read at the panel's positions only
    stage_name = name or str(cfg.get("run_name") or path.stem)
    prefix = revision_prefix if revision_prefix is not None else ""
    return Stage(
        name=stage_name,
        files=files,
        indices=indices,
        batch=batch,
        offset=offset,
        instance_filter=RepetitionFilter.from_config(data.get("instance_filter"), f"{path}: data.instance_filter"),
        heldout=TokenFiles.open(remap(heldout, data_root), dtype, seq_len) if heldout else None,
        revision=revision_template(prefix, batch * seq_len),
        first_epoch=epoch == 0,
        notes=notes,
    )


# -- OLMo-core --------------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    data = load_json(input_file(path, "config file").read_bytes(), str(path), "a readable JSON config")
    if not isinstance(data, dict):
        raise MemtuiError(f"{path}: expected an OLMo-core config (a mapping), found {type(data).__name__}.")
    return data


def olmo_core_stage(
    config: str | os.PathLike,
    *,
    data_root: str | os.PathLike | None = None,
    data_paths: str | os.PathLike | None = None,
    epoch: int = 1,
    name: str | None = None,
    offset: int = 0,
    heldout: Sequence[str] | None = None,
    revision_prefix: str = "",
    cache: str | os.PathLike | None = None,
) -> Stage:
    """One stage of an OLMo-core run from the ``config.json`` it wrote (fixed-length instances only). ``cache``: as
    for :func:`olmo_stage`."""
    path = Path(config)
    cfg = _read_json(path)
    _whole(epoch, "epoch", path)
    if is_composable(cfg):
        run = composable(cfg, path, epoch=epoch, data_root=data_root, cache=cache)
        return _composable_stage(cfg, path, run, epoch, name, offset, heldout, data_root, revision_prefix)
    ds, dl = cfg.get("dataset"), cfg.get("data_loader")
    if not isinstance(ds, dict) or not isinstance(dl, dict):
        raise MemtuiError(f"{path}: an OLMo-core config needs 'dataset' and 'data_loader' sections.")
    if dl.get("shuffle_strategy") is not None or dl.get("shuffle") is False:  # a loader memtui does not know
        raise MemtuiError(
            f"{path}: data_loader sets shuffle/shuffle_strategy but is not the composable loader; its order is unknown."
        )
    kind = str(ds.get("_CLASS_", ""))
    if (kind and not kind.endswith(("NumpyDatasetConfig", "NumpyFSLDatasetConfig"))) or ds.get("name") == "vsl":
        raise MemtuiError(f"{path}: dataset {clean(kind or ds.get('name'), 80)} is not a fixed-length numpy dataset.")
    if ds.get("source_mixture_config") or ds.get("source_mixture"):
        raise MemtuiError(f"{path}: source-mixture datasets are not supported (their instances are resampled).")
    listing = Path(data_paths) if data_paths else path.with_name("data_paths.txt")
    if ds.get("paths"):
        paths = _path_list(ds["paths"], "dataset.paths", path)
    elif data_paths or listing.is_file():  # a checkpoint keeps the mix's resolved paths beside config.json
        text = input_file(listing, "data paths list (data_paths.txt)").read_bytes().decode("utf-8", "replace")
        paths = [line.strip() for line in text.splitlines() if line.strip()]
        paths = _path_list(paths, str(listing), path)
    else:
        mix = ds.get("mix")
        raise MemtuiError(
            f"{path}: dataset.paths is empty{f' (mix {clean(mix, 60)})' if mix else ''}; pass the run's "
            "data_paths.txt (--data-paths)."
        )
    seq_len = _whole(ds.get("sequence_length"), "dataset.sequence_length", path)
    tokens = _whole(dl.get("global_batch_size"), "data_loader.global_batch_size", path)
    if tokens % seq_len:
        raise MemtuiError(
            f"{path}: data_loader.global_batch_size {tokens} tokens is not a whole number of {seq_len}-token instances."
        )
    if dl.get("seed") is None:
        raise MemtuiError(f"{path}: data_loader.seed is missing; the order cannot be rebuilt without it.")
    seed = _whole(dl["seed"], "data_loader.seed", path, minimum=0)
    target = ds.get("max_target_sequence_length")
    chunk = 1
    if target is not None:
        target = _whole(target, "dataset.max_target_sequence_length", path)
        if target < seq_len or target % seq_len:
            raise MemtuiError(f"{path}: max_target_sequence_length {target} is not a multiple of {seq_len}.")
        chunk = target // seq_len
    dtype = token_dtype(ds.get("dtype") or "uint16", str(path))
    base = ds.get("mix_base_dir") if not ds.get("paths") else None
    paths = remap(paths, data_root, base=base if data_root is not None and base and paths[0].startswith(base) else None)
    files = TokenFiles.open(paths, dtype, seq_len, block=chunk)
    n = files.n_instances
    batch = tokens // seq_len
    notes = [
        f"{n:,} instances of {seq_len} tokens in {len(paths)} files, {batch} per step, seed {seed} + epoch {epoch}"
        + (f", shuffled in chunks of {chunk}" if chunk > 1 else "")
    ]
    if files.ignored_tokens:
        notes.append(f"{files.ignored_tokens:,} tokens at file ends make no whole instance and were never trained")
    if epoch > 1:
        notes.append(f"epoch {epoch}: every instance was trained in an earlier epoch; use held-out controls")
    attrs = {}
    if n % batch:  # the loader's total_size: whole batches only (get_local_indices)
        notes.append(f"{n % batch:,} instances at the order's tail fill no whole batch (dropped by the loader)")
        attrs["never_trained"] = notes[-1] + ": never trained, never sampled (neither treated nor controls)"

    # read at the panel's positions only
    order = ShuffledOrder(n // chunk, seed + epoch, chunk, length=batch * (n // batch), cache=cache)

    return Stage(
        name=name or str(cfg.get("run_name") or path.parent.name or path.stem),
        files=files,
        indices=_lazy(lambda: order),
        batch=batch,
        offset=offset,
        instance_filter=RepetitionFilter.from_config(ds.get("instance_filter_config"), f"{path}: dataset"),
        heldout=TokenFiles.open(remap(heldout, data_root), dtype, seq_len) if heldout else None,
        revision=revision_template(revision_prefix, tokens),
        first_epoch=epoch == 1,
        notes=notes,
        attrs=attrs,
    )


def _composable_stage(cfg, path, run, epoch, name, offset, heldout, data_root, revision_prefix) -> Stage:
    """A stage of a composable OLMo-core run (:mod:`memtui.orders.olmo_composable`)."""
    files = run.files
    notes = list(run.notes)
    if epoch > 1:
        notes.append(f"epoch {epoch}: instances may have been trained in an earlier epoch; use held-out controls")
    return Stage(
        name=name or str(cfg.get("run_name") or path.parent.name or path.stem),
        files=files,
        indices=_lazy(lambda: run.order),
        batch=run.batch,
        offset=offset,
        instance_filter=run.instance_filter,
        heldout=TokenFiles.open(remap(heldout, data_root), files.dtype, files.seq_len) if heldout else None,
        revision=revision_template(revision_prefix, run.tokens),
        first_epoch=epoch == 1,
        notes=notes,
        attrs=run.attrs,
    )
