"""Checkpoint integrity across a suite: a revision whose weights are another's (EleutherAI/pythia#205, #206) is not
recorded by `extract`, and `fetch` names revisions whose weight files (whole, or one shard) equal another's."""

from __future__ import annotations

import numpy as np
import pytest
from fake_hub import FakeHub, checkpoint_files
from huggingface_hub import constants
from tiny_models import make_panel, save_checkpoints, tiny_model

from memtui.extract.integrity import read_duplicates, same_files
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel

REPO = "tiny-org/tiny-neox"


@pytest.fixture(scope="module")
def copied_checkpoints(tmp_path_factory):
    """step0 ... step40 where step30 is saved with step20's weights and step40 with step0's."""
    return save_checkpoints(tmp_path_factory.mktemp("copies"), copies={30: 20, 40: 0})


def _info_rows(cli, panel) -> list[str]:
    code, out, _ = cli("info", panel)
    assert code == 0
    return [line.split(None, 2)[2] for line in out.splitlines() if line.startswith("duplicate weights")]


def test_a_step_saved_with_another_steps_weights_is_not_recorded(tmp_path, copied_checkpoints, cli):
    panel = make_panel(tmp_path / "panel.h5")
    logs = []
    state = run(panel, model=str(copied_checkpoints), batch_size=7, handle_signals=False, log=logs.append)
    assert state == "done"
    p = read_panel(panel)
    assert p.done.tolist() == [True, True, True, False, False]
    for name, y in p.metrics.items():  # the refused columns hold nothing
        assert np.isnan(y[:, 3:]).all(), name
    assert np.isfinite(p.metrics["loglik"][:, :3]).all()
    notes = [m for m in logs if "not recorded" in m]
    assert len(notes) == 2 and all("\n" not in m for m in notes)
    assert "step 30 (" in notes[0] and "equal step 20's" in notes[0] and "left undone" in notes[0]
    assert "step 40 (" in notes[1] and "equal step 0's" in notes[1]
    assert read_duplicates(panel) == [(30, 20), (40, 0)]
    assert _info_rows(cli, panel) == ["step30 = step20", "step40 = step0"]
    # a rerun loads them again, refuses them again, and keeps one record each
    logs.clear()
    assert run(panel, model=str(copied_checkpoints), handle_signals=False, log=logs.append) == "done"
    assert read_panel(panel).done.tolist() == [True, True, True, False, False]
    assert sum("not recorded" in m for m in logs) == 2 and "2 duplicate step(s) left undone" in logs[-1]
    assert _info_rows(cli, panel) == ["step30 = step20", "step40 = step0"]


def test_the_twin_recorded_by_an_earlier_run_counts_and_split_units_too(tmp_path, copied_checkpoints, cli):
    panel = make_panel(tmp_path / "panel.h5")
    run(panel, model=str(copied_checkpoints), checkpoints="20", handle_signals=False, log=lambda m: None)
    logs = []
    run(panel, model=str(copied_checkpoints), checkpoints="30", split=3, handle_signals=False, log=logs.append)
    assert read_panel(panel).done.tolist() == [False, False, True, False, False]
    assert sum("not recorded" in m for m in logs) == 1  # one line for the step, not one per unit
    assert _info_rows(cli, panel) == ["step30 = step20"]


def test_distinct_checkpoints_are_all_recorded(tmp_path, cli):
    root = save_checkpoints(tmp_path / "ckpts", steps=[0, 10, 20, 30, 40])
    panel = make_panel(tmp_path / "panel.h5")
    assert run(panel, model=str(root), handle_signals=False, log=lambda m: None) == "done"
    assert read_panel(panel).done.all() and read_duplicates(panel) == [] and _info_rows(cli, panel) == []


def test_same_files_names_whole_copies_and_single_shards():
    hashes = {
        "step0": {"a-1": "h1", "a-2": "h2"},
        "step10": {"a-1": "h3", "a-2": "h4"},
        "step20": {"a-1": "h2", "a-2": "h1"},  # every file of step0, under other names
        "step30": {"a-1": "h5", "a-2": "h4"},  # one shard of step10
        "step40": {"a-1": "h6", "a-2": "h7"},
        "step50": {},  # no hashes reported: nothing to compare
    }
    assert same_files(hashes) == [
        "duplicate weights: step20 = step0 (every weight file)",
        "duplicate shard: step30/a-2 = step10/a-2",
    ]
    assert same_files({"x": {"f": "h"}, "y": {"f": "g"}}) == []


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


@pytest.fixture(scope="module")
def sharded_revisions(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Four sharded revisions of a tiny GPT-NeoX: step20 is step10 again, step30's first shard is step0's (#206)."""
    root = tmp_path_factory.mktemp("sharded")
    out = {}
    for step in (0, 10, 30):
        tiny_model(seed=step).save_pretrained(root / f"step{step}", max_shard_size="40KB")
        out[f"step{step}"] = checkpoint_files(root / f"step{step}")
    shards = sorted(n for n in out["step0"] if n.startswith("model-0"))
    assert len(shards) >= 2, sorted(out["step0"])
    out["step20"] = dict(out["step10"])
    out["step30"][shards[0]] = out["step0"][shards[0]]
    return dict(sorted(out.items(), key=lambda kv: int(kv[0][4:])))


def _fetch_lines(cli, *argv) -> tuple[int, list[str]]:
    code, out, err = cli("fetch", "--model", REPO, "--checkpoints", "0:30:10", *argv)
    return code, [line for line in out.splitlines() if line.startswith("duplicate")]


def test_fetch_names_revisions_whose_weight_files_equal_anothers(hf_env, sharded_revisions, monkeypatch, cli):
    first = sorted(n for n in sharded_revisions["step0"] if n.startswith("model-0"))[0]
    want = [
        "duplicate weights: step20 = step10 (every weight file)",
        f"duplicate shard: step30/{first} = step0/{first}",
    ]
    with FakeHub(REPO, sharded_revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert _fetch_lines(cli, "--dry-run") == (0, want)
        assert _fetch_lines(cli) == (0, want)
        n_requests = len(hub.requests)
        assert _fetch_lines(cli) == (0, want)  # all cached: told from the cache's blob names, with no request
        assert len(hub.requests) == n_requests


def test_fetch_is_silent_when_every_revision_is_its_own(hf_env, sharded_revisions, monkeypatch, cli):
    distinct = {k: v for k, v in sharded_revisions.items() if k in ("step0", "step10")}
    with FakeHub(REPO, distinct) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = cli("fetch", "--model", REPO, "--checkpoints", "0,10")
        assert code == 0 and "duplicate" not in out + err
