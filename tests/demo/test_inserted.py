"""`memtui demo --inserted`: the insertion design (doses, timings, copies replacing rows) and, end to end on the small
version, memtui's estimates from the perturbed model against the truth the standard model gives."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest

from memtui.demo.inserted import MAX_SHARE, InsertedConfig, make_inserted, perturb, plan_insertions, unigram
from memtui.demo.inserted_report import FIGURES
from memtui.demo.train import corpus_rows
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER


@pytest.mark.parametrize("cfg", [InsertedConfig(), InsertedConfig.small()], ids=["full", "small"])
def test_plan_places_every_copy_where_the_design_says(cfg):
    base = cfg.base
    rows, _ = corpus_rows(base)
    freq = unigram(rows)
    plan = plan_insertions(cfg, freq)
    ins = plan.inserted
    assert ins.sum() == len(cfg.doses) * len(cfg.timings) * cfg.per_group and (~ins).sum() == cfg.n_controls
    assert sorted(set(plan.dose[ins].tolist())) == sorted(cfg.doses)
    assert (plan.treatment[~ins] == NEVER).all() and all(len(plan.copy_steps[i]) == 0 for i in np.flatnonzero(~ins))
    cohorts = {}
    for i in np.flatnonzero(ins):
        steps, pos = plan.copy_steps[i], plan.positions[i]
        assert len(steps) == len(set(steps.tolist())) == plan.dose[i]  # d copies, at d different steps
        assert steps.max() - steps.min() < cfg.window and steps.max() <= base.steps
        assert np.array_equal(pos // base.batch + 1, steps)  # each copy's row is trained at its step
        first_checkpoint = -(-steps.min() // base.every) * base.every
        assert plan.treatment[i] == first_checkpoint  # treated at the first checkpoint after the first copy
        # half the copies (the one copy of dose 1) fall before the cohort's own checkpoint
        assert (steps <= first_checkpoint).sum() == max(1, plan.dose[i] // 2)
        cohorts.setdefault(int(plan.treatment[i]), set()).add((int(plan.dose[i]), plan.timing[i]))
    # one (dose, timing) group per cohort, every group its own cohort
    assert all(len(v) == 1 for v in cohorts.values()) and len(cohorts) == len(cfg.doses) * len(cfg.timings)
    order = {t: k for k, (t, _) in enumerate(cfg.timings)}
    by_timing = sorted(cohorts.items())
    assert [order[next(iter(v))[1]] for _, v in by_timing] == sorted(order[next(iter(v))[1]] for _, v in by_timing)
    # copies never share a row, and never fill more than MAX_SHARE of a batch
    every_pos = np.concatenate([plan.positions[i] for i in np.flatnonzero(ins)])
    assert len(np.unique(every_pos)) == len(every_pos)
    assert np.bincount(every_pos // base.batch).max() <= MAX_SHARE * base.batch
    # the perturbed rows are the standard rows except exactly at the copies, which hold the canary
    out = perturb(rows, plan)
    changed = np.flatnonzero((out != rows).any(axis=1))
    assert set(changed.tolist()) <= set(every_pos.tolist()) and len(changed) >= 0.99 * len(every_pos)
    for i in np.flatnonzero(ins)[:: cfg.per_group]:
        assert (out[plan.positions[i]] == plan.tokens[i]).all()
    # canaries and controls come from one distribution, the corpus's byte frequencies (not its sentences)
    share = np.bincount(plan.tokens.ravel(), minlength=256) / plan.tokens.size
    assert np.abs(share - freq).max() < 0.01 and (share[freq == 0] == 0).all()


@pytest.mark.slow
def test_small_inserted_end_to_end(tmp_path, monkeypatch, cli):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    out = tmp_path / "inserted"
    cfg = InsertedConfig.small()
    lines: list[str] = []
    report = make_inserted(out, cfg, log=lines.append)
    p, s = read_panel(out / "perturbed.h5"), read_panel(out / "standard.h5")
    assert np.array_equal(p.ids, s.ids) and np.array_equal(read_tokens(p.path)[0], read_tokens(s.path)[0])
    assert p.done.all() and s.done.all() and p.attrs["model"] == "perturbed" and s.attrs["model"] == "standard"
    assert not list(scratch.glob("memtui-demo-*")) and not list(out.glob("*.work"))

    # the two runs share init and data until the first copy: bitwise-equal scores before it, different after
    first = int(p.provenance["insertion_steps"][p.provenance["insertion_steps"] > 0].min())
    before = p.steps < first
    assert before.sum() >= 2
    for m in p.metrics:
        assert np.array_equal(p.metrics[m][:, before], s.metrics[m][:, before], equal_nan=True)
    y_p, y_s = p.metrics["loglik"], s.metrics["loglik"]
    assert (y_p[:, ~before] != y_s[:, ~before]).any(axis=0).all()
    # a cohort's canaries gain far more than the controls once inserted: the perturbation reaches them
    dose = p.provenance["duplicates"]
    last = p.treatment.max()
    for g in np.unique(p.treatment[dose == dose.max()]):
        j = list(p.steps).index(g)
        gain = (y_p - y_s)[:, j]
        assert gain[p.treatment == g].mean() > gain[p.never_treated].mean() + 1.0
    assert last <= p.steps.max()

    data = json.loads((out / "report.json").read_text())
    assert data["identity"]["scores_equal_before"] and data["identity"]["weights_equal_before"]
    inst = pl.DataFrame(data["instantaneous"])
    # dose 16's instantaneous effect exceeds dose 1's in every timing (estimate and truth)
    for t in {t for t, _ in cfg.timings}:
        row = {r["dose"]: r for r in inst.filter(pl.col("timing") == t).iter_rows(named=True)}
        assert row[16]["estimate"] > row[1]["estimate"] and row[16]["aligned"] > row[1]["aligned"]
    # at the high dose the band recovers the truth: every post cell of dose 16 covers the aligned truth (DiD's error
    # against it is the standard model's own DiD: sampling noise), most the unaligned one; and it is detected
    cells = pl.DataFrame(data["cells"]).filter(pl.col("dose") == 16)
    assert cells.height >= 8 and cells["band_covers_aligned"].all() and cells["band_covers_own"].mean() >= 0.75
    assert inst.filter(pl.col("dose") == 16)["significant"].all()
    # DiD's error against the aligned truth is the standard model's DiD on the same canaries, checked by hand
    never = s.never_treated
    for r in inst.iter_rows(named=True):
        g = r["cohort"]
        j, b = list(s.steps).index(g), list(s.steps).index(g) - 1
        t = s.treatment == g
        standard_did = (y_s[t, j] - y_s[t, b]).mean() - (y_s[never, j] - y_s[never, b]).mean()
        assert r["estimate"] - r["aligned"] == pytest.approx(standard_did, abs=1e-6)
    # the direct counterfactual is the spill-over away from the own effect (the controls' change under perturbation)
    spill = (y_p - y_s)[never].mean(axis=0)
    for r in inst.iter_rows(named=True):
        assert r["direct"] - r["own"] == pytest.approx(spill[list(p.steps).index(r["cohort"])], abs=1e-6)
    # the report states its verdicts with numbers and links its figures, which are SVG
    text = report.read_text()
    assert len(re.findall(r"^- \*\*[^*]+: (held|partly|did not hold)\.\*\* .*\d", text, re.M)) == 6
    for name in FIGURES:
        assert f"({name})" in text and ET.parse(out / name).getroot().tag.endswith("svg")
    # the covariates went into the panel (dose and timing per instance)
    import h5py

    with h5py.File(out / "perturbed.h5", "r") as f:
        assert np.array_equal(f["instances/covariates/dose"][()], dose.astype(float))
        assert set(f["instances/covariates/timing"][()].astype(str)) == {"early", "late", "never"}

    code, _, err = cli("demo", "--inserted", out, "--small")  # refused before anything starts
    assert code == 2 and "already holds" in err
