"""Issue 30 (the suites' orders), adversarial: --order pico, --order nanoset and OLMo-core's composable configs fed
bad paths, missing and damaged files, wrong dtypes, empty data, huge and non-finite values and unknown strategies.
Each is refused in one line, exit 2, and nothing is written."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from .conftest import assert_clean_exit, assert_refused

ROW = 2049


def _dolma(root, rows: int = 40, shards: int = 2, seed: int = 0):
    data = root / "data"
    data.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for k in range(shards):
        ids = rng.integers(0, 50000, size=(rows, ROW)).tolist()
        pq.write_table(pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))}),
                       data / f"train-{k:05d}-of-{shards}.parquet")  # fmt: skip
    return root


def _pico(cli, tmp_path, dolma, *extra):
    out = tmp_path / "out.h5"
    result = cli("build", out, "--order", "pico", "--dolma", dolma, "--batch-size", 8, "--steps", "0,2,4",
                 "-k", 1, "-m", 2, "--n-validation", 5, *extra)  # fmt: skip
    return result, out


def _shard(root):
    return root / "data" / "train-00000-of-2.parquet"


PICO_SHARDS = {
    "not a readable parquet shard": lambda p: p.write_bytes(os.urandom(300)),
    "not a readable parquet shard ": lambda p: p.write_bytes(b""),
    "no input_ids column": lambda p: pq.write_table(pa.table({"text": ["a"] * 40}), p),
    "not a list of token ids": lambda p: pq.write_table(pa.table({"input_ids": [[0.5] * ROW] * 40}), p),
    "expected 2049": lambda p: pq.write_table(pa.table({"input_ids": [[1] * 7] * 40}), p),
    "outside the vocabulary": lambda p: pq.write_table(pa.table({"input_ids": [[2**40] * ROW] * 40}), p),
    "outside the vocabulary ": lambda p: pq.write_table(pa.table({"input_ids": [[-3] * ROW] * 40}), p),
}


def _damage_middle(p):
    data = bytearray(p.read_bytes())
    data[100 : len(data) // 2] = b"\xff" * (len(data) // 2 - 100)  # the footer intact, the pages not
    p.write_bytes(bytes(data))


def _truncate(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


PICO_SHARDS["is damaged"] = _damage_middle
PICO_SHARDS["not a readable parquet shard  "] = _truncate


@pytest.mark.parametrize("expect", list(PICO_SHARDS))
def test_pico_damaged_shards(tmp_path, cli, expect):
    root = _dolma(tmp_path / "dolma")
    PICO_SHARDS[expect](_shard(root))
    result, out = _pico(cli, tmp_path, root)
    assert_refused(result, expect.strip())
    assert not out.exists()


def test_pico_paths_and_options(tmp_path, cli):
    root = _dolma(tmp_path / "dolma")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    for dolma, expect in ((tmp_path / "missing", "no such folder"), (tmp_path / "file", "no such folder"),
                          (tmp_path / "empty", "no shards named")):  # fmt: skip
        result, out = _pico(cli, tmp_path, dolma)
        assert_refused(result, expect)
        assert not out.exists()
    for extra, expect in ((["--batch-size", 0], "at least 1"), (["--seq-len", 5], "drop --seq-len"),
                          (["--controls", "validation"], "needs --heldout"),
                          (["--controls", "validation", "--heldout", tmp_path / "fifo"], "not a regular file"),
                          (["--controls", "validation", "--heldout", tmp_path / "file"], "parquet")):  # fmt: skip
        result, out = _pico(cli, tmp_path, root, *extra)
        assert_refused(result, expect)
        assert not out.exists()
    code, _, err = cli("build", tmp_path / "o.h5", "--order", "pico")
    assert_refused((code, "", err), "needs --dolma")


def test_pico_reads_a_folder_with_spaces_and_unicode(tmp_path, cli):
    root = _dolma(tmp_path / "dölma mirror ☃")
    result, out = _pico(cli, tmp_path, root)
    assert_clean_exit(result)
    assert out.exists()


# -- nanoset ---------------------------------------------------------------------------------------------------------


def _nanoset_config(tmp_path, change=None, folders=None):
    if folders is None:
        folders = []
        for name, n in (("a", 30), ("b", 20)):
            d = tmp_path / name
            d.mkdir(exist_ok=True)
            np.random.default_rng(1).integers(0, 900, size=n * 16).astype(np.uint16).tofile(d / "000_x.ds")
            folders.append(str(d))
    cfg = {"tokens": {"sequence_length": 15, "train_steps": 4, "micro_batch_size": 2,
                      "batch_accumulation_per_replica": 1},
           "parallelism": {"dp": 2},
           "data_stages": [{"name": "Stable", "start_training_step": 1,
                            "data": {"dataset": {"dataset_folder": folders, "dataset_weights": [0.6, 0.4],
                                                 "token_size_in_bytes": 2}, "seed": 1234}}]}  # fmt: skip
    if change:
        change(cfg)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _nanoset(cli, tmp_path, config, *extra):
    out = tmp_path / "out.h5"
    result = cli("build", out, "--order", "nanoset", "--config", config, "--steps", "0,1,2", "-k", 1, "-m", 2,
                 "--n-validation", 5, *extra)  # fmt: skip
    return result, out


def _dataset(cfg):
    return cfg["data_stages"][0]["data"]["dataset"]


NANOSET_CONFIGS = {
    "dataset_weights must be 2 non-negative": lambda c: _dataset(c).update(dataset_weights=[float("nan"), 1]),
    "dataset_weights must be 2 non-negative ": lambda c: _dataset(c).update(dataset_weights=[float("inf"), 1]),
    "dataset_weights must be 2 non-negative  ": lambda c: _dataset(c).update(dataset_weights=[-1, 2]),
    "dataset_weights must be 2 non-negative   ": lambda c: _dataset(c).update(dataset_weights=[True, 1]),
    "tokens.train_steps must be": lambda c: c["tokens"].update(train_steps=0),
    "tokens.sequence_length must be": lambda c: c["tokens"].update(sequence_length=1e300),
    "data.seed must be": lambda c: c["data_stages"][0]["data"].update(seed=-1),
    "dp must be": lambda c: c["parallelism"].update(dp="2"),
    "token size 8 bytes": lambda c: _dataset(c).update(token_size_in_bytes=8),
    "dataset_folder must be": lambda c: _dataset(c).update(dataset_folder=[]),
    "no such dataset folder": lambda c: _dataset(c).update(dataset_folder=["/nonexistent/x", "/nonexistent/y"]),
}


@pytest.mark.parametrize("expect", list(NANOSET_CONFIGS))
def test_nanoset_bad_configs(tmp_path, cli, expect):
    result, out = _nanoset(cli, tmp_path, _nanoset_config(tmp_path, NANOSET_CONFIGS[expect]))
    assert_refused(result, expect.strip())
    assert not out.exists()


def test_nanoset_files_and_options(tmp_path, cli):
    good = _nanoset_config(tmp_path)
    cases = [
        (tmp_path / "missing.yaml", [], "no such"),
        (tmp_path, [], "folder"),
        (good, ["--stage-name", "Decay"], "no data stage named Decay"),
        (good, ["--controls", "validation"], "needs --heldout"),
        (good, ["--batch-size", 4], "drop --batch-size"),
    ]
    every = _nanoset_config(tmp_path, lambda c: c["tokens"].update(train_steps=13))  # 13 x 4 samples: all 50 trained
    cases.append((every, ["--steps", "0,13"], "use held-out controls"))
    deep = tmp_path / "deep.yaml"
    deep.write_text("a:\n" + "[" * 100_000 + "]" * 100_000)
    cases.append((deep, [], "not a readable YAML config"))
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    cases.append((listing, [], "expected a training config"))
    for config, extra, expect in cases:
        result, out = _nanoset(cli, tmp_path, config, *extra)
        assert_refused(result, expect)
        assert not out.exists()


def test_nanoset_damaged_token_files(tmp_path, cli):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "000.ds").write_bytes(b"\x01" * 33)  # not a whole number of uint16 tokens
    np.zeros(20 * 16, dtype=np.uint16).tofile(tmp_path / "b" / "000.ds")
    result, out = _nanoset(cli, tmp_path, _nanoset_config(tmp_path, folders=[str(tmp_path / "a"), str(tmp_path / "b")]))
    assert_refused(result, "not a whole number of uint16 tokens")
    (tmp_path / "a" / "000.ds").write_bytes(b"")  # empty: no sample
    result, out = _nanoset(cli, tmp_path, _nanoset_config(tmp_path, folders=[str(tmp_path / "a"), str(tmp_path / "b")]))
    assert_refused(result, "holds no whole sample")
    assert not out.exists()


# -- OLMo-core's composable loader -----------------------------------------------------------------------------------


def _composable(tmp_path, change):
    path = tmp_path / "tokens.npy"
    np.random.default_rng(0).integers(0, 50, 40 * 16).astype(np.uint32).tofile(path)
    pkg = "olmo_core.data.composable"
    cfg = {"dataset": [{"_CLASS_": f"{pkg}.concat_and_chunk_instance_source.ConcatAndChunkInstanceSourceConfig",
                        "sequence_length": 16,
                        "sources": [{"_CLASS_": f"{pkg}.numpy_document_source.NumpyDocumentSourceConfig",
                                     "source_paths": [str(path)], "dtype": "uint32"}]}],
           "data_loader": {"_CLASS_": f"{pkg}.data_loader.ComposableDataLoaderConfig", "global_batch_size": 64,
                           "seed": 3, "shuffle_strategy": "inter_source"}}  # fmt: skip
    change(cfg)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(cfg))
    return config


def _source(cfg):
    return cfg["dataset"][0]["sources"][0]


COMPOSABLE = {
    "not a readable JSON config": lambda c: c["data_loader"].update(seed=float("nan")),
    "shuffle_strategy 'random_source' is not one memtui knows": lambda c: c["data_loader"].update(
        shuffle_strategy="random_source"
    ),
    "shuffle_strategy ['inter_source'] is not one": lambda c: c["data_loader"].update(
        shuffle_strategy=["inter_source"]
    ),
    "shuffle must be true or false": lambda c: c["data_loader"].update(shuffle=1),
    "PackingInstanceSourceConfig is not supported": lambda c: c["dataset"][0].update(
        _CLASS_="olmo_core.data.composable.packing_instance_source.PackingInstanceSourceConfig"
    ),
    "a source without _CLASS_ is not supported": lambda c: c["dataset"].append({"sources": []}),
    "dataset[1]: int is not supported": lambda c: c["dataset"].append(7),
    "NUL byte": lambda c: _source(c).update(source_paths=["/tmp/a\x00b.npy"]),
    "source_permutation_seed must be": lambda c: _source(c).update(source_permutation_seed=-5),
    "sources_per_epoch (-1 or positive) must be": lambda c: c["data_loader"].update(sources_per_epoch=0),
    "global_batch_size must be": lambda c: c["data_loader"].update(global_batch_size=2**60),
    "no such": lambda c: _source(c).update(source_paths=["/nonexistent/tokens.npy"]),
    "token dtype 'int8'": lambda c: _source(c).update(dtype="int8"),
    "tokenizer.vocab_size": lambda c: _source(c).pop("dtype"),
}


@pytest.mark.parametrize("expect", list(COMPOSABLE))
def test_composable_configs_memtui_cannot_read(tmp_path, cli, expect):
    out = tmp_path / "out.h5"
    config = _composable(tmp_path, COMPOSABLE[expect])
    result = cli("build", out, "--order", "olmo-core", "--config", config, "--steps", "0,2", "-k", 1, "-m", 1,
                 "--n-validation", 3)  # fmt: skip
    assert_refused(result, expect)
    assert not out.exists()


def test_composable_epoch_zero_is_refused(tmp_path, cli):
    config = _composable(tmp_path, lambda c: None)
    result = cli("build", tmp_path / "o.h5", "--order", "olmo-core", "--config", config, "--epoch", 0)
    assert_refused(result, "epoch must be")
