"""The OLMo order read at positions (orders/shuffle.py, orders/globalindices.py) is numpy's PCG64 shuffle, exactly.

The libraries' ``_build_global_indices`` is ``Generator(PCG64(seed)).shuffle(arange(N, uint32))``; every check here
compares against that call itself. Small block sizes make the tests cross many replay blocks, mask boundaries (powers
of two) and the band of draws decided one by one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from memtui.orders import globalindices, shuffle
from memtui.orders.globalindices import PartnerCache, ShuffledOrder
from memtui.orders.shuffle import swap_partners, trace_back


def numpy_order(n: int, seed: int) -> np.ndarray:
    order = np.arange(n, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed)).shuffle(order)
    return order


@pytest.fixture(params=[4096, 5, 1], ids=["blocks4096", "blocks5", "blocks1"])
def small_blocks(request, monkeypatch):
    monkeypatch.setattr(shuffle, "_MIN_STEPS", request.param)
    return request.param


@pytest.mark.parametrize("n", [1, 2, 3, 31, 32, 33, 257, 1000, 4097, 65537])
@pytest.mark.parametrize("seed", [0, 6198, 34521])
def test_swap_partners_redo_numpys_shuffle_swap_by_swap(n, seed, small_blocks):
    j = swap_partners(n, seed)
    assert j.dtype == np.uint32 and len(j) == max(n, 1)
    order = np.arange(n, dtype=np.uint32)
    for i in range(n - 1, 0, -1):  # Fisher-Yates as numpy runs it: i from the top, swapped with j[i] <= i
        assert j[i] <= i
        p = int(j[i])
        order[i], order[p] = order[p], order[i]
    np.testing.assert_array_equal(order, numpy_order(n, seed))


@pytest.mark.parametrize("n", [2, 100, 4096, 70001])
def test_trace_back_reads_the_shuffled_array(n, small_blocks):
    seed = n + 11
    lib = numpy_order(n, seed)
    j = swap_partners(n, seed)
    np.testing.assert_array_equal(trace_back(j, np.arange(n)), lib)  # every position
    rng = np.random.default_rng(n)
    some = rng.permutation(n)[: min(n, 500)]
    some = rng.permutation(np.unique(np.r_[some, 0, n - 1]))  # in no order
    np.testing.assert_array_equal(trace_back(j, some), lib[some])


def test_trace_back_refuses_repeated_or_outside_positions():
    j = swap_partners(50, 1)
    with pytest.raises(ValueError):
        trace_back(j, np.array([3, 3]))
    with pytest.raises(ValueError):
        trace_back(j, np.array([50]))


@pytest.mark.parametrize("chunk,length", [(1, None), (1, 8_000), (4, None), (4, 36_000)])
def test_shuffled_order_is_the_libraries_global_indices(chunk, length, small_blocks):
    units, seed = 9_001, 17
    order = ShuffledOrder(units, seed, chunk, length=length)
    lib = numpy_order(units, seed)
    if chunk > 1:  # OLMo-core's repeat-then-add
        lib = (np.repeat(lib * np.uint32(chunk), chunk).reshape(-1, chunk) + np.arange(chunk, dtype=np.uint32)).ravel()
    lib = lib[:length]
    assert len(order) == len(lib)
    pos = np.random.default_rng(0).integers(0, len(lib), size=3000)  # repeats included
    got = order[pos]
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, lib[pos])
    np.testing.assert_array_equal(order[5:40:3], lib[5:40:3])
    assert order[-1] == lib[-1] and order[7] == lib[7]
    np.testing.assert_array_equal(np.asarray(order), lib)
    assert len(order[np.zeros(0, dtype=np.int64)]) == 0
    with pytest.raises(IndexError):
        order[np.array([len(lib)])]


def _cached_run(tmp_path, monkeypatch, n=40_000, seed=5):
    monkeypatch.setattr(globalindices, "CACHE_FROM", 1000)
    order = ShuffledOrder(n, seed, cache=tmp_path)
    pos = np.arange(0, n, 7)
    return order, pos, order[pos]


def test_partners_are_cached_and_read_back(tmp_path, monkeypatch):
    first, pos, values = _cached_run(tmp_path, monkeypatch)
    assert not first.cached
    data, meta = PartnerCache(tmp_path).paths(40_000, 5)
    assert data.is_file() and json.loads(meta.read_text())["n"] == 40_000
    assert not list(tmp_path.glob(".*.tmp"))  # written beside and renamed
    again, _, values2 = _cached_run(tmp_path, monkeypatch)
    assert again.cached
    np.testing.assert_array_equal(values2, values)
    np.testing.assert_array_equal(values, numpy_order(40_000, 5)[pos])
    other = ShuffledOrder(40_000, 6, cache=tmp_path)  # another seed: its own file, not this one
    other[pos]
    assert not other.cached


@pytest.mark.parametrize("damage", ["flip", "truncate", "grow", "meta", "header"])
def test_a_damaged_cache_is_refused_and_rebuilt(tmp_path, monkeypatch, damage):
    _, pos, values = _cached_run(tmp_path, monkeypatch)
    data, meta = PartnerCache(tmp_path).paths(40_000, 5)
    raw = bytearray(data.read_bytes())
    if damage == "flip":
        raw[-1000] ^= 0x40
    elif damage == "truncate":
        raw = raw[:-4]
    elif damage == "grow":
        raw += b"\0\0\0\0"
    elif damage == "header":
        raw[:6] = b"NOTNPY"
    if damage == "meta":
        meta.write_text("{not json")
    else:
        data.write_bytes(bytes(raw))
    assert PartnerCache(tmp_path).load(40_000, 5) is None
    rebuilt, _, values2 = _cached_run(tmp_path, monkeypatch)
    assert not rebuilt.cached
    np.testing.assert_array_equal(values2, values)
    assert PartnerCache(tmp_path).load(40_000, 5) is not None  # replaced by a good one
    assert _cached_run(tmp_path, monkeypatch)[0].cached


def test_an_unwritable_cache_only_costs_the_replay(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setattr(globalindices, "CACHE_FROM", 1000)
    order = ShuffledOrder(5000, 3, cache=blocker / "cache")
    np.testing.assert_array_equal(order[np.arange(5000)], numpy_order(5000, 3))


def test_small_runs_are_not_cached(tmp_path):
    order = ShuffledOrder(5000, 3, cache=tmp_path)
    order[np.arange(10)]
    assert not any(tmp_path.iterdir())


def test_default_cache_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMTUI_CACHE", str(tmp_path / "mine"))
    assert globalindices.default_cache() == tmp_path / "mine" / "shuffles"
    monkeypatch.delenv("MEMTUI_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert globalindices.default_cache() == tmp_path / "xdg" / "memtui" / "shuffles"


def test_an_olmo_panel_reads_the_order_at_its_positions_only(tmp_path, monkeypatch):
    import yaml
    from order_files import write_tokens

    from memtui.orders.olmo import olmo_stage
    from memtui.orders.sampling import ID_SHIFT, sample_order

    monkeypatch.setattr(globalindices, "CACHE_FROM", 100)
    monkeypatch.setattr(ShuffledOrder, "__array__", lambda *a, **k: pytest.fail("the whole order was built"))
    paths = write_tokens(tmp_path, [3000 * 4 + 3, 2100 * 4], np.uint16, seq_len=4)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"seed": 6198, "model": {"max_sequence_length": 4}, "global_train_batch_size": 8,
                                      "data": {"paths": paths, "memmap_dtype": "uint16"}}))  # fmt: skip
    lib = numpy_order(5100, 6198)
    for cached in (False, True):  # the second build reads the swap partners back
        stage = olmo_stage(config, cache=tmp_path / "cache")
        panel = sample_order([stage], [0, 100, 300], k=5, m=4, n_controls=50, seed=1)
        assert stage.indices().cached is cached
        np.testing.assert_array_equal(panel.ids & ((1 << ID_SHIFT) - 1), lib[panel.position])


def test_build_cli_keeps_the_partners_in_the_cache_folder(tmp_path, cli, monkeypatch):
    import yaml
    from order_files import write_tokens

    monkeypatch.setattr(globalindices, "CACHE_FROM", 100)
    monkeypatch.setenv("MEMTUI_CACHE", str(tmp_path / "default"))
    paths = write_tokens(tmp_path, [300 * 16, 250 * 16], np.uint32, seq_len=16)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"seed": 6198, "model": {"max_sequence_length": 16}, "global_train_batch_size": 6,
                                      "data": {"paths": paths, "memmap_dtype": "uint32"}}))  # fmt: skip
    args = ["--order", "olmo", "--config", config, "--steps", "0,10,20", "-k", 2, "-m", 2, "--n-validation", 10]
    code, _, err = cli("build", tmp_path / "a.h5", *args, "--cache", tmp_path / "mine")
    assert code == 0, err
    assert PartnerCache(tmp_path / "mine").load(550, 6198) is not None
    code, _, err = cli("build", tmp_path / "b.h5", *args)  # no --cache: $MEMTUI_CACHE where the user set it
    assert code == 0, err
    assert PartnerCache(tmp_path / "default" / "shuffles").load(550, 6198) is not None
    monkeypatch.delenv("MEMTUI_CACHE")  # else nothing is kept: 4 bytes an instance are not written unasked
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, _, err = cli("build", tmp_path / "b2.h5", *args)
    assert code == 0, err
    assert not (tmp_path / "xdg").exists()
    code, _, err = cli("build", tmp_path / "c.h5", "--order", "amber", "--chunks", tmp_path, "--cache", tmp_path)
    assert code == 2 and "--cache belongs to --order neox" in err
