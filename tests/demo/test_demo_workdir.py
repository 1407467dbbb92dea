"""The demo's working folder: --keep checked before anything is made (cheap: every case refuses before training)."""

from __future__ import annotations

import pytest

from memtui.core.errors import MemtuiError
from memtui.demo.workdir import check_keep, work_folder


def test_keep_is_made_where_it_can_be_and_checked_without_making_it(tmp_path):
    keep = tmp_path / "a" / "b"
    check_keep(keep)
    assert not (tmp_path / "a").exists()  # checking makes nothing
    assert work_folder(keep) == keep and keep.is_dir()
    assert work_folder(keep) == keep  # an existing folder is reused
    temp = work_folder(None)
    try:
        assert temp.is_dir() and temp.name.startswith("memtui-demo-")
    finally:
        temp.rmdir()


@pytest.mark.parametrize("maker", ["make_suite", "make_inserted"])
def test_a_keep_that_is_a_file_leaves_no_output_folder(tmp_path, maker):
    import importlib

    module = importlib.import_module("memtui.demo.family" if maker == "make_suite" else "memtui.demo.inserted")
    keep = tmp_path / "keep"
    keep.write_text("mine")
    with pytest.raises(MemtuiError, match="--keep"):
        getattr(module, maker)(tmp_path / "out", workdir=keep, keep=True, log=lambda line: None)
    assert not (tmp_path / "out").exists() and keep.read_text() == "mine"
