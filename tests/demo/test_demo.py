"""The tiny-model demo: a real model, trained here, shows significant instantaneous memorisation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_token_sample import check_a_fresh_run_makes_the_shipped_token_sample

from memtui.demo.train import corpus_text, decode, encode
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.samples import sample_path

SAMPLE = sample_path("tiny-gptneox")


def hand_did(panel) -> list[tuple[int, float, float]]:
    """Per cohort g: (g, treated change from the checkpoint before g to g minus validation's change, Welch p)."""
    y = panel.metrics["loglik"]
    steps = panel.steps.tolist()
    never = panel.never_treated
    out = []
    for g in sorted(set(panel.treatment[~never].tolist())):
        j = steps.index(g)
        treated = panel.treatment == g
        d_t, d_v = y[treated, j] - y[treated, j - 1], y[never, j] - y[never, j - 1]
        out.append((g, d_t.mean() - d_v.mean(), stats.ttest_ind(d_t, d_v, equal_var=False).pvalue))
    return out


def test_corpus_is_version_stable_text():
    text = corpus_text()
    assert len(text) > 1_000_000 and text.isascii()
    assert (
        "U+00E0 is latin small letter a with grave, a lowercase letter written left to right; it decomposes "
        "into latin small letter a and combining grave accent.\n" in text
    )
    assert decode(encode("memtui")) == "memtui"


@pytest.mark.slow
def test_small_demo_memorises_significantly(tmp_path):
    """`memtui demo --small`, made as the shipped tiny-gptneox-tokens is (with per-token scores, which change none of
    its metrics), so the small model is trained once in the suite: this test and the sample's fresh-run check."""
    from memtui.demo.token_sample import make_token_sample

    panel = read_panel(make_token_sample(tmp_path / "demo.h5", log=lambda m: None))
    check_a_fresh_run_makes_the_shipped_token_sample(panel)
    assert panel.done.all() and panel.has_tokens
    assert panel.steps.tolist() == list(range(0, 97, 8))
    tokens, lengths = read_tokens(panel.path)
    assert tokens.max() < 256 and (lengths == 65).all()
    # the model learns: validation log-likelihood rises over training
    val = panel.metrics["loglik"][panel.never_treated]
    assert val[:, -1].mean() > val[:, 0].mean() + 100
    # instantaneous memorisation by hand: treated cohort's gain at its checkpoint minus validation's gain
    cells = hand_did(panel)
    effects = np.array([e for _, e, _ in cells])
    assert (effects > 0).mean() >= 0.75
    late = [p for g, _, p in cells if g >= 48]
    assert sum(p < 0.05 for p in late) >= len(late) // 2
    # pooled over cohorts: one-sample t-test of the per-cohort effects
    assert stats.ttest_1samp(effects, 0).pvalue < 0.01
    # and with the estimation engine
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings

    result = estimate(panel, Settings(metric="loglik", draws=200))
    inst = result.instantaneous
    assert inst["significant"].sum() >= 2 and (inst.filter(inst["significant"])["estimate"] > 0).all()


def test_shipped_sample_panel():
    assert SAMPLE.exists() and SAMPLE.stat().st_size < 5_000_000
    panel = read_panel(SAMPLE)
    assert panel.done.all() and panel.has_tokens and panel.n_checkpoints >= 30
    assert "GPT-NeoX" in panel.attrs["model"]
    assert all(h for h in panel.weight_hashes) and len(set(panel.weight_hashes)) == panel.n_checkpoints
    cells = hand_did(panel)
    assert np.mean([e > 0 for _, e, _ in cells]) > 0.85
    assert sum(p < 0.01 for _, _, p in cells) >= len(cells) // 2


@pytest.mark.slow
def test_the_demo_runs_detached_follows_its_log_and_leaves_no_temporary_files(cli, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the job's own temporary folder goes
    out = tmp_path / "demo.h5"
    code, text, err = cli("demo", out, "--small")
    assert code == 0, err + text
    assert "runs in the background" in text and "made " in text and f"open it with `memtui {out}`" in text
    assert read_panel(out).done.all()
    assert not list(scratch.glob("memtui-demo-*"))  # the corpus and checkpoints were removed by the job itself
    assert not (tmp_path / "demo.h5.work").exists()
    code, text, err = cli("demo", out, "--small")
    assert code == 2 and "already exists" in err
