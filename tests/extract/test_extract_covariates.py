"""The standard covariates: on the shipped samples, and tokengrams' corpus counts against a brute-force count."""

from __future__ import annotations

import importlib.util
import zlib

import numpy as np
import polars as pl
import pytest

from memtui.core.errors import MemtuiError
from memtui.extract.covariates import (
    compute_covariates,
    corpus_covariates,
    table_covariates,
    token_covariates,
    zlib_ratio,
)
from memtui.orders.ngrams import CorpusCounts
from memtui.panel.hdf5 import create_panel, read_panel, read_tokens
from memtui.panel.model import NEVER, PAD
from memtui.panel.samples import SAMPLES, sample_path

# tokengrams (EleutherAI) is a test dependency; without it only the corpus tests are skipped
needs_tokengrams = pytest.mark.skipif(
    importlib.util.find_spec("tokengrams") is None, reason="tokengrams is not installed"
)


# -- brute force: every position of every file, compared token by token -------------------------------------------


def brute_count(files: list[np.ndarray], query: np.ndarray) -> int:
    """Occurrences of ``query`` inside one file (never across two), by comparing every window."""
    q = np.asarray(query)
    total = 0
    for tokens in files:
        if len(tokens) >= len(q):
            windows = np.lib.stride_tricks.sliding_window_view(tokens, len(q))
            total += int((windows == q).all(axis=1).sum())
    return total


def brute_covariates(files: list[np.ndarray], rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """duplicates_exact and ngram13_seen as defined: a 13-gram window is seen when its corpus count exceeds the
    occurrences of that 13-gram inside the row, where the row itself is found whole in the corpus."""
    exact, seen = [], []
    for row in rows:
        exact.append(brute_count(files, row))
        if len(row) < 13:
            seen.append(np.nan)
            continue
        windows = np.lib.stride_tricks.sliding_window_view(row, 13)
        hits = []
        for w in windows:
            own = int((windows == w).all(axis=1).sum()) if exact[-1] >= 1 else 0
            hits.append(brute_count(files, w) - own > 0)
        seen.append(np.mean(hits))
    return np.array(exact, dtype=float), np.array(seen)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two flat uint16 token files over a tiny vocabulary (13-grams repeat by chance), holding copies of some rows."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(5)
    rows = [rng.integers(0, 2, rng.integers(5, 40)) for _ in range(30)]  # 2 tokens: 13-grams repeat by chance
    rows += [np.tile([1, 2, 3], 9)]  # periodic: its 13-grams repeat inside the row
    first = [rng.integers(0, 2, 3000)]
    for k, row in enumerate(rows):
        first += [row] * (k % 3) + [rng.integers(0, 6, 7)]  # rows 0, 3, ...: absent; 1, 4: once; 2, 5: twice
    files = [np.concatenate(first), np.concatenate([rows[0], rng.integers(0, 6, 300), rows[0][:10]])]
    paths = []
    for k, tokens in enumerate(files):
        path = root / f"part{k}.bin"
        tokens.astype(np.uint16).tofile(path)
        paths.append(str(path))
    return {"files": [f.astype(np.int64) for f in files], "paths": paths, "rows": rows, "root": root}


def padded(rows):
    width = max(len(r) for r in rows)
    tokens = np.full((len(rows), width), PAD, dtype=np.int64)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
    return tokens, np.array([len(r) for r in rows])


@needs_tokengrams
def test_tokengrams_counts_equal_a_brute_force_count(corpus):
    counts = CorpusCounts(corpus["paths"], log=lambda _: None)
    rng = np.random.default_rng(0)
    queries = [r for r in corpus["rows"]] + [rng.integers(0, 6, n) for n in (1, 2, 3, 5, 8, 13) for _ in range(20)]
    queries.append(np.concatenate([corpus["files"][0][-5:], corpus["files"][1][:5]]))  # spans the two files: 0
    got = [counts.count(q.tolist()) for q in queries]
    want = [brute_count(corpus["files"], q) for q in queries]
    assert got == want
    assert sum(want) > 100 and sum(w > 1 for w in want) > 10  # the check counted many repeats, not only zeros
    assert counts.count([70000]) == 0 and counts.count([-1, 2]) == 0  # outside 16 bits: never wrapped


@needs_tokengrams
def test_duplicates_and_ngram_novelty_equal_the_brute_force_ones(corpus):
    tokens, lengths = padded(corpus["rows"])
    counts = CorpusCounts(corpus["paths"], log=lambda _: None)
    got = corpus_covariates(tokens, lengths, counts.count)
    exact, seen = brute_covariates(corpus["files"], corpus["rows"])
    np.testing.assert_array_equal(got["duplicates_exact"], exact)
    np.testing.assert_array_equal(got["ngram13_seen"], seen)
    # a range of counts and shares was compared, not only zeros and ones
    assert (exact == 0).any() and (exact == 1).any() and (exact >= 2).any()
    assert ((seen > 0) & (seen < 1)).sum() >= 3 and (seen == 1).any() and (seen == 0).any()
    assert np.isnan(seen[lengths < 13]).all() and (lengths < 13).any()


@needs_tokengrams
def test_an_instance_found_once_has_only_its_own_13grams_not_seen_elsewhere(tmp_path):
    """A row of distinct tokens found once in the corpus: its 13-grams occur only there, so none is seen elsewhere;
    found twice, all are."""
    row = np.arange(100, 140)
    once = np.concatenate([np.arange(1000, 1100), row, np.arange(2000, 2050)])
    for copies, share in ((1, 0.0), (2, 1.0)):
        path = tmp_path / f"c{copies}.bin"
        np.concatenate([once] + [row] * (copies - 1)).astype(np.uint16).tofile(path)
        out = corpus_covariates(*padded([row]), CorpusCounts([str(path)], log=lambda _: None).count)
        assert out["duplicates_exact"][0] == copies and out["ngram13_seen"][0] == share


@needs_tokengrams
def test_a_megatron_dataset_is_counted_from_its_bin(corpus, tmp_path):
    mcore = pytest.importorskip("megatron.core.datasets.indexed_dataset", reason="megatron-core is not installed")
    torch = pytest.importorskip("torch")
    prefix = str(tmp_path / "pile_text_document")
    builder = mcore.IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for doc in np.array_split(corpus["files"][0], 7):
        builder.add_document(torch.from_numpy(doc), [len(doc)])
    builder.finalize(prefix + ".idx")
    for given in (prefix, prefix + ".idx", prefix + ".bin"):
        counts = CorpusCounts([given], index_dir=tmp_path / "index", log=lambda _: None)
        assert [counts.count(r.tolist()) for r in corpus["rows"]] == [
            brute_count(corpus["files"][:1], r) for r in corpus["rows"]
        ]
    assert (tmp_path / "index" / "pile_text_document.bin.tokengrams").is_file()  # built once, then reused


@needs_tokengrams
def test_corpus_refusals(corpus, tmp_path):
    with pytest.raises(MemtuiError, match="no such token file"):
        CorpusCounts([str(tmp_path / "missing")])
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x02\x03")
    with pytest.raises(MemtuiError, match="not a whole number of uint16 tokens"):
        CorpusCounts([str(odd)])
    npy = tmp_path / "real.npy"
    np.save(npy, np.arange(10, dtype=np.uint16))
    with pytest.raises(MemtuiError, match="numpy .npy with a header"):
        CorpusCounts([str(npy)])
    wide = tmp_path / "wide.bin"
    np.arange(10, dtype=np.uint64).tofile(wide)
    with pytest.raises(MemtuiError, match="16- or 32-bit"):
        CorpusCounts([str(wide)], dtype="uint64")
    stale = tmp_path / "stale.bin"
    np.arange(10, dtype=np.uint16).tofile(stale)
    (tmp_path / "stale.bin.tokengrams").write_bytes(b"x" * 8)
    with pytest.raises(MemtuiError, match="is not the index of"):
        CorpusCounts([str(stale)])


# -- the panel's own tokens -------------------------------------------------------------------------------------------


def test_length_and_zlib_are_what_they_say():
    tokens, lengths = padded([np.arange(300) % 7, np.arange(50) * 997 % 50000, np.array([], dtype=np.int64)])
    out = token_covariates(tokens, lengths)
    assert out["length"].tolist() == [300, 50, 0]
    raw = (np.arange(300) % 7).astype("<u2").tobytes()  # uint16: every id of this panel is below 2**16
    assert out["zlib"][0] == len(raw) / len(zlib.compress(raw, 9)) and out["zlib"][0] > 5  # periodic: compresses
    assert 0.5 < out["zlib"][1] < 1.2 and np.isnan(out["zlib"][2])
    assert zlib_ratio(np.array([70000, 1]), np.dtype("<u4")) == 8 / len(zlib.compress(np.array([70000, 1], "<u4"), 9))


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_covariates_of_the_shipped_samples(name):
    panel = read_panel(sample_path(name))
    if not panel.has_tokens:
        with pytest.raises(MemtuiError, match="stores no token ids"):
            compute_covariates(panel, log=lambda _: None)
        return
    tokens, lengths = read_tokens(panel.path)
    out = compute_covariates(panel, log=lambda _: None)
    assert set(out) == {"length", "zlib"}
    assert out["length"].tolist() == lengths.tolist()
    for i in (0, len(lengths) // 2, len(lengths) - 1):  # independently: the row's uint16 bytes through zlib
        raw = tokens[i, : lengths[i]].astype("<u2").tobytes()
        assert out["zlib"][i] == len(raw) / len(zlib.compress(raw, 9))
    assert np.isfinite(out["zlib"]).all() and out["zlib"].min() > 0.5


def test_provenance_gives_source_and_hubble_dose(tmp_path):
    path = create_panel(tmp_path / "p.h5", ids=[1, 2, 3, 4], treatment=[10, 20, NEVER, NEVER], steps=[0, 10, 20],
                        tokens=np.arange(16).reshape(4, 4),
                        provenance={"source": np.array(["Pile-CC", "ArXiv", "Pile-CC", ""]),
                                    "duplicates": np.array([1, 16, 0, 0])})  # fmt: skip
    out = compute_covariates(read_panel(path), only=["source", "duplicates"], log=lambda _: None)
    assert out["source"].tolist() == ["Pile-CC", "ArXiv", "Pile-CC", ""] and out["duplicates"].tolist() == [1, 16, 0, 0]
    with pytest.raises(MemtuiError, match="pass the training corpus with --corpus"):
        compute_covariates(read_panel(path), only=["ngram13_seen"], log=lambda _: None)


# -- a user's table ---------------------------------------------------------------------------------------------------


def test_a_table_is_joined_on_the_instance_id(tmp_path):
    ids = np.array([10, 11, 12, 13])
    frame = pl.DataFrame({"domain": ["b", None, "a"], "id": [13, 10, 11], "score": [0.5, 1.5, None],
                          "flag": [True, False, True]})  # fmt: skip
    for path in (tmp_path / "t.parquet", tmp_path / "t.csv"):
        frame.write_parquet(path) if path.suffix == ".parquet" else frame.write_csv(path)
        out, missing = table_covariates(path, ids)
        assert missing == 1  # instance 12 is not in the table
        assert out["domain"].tolist() == ["", "a", "", "b"]
        np.testing.assert_array_equal(out["score"], [1.5, np.nan, np.nan, 0.5])
        np.testing.assert_array_equal(out["flag"], [0, 1, np.nan, 1])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ({"id": [10, 99], "x": [1, 2]}, "1 ids are not instances of the panel \\(the first: 99\\)"),
        ({"id": [10, 10], "x": [1, 2]}, "ids repeat"),
        ({"key": [10], "x": [1]}, "no column 'id'"),
        ({"id": [10]}, "no columns besides 'id'"),
        ({"id": ["a"], "x": [1]}, "whole-number instance ids"),
    ],
)
def test_bad_tables_are_refused(tmp_path, frame, message):
    path = tmp_path / "t.parquet"
    pl.DataFrame(frame).write_parquet(path)
    with pytest.raises(MemtuiError, match=message):
        table_covariates(path, np.array([10, 11]))
