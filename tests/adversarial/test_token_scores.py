"""`extract --token-scores` and the per-token dataset under bad input: every bad value of the option refused in one
line with nothing written, a damaged group refused by the reader in one line and shown as such by `info`, and a part
whose per-token scores are malformed set aside and scored again."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from tiny_models import make_panel

from memtui.core.errors import MemtuiError
from memtui.extract.worker import run
from memtui.panel.token_scores import GROUP, create_group, read_layout, read_token_scores

from .conftest import assert_clean_exit, assert_refused, digest


@pytest.fixture
def panel(tmp_path):
    return make_panel(tmp_path / "p.h5")


BAD = [
    ("0", "the count must be at least 1"),
    ("-3", "the count must be at least 1"),
    ("41", "the panel has only 40 instances"),
    ("3,3", "lists instance id 3 more than once"),
    ("3,999", "instance id 999 is not in"),
    ("abc", "neither a count nor instance ids"),
    ("1,,x", "'x' is not an instance id"),
    ("2.5", "neither a count nor instance ids"),
    (",", "lists no instance ids"),
    ("@/nonexistent/ids.txt", "no such file"),
]


@pytest.mark.parametrize(("value", "expect"), BAD)
@pytest.mark.parametrize("dry", [False, True])
def test_bad_values_are_refused_in_one_line_and_nothing_is_written(cli, panel, tiny_checkpoints, value, expect, dry):
    before = digest(panel)
    result = cli("extract", panel, "--model", tiny_checkpoints, "--token-scores", value, *(["--dry-run"] * dry))
    assert_refused(result, expect)
    assert digest(panel) == before and not panel.with_name("p.h5.work").exists()


def test_an_unreadable_or_foreign_file_of_ids_is_refused(cli, panel, tiny_checkpoints, tmp_path):
    binary = tmp_path / "ids.bin"
    binary.write_bytes(b"\xff\xfe\x00junk")
    assert_refused(cli("extract", panel, "--model", tiny_checkpoints, "--token-scores", f"@{binary}"), "cannot be read")
    assert_refused(cli("extract", panel, "--model", tiny_checkpoints, "--token-scores", f"@{tmp_path}"), "no such file")
    words = tmp_path / "ids.txt"
    words.write_text("3\n\x1b[31mred\n")
    err = assert_refused(cli("extract", panel, "--model", tiny_checkpoints, "--token-scores", f"@{words}"))
    assert "not an instance id" in err  # the escape is not printed raw (assert_refused checks)


def test_a_damaged_group_is_refused_by_the_reader_and_shown_by_info(cli, panel):
    create_group(panel, np.array([1, 5, 9]))
    assert read_layout(panel).ids.tolist() == [1, 5, 9]
    with h5py.File(panel, "r+") as f:
        del f[f"{GROUP}/ids"]
        f[f"{GROUP}/ids"] = np.array([5, 1, 77])
    with pytest.raises(MemtuiError, match="names instances the panel does not have") as exc:
        read_token_scores(panel, [1])
    assert "\n" not in str(exc.value)
    code, out, err = cli("info", panel)
    assert_clean_exit((code, out, err))
    assert "token scores  unreadable: " in out.replace("token scores    ", "token scores  ")
    with h5py.File(panel, "r+") as f:
        del f[f"{GROUP}/ids"]
        f[f"{GROUP}/ids"] = np.array([5.0, 1.0, 9.0])
    with pytest.raises(MemtuiError, match="expected integers"):
        read_layout(panel)


def test_a_part_with_malformed_per_token_scores_is_set_aside_and_rescored(panel, tiny_checkpoints, tiny_reference):
    """A part whose per-token arrays have the wrong shape (hand-edited, or from a bug) never reaches the panel: set
    aside, one line, and its unit scored again; a part without them (scored before they were asked for) likewise
    goes."""
    from memtui.extract.commit import commit_ready
    from memtui.extract.units import Owner, Unit, WorkDir

    create_group(panel, np.array([2, 7, 30]))
    layout = read_layout(panel)
    work = WorkDir(panel).ensure()
    cols = {m: tiny_reference.metrics[m][:, 1] for m in tiny_reference.metrics}
    logs: list[str] = []
    for tokens, expect in (((layout.rows, np.zeros((3, 3), np.float32)), "set aside"), (None, "carries no per-token")):
        unit = Unit(10, 1, 0, 40, 1)
        work.write_part(unit, cols, {"revision": "step10"}, tokens)
        assert commit_ready(panel, work, Owner.me(), log=logs.append) == 0
        assert not work.has_part(unit) and any(expect in line for line in logs), logs
        assert not read_layout(panel).done.any()
    assert run(panel, model=str(tiny_checkpoints), checkpoints="10", handle_signals=False, log=logs.append) == "done"
    assert read_layout(panel).done.tolist() == [False, True, False, False, False]
    got = read_token_scores(panel, layout.ids)
    assert all(np.isfinite(v[1]).all() for v in got.values())
