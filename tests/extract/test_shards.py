"""Checkpoints carrying another checkpoint's shard (EleutherAI/pythia#206: pythia-12b's step50000 carries the final
model's first shard): `extract` refuses them before scoring, marks columns already scored, and `info` lists both."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
from fake_hub import FakeHub, checkpoint_files
from huggingface_hub import constants
from tiny_models import make_panel, tiny_model

from memtui.extract import shards as shard_module
from memtui.extract.shards import file_sha256, hashes_dir, read_shards, shards_dir, shared_shards
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel

STEPS = [0, 10, 20, 30, 40]
REPO = "tiny-org/tiny-sharded"


def _save_sharded(folder, seed: int) -> list[str]:
    tiny_model(seed=seed).save_pretrained(folder, max_shard_size="40KB")
    names = sorted(p.name for p in folder.iterdir() if p.name.startswith("model-0"))
    assert len(names) >= 2, names  # really sharded
    return names


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """step0 ... step40, sharded safetensors; step30's first shard is step0's (what pythia#206 found on the hub)."""
    root = tmp_path_factory.mktemp("damaged")
    for step in STEPS:
        names = _save_sharded(root / f"step{step}", seed=step)
    shutil.copyfile(root / "step0" / names[0], root / "step30" / names[0])
    return root, names[0]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    for step in STEPS:
        _save_sharded(root / f"step{step}", seed=step)
    return root


def _info_rows(cli, panel) -> list[str]:
    code, out, _ = cli("info", panel)
    assert code == 0
    return [line.split(None, 2)[2] for line in out.splitlines() if line.startswith("shared shard")]


def _extract(panel, model, **kw) -> list[str]:
    logs: list[str] = []
    assert run(panel, model=str(model), batch_size=7, handle_signals=False, log=logs.append, **kw) == "done"
    return logs


def test_a_checkpoint_carrying_anothers_first_shard_is_refused_before_any_scoring(tmp_path, damaged, cli):
    root, first = damaged
    panel = make_panel(tmp_path / "panel.h5")
    logs = _extract(panel, root)
    start = next(i for i, m in enumerate(logs) if m.startswith("worker "))
    refused = [i for i, m in enumerate(logs) if "not scored" in m]
    assert len(refused) == 2 and max(refused) < start  # both told before the first unit is even claimed
    assert f"step 30 not scored: its weight file {first} = step 0's" in logs[refused[1]]
    assert f"step 0 not scored: its weight file {first} = step 30's" in logs[refused[0]]
    assert all("\n" not in logs[i] for i in refused)
    p = read_panel(panel)
    assert p.done.tolist() == [False, True, True, False, True]
    assert np.isnan(p.metrics["loglik"][:, [0, 3]]).all()
    assert _info_rows(cli, panel) == [
        f"step0 (refused, left undone): {first} = step 30's",
        f"step30 (refused, left undone): {first} = step 0's",
    ]

    # the user knows step 0 is right: scored alone, its partner (left out of the run) no longer blocks it
    logs = _extract(panel, root, checkpoints="0")
    assert not any("not scored" in m for m in logs)
    assert read_panel(panel).done.tolist() == [True, True, True, False, True]
    # asking for step 30 again: refused against the scored step 0, which is marked
    logs = _extract(panel, root, checkpoints="30")
    assert sum("step 30 not scored" in m for m in logs) == 1
    assert sum("step 0 was scored but shares a weight file" in m for m in logs) == 1
    assert read_panel(panel).done.tolist() == [True, True, True, False, True]
    assert _info_rows(cli, panel) == [
        f"step0 (scored: one of the two is damaged, check its column): {first} = step 30's",
        f"step30 (refused, left undone): {first} = step 0's",
    ]


def test_a_panel_scored_before_the_check_is_marked_by_the_next_extract(tmp_path, damaged, cli, monkeypatch):
    root, first = damaged
    panel = make_panel(tmp_path / "panel.h5")
    with monkeypatch.context() as m:  # a memtui without the check scored every column
        m.setattr(shard_module.ShardCheck, "refusals", lambda self: set())
        _extract(panel, root)
    shutil.rmtree(shards_dir(panel))
    shutil.rmtree(hashes_dir(panel))
    assert read_panel(panel).done.all() and _info_rows(cli, panel) == []

    logs = _extract(panel, root)  # nothing to score: the scored columns are checked and marked
    assert any("nothing to do" in m for m in logs)
    assert sum("was scored but shares a weight file" in m for m in logs) == 2
    assert read_panel(panel).done.all()  # marked, never undone: the GPU hours are kept
    assert _info_rows(cli, panel) == [
        f"step0 (scored: one of the two is damaged, check its column): {first} = step 30's",
        f"step30 (scored: one of the two is damaged, check its column): {first} = step 0's",
    ]


def test_a_clean_sharded_suite_is_scored_whole_and_its_hashes_are_kept(tmp_path, clean, cli):
    panel = make_panel(tmp_path / "panel.h5")
    logs = _extract(panel, clean)
    assert not any("not scored" in m or "shares a weight file" in m for m in logs)
    assert read_panel(panel).done.all() and _info_rows(cli, panel) == []
    recorded = read_shards(panel)
    assert sorted(recorded) == STEPS
    for step, files in recorded.items():
        for name, sha in files.items():
            assert sha == hashlib.sha256((clean / f"step{step}" / name).read_bytes()).hexdigest()
    assert shared_shards(recorded) == {}


def test_file_hashes_are_kept_by_path_size_and_mtime(tmp_path):
    f = tmp_path / "model-00001-of-00002.safetensors"
    f.write_bytes(b"weights")
    cache = tmp_path / "hashes"
    assert file_sha256(f, cache) == hashlib.sha256(b"weights").hexdigest()
    (entry,) = cache.iterdir()
    record = json.loads(entry.read_text())
    entry.write_text(json.dumps({**record, "sha256": "f" * 64}))
    assert file_sha256(f, cache) == "f" * 64  # the kept value: the file is not read again
    f.write_bytes(b"other weights")
    os.utime(f, ns=(record["mtime_ns"] + 10**9, record["mtime_ns"] + 10**9))
    assert file_sha256(f, cache) == hashlib.sha256(b"other weights").hexdigest()
    assert file_sha256(tmp_path / "absent.safetensors", cache) is None
    # a file linking into a hub cache's blobs/ is named by its sha256 there, and never read
    blob = tmp_path / "blobs" / ("a" * 64)
    blob.parent.mkdir()
    blob.write_bytes(b"not what the name says")
    (tmp_path / "link.safetensors").symlink_to(blob)
    assert file_sha256(tmp_path / "link.safetensors", None, compute=False) == "a" * 64


def test_shared_shards_leaves_whole_copies_to_the_weights_hash():
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    hashes = {
        0: {"m-1": a, "m-2": b},
        10: {"m-1": a, "m-2": b},  # step 0 whole: a duplicate, not a shared shard
        20: {"m-1": a, "m-2": c},  # step 0's (and 10's) first shard
        30: {"m-1": d, "m-2": c},  # step 20's second shard
    }
    assert shared_shards(hashes) == {
        0: [("m-1", 20, "m-1")],
        10: [("m-1", 20, "m-1")],
        20: [("m-1", 0, "m-1"), ("m-1", 10, "m-1"), ("m-2", 30, "m-2")],
        30: [("m-2", 20, "m-2")],
    }


@pytest.fixture
def hf_env(tmp_path, monkeypatch):
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return home / "hub"


def test_hub_revisions_are_told_from_the_cache_blob_names(tmp_path, hf_env, damaged, monkeypatch, cli):
    root, first = damaged
    revisions = {f"step{s}": checkpoint_files(root / f"step{s}") for s in STEPS}
    with FakeHub(REPO, revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = cli("fetch", "--model", REPO, "--checkpoints", "0:40:10")
        assert code == 0, err
        assert f"duplicate shard: step30/{first} = step0/{first}" in out  # fetch names it from the hub's listing
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a compute node: the cache alone
    panel = make_panel(tmp_path / "panel.h5")
    logs = _extract(panel, REPO)
    start = next(i for i, m in enumerate(logs) if m.startswith("worker "))
    assert [i < start for i, m in enumerate(logs) if "not scored" in m] == [True, True]
    assert read_panel(panel).done.tolist() == [False, True, True, False, True]
    assert not hashes_dir(panel).exists()  # no weight file was read to hash it: the blob names are the sha256
    assert [r.split(":")[0] for r in _info_rows(cli, panel)] == [
        "step0 (refused, left undone)",
        "step30 (refused, left undone)",
    ]
