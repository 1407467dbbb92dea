"""The shipped sample with per-token scores (`memtui sample tiny-gptneox-tokens`, demo/token_sample.py): what the
file holds, that `--sample` knows it, that the verb refuses a bad output before training; that a fresh run makes the
same panel is checked by tests/demo/test_demo.py's small-demo test (one training of the model for both)."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.demo.token_sample import NAME
from memtui.panel.hdf5 import read_panel
from memtui.panel.samples import SAMPLES, sample_path
from memtui.panel.token_scores import read_layout, read_token_scores

SAMPLE = sample_path(NAME)


def test_the_sample_stores_per_token_scores_for_every_instance_that_sum_to_its_loglik():
    assert NAME in SAMPLES and SAMPLE.stat().st_size < 1 << 20
    panel = read_panel(SAMPLE)
    layout = read_layout(SAMPLE)
    assert panel.done.all() and layout.done.all() and panel.has_tokens
    assert np.array_equal(layout.ids, panel.ids) and layout.width == 64
    assert (panel.n_instances, panel.n_checkpoints) == (352, 13)
    scores = read_token_scores(panel, panel.ids)
    per_token = np.stack([scores[int(i)] for i in panel.ids])  # instances x checkpoints x targets
    assert np.isfinite(per_token).all() and (per_token <= 0).all()
    # loglik is their sum; float16 keeps 11 significant bits, so each term is within |logp| * 2^-11
    bound = np.abs(per_token).sum(axis=2) * 2.0**-11
    assert (np.abs(per_token.sum(axis=2) - panel.metrics["loglik"]) <= bound + 1e-6).all()
    assert set(panel.metrics) >= {"loglik", "sampled_logp"}


def test_the_sample_is_opened_by_name(cli):
    code, out, _ = cli("info", "--sample", NAME)
    assert code == 0 and "token scores    352 instances" in out and "13/13 checkpoints" in out
    code, out, _ = cli("instances", "--sample", NAME, "--top", "5")
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert code == 0 and len(rows) == 5 and all(len(r) <= 120 for r in rows)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda tmp: (tmp / "x.h5").write_bytes(b"keep") and tmp / "x.h5", "already exists"),
        (lambda tmp: tmp, "is a folder"),
        (lambda tmp: tmp / "missing" / "x.h5", "not an existing folder"),
    ],
)
def test_the_verb_refuses_a_bad_output_before_training(cli, tmp_path, make, says):
    out = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, stdout, err = cli("sample", NAME, out)
    assert code == 2 and says in err and err.count("\n") == 1 and "training" not in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if out.name == "x.h5" and out.exists():
        assert out.read_bytes() == b"keep"


def check_a_fresh_run_makes_the_shipped_token_sample(made) -> None:
    """A fresh `make_token_sample` run (made by tests/demo/test_demo.py's small-demo test, which trains the same model:
    one training for both): same instances, checkpoints, tokens and per-token layout; the values as the shipped ones
    where this machine's BLAS is the one that made them, and close elsewhere (training on another BLAS changes their
    last bits)."""
    shipped = read_panel(SAMPLE)
    assert np.array_equal(made.ids, shipped.ids) and np.array_equal(made.treatment, shipped.treatment)
    assert np.array_equal(made.steps, shipped.steps) and made.done.all()
    assert np.array_equal(read_layout(made.path).ids, read_layout(SAMPLE).ids)
    assert np.allclose(made.metrics["loglik"], shipped.metrics["loglik"], rtol=0.05)
