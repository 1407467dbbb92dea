"""Hubble's inserted data: ``*_perturbation_info.json`` read against the training order it was inserted into.

The file (allegro-lab/hubble ``scripts/perturbation_utils/perturb_hubble.py``) is JSON Lines: one object per inserted
copy, written while the copies are overwritten into the tokenised corpus at training positions drawn once:

- ``perturbation_file`` / ``perturbation_idx``: which perturbation dataset and which of its entries (an example
  inserted d times appears d times in its dataset, so d records carry it);
- ``pt_loc``: the training position (sequence ``i`` of the order) the copy was written into; ``pt_shuffle_idx`` =
  ``shuffle_idx[pt_loc]`` and ``doc_index_f/l``, ``offset_f/l`` = that sample's ``sample_idx`` rows;
- with ``--injection_loc seq_shuffle`` (the released models): ``pt_injection_pos``, ``pt_window_offset``,
  ``pt_injection_len`` and ``orig_doc_seq_sizes`` say where inside the sequence the example sits:
  it starts at ``sum(orig_doc_seq_sizes[:pos]) - window_offset`` (0 when pos is 0) and is ``pt_injection_len`` long.
  With ``seq_start`` the example overwrote the start of the sequence and its length is only in its dataset.

An instance here is one inserted example: its tokens (read from the perturbed corpus through the maps, or from the
perturbation datasets), its duplication count (the number of copies), the training steps of every copy, and its
treatment: the first checkpoint that has seen its first copy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.orders.neox import IndexedTokens, NeoxOrder, cohort
from memtui.orders.records import load_json, whole

REQUIRED = ("perturbation_file", "perturbation_idx", "pt_loc")


@dataclass(frozen=True)
class Insertion:
    file: str
    index: int
    position: int  # pt_loc: the training position the copy was written into
    shuffle: int | None
    sample: tuple[int, int, int, int] | None  # doc_index_f, offset_f, doc_index_l, offset_l
    start: int | None  # where the example starts inside the sequence (None: unknown, seq_start insertion)
    length: int | None


def read_perturbation_info(path: str | os.PathLike) -> list[Insertion]:
    """Every record of a Hubble ``perturbation_info.json`` (JSON Lines; a JSON list is accepted too)."""
    path = input_file(path, "perturbation info file")
    text = path.read_bytes()
    if text.lstrip().startswith(b"["):
        records = load_json(text, str(path), "a JSON list of perturbation records")
        lines = list(range(1, len(records) + 1)) if isinstance(records, list) else []
        where = f"{path}, record"
    else:
        numbered = [(n, x) for n, x in enumerate(text.splitlines(), 1) if x.strip()]
        records = [load_json(x, f"{path}, line {n}") for n, x in numbered]
        lines = [n for n, _ in numbered]
        where = f"{path}, line"
    out = []
    for n, r in zip(lines, records, strict=True):
        at = f"{where} {n}"
        if not isinstance(r, dict) or any(k not in r for k in REQUIRED):
            raise MemtuiError(f"{at} lacks {', '.join(REQUIRED)}.")
        out.append(_insertion(r, at))
    if not out:
        raise MemtuiError(f"{path}: no records.")
    return out


def _insertion(r: dict, at: str) -> Insertion:
    """One record's fields, each a whole number (not 47.9, ``true`` or text) and positions >= 0."""
    position = whole(r["pt_loc"], at, "pt_loc")
    start = length = None
    if "pt_injection_len" in r:
        pos = whole(r.get("pt_injection_pos", 0), at, "pt_injection_pos")
        window = whole(r.get("pt_window_offset", 0), at, "pt_window_offset")
        sizes = r.get("orig_doc_seq_sizes", [])
        if not isinstance(sizes, list):
            raise MemtuiError(f"{at}: orig_doc_seq_sizes must be a list of whole numbers.")
        sizes = [whole(s, at, "orig_doc_seq_sizes") for s in sizes]
        start = (sum(sizes[:pos]) if pos > 0 else 0) - window
        length = whole(r["pt_injection_len"], at, "pt_injection_len", minimum=1)
        if start < 0:
            raise MemtuiError(f"{at}: the example starts before its sequence (pt_window_offset {window}).")
    sample = None
    if all(k in r for k in ("doc_index_f", "offset_f", "doc_index_l", "offset_l")):
        sample = tuple(whole(r[k], at, k) for k in ("doc_index_f", "offset_f", "doc_index_l", "offset_l"))
    shuffle = whole(r["pt_shuffle_idx"], at, "pt_shuffle_idx") if "pt_shuffle_idx" in r else None
    index = whole(r["perturbation_idx"], at, "perturbation_idx")
    if not isinstance(r["perturbation_file"], str) or not r["perturbation_file"]:
        raise MemtuiError(f"{at}: perturbation_file must name the perturbation dataset.")
    return Insertion(str(r["perturbation_file"]), index, position, shuffle, sample, start, length)


@dataclass(frozen=True)
class InsertedInstances:
    """One row per distinct inserted example (in order of first insertion)."""

    first_position: np.ndarray  # training position of the first copy (the panel's id)
    treatment: np.ndarray  # first checkpoint that has seen the first copy (NEVER past the last checkpoint)
    duplicates: np.ndarray  # copies inserted
    steps: list[np.ndarray]  # training step of every copy, sorted
    files: list[str]
    tokens: list[np.ndarray]  # the example's tokens


def hubble_instances(
    order: NeoxOrder,
    records: list[Insertion],
    *,
    checkpoints,
    examples: str | os.PathLike | None = None,
) -> InsertedInstances:
    """Group the inserted copies by their example's tokens; check every record against the order's maps.

    ``examples``: the folder of tokenised perturbation datasets (``FILE.idx``/``FILE.bin``), needed only when records
    do not give the example's place in the sequence (``seq_start`` insertions).
    """
    positions = np.array([r.position for r in records], dtype=np.int64)
    samples = order.samples(positions)  # refuses positions outside the maps
    rows0 = order.maps.sample_idx.take(samples).astype(np.int64)
    rows1 = order.maps.sample_idx.take(samples + 1).astype(np.int64)
    for k, r in enumerate(records):
        if (r.shuffle is not None and r.shuffle != samples[k]) or (
            r.sample is not None and r.sample != (rows0[k, 0], rows0[k, 1], rows1[k, 0], rows1[k, 1])
        ):
            raise MemtuiError(
                f"perturbation record {k + 1} (pt_loc {r.position}) disagrees with the index maps at "
                f"{order.maps.prefix}; give the maps the perturbed run was trained with."
            )
    sequences = order.tokens(positions)
    datasets: dict[str, IndexedTokens] = {}
    groups: dict[tuple[str, bytes], list[int]] = {}
    example_tokens: dict[tuple[str, bytes], np.ndarray] = {}
    for k, r in enumerate(records):
        if r.start is not None:
            if r.start + r.length > sequences.shape[1]:
                raise MemtuiError(f"perturbation record {k + 1}: the example runs past its sequence's end.")
            tokens = sequences[k, r.start : r.start + r.length]
        else:
            if examples is None:
                raise MemtuiError(
                    f"perturbation record {k + 1} does not say where its example sits (a seq_start insertion); "
                    "give the folder of tokenised perturbation datasets."
                )
            if r.file not in datasets:
                datasets[r.file] = IndexedTokens(_example_path(examples, r.file, k + 1))
            tokens = datasets[r.file].document(r.index)
            if not np.array_equal(sequences[k, : len(tokens)], tokens):
                raise MemtuiError(
                    f"perturbation record {k + 1}: the corpus at pt_loc {r.position} does not start with example "
                    f"{r.index} of {r.file}; is the token file the perturbed corpus?"
                )
        key = (r.file, np.asarray(tokens, dtype=np.int64).tobytes())
        groups.setdefault(key, []).append(k)
        example_tokens.setdefault(key, np.asarray(tokens, dtype=np.int64))
    keys = sorted(groups, key=lambda key: positions[groups[key]].min())
    first = np.array([positions[groups[key]].min() for key in keys], dtype=np.int64)
    steps = [np.sort(order.step(positions[groups[key]])) for key in keys]
    return InsertedInstances(
        first_position=first,
        treatment=cohort(order.step(first), checkpoints),
        duplicates=np.array([len(groups[key]) for key in keys], dtype=np.int64),
        steps=steps,
        files=[key[0] for key in keys],
        tokens=[example_tokens[key] for key in keys],
    )


def _example_path(examples: str | os.PathLike, name: str, record: int) -> Path:
    """The perturbation dataset ``name`` inside the ``examples`` folder: a name from the record is a file name, never a
    path, so that a record cannot point the build at a file outside the folder the user gave."""
    separators = {"/", "\\", os.sep, os.altsep or "/", "\x00"}
    if name in (".", "..") or ".." in name or any(c in name for c in separators):
        raise MemtuiError(
            f"perturbation record {record}: perturbation_file {clean(repr(name), 60)} is not a file name in the "
            "examples folder; name the dataset only (no '..', no path separators)."
        )
    return Path(examples) / name


def hubble_checkpoints(last_step: int) -> list[int]:
    """Hubble's saved steps: 0, 1, 4, 16, 64, 256, 512, then every 1000 up to ``last_step``."""
    early = [s for s in (0, 1, 4, 16, 64, 256, 512) if s <= last_step]
    return sorted(set(early + list(range(1000, last_step + 1, 1000)) + [last_step]))
