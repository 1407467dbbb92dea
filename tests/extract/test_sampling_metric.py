"""``sampled_logp``, Hayes et al. (2024)'s probability that one sampled continuation reproduces the suffix: against
brute-force sampling with Hugging Face's own sampler, against a float64 reference, and at its floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tiny_models
import torch

from memtui.core.errors import MemtuiError
from memtui.extract.scoring import Scorer, check_sampling
from memtui.panel import metrics as registry

VOCAB = 101


def model_for_sampling():
    # sharp enough that a greedy continuation has a probability worth measuring by sampling (p >= 0.05)
    return tiny_models.tiny_model(3, VOCAB, hidden=32, positions=64, sharpen=30)


def greedy_row(model, prefix: list[int], ell: int) -> np.ndarray:
    """The prefix and its greedy continuation: the suffix most likely to be sampled back."""
    x = torch.tensor([prefix])
    with torch.no_grad():
        for _ in range(ell):
            x = torch.cat([x, model(input_ids=x).logits[:, -1].argmax(-1, keepdim=True)], 1)
    return x[0].numpy()


def sampled_logp(model, row: np.ndarray, k: int, ell: int, sampling) -> float:
    scorer = Scorer(model, torch.device("cpu"), extractable=(k, ell), sampling=sampling)
    return float(scorer.score(row[None], np.array([len(row)]))["sampled_logp"][0])


def reproduction_rate(model, row: np.ndarray, k: int, ell: int, top_k: int, temperature: float, n: int) -> float:
    """The share of ``n`` continuations sampled by ``generate`` (top-k, temperature) that equal the suffix."""
    torch.manual_seed(20240)
    prefix = torch.as_tensor(row[:k])[None].repeat(n, 1)
    with torch.no_grad():
        out = model.generate(
            input_ids=prefix, attention_mask=torch.ones_like(prefix), do_sample=True, top_k=top_k, top_p=1.0,
            temperature=temperature, max_new_tokens=ell, min_new_tokens=ell, pad_token_id=0,
        )  # fmt: skip
    suffix = torch.as_tensor(row[k : k + ell])
    return float((out[:, k : k + ell] == suffix).all(1).double().mean())


@pytest.mark.parametrize(("top_k", "temperature"), [(registry.SAMPLING_TOP_K, 1.0), (5, 0.8)])
def test_sampled_logp_matches_brute_force_sampling(top_k, temperature):
    """20,000 continuations sampled with the same scheme reproduce the suffix as often as exp(sampled_logp) says,
    within four Monte-Carlo standard errors (the paper's scheme, and a narrow top-k at another temperature)."""
    model = model_for_sampling()
    k, ell, n = 4, 3, 20_000
    row = greedy_row(model, [5, 17, 42, 8], ell)
    p = math.exp(sampled_logp(model, row, k, ell, (top_k, temperature)))
    assert 0.05 <= p <= 0.95, p  # measurable: the test has power
    freq = reproduction_rate(model, row, k, ell, top_k, temperature, n)
    se = math.sqrt(p * (1 - p) / n)
    print(f"top_k {top_k}, T {temperature}: computed p {p:.5f}, sampled frequency {freq:.5f}, MC s.e. {se:.5f}")
    assert abs(freq - p) < 4 * se, (p, freq, se)


def reference(model, row: np.ndarray, k: int, ell: int, top_k: int, temperature: float) -> float:
    """float64, the definition written out: the kept set is every logit >= the k-th largest."""
    m64 = model.to(torch.float64)
    with torch.no_grad():
        z = m64(input_ids=torch.as_tensor(row)[None]).logits[0, :-1] / temperature
    model.to(torch.float32)
    total = 0.0
    for j in range(k - 1, k + ell - 1):
        kth = torch.sort(z[j], descending=True).values[top_k - 1]
        kept = z[j] >= kth
        y = int(row[j + 1])
        if not kept[y]:
            return -math.inf
        total += float(z[j, y] - torch.logsumexp(z[j][kept], 0))
    return total


def test_sampled_logp_against_a_float64_reference():
    model = model_for_sampling()
    rng = np.random.default_rng(7)
    k, ell = 3, 4
    got_finite = 0
    for i in range(12):
        row = greedy_row(model, list(rng.integers(0, VOCAB, 3)), 5) if i % 2 else rng.integers(0, VOCAB, 9)
        for scheme in ((40, 1.0), (8, 0.7), (VOCAB, 1.3)):
            want = reference(model, row, k, ell, *scheme)
            got = sampled_logp(model, row, k, ell, scheme)
            if want == -math.inf:
                assert got == registry.SAMPLED_LOGP_FLOOR
            else:
                got_finite += 1
                assert got == pytest.approx(max(want, registry.SAMPLED_LOGP_FLOOR), abs=2e-4)
    assert got_finite >= 12  # both branches were checked


def test_without_truncation_at_temperature_one_it_is_the_suffix_loglik():
    """top_k = the vocabulary, T = 1: the sampler is the model, so sampled_logp is the suffix's log-likelihood."""
    model = model_for_sampling()
    row = np.random.default_rng(1).integers(0, VOCAB, 12)
    k, ell = 5, 7
    whole = Scorer(model, torch.device("cpu")).score(row[None], np.array([12]))["loglik"][0]
    prefix = Scorer(model, torch.device("cpu")).score(row[None, :k], np.array([k]))["loglik"][0]
    assert sampled_logp(model, row, k, ell, (VOCAB, 1.0)) == pytest.approx(whole - prefix, abs=1e-4)


def test_a_suffix_token_outside_the_top_k_gives_the_floor_and_short_rows_nan():
    model = model_for_sampling()
    row = greedy_row(model, [1, 2, 3], 4)
    with torch.no_grad():
        logits = model(input_ids=torch.as_tensor(row[:4])[None]).logits[0, -1]
    row[4] = int(torch.argsort(logits, descending=True)[10])  # the 11th most likely: outside a top-5
    assert sampled_logp(model, row, 4, 3, (5, 1.0)) == registry.SAMPLED_LOGP_FLOOR
    assert sampled_logp(model, row, 4, 3, (11, 1.0)) > registry.SAMPLED_LOGP_FLOOR
    assert math.isnan(sampled_logp(model, row[:6], 4, 3, (5, 1.0)))  # fewer than k + l tokens


def test_ties_at_the_kth_logit_are_all_kept():
    """Hugging Face's top-k keeps every entry tied with the k-th: so does the metric (a constructed head)."""
    model = model_for_sampling()
    with torch.no_grad():
        w = model.get_output_embeddings().weight
        w[10:14] = w[9]  # tokens 9..13 always share one logit
    row = np.array([3, 4, 5, 9])
    with torch.no_grad():
        z = model(input_ids=torch.as_tensor(row[:3])[None]).logits[0, -1].double()
    order = torch.argsort(z, descending=True).tolist()
    pos = order.index(9)
    top_k = pos + 1  # the tie group straddles the k-th place: all five are kept
    kept = z >= z[9]
    want = float(z[9] - torch.logsumexp(z[kept], 0))
    assert int(kept.sum()) == top_k + 4
    assert sampled_logp(model, row, 3, 1, (top_k, 1.0)) == pytest.approx(want, abs=1e-5)


def test_sampling_schemes_are_checked():
    assert check_sampling((40, 1)) == (40, 1.0)
    for bad in ((0, 1.0), (5, 0), (5, -1.0), (5, math.inf), ("x", 1), (5,)):
        with pytest.raises(MemtuiError, match="sampling scheme"):
            check_sampling(bad)


@pytest.mark.parametrize("invariant", [True, False])
def test_the_top_k_pass_runs_for_the_suffix_window_only(monkeypatch, invariant):
    """``sampled_logp`` reads the (k, l) suffix window's targets only, so the top-k pass over the vocabulary runs for
    those (a seventh of an H100's time when it ran for every target), and every metric is what it was bit for bit
    when it ran for all of them."""
    import memtui.extract.scoring as scoring

    model = tiny_models.tiny_model(0, 512, hidden=32, positions=64, sharpen=20)
    rng = np.random.default_rng(5)
    tokens, lengths = rng.integers(0, 512, size=(9, 40)), np.array([40, 40, 39, 30, 13, 12, 11, 5, 2])
    k, ell = 4, 8
    seen = []
    real = scoring.sampling_logp
    monkeypatch.setattr(scoring, "sampling_logp", lambda z, *a: seen.append(len(z)) or real(z, *a))
    scorer = Scorer(model, torch.device("cpu"), extractable=(k, ell), invariant=invariant)
    windowed = scorer.score(tokens, lengths)
    in_window = int(np.sum(np.clip(lengths - 1 - (k - 1), 0, ell)))  # each row's targets k - 1 .. k + l - 2
    assert sum(seen) == in_window  # the window's targets that exist, and no other
    seen.clear()
    monkeypatch.setattr(scorer, "window", lambda index: None)  # the pass for every target, as before
    every = scorer.score(tokens, lengths)
    assert sum(seen) == int(np.sum(np.maximum(lengths - 1, 0)))
    for name in every:
        assert np.array_equal(windowed[name], every[name], equal_nan=True), name
