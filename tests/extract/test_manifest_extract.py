"""`extract --manifest`: the run's checkpoint list names each revision; the steps it lacks, its irregular steps and
the weight averages are said by `--dry-run` and `info`, and a launch never meets them mid-extraction."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import make_panel

from memtui.extract.checkpoints import (
    Source,
    panel_averages,
    plan_steps,
    read_checkpoint_notes,
    record_checkpoint_notes,
)
from memtui.extract.units import WorkDir
from memtui.orders.revisions import manifest_template
from memtui.panel.hdf5 import read_panel

# the panel's steps are 0, 10, 20, 30, 40: the list lacks 30, and 40 is a weight average (an EMA branch)
REVISIONS = "stage1-step0-tokens0B\nstage1-step10-tokens1B\nstep20-tokens2B\nstage1-step40-tokens4B average=ema\n"


@pytest.fixture
def panel(tmp_path):
    return make_panel(tmp_path / "panel.h5")


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "revisions.txt"
    path.write_text(REVISIONS)
    return path


def test_dry_run_lists_missing_irregular_steps_and_averages(cli, panel, manifest, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache: nothing is downloaded by a dry run
    code, out, err = cli("extract", panel, "--model", "org/model", "--manifest", manifest, "--dry-run")
    assert code == 0, err
    assert f"revisions:   as listed in {manifest}" in out
    assert "checkpoints: 4 to score (steps 0, 10, 20, 40)" in out  # 30 is not listed: not planned
    assert "checkpoint list: panel steps the manifest lacks (not extracted): 30" in out
    assert "checkpoint list: named unlike the others (stage#-step#-tokens#B): step20-tokens2B" in out
    assert "checkpoint list: weight averages (not one model's training state): steps 40 (ema)" in out
    assert not (tmp_path / "panel.h5.work").exists()  # a dry run writes nothing


def test_a_requested_step_the_manifest_lacks_is_refused_at_launch(cli, panel, manifest):
    code, _, err = cli("extract", panel, "--model", "org/model", "--manifest", manifest, "--checkpoints", "30")
    assert code == 2
    assert "has no checkpoint in the manifest for steps 30" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (("--revisions", "pythia"), "--manifest names every checkpoint"),
        (("--revision-template", "s{step}"), "--manifest names every checkpoint"),
    ],
)
def test_manifest_with_a_template_is_refused(cli, panel, manifest, extra, match):
    code, _, err = cli("extract", panel, "--model", "org/model", "--manifest", manifest, *extra, "--dry-run")
    assert code == 2 and match in err


def test_manifest_stage_without_manifest_and_bad_manifests(cli, panel, tmp_path):
    code, _, err = cli("extract", panel, "--model", "org/model", "--manifest-stage", "stage1", "--dry-run")
    assert code == 2 and "--manifest-stage picks a stage of a --manifest CSV" in err
    code, _, err = cli("extract", panel, "--model", "org/model", "--manifest", tmp_path, "--dry-run")
    assert code == 2 and "is a folder, not a checkpoint manifest" in err
    bad = tmp_path / "bad.txt"
    bad.write_text("main\n")
    code, _, err = cli("extract", panel, "--model", "org/model", "--manifest", bad, "--dry-run")
    assert code == 2 and "no step in 'main'" in err


def test_plan_skips_unlisted_steps_and_info_shows_what_the_run_recorded(cli, panel, manifest):
    source = Source.open("org/model", manifest_template(manifest))
    p = read_panel(panel)
    assert plan_steps(p.steps, p.done, None, source) == [0, 10, 20, 40]
    assert source.revision(40) == "org/model@stage1-step40-tokens4B"
    WorkDir(panel).ensure()  # as a launch makes it
    record_checkpoint_notes(panel, source, p.steps)  # what each worker does when it starts
    notes = read_checkpoint_notes(panel)
    assert notes["averages"] == {40: "ema"}
    assert panel_averages(read_panel(panel)) == {40: "ema"}
    code, out, _ = cli("info", panel)
    assert code == 0
    assert "weight average" in out and "step40 (ema): memorisation of an average is not one model's" in out
    assert "panel steps the manifest lacks (not extracted): 30" in out


def test_hub_names_mark_averages_without_a_manifest(panel):
    source = Source.open("marin-community/marin-8b-base", "step{step}")
    assert source.averages([0, 10]) == {}
    named = Source.open("org/model", "ema-step{step}")
    assert named.averages(np.array([10, 20])) == {10: "ema", 20: "ema"}


def test_unreadable_notes_are_ignored(panel):
    work = panel.with_name(panel.name + ".work")
    work.mkdir()
    (work / "checkpoints.json").write_text("{not json")
    assert read_checkpoint_notes(panel) == {}
    (work / "checkpoints.json").write_text('{"lines": 3, "averages": {"x": "ema", "10": 5, "20": "soup"}}')
    assert read_checkpoint_notes(panel) == {"lines": [], "averages": {20: "soup"}}


def test_revisions_pico_resolves_commits_at_launch(cli, panel, monkeypatch, tmp_path):
    from memtui.orders import revisions

    commits = [(f"Saving HF Model -- Step {s}", f"{s:040d}") for s in (40, 10, 0)]
    monkeypatch.setattr(revisions, "list_commits", lambda repo, branch: commits)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    revisions._commits.cache_clear()
    try:
        code, out, err = cli("extract", panel, "--model", "pico-lm/pico-decoder-tiny", "--revisions", "pico",
                             "--dry-run")  # fmt: skip
    finally:
        revisions._commits.cache_clear()
    assert code == 0, err
    assert "as listed in pico-lm/pico-decoder-tiny@pico-decoder-tiny-1's commits" in out
    assert "checkpoints: 3 to score (steps 0, 10, 40)" in out
    assert "panel steps the manifest lacks (not extracted): 20, 30" in out


def test_a_csv_of_checkpoint_directories_is_refused_at_launch(cli, panel, tmp_path):
    """OLMo 3's CSV as published names OLMo-core directories: no from_pretrained revision, so refused before any
    worker starts; with a Revision column (the hub's branches) it is read."""
    rows = "\n".join(f"stage1_pretraining,{s},https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/step{s}/"
                     for s in (0, 10, 20, 30, 40))  # fmt: skip
    csv_path = tmp_path / "Olmo-3-1025-7B.csv"
    csv_path.write_text("Stage,Step,Checkpoint Directory\n" + rows + "\n")
    code, _, err = cli("extract", panel, "--model", "allenai/Olmo-3-1025-7B", "--manifest", csv_path, "--dry-run")
    assert code == 2 and "names checkpoint directories" in err and "add a Revision column" in err
    with_names = "\n".join(f"stage1_pretraining,{s},dir{s},stage1-step{s}" for s in (0, 10, 20, 30, 40))
    csv_path.write_text("Stage,Step,Checkpoint Directory,Revision\n" + with_names + "\n")
    code, out, err = cli("extract", panel, "--model", "allenai/Olmo-3-1025-7B", "--manifest", csv_path, "--dry-run")
    assert code == 0, err
    assert "checkpoints: 5 to score" in out
