"""The compiled Nanoset blending loop (memtui.orders.blend, ``_blend.c``) against nanotron's helper as nanoset.py
writes it (test_nanoset.build_nanoset_index_helper, the numba function run as Python) and the Python fallback."""

from __future__ import annotations

import numpy as np
import pytest
from test_nanoset import build_nanoset_index_helper

from memtui.orders import blend as blend_module
from memtui.orders.blend import blend
from memtui.orders.blend import picks as picks_of
from memtui.orders.nanoset import NanosetOrder, normalize

needs_compiled = pytest.mark.skipif(not blend_module.compiled(), reason="_blend.c is not built here (setup.py)")


def _cases():
    rng = np.random.default_rng(5)
    yield [5, 5, 5], [1, 1, 1]  # exact ties: the first maximum
    yield [7, 300, 2], [0.1, 0.1, 0.8]  # weights against the lengths: wrap-around
    yield [40, 1], [0.5, 0.5]
    yield [3, 3, 3, 3, 3, 3, 3], [1 / 3, 1 / 7, 1 / 11, 0.3, 0.1, 1e-9, 0.2]  # awkward binary fractions
    for k in (2, 3, 4, 9):
        lengths = rng.integers(1, 400, size=k).tolist()
        yield lengths, rng.random(k).tolist()


@pytest.mark.parametrize("use_compiled", [pytest.param(True, marks=needs_compiled), False])
def test_blend_equals_nanotrons_helper(use_compiled):
    for lengths, weights in _cases():
        w = normalize(weights)
        expected, _ = build_nanoset_index_helper(sum(lengths), w, lengths)
        got = blend(lengths, w, use_compiled=use_compiled)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, expected)


@needs_compiled
def test_compiled_equals_the_python_loop_at_length_and_past_255_datasets():
    rng = np.random.default_rng(11)
    lengths = [200_000, 150_000, 50_000]
    w = normalize([0.45, 0.35, 0.2])
    np.testing.assert_array_equal(blend(lengths, w), blend(lengths, w, use_compiled=False))
    many = rng.integers(1, 20, size=300).tolist()  # 300 datasets: uint16
    wm = normalize(rng.random(300))
    got = blend(many, wm)
    assert got.dtype == np.uint16 and got.max() > 255
    np.testing.assert_array_equal(got, blend(many, wm, use_compiled=False))
    expected, _ = build_nanoset_index_helper(sum(many), wm, many)
    np.testing.assert_array_equal(got, expected)


def test_the_environment_turns_the_compiled_loop_off(monkeypatch):
    monkeypatch.setenv("MEMTUI_KERNELS", "numpy")
    blend_module._library.cache_clear()
    try:
        assert not blend_module.compiled()
        w = normalize([2, 1])
        np.testing.assert_array_equal(blend([4, 4], w), build_nanoset_index_helper(8, w, [4, 4])[0])
    finally:
        monkeypatch.delenv("MEMTUI_KERNELS")
        blend_module._library.cache_clear()


def test_one_dataset_and_an_empty_epoch():
    assert blend([5], np.array([1.0])).tolist() == [0] * 5
    assert blend([0, 0], normalize([1, 1])).size == 0


@pytest.mark.parametrize("use_compiled", [pytest.param(True, marks=needs_compiled), False])
def test_picks_are_each_datasets_indices_in_order(use_compiled):
    rng = np.random.default_rng(2)
    for k, dtype in ((3, np.uint8), (300, np.uint16)):
        dataset = rng.integers(0, k - 1, size=5000).astype(dtype)  # the last dataset never picked: an empty view
        got = picks_of(dataset, k, use_compiled=use_compiled)
        assert len(got) == k and got[-1].size == 0
        for d in range(k):
            np.testing.assert_array_equal(got[d], np.flatnonzero(dataset == d))
            assert got[d].dtype == np.uint32


def test_a_samples_rank_among_its_datasets_picks():
    lengths, w = [30, 50, 20], normalize([0.2, 0.5, 0.3])
    order = NanosetOrder(lengths, w, seed=3, total=150)
    dataset, sample_index = build_nanoset_index_helper(100, w, lengths)
    j = np.arange(100)
    np.testing.assert_array_equal(order._rank(j) % np.array(lengths)[dataset], sample_index)
