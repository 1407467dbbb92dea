"""The bootstrap's shortcuts for Rademacher multipliers give what the plain numpy code gave, bit for bit: the
multipliers from a table of each byte's bits or expanded group by group from the bytes in the compiled loop, and the
groups' multiplier sums from a sum per group's slice (integer sums, exact in float32) instead of np.add.reduceat."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import did, kernels
from memtui.engine.layout import build_layout
from memtui.engine.multipliers import JointMultipliers
from memtui.panel.model import NEVER


def _unpacked(rng, shape, dtype):
    """The multipliers as did.multipliers made them before the table: unpack, cast, 2 v - 1."""
    bits = np.unpackbits(np.frombuffer(rng.bytes((shape[0] * shape[1] + 7) // 8), dtype=np.uint8))
    v = bits[: shape[0] * shape[1]].reshape(shape).astype(dtype)
    return np.multiply(v, 2, out=v) - 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (1000, 128), (333, 37)])
def test_the_multipliers_are_the_unpacked_bits(dtype, shape):
    got = did.multipliers(np.random.default_rng(5), shape, "rademacher", dtype)
    want = _unpacked(np.random.default_rng(5), shape, dtype)
    assert got.dtype == dtype and got.shape == shape and got.flags.c_contiguous
    assert np.array_equal(got, want) and set(np.unique(got)) <= {-1.0, 1.0}


def _layout(seed: int = 0):
    rng = np.random.default_rng(seed)
    steps = np.arange(6) * 10
    treatment = np.r_[np.repeat(steps[1:], [5, 40, 1, 17, 9]), np.full(300, NEVER)]
    return build_layout(rng.normal(size=(len(treatment), 6)), treatment, steps, never=NEVER)


@pytest.mark.parametrize("source", [None, "clustered"])
def test_the_group_weights_are_reduceats_and_mammens_still_use_it(source):
    lay = _layout()
    src = None if source is None else JointMultipliers.clustered(np.arange(lay.n_units) // 4)
    est = did.point_estimates(lay)
    for kind in ("rademacher", "mammen"):
        boot = did.bootstrap(lay, est, draws=150, seed=3, multiplier=kind, chunk=64, source=src)
        rng = np.random.default_rng(3)
        want = []
        for start in range(0, 150, 64):
            drawn = did.multipliers(rng, (src.n_keys if src else lay.n_units, min(64, 150 - start)), kind, np.float32)
            v = drawn if src is None else src.take(drawn, lay.source_rows)
            want.append(np.add.reduceat(v, lay.group_start[:-1], axis=0))
        assert np.array_equal(boot.group_w, np.hstack(want).astype(float)), kind


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_multipliers_written_into_scratch_memory_are_the_same(dtype):
    scratch = np.full(8 * 200, 7.0, dtype=dtype)
    for shape in [(333, 4), (1, 1), (100, 16)]:
        got = did.multipliers(np.random.default_rng(2), shape, "rademacher", dtype, scratch=scratch)
        assert np.shares_memory(got, scratch)
        assert np.array_equal(got, _unpacked(np.random.default_rng(2), shape, dtype))
    small = np.empty(3, dtype=dtype)  # too small: a fresh array
    got = did.multipliers(np.random.default_rng(2), (333, 4), "rademacher", dtype, scratch=small)
    assert not np.shares_memory(got, small) and np.array_equal(
        got, _unpacked(np.random.default_rng(2), (333, 4), dtype)
    )


@pytest.mark.skipif(not kernels.expands(), reason="the compiled loop is not built here")
@pytest.mark.parametrize("bc", [128, 104, 13, 1])
def test_rows_expanded_from_the_bytes_are_the_unpacked_bits_and_their_sums(bc):
    rows = 301
    raw = did.rademacher_bits(np.random.default_rng(9), (rows, bc))
    want = _unpacked(np.random.default_rng(9), (rows, bc), np.float32)
    for lo, hi in [(0, rows), (0, 1), (17, 18), (5, 250), (300, 301), (7, 7)]:
        out, w = np.full((hi - lo, bc), 5.0, np.float32), np.full(bc, 5.0, np.float32)
        kernels.rademacher_rows(raw, bc, lo, out, w)
        assert np.array_equal(out, want[lo:hi]) and np.array_equal(w, want[lo:hi].sum(axis=0))
    with pytest.raises(ValueError):
        kernels.rademacher_rows(raw, bc, rows + 7, np.empty((2, bc), np.float32))  # beyond the bits drawn


@pytest.mark.skipif(not kernels.expands(), reason="the compiled loop is not built here")
@pytest.mark.parametrize("big", [False, True])
def test_sums_of_multipliers_expanded_group_by_group_are_the_whole_arrays_bit_for_bit(big, monkeypatch):
    """The bootstrap expands each group's multipliers from the chunk's bytes where its product reads them (on every
    core for a large layout): the draws and the groups' multiplier sums are those of the rows x chunk array the
    numpy code expands (the same operands of the same products), for every chunk size."""
    rng = np.random.default_rng(4)
    width = 60 if big else 6  # big: rows x columns above the threshold from which the groups go to the cores
    steps = np.arange(width) * 10
    per = [900, 2, 1, 50, 700] if big else [5, 40, 1, 17, 9]
    treatment = np.r_[np.repeat(steps[1:6], per), np.full(16500 if big else 300, NEVER)]
    lay = build_layout(rng.normal(size=(len(treatment), width)), treatment, steps, never=NEVER)
    assert (lay.n_units * (width + 1) >= 1 << 20) == big
    est = did.point_estimates(lay)
    got = did.bootstrap(lay, est, draws=150, seed=8, chunk=64)
    monkeypatch.setattr(kernels, "expands", lambda: False)  # the numpy table's whole array, as before
    want = did.bootstrap(lay, est, draws=150, seed=8, chunk=64)
    assert np.array_equal(got.cells, want.cells) and np.array_equal(got.group_w, want.group_w)
