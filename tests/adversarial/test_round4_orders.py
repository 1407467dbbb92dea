"""Issue 28 (the data-order seam), adversarial: a Hubble record's ``perturbation_file`` is a dataset's file name in
the ``--examples`` folder, never a path. A name holding ``..``, a path separator (an absolute path included) or a NUL
would be joined under ``--examples`` and read from wherever it points: refused in one line, nothing written.
"""

from __future__ import annotations

import json
import warnings
from collections import OrderedDict

import numpy as np
import pytest

from .conftest import assert_refused

SEQ, BATCH = 16, 4


def _megatron():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpt = pytest.importorskip("megatron.core.datasets.gpt_dataset", reason="megatron-core is not installed")
        from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
        from megatron.core.datasets.utils import Split

        pytest.importorskip("megatron.core.datasets.helpers_cpp", reason="megatron-core's C++ helpers are not built")
    return torch, gpt, IndexedDataset, IndexedDatasetBuilder, Split


class _Tokenizer:  # what GPTDataset asks of a tokenizer
    vocab_size, eod, pad = 1000, 999, 998
    unique_identifiers = OrderedDict(cls="memtui-round4-orders")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A Megatron corpus and its maps (written by megatron-core), and an example dataset holding the first tokens of
    the sequence at position 13: a seq_start insertion there reads it from the examples folder."""
    torch, gpt, IndexedDataset, IndexedDatasetBuilder, Split = _megatron()
    root = tmp_path_factory.mktemp("hubble")
    prefix = str(root / "corpus_text_document")
    rng = np.random.default_rng(3)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for n in rng.integers(1, 3 * SEQ, size=60):
        builder.add_document(torch.from_numpy(rng.integers(0, 990, n)), [int(n)])
    builder.finalize(prefix + ".idx")
    data = IndexedDataset(prefix)
    cfg = gpt.GPTDatasetConfig(random_seed=1, sequence_length=SEQ, blend=([prefix], None), split="100,0,0",
                               path_to_cache=str(root / "cache"), tokenizer=_Tokenizer(), reset_position_ids=False,
                               reset_attention_mask=False, eod_mask_loss=False)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = gpt.GPTDataset(data, prefix, np.arange(len(data), dtype=np.int32),
                            int(2.5 * data.sequence_lengths.sum() // SEQ), Split.train, cfg)  # fmt: skip
    maps = str(root / "cache" / f"{ds.unique_description_hash}-GPTDataset-train")
    from memtui.orders.neox import IndexedTokens, IndexMaps, NeoxOrder

    first = NeoxOrder(IndexedTokens(prefix), IndexMaps(maps), BATCH).sequence(13)[:5]
    # the same dataset in the examples folder, in a folder beside it and in a subfolder of it
    for folder in (root / "examples", root / "outside", root / "examples" / "sub"):
        folder.mkdir(parents=True, exist_ok=True)
        eb = IndexedDatasetBuilder(str(folder / "passages") + ".bin", dtype=np.uint16)
        eb.add_document(torch.from_numpy(np.asarray(first, dtype=np.int64)), [5])
        eb.finalize(str(folder / "passages") + ".idx")
    return {"root": root, "prefix": prefix, "maps": maps}


def _build(cli, corpus, out, perturbation_file: str):
    info = out.parent / "x_perturbation_info.json"
    info.write_text(json.dumps({"perturbation_file": perturbation_file, "perturbation_idx": 0, "pt_loc": 13}) + "\n")
    return cli("build", out, "--order", "neox", "--tokens", corpus["prefix"], "--index-maps", corpus["maps"],
               "--batch-size", BATCH, "--seq-len", SEQ + 1, "--preset", "hubble", "--perturbation-info", info,
               "--examples", corpus["root"] / "examples", "--steps", "0,5,10,20", "-k", 1, "-m", 2,
               "--n-validation", 5, "--train-steps", 25)  # fmt: skip


def test_a_perturbation_file_naming_a_dataset_in_the_examples_folder_is_read(tmp_path, cli, corpus):
    code, _, err = _build(cli, corpus, tmp_path / "ok.h5", "passages")
    assert code == 0, err
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(tmp_path / "ok.h5")
    assert "passages" in panel.provenance["source"].tolist()


@pytest.mark.parametrize(
    "name",
    [
        "../outside/passages",  # a dataset beside the examples folder, reached by ..
        "sub/passages",  # a path separator, even inside the folder: a record names a file, not a path
        "sub\\passages",
        "..",
        "passages\x00.idx",
        "ABSOLUTE",  # the absolute path of the dataset beside the folder: joining would discard --examples
    ],
)
def test_a_perturbation_file_that_is_a_path_is_refused_in_one_line(tmp_path, cli, corpus, name):
    if name == "ABSOLUTE":
        name = str(corpus["root"] / "outside" / "passages")
    out = tmp_path / "p.h5"
    err = assert_refused(_build(cli, corpus, out, name), "perturbation_file")
    assert "no path separators" in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["x_perturbation_info.json"]
