"""Amber's chunks: cohort = chunk, instances read exactly from their line, lines drawn uniformly without an index."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.orders.amber import _Lines, remote_chunks, sample_amber
from memtui.orders.sampling import NEVER

T = 64  # ids per record in these tests (Amber's are 2049)
SOURCES = ("c4", "arxiv", "refinedweb", "starcoder")


def write_chunks(folder, numbers, lines=30, seed=0, name="train_{k:03d}.jsonl"):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for k in numbers:
        with open(folder / name.format(k=k), "w") as f:
            for _ in range(lines):
                big = rng.random() < 0.5  # records of very different byte lengths
                ids = rng.integers(10_000 if big else 0, 32_000 if big else 10, size=T).tolist()
                f.write(json.dumps({"token_ids": ids, "source": str(rng.choice(SOURCES))}) + "\n")
    return folder


def line_at(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return json.loads(f.readline())


def test_amber_instances_are_their_lines_with_the_chunk_as_cohort(tmp_path):
    folder = write_chunks(tmp_path / "train", range(12))
    steps = [0, 3, 6, 9]
    panel = sample_amber(tmp_path, steps, k=2, m=4, n_controls=10, seed=1, seq_len=T)
    assert panel.revisions == ["ckpt_000", "ckpt_003", "ckpt_006", "ckpt_009"]
    assert len(np.unique(panel.ids)) == len(panel.ids)
    for i in range(len(panel.ids)):
        path = panel.files[0][panel.file[i]]
        chunk = int(path.rsplit("_", 1)[1].split(".")[0])
        assert path.startswith(str(folder))
        record = line_at(path, int(panel.offset[i]))
        np.testing.assert_array_equal(panel.tokens[i], record["token_ids"])
        assert panel.source[i] == record["source"]
        if panel.treatment[i] == NEVER:
            assert chunk > max(steps)  # trained only after the panel's last checkpoint
        else:  # chunk k is trained before ckpt_k: the first panel checkpoint at or after k
            assert panel.treatment[i] == min(s for s in steps if s >= chunk)
    treated = panel.treatment[panel.treatment != NEVER]
    assert sorted(set(treated.tolist())) == steps and (panel.treatment == NEVER).sum() == 10


def test_lines_are_drawn_uniformly_whatever_their_length(tmp_path):
    write_chunks(tmp_path, [0], lines=40, seed=3)
    path = tmp_path / "train_000.jsonl"
    lines = _Lines([str(path)], T)
    text = path.read_bytes().split(b"\n")[:-1]
    starts = np.cumsum([0] + [len(t) + 1 for t in text[:-1]])
    long = {int(s) for s, t in zip(starts, text, strict=True) if len(t) > 250}
    assert 10 < len(long) < 30
    rng = np.random.default_rng(0)
    draws = [lines.draw([0], 1, rng, set())[0][1] for _ in range(4000)]
    assert set(draws) <= set(starts.tolist())  # always a whole line
    share = np.mean([d in long for d in draws])
    # uniform over lines: the long lines' share of lines (a length-biased draw would give ~2x more)
    assert abs(share - len(long) / len(text)) < 0.035


def test_remote_chunks_match_local(tmp_path, range_server):
    write_chunks(range_server.root, range(6), seed=5)
    local = sample_amber(range_server.root, [1, 3], k=1, m=3, n_controls=4, seed=2, seq_len=T)
    remote = sample_amber(remote_chunks(range_server.url, range(6)), [1, 3], k=1, m=3, n_controls=4, seed=2, seq_len=T)
    np.testing.assert_array_equal(local.ids, remote.ids)
    np.testing.assert_array_equal(local.tokens, remote.tokens)
    assert all(r[2] for r in range_server.requests if r[0] == "GET")  # only byte ranges, never a whole chunk


def test_held_out_controls_and_bad_input(tmp_path):
    write_chunks(tmp_path / "train", range(4))
    valid = write_chunks(tmp_path / "valid", [0], name="c4_{k}.jsonl", seed=9)
    panel = sample_amber(
        tmp_path, [1, 3], k=1, m=2, n_controls=5, controls="held-out", heldout=[str(valid / "c4_0.jsonl")], seq_len=T
    )
    controls = panel.treatment == NEVER
    assert controls.sum() == 5 and all(panel.files[0][f].endswith("c4_0.jsonl") for f in panel.file[controls])
    with pytest.raises(MemtuiError, match="no chunk after ckpt_003"):
        sample_amber(tmp_path, [1, 3], seq_len=T)
    with pytest.raises(MemtuiError, match="no Amber chunks"):
        sample_amber(tmp_path / "valid", [1], seq_len=T)
    with pytest.raises(MemtuiError, match=f"expected 'token_ids' with {T + 1} ids"):
        sample_amber(tmp_path, [1], n_controls=0, seq_len=T + 1)
    with pytest.raises(MemtuiError, match="0 .. 359"):
        sample_amber(tmp_path, [360], seq_len=T)
