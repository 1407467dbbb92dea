"""Pico's data order (``pico-lm/pico-decoder-{tiny,small,medium,large}``): the pre-tokenized, pre-shuffled Dolma read
in order, row i trained at step ⌊i / 1024⌋ + 1.

Transcribed from github.com/pico-lm/pico-train at commit f0bfdf437c515b2a5cb4ef368ca594efeb6fb2ba:

- ``src/training/utils/initialization.py`` ``initialize_dataset``: ``load_dataset("pico-lm/pretokenized-dolma",
  split="train", streaming=True)``, its shards ``data/train-{k:05d}-of-10000.parquet`` (20,480 rows each) in order,
  no shuffle (``initialize_dataloader``: ``shuffle=False``, "the data are pre-shuffled, and pre-tokenized"); a
  resumed run restarts at shard ``step // (20480 // batch)`` and skips the rest of the batches in it, which lands on
  the same row. Each row is ``input_ids``, 2049 token ids (inputs ``[:-1]``, labels ``[1:]``).
- ``src/training/utils/data.py`` ``ShardedIterableDataset``: rank r of W reads rows r, r + W, r + 2W, …; the
  DataLoader cuts each rank's rows into sub-batches of ``batch_size / (W · G)`` (G: gradient accumulation steps).
- ``src/training/trainer.py`` ``_training_loop``: every G sub-batches are one optimizer step, ``batch_step`` counts
  them from 0 and the checkpoint named step N is saved after N steps (``save_every_n_steps``, 1000 by default in
  ``src/config/checkpointing_config.py``). So batch_step s trains global rows ``[s·B, (s+1)·B)`` (B = 1024,
  ``data.dataloader.batch_size``) whatever W and G are, and in memtui's convention (step s trains positions
  ``[(s−1)·B, s·B)``) row i is trained at step ⌊i / B⌋ + 1: the checkpoint step N has seen rows below N·B.

Checkpoints: the model cards (``pico-lm/pico-decoder-tiny`` README: 200,000 steps, batch 1024, sequence length 2048)
say the branch ``pico-decoder-{size}-1`` holds the run's full commit history; ``checkpointing/training.py`` uploads
each checkpoint to that branch as a commit titled ``Saving HF Model -- Step N`` (no per-step branch names):
:func:`commits_by_step` maps a repo's commit list to steps. 200,000 × 1024 = 204,800,000 = 10,000 × 20,480 rows:
the whole dataset is trained once, so "beyond" controls exist only for a panel that ends before the last step.

The rows are read from a local mirror of the dataset (or an fsspec URL such as
``hf://datasets/pico-lm/pretokenized-dolma``), only the row groups that hold a panel's rows. A local mirror may hold
the first k shards only: its order is then those rows. Every shard read must hold as many rows as the first (the
trainer's resume arithmetic assumes equal shards) and rows of 2049 ids.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.arrays import ConcatenatedRows

BATCH = 1024  # data.dataloader.batch_size (src/config/_constants.py BATCH_SIZE)
ROW_TOKENS = 2049  # MAX_SEQ_LEN + 1
VOCAB = 50304  # the OLMo-7B-0724 tokenizer, padded (VOCAB_SIZE)
ROWS_PER_SHARD = 20_480  # pico-train's examples_per_shard
SHARDS = 10_000
TRAIN_STEPS = 200_000  # the model cards' training steps
CHECKPOINT_EVERY = 1000
_SHARD = re.compile(r"^train-(\d{5})-of-(\d+)\.parquet$")
_COMMIT = re.compile(r"^Saving HF Model -- Step (\d+)$")


def commits_by_step(commits: Iterable[tuple[str, str]]) -> dict[int, str]:
    """``{step: commit id}`` from (title, commit id) pairs, as ``huggingface_hub.list_repo_commits(repo,
    revision="pico-decoder-tiny-1")`` lists them (``.title``, ``.commit_id``); the newest commit of a step wins."""
    out: dict[int, str] = {}
    for title, commit in commits:  # newest first, as the hub lists them
        if (m := _COMMIT.match(str(title).strip())) and int(m.group(1)) not in out:
            out[int(m.group(1))] = str(commit)
    return out


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def find_shards(root: str) -> list[str]:
    """The dataset's shards in training order: ``data/train-*-of-*.parquet`` under a local folder (the first k,
    contiguous), or the 10,000 of the hub's layout under a URL."""
    if _is_url(root):
        base = root.rstrip("/")
        base = base if base.endswith("/data") else base + "/data"
        return [f"{base}/train-{k:05d}-of-{SHARDS}.parquet" for k in range(SHARDS)]
    folder = Path(root.removeprefix("file://"))
    if (folder / "data").is_dir():
        folder = folder / "data"
    if not folder.is_dir():
        raise MemtuiError(f"{clean(root, 200)}: no such folder (the pretokenized Dolma's data/ folder).")
    found: dict[int, Path] = {}
    totals = set()
    for p in folder.iterdir():
        if m := _SHARD.match(p.name):
            found[int(m.group(1))] = p
            totals.add(m.group(2))
    if not found:
        raise MemtuiError(f"{clean(folder, 200)}: no shards named train-00000-of-10000.parquet in it.")
    if len(totals) > 1:
        raise MemtuiError(f"{clean(folder, 200)}: shards of different sets (-of-{', -of-'.join(sorted(totals))}).")
    count = next(k for k in range(len(found) + 1) if k not in found)  # the contiguous prefix 0 .. count-1
    if count == 0:
        raise MemtuiError(f"{clean(folder, 200)}: shard train-00000 is missing; rows are numbered from it.")
    return [str(found[k]) for k in range(count)]


class DolmaRows(ConcatenatedRows):
    """The shards' rows numbered in training order, read by row (what a sampling ``Stage`` reads as its files)."""

    labels: tuple[str, ...] = ()
    ignored_tokens = 0

    def __init__(self, shards: list[str], seq_len: int = ROW_TOKENS, vocab: int = VOCAB, equal: bool = True):
        """``equal``: the training shards, numbered in equal shards (the first one's rows, or 20,480 remotely, each
        checked when read); else held-out files, each counted from its own footer."""
        self.paths = tuple(shards)
        self.seq_len, self.vocab, self.equal = seq_len, vocab, equal
        self._files: dict[int, object] = {}
        if equal:
            self.rows_per_shard = self._open(0).metadata.num_rows if not _is_url(shards[0]) else ROWS_PER_SHARD
            counts = np.full(len(shards), self.rows_per_shard, dtype=np.int64)
        else:
            counts = np.array([self._open(k).metadata.num_rows for k in range(len(shards))], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        if self.n_instances < 1:
            raise MemtuiError(f"{clean(shards[0], 200)}: holds no rows.")

    def _open(self, shard: int):
        if shard not in self._files:
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = self.paths[shard]
            try:
                if _is_url(path):
                    import fsspec

                    handle = fsspec.open(path, "rb").open()
                else:
                    from memtui.core.paths import input_file

                    handle = str(input_file(path, "Dolma shard"))
                pf = pq.ParquetFile(handle)
            except (OSError, ValueError, ImportError, pa.ArrowException) as exc:
                raise MemtuiError(f"{clean(path, 200)}: not a readable parquet shard ({clean(exc, 100)}).") from None
            if "input_ids" not in pf.schema_arrow.names:
                raise MemtuiError(f"{clean(path, 200)}: no input_ids column; not a pretokenized Dolma shard.")
            kind = pf.schema_arrow.field("input_ids").type
            if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
                raise MemtuiError(f"{clean(path, 200)}: input_ids is {clean(kind, 40)}, not a list of token ids.")
            if self.equal and shard and pf.metadata.num_rows != self.rows_per_shard:
                raise MemtuiError(
                    f"{clean(path, 200)}: {pf.metadata.num_rows} rows, shard 0 has {self.rows_per_shard}; "
                    "rows are numbered in equal shards as pico-train does."
                )
            self._files[shard] = pf
        return self._files[shard]

    def read(self, index: np.ndarray, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """The rows' token ids, (len(index), seq_len) int64; only the row groups holding them are read."""
        shard, row = self.locate(index)
        out = np.empty((len(index), self.seq_len), dtype=np.int64)
        done = 0
        for s in np.unique(shard):
            at = np.flatnonzero(shard == s)
            out[at] = self._read_shard(int(s), row[at])
            done += len(at)
            if progress is not None:
                progress(done, len(index))
        return out

    def _read_shard(self, s: int, rows: np.ndarray) -> np.ndarray:
        pf = self._open(s)
        sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        group = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty((len(rows), self.seq_len), dtype=np.int64)
        for g in np.unique(group):
            at = np.flatnonzero(group == g)
            picked = self._take(pf, s, int(g), rows[at] - starts[g])
            for k, ids in zip(at, picked, strict=True):
                out[k] = self._row(ids, s, int(rows[k]))
        return out

    def _take(self, pf, shard: int, group: int, rows: np.ndarray) -> list:
        """Rows of one row group as lists of ids; a damaged group is refused, naming the shard."""
        import pyarrow as pa

        try:
            return pf.read_row_group(group, columns=["input_ids"]).column(0).take(rows).to_pylist()
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise MemtuiError(
                f"{clean(self.paths[shard], 200)}: row group {group} cannot be read ({clean(exc, 100)}); the shard is "
                "damaged: fetch it again."
            ) from None

    def _row(self, ids, shard: int, row: int) -> np.ndarray:
        where = f"{clean(self.paths[shard], 200)} row {row}"
        if ids is None or len(ids) != self.seq_len:
            got = "no" if ids is None else len(ids)
            raise MemtuiError(f"{where}: {got} token ids, expected {self.seq_len}; not Pico's pretokenized Dolma.")
        arr = np.asarray(ids, dtype=np.int64)
        if arr.min() < 0 or arr.max() >= self.vocab:
            raise MemtuiError(f"{where}: token id {int(arr.max())} outside the vocabulary 0 .. {self.vocab - 1}.")
        return arr


class RowOrder:
    """Row i at position i: the order the trainer reads (``order[positions]``)."""

    dtype = np.dtype(np.int64)
    ndim = 1

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key) -> np.ndarray:
        pos = np.atleast_1d(np.asarray(key, dtype=np.int64))
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"positions must lie in 0 .. {self.n - 1}")
        return pos


def pico_stage(
    dolma: str | os.PathLike, *, batch: int = BATCH, heldout=None, name: str = "pico", last_step: int | None = None
):
    """The Pico run as one sampling stage: its rows, their order, B rows a step."""
    from memtui.orders.sampling import Stage

    files = DolmaRows(find_shards(str(dolma)))
    held = DolmaRows([str(p) for p in heldout], equal=False) if heldout else None
    n = files.n_instances
    notes = [f"{n:,} rows of {files.seq_len} tokens in {len(files.paths)} shards, read in order, {batch} per step"]
    if n % batch:
        notes.append(f"{n % batch:,} rows at the end fill no whole step")
    return Stage(name=name, files=files, indices=lambda: RowOrder(n), batch=batch, last_step=last_step,
                 heldout=held, notes=notes)  # fmt: skip
