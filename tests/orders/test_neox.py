"""GPT-NeoX/Megatron data orders, checked against the family's own code.

Small replicas are written by megatron-core itself: ``IndexedDatasetBuilder`` writes the token files and
``GPTDataset`` builds (and saves) its index maps for several seeds, over documents that span sequence boundaries and
with several epochs. memtui's tokens for every instance must equal ``GPTDataset[i]`` (tokens = the first seq_len,
labels = the last seq_len of memtui's seq_len + 1), and its step ``i // batch_size + 1``.
"""

from __future__ import annotations

import json
import shutil
import threading
import warnings
from collections import OrderedDict
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.orders import sources
from memtui.orders.hubble import hubble_instances, read_perturbation_info
from memtui.orders.neox import (
    IndexedTokens,
    IndexMaps,
    NeoxOrder,
    cohort,
    owned_pieces,
    sample_panel_instances,
    seed_steps,
)
from memtui.panel.model import NEVER

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mcore = pytest.importorskip("megatron.core.datasets.gpt_dataset", reason="megatron-core is not installed")
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    from megatron.core.datasets.utils import Split

    try:
        from megatron.core.datasets import helpers_cpp  # noqa: F401  the compiled index builder GPTDataset needs
    except ImportError as exc:  # pragma: no cover - depends on the wheel
        pytest.skip(f"megatron-core's C++ helpers are not built ({exc})", allow_module_level=True)

SEQ_LEN, BATCH, VOCAB, PAD_ID = 16, 4, 1000, 998  # the pad id is never a data token (GPTDataset zeroes pads)
SEEDS = (1234, 1, 2)


class _Tokenizer:  # what GPTDataset asks of a tokenizer
    vocab_size, eod, pad = VOCAB, 999, PAD_ID
    unique_identifiers = OrderedDict(cls="memtui-test")


def _gpt_dataset(prefix: str, seed: int, num_samples: int, cache: Path):
    cfg = mcore.GPTDatasetConfig(
        random_seed=seed,
        sequence_length=SEQ_LEN,
        blend=([prefix], None),
        split="100,0,0",
        path_to_cache=str(cache),
        tokenizer=_Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    ds = IndexedDataset(prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mcore.GPTDataset(ds, prefix, np.arange(len(ds), dtype=np.int32), num_samples, Split.train, cfg)


def _maps_prefix(cache: Path, seed_ds) -> str:
    return str(cache / f"{seed_ds.unique_description_hash}-GPTDataset-train")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    rng = np.random.default_rng(7)
    prefix = str(root / "corpus_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    # lengths from 1 token to 3 sequences: many documents span sequence boundaries, some hold several sequences
    for n in rng.integers(1, 3 * SEQ_LEN, size=60):
        builder.add_document(torch.from_numpy(rng.integers(0, 990, n)), [int(n)])
    builder.finalize(prefix + ".idx")
    tokens = IndexedTokens(prefix)
    n_tokens = int(tokens.sizes.take(np.arange(tokens.n_documents)).sum())
    num_samples = int(2.5 * n_tokens // SEQ_LEN)  # three epochs: every document is trained several times
    cache = root / "cache"
    datasets = {seed: _gpt_dataset(prefix, seed, num_samples, cache) for seed in SEEDS}
    orders = {seed: NeoxOrder(tokens, IndexMaps(_maps_prefix(cache, ds)), BATCH) for seed, ds in datasets.items()}
    return {"root": root, "prefix": prefix, "tokens": tokens, "datasets": datasets, "orders": orders}


def _library_sequence(ds, i) -> np.ndarray:
    item = ds[i]
    assert torch.equal(item["tokens"][1:], item["labels"][:-1])  # what the library trains on: a shift by one
    return np.r_[item["tokens"].numpy(), item["labels"].numpy()[-1:]]


def test_every_sequence_equals_gptdataset(replica):
    for seed, ds in replica["datasets"].items():
        order = replica["orders"][seed]
        assert order.seq_len == SEQ_LEN and order.n_sequences == len(ds)
        ours = order.tokens(np.arange(len(ds)))
        expected = np.stack([_library_sequence(ds, i) for i in range(len(ds))])
        np.testing.assert_array_equal(ours, expected)
        spanning = sum(len(ds._query_document_sample_shuffle_indices(i)[1]) > 1 for i in range(len(ds)))
        assert spanning > len(ds) // 3  # the replica exercises documents that span sequence boundaries
        assert len(ds.document_index) >= 3 * replica["tokens"].n_documents  # several epochs


def test_panel_instances_are_the_library_sequences_with_their_steps(replica):
    ds, order = replica["datasets"][1], replica["orders"][1]
    last = len(ds) // BATCH - 3  # the model "trained" to this step; the maps order 3+ batches more
    steps = [0, 5, 10, 20, last]
    panel = sample_panel_instances(order, steps=steps, per_cohort=3, n_controls=6, seed=11, train_steps=last)
    trained = panel.treatment != NEVER
    assert trained.sum() == 3 * 4 and (~trained).sum() == 6
    for i, row in zip(panel.ids, panel.tokens, strict=True):
        np.testing.assert_array_equal(row, _library_sequence(ds, int(i)))
    np.testing.assert_array_equal(panel.step, panel.ids // BATCH + 1)
    # treatment: the first checkpoint at or after the training step; controls past the last trained step
    np.testing.assert_array_equal(panel.treatment[trained], cohort(panel.step[trained], steps))
    assert np.all(panel.step[~trained] > last)
    for g in steps[1:]:
        assert (panel.treatment == g).sum() == 3
    again = sample_panel_instances(order, steps=steps, per_cohort=3, n_controls=6, seed=11, train_steps=last)
    np.testing.assert_array_equal(again.ids, panel.ids)  # seeded


def test_provenance_rebuilds_the_tokens(replica):
    order, tokens = replica["orders"][2], replica["tokens"]
    ids = np.arange(0, order.n_sequences, 7)
    matrix, p = order.read(ids)
    for k, i in enumerate(ids):
        mine = np.flatnonzero(p.instance == k)
        parts = [tokens.document(int(p.document[m]), int(p.offset[m]), int(p.length[m])) for m in mine]
        np.testing.assert_array_equal(np.concatenate(parts), matrix[k])
        assert order.sequence(int(i)).tolist() == matrix[k].tolist()


def _brute_exposure(ds, batch: int, sizes: np.ndarray, targets: list[list[tuple[int, int]]]):
    """Independent count: the shuffled documents as one stream of (document, offset) tokens; sample j's input tokens
    are stream[j*seq_len : (j+1)*seq_len] (samples are seq_len apart); position i trains sample shuffle[i]."""
    stream = [(int(d), k) for d in ds.document_index for k in range(int(sizes[d]))]
    inverse = np.full(len(ds.sample_index) - 1, -1)
    inverse[np.asarray(ds.shuffle_index)] = np.arange(len(ds.shuffle_index))
    first_seen: dict[tuple[int, int], int] = {}
    for t, tok in enumerate(stream):
        j = t // SEQ_LEN
        if j < len(inverse) and inverse[j] >= 0:
            step = inverse[j] // batch + 1
            first_seen[tok] = min(first_seen.get(tok, step), step)
    out = []
    for toks in targets:
        seen = [first_seen.get(tok, -1) for tok in toks]
        out.append((min(s for s in seen if s > 0) if any(s > 0 for s in seen) else -1, -1 if -1 in seen else max(seen)))
    return out


def test_seed_steps_match_a_brute_force_count(replica):
    home, others = replica["orders"][1234], [replica["orders"][1], replica["orders"][2]]
    sizes = replica["tokens"].sizes.take(np.arange(replica["tokens"].n_documents))
    ids = np.arange(0, home.n_sequences, 5)
    first, full = seed_steps(home, ids, others)
    p = owned_pieces(home, ids)
    targets = [
        [(int(p.document[m]), int(p.offset[m]) + r) for m in np.flatnonzero(p.instance == k)
         for r in range(p.length[m])]
        for k in range(len(ids))
    ]  # fmt: skip
    for s, seed in enumerate((1, 2)):
        brute = _brute_exposure(replica["datasets"][seed], BATCH, sizes, targets)
        np.testing.assert_array_equal(first[:, s], [b[0] for b in brute])
        np.testing.assert_array_equal(full[:, s], [b[1] for b in brute])
    assert np.all(full >= first)
    # under its own order, an instance's tokens were all trained by its own step (earlier if an epoch before had them)
    own_first, own_full = seed_steps(home, ids, [home])
    assert np.all(own_full[:, 0] <= home.step(ids))
    home_brute = _brute_exposure(replica["datasets"][1234], BATCH, sizes, targets)
    np.testing.assert_array_equal(own_full[:, 0], [b[1] for b in home_brute])


def _neox_maps(prefix: str, sizes: np.ndarray, num_samples: int, seed: int):
    """GPT-NeoX's ``_build_index_mappings`` ("packed"), step for step: its doc index (all epochs shuffled together),
    the shared C++ sample builder (GPT-NeoX's helpers.cpp and Megatron-core's agree for add_extra_token=1, drop_last),
    and one shuffle over all samples; written under GPT-NeoX's file names."""
    from megatron.core.datasets import helpers

    tokens_per_epoch = int(sizes.sum())
    epochs = 0
    while True:
        epochs += 1
        if (epochs * tokens_per_epoch - 1) // SEQ_LEN >= num_samples:
            break
    rng = np.random.RandomState(seed=seed)
    doc_idx = np.mgrid[0:epochs, 0 : len(sizes)][1].reshape(-1).astype(np.int32)
    rng.shuffle(doc_idx)
    sample_idx = helpers.build_sample_idx(sizes.astype(np.int32), doc_idx, SEQ_LEN, epochs, tokens_per_epoch)
    shuffle_idx = np.arange(len(sample_idx) - 1, dtype=np.uint32)
    rng.shuffle(shuffle_idx)
    name = f"{prefix}_train_indexmap_{num_samples}ns_{SEQ_LEN}sl_{seed}s"
    for suffix, arr in (("_doc_idx.npy", doc_idx), ("_sample_idx.npy", sample_idx), ("_shuffle_idx.npy", shuffle_idx)):
        np.save(name + suffix, arr, allow_pickle=True)
    return name, (doc_idx, sample_idx, shuffle_idx)


def test_neox_layout_read_by_the_library(replica, tmp_path):
    """Maps in GPT-NeoX's layout and names; the reference reader is GPTDataset's own, loading these maps from its
    cache (its __getitem__ is GPT-NeoX's GPT2Dataset.__getitem__ for one dataset, no labels, full samples)."""
    tokens = replica["tokens"]
    sizes = tokens.sizes.take(np.arange(tokens.n_documents))
    name, maps = _neox_maps(replica["prefix"], sizes, 150, seed=5)
    cache = tmp_path / "cache"
    ds = _gpt_dataset(replica["prefix"], 99, 150, cache)
    target = _maps_prefix(cache, ds)
    for suffix, arr in zip(("-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"), maps, strict=True):
        np.save(target + suffix, arr, allow_pickle=True)
    reference = _gpt_dataset(replica["prefix"], 99, 150, cache)  # a cache hit: it loads the NeoX maps
    order = NeoxOrder(tokens, IndexMaps(name), BATCH, seq_len=SEQ_LEN)
    assert IndexMaps(name).layout == "neox" and order.n_sequences == len(reference)
    expected = np.stack([_library_sequence(reference, i) for i in range(len(reference))])
    np.testing.assert_array_equal(order.tokens(np.arange(len(reference))), expected)


# -- bad input: one line each -----------------------------------------------------------------------------------------


def _copy_maps(src_prefix: str, dst: Path) -> str:
    dst.mkdir(exist_ok=True)
    out = str(dst / "m")
    for a, b in zip(
        ("-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"),
        ("_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"),
        strict=True,
    ):
        shutil.copy(src_prefix + a, out + b)
    return out


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message
    return message


def test_bad_inputs_are_one_line_errors(replica, tmp_path):
    maps = replica["orders"][1].maps
    prefix = _copy_maps(maps.prefix, tmp_path / "maps")
    tokens = replica["tokens"]

    shuffle = np.load(prefix + "_shuffle_idx.npy")
    np.save(prefix + "_shuffle_idx.npy", np.r_[shuffle, shuffle[:5]])  # longer than the samples
    with pytest.raises(MemtuiError) as e:
        IndexMaps(prefix)
    assert "disagree in length" in _one_line(e)

    bad = shuffle.copy()
    bad[3] = len(np.load(prefix + "_sample_idx.npy")) - 1  # a sample index past the data
    np.save(prefix + "_shuffle_idx.npy", bad)
    order = NeoxOrder(tokens, IndexMaps(prefix), BATCH)
    order.tokens([0, 1, 2])  # the others still read
    with pytest.raises(MemtuiError) as e:
        order.tokens([3])
    assert "past the data" in _one_line(e)

    with pytest.raises(MemtuiError) as e:
        IndexedTokens(tmp_path / "nothing_here")
    assert "no such index file" in _one_line(e)

    with pytest.raises(MemtuiError) as e:
        IndexMaps(str(tmp_path / "maps" / "seed7"))  # a seed that was never built
    assert "no index maps" in _one_line(e)
    (tmp_path / "maps" / "x_doc_idx.npy").write_bytes(b"")
    with pytest.raises(MemtuiError) as e:
        IndexMaps(str(tmp_path / "maps" / "x"))
    assert "_sample_idx.npy" in _one_line(e)

    cut = tmp_path / "cut"
    shutil.copy(replica["prefix"] + ".idx", str(cut) + ".idx")
    data = Path(replica["prefix"] + ".bin").read_bytes()
    Path(str(cut) + ".bin").write_bytes(data[: len(data) - 10])
    with pytest.raises(MemtuiError) as e:
        IndexedTokens(cut)
    assert "truncated" in _one_line(e)

    Path(str(cut) + ".idx").write_bytes(b"NOTMEGATRON" + bytes(40))
    with pytest.raises(MemtuiError) as e:
        IndexedTokens(cut)
    assert "bad magic" in _one_line(e)

    with pytest.raises(MemtuiError) as e:
        NeoxOrder(tokens, maps, BATCH, seq_len=SEQ_LEN + 1)
    assert "not seq_len + 1" in _one_line(e)
    with pytest.raises(MemtuiError) as e:
        sample_panel_instances(replica["orders"][1], steps=[0, 10**6], per_cohort=2)
    assert "the maps hold" in _one_line(e)
    last = replica["orders"][1].n_sequences // BATCH
    with pytest.raises(MemtuiError) as e:
        sample_panel_instances(replica["orders"][1], steps=[0, 5], per_cohort=2, n_controls=3, train_steps=last + 1)
    assert "no never-trained sequences" in _one_line(e)


# -- remote: byte ranges over HTTP, resumable -------------------------------------------------------------------------


class _RangeHandler(SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=a-b`` (206), as the hub's and any CDN's file servers answer; failures on cue."""

    server_state: dict = {}

    def log_message(self, *args):
        pass

    def do_GET(self):
        state = self.server_state
        with state["lock"]:
            state["gets"] += 1
            fail = state["fail_after"] is not None and state["gets"] > state["fail_after"]
            drop = state["drop_next"] > 0
            if drop:
                state["drop_next"] -= 1
        if fail:
            self.send_error(503)
            return
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        spec = self.headers.get("Range")
        if spec is None:
            body, status = data, 200
        else:
            a, b = spec.removeprefix("bytes=").split("-")
            body, status = data[int(a) : int(b) + 1], 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if drop else body)  # a dropped connection: half the body

    def do_HEAD(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()


@pytest.fixture
def server(replica, monkeypatch):
    monkeypatch.setattr(sources, "BLOCK", 256)  # small blocks: the replica's files span many of them
    state = {"gets": 0, "fail_after": None, "drop_next": 0, "lock": threading.Lock()}
    handler = type("H", (_RangeHandler,), {"server_state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(replica["root"])))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    httpd.shutdown()
    httpd.server_close()


def test_remote_reads_equal_local_and_resume(replica, server, tmp_path):
    base, state = server
    root = replica["root"]
    local = replica["orders"][2]
    rel = Path(local.maps.prefix).relative_to(root)
    ids = np.arange(0, local.n_sequences, 3)
    expected = local.tokens(ids)

    def remote_order(cache):
        tokens = IndexedTokens(f"{base}/{Path(replica['prefix']).name}", cache_dir=cache)
        return NeoxOrder(tokens, IndexMaps(f"{base}/{rel}", cache_dir=cache), BATCH)

    state["drop_next"] = 2  # two dropped connections: retried
    np.testing.assert_array_equal(remote_order(None).tokens(ids), expected)
    cold = state["gets"]

    cache = tmp_path / "blocks"
    state.update(gets=0, fail_after=cold // 2)  # the link dies half-way through
    with pytest.raises(MemtuiError) as e:
        remote_order(cache).tokens(ids)
    _one_line(e)
    state.update(gets=0, fail_after=None)
    np.testing.assert_array_equal(remote_order(cache).tokens(ids), expected)
    resumed = state["gets"]
    assert 0 < resumed < cold  # only what the broken run had not stored
    state.update(gets=0)
    np.testing.assert_array_equal(remote_order(cache).tokens(ids), expected)
    assert state["gets"] == 0  # everything from the cache
    data_size = Path(replica["prefix"] + ".bin").stat().st_size
    assert data_size > 4 * 256  # ... and the test reads ranges of a file many blocks long

    with pytest.raises(MemtuiError) as e:
        IndexedTokens(f"{base}/missing_prefix")
    assert "no such index file" in _one_line(e)


# -- Hubble: inserted examples --------------------------------------------------------------------------------------


def test_hubble_inserted_examples(replica, tmp_path):
    """A perturbed corpus made as perturb_hubble.py does (examples written into the .bin over chosen training
    sequences, seq_shuffle records), then read back: copies grouped, counts, steps, first insertion as treatment."""
    order = replica["orders"][1]
    perturbed = tmp_path / "perturbed_text_document"
    shutil.copy(replica["prefix"] + ".idx", str(perturbed) + ".idx")
    shutil.copy(replica["prefix"] + ".bin", str(perturbed) + ".bin")
    rng = np.random.default_rng(3)
    examples = [rng.integers(0, 990, n) for n in (5, 9, 3)]
    copies = [1, 4, 2]
    # positions whose sequences share no document with another chosen one: a document is trained once per epoch
    # here, and overwriting it for one copy would change the other copies (Hubble's 100B run is under one epoch)
    order_samples = order.samples(np.arange(order.n_sequences))
    pool, used = [], set()
    for i in rng.permutation(order.n_sequences):
        docs = set(order.pieces([i]).document.tolist())
        if not docs & used:
            pool.append(int(i))
            used |= docs
    records, placed = [], []
    with open(str(perturbed) + ".bin", "r+b") as f:
        k = 0
        for e, (tokens, d) in enumerate(zip(examples, copies, strict=True)):
            for _ in range(d):
                i = int(pool[k])
                k += 1
                p = order.pieces([i])
                j = int(order_samples[i])
                rows = order.maps.sample_idx.take([j, j + 1])
                start = int(rng.integers(0, SEQ_LEN + 1 - len(tokens)))
                seq = order.sequence(i)
                seq[start : start + len(tokens)] = tokens
                col = 0
                for doc, off, n in zip(p.document, p.offset, p.length, strict=True):  # overwrite in place
                    ptr = int(replica["tokens"].pointers.take([doc])[0]) + 2 * int(off)
                    f.seek(ptr)
                    f.write(seq[col : col + n].astype(np.uint16).tobytes())
                    col += n
                records.append(
                    {
                        "perturbation_file": "passages_x", "perturbation_idx": e, "pt_loc": i, "pt_shuffle_idx": j,
                        "doc_index_f": int(rows[0, 0]), "doc_index_l": int(rows[1, 0]),
                        "offset_f": int(rows[0, 1]), "offset_l": int(rows[1, 1]),
                        "pt_injection_pos": 1, "pt_window_offset": 0, "pt_injection_len": len(tokens),
                        "orig_doc_seq_sizes": [start, SEQ_LEN + 1 - start],
                    }
                )  # fmt: skip
                placed.append((e, i))
    info = tmp_path / "perturbed_text_document_perturbation_info.json"
    info.write_text("\n".join(json.dumps(r) for r in records) + "\n")

    steps = list(range(0, order.n_sequences // BATCH + 1, 5))
    perturbed_order = NeoxOrder(IndexedTokens(perturbed), order.maps, BATCH)
    got = hubble_instances(perturbed_order, read_perturbation_info(info), checkpoints=steps)
    assert sorted(got.duplicates.tolist()) == sorted(copies)
    for tokens, d in zip(examples, copies, strict=True):
        (row,) = [r for r in range(len(got.tokens)) if np.array_equal(got.tokens[r], tokens)]
        assert got.duplicates[row] == d
        where = np.array([i for e, i in placed if np.array_equal(examples[e], tokens)])
        np.testing.assert_array_equal(got.steps[row], np.sort(where // BATCH + 1))
        assert got.first_position[row] == where.min()
        assert got.treatment[row] == cohort(where.min() // BATCH + 1, steps)

    records[0]["pt_shuffle_idx"] += 1
    info.write_text("\n".join(json.dumps(r) for r in records))
    with pytest.raises(MemtuiError) as e:
        hubble_instances(perturbed_order, read_perturbation_info(info), checkpoints=steps)
    assert "disagrees with the index maps" in _one_line(e)
