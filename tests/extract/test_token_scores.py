"""`extract --token-scores`: the subset's choice, the stored per-token log-probabilities against the model's own
logits, the reader, resume and reruns, `info`, and the size estimate before launch and in --dry-run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import STEPS, make_panel
from transformers import GPTNeoXForCausalLM

from memtui.core.errors import MemtuiError
from memtui.extract.token_scores import choose, estimate_bytes, parse
from memtui.extract.worker import run
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER
from memtui.panel.token_scores import read_layout, read_token_scores


def _run(path, ckpts, **kw):
    return run(path, model=str(ckpts), batch_size=7, handle_signals=False, log=lambda m: None, **kw)


def test_a_count_is_spread_across_cohorts_and_never_trained_rows_seeded():
    treatment = np.r_[np.repeat([10, 20, 30], [50, 5, 20]), np.full(40, NEVER)]
    rows = choose(treatment, None, 14)
    assert len(rows) == 14 and np.all(np.diff(rows) > 0)
    per_group = {int(g): int(np.sum(treatment[rows] == g)) for g in np.unique(treatment)}
    assert set(per_group.values()) <= {3, 4} and per_group[NEVER] >= 3  # round robin: within one of each other
    assert np.array_equal(rows, choose(treatment, None, 14))  # the same on every run and every worker
    many = choose(treatment, None, 60)
    assert np.sum(treatment[many] == 20) == 5  # a small cohort gives all it has, the others fill up
    assert np.array_equal(choose(treatment, None, len(treatment)), np.arange(len(treatment)))
    lengths = np.full(len(treatment), 9)
    lengths[treatment == 20] = 1  # rows without a target come only where the others run out
    assert not np.any(treatment[choose(treatment, lengths, 30)] == 20)
    assert np.sum(treatment[choose(treatment, lengths, len(treatment) - 2)] == 20) == 3


def test_the_option_parses_counts_lists_and_files(tmp_path):
    assert parse("5") == 5 and parse(" 3,17, 42 ") == [3, 17, 42]
    listed = tmp_path / "ids.txt"
    listed.write_text("4\n9, 12\n")
    assert parse(f"@{listed}") == [4, 9, 12]


def reference_logp(ckpts, step: int, row: np.ndarray, length: int) -> np.ndarray:
    model = GPTNeoXForCausalLM.from_pretrained(ckpts / f"step{step}").eval()
    x = torch.as_tensor(row[:length], dtype=torch.long)[None]
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=x).logits[0, :-1].double(), -1)
    return lp.gather(1, x[0, 1:, None])[:, 0].numpy()


def test_stored_scores_are_the_models_per_token_log_probabilities(tmp_path, tiny_checkpoints, tiny_reference):
    panel = make_panel(tmp_path / "p.h5")
    assert _run(panel, tiny_checkpoints, token_scores="6") == "done"
    got = read_panel(panel)
    for name, values in tiny_reference.metrics.items():  # the metrics are exactly those of a run without them
        np.testing.assert_array_equal(got.metrics[name], values, err_msg=name)
    layout = read_layout(panel)
    assert len(layout.ids) == 6 and layout.done.all() and layout.stored_bytes > 0
    scores = read_token_scores(panel, [*layout.ids, 10_000])
    assert sorted(scores) == sorted(int(i) for i in layout.ids)  # an id without scores is left out
    tokens = _tokens(panel)
    for row, instance in zip(layout.rows, layout.ids, strict=True):
        values, length = scores[int(instance)], int(got.lengths[row])
        assert values.shape == (len(STEPS), length - 1) and values.dtype == np.float32
        for c in (0, len(STEPS) - 1):
            want = reference_logp(tiny_checkpoints, STEPS[c], tokens[row], length)
            np.testing.assert_allclose(values[c], want, rtol=2e-3, atol=2e-3)
        # the sum of a row's per-token scores is its loglik, to float16's precision
        np.testing.assert_allclose(values.sum(1), got.metrics["loglik"][row], rtol=2e-3)
    assert read_token_scores(got, layout.ids[:1]).keys() == {int(layout.ids[0])}  # a Panel is accepted too
    assert read_token_scores(tiny_reference, [0]) is None  # no per-token scores at all


def _tokens(path) -> np.ndarray:
    from memtui.panel.hdf5 import read_tokens

    return read_tokens(path)[0]


def test_asking_later_rescores_only_the_subset_and_leaves_the_metrics(tmp_path, tiny_checkpoints):
    """A panel already extracted gets per-token scores by a rerun with the option: only the subset's rows are scored
    again, the committed metrics stay bit for bit, and the values are those a run with the option from the start
    stores. A rerun asking for another subset is refused; a rerun without the option has nothing to do."""
    first = make_panel(tmp_path / "first.h5")
    assert _run(first, tiny_checkpoints, checkpoints="0,20") == "done"
    before = read_panel(first).metrics
    assert _run(first, tiny_checkpoints, token_scores="0,7,33") == "done"
    got = read_panel(first)
    for name, values in before.items():
        done = got.done.copy()
        done[[0, 2]] = False  # the two checkpoints scored before: untouched
        np.testing.assert_array_equal(got.metrics[name][:, [0, 2]], values[:, [0, 2]], err_msg=name)
    assert got.done.all() and read_layout(first).done.all()
    fresh = make_panel(tmp_path / "fresh.h5")
    assert _run(fresh, tiny_checkpoints, token_scores="0,7,33") == "done"
    a, b = read_token_scores(first, [0, 7, 33]), read_token_scores(fresh, [0, 7, 33])
    for i in (0, 7, 33):
        np.testing.assert_array_equal(a[i], b[i])  # bitwise: the CPU scorer does not depend on the batch
    with pytest.raises(MemtuiError, match="already stores per-token scores for another 3 instances"):
        _run(first, tiny_checkpoints, token_scores="2")
    assert _run(first, tiny_checkpoints) == "done"


def test_split_units_store_the_same_scores(tmp_path, tiny_checkpoints):
    whole, split = make_panel(tmp_path / "whole.h5"), make_panel(tmp_path / "split.h5")
    assert _run(whole, tiny_checkpoints, token_scores="9", checkpoints="10") == "done"
    assert _run(split, tiny_checkpoints, token_scores="9", checkpoints="10", split=3) == "done"
    ids = read_layout(whole).ids
    a, b = read_token_scores(whole, ids), read_token_scores(split, ids)
    for i in ids:
        np.testing.assert_array_equal(np.nan_to_num(a[i], nan=9), np.nan_to_num(b[i], nan=9))
    assert read_layout(split).done.tolist() == [False, True, False, False, False]


def test_size_estimate_before_launch_and_in_the_dry_run(tmp_path, tiny_checkpoints, cli):
    panel = make_panel(tmp_path / "p.h5")
    lengths = read_panel(panel).lengths
    code, out, err = cli("extract", panel, "--model", tiny_checkpoints, "--token-scores", "5", "--dry-run")
    assert code == 0, err
    rows = choose(read_panel(panel).treatment, lengths, 5)
    width = int(lengths[rows].max()) - 1
    size = 2 * 5 * len(STEPS) * width
    assert f"token scores: per-token scores for 5 instances x 5 checkpoint(s) x up to {width} targets: about" in out
    assert estimate_bytes(read_panel(panel), rows, len(STEPS)) == size
    assert read_layout(panel) is None  # a dry run writes nothing
    code, out, err = cli("extract", panel, "--model", tiny_checkpoints, "--token-scores", "5", "--foreground",
                         "--checkpoints", "0,10", "--batch-size", "7")  # fmt: skip
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("per-token scores for 5 instances x 2 checkpoint(s)") and f"{2 * 5 * 2 * width:,}" in first
    code, out, err = cli("info", panel)
    assert code == 0 and "token scores" in out
    line = next(x for x in out.splitlines() if x.startswith("token scores"))
    assert "5 instances (ids " in line and "2/5 checkpoints, steps 0 .. 10" in line and "stored" in line
