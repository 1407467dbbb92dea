"""Building panels to extract into: Pythia-layout memmaps (sampling per macro-batch) and token-id files."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memtui.core.errors import MemtuiError
from memtui.extract.build import build_from_memmap, build_from_tokens, sample_memmap_rows
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.importing import pythia_treatment_step as treatment_of_rows
from memtui.panel.model import NEVER, PAD

B, M, L = 8, 5, 17  # rows per step, steps per macro-batch, tokens per row


@pytest.fixture
def extract_memmap(tmp_path):
    """A synthetic Pythia-layout memmap: 4 macro-batches of M steps x B rows of L uint16 tokens; row r starts with r."""
    n_rows = 4 * M * B
    rows = np.random.default_rng(0).integers(0, 50000, size=(n_rows, L)).astype(np.uint16)
    rows[:, 0] = np.arange(n_rows)
    path = tmp_path / "document.bin"
    rows.tofile(path)
    val = np.random.default_rng(1).integers(0, 50000, size=(30, L)).astype(np.uint16)
    np.save(tmp_path / "val.npy", val)
    return path, tmp_path / "val.npy", rows, val


def test_treatment_formula():
    # row r is in batch r // B, trained at step r // B + 1, first seen by checkpoint (r // (B*M) + 1) * M
    rows = np.array([0, B - 1, B, B * M - 1, B * M, 3 * B * M + 2])
    assert treatment_of_rows(rows, B, M).tolist() == [M, M, M, M, 2 * M, 4 * M]
    assert treatment_of_rows(np.array([0, 1024 * 1000 - 1, 1024 * 1000]), 1024, 1000).tolist() == [1000, 1000, 2000]


def test_sampling_is_k_batches_times_m_rows_per_macro_batch():
    rows = sample_memmap_rows(4 * M * B, batch_size=B, macro=M, k=3, m=2, max_step=4 * M, seed=7)
    assert len(rows) == 4 * 3 * 2 and len(set(rows)) == len(rows)
    batches = rows // B
    for j in range(4):
        in_macro = batches[(batches >= j * M) & (batches < (j + 1) * M)]
        assert len(in_macro) == 6 and len(set(in_macro)) == 3  # 3 batches, 2 rows each
    again = sample_memmap_rows(4 * M * B, batch_size=B, macro=M, k=3, m=2, max_step=4 * M, seed=7)
    np.testing.assert_array_equal(rows, again)
    other = sample_memmap_rows(4 * M * B, batch_size=B, macro=M, k=3, m=2, max_step=4 * M, seed=8)
    assert not np.array_equal(rows, other)


def test_build_from_memmap(tmp_path, extract_memmap):
    memmap, val_path, rows, val = extract_memmap
    out = build_from_memmap(
        tmp_path / "p.h5", memmap, val_path, batch_size=B, macro=M, k=2, m=3, seq_len=L, n_validation=20, seed=0
    )
    panel = read_panel(out)
    assert panel.steps.tolist() == [0, M, 2 * M, 3 * M, 4 * M]
    treated = ~panel.never_treated
    assert treated.sum() == 4 * 2 * 3 and panel.never_treated.sum() == 20
    tokens, lengths = read_tokens(out)
    assert tokens.shape == (panel.n_instances, L) and (lengths == L).all()
    src = panel.source_index
    np.testing.assert_array_equal(tokens[treated], rows[src[treated]])  # the stored ids are the memmap's rows
    np.testing.assert_array_equal(tokens[~treated], val[src[~treated]])
    np.testing.assert_array_equal(panel.treatment[treated], (tokens[treated, 0] // (B * M) + 1) * M)
    assert len(np.unique(panel.ids)) == panel.n_instances and not panel.done.any()
    # steps limit the cohorts that are sampled
    out2 = build_from_memmap(
        tmp_path / "q.h5", memmap, val_path, steps="0:10:5", batch_size=B, macro=M, k=1, m=1, seq_len=L
    )
    assert sorted(set(read_panel(out2).treatment.tolist())) == [NEVER, M, 2 * M]


def test_build_from_memmap_errors(tmp_path, extract_memmap):
    memmap, val_path, *_ = extract_memmap
    with pytest.raises(MemtuiError, match="whole number"):
        build_from_memmap(tmp_path / "p.h5", memmap, val_path, batch_size=B, macro=M, seq_len=L + 1)
    with pytest.raises(MemtuiError, match="no such token file"):
        build_from_memmap(tmp_path / "p.h5", tmp_path / "nope.bin", val_path, seq_len=L)
    with pytest.raises(MemtuiError, match="do not fill one macro-batch"):
        build_from_memmap(tmp_path / "p.h5", memmap, val_path, batch_size=B, macro=1000, seq_len=L)


def test_build_from_npz_and_parquet_with_unequal_lengths(tmp_path):
    seqs = [[1, 2, 3, 4], [5, 6], [7, 8, 9], [10, 11, 12, 13, 14]]
    treat = [100, 200, -1, -1]
    pl.DataFrame({"tokens": seqs, "treatment_step": treat, "id": [11, 12, 13, 14]}).write_parquet(tmp_path / "t.pq")
    (tmp_path / "t.pq").rename(tmp_path / "t.parquet")
    out = build_from_tokens(tmp_path / "a.h5", tmp_path / "t.parquet", steps="0:300:100")
    panel = read_panel(out)
    tokens, lengths = read_tokens(out)
    assert lengths.tolist() == [4, 2, 3, 5] and panel.ids.tolist() == [11, 12, 13, 14]
    assert tokens[1].tolist() == [5, 6, PAD, PAD, PAD] and panel.steps.tolist() == [0, 100, 200, 300]
    padded = np.full((4, 5), PAD)
    for i, s in enumerate(seqs):
        padded[i, : len(s)] = s
    np.savez(tmp_path / "t.npz", tokens=padded, treatment_step=treat, lengths=[4, 2, 3, 5])
    panel = read_panel(build_from_tokens(tmp_path / "b.h5", tmp_path / "t.npz"))
    assert panel.steps.tolist() == [0, 100, 200] and panel.treatment.tolist() == treat
    np.save(tmp_path / "t.npy", padded)
    np.save(tmp_path / "treat.npy", np.array(treat))
    panel = read_panel(build_from_tokens(tmp_path / "c.h5", tmp_path / "t.npy", treatment_file=tmp_path / "treat.npy"))
    assert panel.n_instances == 4
    with pytest.raises(MemtuiError, match="treatment-file"):
        build_from_tokens(tmp_path / "d.h5", tmp_path / "t.npy")
    with pytest.raises(MemtuiError, match="no column 'step'"):
        build_from_tokens(tmp_path / "e.h5", tmp_path / "t.parquet", treatment_column="step")


def test_cli_build(tmp_path, extract_memmap, cli):
    memmap, val_path, *_ = extract_memmap
    code, out, err = cli(
        "build",
        tmp_path / "p.h5",
        "--memmap",
        memmap,
        "--validation",
        val_path,
        "--batch-size",
        B,
        "--macro",
        M,
        "-k",
        2,
        "-m",
        2,
        "--seq-len",
        L,
    )
    assert code == 0, err
    assert "16 treated, 30 validation" in out and "memtui extract" in out
    code, out, err = cli("build", tmp_path / "p.h5", "--memmap", memmap, "--validation", val_path, "--seq-len", L)
    assert code == 2 and "already exists" in err
    code, out, err = cli("build", tmp_path / "q.h5", "--memmap", memmap)
    assert code == 2 and "--validation" in err
