"""The compiled loop (``engine/_kernels.c`` through ``engine.kernels``) makes the numpy code's float32 operations in
the same order: every draw, law, frame and summary is the numpy code's bit for bit, for lone estimates, subgroups,
clusters and suites, under both bands. ``MEMTUI_REQUIRE_KERNELS=1`` (CI) makes a missing build a failure, not a skip."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from memtui.engine import bands, did, kernels, layout
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import estimate_by
from memtui.estimation.suite import estimate_suite
from memtui.estimation.suite_load import Suite
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation, simulate

REQUIRED = os.environ.get("MEMTUI_REQUIRE_KERNELS") == "1"
needs_kernels = pytest.mark.skipif(
    not kernels.available() and not REQUIRED, reason="the compiled loop is not built here (no C compiler at install)"
)


def test_the_compiled_loop_is_built_where_required():
    if REQUIRED:
        assert kernels.available(), "MEMTUI_REQUIRE_KERNELS=1 but memtui/engine/_kernels*.so was not built"


def _panel(seed: int = 0, effect: float = 1.0, per_cohort: int = 12) -> Panel:
    d = simulate(Simulation(n_cohorts=9, per_cohort=per_cohort, n_never=60, n_checkpoints=11, seed=seed, effect=effect))
    values = dict(d["values"])
    values["entropy"] = 2.0 + 0.02 * values["rank"]
    batch = (np.arange(len(d["ids"])) // 4).astype(float)  # clusters of four rows, each inside one cohort
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics=values, signs={**d["signs"], "entropy": -1}, covariates={"site": batch})  # fmt: skip


def _digest(obj, h) -> None:
    """Feed every number and string of an estimate, a suite's or subgroups' result (dataclasses, frames, arrays,
    dicts, lists) into the hash ``h``."""
    if isinstance(obj, np.ndarray):
        h.update(str(obj.dtype).encode() + np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, pl.DataFrame):
        h.update(obj.write_csv().encode())  # shortest round-trip text of every float: exact
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            h.update(str(key).encode())
            _digest(obj[key], h)
    elif isinstance(obj, list | tuple):
        for item in obj:
            _digest(item, h)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            if f.name not in ("settings", "_cells", "lay"):
                _digest(getattr(obj, f.name), h)
    else:
        h.update(repr(obj).encode())


def _both(run, monkeypatch) -> tuple[str, str]:
    """The digests of ``run()`` with the compiled loop and with the numpy code."""
    compiled = hashlib.sha256()
    _digest(run(), compiled)
    monkeypatch.setattr(kernels, "_LIB", None)
    assert not kernels.available()
    plain = hashlib.sha256()
    _digest(run(), plain)
    return compiled.hexdigest(), plain.hexdigest()


SETTINGS = [
    Settings(draws=97),
    Settings(draws=97, band="classic"),
    Settings(draws=97, control_group="not_yet_treated"),  # cells whose own cohort sits in the control prefix
    Settings(draws=97, control_group="not_yet_treated", band="classic", seed=4),
    Settings(draws=97, estimator="difference"),
    Settings(draws=97, base_period="universal", family="all", alpha=0.1),
    Settings(draws=300, seed=2),  # chunks of 128 draws and a short last one
]


@needs_kernels
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.band}-{s.control_group}-{s.estimator}-{s.draws}")
def test_a_lone_estimate_is_the_numpy_codes_bit_for_bit(settings, monkeypatch):
    panel = _panel()
    compiled, plain = _both(lambda: estimate(panel, settings), monkeypatch)
    assert compiled == plain


@needs_kernels
@pytest.mark.parametrize("settings", [Settings(draws=97), Settings(draws=97, band="classic")], ids=["cal", "classic"])
def test_a_clustered_estimate_is_the_numpy_codes_bit_for_bit(settings, monkeypatch):
    panel = _panel(per_cohort=16)
    compiled, plain = _both(lambda: estimate(panel, replace(settings, cluster="site")), monkeypatch)
    assert compiled == plain


@needs_kernels
def test_subgroup_estimates_are_the_numpy_codes_bit_for_bit(monkeypatch):
    # subgroups by a categorical covariate: two labels, each a layout of its own in one bootstrap pass
    panel = _panel(per_cohort=16)
    panel = replace(panel, covariates={**panel.covariates, "half": (np.arange(len(panel.ids)) % 2).astype(float)})
    compiled, plain = _both(lambda: estimate_by(panel, Settings(draws=97), "half"), monkeypatch)
    assert compiled == plain


@needs_kernels
@pytest.mark.parametrize("band", ["calibrated", "classic"])
def test_a_suite_is_the_numpy_codes_bit_for_bit(band, monkeypatch):
    panels = [_panel(seed=i, effect=0.5 + 0.5 * i) for i in range(3)]
    suite = Suite(names=["a", "b", "c"], panels=panels)
    metrics = ("loglik", "accuracy", "rank", "entropy")  # the later metrics reuse the earlier ones' draws arrays

    def run():
        sr = estimate_suite(suite, Settings(draws=150, band=band), metrics=metrics, keep_draws=("accuracy",))
        return sr.results, sr.draws

    compiled, plain = _both(run, monkeypatch)
    assert compiled == plain


def _block(rng, n_cells: int, bc: int, any_own: bool):
    """Random arguments of one block of kernels.cell_draws, with the shapes _Stack gives it."""
    f32 = np.float32
    groups, width, upto = 6, 5, 3
    r = rng.normal(size=(groups * width, bc)).astype(f32)
    cum_r = rng.normal(size=((upto + 1) * width, bc)).astype(f32)
    w = rng.normal(size=(groups, bc)).astype(f32)
    cum_w = rng.normal(size=(upto + 1, bc)).astype(f32)
    g = rng.integers(0, groups, n_cells)
    p = rng.integers(1, upto + 1, n_cells)
    t, b = rng.integers(0, width, n_cells), rng.integers(0, width, n_cells)
    rows = (g * width + t, g * width + b, p * width + t, p * width + b)
    index = tuple(np.ascontiguousarray(x, np.int64) for x in rows)
    own = (rng.random(n_cells) < 0.5) & any_own
    per_cell = [rng.uniform(0.01, 1, (n_cells, 1)).astype(f32) for _ in range(4)]
    return r, cum_r, w, cum_w, index, g.astype(np.int64), p.astype(np.int64), own, per_cell


def _numpy_block(r, cum_r, w, cum_w, index, g, p, own, per_cell):
    """_Stack.cell_draws' numpy passes, written out."""
    inv_nt, inv_nc, dm, dmu = per_cell
    own_t, own_b, ctrl_t, ctrl_b = index
    w_own = np.take(w, g, axis=0)
    ctrl_w = np.take(cum_w, p, axis=0)
    own_col = own[:, None]
    if own.any():
        ctrl_w = ctrl_w - own_col * w_own
    d_own = np.take(r, own_t, axis=0) - np.take(r, own_b, axis=0)
    treated = (d_own - w_own * dm) * inv_nt
    ctrl = np.take(cum_r, ctrl_t, axis=0) - np.take(cum_r, ctrl_b, axis=0)
    if own.any():
        ctrl -= own_col * d_own
    ctrl -= ctrl_w * dmu
    ctrl *= inv_nc
    return treated, ctrl, treated - ctrl


@needs_kernels
@pytest.mark.parametrize(("any_own", "bc"), [(False, 128), (True, 128), (True, 300), (False, 1)])
def test_the_block_draws_and_parts_are_numpys(any_own, bc):
    rng = np.random.default_rng(bc + any_own)
    r, cum_r, w, cum_w, index, g, p, own, per_cell = _block(rng, 40, bc, any_own)
    treated, ctrl, draws = _numpy_block(r, cum_r, w, cum_w, index, g, p, own, per_cell)
    held = np.full((40, bc + 7), np.nan, np.float32)  # a view of some columns, rows further apart than bc
    out = held[:, 3 : 3 + bc]
    parts = np.empty((40, bc), np.float32), np.empty((40, bc), np.float32)
    kernels.cell_draws(r, cum_r, w, cum_w, index, 0, g, p, own, bool(own.any()), *per_cell, out, *parts)
    assert np.array_equal(out, draws) and np.array_equal(parts[0], treated) and np.array_equal(parts[1], ctrl)
    assert np.isnan(held[:, :3]).all() and np.isnan(held[:, 3 + bc :]).all()  # nothing written outside the view


@needs_kernels
def test_the_block_studentised_maxima_are_numpys_with_nil_and_zero_spreads():
    rng = np.random.default_rng(7)
    n, bc = 50, 200
    r, cum_r, w, cum_w, index, g, p, own, per_cell = _block(rng, n, bc, False)
    treated, ctrl, draws = _numpy_block(r, cum_r, w, cum_w, index, g, p, own, per_cell)
    var = rng.uniform(0, 2, (n, 1)).astype(np.float32)
    var[3] = 0  # a spread that re-centring takes to nothing: 0 / 0 -> 0 where the draw is nil, else inf
    var[4] = np.nan
    k_t, k_c = (rng.uniform(0, 0.3, (n, 1)).astype(np.float32) for _ in range(2))
    label = rng.integers(-1, 3, n).astype(np.int64)
    unit = np.float32(1 / 1.7)
    c = {"unit": unit, "k_t": k_t, "k_c": k_c, "var": var, "groups": [np.flatnonzero(label == i) for i in range(3)],
         "blocks": {}, "squares": (np.empty((n, bc), np.float32), np.empty((n, bc), np.float32))}  # fmt: skip
    expected = np.zeros((3, bc), np.float32)
    bands._studentise_numpy(c, expected, slice(0, n), treated.copy(), ctrl.copy(), draws, True)
    squares, parts = c["squares"]
    # the aggregates: two sparse rows over the cells, as aggregate_spec makes them
    from scipy import sparse

    rows, cols = np.r_[np.zeros(20, int), np.ones(n, int)], np.r_[np.arange(0, 40, 2), np.arange(n)]
    spec_t, spec_c, spec_w = (
        sparse.csr_array((rng.uniform(0, 1, len(rows)).astype(np.float32), (rows, cols)), shape=(2, n)) for _ in "tcw"
    )
    want_t, want_c, want_w = spec_t @ squares, spec_c @ parts, spec_w @ draws
    spec = bands.AggregateSpec(members=[None, None], ase=np.ones(2), treated=spec_t, control=spec_c, weights=spec_w)
    got = np.zeros((3, bc + 5), np.float32)[:, 2 : 2 + bc]
    sums = kernels.AggregateSums(*bands._columns(spec), *(np.zeros((2, bc), np.float32) for _ in "tcw"))
    st = kernels.Studentise(unit=unit, k_t=k_t, k_c=k_c, var=var, label=label, group_max=got, aggregates=sums)
    out = np.empty((n, bc), np.float32)
    kernels.cell_draws(r, cum_r, w, cum_w, index, 0, g, p, own, False, *per_cell, out, studentise=st)
    assert np.array_equal(out, draws)
    assert np.array_equal(got, expected)
    assert np.array_equal(sums.acc_t, want_t) and np.array_equal(sums.acc_c, want_c)
    assert np.array_equal(sums.acc_w, want_w)
    assert np.isinf(got).any()  # the zero spread made it through as numpy makes it


@needs_kernels
def test_the_wrapper_refuses_what_the_loop_cannot_read():
    rng = np.random.default_rng(1)
    r, cum_r, w, cum_w, index, g, p, own, per_cell = _block(rng, 10, 16, False)
    out = np.empty((10, 16), np.float32)
    with pytest.raises(TypeError, match="float64 where float32"):
        kernels.cell_draws(r.astype(np.float64), cum_r, w, cum_w, index, 0, g, p, own, False, *per_cell, out)
    with pytest.raises(ValueError, match="different lengths"):
        kernels.cell_draws(r, cum_r, w, cum_w, index, 0, g[:-1], p, own, False, *per_cell, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        kernels.cell_draws(np.asfortranarray(r), cum_r, w, cum_w, index, 0, g, p, own, False, *per_cell, out)
    with pytest.raises(ValueError, match="another number of draws"):
        kernels.cell_draws(r[:, :8].copy(), cum_r, w, cum_w, index, 0, g, p, own, False, *per_cell, out)


def test_the_draws_pool_hands_back_arrays_of_the_same_shape_only():
    pool = did.DrawsPool()
    a, b = pool.take([(5, 7), (3, 7)])
    pool.give([a, b, np.empty((5, 7))])  # a float64 array is not a draws array: dropped
    c, d, e = pool.take([(3, 7), (5, 7), (5, 7)])
    assert c is b and d is a and e is not a and e.shape == (5, 7) and e.dtype == np.float32


def _np_scale(x: np.ndarray) -> float:
    top = np.max(np.abs(x))
    return top * float(np.std(np.ascontiguousarray(x) / top))


def test_the_scale_made_piece_by_piece_is_np_std_bit_for_bit(monkeypatch):
    """``layout._scale`` sums the rows a piece at a time (never a contiguous copy of them): numpy's pairwise sum of
    the whole, bit for bit, for any shape, strides and piece size (small pieces: many levels of halves)."""
    rng = np.random.default_rng(3)
    for piece in (layout._PIECE, 128, 200):  # numpy halves an array above 128 elements (PW_BLOCKSIZE)
        monkeypatch.setattr(layout, "_PIECE", piece)
        for _ in range(60):
            x = rng.normal(size=(rng.integers(1, 400), rng.integers(1, 40))) * rng.uniform(1e-3, 1e3)
            x += rng.uniform(-9, 9)
            assert layout._scale(x) == _np_scale(x)
            assert layout._scale(x[:, : max(1, x.shape[1] - 1)]) == _np_scale(x[:, : max(1, x.shape[1] - 1)])
    monkeypatch.undo()
    big = rng.normal(size=(3 * layout._PIECE // 7 + 5, 7 * 3)) * 3 + 1  # pieces split inside rows
    assert layout._scale(big[:, :-3]) == _np_scale(big[:, :-3])
    assert layout._scale(np.full((5, 3), 2.5)) == 0 and layout._scale(np.zeros((0, 3))) == 0
    y = rng.normal(size=(300, 12)) * 40 + 7
    treatment = np.r_[np.repeat(np.arange(1, 6) * 10, 40), np.full(100, NEVER)]
    lay = build_layout(y, treatment, np.arange(12) * 10, never=NEVER)
    assert lay.scale == np.max(np.abs(y)) * float(np.std(y / np.max(np.abs(y))))


@needs_kernels
def test_a_block_with_no_cell_groups_and_no_aggregates_is_drawn_and_left_alone():
    """A metric without noise has no usable cell: no group of cells (an empty running maximum, whatever strides
    numpy gives it) and, without members, no aggregates."""
    rng = np.random.default_rng(5)
    n, bc = 12, 128
    r, cum_r, w, cum_w, index, g, p, own, per_cell = _block(rng, n, bc, False)
    _, _, draws = _numpy_block(r, cum_r, w, cum_w, index, g, p, own, per_cell)
    ones = np.ones((n, 1), np.float32)
    empty = np.zeros((0, 1000), np.float32)[:, 128 : 128 + bc]
    st = kernels.Studentise(unit=np.float32(1), k_t=ones, k_c=ones, var=ones, label=np.full(n, -1, np.int64),
                            group_max=empty, aggregates=None)  # fmt: skip
    out = np.empty((n, bc), np.float32)
    kernels.cell_draws(r, cum_r, w, cum_w, index, 0, g, p, own, False, *per_cell, out, studentise=st)
    assert np.array_equal(out, draws)
