"""Presets for the published suites: what a user would otherwise have to know about their runs.

- **PolyPythias** (van der Wal et al., ICLR 2025): Pythia's recipe (batch 1024 x 2048 tokens, 143,000 steps,
  checkpoints every 1,000 steps plus the early log-spaced ones) under ten data-order seeds. The seeds' GPT-NeoX maps
  are in ``EleutherAI/pile-preshuffled-seeds`` as ``seed{N}/pile_20B_tokenizer_text_document_train_0_indexmap_
  147164160ns_2048sl_{S}s_{doc,sample,shuffle}_idx.npy`` (S = 1234 for seed 0, Pythia's own order, else N; the
  ``train_0`` is GPT-NeoX's name for the first of ``train_data_paths``), over the Pile's
  ``pile_20B_tokenizer_text_document``. The names were checked against the dataset's file listing (docs/suites.md).
- **Hubble** (allegro-lab, 2025): batch 1024 x 2048 tokens, checkpoints 0, 1, 4, …, 512 and every 1,000 steps.
"""

from __future__ import annotations

import glob
import os

from memtui.core.errors import MemtuiError
from memtui.orders.sources import exists, is_remote

PYTHIA = {"batch_size": 1024, "seq_len": 2049, "train_steps": 143000, "macro": 1000}
HUBBLE = {"batch_size": 1024, "seq_len": 2049}
POLYPYTHIA_SEEDS = range(10)
# GPT-NeoX's ``{data}_{name}_indexmap_{samples}ns_{seq}sl_{seed}s`` with name ``train_0`` (train_data_paths[0]):
# 147,164,160 is the sample count the run asked of its train set (more than 143,000 x 1024), as the hub names it
_MAP_NAME = "pile_20B_tokenizer_text_document_train_0_indexmap_147164160ns_2048sl_{tag}s"
MAP_SUFFIXES = ("_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy")


def polypythia_map_files(seed: int) -> list[str]:
    """The three map files of PolyPythia seed ``seed``, relative to the dataset's top folder, as the hub lists them."""
    if seed not in POLYPYTHIA_SEEDS:
        raise MemtuiError(f"PolyPythias have seeds 0 .. 9 (0 is Pythia's own order), not {seed}.")
    prefix = f"seed{seed}/{_MAP_NAME.format(tag=1234 if seed == 0 else seed)}"
    return [prefix + suffix for suffix in MAP_SUFFIXES]


def polypythia_maps(root: str | os.PathLike, seed: int) -> str:
    """The map prefix of PolyPythia seed ``seed`` under ``root`` (the dataset's top folder, local or remote).

    The expected name is the hub's (:func:`polypythia_map_files`); in a local folder whose files are named
    otherwise, the one ``*_{S}s_doc_idx.npy`` in ``seed{N}/`` is used."""
    tag = 1234 if seed == 0 else seed
    folder = f"{str(root).rstrip('/')}/seed{seed}"
    prefix = f"{str(root).rstrip('/')}/{polypythia_map_files(seed)[0].removesuffix(MAP_SUFFIXES[0])}"
    if is_remote(prefix) or exists(prefix + "_doc_idx.npy"):
        return prefix
    found = sorted(glob.glob(os.path.join(glob.escape(folder), f"*_{tag}s_doc_idx.npy")))
    if len(found) == 1:
        return found[0].removesuffix("_doc_idx.npy")
    if not os.path.isdir(folder):
        raise MemtuiError(f"{folder}: no such folder; --index-maps takes the folder holding seed0/ … seed9/.")
    raise MemtuiError(
        f"{folder}: {len(found)} index maps named *_{tag}s_doc_idx.npy; give the prefix with --index-maps."
    )
