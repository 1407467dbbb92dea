"""`memtui build --order ...` end to end: panels from the families' data orders, checked against their own libraries.

- neox: a Megatron corpus and index maps written by megatron-core itself (``IndexedDatasetBuilder``, ``GPTDataset``
  for three seeds, documents spanning sequences, several epochs); every instance's tokens equal ``GPTDataset``'s and
  its treatment the checkpoint after ``i // B + 1``; a seed suite's per-seed treatments equal a brute-force walk of
  the library's maps.
- olmo-core: ``ai2-olmo-core``'s ``NumpyFSLDataLoader`` yields the batches; each instance is in the batch of a step
  in its cohort, with the same tokens.
- amber: JSON Lines chunks; each instance is the line at its recorded byte offset, cohort = chunk.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import OrderedDict

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel, read_tokens
from memtui.panel.model import NEVER, PAD

SEQ_LEN, BATCH, PAD_ID = 16, 4, 998


# -- a Megatron replica, written by megatron-core ---------------------------------------------------------------------


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
    vocab_size, eod, pad = 1000, 999, PAD_ID
    unique_identifiers = OrderedDict(cls="memtui-build-test")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    torch, gpt, IndexedDataset, IndexedDatasetBuilder, Split = _megatron()
    root = tmp_path_factory.mktemp("megatron")
    rng = np.random.default_rng(3)
    prefix = str(root / "corpus_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for n in rng.integers(1, 3 * SEQ_LEN, size=60):
        builder.add_document(torch.from_numpy(rng.integers(0, 990, n)), [int(n)])
    builder.finalize(prefix + ".idx")
    corpus = IndexedDataset(prefix)
    n_tokens = int(corpus.sequence_lengths.sum())
    datasets, maps = {}, {}
    for seed in (1234, 1, 2):
        cfg = gpt.GPTDatasetConfig(random_seed=seed, sequence_length=SEQ_LEN, blend=([prefix], None), split="100,0,0",
                                   path_to_cache=str(root / "cache"), tokenizer=_Tokenizer(), reset_position_ids=False,
                                   reset_attention_mask=False, eod_mask_loss=False)  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = gpt.GPTDataset(corpus, prefix, np.arange(len(corpus), dtype=np.int32), int(2.5 * n_tokens // SEQ_LEN),
                                Split.train, cfg)  # fmt: skip
        datasets[seed] = ds
        maps[seed] = str(root / "cache" / f"{ds.unique_description_hash}-GPTDataset-train")
    val = np.random.default_rng(9).integers(0, 990, size=(12, SEQ_LEN + 1))
    np.save(root / "val.npy", val)
    return {"root": root, "prefix": prefix, "datasets": datasets, "maps": maps, "val": root / "val.npy"}


def _library_sequence(ds, i) -> np.ndarray:
    item = ds[int(i)]
    return np.r_[item["tokens"].numpy(), item["labels"].numpy()[-1:]]


def _cohort(step, steps):
    later = [s for s in steps if s >= step]
    return later[0] if later and step >= 1 else NEVER


def _one_line_refusal(cli, tmp_path, *args, expect):
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli("build", *args)
    assert code == 2, (out, err)
    assert expect in err and err.strip().count("\n") == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no panel, nothing half-written


# -- neox -------------------------------------------------------------------------------------------------------------


def test_neox_panel_equals_gptdataset(tmp_path, replica, cli):
    ds, steps, train = replica["datasets"][1], [0, 5, 10, 20], 25
    out = tmp_path / "neox.h5"
    code, text, err = cli("build", out, "--order", "neox", "--tokens", replica["prefix"], "--index-maps",
                          replica["maps"][1], "--batch-size", BATCH, "--seq-len", SEQ_LEN + 1, "--steps", "0,5,10,20",
                          "-k", 2, "-m", 2, "--n-validation", 7, "--train-steps", train, "--seed", 4)  # fmt: skip
    assert code == 0, err
    panel = read_panel(out)
    tokens, lengths = read_tokens(out)
    prov = panel.provenance
    assert {"position", "step", "document", "offset"} <= set(prov)
    treated = panel.treatment != NEVER
    assert treated.sum() == 3 * 4 and (~treated).sum() == 7
    for i in range(panel.n_instances):
        pos = int(prov["position"][i])
        np.testing.assert_array_equal(tokens[i, : lengths[i]], _library_sequence(ds, pos))
        assert prov["step"][i] == pos // BATCH + 1 and panel.source_index[i] == pos
        if treated[i]:
            assert panel.treatment[i] == _cohort(pos // BATCH + 1, steps)
        else:  # beyond controls: ordered after the model's last step
            assert pos // BATCH + 1 > train
        doc, off = int(prov["document"][i]), int(prov["offset"][i])
        first = ds.dataset.get(doc, offset=off, length=1)  # the library's own read of the recorded start
        assert tokens[i, 0] == int(first[0])
    assert panel.attrs["order"] == "neox"
    code, text, _ = cli("info", out)
    assert code == 0 and "per instance: " in text and "position" in text


def _brute_force_full_steps(ds, pieces_of_instance) -> int:
    """When the library's order under a seed had trained (as input tokens) every token of the given pieces."""
    doc_index, sample_index, shuffle_index = ds.document_index, ds.sample_index, ds.shuffle_index
    sizes = ds.dataset.sequence_lengths
    first_step: dict[tuple[int, int], int] = {}
    for i in range(len(shuffle_index)):
        j = int(shuffle_index[i])
        (d0, o0), (d1, o1) = sample_index[j], sample_index[j + 1]
        step = i // BATCH + 1
        owned = []  # (doc, token) pairs this sample trains on as inputs: up to, not including, the next start
        for p in range(int(d0), int(d1) + 1):
            doc = int(doc_index[p])
            lo = int(o0) if p == d0 else 0
            hi = int(o1) if p == d1 else int(sizes[doc])
            owned += [(doc, t) for t in range(lo, hi)]
        for key in owned:
            first_step.setdefault(key, step)
    needed = [first_step.get((d, t), -1) for d, o, n in pieces_of_instance for t in range(o, o + n)]
    return -1 if min(needed) < 0 else max(needed)


def test_neox_seed_suite_treatments_equal_the_library_maps(tmp_path, replica, cli):
    steps = [0, 10, 20, 30, 40]
    out = tmp_path / "suite.h5"
    code, text, err = cli("build", out, "--order", "neox", "--tokens", replica["prefix"], "--index-maps",
                          replica["maps"][1234], "--seeds", f"{replica['maps'][1]},{replica['maps'][2]}",
                          "--batch-size", BATCH, "--steps", ",".join(map(str, steps)), "-k", 2, "-m", 2,
                          "--controls", "validation", "--validation", replica["val"])  # fmt: skip
    assert code == 0, err
    assert "a seed suite: memtui compare" in text
    paths = sorted(tmp_path.glob("suite-seed*.h5"))
    # megatron-core's map names carry no seed (GPT-NeoX's end in _{seed}s): the seeds are numbered as given
    assert [p.name for p in paths] == ["suite-seed0.h5", "suite-seed1.h5", "suite-seed2.h5"]
    panels = {p.attrs["seed"]: p for p in map(read_panel, paths)}
    home = panels["seed0"]
    from memtui.orders.neox import IndexedTokens, IndexMaps, NeoxOrder, owned_pieces

    order = NeoxOrder(IndexedTokens(replica["prefix"]), IndexMaps(replica["maps"][1234]), BATCH)
    for name, seed in (("seed0", 1234), ("seed1", 1), ("seed2", 2)):
        p = panels[name]
        np.testing.assert_array_equal(p.ids, home.ids)  # the same instances in every seed's panel
        column = p.provenance_attrs["seeds"].split(",").index(name)
        for i in np.flatnonzero(home.provenance["position"] >= 0):
            pos = int(home.provenance["position"][i])
            pc = owned_pieces(order, [pos])
            pieces = list(zip(pc.document.tolist(), pc.offset.tolist(), pc.length.tolist(), strict=True))
            full = _brute_force_full_steps(replica["datasets"][seed], pieces)
            assert p.provenance["seed_steps"][i, column] == full
            assert p.treatment[i] == _cohort(full, steps)
        assert (p.treatment[home.provenance["position"] < 0] == NEVER).all()
    assert not np.array_equal(panels["seed1"].treatment, home.treatment)  # data order moves the treatment

    # the suite opens as one: instances matched by id, each seed's own treatment kept
    from memtui.estimation.suite_load import load_suite

    for path in paths:  # scores for every checkpoint, so that the suite has completed checkpoints
        with PanelWriter(path) as w:
            rng = np.random.default_rng(0)
            for c in range(len(steps)):
                w.write_checkpoint(c, {"loglik": rng.normal(size=w.panel.n_instances)})
    suite = load_suite(paths)
    assert sorted(suite.names) == ["seed0", "seed1", "seed2"] and "seed suite" in suite.notes[0]
    for name, p in zip(suite.names, suite.panels, strict=True):
        np.testing.assert_array_equal(p.treatment, panels[name].treatment)
    code, text, err = cli("compare", *paths, "-m", "loglik", "-B", 0)
    assert code == 0, err
    assert "between-seed spread" in text


def test_polypythia_preset_finds_the_seed_maps(tmp_path, replica, cli):
    import shutil

    root = tmp_path / "seeds"
    (root / "seed1").mkdir(parents=True)
    for suffix in ("_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"):  # GPT-NeoX's names for the same maps
        megatron = {"_doc_idx.npy": "-document_index.npy", "_sample_idx.npy": "-sample_index.npy",
                    "_shuffle_idx.npy": "-shuffle_index.npy"}[suffix]  # fmt: skip
        shutil.copy(replica["maps"][1] + megatron, root / "seed1" / f"x_train_indexmap_9ns_16sl_1s{suffix}")
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = cli("build", out / "pp.h5", "--order", "neox", "--preset", "polypythia", "--seed", 1,
                       "--tokens", replica["prefix"], "--index-maps", root, "--batch-size", BATCH, "--seq-len",
                       SEQ_LEN + 1, "--steps", "0,8,16", "--train-steps", 20, "-k", 1, "-m", 3,
                       "--n-validation", 4)  # fmt: skip
    assert code == 0, err
    panel = read_panel(out / "pp.h5")
    assert panel.attrs["preset"] == "polypythia"
    tokens, _ = read_tokens(out / "pp.h5")
    for row, pos in zip(tokens, panel.provenance["position"], strict=True):
        np.testing.assert_array_equal(row, _library_sequence(replica["datasets"][1], pos))


def test_neox_bad_inputs_are_one_line_and_write_nothing(tmp_path, replica, cli):
    out = tmp_path / "out"
    out.mkdir()
    base = ["--order", "neox", "--tokens", replica["prefix"], "--batch-size", BATCH]
    maps = ["--index-maps", replica["maps"][1]]
    cases = [
        ([*base], "needs --index-maps"),
        ([*base, "--index-maps", str(tmp_path / "nothing")], "no index maps"),
        (["--order", "neox", "--tokens", str(tmp_path / "nope"), "--batch-size", BATCH, *maps], "no such index file"),
        ([*base, *maps, "--seeds", replica["maps"][2], "--steps", "0,5"], "needs --controls validation"),
        ([*base, *maps, "--steps", "0,5", "--seq-len", 99], "not seq_len + 1"),
        ([*base, *maps, "--steps", "0,5,100000"], "needs 400000 ordered sequences"),
        ([*base, *maps, "--steps", "0,5", "--controls", "validation"], "needs --validation"),
        ([*base, *maps, "--steps", "0,5", "--heldout", "x"], "--heldout belongs"),
        ([*base, *maps, "--steps", "0,5", "--n-validation", 0], "--n-validation must be >= 1"),
        (["--order", "neox", "--tokens", replica["prefix"], *maps], "needs --batch-size"),
        ([*base, *maps, "--config", "c.yaml"], "--config belongs to --order olmo"),
    ]
    for args, expect in cases:
        _one_line_refusal(cli, out, out / "p.h5", *args, expect=expect)
    # a seed suite whose second seed's maps are missing: no panel of the suite is written
    args = [*base, *maps, "--seeds", str(tmp_path / "missing"), "--controls", "validation", "--validation",
            replica["val"], "--steps", "0,5"]  # fmt: skip
    _one_line_refusal(cli, out, out / "s.h5", *args, expect="no index maps")


# -- olmo-core --------------------------------------------------------------------------------------------------------

L = 16


def _token_files(folder, lengths, seed):
    rng = np.random.default_rng(seed)
    paths = []
    for i, n in enumerate(lengths):
        path = folder / f"part-{i:02d}.npy"
        rng.integers(0, 50, size=n).astype(np.uint32).tofile(path)  # OLMo's headerless token file
        paths.append(str(path))
    return paths


def _olmo_core_run(tmp_path, paths, *, seed, batch_tokens):
    pytest.importorskip("olmo_core", reason="ai2-olmo-core is in the test extra")
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.data.types import NumpyDatasetDType

    ds_cfg = NumpyFSLDatasetConfig(paths=paths, sequence_length=L, dtype=NumpyDatasetDType.uint32,
                                   tokenizer=TokenizerConfig(vocab_size=100, eos_token_id=1, pad_token_id=0),
                                   work_dir=str(tmp_path / "work"))  # fmt: skip
    dl_cfg = NumpyDataLoaderConfig(global_batch_size=batch_tokens, seed=seed)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"run_name": "run", "dataset": ds_cfg.as_config_dict(),
                                  "data_loader": dl_cfg.as_config_dict()}))  # fmt: skip
    loader = dl_cfg.build(ds_cfg.build())
    loader.reshuffle(epoch=1)
    return config, list(loader)


def test_olmo_core_panel_equals_the_library_batches(tmp_path, cli):
    paths = _token_files(tmp_path, [50 * L + 5, 37 * L, 91 * L + 15], seed=1)
    config, batches = _olmo_core_run(tmp_path, paths, seed=34521, batch_tokens=8 * L)
    steps = [0, 3, 7, 12]
    out = tmp_path / "olmo.h5"
    code, _, err = cli("build", out, "--order", "olmo-core", "--config", config, "--steps", "0,3,7,12", "-k", 2,
                       "-m", 3, "--n-validation", 20, "--seed", 5, "--stage-name", "stage1")  # fmt: skip
    assert code == 0, err
    panel = read_panel(out)
    tokens, _ = read_tokens(out)
    prov = panel.provenance
    trained = {}
    for i, b in enumerate(batches[: max(steps)]):
        for row, idx in enumerate(b["index"].tolist()):
            trained[idx] = (i + 1, b["input_ids"][row].numpy())
    treated = panel.treatment != NEVER
    assert treated.sum() == 3 * 2 * 3 and (~treated).sum() == 20
    starts = np.cumsum([0, 50, 37, 91])
    for i in range(panel.n_instances):
        f, off = int(prov["file"][i]), int(prov["offset"][i])
        assert prov["file_names"][f] == paths[f]
        np.testing.assert_array_equal(tokens[i], np.fromfile(paths[f], dtype=np.uint32)[off : off + L])
        inst = int(starts[f] + off // L)  # the library's instance number
        if treated[i]:
            step, lib_tokens = trained[inst]
            np.testing.assert_array_equal(tokens[i], lib_tokens)
            assert panel.treatment[i] == _cohort(step, steps) and prov["position"][i] // 8 + 1 == step
        else:
            assert inst not in trained
    assert set(prov["stage"].tolist()) == {0} and panel.stage_names == ["stage1"]
    assert panel.attrs["tokens_per_step"] == str(8 * L)
    # extraction's revision preset reads the panel's tokens per step
    import argparse

    from memtui.extract.options import ExtractOptions

    p = argparse.ArgumentParser()
    ExtractOptions.add_worker_arguments(p)
    args = p.parse_args(["--model", "m", "--revisions", "olmo2-stage1"])
    args.panel = out
    from memtui.orders.revisions import revision_name

    template = ExtractOptions.from_args(args).validate().revision_template
    assert revision_name(template, 7) == f"stage1-step7-tokens{math.ceil(7 * 8 * L / 1e9)}B"
    code, _, err = cli("info", out)
    assert code == 0


def test_olmo_bad_configs_are_one_line(tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    paths = _token_files(tmp_path, [30 * L], seed=2)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"dataset": {"paths": paths, "sequence_length": L, "dtype": "uint32"},
                                  "data_loader": {"global_batch_size": 4 * L + 3, "seed": 1}}))  # fmt: skip
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"dataset": {"paths": paths, "sequence_length": L, "dtype": "uint32"},
                                "data_loader": {"global_batch_size": 4 * L, "seed": 1}}))  # fmt: skip
    cases = [
        (["--order", "olmo-core"], "needs --config"),
        (["--order", "olmo-core", "--config", tmp_path / "none.json", "--steps", "0,2"], "no such config file"),
        (["--order", "olmo-core", "--config", config, "--steps", "0,2"], "not a whole number of 16-token"),
        (["--order", "olmo-core", "--config", good, "--steps", "0,2", "--batch-size", 4], "drop --batch-size"),
        (["--order", "olmo-core", "--config", good, "--steps", "0,2", "--controls", "validation"], "--heldout"),
        (["--order", "olmo-core", "--config", good, "--steps", "0,7"], "every instance of the order is trained"),
        (["--order", "olmo-core", "--config", good, "--epoch", 2, "--steps", "0,2"], "later epoch"),
    ]
    for args, expect in cases:
        _one_line_refusal(cli, out, out / "p.h5", *args, expect=expect)


# -- amber ------------------------------------------------------------------------------------------------------------

T = 32


def _chunks(folder, numbers, lines=20):
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for k in numbers:
        with open(folder / f"train_{k:03d}.jsonl", "w") as f:
            for _ in range(lines):
                ids = rng.integers(0, 32000, size=T).tolist()
                f.write(json.dumps({"token_ids": ids, "source": str(rng.choice(["c4", "arxiv"]))}) + "\n")
    return folder


def test_amber_panel_holds_the_lines_of_its_chunks(tmp_path, cli):
    folder = _chunks(tmp_path / "train", range(10))
    out = tmp_path / "amber.h5"
    code, _, err = cli("build", out, "--order", "amber", "--chunks", folder, "--steps", "0,3,6", "-k", 2, "-m", 3,
                       "--n-validation", 8, "--seq-len", T)  # fmt: skip
    assert code == 0, err
    panel = read_panel(out)
    tokens, _ = read_tokens(out)
    prov = panel.provenance
    assert panel.revisions == ["ckpt_000", "ckpt_003", "ckpt_006"]
    for i in range(panel.n_instances):
        path = prov["file_names"][int(prov["file"][i])]
        with open(path, "rb") as f:
            f.seek(int(prov["offset"][i]))
            record = json.loads(f.readline())
        np.testing.assert_array_equal(tokens[i], record["token_ids"])
        assert prov["source"][i] == record["source"]
        chunk = int(path.rsplit("_", 1)[1].split(".")[0])
        # chunk k is trained before ckpt_k: the first panel checkpoint at or after k (chunk 0: ckpt_000)
        assert panel.treatment[i] == (min(s for s in (0, 3, 6) if s >= chunk) if chunk <= 6 else NEVER)
    assert (panel.treatment == NEVER).sum() == 8
    _one_line_refusal(cli, tmp_path, tmp_path / "x.h5", "--order", "amber", "--chunks", folder, expect="--steps")
    _one_line_refusal(cli, tmp_path, tmp_path / "x.h5", "--order", "amber", "--chunks", folder, "--steps", "0,9",
                      "--seq-len", T, expect="no chunk after ckpt_009")  # fmt: skip
    _one_line_refusal(cli, tmp_path, tmp_path / "x.h5", "--order", "amber", "--chunks", tmp_path / "none",
                      "--steps", "0,3", expect="no such folder")  # fmt: skip


# -- the panel format and the estimator -------------------------------------------------------------------------------


def _panel(path, **kw):
    rng = np.random.default_rng(0)
    n, steps = 40, [0, 1, 2, 3]
    treat = np.repeat([1, 2, 3, NEVER], 10)
    y = rng.normal(size=(n, 4)) + (np.arange(4)[None, :] >= treat[:, None]) * (treat[:, None] > 0)
    return create_panel(path, ids=np.arange(n), treatment=treat, steps=steps, values={"loglik": y}, **kw)


def test_provenance_reads_back_and_older_panels_have_none(tmp_path, cli):
    old = read_panel(_panel(tmp_path / "old.h5"))
    assert old.provenance == {} and old.provenance_attrs == {} and old.stage_names == []
    prov = {"position": np.arange(40) * 3, "source": np.array(["c4", "wiki"] * 20), "seed_steps": np.ones((40, 3), int),
            "stage": np.zeros(40, int), "stage_names": np.array(["stage1"])}  # fmt: skip
    p = read_panel(_panel(tmp_path / "new.h5", provenance=prov, provenance_attrs={"seeds": "seed0,seed1,seed2"}))
    np.testing.assert_array_equal(p.provenance["position"], prov["position"])
    assert list(p.provenance["source"][:2]) == ["c4", "wiki"] and p.provenance["seed_steps"].shape == (40, 3)
    assert p.provenance_attrs["seeds"] == "seed0,seed1,seed2" and p.stage_names == ["stage1"]
    code, text, _ = cli("info", tmp_path / "new.h5")
    assert code == 0 and "stages stage1" in text and "seed suite seed0,seed1,seed2" in text
    with pytest.raises(MemtuiError, match="first axis must be the 40 instances"):
        _panel(tmp_path / "bad.h5", provenance={"position": np.arange(3)})
    assert not (tmp_path / "bad.h5").exists()


def test_instances_of_two_stages_are_not_estimated_together(tmp_path, cli):
    prov = {"stage": np.r_[np.zeros(20, int), np.ones(20, int)], "stage_names": np.array(["stage1", "stage2"])}
    path = _panel(tmp_path / "staged.h5", provenance=prov)
    code, _, err = cli("estimate", path, "-B", 0)
    assert code == 2 and "2 training stages (stage1, stage2)" in err and err.strip().count("\n") == 0
    one = _panel(tmp_path / "one.h5", provenance={"stage": np.zeros(40, int), "stage_names": np.array(["stage2"])})
    code, _, err = cli("estimate", one, "-B", 0)
    assert code == 0, err


def test_revision_presets_name_the_hub_branches():
    from memtui.orders.revisions import preset_template, revision_name

    assert revision_name(preset_template("pythia"), 143000) == "step143000"
    assert revision_name(preset_template("amber"), 5) == "ckpt_005"
    olmo1_1b = preset_template("olmo1", 2048 * 2048)  # allenai/OLMo-1B's branches round to the nearest
    assert [revision_name(olmo1_1b, s) for s in (20000, 100000, 330000)] == [
        "step20000-tokens84B", "step100000-tokens419B", "step330000-tokens1384B"]  # fmt: skip
    olmo1_7b = preset_template("olmo1", 2160 * 2048)
    assert revision_name(olmo1_7b, 150000) == "step150000-tokens664B"
    olmo2 = preset_template("olmo2-stage1", 1024 * 4096)  # OLMo-2-1124-7B's last stage-1 branch rounds up
    assert revision_name(olmo2, 928646) == "stage1-step928646-tokens3896B"
    with pytest.raises(MemtuiError, match="tokens per step"):
        preset_template("olmo1")
    assert PAD == -1  # rows shorter than the widest are padded as the panel format says
