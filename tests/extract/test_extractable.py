"""(k, l)-extractability from the scoring pass against real greedy decoding; panels with and without it; parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import STEPS, VOCAB, make_panel
from transformers import GPTNeoXForCausalLM

from memtui.core.errors import MemtuiError
from memtui.extract.commit import commit_ready
from memtui.extract.units import Owner, WorkDir, plan_units
from memtui.extract.worker import run
from memtui.panel.hdf5 import create_panel, read_extractable, read_panel
from memtui.panel.model import METRICS, NEVER

K, L = 4, 8
LENGTH = 16  # rows of 16 tokens; some are cut below K + L = 12 and must get NaN


def _load(root: Path, step: int) -> GPTNeoXForCausalLM:
    return GPTNeoXForCausalLM.from_pretrained(root / f"step{step}").eval()


@torch.no_grad()
def greedy(model, prefix: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """``n`` tokens by greedy decoding (argmax steps, each fed back), and the smallest gap between the largest and the
    second-largest logit over the steps (0 would be a tie, where argmax and the rank-0 rule may disagree)."""
    x = torch.as_tensor(prefix, dtype=torch.long)[None]
    gap = np.inf
    for _ in range(n):
        logits = model(input_ids=x).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        gap = min(gap, float(top2[0] - top2[1]))
        x = torch.cat([x, logits.argmax()[None, None]], 1)
    return x[0, len(prefix) :].numpy(), gap


@pytest.fixture(scope="module")
def instances(tiny_checkpoints) -> tuple[np.ndarray, np.ndarray]:
    """Per checkpoint: rows that are its own greedy continuation of a random prefix (extractable at that checkpoint),
    rows that follow it for only the first m suffix tokens then leave it (extractable_len = m), and random rows."""
    rng = np.random.default_rng(5)
    rows = []
    for step in STEPS:
        model = _load(tiny_checkpoints, step)
        for m in (L, L, L, 0, 3, 7):
            prefix = rng.integers(0, VOCAB, size=K)
            cont, _ = greedy(model, prefix, LENGTH - K)
            row = np.r_[prefix, cont]
            if m < L:  # replace suffix token m + 1 by another token: greedy decoding stops matching there
                row[K + m] = (row[K + m] + 1 + rng.integers(0, VOCAB - 1)) % VOCAB
            rows.append(row)
    rows += list(rng.integers(0, VOCAB, size=(14, LENGTH)))
    tokens = np.array(rows)
    lengths = np.full(len(tokens), LENGTH)
    lengths[[3, 9, 20, 31]] = [K + L - 1, 2, K + L, 1]  # one short of K + L, short, exactly K + L, one token
    tokens[np.arange(LENGTH)[None, :] >= lengths[:, None]] = -1
    return tokens, lengths


def _panel(path: Path, tokens, lengths, **kw) -> Path:
    n = len(tokens)
    treatment = np.where(np.arange(n) % 3 == 0, NEVER, np.array(STEPS)[1 + np.arange(n) % 4])
    return create_panel(path, ids=np.arange(n), treatment=treatment, steps=STEPS, tokens=tokens, lengths=lengths, **kw)


def test_extractability_equals_greedy_decoding_at_every_checkpoint(tmp_path, tiny_checkpoints, instances):
    tokens, lengths = instances
    path = _panel(tmp_path / "p.h5", tokens, lengths, extractable=(K, L))
    assert read_extractable(path) == (K, L)
    assert run(path, model=str(tiny_checkpoints), batch_size=5, handle_signals=False, log=lambda m: None) == "done"
    panel = read_panel(path)
    for c, step in enumerate(STEPS):
        model = _load(tiny_checkpoints, step)
        want_len = np.full(len(tokens), np.nan)
        for i, (row, n) in enumerate(zip(tokens, lengths, strict=True)):
            if n < K + L:
                continue
            out, gap = greedy(model, row[:K], L)
            assert gap > 0, "an exact tie of the top logits: the test's instances must avoid them"
            agree = out == row[K : K + L]
            want_len[i] = L if agree.all() else int(np.argmin(agree))
        want = np.where(np.isnan(want_len), np.nan, want_len == L)
        np.testing.assert_array_equal(panel.metrics["extractable_len"][:, c], want_len, err_msg=f"step {step}")
        np.testing.assert_array_equal(panel.metrics["extractable"][:, c], want, err_msg=f"step {step}")
        # the constructed rows of this checkpoint: extractable, and cut after m tokens
        own = slice(6 * c, 6 * c + 6)
        np.testing.assert_array_equal(panel.metrics["extractable_len"][own, c][[0, 1, 2, 4, 5]], [L, L, L, 3, 7])
    assert (
        np.isnan(panel.metrics["extractable"][[3, 9, 31]]).all() and np.isfinite(panel.metrics["extractable"][20]).all()
    )
    ext = panel.metrics["extractable"]
    assert 0 < np.nanmean(ext) < 1  # both kinds of rows are there at every checkpoint
    assert all(0 < np.nanmean(ext[:, c]) < 1 for c in range(len(STEPS)))


def test_extractable_option_must_agree_with_the_panel(tmp_path, tiny_checkpoints, instances):
    tokens, lengths = instances
    path = _panel(tmp_path / "p.h5", tokens, lengths, extractable=(K, L))
    for bad, match in (("32,32", "disagrees with .* k=4, l=8"), ("4", "takes K,L"), ("0,3", "takes K,L")):
        with pytest.raises(MemtuiError, match=match):
            run(path, model=str(tiny_checkpoints), extractable=bad, handle_signals=False, log=lambda m: None)
    assert not read_panel(path).done.any()
    assert run(path, model=str(tiny_checkpoints), checkpoints="0", extractable=f"{K},{L}", handle_signals=False,
               log=lambda m: None) == "done"  # fmt: skip
    old = make_panel(tmp_path / "old.h5")  # no extractability metrics at all
    with h5py_file(old) as f:
        for name in ("extractable", "extractable_len", "sampled_logp"):
            del f["metrics"][name]
    with pytest.raises(MemtuiError, match="has no extractability metrics"):
        run(old, model=str(tiny_checkpoints), extractable="32,32", handle_signals=False, log=lambda m: None)


def h5py_file(path):
    import h5py

    return h5py.File(path, "r+")


def test_old_four_metric_panels_extract_their_four_metrics(tmp_path, tiny_checkpoints, tiny_reference):
    """A panel made before extractability (four metric datasets) is filled exactly as before, and a six-metric part
    folded into it writes its four; a six-metric panel refuses a four-metric part (scored again)."""
    old = make_panel(tmp_path / "old.h5")  # the tiny reference's instances
    with h5py_file(old) as f:  # what a panel made before looks like
        for name in ("extractable", "extractable_len", "sampled_logp"):
            del f["metrics"][name]
    assert sorted(read_panel(old).metrics) == sorted(METRICS[:4]) and read_extractable(old) is None
    assert run(old, model=str(tiny_checkpoints), batch_size=7, handle_signals=False, log=lambda m: None) == "done"
    got = read_panel(old)
    assert sorted(got.metrics) == sorted(METRICS[:4])
    for m in METRICS[:4]:
        np.testing.assert_array_equal(got.metrics[m], tiny_reference.metrics[m], err_msg=m)

    # a part with six columns, folded into a four-metric panel: four are written
    fresh = make_panel(tmp_path / "fresh.h5")
    with h5py_file(fresh) as f:
        for name in ("extractable", "extractable_len", "sampled_logp"):
            del f["metrics"][name]
    work = WorkDir(fresh).ensure()
    unit = plan_units([0], np.array(STEPS), 40, 1)[0]
    six = {m: np.full(40, float(i)) for i, m in enumerate(METRICS)}
    work.write_part(unit, six, {"revision": "x"})
    assert commit_ready(fresh, work, Owner.me(), log=lambda m: None) == 1
    got = read_panel(fresh)
    assert got.done[0] and [got.metrics[m][0, 0] for m in METRICS[:4]] == [0, 1, 2, 3]

    # a part with four columns cannot fill a six-metric panel: dropped, and its unit is scored again
    new = make_panel(tmp_path / "new.h5")
    work = WorkDir(new).ensure()
    work.write_part(unit, {m: six[m] for m in METRICS[:4]}, {"revision": "x"})
    logs = []
    assert commit_ready(new, work, Owner.me(), log=logs.append) == 0
    assert not work.has_part(unit) and not read_panel(new).done[0]
    assert any("carries no 'extractable' column" in m for m in logs)


def test_a_panel_without_extractable_metrics_but_with_others_is_refused_cleanly(tmp_path, tiny_checkpoints):
    rng = np.random.default_rng(1)
    path = create_panel(tmp_path / "custom.h5", ids=range(6), treatment=[NEVER] * 3 + [10] * 3, steps=STEPS,
                        metrics=["perplexity"], tokens=rng.integers(0, VOCAB, size=(6, 8)))  # fmt: skip
    with pytest.raises(MemtuiError, match="none of the metrics extraction computes"):
        run(path, model=str(tiny_checkpoints), handle_signals=False, log=lambda m: None)


def test_create_panel_records_and_checks_k_and_l(tmp_path):
    kw = {"ids": range(4), "treatment": [NEVER, NEVER, 10, 10], "steps": [0, 10]}
    assert read_extractable(create_panel(tmp_path / "a.h5", **kw)) == (32, 32)
    assert read_extractable(create_panel(tmp_path / "b.h5", metrics=["loglik"], **kw)) is None
    for bad in ((0, 32), (32,), (1.5, 2)):
        with pytest.raises(MemtuiError, match="extractable"):
            create_panel(tmp_path / "c.h5", extractable=bad, **kw)
    path = create_panel(tmp_path / "d.h5", extractable=(5, 50), **kw)
    with h5py_file(path) as f:
        assert f["metrics/extractable"].attrs["k"] == 5 and f["metrics/extractable_len"].attrs["l"] == 50
        f["metrics/extractable_len"].attrs["l"] = 49
    with pytest.raises(MemtuiError, match="inconsistent k and l"):
        read_extractable(path)


# --- the extractable estimator: the cohort's mean metric, its counterfactual taken as zero ---------------------------


@pytest.fixture(scope="module")
def big_panel(tmp_path_factory) -> Path:
    from memtui.panel.synthetic import Simulation, write_synthetic

    sim = Simulation(n_cohorts=4, per_cohort=120, n_never=150, n_checkpoints=6, seed=11)
    return write_synthetic(tmp_path_factory.mktemp("est") / "p.h5", sim)


@pytest.mark.parametrize("metric", ["loglik", "rank"])
def test_extractable_estimator_is_the_cohort_mean_with_its_standard_error(big_panel, metric):
    import polars as pl

    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings

    panel = read_panel(big_panel)
    res = estimate(panel, Settings(metric=metric, estimator="extractable", draws=2000, seed=1))
    y, steps, sign = panel.values(metric), panel.done_steps, panel.sign(metric)
    cohorts = np.unique(panel.treatment[panel.treatment != NEVER])
    assert res.cells.height == len(cohorts) * len(steps)  # every cohort at every checkpoint, before training too
    cells = res.cells.sort("cohort", "checkpoint")
    means = np.array([[y[panel.treatment == g, c].mean() for c in range(len(steps))] for g in cohorts])
    sds = np.array([[y[panel.treatment == g, c].std() for c in range(len(steps))] for g in cohorts])
    n_g = np.array([(panel.treatment == g).sum() for g in cohorts])
    np.testing.assert_allclose(cells["estimate"].to_numpy(), (sign * means).ravel(), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(cells["analytic_se"].to_numpy(), (sds / np.sqrt(n_g)[:, None]).ravel(), rtol=1e-9)
    ratio = cells["std_error"].to_numpy() / cells["analytic_se"].to_numpy()
    assert ratio.min() > 0.85 and ratio.max() < 1.15 and abs(np.median(ratio) - 1) < 0.05  # Monte-Carlo error
    assert (cells["pre_treatment"].to_numpy() == (cells["checkpoint"] < cells["cohort"]).to_numpy()).all()
    assert (cells["n_control"] == 0).all() and not cells["small_group"].any()
    assert not any("control" in note for note in res.notes)
    # the summaries: persistent = cohort-size weighted mean at each event time, overall over post cells
    pers = res.persistent.sort("event_time")
    for row in pers.iter_rows(named=True):
        at = cells.filter(pl.col("event_time") == row["event_time"])
        w = at["n_treated"].to_numpy()
        assert row["estimate"] == pytest.approx(np.average(at["estimate"].to_numpy(), weights=w), rel=1e-12)
    post = cells.filter(~pl.col("pre_treatment"))
    assert res.overall["estimate"] == pytest.approx(np.average(post["estimate"], weights=post["n_treated"]), rel=1e-12)
    assert np.isfinite(pers["std_error"].to_numpy()).all() and res.residual.height == len(cohorts)
    # it is the difference estimator plus the never-treated level: Ybar_c(g) = (Ybar_c(g) - Ybar_c(C)) + Ybar_c(C)
    diff = estimate(panel, Settings(metric=metric, estimator="difference", draws=0)).cells.sort("cohort", "checkpoint")
    level = sign * y[panel.never_treated].mean(axis=0)
    np.testing.assert_allclose(
        cells["estimate"] - diff["estimate"], np.tile(level, len(cohorts)), rtol=1e-10, atol=1e-9
    )


def test_compare_shows_the_three_estimators_and_the_ease_with_its_band(big_panel):
    import polars as pl

    from memtui.estimation.compare import compare
    from memtui.estimation.estimate import ALL_ESTIMATORS
    from memtui.estimation.settings import Settings

    panel = read_panel(big_panel)
    cmp = compare(panel, Settings(metric="loglik", draws=1000, seed=2))
    f = cmp.cells
    assert (
        set(cmp.results) == set(ALL_ESTIMATORS) == {"did", "difference", "extractable"}
        and f.height == cmp.results["extractable"].cells.height
    )
    both = f.filter(pl.col("did_estimate").is_not_null())
    assert both.height == cmp.results["did"].cells.height
    np.testing.assert_allclose(both["ease_estimate"], both["extractable_estimate"] - both["did_estimate"], atol=1e-9)
    # against the direct formula: the cohort's level at the base (g - 1) plus the never-treated change since then
    y, steps, tr = panel.values("loglik"), list(panel.done_steps), panel.treatment
    for row in both.filter(~pl.col("pre_treatment")).iter_rows(named=True):
        b, t = steps.index(row["cohort"]) - 1, steps.index(row["checkpoint"])
        level, change = y[tr == row["cohort"], b], y[tr == NEVER, t] - y[tr == NEVER, b]
        assert row["ease_estimate"] == pytest.approx(level.mean() + change.mean(), rel=1e-10)
        se = np.sqrt(level.var() / len(level) + change.var() / len(change))
        assert row["ease_analytic_se"] == pytest.approx(se, rel=1e-9)
        assert 0.8 < row["ease_std_error"] / se < 1.2
        assert row["ease_band_low"] < row["ease_estimate"] < row["ease_band_high"]
    assert 1.5 < cmp.ease_crit < 5


def test_export_and_estimate_take_the_extractable_estimator(cli, big_panel, tmp_path):
    import polars as pl

    out = tmp_path / "x.csv"
    code, stdout, err = cli("export", big_panel, "-m", "accuracy", "--estimator", "extractable", "--all", "-o", out,
                            "-B", "100")  # fmt: skip
    assert code == 0, err
    frame = pl.read_csv(out)
    assert (frame["estimator"] == "extractable").all() and frame.height == 4 * 6
    code, stdout, err = cli("estimate", big_panel, "--estimator", "extractable", "-B", "100")
    assert code == 0 and "estimator extractable" in stdout, err
