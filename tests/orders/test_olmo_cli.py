"""`memtui build --order olmo` as a user drives it, stage 1 and a stage-2 ingredient, and the revision names extraction
then asks the hub for: every instance against a transcription of OLMo's order, the names against the hub's own."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import yaml
from order_files import write_tokens

from memtui.core.errors import MemtuiError
from memtui.extract.options import ExtractOptions
from memtui.orders.revisions import preset_template, revision_name
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER

L, BATCH, SEED = 16, 6, 6198


def _config(folder, paths, **data):
    path = folder / "config.yaml"
    cfg = {"run_name": "OLMo-test", "seed": SEED, "model": {"max_sequence_length": L},
           "global_train_batch_size": BATCH, "data": {"paths": paths, "memmap_dtype": "uint32", **data}}  # fmt: skip
    path.write_text(yaml.safe_dump(cfg))
    return path


def _library_order(n: int, seed: int) -> np.ndarray:
    """olmo/data/iterable_dataset.py::_build_global_indices for epoch 0: arange(n) shuffled by PCG64(seed)."""
    indices = np.arange(n, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed=seed)).shuffle(indices)
    return indices


def _revision_template(panel, preset: str) -> str:
    p = argparse.ArgumentParser()
    ExtractOptions.add_worker_arguments(p)
    args = p.parse_args(["--model", "allenai/OLMo-2-1124-7B", "--revisions", preset])
    args.panel = panel
    return ExtractOptions.from_args(args).validate().revision_template


def _check_instances(out, paths, counts, steps, offset=0):
    panel, (tokens, _) = read_panel(out), read_tokens(out)
    order = _library_order(sum(counts), SEED)
    flat = [np.fromfile(p, dtype=np.uint32) for p in paths]
    starts = np.cumsum([0, *counts])
    prov = panel.provenance
    for i in range(panel.n_instances):
        f, off, pos = int(prov["file"][i]), int(prov["offset"][i]), int(prov["position"][i])
        np.testing.assert_array_equal(tokens[i], flat[f][off : off + L])
        assert int(order[pos]) == starts[f] + off // L  # the library's instance at that position of its order
        if panel.treatment[i] != NEVER:
            step = offset + pos // BATCH + 1  # inspect_train_data: step s trains [(s - 1) B, s B)
            assert panel.treatment[i] == min(s for s in steps if s >= step)
        else:
            assert pos >= (max(steps) - offset) * BATCH  # beyond the last trained step
    return panel


def test_build_olmo_stage1_then_stage2_and_their_hub_names(tmp_path, cli):
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    counts1, counts2 = [40, 29, 55], [30, 26]
    paths1 = write_tokens(tmp_path / "s1", [n * L for n in counts1], np.uint32, seed=3)
    paths2 = write_tokens(tmp_path / "s2", [n * L for n in counts2], np.uint32, seed=4)
    one, two = tmp_path / "stage1.h5", tmp_path / "stage2.h5"
    code, text, err = cli("build", one, "--order", "olmo", "--config", _config(tmp_path / "s1", paths1),
                          "--steps", "0,4,8,12", "-k", 2, "-m", 2, "--n-validation", 10, "--seed", 1,
                          "--stage-name", "stage1")  # fmt: skip
    assert code == 0, err
    panel = _check_instances(one, paths1, counts1, [0, 4, 8, 12])
    assert panel.stage_names == ["stage1"] and panel.attrs["tokens_per_step"] == str(BATCH * L)
    template = _revision_template(one, "olmo2-stage1")
    assert revision_name(template, 8) == f"stage1-step8-tokens{-(-8 * BATCH * L // 10**9)}B"

    # stage 2 restarts its own steps after stage 1's last (12): panel steps 12..18, hub names count from 0
    code, text, err = cli("build", two, "--order", "olmo", "--config", _config(tmp_path / "s2", paths2),
                          "--steps", "12,14,16,18", "-k", 2, "-m", 2, "--n-validation", 10, "--seed", 2,
                          "--stage-name", "stage2-ingredient1", "--step-offset", 12)  # fmt: skip
    assert code == 0, err
    panel = _check_instances(two, paths2, counts2, [12, 14, 16, 18], offset=12)
    assert panel.stage_names == ["stage2-ingredient1"] and panel.attrs["step_offset"] == "12"
    template = _revision_template(two, "olmo2-stage2-ingredient1")
    assert [revision_name(template, s) for s in (14, 18)] == ["stage2-ingredient1-step2-tokens1B",
                                                             "stage2-ingredient1-step6-tokens1B"]  # fmt: skip
    with pytest.raises(MemtuiError, match="comes before the stage"):
        revision_name(template, 11)
    # the panel's own record of the revisions agrees with what extraction will ask for
    assert panel.revisions[1:] == [revision_name(template, s) for s in (14, 16, 18)]


def test_stage2_presets_give_the_hubs_names():
    # allenai/OLMo-2-0325-32B (OLMo-core's OLMo2/README.md): 2048 x 4096 tokens per step, stage 1 ends at 721901
    t = 2048 * 4096
    assert revision_name(preset_template("olmo2-stage1", t), 721901) == "stage1-step721901-tokens6056B"
    names = [
        revision_name(preset_template(f"olmo2-stage2-ingredient{k}", t, 721901), 721901 + steps)
        for k, steps in ((1, 11921), (2, 11921), (3, 35763))
    ]
    assert names == ["stage2-ingredient1-step11921-tokens101B", "stage2-ingredient2-step11921-tokens101B",
                     "stage2-ingredient3-step35763-tokens301B"]  # fmt: skip
    with pytest.raises(MemtuiError, match="step_offset"):
        preset_template("olmo2-stage2-ingredient1", t)


def _dolma_metadata(token_path: str, n_tokens: int, doc_len: int, source: str) -> list[tuple[int, int, str]]:
    """The .csv.gz Dolma's MemmapWriter writes beside a token file: rows ``start,end,id,src,loc`` without a header
    (python/dolma/tokenizer/memmap_writer.py, MemmapMetadata; dolma 1.2.1 pins numpy<2 and cannot be installed here)."""
    import csv
    import gzip

    docs = [(s, min(s + doc_len, n_tokens), f"doc-{source}-{s}") for s in range(0, n_tokens, doc_len)]
    with gzip.open(token_path.removesuffix(".npy") + ".csv.gz", "wt", newline="") as f:
        csv.writer(f).writerows((s, e, i, f"s3://bucket/documents/{source}/{source}-0000.json.gz", k)
                                for k, (s, e, i) in enumerate(docs))  # fmt: skip
    return docs


def test_build_olmo_records_dolmas_document_metadata(tmp_path, cli):
    counts = [40, 29]
    paths = write_tokens(tmp_path, [n * L for n in counts], np.uint32, seed=7)
    docs = [_dolma_metadata(paths[0], counts[0] * L, 37, "books"), None]  # the second file has no metadata
    out = tmp_path / "olmo.h5"
    code, _, err = cli("build", out, "--order", "olmo", "--config", _config(tmp_path, paths), "--steps", "0,3,6",
                       "-k", 2, "-m", 2, "--n-validation", 10)  # fmt: skip
    assert code == 0, err
    prov = read_panel(out).provenance
    seen = set()
    for f, off, doc, src in zip(prov["file"], prov["offset"], prov["document_id"], prov["document_source"],
                                strict=True):  # fmt: skip
        if f == 1:
            assert doc == "" and src == ""
            continue
        start, _, want = next(d for d in docs[0] if d[0] <= off < d[1])
        assert doc == want and src == "s3://bucket/documents/books/books-0000.json.gz" and start <= off
        seen.add(doc)
    assert len(seen) > 1 and set(prov["file"].tolist()) == {0, 1}
