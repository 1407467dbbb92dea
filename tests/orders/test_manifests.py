"""Checkpoint manifests (OLMo-core's checkpoint CSVs, a plain revisions.txt), weight-average marks, DataDecide's
revision names: replicas in the exact published schemas, and every refusal one line."""

from __future__ import annotations

import os

import pytest

from memtui.core.errors import MemtuiError
from memtui.orders.manifests import irregularities, read_manifest, step_in_name
from memtui.orders.revisions import (
    PRESETS,
    manifest_of,
    manifest_template,
    preset_template,
    revision_name,
    weight_average,
)

# allenai/OLMo-core src/scripts/official/OLMo3/OLMo-3-1025-7B.csv (commit 0b95421d): the header and rows as published,
# cut to a few steps of each stage (stage 1 ends off the 1000-step grid, at 1413814 in the real file)
OLMO3_CSV = """Stage,Step,Checkpoint Directory
stage1_pretraining,0,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/step0/
stage1_pretraining,1000,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/step1000/
stage1_pretraining,2000,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/step2000/
stage1_pretraining,4000,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/step4000/
stage1_pretraining,4814,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/step4814/
stage2_midtraining,1000,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage2/step1000/
stage2_midtraining,1684,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage2/step1684/
stage_3_longcontext,1000,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage3/step1000/
"""

# allenai/OLMo-core src/scripts/official/OLMo2/OLMo-2-0325-32B-stage2.csv (commit 83d423d8): ingredients and the soup
OLMO2_STAGE2_CSV = """Ingredient,Step,Checkpoint Directory
1,1000,https://olmo-checkpoints.org/ai2-llm/peteish32/stage2/olmo-32b-0325_stage2_ingredient1/step1000/
1,11921,https://olmo-checkpoints.org/ai2-llm/peteish32/stage2/olmo-32b-0325_stage2_ingredient1/step11921/
2,1000,https://olmo-checkpoints.org/ai2-llm/peteish32/stage2/olmo-32b-0325_stage2_ingredient2/step1000/
soup,11921,https://olmo-checkpoints.org/ai2-llm/peteish32/stage2/soup/step11921-unsharded/"""

# OLMo 2 7B's hub branches mix `stage1-step…-tokens…B` with names that miss `stage1-`, and skip steps
OLMO2_BRANCHES = """# allenai/OLMo-2-1124-7B branches
stage1-step0-tokens0B
stage1-step1000-tokens5B
stage1-step2000-tokens9B
step3000-tokens13B
stage1-step5000-tokens21B
"""


def _write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


def test_olmo3_csv_needs_a_stage_and_reads_its_steps(tmp_path):
    path = _write(tmp_path, "Olmo-3-1025-7B.csv", OLMO3_CSV)
    with pytest.raises(MemtuiError, match="lists 3 stages .*name one"):
        read_manifest(path)
    m = read_manifest(path, stage="stage1_pretraining")
    assert m.steps == [0, 1000, 2000, 4000, 4814]
    assert m.revision(4814).endswith("/stage1/step4814/")
    assert m.stages == ("stage1_pretraining", "stage2_midtraining", "stage_3_longcontext")
    lines = irregularities(m, panel_steps=[0, 1000, 3000, 4814])
    assert "off the 1000-step interval: steps 4814" in lines
    assert "missing from the 1000-step interval: steps 3000" in lines
    assert "panel steps the manifest lacks (not extracted): 3000" in lines
    stage2 = read_manifest(path, stage="stage2_midtraining")
    assert stage2.steps == [1000, 1684]  # the stage restarts its count
    with pytest.raises(MemtuiError, match="no stage 'stage9'.*stage1_pretraining"):
        read_manifest(path, stage="stage9")


def test_olmo2_soup_row_is_a_weight_average(tmp_path):
    path = _write(tmp_path, "OLMo-2-0325-32B-stage2.csv", OLMO2_STAGE2_CSV)
    soup = read_manifest(path, stage="soup")
    assert soup.averages() == {11921: "soup"}
    assert read_manifest(path, stage="1").averages() == {}
    assert any("weight averages" in line for line in irregularities(soup))


def test_revisions_txt_flags_names_missing_the_stage_and_skipped_steps(tmp_path):
    path = _write(tmp_path, "revisions.txt", OLMO2_BRANCHES)
    m = read_manifest(path)
    assert m.steps == [0, 1000, 2000, 3000, 5000]
    assert m.revision(3000) == "step3000-tokens13B"
    lines = irregularities(m)
    assert "missing from the 1000-step interval: steps 4000" in lines
    assert any(line.startswith("named unlike the others (stage#-step#-tokens#B): step3000-tokens13B") for line in lines)


def test_revisions_txt_average_flag_and_family_names(tmp_path):
    text = "step-125000\nstep-001000-2BT average\nstep-002000-4BT average=EMA\nckpt_042\n"
    m = read_manifest(_write(tmp_path, "r.txt", text))
    assert m.steps == [42, 1000, 2000, 125000]
    assert m.averages() == {1000: "average", 2000: "ema"}
    assert step_in_name("step69369-seed-small-aux-2") == 69369
    assert step_in_name("main") is None


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("\n\n# nothing\n", "empty|lists no revision"),
        ("Stage,Step,Checkpoint Directory\n", "a header and no checkpoints"),
        ("main\n", "line 1: no step in 'main'"),
        ("step10 average=bad/kind\n", "weight-average kind"),
        ("step10 extra\n", "'extra' after the revision"),
        ("step10\nstep10-again\n", "step 10 is listed twice"),
        ("Stage,Step,Step,Checkpoint Directory\na,1,1,x\n", "column Step appears twice"),
        ("Stage,Step\na,1\n", "needs 'Checkpoint Directory' or 'Revision'"),
        ("Stage,Step,Checkpoint Directory\na,1\n", "2 fields for 3 columns"),
        ("Stage,Step,Checkpoint Directory\na,-1,x\n", "step '-1' is not a whole number"),
        ("Stage,Step,Checkpoint Directory\na,1.5,x\n", "step '1.5' is not a whole number"),
        ("Stage,Step,Checkpoint Directory\na,ten,x\n", "step 'ten' is not a whole number"),
        ("Stage,Step,Checkpoint Directory\na,99999999999999999999,x\n", "beyond 2\\*\\*53"),
        ("Stage,Step,Checkpoint Directory\na,5,\n", "no revision or checkpoint directory"),
        ("step99999999999999999999\n", "beyond 2\\*\\*53"),
        (b"step1\x00\n", "NUL bytes"),
        (b"\xff\xfe\x80garbage", "not UTF-8"),
    ],
)
def test_bad_manifests_are_one_line_refusals(tmp_path, text, match):
    path = _write(tmp_path, "m.txt", text)
    with pytest.raises(MemtuiError, match=match) as info:
        read_manifest(path)
    assert "\n" not in str(info.value)


def test_a_folder_a_fifo_or_nothing_is_no_manifest(tmp_path):
    with pytest.raises(MemtuiError, match="no such checkpoint manifest"):
        read_manifest(tmp_path / "absent.txt")
    with pytest.raises(MemtuiError, match="is a folder"):
        read_manifest(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(MemtuiError, match="not a regular file"):
        read_manifest(fifo)
    with pytest.raises(MemtuiError, match="has no stages"):
        read_manifest(_write(tmp_path, "r.txt", "step1\n"), stage="stage1")


def test_manifest_template_names_each_step_and_refuses_unlisted_ones(tmp_path):
    path = _write(tmp_path, "revisions.txt", OLMO2_BRANCHES)
    template = manifest_template(path)
    assert revision_name(template, 1000) == "stage1-step1000-tokens5B"
    with pytest.raises(MemtuiError, match="lists no checkpoint at step 4000 \\(nearest: 3000\\)"):
        revision_name(template, 4000)
    # an edited manifest is read again, not served from the cache
    path.write_text(OLMO2_BRANCHES + "stage1-step4000-tokens17B\n")
    os.utime(path, ns=(1, 10**18))
    assert manifest_of(template).steps[-2] == 4000
    csv_path = _write(tmp_path, "o3.csv", OLMO3_CSV)
    assert revision_name(manifest_template(csv_path, "stage2_midtraining"), 1684).endswith("stage2/step1684/")
    with pytest.raises(MemtuiError, match="no ':'"):
        manifest_template(csv_path, "a:b")
    with pytest.raises(MemtuiError, match="no such checkpoint manifest"):
        manifest_template(tmp_path / "absent.csv")


def test_datadecide_revision_names():
    # allenai/DataDecide release/upload_checkpoints.py: f"{step}-seed-{SEED_MAPPING[seed].replace(' ', '-')}"
    assert revision_name(preset_template("datadecide-default"), 69369) == "step69369-seed-default"
    assert revision_name(preset_template("datadecide", seed="small-aux-2"), 1250) == "step1250-seed-small-aux-2"
    assert {p for p in PRESETS if p.startswith("datadecide-")} == {
        "datadecide-default",
        "datadecide-small-aux-2",
        "datadecide-small-aux-3",
        "datadecide-large-aux-2",
        "datadecide-large-aux-3",
    }
    with pytest.raises(MemtuiError, match="--revisions datadecide-NAME"):
        preset_template("datadecide")
    with pytest.raises(MemtuiError, match="--revisions datadecide-NAME"):
        preset_template("datadecide", seed="seed-7")


@pytest.mark.parametrize(
    ("revision", "kind"),
    [
        ("marin-community/marin-8b-base@deeper-starling", "ema"),  # the card: all but Kestrel are EMA
        ("marin-community/marin-8b-base@main", "ema"),
        ("marin-community/marin-8b-base@kestrel", ""),
        ("allenai/OLMo-2-0325-32B@main", "soup"),  # OLMo-core's OLMo2 README: "Final Souped Model | main"
        ("allenai/OLMo-2-0325-32B@stage2-ingredient1-step11921-tokens101B", ""),
        ("allenai/OLMo-2-1124-7B@stage1-step1000-tokens5B", ""),
        ("some/model@stage2-soup", "soup"),
        ("some/model@ema-step1000", "ema"),
        ("some/model@merged", "merged"),
        ("some/model@step1000", ""),
        ("some/model@temazepam", ""),  # a word, not a substring
    ],
)
def test_weight_average_from_the_families_names(revision, kind):
    assert weight_average(revision) == kind


def test_smollm_presets_name_the_cards_revisions():
    assert revision_name(PRESETS["smollm2"], 125000) == "step-125000"  # SmolLM2 intermediate checkpoints
    assert revision_name(PRESETS["smollm3-stage1"], 40000) == "stage1-step-40000"  # SmolLM3-3B-checkpoints' card


# pico-train's src/checkpointing/training.py titles each upload "Saving HF Model -- Step N"; newest first, as listed
PICO_COMMITS = [
    ("Saving HF Model -- Step 2000", "c" * 40),
    ("Update README.md", "r" * 40),
    ("Saving HF Model -- Step 1000", "b" * 40),
    ("Saving HF Model -- Step 1000", "x" * 40),  # an older upload of the same step: the newest wins
    ("Saving HF Model -- Step 0", "a" * 40),
]


def test_pico_commits_resolve_steps_during_extraction(monkeypatch):
    from memtui.orders import revisions
    from memtui.orders.revisions import pico_template

    asked = []

    def fake(repo, branch):
        asked.append((repo, branch))
        return PICO_COMMITS

    monkeypatch.setattr(revisions, "list_commits", fake)
    revisions._commits.cache_clear()
    template = pico_template("pico-lm/pico-decoder-tiny")
    assert template == "@commits:pico-lm/pico-decoder-tiny@pico-decoder-tiny-1"
    assert revision_name(template, 1000) == "b" * 40
    assert manifest_of(template).steps == [0, 1000, 2000]
    with pytest.raises(MemtuiError, match="lists no checkpoint at step 3000"):
        revision_name(template, 3000)
    assert asked == [("pico-lm/pico-decoder-tiny", "pico-decoder-tiny-1")]  # asked once per process
    monkeypatch.setattr(revisions, "list_commits", lambda repo, branch: [("Initial commit", "0" * 40)])
    revisions._commits.cache_clear()
    with pytest.raises(MemtuiError, match="no commit titled 'Saving HF Model -- Step N'"):
        manifest_of(pico_template("org/other"))
    revisions._commits.cache_clear()
    for bad in ("pico-decoder-tiny", "a/b/c", "a/b@x"):
        with pytest.raises(MemtuiError, match="is not a hub repo id"):
            pico_template(bad)


def test_pico_commits_need_the_hub(monkeypatch):
    from memtui.orders import revisions

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    revisions._commits.cache_clear()
    with pytest.raises(MemtuiError, match="HF_HUB_OFFLINE is set; list them online into a CSV"):
        manifest_of(revisions.pico_template("pico-lm/pico-decoder-tiny"))
    revisions._commits.cache_clear()


def test_a_step_revision_csv_names_commits(tmp_path):
    path = _write(tmp_path, "pico.csv", "Step,Revision\n0," + "a" * 40 + "\n1000," + "b" * 40 + "\n")
    assert revision_name(manifest_template(path), 1000) == "b" * 40


def test_a_manifest_path_with_spaces_and_unicode(tmp_path):
    folder = tmp_path / "runs ünï code"
    folder.mkdir()
    path = _write(folder, "rev isions.txt", "step1\nstep2\n")
    assert revision_name(manifest_template(path), 2) == "step2"
    with pytest.raises(MemtuiError, match="a stage's name holds no"):
        manifest_template(path, "bad\nstage")
