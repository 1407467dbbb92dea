"""LLM360 Amber's data order: 360 chunks, chunk k trained between checkpoints ``ckpt_{k-1}`` and ``ckpt_k``.

``LLM360/AmberDatasets`` holds ``train/train_{k:03d}.jsonl`` (k = 0..359), one record per line,
``{"token_ids": [2049 ids], "source": "c4"}`` (``amber-data-prep``), and ``valid/{subset}.jsonl`` held out from
training. ``amber-train/main.py`` trains chunk k (``train_{k}.jsonl``, shuffled in memory, reseeded on restarts) and
then saves ``ckpt_{k}``: the order within a chunk is unknown, the chunk is not, so the cohort of an instance is its
chunk and its treatment step is k (panel steps are checkpoint numbers, revisions ``ckpt_{k:03d}``). The trainer
loads the first ``TRAIN_EXAMPLES_PER_CHUNK`` = 1,706,976 lines of a chunk; chunks hold ~1,707,800, so up to ~0.05% of
a chunk's last lines may never have been trained (they cannot be told apart without reading the whole chunk).

Chunks are ~20 GB of JSON text, so lines are drawn without an index: a uniform byte offset picks the line that
contains it (probability proportional to its length), which is kept with probability ``shortest / length`` (the
shortest possible record), making every line equally likely. Only a window around each drawn offset is read, by a
seek locally or a byte range remotely. An instance's provenance is its chunk and the byte offset of its line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.records import load_json, token_ids
from memtui.orders.sampling import ID_SHIFT, NEVER, SampledOrder, _cohorts
from memtui.orders.tokenfiles import file_sizes, is_url, read_range

AMBER_TOKENS = 2049
AMBER_VOCAB = 32000  # LLaMA's tokenizer (Amber's config.json: vocab_size 32000)
N_CHUNKS = 360
_CHUNK_NAME = re.compile(r"train_(\d+)\.jsonl$")
_WINDOW = 1 << 16  # bytes read on each side of a drawn offset: a record of 2049 ids is ~12 KB


def amber_revision(k: int) -> str:
    return f"ckpt_{k:03d}"


def find_chunks(folder: str | os.PathLike) -> dict[int, str]:
    """Chunk number -> file, from a folder holding ``train_{k}.jsonl`` (or its ``train/`` subfolder)."""
    folder = Path(folder)
    if (folder / "train").is_dir():
        folder = folder / "train"
    if not folder.is_dir():
        raise MemtuiError(f"{folder}: no such folder of Amber chunks (train_000.jsonl ...).")
    chunks = {}
    for p in sorted(folder.iterdir()):
        if mt := _CHUNK_NAME.search(p.name):
            k = int(mt.group(1))
            if k in chunks:
                raise MemtuiError(f"{folder}: chunk {k} appears twice ({Path(chunks[k]).name}, {p.name}).")
            chunks[k] = str(p)
    if not chunks:
        raise MemtuiError(f"{folder}: no Amber chunks (train_000.jsonl ... train_359.jsonl) in it.")
    return chunks


class _Lines:
    """Uniform draws of whole lines from JSONL files, by byte offsets."""

    def __init__(self, paths: Sequence[str], seq_len: int, vocab: int | None = AMBER_VOCAB):
        self.paths = list(paths)
        self.sizes = file_sizes(self.paths)
        self.seq_len = seq_len
        self.vocab = vocab
        # the shortest record json.dumps can write for seq_len ids: one digit each, ", " between
        self.shortest = len('{"token_ids": []}') + seq_len + 2 * (seq_len - 1)

    def line_at(self, f: int, u: int) -> tuple[int, bytes, int]:
        """(start, text, bytes it occupies with its newline) of the line of file f that holds byte u."""
        lo = max(0, u - _WINDOW)
        hi = min(int(self.sizes[f]), u + _WINDOW)
        data = read_range(self.paths[f], lo, hi - lo)
        rel = u - lo
        start = data.rfind(b"\n", 0, rel) + 1
        end = data.find(b"\n", rel)
        if end < 0 and hi == self.sizes[f]:  # the last line may lack its newline
            end = len(data) - 1 if data.endswith(b"\n") else len(data)
            occupied = len(data) - start
        else:
            occupied = end + 1 - start
        if (start == 0 and lo > 0) or end < 0:
            raise MemtuiError(f"{clean(self.paths[f], 160)}: a line near byte {u} is longer than {_WINDOW} bytes.")
        return lo + start, data[start:end], occupied

    def draw(self, files: Sequence[int], n: int, rng: np.random.Generator, taken: set) -> list[tuple[int, int, dict]]:
        """n distinct lines, uniform over all lines of ``files``: (file, byte offset, record)."""
        files = list(files)
        weights = self.sizes[files] / self.sizes[files].sum()
        out, tries = [], 0
        while len(out) < n:
            tries += 1
            if tries > 100 * n + 1000:
                raise MemtuiError(f"could not draw {n} distinct records from {len(files)} file(s); they are too few.")
            f = files[rng.choice(len(files), p=weights)]
            start, text, occupied = self.line_at(f, int(rng.integers(0, self.sizes[f])))
            if not text.strip() or rng.random() >= self.shortest / occupied:
                continue
            if (f, start) in taken:
                continue
            record = self._record(f, start, text)
            taken.add((f, start))
            out.append((f, start, record))
        return out

    def _record(self, f, start, text) -> dict:
        """The record of the line at byte ``start`` of file f: JSON with ``seq_len`` token ids in the vocabulary."""
        where = self._where(f, start)
        record = load_json(text, where)
        if not isinstance(record, dict):
            raise MemtuiError(f"{where}: not a JSON record with 'token_ids'.")
        record["token_ids"] = token_ids(record.get("token_ids"), where, self.seq_len, self.vocab)
        return record

    def _where(self, f: int, start: int) -> str:
        """The file and line of a record, for a refusal (local files: the line number, counted only here)."""
        path = self.paths[f]
        if is_url(path):
            return f"{clean(path, 160)}, the line at byte {start}"
        line, done = 1, 0
        with open(path, "rb") as fh:
            while done < start:
                block = fh.read(min(1 << 24, start - done))
                if not block:
                    break
                line += block.count(b"\n")
                done += len(block)
        return f"{clean(path, 160)}, line {line}"


def sample_amber(
    chunks: str | os.PathLike | dict[int, str],
    steps: Sequence[int],
    *,
    k: int = 1,
    m: int = 50,
    n_controls: int = 1000,
    controls: str = "beyond",
    heldout: Sequence[str] | None = None,
    seed: int = 0,
    seq_len: int = AMBER_TOKENS,
    vocab: int | None = AMBER_VOCAB,
) -> SampledOrder:
    """Per cohort of chunks (c_prev, c], k chunks x m lines; controls from chunks after the last panel checkpoint
    ("beyond") or held-out files (``valid/*.jsonl``). Token ids outside [0, ``vocab``) refuse their record."""
    found = find_chunks(chunks) if not isinstance(chunks, dict) else dict(chunks)
    steps = sorted({int(s) for s in steps})
    if not steps or steps[0] < 0 or steps[-1] >= N_CHUNKS:
        raise MemtuiError(f"Amber's checkpoints are 0 .. {N_CHUNKS - 1}; give panel steps in that range.")
    order = sorted(found)
    files = [found[c] for c in order]
    held = list(heldout or [])
    lines = _Lines(files + held, seq_len, vocab)
    later = _control_files(controls, order, steps, len(files), len(held)) if n_controls else None
    rng = np.random.default_rng(seed)
    rows, taken = [], set()
    for a, b, c in _cohorts(steps, -1, N_CHUNKS - 1):
        present = [order.index(x) for x in range(a, b + 1) if x in found]
        if not present:
            raise MemtuiError(f"no chunk of cohort ckpt_{c:03d} (train_{a:03d} .. train_{b:03d}) is in the folder.")
        for f in np.sort(rng.choice(present, size=min(k, len(present)), replace=False)):
            rows += [(c, *line) for line in lines.draw([int(f)], m, rng, taken)]
    if n_controls:
        rows += [(NEVER, *line) for line in lines.draw(later, n_controls, rng, taken)]
    treat = np.array([r[0] for r in rows], dtype=np.int64)
    file = np.array([r[1] for r in rows], dtype=np.int32)
    offset = np.array([r[2] for r in rows], dtype=np.int64)
    chunk_of = np.array(order + [-1] * len(held))
    source = [str(r[3].get("source", "")) for r in rows]
    # ids: chunk (or held-out file, after the chunks) and byte offset
    code = np.where(chunk_of[file] >= 0, chunk_of[file], N_CHUNKS + file - len(files))
    return SampledOrder(
        ids=(code.astype(np.int64) << ID_SHIFT) | offset,
        treatment=treat,
        tokens=np.array([r[3]["token_ids"] for r in rows], dtype=np.int64),
        stage=np.zeros(len(rows), dtype=np.int16),
        file=file,
        offset=offset,
        position=np.where(treat == NEVER, -1, chunk_of[file]),
        stage_names=["amber"],
        files=[files + held],
        steps=steps,
        revisions=[amber_revision(s) for s in steps],
        counts={"amber/treated": int((treat != NEVER).sum()), "amber/controls": int((treat == NEVER).sum())},
        notes=[
            "treatment = the chunk's checkpoint (order within a chunk unknown); up to ~0.05% of a chunk's last lines "
            "may be untrained (the trainer loads its first 1,706,976)"
        ],
        source=np.array(source),  # Amber's per-record source (c4, arxiv, ...): the covariates' domain
    )


def _control_files(controls: str, order: list[int], steps: list[int], n_files: int, n_held: int) -> list[int]:
    """Which of the files (chunks in ``order``, then held-out files) controls are drawn from: the chunks after the
    last panel checkpoint ("beyond") or the held-out files."""
    if controls == "beyond":
        later = [i for i, x in enumerate(order) if x > steps[-1]]
        if not later:
            raise MemtuiError(
                f"no chunk after ckpt_{steps[-1]:03d} is in the folder for controls; add later chunks or give "
                "held-out files."
            )
    elif controls == "held-out":
        if not n_held:
            raise MemtuiError("held-out controls need held-out files (valid/*.jsonl).")
        later = list(range(n_files, n_files + n_held))
    else:
        raise MemtuiError(f"controls must be 'beyond' or 'held-out', not '{controls}'.")
    return later


def remote_chunks(base_url: str, numbers: Sequence[int]) -> dict[int, str]:
    """Chunk files on a server laid out as the hub dataset (``{base}/train_{k:03d}.jsonl``)."""
    if not is_url(base_url):
        raise MemtuiError(f"{clean(base_url, 160)} is not a URL.")
    return {int(k): f"{base_url.rstrip('/')}/train_{int(k):03d}.jsonl" for k in numbers}
