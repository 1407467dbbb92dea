"""nanotron's ``Nanoset`` (SmolLM2, SmolLM3, the FineWeb ablation models): datasets blended by weight, the epoch's
order shuffled by numpy's legacy ``RandomState(seed)``, the same order repeated every epoch, cut at steps × batch.

Transcribed from github.com/huggingface/nanotron at commit 26ba5a88173bcb801ae87b0cf32486d7bc00d1ef (the parent of
1dfee7f5, "new dataloader (#341)", after which run_train.py no longer builds a Nanoset); the index is built this way
from ad028e63 (2024-05-31, "datatrove is all you need") to 2411b022 (the newest commit read):

- ``src/nanotron/data/nanoset.py`` ``Nanoset.build_nanoset_index``: with dataset lengths L_d (samples) and S = Σ L_d,
  ``build_nanoset_index_helper(S, weights, L)`` (below) gives ``dataset_index`` and ``dataset_sample_index`` for one
  epoch; both are shuffled by ``np.random.RandomState(seed).shuffle`` (the same permutation: a fresh RandomState for
  each), concatenated ``⌊T / S⌋ + 1`` times and cut to T = ``train_steps × global_batch_size`` samples.
- ``build_nanoset_index_helper`` (numba): for i = 0 … S−1, ``errors = weights · max(i, 1.0) − current``, the first
  argmax d is sample i's dataset, its sample ``current[d] mod L_d``, then ``current[d] += 1``. Weights are
  ``dataset_weights`` normalised (``data/utils.py`` ``normalize``), else the lengths (one folder: weight 1).
- ``run_train.py``: ``random_seed = data.seed`` of the stage, ``token_size = token_size_in_bytes`` (the folders'
  ``*.metadata`` ``tokenizer|bytes``, else 2 below a 65,536 vocabulary, else 4), ``sequence_length`` =
  ``tokens.sequence_length``; ``data/samplers.py`` ``MegatronPretrainingSampler`` reads the index in order, so step s
  trains samples ``[(s−1)·B, s·B)``, B = micro_batch_size × batch_accumulation_per_replica × dp.
- A dataset folder is datatrove's ``DatatroveFolderDataset(folder, seq_len, filename_pattern=folder/*.ds,
  recursive=False, token_size, shuffle=True)``: its ``.ds`` files sorted by name, reordered by
  ``np.random.default_rng(42).permutation``, each cut into windows of seq_len + 1 tokens (``DatatroveFileDataset``).

**Repeats.** A sample can appear more than once in the index: every epoch repeats the order, and a dataset weighted
above its share wraps around (``current mod L_d``) within one. An instance is treated at its **first** exposure; the
number of times the run trains it (positions below T) is recorded (``exposures`` in provenance), and so is the
position that was sampled. A control must have no exposure by the panel's last step. Samples the cut at T never
reaches, and those of a dataset weighted below its share, are in the data but never trained (counted in the panel's
``never_trained``).

The blending helper is replayed exactly (the same float64 operations, the first maximum on ties) by a compiled loop
(memtui.orders.blend; a Python loop where nothing was compiled): one dataset needs no loop (see
benchmarks/build_orders.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.blend import blend, picks
from memtui.orders.tokenfiles import TokenFiles

DATATROVE_SEED = 42  # DatatroveFolderDataset's default seed: Nanoset passes none
_SCAN = 1 << 23  # positions of the permutation scanned at a time


def normalize(weights) -> np.ndarray:
    w = np.array(weights, dtype=np.float64)
    return w / np.sum(w)


def datatrove_files(folder: str) -> list[str]:
    """A dataset folder's ``.ds`` files in DatatroveFolderDataset's order (sorted, then shuffled with seed 42)."""
    root = Path(folder)
    if not root.is_dir():
        raise MemtuiError(f"{clean(folder, 200)}: no such dataset folder (of datatrove .ds token files).")
    files = sorted(p.name for p in root.iterdir() if p.name.endswith(".ds") and p.is_file())
    if not files:
        raise MemtuiError(f"{clean(folder, 200)}: no .ds token files in it (datatrove's tokenized output).")
    order = np.random.default_rng(DATATROVE_SEED).permutation(range(len(files)))
    return [str(root / files[i]) for i in order]


@dataclass
class NanosetOrder:
    """The Nanoset index read at positions: the instance (global number), its first exposure and its exposures."""

    lengths: list[int]
    weights: np.ndarray
    seed: int
    total: int  # T: train_steps x global batch size

    def __post_init__(self):
        self.epoch = int(sum(self.lengths))  # S
        if self.epoch >= 2**32 - 1:
            raise MemtuiError(f"{self.epoch:,} samples in an epoch: beyond what memtui replays (2**32).")
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.dataset = blend(self.lengths, self.weights)
        perm = np.arange(self.epoch, dtype=np.uint32)
        np.random.RandomState(self.seed).shuffle(perm)  # the permutation both of Nanoset's shuffles apply
        self.perm = perm
        if len(self.lengths) == 1:  # one dataset: helper index j is sample j (no arrays: 400 MB saved at 1e8)
            self.picks = None
            return
        self.picks = picks(self.dataset, len(self.lengths))  # each dataset's helper indices, ascending

    def _rank(self, j: np.ndarray) -> np.ndarray:
        """j's place among its dataset's picks (nanotron's ``current_samples[d]`` when it was drawn): found in the
        sorted picks, for the few positions a panel reads, instead of an array of the epoch's size."""
        j = np.asarray(j, dtype=np.int64)
        if self.picks is None:
            return j
        d = self.dataset[j]
        out = np.empty(len(j), dtype=np.int64)
        for k in np.unique(d).tolist():
            at = d == k
            out[at] = np.searchsorted(self.picks[k], j[at])
        return out

    def instance(self, positions: np.ndarray) -> np.ndarray:
        """The global instance number (dataset offset + sample) at each position of the index."""
        j = self.perm[np.asarray(positions, dtype=np.int64) % self.epoch]
        d = self.dataset[j].astype(np.int64)
        return self.offsets[d] + self._rank(j) % np.asarray(self.lengths, dtype=np.int64)[d]

    def positions_of(self, js: np.ndarray) -> np.ndarray:
        """The epoch position the shuffle moved each helper index to (perm's inverse there, one pass over perm)."""
        js = np.asarray(js, dtype=np.int64)
        if not js.size:
            return js
        wanted = np.zeros(self.epoch, dtype=bool)  # a byte an index, scanned against perm a piece at a time
        wanted[js] = True
        at = np.concatenate(
            [lo + np.flatnonzero(wanted[self.perm[lo : lo + _SCAN]]) for lo in range(0, self.epoch, _SCAN)]
        )
        lookup = dict(zip(self.perm[at].tolist(), at.tolist(), strict=True))
        return np.array([lookup[j] for j in js.tolist()], dtype=np.int64)

    def exposures(self, instances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first position below T, or -1; the number of positions below T) of each instance."""
        instances = np.asarray(instances, dtype=np.int64)
        d_of = np.searchsorted(self.offsets, instances, side="right") - 1
        helper = []  # each instance's helper indices: sample j once, or every pick of its dataset that wraps to it
        for inst, d in zip(instances.tolist(), d_of.tolist(), strict=True):
            sample, length = inst - int(self.offsets[d]), self.lengths[d]
            mine = None if self.picks is None else self.picks[d]
            helper.append(np.array([sample]) if mine is None else mine[sample : len(mine) : length])
        sizes = [len(h) for h in helper]
        q_all = self.positions_of(np.concatenate(helper) if helper else np.zeros(0, np.int64))
        first = np.full(len(instances), -1, dtype=np.int64)
        count = np.zeros(len(instances), dtype=np.int64)
        for i, (a, b) in enumerate(zip(np.cumsum([0, *sizes[:-1]]).tolist(), np.cumsum(sizes).tolist(), strict=True)):
            q = q_all[a:b]  # its epoch positions, repeated every S below T
            q = q[q < self.total]
            if len(q):
                count[i] = int(((self.total - 1 - q) // self.epoch + 1).sum())
                first[i] = int(q.min())
        return first, count

    def never_in_epoch(self) -> int:
        """Samples no epoch position holds (a dataset weighted below its share)."""
        if self.picks is None:
            return 0
        return int(sum(max(0, n - len(p)) for n, p in zip(self.lengths, self.picks, strict=True)))


def dataset_files(folders: list[str], token_size: int, seq_len: int) -> tuple[TokenFiles, list[int]]:
    """Every folder's windows of seq_len + 1 tokens numbered dataset after dataset, as Nanoset's samples are, and the
    samples per folder."""
    paths, labels, per_folder = [], [], []
    for folder in folders:
        found = datatrove_files(folder)
        paths += found
        per_folder.append(len(found))
        labels += [os.path.basename(os.path.normpath(folder))] * len(found)
    dtype = np.dtype(np.uint16 if token_size == 2 else np.uint32)
    files = TokenFiles.open(paths, dtype, seq_len + 1, labels=labels)
    ends = np.cumsum(per_folder)
    lengths = [int(files.counts[a:b].sum()) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return files, lengths


# -- the run's config -------------------------------------------------------------------------------------------------


@dataclass
class NanosetRun:
    files: TokenFiles
    order: NanosetOrder
    batch: int  # samples per step
    train_steps: int
    folders: list[str]
    notes: list[str]


def _whole(value, what: str, where, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 2**53:
        raise MemtuiError(
            f"{where}: {what} must be a whole number from {minimum} to 2**53, not {clean(repr(value), 60)}."
        )
    return value


def _stage(cfg: dict, where, stage_name: str | None) -> dict:
    stages = cfg.get("data_stages")
    if not isinstance(stages, list) or not stages or not all(isinstance(s, dict) for s in stages):
        raise MemtuiError(f"{where}: data_stages must be a non-empty list of stages.")
    if stage_name is not None:
        found = [s for s in stages if s.get("name") == stage_name]
        if not found:
            names = ", ".join(clean(s.get("name"), 40) for s in stages)
            raise MemtuiError(f"{where}: no data stage named {clean(stage_name, 60)} (the stages: {names}).")
        stage = found[0]
    elif len(stages) > 1:
        raise MemtuiError(f"{where}: {len(stages)} data stages; name the one to read (--stage-name).")
    else:
        stage = stages[0]
    if stage.get("start_training_step", 1) != 1:
        raise MemtuiError(
            f"{where}: stage {clean(stage.get('name'), 60)} starts at step "
            f"{clean(stage.get('start_training_step'), 20)}; memtui reads a stage that starts at step 1."
        )
    return stage


def _folders(dataset: dict, where) -> tuple[list[str], np.ndarray | None]:
    folders = dataset.get("dataset_folder")
    if isinstance(folders, str):  # NanosetDatasetsArgs: one folder, weight [1]
        return [folders], None
    if not isinstance(folders, list) or not folders or not all(isinstance(f, str) and f for f in folders):
        raise MemtuiError(f"{where}: dataset_folder must be a folder or a non-empty list of folders.")
    weights = dataset.get("dataset_weights")
    if weights is None:
        return folders, None
    bad = not isinstance(weights, list) or len(weights) != len(folders)
    if bad or not all(isinstance(w, int | float) and not isinstance(w, bool) and 0 <= w < 1e18 for w in weights):
        raise MemtuiError(f"{where}: dataset_weights must be {len(folders)} non-negative numbers, one per folder.")
    if not sum(weights) > 0:
        raise MemtuiError(f"{where}: dataset_weights sum to zero.")
    return folders, normalize(weights)


def _token_size(dataset: dict, folders: list[str], vocab, where) -> int:
    """``token_size_in_bytes``, else a folder's ``*.metadata`` first line ``tokenizer|bytes``, else from the vocab."""
    size = dataset.get("token_size_in_bytes")
    if size is None:
        for folder in folders:
            meta = sorted(Path(folder).glob("*.metadata")) if Path(folder).is_dir() else []
            if meta:
                line = meta[0].read_text(errors="replace").splitlines()[:1]
                if line and "|" in line[0]:
                    text = line[0].split("|")[-1].strip()
                    size = int(text) if text.isdigit() else text
                break
    if size is None and vocab is not None:
        size = 2 if _whole(vocab, "vocab_size", where) < 65536 else 4
    if size not in (2, 4):
        raise MemtuiError(f"{where}: token size {clean(repr(size), 30)} bytes; datatrove writes 2 or 4.")
    return size


def read_run(config: str | os.PathLike, *, stage_name: str | None = None, data_root=None) -> NanosetRun:
    """A nanotron run's Nanoset from its training config (YAML, as nanotron saves it beside checkpoints)."""
    from memtui.orders.olmo import _read_yaml
    from memtui.orders.tokenfiles import remap

    path = Path(config)
    cfg = _read_yaml(path)
    tokens, par = cfg.get("tokens"), cfg.get("parallelism")
    if not isinstance(tokens, dict) or not isinstance(par, dict):
        raise MemtuiError(f"{path}: a nanotron config needs 'tokens' and 'parallelism' sections.")
    stage = _stage(cfg, path, stage_name)
    data = stage.get("data")
    dataset = data.get("dataset") if isinstance(data, dict) else None
    if not isinstance(dataset, dict) or "dataset_folder" not in dataset:
        raise MemtuiError(f"{path}: the stage's data.dataset is not a Nanoset (no dataset_folder).")
    folders, weights = _folders(dataset, path)
    folders = remap(folders, data_root) if data_root is not None else folders
    seq_len = _whole(tokens.get("sequence_length"), "tokens.sequence_length", path)
    steps = _whole(tokens.get("train_steps"), "tokens.train_steps", path)
    batch = 1
    for key, section in (("micro_batch_size", tokens), ("batch_accumulation_per_replica", tokens), ("dp", par)):
        batch *= _whole(section.get(key), key, path)
    seed = _whole(data.get("seed"), "the stage's data.seed", path, minimum=0)
    model = cfg.get("model", {}).get("model_config", {}) if isinstance(cfg.get("model"), dict) else {}
    vocab = model.get("vocab_size") if isinstance(model, dict) else None
    size = _token_size(dataset, folders, vocab, path)
    files, lengths = dataset_files(folders, size, seq_len)
    empty = [f for f, n in zip(folders, lengths, strict=True) if n == 0]
    if empty:
        raise MemtuiError(f"{clean(empty[0], 200)}: holds no whole sample of {seq_len + 1} tokens.")
    w = normalize(lengths) if weights is None else weights
    order = NanosetOrder(lengths, w, seed, steps * batch)
    return NanosetRun(files, order, batch, steps, folders, _notes(order, files, folders, seed, batch))


def _notes(order: NanosetOrder, files: TokenFiles, folders, seed: int, batch: int) -> list[str]:
    s, t = order.epoch, order.total
    mix = ", ".join(
        f"{clean(os.path.basename(os.path.normpath(f)), 40)} {n:,}" for f, n in zip(folders, order.lengths, strict=True)
    )
    notes = [f"Nanoset of {s:,} samples an epoch ({mix}), RandomState({seed}), {batch} per step, {t:,} trained "
             f"({t / s:.3g} epochs, the same order each)"]  # fmt: skip
    return notes


def never_trained(order: NanosetOrder) -> str:
    """What the index holds but the run never trains (the panel's ``never_trained``)."""
    parts = []
    if order.total < order.epoch:
        parts.append(f"{order.epoch - order.total:,} epoch positions after the cut at T = {order.total:,}")
    if order.never_in_epoch():
        parts.append(f"{order.never_in_epoch():,} samples of datasets weighted below their share")
    return "; ".join(parts)


# -- the panel --------------------------------------------------------------------------------------------------------


def sample_nanoset(run: NanosetRun, steps, *, k: int, m: int, n_controls: int, heldout=None, seed: int = 0):
    """A panel from the Nanoset: per cohort k steps x m samples, each treated at its first exposure, and controls
    with no exposure by the panel's last step (after it in the order, or held out). Returns the sampled order and the
    per-instance exposures and sampled positions."""
    from memtui.orders.sampling import NEVER, SampledOrder, Stage, _cohorts, _read, _read_heldout, _treated_positions

    steps = sorted({int(s) for s in steps})
    stage = Stage(name="nanoset", files=run.files, indices=lambda: None, batch=run.batch, heldout=heldout)
    rng = np.random.default_rng([seed, 0])
    order = run.order
    last = min(max(steps), run.train_steps)
    pos, _ = _treated_positions(rng, stage, _cohorts(steps, 0, run.train_steps), k, m)
    inst = order.instance(pos)
    inst, keep = np.unique(inst, return_index=True)  # a repeat drawn twice is one instance
    pos = pos[keep]
    beyond = heldout is None and n_controls
    cpos, cinst = _beyond(order, rng, n_controls, last * run.batch) if beyond else (pos[:0], inst[:0])
    both = order.exposures(np.concatenate([inst, cinst]))  # one scan of the permutation for treated and controls
    (first, cfirst), (exposures, cexp) = ((x[: len(inst)], x[len(inst) :]) for x in both)
    first_step = first // run.batch + 1
    treat = np.array([min(c for c in steps if c >= f) for f in first_step.tolist()], dtype=np.int64)
    counts: dict[str, int] = {}
    parts = [_read(stage, 0, first, treat, inst, counts, "treated", None)]
    extra = [exposures, pos]
    if beyond:
        clean_ = (cfirst < 0) | (cfirst >= last * run.batch)  # no exposure before the panel's last step
        cpos, cinst, cexp = cpos[clean_], cinst[clean_], cexp[clean_]
        counts["nanoset/controls_exposed_earlier"] = int((~clean_).sum())  # drawn after the panel, trained before
        parts.append(_read(stage, 0, cpos, np.full(len(cpos), NEVER), cinst, counts, "controls", None))
        extra = [np.concatenate([exposures, cexp]), np.concatenate([pos, cpos])]
    elif n_controls:
        pick = np.sort(rng.choice(heldout.n_instances, size=min(n_controls, heldout.n_instances), replace=False))
        parts.append(_read_heldout(stage, 0, pick, counts, None))
        extra = [
            np.concatenate([exposures, np.zeros(len(pick), np.int64)]),
            np.concatenate([pos, np.full(len(pick), -1)]),
        ]
    merged = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    if not (merged["treatment"] != NEVER).any():
        raise MemtuiError("no training sample falls into the panel's checkpoint steps; check --steps.")
    sampled = SampledOrder(
        ids=merged["ids"], treatment=merged["treatment"], tokens=merged["tokens"],
        stage=merged["stage"].astype(np.int16), file=merged["file"].astype(np.int32), offset=merged["offset"],
        position=merged["position"], stage_names=["nanoset"],
        files=[list(run.files.paths) + (list(heldout.paths) if heldout else [])], steps=steps,
        revisions=[f"step{s}" for s in steps], counts=counts, notes=list(run.notes),
    )  # fmt: skip
    labels = list(run.files.labels) + [""] * (len(heldout.paths) if heldout else 0)
    sampled.source = np.array([labels[f] for f in sampled.file.tolist()])
    return sampled, {"exposures": extra[0], "sampled_position": extra[1]}


def _beyond(order: NanosetOrder, rng, n_controls: int, lo: int):
    """Control candidates: samples at epoch positions after the panel's last step (one instance each); a control's
    first exposure must be after it too, which the caller checks."""
    hi = order.epoch
    if lo >= hi:
        raise MemtuiError(
            "every sample of the epoch is trained by the panel's last step; use held-out controls "
            "(--controls validation --heldout FILES)."
        )
    want = min(n_controls, hi - lo)
    cpos = np.sort(rng.choice(hi - lo, size=want, replace=False)) + lo
    cinst = order.instance(cpos)
    cinst, keep = np.unique(cinst, return_index=True)
    return cpos[keep], cinst  # those trained before the panel's last step are dropped by the caller
