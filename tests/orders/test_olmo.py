"""OLMo and OLMo-core data orders: every sampled instance's tokens and treatment step against the libraries' batches.

OLMo-core (``ai2-olmo-core``) runs here: its ``NumpyFSLDataset`` and ``NumpyFSLDataLoader`` yield the batches of a
small run, and memtui's panel must agree with them instance by instance. ``ai2-olmo`` cannot be installed beside
memtui (it pins numpy<2 and ai2-olmo-core 0.1.0), so OLMo 1/2 is checked against a transcription of its
``IterableDataset._build_global_indices`` and ``MemMapDataset`` numbering (olmo/data/*.py at 59a53e3), whose PCG64
shuffle is the same numpy call OLMo-core's loader makes: the OLMo-core tests check that stream.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from order_files import write_tokens

from memtui.core.errors import MemtuiError
from memtui.orders.olmo import build_global_indices, match_revisions, olmo_core_stage, olmo_stage
from memtui.orders.repetition import RepetitionFilter
from memtui.orders.sampling import ID_SHIFT, NEVER, sample_order
from memtui.orders.tokenfiles import TokenFiles

L = 16


# -- OLMo-core: the library itself ------------------------------------------------------------------------------------


def _olmo_core_run(tmp_path, paths, *, seed, batch_tokens, target=None, filter_cfg=None, dtype="uint32"):
    """config.json as the run writes it, and the library's batches in training order (batch i trains step i+1)."""
    olmo_core = pytest.importorskip("olmo_core", reason="ai2-olmo-core is in the test extra")
    from olmo_core.data import InstanceFilterConfig, NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.data.types import NumpyDatasetDType

    del olmo_core
    ds_cfg = NumpyFSLDatasetConfig(
        paths=paths,
        sequence_length=L,
        max_target_sequence_length=target,
        tokenizer=TokenizerConfig(vocab_size=100, eos_token_id=1, pad_token_id=0),
        dtype=NumpyDatasetDType[dtype],
        instance_filter_config=InstanceFilterConfig(**filter_cfg) if filter_cfg else None,
        work_dir=str(tmp_path / "work"),
    )
    dl_cfg = NumpyDataLoaderConfig(global_batch_size=batch_tokens, seed=seed)
    config = tmp_path / "config.json"
    written = {"run_name": "run", "dataset": ds_cfg.as_config_dict(), "data_loader": dl_cfg.as_config_dict()}
    config.write_text(json.dumps(written))
    loader = dl_cfg.build(ds_cfg.build())
    loader.reshuffle(epoch=1)  # the trainer's first epoch
    batches = list(loader)
    return config, batches


def _check_against_batches(panel, batches, steps, batch):
    """Every treated instance is in the batch of a step in its cohort, with the same tokens; controls in none."""
    last = max(steps)
    trained = {}  # instance -> (step, tokens, instance_mask)
    for i, b in enumerate(batches[:last]):
        for row, idx in enumerate(b["index"].tolist()):
            mask = bool(b["instance_mask"][row]) if "instance_mask" in b else True
            trained[idx] = (i + 1, b["input_ids"][row].numpy(), mask)
    treated = panel.treatment != NEVER
    assert treated.sum() > 0 and (~treated).sum() > 0
    for i in np.flatnonzero(treated):
        inst = int(panel.ids[i]) & ((1 << ID_SHIFT) - 1)
        step, tokens, mask = trained[inst]
        assert mask, "a masked instance was kept"
        assert panel.treatment[i] == min(s for s in steps if s >= step)
        assert panel.position[i] // batch + 1 == step
        np.testing.assert_array_equal(panel.tokens[i], tokens)
    for i in np.flatnonzero(~treated):
        assert int(panel.ids[i]) & ((1 << ID_SHIFT) - 1) not in trained


@pytest.mark.parametrize("target", [None, 2 * L])
def test_olmo_core_panel_matches_the_library_batches(tmp_path, target):
    paths = write_tokens(tmp_path, [50 * L + 5, 37 * L, 91 * L + 15], np.uint32, seed=1)
    config, batches = _olmo_core_run(tmp_path, paths, seed=34521, batch_tokens=8 * L, target=target)
    stage = olmo_core_stage(config)
    assert stage.batch == 8
    order = stage.indices()
    assert order.dtype == np.uint32
    lib = np.concatenate([b["index"].numpy() for b in batches])
    np.testing.assert_array_equal(order[: len(lib)], lib)  # the whole order, position by position
    steps = [0, 3, 7, 12]
    panel = sample_order([stage], steps, k=2, m=3, n_controls=20, seed=5)
    _check_against_batches(panel, batches, steps, 8)
    assert panel.revisions == [f"step{s}-tokens{math.ceil(s * 8 * L / 1e9)}B" for s in steps]


def test_olmo_core_instance_filter_matches_the_library_mask(tmp_path):
    paths = write_tokens(tmp_path, [60 * L, 45 * L + 3], np.uint16, seed=2, repeats=0.3)
    flt = {"repetition_max_period": 3, "repetition_min_period": 1, "repetition_max_count": 4}
    config, batches = _olmo_core_run(tmp_path, paths, seed=7, batch_tokens=4 * L, filter_cfg=flt, dtype="uint16")
    stage = olmo_core_stage(config)
    tokens = np.concatenate([b["input_ids"].numpy() for b in batches])
    lib_mask = np.concatenate([b["instance_mask"].numpy() for b in batches])
    assert 0 < (~lib_mask).sum() < len(lib_mask)
    np.testing.assert_array_equal(stage.instance_filter.keep(tokens), lib_mask)
    steps = [0, 5, 10, 20]
    panel = sample_order([stage], steps, k=4, m=4, n_controls=30, seed=1)
    _check_against_batches(panel, batches, steps, 4)
    dropped = panel.counts["run/treated_filtered"] + panel.counts["run/controls_filtered"]
    assert dropped > 0 and panel.counts["run/treated"] == int((panel.treatment != NEVER).sum())


def test_repetition_filter_equals_find_periodic_sequences():
    utils = pytest.importorskip("olmo_core.data.utils", reason="ai2-olmo-core is in the test extra")
    rng = np.random.default_rng(0)
    for length in (9, 40, 97, 128):
        rows = rng.integers(0, 3, size=(300, length))
        for r in rows[::2]:  # half carry a planted repeat of a random period and count
            p, reps = int(rng.integers(1, 15)), int(rng.integers(2, 40))
            seg = np.resize(rng.integers(0, 3, size=p), min(p * reps, length))
            start = int(rng.integers(0, length - len(seg) + 1))
            r[start : start + len(seg)] = seg
        for flt in (RepetitionFilter(), RepetitionFilter(13, 1, 4), RepetitionFilter(5, 2, 3)):
            lib = [
                not any(
                    m.times >= flt.max_count
                    for m in utils.find_periodic_sequences(r, max_period=flt.max_period, min_period=flt.min_period)
                )
                for r in rows
            ]
            np.testing.assert_array_equal(flt.keep(rows), lib)


# -- OLMo 1/2: a transcription of ai2-olmo's code ---------------------------------------------------------------------


def _olmo_transcribed_indices(n, seed, epoch, total_size):
    """olmo/data/iterable_dataset.py::_build_global_indices (drop_last=False pads with the order's start)."""
    indices = np.arange(n, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed=seed + epoch)).shuffle(indices)
    parts, pad = [indices], total_size - n
    while pad > 0:
        parts.append(indices[: min(pad, n)])
        pad -= len(parts[-1])
    return np.concatenate(parts)


def _olmo_config(tmp_path, paths, **extra):
    cfg = {
        "run_name": "OLMo-test",
        "seed": 6198,
        "model": {"max_sequence_length": L},
        "global_train_batch_size": 6,
        "data": {"paths": paths, "memmap_dtype": "uint32"},
    }
    for key, value in extra.items():
        if key.startswith("data_"):
            cfg["data"][key[5:]] = value
        else:
            cfg[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_olmo_panel_matches_the_transcribed_library(tmp_path):
    paths = write_tokens(tmp_path, [40 * L + 7, 29 * L, 55 * L + 1], np.uint32, seed=3, repeats=0.2)
    flt = {"repetition_max_period": 3, "repetition_min_period": 1, "repetition_max_count": 4}
    n = 40 + 29 + 55
    later = olmo_stage(_olmo_config(tmp_path, paths, data_seed=17, epoch=2))
    lib = _olmo_transcribed_indices(n, 17, 2, total_size=n + 4)  # data.seed wins over seed; epoch from the config
    np.testing.assert_array_equal(later.indices()[:n], lib[:n])
    stage = olmo_stage(_olmo_config(tmp_path, paths, data_seed=17, data_instance_filter=flt))
    lib = _olmo_transcribed_indices(n, 17, 0, total_size=n + 4)
    np.testing.assert_array_equal(stage.indices()[:n], lib[:n])
    # MemMapDataset: the instance at a global number is its file's k-th run of L tokens
    flat = [np.fromfile(p, dtype=np.uint32) for p in paths]
    starts = np.cumsum([0, 40, 29, 55])

    def library_item(idx):
        f = int(np.searchsorted(starts, idx, side="right") - 1)
        k = idx - starts[f]
        return flat[f][k * L : (k + 1) * L]

    steps = [0, 2, 6, 9]
    panel = sample_order([stage], steps, k=2, m=3, n_controls=25, seed=2, controls="beyond")
    for i in range(len(panel.ids)):
        pos = int(panel.position[i])
        idx = int(lib[pos])  # the library's instance at that position of its order
        assert int(panel.ids[i]) & ((1 << ID_SHIFT) - 1) == idx
        np.testing.assert_array_equal(panel.tokens[i], library_item(idx))
        assert RepetitionFilter(3, 1, 4).keep(panel.tokens[i : i + 1])[0]
        if panel.treatment[i] != NEVER:
            step = pos // 6 + 1  # inspect_train_data: step s starts at (s - 1) * B
            assert panel.treatment[i] == min(s for s in steps if s >= step)
        else:
            assert pos >= max(steps) * 6
        f = int(panel.file[i])
        assert panel.offset[i] == (idx - starts[f]) * L
    assert sum(v for k, v in panel.counts.items() if k.endswith("_filtered")) > 0


def test_olmo_global_indices_file_and_datasets_order(tmp_path):
    paths = write_tokens(tmp_path, [30 * L, 20 * L, 25 * L], np.uint16, seed=4)
    config = _olmo_config(tmp_path, None, data_paths=None, data_memmap_dtype="uint16")
    cfg = yaml.safe_load(config.read_text())
    cfg["data"]["datasets"] = {"zeta": [paths[0]], "alpha": [paths[1], paths[2]]}  # sorted: alpha first
    del cfg["data"]["paths"]
    config.write_text(yaml.safe_dump(cfg))
    rebuilt = olmo_stage(config)
    assert rebuilt.files.paths == (paths[1], paths[2], paths[0]) and rebuilt.files.labels[-1] == "zeta"
    raw = tmp_path / "global_indices.npy"  # as the trainer writes it: a raw uint32 memmap
    _olmo_transcribed_indices(75, 6198, 0, 78).tofile(raw)
    given = olmo_stage(config, global_indices=raw)
    a = sample_order([rebuilt], [0, 4, 8], k=2, m=2, n_controls=10, seed=9)
    b = sample_order([given], [0, 4, 8], k=2, m=2, n_controls=10, seed=9)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.tokens, b.tokens)


def test_build_global_indices_is_the_pcg64_shuffle_both_libraries_make():
    # the draws numpy's Generator.shuffle makes for seed 6198 (OLMo 2 7B's seed): the Fisher-Yates step i swaps
    # position i with a bounded draw from PCG64's 32-bit stream; the libraries call exactly this on uint32 indices
    order = build_global_indices(1000, 6198)
    ref = np.arange(1000, dtype=np.int64)
    np.random.Generator(np.random.PCG64(6198)).shuffle(ref)
    np.testing.assert_array_equal(order, ref)
    assert order.dtype == np.uint32 and sorted(order.tolist()) == list(range(1000))


def test_staged_panel_keeps_controls_within_each_stage(tmp_path):
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    p1 = write_tokens(tmp_path / "s1", [80 * L], np.uint32, seed=5)
    p2 = write_tokens(tmp_path / "s2", [40 * L], np.uint32, seed=6)
    s1 = olmo_stage(_olmo_config(tmp_path / "s1", p1), name="stage1", revision_prefix="stage1-")
    s1.last_step = 10  # stage 1 ends at step 10; stage 2 restarts its own steps (restore_dataloader: false)
    s2 = olmo_stage(_olmo_config(tmp_path / "s2", p2, restore_dataloader=False), name="stage2", offset=10)
    panel = sample_order([s1, s2], [0, 5, 10, 12, 14], k=1, m=3, n_controls=5, seed=0)
    assert panel.stage_names == ["stage1", "stage2"]
    for si, (lo, hi) in enumerate([(0, 10), (10, 14)]):
        rows = panel.stage == si
        treat = panel.treatment[rows]
        assert (treat[treat != NEVER] > lo).all() and (treat[treat != NEVER] <= hi).all()
        assert (treat == NEVER).sum() == 5
    assert len(np.unique(panel.ids)) == len(panel.ids)
    assert panel.revisions[1].startswith("stage1-step5-tokens") and panel.revisions[-1].startswith("step4-tokens")


def test_match_revisions_uses_the_hub_names():
    branches = ["main", "stage1-step928646-tokens3896B", "stage1-step1000-tokens5B", "stage2-ingredient1-step1000"]
    assert match_revisions([1000, 928646], branches, "stage1-") == {
        1000: "stage1-step1000-tokens5B",
        928646: "stage1-step928646-tokens3896B",
    }
    with pytest.raises(MemtuiError, match="stage1-step2000"):
        match_revisions([2000], branches, "stage1-")


# -- remote files -----------------------------------------------------------------------------------------------------


def test_remote_files_are_read_by_byte_ranges_only(tmp_path, range_server):
    local = write_tokens(range_server.root, [70 * L + 3, 50 * L], np.uint32, seed=8)
    urls = [f"{range_server.url}/{p.rsplit('/', 1)[1]}" for p in local]
    a = sample_order([olmo_stage(_olmo_config(tmp_path, local))], [0, 3, 6], k=2, m=2, n_controls=8, seed=4)
    remote_cfg = tmp_path / "remote"
    remote_cfg.mkdir()
    b = sample_order([olmo_stage(_olmo_config(remote_cfg, urls))], [0, 3, 6], k=2, m=2, n_controls=8, seed=4)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    methods = [r[0] for r in range_server.requests]
    assert methods.count("HEAD") == 2
    gets = [r for r in range_server.requests if r[0] == "GET"]
    assert len(gets) == len(b.ids) and all(r[2] and r[2].startswith("bytes=") for r in gets)
    assert all(int(r[2].split("-")[1]) - int(r[2][6:].split("-")[0]) + 1 == 4 * L for r in gets)


def test_data_root_remaps_paths(tmp_path):
    mirror = tmp_path / "mirror" / "preprocessed"
    mirror.mkdir(parents=True)
    write_tokens(mirror, [30 * L, 30 * L], np.uint32, seed=9)
    published = ["http://olmo-data.org/preprocessed/part-00.npy", "http://olmo-data.org/preprocessed/part-01.npy"]
    stage = olmo_stage(_olmo_config(tmp_path, published), data_root=mirror)
    assert stage.files.paths == (str(mirror / "part-00.npy"), str(mirror / "part-01.npy"))


# -- bad configs: one line each ---------------------------------------------------------------------------------------


def _one_line(exc):
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_bad_olmo_configs_are_one_line(tmp_path):
    paths = write_tokens(tmp_path, [30 * L], np.uint32)
    cases = {
        "lists no token files": dict(data_paths=None),
        "no seed": dict(seed=None),
        "no such token file": dict(data_paths=[str(tmp_path / "missing.npy")]),
        "global_train_batch_size must be": dict(global_train_batch_size=0),
        "not one of uint8": dict(data_memmap_dtype="float32"),
    }
    for expect, change in cases.items():
        with pytest.raises(MemtuiError) as exc:
            olmo_stage(_olmo_config(tmp_path, paths, **change))
        assert expect in _one_line(exc)
    odd = tmp_path / "odd.npy"
    odd.write_bytes(b"\0" * (4 * L * 3 + 2))  # not a whole number of uint32 tokens
    with pytest.raises(MemtuiError) as exc:
        olmo_stage(_olmo_config(tmp_path, [odd.as_posix()]))
    assert "not a whole number of uint32 tokens" in _one_line(exc)
    short = tmp_path / "short.npy"
    short.write_bytes(b"\0" * (4 * (L - 1)))
    with pytest.raises(MemtuiError) as exc:
        olmo_stage(_olmo_config(tmp_path, [short.as_posix()]))
    assert "no whole instance" in _one_line(exc)


def test_bad_olmo_core_configs_are_one_line(tmp_path):
    paths = write_tokens(tmp_path, [30 * L], np.uint32)
    good = {
        "dataset": {"paths": paths, "sequence_length": L, "dtype": "uint32"},
        "data_loader": {"global_batch_size": 4 * L, "seed": 1},
    }
    cases = {
        "not a whole number of 16-token instances": ("data_loader", "global_batch_size", 4 * L + 3),
        "data_loader.seed is missing": ("data_loader", "seed", None),
        "pass the run's data_paths.txt": ("dataset", "paths", []),
        "sequence_length must be": ("dataset", "sequence_length", "16"),
    }
    for expect, (section, key, value) in cases.items():
        cfg = json.loads(json.dumps(good))
        cfg[section][key] = value
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        with pytest.raises(MemtuiError) as exc:
            olmo_core_stage(path)
        assert expect in _one_line(exc)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(MemtuiError) as exc:
        olmo_core_stage(tmp_path / "config.json")
    assert "not a readable JSON" in _one_line(exc)


def test_later_epochs_refuse_beyond_controls(tmp_path):
    paths = write_tokens(tmp_path, [40 * L], np.uint32)
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "dataset": {"paths": paths, "sequence_length": L, "dtype": "uint32"},
                "data_loader": {"global_batch_size": 4 * L, "seed": 1},
            }
        )
    )
    with pytest.raises(MemtuiError) as exc:
        sample_order([olmo_core_stage(path, epoch=2)], [0, 2, 4], n_controls=3)
    assert "held-out" in _one_line(exc)
    (tmp_path / "held").mkdir()
    held = write_tokens(tmp_path / "held", [10 * L], np.uint32, seed=11)
    panel = sample_order(
        [olmo_core_stage(path, epoch=2, heldout=held)], [0, 2, 4], n_controls=3, controls="held-out", k=1, m=1
    )
    assert (panel.treatment == NEVER).sum() == 3 and (panel.position[panel.treatment == NEVER] == -1).all()
    assert TokenFiles.open(held, np.dtype("uint32"), L).n_instances == 10
