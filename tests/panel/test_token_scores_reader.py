"""Reading per-token scores (panel/token_scores.py) in the layout docs/panel-format.md documents, and refusing what
does not fit it in one line."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.token_scores import has_token_scores, read_token_scores

N, T, L = 5, 3, 7


def _panel(path, tokens: bool = True):
    kwargs = {"tokens": np.arange(N * L).reshape(N, L) % 50} if tokens else {}
    return create_panel(
        path, ids=np.arange(N) + 10, treatment=[1, 1, 2, NEVER, NEVER], steps=[0, 1, 2], metrics=["loglik"], **kwargs
    )


def _scores(path, ids, data):
    with h5py.File(path, "r+") as f:
        g = f.require_group("instances/token_scores")
        g.create_dataset("ids", data=np.asarray(ids))
        g.create_dataset("logprob", data=data)
    return path


def test_a_panel_without_them_has_none(tmp_path):
    path = _panel(tmp_path / "p.h5")
    assert read_token_scores(read_panel(path), [10]) is None and not has_token_scores(path)


def test_targets_are_read_with_a_nan_for_the_first_token(tmp_path):
    data = np.random.default_rng(0).normal(size=(2, T, L - 1)).astype(np.float16)
    path = _scores(_panel(tmp_path / "p.h5"), [12, 10], data)
    got = read_token_scores(read_panel(path), [10, 11, 12])
    assert has_token_scores(path) and set(got) == {10, 12}  # 11 has none
    assert got[10].shape == (T, L) and got[10].dtype == np.float32
    assert np.isnan(got[10][:, 0]).all()
    np.testing.assert_array_equal(got[10][:, 1:], data[1].astype(np.float32))
    np.testing.assert_array_equal(got[12][:, 1:], data[0].astype(np.float32))


def test_a_width_of_l_is_read_as_is(tmp_path):
    data = np.ones((1, T, L), dtype=np.float16)
    path = _scores(_panel(tmp_path / "p.h5"), [11], data)
    assert (read_token_scores(read_panel(path), [11])[11] == 1).all()


@pytest.mark.parametrize(
    ("ids", "shape", "says"),
    [
        ([10, 10], (2, T, L - 1), "each instance once"),
        ([10], (1, T + 1, L - 1), "has shape"),
        ([10], (1, T, L + 3), "has shape"),
        ([10], (1, T), "has shape"),
    ],
)
def test_what_does_not_fit_the_layout_is_refused_in_one_line(tmp_path, ids, shape, says):
    path = _scores(_panel(tmp_path / "p.h5"), ids, np.zeros(shape, np.float16))
    with pytest.raises(MemtuiError, match=says) as err:
        read_token_scores(read_panel(path), [10])
    assert "\n" not in str(err.value)


def test_text_where_numbers_belong_and_scores_without_tokens_are_refused(tmp_path):
    path = _panel(tmp_path / "p.h5")
    with h5py.File(path, "r+") as f:
        g = f.create_group("instances/token_scores")
        g.create_dataset("ids", data=np.array([10]))
        g.create_dataset("logprob", data=np.array([[[b"x"] * (L - 1)] * T]))
    with pytest.raises(MemtuiError, match="floating point"):
        read_token_scores(read_panel(path), [10])
    path = _scores(_panel(tmp_path / "q.h5", tokens=False), [10], np.zeros((1, T, L - 1), np.float16))
    with pytest.raises(MemtuiError, match="without the token ids"):
        read_token_scores(read_panel(path), [10])
