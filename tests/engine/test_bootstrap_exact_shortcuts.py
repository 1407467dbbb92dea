"""The bootstrap's two shortcuts for Rademacher multipliers give what the plain numpy code gave, bit for bit: the
multipliers from a table of each byte's bits, and the groups' multiplier sums from a sum per group's slice (integer
sums, exact in float32) instead of np.add.reduceat."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.engine import did
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
