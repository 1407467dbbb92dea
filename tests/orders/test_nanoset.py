"""``memtui build --order nanoset`` against nanotron's Nanoset on replicas: blended datasets, repeated epochs.

nanotron's PyPI release (0.4) predates the Nanoset and the GitHub package pins what memtui cannot take, so its index is
transcribed here verbatim (pure Python in place of numba) from github.com/huggingface/nanotron at
26ba5a88173bcb801ae87b0cf32486d7bc00d1ef, ``src/nanotron/data/nanoset.py`` (``build_nanoset_index``,
``build_nanoset_index_helper``) and ``data/utils.py`` (``normalize``); the datasets are datatrove's own
``DatatroveFolderDataset`` (installed: the truth for a folder's numbering), built as Nanoset builds them, and the
sampler reads the index in order (``MegatronPretrainingSampler``): step s trains positions [(s-1)B, sB).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from memtui.core.errors import MemtuiError
from memtui.orders.nanoset import NanosetOrder, blend, read_run
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER

L = 15  # tokens.sequence_length: samples are L + 1 tokens


def normalize(weights):  # nanotron/data/utils.py
    w = np.array(weights, dtype=np.float64)
    return w / np.sum(w)


def build_nanoset_index_helper(n_samples, weights, dataset_sizes):  # nanoset.py, without @jit
    dataset_index = np.empty((n_samples,), dtype="uint")
    dataset_sample_index = np.empty((n_samples,), dtype="long")
    current_samples = np.zeros((len(weights),), dtype="long")
    for sample_idx in range(n_samples):
        sample_idx_float = max(sample_idx, 1.0)
        errors = weights * sample_idx_float - current_samples
        max_error_index = np.argmax(errors)
        dataset_index[sample_idx] = max_error_index
        dataset_sample_index[sample_idx] = current_samples[max_error_index] % dataset_sizes[max_error_index]
        current_samples[max_error_index] += 1
    return dataset_index, dataset_sample_index


def build_nanoset_index(dataset_lengths, dataset_weights, train_split_num_samples, random_seed):  # Nanoset's method
    samples_per_epoch = sum(dataset_lengths)
    num_epochs = int(train_split_num_samples / samples_per_epoch) + 1
    dataset_index, dataset_sample_index = build_nanoset_index_helper(
        n_samples=samples_per_epoch, weights=dataset_weights, dataset_sizes=dataset_lengths
    )
    numpy_random_state = np.random.RandomState(random_seed)
    numpy_random_state.shuffle(dataset_index)
    numpy_random_state = np.random.RandomState(random_seed)
    numpy_random_state.shuffle(dataset_sample_index)
    dataset_index = np.concatenate([dataset_index for _ in range(num_epochs)])
    dataset_sample_index = np.concatenate([dataset_sample_index for _ in range(num_epochs)])
    dataset_index = dataset_index[:train_split_num_samples]
    dataset_sample_index = dataset_sample_index[:train_split_num_samples]
    return dataset_index, dataset_sample_index


def write_folders(root, sizes: dict[str, list[int]], seed: int, token_bytes: int = 2):
    """Dataset folders of datatrove .ds files (headerless tokens) with .index and .metadata beside them."""
    rng = np.random.default_rng(seed)
    dtype = np.uint16 if token_bytes == 2 else np.uint32
    folders = []
    for name, samples in sizes.items():
        folder = root / name
        folder.mkdir(parents=True)
        for k, n in enumerate(samples):
            path = folder / f"{k:05d}_tokenized.ds"
            rng.integers(0, 5000, size=n * (L + 1) + 7).astype(dtype).tofile(path)
            (folder / f"{k:05d}_tokenized.ds.index").write_bytes(b"")
        (folder / f"{name}.ds.metadata").write_text(f"tokenizer|{token_bytes}\n")
        folders.append(str(folder))
    return folders


def write_config(path, folders, weights, *, seed, steps, mbs=2, accum=2, dp=2):
    dataset = {"dataset_folder": folders if len(folders) > 1 or weights else folders[0]}
    if weights:
        dataset["dataset_weights"] = weights
    cfg = {"tokens": {"sequence_length": L, "train_steps": steps, "micro_batch_size": mbs,
                      "batch_accumulation_per_replica": accum},
           "parallelism": {"dp": dp, "pp": 1, "tp": 1},
           "data_stages": [{"name": "Stable", "start_training_step": 1,
                            "data": {"dataset": dataset, "seed": seed, "num_loading_workers": 0}}]}  # fmt: skip
    path.write_text(yaml.safe_dump(cfg))
    return path


def library(folders, weights, seed, total):
    """Nanoset's datasets (datatrove) and index, as nanoset.py builds them."""
    dt = pytest.importorskip("datatrove.utils.dataset", reason="datatrove is in the test extra")
    # Nanoset passes filename_pattern=os.path.join(folder, "*.ds"); datatrove 0.10.1 matches patterns relative to the
    # folder (an absolute one finds nothing), so the same files, the folder's own .ds, are asked for as "*.ds"
    datasets = [dt.DatatroveFolderDataset(folder, L, filename_pattern="*.ds", recursive=False, token_size=2,
                                          shuffle=True) for folder in folders]  # fmt: skip
    lengths = [len(d) for d in datasets]
    w = normalize(lengths) if weights is None else normalize(weights)
    di, si = build_nanoset_index(lengths, w, total, seed)
    return datasets, lengths, di, si


SIZES = {"web": [30, 22], "code": [17], "math": [9, 6]}  # 52, 17, 15 samples


@pytest.mark.parametrize(
    ("seed", "weights", "steps"), [(1234, [0.5, 0.3, 0.2], 14), (7, [0.2, 0.2, 0.6], 16), (99, None, 13)]
)
def test_panel_equals_the_nanoset_index_with_repeats(tmp_path, cli, seed, weights, steps):
    folders = write_folders(tmp_path / "data", SIZES, seed)
    config = write_config(tmp_path / "config.yaml", folders, weights, seed=seed, steps=steps)
    batch = 8
    datasets, lengths, di, si = library(folders, weights, seed, steps * batch)
    assert steps * batch > sum(lengths)  # more than one epoch: the order repeats

    run = read_run(config)
    offsets = np.cumsum([0, *lengths])
    lib_inst = offsets[di.astype(np.int64)] + si
    np.testing.assert_array_equal(run.order.instance(np.arange(len(lib_inst))), lib_inst)

    out = tmp_path / "nanoset.h5"
    panel_steps = [0, 2, 4, 6]
    code, _, err = cli("build", out, "--order", "nanoset", "--config", config, "--steps", "0,2,4,6", "-k", 2,
                       "-m", 4, "--n-validation", 20, "--seed", 3)  # fmt: skip
    assert code == 0, err
    panel, (tokens, _) = read_panel(out), read_tokens(out)
    prov = panel.provenance
    assert (panel.treatment != NEVER).any() and (panel.treatment == NEVER).any()
    for i in range(panel.n_instances):
        inst = int(panel.ids[i]) & ((1 << 40) - 1)
        where = np.flatnonzero(lib_inst == inst)  # every exposure in the library's index
        d = int(np.searchsorted(offsets, inst, side="right") - 1)
        np.testing.assert_array_equal(tokens[i], datasets[d][inst - offsets[d]]["input_ids"].numpy())
        assert prov["exposures"][i] == len(where)
        assert prov["source"][i] == os.path.basename(folders[d])
        if panel.treatment[i] != NEVER:
            assert prov["position"][i] == where[0]  # its first exposure
            assert panel.treatment[i] == min(s for s in panel_steps if s >= where[0] // batch + 1)
            assert lib_inst[prov["sampled_position"][i]] == inst
        else:
            assert not len(where) or where[0] // batch + 1 > max(panel_steps)
    assert (prov["exposures"] > 1).any()  # repeats were drawn and counted
    assert panel.attrs["order"] == "nanoset" and "first exposure" in panel.attrs["repeats"]
    code, _, err = cli("covariates", out, "--only", "exposures")  # the dose, for --by exposures
    assert code == 0, err
    np.testing.assert_array_equal(read_panel(out).covariates["exposures"], prov["exposures"])


def test_one_folder_and_the_cut_at_t(tmp_path, cli):
    folders = write_folders(tmp_path / "data", {"fineweb": [40, 33]}, 5)
    config = write_config(tmp_path / "config.yaml", folders, None, seed=1234, steps=6)  # 48 of 73 samples
    datasets, lengths, di, si = library(folders, None, 1234, 48)
    run = read_run(config)
    np.testing.assert_array_equal(run.order.instance(np.arange(48)), si)
    out = tmp_path / "nanoset.h5"
    code, _, err = cli("build", out, "--order", "nanoset", "--config", config, "--steps", "0,2,4", "-k", 1, "-m", 3,
                       "--n-validation", 30)  # fmt: skip
    assert code == 0, err
    panel = read_panel(out)
    assert "25 epoch positions after the cut at T = 48" in panel.attrs["never_trained"]
    controls = panel.treatment == NEVER
    assert (panel.provenance["exposures"][controls] <= 1).all()
    assert (panel.provenance["position"][controls] >= 4 * 8).all()
    assert (panel.provenance["exposures"][controls & (panel.provenance["position"] >= 48)] == 0).all()


def test_blend_equals_the_helper_on_ties_and_skews():
    for lengths, weights in (([5, 5, 5], [1, 1, 1]), ([7, 300, 2], [0.1, 0.1, 0.8]), ([40, 1], [0.5, 0.5])):
        w = normalize(weights)
        lib, _ = build_nanoset_index_helper(sum(lengths), w, lengths)
        np.testing.assert_array_equal(blend(lengths, w), lib)


def test_exposures_count_every_epoch_and_wrap():
    order = NanosetOrder([6, 3], normalize([0.2, 0.8]), 11, 25)  # dataset 1 wraps within an epoch, 25 > 9 samples
    di, si = build_nanoset_index([6, 3], normalize([0.2, 0.8]), 25, 11)
    lib = np.array([0, 6])[di.astype(np.int64)] + si
    insts = np.arange(9)
    first, count = order.exposures(insts)
    for inst in insts:
        where = np.flatnonzero(lib == inst)
        assert count[inst] == len(where) and first[inst] == (where[0] if len(where) else -1)
    assert order.never_in_epoch() == 6 - len(order.picks[0])


def _one_line(exc) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_bad_configs_and_folders_are_refused_in_one_line(tmp_path):
    folders = write_folders(tmp_path / "data", {"a": [10], "b": [12]}, 1)
    good = yaml.safe_load(write_config(tmp_path / "c.yaml", folders, [1, 1], seed=1, steps=3).read_text())
    cases = {
        "data_stages must be": lambda c: c.update(data_stages=[]),
        "2 data stages; name the one": lambda c: c["data_stages"].append(dict(c["data_stages"][0], name="Decay")),
        "starts at step 500": lambda c: c["data_stages"][0].update(start_training_step=500),
        "dataset_weights must be 2 non-negative": lambda c: c["data_stages"][0]["data"]["dataset"].update(
            dataset_weights=[1, "x"]
        ),
        "dataset_weights sum to zero": lambda c: c["data_stages"][0]["data"]["dataset"].update(dataset_weights=[0, 0]),
        "no such dataset folder": lambda c: c["data_stages"][0]["data"]["dataset"].update(
            dataset_folder=[str(tmp_path / "nowhere"), folders[1]]
        ),
        "not a Nanoset": lambda c: c["data_stages"][0]["data"].update(dataset={"hf_dataset_or_datasets": "x"}),
        "tokens.train_steps must be": lambda c: c["tokens"].update(train_steps=2**60),
        "data.seed must be": lambda c: c["data_stages"][0]["data"].update(seed=None),
        "token size 3 bytes": lambda c: c["data_stages"][0]["data"]["dataset"].update(token_size_in_bytes=3),
        "needs 'tokens' and 'parallelism'": lambda c: c.pop("parallelism"),
    }
    for expect, change in cases.items():
        cfg = yaml.safe_load(yaml.safe_dump(good))
        change(cfg)
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(cfg))
        with pytest.raises(MemtuiError) as exc:
            read_run(path)
        assert expect in _one_line(exc), expect
    (tmp_path / "empty").mkdir()
    cfg = yaml.safe_load(yaml.safe_dump(good))
    cfg["data_stages"][0]["data"]["dataset"]["dataset_folder"] = [str(tmp_path / "empty"), folders[1]]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(MemtuiError) as exc:
        read_run(tmp_path / "bad.yaml")
    assert "no .ds token files" in _one_line(exc)
