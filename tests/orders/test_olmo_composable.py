"""OLMo-core's composable loader: every shuffle strategy, two seeds each, against ai2-olmo-core's own loader.

The library (``olmo_core.data.composable``) builds a small run of several ``ConcatAndChunkInstanceSource``s over token
files and yields its batches; ``memtui build --order olmo-core`` reads the config.json the run would write, and every
sampled instance must be the library's instance at that position, with its tokens, its source and the treatment step
of the batch that trained it. The tail that fills no batch is never sampled and is recorded in the panel.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from order_files import write_tokens

from memtui.core.errors import MemtuiError
from memtui.orders.olmo import olmo_core_stage
from memtui.orders.olmo_composable import STRATEGIES, SourceOrder
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER

L = 16
BATCH = 8  # instances per step: 162 (or 93 interleaved) instances leave a tail of 2 (or 5)


def _library_run(folder, groups, *, seed, strategy, shuffle=True, max_len=None, per_epoch=-1, epoch=1):
    """config.json as an OLMo-core run writes it, and the library's batches for ``epoch`` (batch i: step i + 1)."""
    pytest.importorskip("olmo_core", reason="ai2-olmo-core is in the test extra")
    from olmo_core.data import TokenizerConfig
    from olmo_core.data.composable import ComposableDataLoader, ConcatAndChunkInstanceSource

    tok = TokenizerConfig(vocab_size=100, eos_token_id=1, pad_token_id=0)
    sources = [
        ConcatAndChunkInstanceSource.Config.from_npy(
            *paths, tokenizer=tok, sequence_length=L, max_sequence_length=max_len, dtype="uint32", label=label
        )
        for label, paths in groups.items()
    ]
    loader_cfg = ComposableDataLoader.Config(
        tokenizer=tok,
        global_batch_size=BATCH * L,
        seed=seed,
        shuffle=shuffle,
        shuffle_strategy=strategy,
        sources_per_epoch=per_epoch,
        work_dir=str(folder / "work"),
        display_source_visualization=False,
    )
    config = folder / "config.json"
    written = {"run_name": "composable", "dataset": [s.as_config_dict() for s in sources],
               "data_loader": loader_cfg.as_config_dict()}  # fmt: skip
    config.write_text(json.dumps(written))
    loader = loader_cfg.build(*[s.build(str(folder / "work")) for s in sources])
    loader.reshuffle(epoch=epoch)
    return config, list(loader)


def _groups(folder, sizes, seed):
    """Token files per source label: sizes in instances, a few stray tokens at each file's end."""
    out = {}
    for k, (label, counts) in enumerate(sizes.items()):
        sub = folder / label
        sub.mkdir()
        out[label] = write_tokens(sub, [n * L + 3 for n in counts], np.uint32, seed=seed + k)
    return out


SIZES = {"web": [40, 25], "code": [31], "math": [36, 30]}  # 65, 31, 66 instances: 162 in all


def _trained(batches):
    return {int(i): (b, row) for b, batch in enumerate(batches) for row, i in enumerate(batch["index"].tolist())}


def _check(out, batches, steps):
    """Each instance is the library's at its position; treated ones at their batch's checkpoint; controls later."""
    panel, (tokens, _) = read_panel(out), read_tokens(out)
    prov = panel.provenance
    order = np.concatenate([b["index"].numpy() for b in batches])
    lib = {int(i): (b, r) for b, batch in enumerate(batches) for r, i in enumerate(batch["index"].tolist())}
    assert (panel.treatment != NEVER).any() and (panel.treatment == NEVER).any()
    for i in range(panel.n_instances):
        pos = int(prov["position"][i])
        assert pos < len(order), "an instance of the dropped tail was sampled"
        b, row = pos // BATCH, pos % BATCH
        np.testing.assert_array_equal(tokens[i], batches[b]["input_ids"][row].numpy())
        assert prov["source"][i] == batches[b]["metadata"][row]["source"]
        assert lib[int(order[pos])] == (b, row)
        if panel.treatment[i] != NEVER:
            assert panel.treatment[i] == min(s for s in steps if s >= b + 1)
        else:
            assert b + 1 > max(steps)
    return panel


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", [11, 90210])
def test_every_strategy_matches_the_library_via_the_cli(tmp_path, cli, strategy, seed):
    groups = _groups(tmp_path, SIZES, seed)
    config, batches = _library_run(tmp_path, groups, seed=seed, strategy=strategy)
    stage = olmo_core_stage(config)
    lib = np.concatenate([b["index"].numpy() for b in batches])
    np.testing.assert_array_equal(stage.indices()[np.arange(len(lib))], lib)  # the whole order, position by position
    np.testing.assert_array_equal(np.asarray(stage.indices()), lib)
    out = tmp_path / "panel.h5"
    steps = [0, 3, 6, 9]
    code, _, err = cli("build", out, "--order", "olmo-core", "--config", config, "--steps", ",".join(map(str, steps)),
                       "-k", 3, "-m", 4, "--n-validation", 12, "--seed", seed % 7)  # fmt: skip
    assert code == 0, err
    panel = _check(out, batches, steps)
    total = 162 if strategy != "interleaved_source" else 3 * 31
    tail = total % BATCH
    assert panel.attrs["shuffle_strategy"] == strategy
    assert len(lib) == total - tail
    assert (f"{tail} instances at the order's tail" in panel.attrs["never_trained"]) == (tail > 0)
    if strategy == "interleaved_source":  # the larger sources' instances beyond 31 each are never in the order
        assert "69 instances of larger sources" in panel.attrs["never_trained"]


def test_chunked_sources_and_no_shuffle_match_the_library(tmp_path, cli):
    groups = _groups(tmp_path, {"a": [40, 26], "b": [22]}, 5)
    for strategy, shuffle in (("intra_source", True), (None, False)):
        config, batches = _library_run(tmp_path, groups, seed=3, strategy=strategy, shuffle=shuffle, max_len=2 * L)
        lib = np.concatenate([b["index"].numpy() for b in batches])
        np.testing.assert_array_equal(np.asarray(olmo_core_stage(config).indices()), lib)
        out = tmp_path / f"panel-{shuffle}.h5"
        code, _, err = cli("build", out, "--order", "olmo-core", "--config", config, "--steps", "0,3,6",
                           "-k", 2, "-m", 3, "--n-validation", 6)  # fmt: skip
        assert code == 0, err
        _check(out, batches, [0, 3, 6])
        assert read_panel(out).attrs["shuffle_strategy"] == (strategy or "no shuffle")


def test_sources_per_epoch_reads_the_epochs_group(tmp_path):
    groups = _groups(tmp_path, {"mix1": [30], "mix2": [27]}, 8)
    for epoch in (1, 2):
        config, batches = _library_run(tmp_path, groups, seed=4, strategy="inter_source", per_epoch=1, epoch=epoch)
        lib = np.concatenate([b["index"].numpy() for b in batches])
        stage = olmo_core_stage(config, epoch=epoch)
        np.testing.assert_array_equal(np.asarray(stage.indices()), lib)
        assert stage.files.labels == (f"mix{epoch}",)


def test_source_order_reads_positions_as_the_whole_array():
    for strategy in (*STRATEGIES, None):
        counts = [50, 13, 37] if strategy == "interleaved_source" else [50, 0, 37, 91]  # an empty source in the rest
        order = SourceOrder(counts, strategy, 7, 1, 8)
        full = np.asarray(order)
        assert len(full) == len(order) and len(order) % 8 == 0
        pos = np.random.default_rng(0).permutation(len(order))[:40]
        np.testing.assert_array_equal(order[pos], full[pos])


def _config(tmp_path, change):
    paths = write_tokens(tmp_path, [30 * L], np.uint32)
    pkg = "olmo_core.data.composable"
    source = {"_CLASS_": f"{pkg}.concat_and_chunk_instance_source.ConcatAndChunkInstanceSourceConfig",
              "sequence_length": L, "label": "web",
              "sources": [{"_CLASS_": f"{pkg}.numpy_document_source.NumpyDocumentSourceConfig",
                           "source_paths": paths, "dtype": "uint32", "source_group_size": 1}]}  # fmt: skip
    loader = {"_CLASS_": f"{pkg}.data_loader.ComposableDataLoaderConfig",
              "global_batch_size": 4 * L, "seed": 1, "shuffle": True, "shuffle_strategy": "intra_source"}  # fmt: skip
    cfg = {"dataset": [source], "data_loader": loader}
    change(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


REFUSALS = {
    "shuffle_strategy 'by_length' is not one memtui knows": lambda c: c["data_loader"].update(
        shuffle_strategy="by_length"
    ),
    "shuffle_strategy 7 is not one": lambda c: c["data_loader"].update(shuffle_strategy=7),
    "shuffle_strategy is set but shuffle is false": lambda c: c["data_loader"].update(shuffle=False),
    "shuffle must be true or false": lambda c: c["data_loader"].update(shuffle="yes"),
    "MixingInstanceSourceConfig is not supported": lambda c: c["dataset"][0].update(
        _CLASS_="olmo_core.data.composable.mixing_instance_source.MixingInstanceSourceConfig"
    ),
    "dataset must be a non-empty list": lambda c: c.update(dataset=[]),
    "source_group_size -1 joins files": lambda c: c["dataset"][0]["sources"][0].update(source_group_size=-1),
    "glob pattern": lambda c: c["dataset"][0]["sources"][0].update(source_paths=["/data/*.npy"]),
    "label_mask_paths": lambda c: c["dataset"][0]["sources"][0].update(label_mask_paths=["m.npy"]),
    "token dtype 'float32'": lambda c: c["dataset"][0]["sources"][0].update(dtype="float32"),
    "no such": lambda c: c["dataset"][0]["sources"][0].update(source_paths=["/nonexistent/x.npy"]),
    "sources_per_epoch 2 does not divide": lambda c: c["data_loader"].update(sources_per_epoch=2),
    "global_batch_size 67 tokens": lambda c: c["data_loader"].update(global_batch_size=67),
    "seed must be a whole number": lambda c: c["data_loader"].update(seed=2**70),
    "max_sequence_length 24 is not a multiple": lambda c: c["dataset"][0].update(max_sequence_length=24),
    "not the composable loader": lambda c: c.update(
        dataset={"paths": ["x"], "sequence_length": L}, data_loader={"shuffle_strategy": "intra_source"}
    ),
}


@pytest.mark.parametrize("expect", list(REFUSALS))
def test_configs_memtui_cannot_read_are_refused_in_one_line(tmp_path, expect):
    with pytest.raises(MemtuiError) as exc:
        olmo_core_stage(_config(tmp_path, REFUSALS[expect]))
    assert expect in str(exc.value) and "\n" not in str(exc.value)


def test_the_classic_loaders_dropped_tail_is_recorded_and_never_sampled(tmp_path, cli):
    from test_olmo import _olmo_core_run

    paths = write_tokens(tmp_path, [50 * L + 5, 37 * L, 91 * L + 15], np.uint32, seed=1)  # 178 instances
    config, batches = _olmo_core_run(tmp_path, paths, seed=4, batch_tokens=8 * L)
    assert sum(len(b["index"]) for b in batches) == 176  # the library trains 22 whole batches
    out = tmp_path / "classic.h5"
    code, _, err = cli("build", out, "--order", "olmo-core", "--config", config, "--steps", "0,10,20",
                       "-k", 2, "-m", 2, "--n-validation", 50)  # fmt: skip
    assert code == 0, err
    panel = read_panel(out)
    assert "2 instances at the order's tail fill no whole batch" in panel.attrs["never_trained"]
    assert panel.provenance["position"].max() < 176
