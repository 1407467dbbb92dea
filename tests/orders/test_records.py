"""Values read from a data order's JSON (orders/records.py): JSON integers in range, or the record is refused."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.orders.records import load_json, token_ids, whole


def test_token_ids_are_kept_exactly_when_they_are_integers_in_the_vocabulary():
    ids = token_ids([0, 5, 31999], "f, line 1", 3, 32000)
    assert ids.dtype == np.int64 and ids.tolist() == [0, 5, 31999]
    assert token_ids([2**62], "f", 1, None).tolist() == [2**62]  # no vocabulary known: int64's range


@pytest.mark.parametrize("bad", [47.9, 47.0, True, False, "47", None, [1], 2**70, -1, 32000, 1e300])
def test_anything_else_names_the_token_and_the_place(bad):
    with pytest.raises(MemtuiError, match=r"^f, line 9: token 1 is .*range 0 \.\. 31999\.$"):
        token_ids([3, bad, 4], "f, line 9", 3, 32000)


def test_a_record_of_the_wrong_length_is_refused():
    with pytest.raises(MemtuiError, match="expected 'token_ids' with 3 ids, found 2"):
        token_ids([1, 2], "f", 3, None)
    with pytest.raises(MemtuiError, match="found no list of"):
        token_ids("1,2,3", "f", 3, None)


def test_whole_numbers_and_json_that_python_would_bend():
    assert whole(7, "f", "pt_loc") == 7
    for bad in (7.0, True, "7", -1, 2**64):
        with pytest.raises(MemtuiError, match="pt_loc"):
            whole(bad, "f", "pt_loc")
    with pytest.raises(MemtuiError, match="nested too deeply"):
        load_json("[" * 100_000, "f")
    for text in ('{"a": NaN}', '{"a": Infinity}', "{", b"\xff"):
        with pytest.raises(MemtuiError, match="^f: not a JSON record"):
            load_json(text, "f")


def test_a_shuffle_cache_whose_record_is_nested_too_deeply_is_rebuilt_not_a_traceback(tmp_path):
    from memtui.orders.globalindices import PartnerCache

    cache = PartnerCache(tmp_path)
    data, meta = cache.paths(10, 1)
    meta.write_text("[" * 100_000)
    assert cache.load(10, 1) is None
