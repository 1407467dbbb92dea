"""The chunked scorer against a float64 reference, on padding, chunking and constructed ties."""

from __future__ import annotations

import numpy as np
import pytest
import tiny_models
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from memtui.core.errors import MemtuiError
from memtui.extract.scoring import (
    Scorer,
    check_extractable,
    check_head,
    extractability,
    reduce_logits,
    resolve_device,
    resolve_dtype,
)

VOCAB = 211


def tiny_model(seed: int = 0, vocab: int = VOCAB) -> GPTNeoXForCausalLM:
    # sharper predictions than the default init, so ranks and entropies vary
    return tiny_models.tiny_model(seed, vocab, hidden=48, positions=128, sharpen=20)


def reference(model, tokens: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Float64, one instance at a time, full log-softmax: the definitions, written the obvious way."""
    m64 = model.to(torch.float64)
    out = {k: [] for k in ("loglik", "accuracy", "rank", "entropy")}
    with torch.no_grad():
        for row, n in zip(tokens, lengths, strict=True):
            x = torch.as_tensor(row[:n], dtype=torch.long)[None]
            logits = m64(input_ids=x).logits[0, :-1]
            lp = torch.log_softmax(logits, -1)
            y = x[0, 1:]
            target = logits.gather(1, y[:, None])
            rank = (logits > target).sum(1).double()
            out["loglik"].append(lp.gather(1, y[:, None]).sum().item())
            out["accuracy"].append((rank == 0).double().mean().item())
            out["rank"].append(rank.mean().item())
            out["entropy"].append(-(lp.exp() * lp).sum(1).mean().item())
    model.to(torch.float32)
    return {k: np.array(v) for k, v in out.items()}


def random_rows(n: int, length: int, lengths=None, seed: int = 1, model=None):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, size=(n, length))
    if model is not None:  # half the rows sampled from the model itself, so some predictions are right
        with torch.no_grad():
            x = torch.as_tensor(tokens[: n // 2, :1])
            for _ in range(length - 1):
                p = torch.softmax(model(input_ids=x).logits[:, -1].double(), -1)
                x = torch.cat([x, torch.multinomial(p, 1, generator=torch.Generator().manual_seed(seed))], 1)
        tokens[: n // 2] = x.numpy()
    lengths = np.full(n, length) if lengths is None else np.asarray(lengths)
    tokens[np.arange(length)[None, :] >= lengths[:, None]] = -1  # PAD, as stored in panels
    return tokens, lengths


@pytest.mark.parametrize("chunk", [None, 7, 64])
def test_matches_float64_reference(chunk):
    model = tiny_model()
    tokens, lengths = random_rows(6, 40, model=model)
    scorer = Scorer(model, torch.device("cpu"), chunk=chunk)
    got = scorer.score(tokens, lengths)
    ref = reference(model, tokens, lengths)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert ref["accuracy"].max() > 0 and ref["rank"].min() < VOCAB / 4  # the test is not vacuous


def test_unequal_lengths_padded_equal_one_by_one():
    model = tiny_model()
    tokens, lengths = random_rows(5, 33, lengths=[33, 20, 2, 9, 1])
    scorer = Scorer(model, torch.device("cpu"))
    batch = scorer.score(tokens, lengths)
    ref = reference(model, tokens[lengths > 1], lengths[lengths > 1])
    for name in ref:
        rows = np.flatnonzero(lengths > 1)
        single = np.concatenate([scorer.score(tokens[i : i + 1, : lengths[i]], lengths[i : i + 1])[name] for i in rows])
        np.testing.assert_allclose(batch[name][lengths > 1], single, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(batch[name][lengths > 1], ref[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert all(np.isnan(batch[k][-1]) for k in batch)  # a one-token row has no target


def test_ties_rank_counts_strictly_greater():
    z = torch.tensor(
        [
            [1.0, 3.0, 3.0, 0.0, -2.0],  # target 1 ties for the top: rank 0, accurate
            [1.0, 3.0, 3.0, 0.0, -2.0],  # target 2: same
            [2.0, 2.0, 2.0, 2.0, 2.0],  # all tied: rank 0, entropy log 5
            [5.0, 1.0, 1.0, 1.0, 7.0],  # target 2 ties with 1 and 3, below 0 and 4: rank 2
            [0.0, 0.0, 9.0, 9.0, 9.0],  # target 0: three strictly greater
        ]
    )
    y = torch.tensor([1, 2, 4, 2, 0])
    z64 = z.double()
    lp = torch.log_softmax(z64, -1)
    got = reduce_logits(z.clone(), y, torch.empty_like(z))
    logp, rank, ent = got.logp, got.rank, got.entropy
    assert rank.tolist() == [0, 0, 0, 2, 3]
    np.testing.assert_allclose(logp.numpy(), lp.gather(1, y[:, None]).squeeze(1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(ent.numpy(), (-(lp.exp() * lp).sum(1)).numpy(), rtol=1e-5, atol=1e-6)
    assert abs(ent[2].item() - np.log(5)) < 1e-6


def test_ties_through_the_model_head():
    """Duplicated rows of the output head give exactly tied logits; both tied tokens count as top-1."""
    model = tiny_model()
    with torch.no_grad():
        w = model.get_output_embeddings().weight
        w[:] = 0.0
        w[5] = w[7] = 1.0  # tokens 5 and 7 tie for the top everywhere; everything else ties below them
        norm = model.base_model.final_layer_norm  # hidden state = all ones, so logits are exactly 48 or 0
        norm.weight[:] = 0.0
        norm.bias[:] = 1.0
    tokens = np.array([[3, 5, 7, 5, 1, 2]])
    got = Scorer(model, torch.device("cpu"), chunk=4).score(tokens, np.array([6]))
    # targets 5, 7, 5 are top-1 (rank 0); 1 and 2 have exactly two strictly greater logits
    assert got["accuracy"][0] == pytest.approx(3 / 5)
    assert got["rank"][0] == pytest.approx((0 + 0 + 0 + 2 + 2) / 5)


def test_extractability_positions_and_short_rows():
    """Suffix tokens k+1..k+l are targets k-1..k+l-2 of their row; misses before or after the suffix do not count;
    rows with fewer than k + l tokens, and rows without targets, are NaN."""
    k, ell = 3, 4
    lengths = np.array([k + ell + 2, k + ell, k + ell - 1, 1, k + ell])
    counts = np.maximum(lengths - 1, 0)
    rows = torch.as_tensor(np.repeat(np.arange(len(lengths)), counts))
    top1 = torch.ones(len(rows), dtype=torch.bool)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    top1[first[0] + (k - 1) + 2] = False  # row 0: the third suffix token is missed -> 2 reproduced
    top1[first[0] + k + ell - 1] = False  # row 0: after the suffix, ignored
    top1[first[1] + k - 2] = False  # row 1: inside the prefix, ignored -> all 4
    top1[first[4] + k + ell - 2] = False  # row 4: the last suffix token -> 3, not extractable
    top1[first[4] + k - 1 + 1] = False  # ... and the second one: the first mismatch counts -> 1
    out = extractability(torch.as_tensor(counts), top1, k, ell)
    np.testing.assert_array_equal(out["extractable_len"], [2, ell, np.nan, np.nan, 1])
    np.testing.assert_array_equal(out["extractable"], [0, 1, np.nan, np.nan, 0])
    for bad in ((0, 3), (3, 0), ("a", 1), (1,)):
        with pytest.raises(MemtuiError, match="extractable"):
            check_extractable(bad)


@pytest.mark.parametrize("chunk", [None, 5])
def test_extractability_leaves_the_four_metrics_bitwise_unchanged(chunk):
    model = tiny_model()
    tokens, lengths = random_rows(6, 40, lengths=[40, 40, 12, 11, 30, 1], model=model)
    plain = Scorer(model, torch.device("cpu"), chunk=chunk).score(tokens, lengths)
    flags = Scorer(model, torch.device("cpu"), chunk=chunk, extractable=(4, 8)).score(tokens, lengths)
    assert set(plain) == {"loglik", "accuracy", "rank", "entropy"} and set(flags) == {*plain, "extractable",
                                                                                     "extractable_len",
                                                                                     "sampled_logp"}  # fmt: skip
    for name in plain:
        np.testing.assert_array_equal(flags[name], plain[name], err_msg=name)
    assert np.isnan(flags["extractable"][[3, 5]]).all() and np.isfinite(flags["extractable_len"][[0, 1, 2, 4]]).all()
    # sampled rows agree with the model often enough that some suffix tokens are reproduced
    assert np.nanmax(flags["extractable_len"]) > 0


def test_check_head_accepts_gpt_neox_and_rejects_scaled_logits():
    model = tiny_model()
    scorer = Scorer(model, torch.device("cpu"))
    check_head(model, scorer, VOCAB)
    model.config.final_logit_softcapping = None
    scorer.softcap = 0.5  # now the scorer disagrees with the model's own logits
    with pytest.raises(MemtuiError, match="does not reproduce"):
        check_head(model, scorer, VOCAB)


def test_device_and_dtype_resolution(monkeypatch):
    # "auto" prefers CUDA, then MPS, then the CPU: each branch forced, whatever this machine has
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(MemtuiError, match="CUDA is not available"):
        resolve_device("cuda:0")
    monkeypatch.undo()
    dev = resolve_device("auto")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(MemtuiError):
        resolve_dtype("int3", dev)
    with pytest.raises(MemtuiError):
        resolve_device("warp-drive")


def test_bf16_body_keeps_rotary_frequencies_in_fp32():
    """Casting a whole model to bf16 would round rotary inv_freq (angles off by ~0.4 rad at position 2047)."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from memtui.extract.worker import to_body_dtype

    cfg = GPTNeoXConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                        vocab_size=50, rotary_pct=0.25)  # fmt: skip
    net = to_body_dtype(GPTNeoXForCausalLM(cfg), torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in net.parameters())
    freqs = [b for name, b in net.named_buffers() if "inv_freq" in name]
    assert freqs and all(b.dtype == torch.float32 for b in freqs)


def test_scores_are_a_record_with_a_field_per_extracted_metric_of_the_registry():
    """The scorer's record has exactly the registry's extracted metrics, in its order, read by name; one without
    (k, l) holds no extractability metrics."""
    import dataclasses

    from memtui.extract.scoring import Scores
    from memtui.panel import metrics as registry

    assert tuple(f.name for f in dataclasses.fields(Scores)) == registry.EXTRACTED
    model = tiny_model()
    tokens, lengths = random_rows(3, 20, lengths=[20, 4, 1], model=model)  # row 1: fewer than k + l = 5 tokens
    plain = Scorer(model, torch.device("cpu")).score(tokens, lengths)
    flags = Scorer(model, torch.device("cpu"), extractable=(2, 3)).score(tokens, lengths)
    assert list(plain) == list(registry.FROM_LOGITS) and list(flags) == list(registry.STANDARD)
    assert plain.extractable is None and "extractable" not in plain
    with pytest.raises(KeyError):
        plain["extractable"]
    assert plain.loglik is plain["loglik"] and np.isnan(plain.loglik[2]) and np.isnan(flags.extractable[1])
