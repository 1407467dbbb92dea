"""The hub names memtui builds for the published suites, pinned to the names the hub lists (docs/suites.md says where
each was confirmed): PolyPythia's index maps in EleutherAI/pile-preshuffled-seeds, the suites' revision names and
Hubble's checkpoint steps."""

from __future__ import annotations

import pytest

from memtui.core.errors import MemtuiError
from memtui.orders.hubble import hubble_checkpoints
from memtui.orders.revisions import PRESETS, revision_name
from memtui.orders.suites import polypythia_map_files, polypythia_maps

# as the dataset's file listing shows them (huggingface.co/datasets/EleutherAI/pile-preshuffled-seeds/tree/main/seedN)
LISTED = {
    0: "seed0/pile_20B_tokenizer_text_document_train_0_indexmap_147164160ns_2048sl_1234s",
    1: "seed1/pile_20B_tokenizer_text_document_train_0_indexmap_147164160ns_2048sl_1s",
    3: "seed3/pile_20B_tokenizer_text_document_train_0_indexmap_147164160ns_2048sl_3s",
    7: "seed7/pile_20B_tokenizer_text_document_train_0_indexmap_147164160ns_2048sl_7s",
}


@pytest.mark.parametrize("seed", sorted(LISTED))
def test_polypythia_map_names_are_the_hubs(seed):
    assert polypythia_map_files(seed) == [
        f"{LISTED[seed]}_doc_idx.npy",
        f"{LISTED[seed]}_sample_idx.npy",
        f"{LISTED[seed]}_shuffle_idx.npy",
    ]
    root = "https://huggingface.co/datasets/EleutherAI/pile-preshuffled-seeds/resolve/main"
    assert polypythia_maps(root, seed) == f"{root}/{LISTED[seed]}"  # remote: the name itself, no request


def test_a_local_copy_of_the_dataset_is_found_by_the_hubs_names(tmp_path):
    for seed in (0, 3):
        for name in polypythia_map_files(seed):
            (tmp_path / name).parent.mkdir(exist_ok=True)
            (tmp_path / name).write_bytes(b"")
        assert polypythia_maps(tmp_path, seed) == f"{tmp_path}/{LISTED[seed]}"
    with pytest.raises(MemtuiError, match="seeds 0 .. 9"):
        polypythia_map_files(10)


def test_revision_names_and_hubble_steps_are_the_published_ones():
    # PolyPythias and Hubble name their checkpoints stepN (Hubble's last: step48000 at 100B tokens, step238500 at 500B)
    assert [revision_name(PRESETS["polypythia"], s) for s in (0, 512, 143000)] == ["step0", "step512", "step143000"]
    assert [revision_name(PRESETS["hubble"], s) for s in (48000, 238500)] == ["step48000", "step238500"]
    # Hubble's configs: extra_save_iters [0, 1, 4, 16, 64, 256, 512], checkpoint_factor 1000, train_iters 48000
    steps = hubble_checkpoints(48000)
    assert steps[:9] == [0, 1, 4, 16, 64, 256, 512, 1000, 2000] and steps[-1] == 48000 and len(steps) == 7 + 48
    assert hubble_checkpoints(238500)[-2:] == [238000, 238500]
