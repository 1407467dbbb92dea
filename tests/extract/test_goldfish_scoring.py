"""loglik_trained and accuracy_trained: the scorer against a float64 reference over the trained targets, and a panel
that records a Goldfish mask extracted end to end (the mask rebuilt from the panel's attributes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_extract_scoring import random_rows, reference, tiny_model
from tiny_models import STEPS
from transformers import GPTNeoXForCausalLM

from memtui.core.errors import MemtuiError
from memtui.extract.scoring import Scorer
from memtui.extract.worker import run
from memtui.orders.goldfish import Goldfish, to_attrs
from memtui.panel import metrics as registry
from memtui.panel.hdf5 import create_panel, read_panel, read_tokens
from memtui.panel.model import NEVER


def trained_reference(model, tokens, lengths, goldfish: Goldfish) -> tuple[np.ndarray, np.ndarray]:
    """Float64, one row at a time: log p and top-1 of each target, summed / averaged over the trained ones."""
    m64 = model.to(torch.float64)
    loglik, accuracy = [], []
    with torch.no_grad():
        for row, n in zip(tokens, lengths, strict=True):
            keep = goldfish.trained(row[1:n])
            if not keep.any():
                loglik.append(np.nan), accuracy.append(np.nan)
                continue
            x = torch.as_tensor(row[:n], dtype=torch.long)[None]
            logits = m64(input_ids=x).logits[0, :-1]
            y = x[0, 1:]
            lp = torch.log_softmax(logits, -1).gather(1, y[:, None])[:, 0].numpy()
            top1 = ((logits > logits.gather(1, y[:, None])).sum(1) == 0).numpy()
            loglik.append(lp[keep].sum()), accuracy.append(top1[keep].mean())
    model.to(torch.float32)
    return np.array(loglik), np.array(accuracy)


@pytest.mark.parametrize("invariant", [True, False])
def test_trained_metrics_equal_the_reference_over_the_trained_targets(invariant):
    model = tiny_model()
    tokens, lengths = random_rows(8, 40, lengths=[40, 40, 3, 1, 25, 40, 2, 39], model=model)
    gf = Goldfish(3, 2)  # a third dropped: a visible difference from the plain metrics
    got = Scorer(model, torch.device("cpu"), invariant=invariant, goldfish=gf).score(tokens, lengths)
    want_ll, want_acc = trained_reference(model, tokens, lengths, gf)
    np.testing.assert_allclose(got.loglik_trained, want_ll, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.accuracy_trained, want_acc, rtol=1e-6, atol=1e-6)
    assert np.isnan(got.loglik_trained[3]) and np.isnan(got.accuracy_trained[3])  # one token: no target
    dropped = np.array([(~gf.trained(r[1:n])).sum() if n >= 2 else 0 for r, n in zip(tokens, lengths, strict=True)])
    assert dropped[:2].min() > 0 and (got.loglik_trained[:2] > got.loglik[:2]).all()  # fewer log-terms, each <= 0
    plain = reference(model, tokens, lengths)  # the plain metrics are untouched
    rows = lengths >= 2  # the reference sums nothing to 0 where the scorer says NaN
    np.testing.assert_allclose(got.loglik[rows], plain["loglik"][rows], rtol=1e-4, atol=1e-4)
    assert set(got) == {*registry.FROM_LOGITS, *registry.GOLDFISH}


def test_without_a_mask_the_trained_metrics_are_not_computed():
    model = tiny_model()
    tokens, lengths = random_rows(3, 10, model=model)
    scores = Scorer(model, torch.device("cpu")).score(tokens, lengths)
    assert scores.loglik_trained is None and "loglik_trained" not in scores


def _goldfish_panel(path, goldfish: Goldfish | None, *, attrs=True):
    rng = np.random.default_rng(0)
    n, length = 20, 24
    tokens = rng.integers(0, 101, size=(n, length))
    lengths = np.full(n, length)
    lengths[::5] = rng.integers(2, length, size=4)
    tokens[np.arange(length)[None, :] >= lengths[:, None]] = -1
    treatment = np.r_[np.repeat([10, 20, 30, 40], 3), np.full(n - 12, NEVER)]
    return create_panel(path, ids=np.arange(n), treatment=treatment, steps=STEPS, tokens=tokens, lengths=lengths,
                        metrics=registry.STANDARD + registry.GOLDFISH,
                        attrs=to_attrs(goldfish) if attrs else None)  # fmt: skip


def test_a_goldfish_panel_extracts_its_trained_metrics(tmp_path, tiny_checkpoints):
    gf = Goldfish(3, 2)
    path = _goldfish_panel(tmp_path / "g.h5", gf)
    assert run(path, model=str(tiny_checkpoints), batch_size=7, handle_signals=False, log=lambda m: None) == "done"
    panel = read_panel(path)
    tokens, lengths = read_tokens(path)
    for c in (0, len(STEPS) - 1):
        model = GPTNeoXForCausalLM.from_pretrained(tiny_checkpoints / f"step{STEPS[c]}").eval()
        want_ll, want_acc = trained_reference(model, tokens, lengths, gf)
        np.testing.assert_allclose(panel.metrics["loglik_trained"][:, c], want_ll, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(panel.metrics["accuracy_trained"][:, c], want_acc, atol=1e-6)
    assert not np.allclose(panel.metrics["loglik_trained"], panel.metrics["loglik"])


def test_a_panel_with_trained_metrics_but_no_mask_is_refused(tmp_path, tiny_checkpoints):
    path = _goldfish_panel(tmp_path / "g.h5", Goldfish(3, 2), attrs=False)
    with pytest.raises(MemtuiError) as err:
        run(path, model=str(tiny_checkpoints), batch_size=7, handle_signals=False, log=lambda m: None)
    assert "goldfish" in str(err.value) and "\n" not in str(err.value)
    assert np.isnan(read_panel(path).metrics["loglik_trained"]).all()  # nothing written
