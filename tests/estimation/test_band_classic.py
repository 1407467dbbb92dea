"""``band="classic"`` is today's band, bit for bit: the band of R `did`, csdid and `differences` that memtui gave
before the calibrated band became the default (commit d91aacb on main), so anyone can reproduce the paper.

Two checks that fail if the classic band drifts: (1) ``estimate`` with ``band="classic"`` equals a frozen copy of
that commit's assembly path (``_frozen_estimate`` below: its _Cells/_assemble/_persistent/_overall/_pretrend and
result_frame, verbatim but for names), every column, summary, note and critical value, bitwise; (2) a few numbers
that commit computed (critical values, standard errors, band limits, the overall interval, the pre-trend test) are
stored here and must be reproduced (to float32 rounding, so that another BLAS kernel's last bits do not matter),
which also catches a change inside the engine that the frozen copy would share."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memtui.engine import did
from memtui.engine.layout import build_layout
from memtui.engine.summaries import aggregate, analytic_se
from memtui.estimation.estimate import estimate
from memtui.estimation.results import (
    SMALL_GROUP,
    Overall,
    Pretrend,
    final_index,
    group_notes,
    z_value,
)
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, simulate

SIM = Simulation(n_cohorts=5, per_cohort=12, n_never=30, n_checkpoints=7, seed=3)
CONFIGS = {
    "default": {"draws": 200, "seed": 1},
    "nyt-universal-all": {
        "draws": 200, "seed": 2, "control_group": "not_yet_treated", "base_period": "universal", "family": "all"
    },
    "difference-mammen": {"draws": 150, "seed": 4, "estimator": "difference", "multiplier": "mammen"},
    "extractable-rank": {"draws": 120, "seed": 5, "estimator": "extractable", "metric": "rank"},
}  # fmt: skip


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    data = simulate(SIM)
    path = Path(tmp_path_factory.mktemp("classic")) / "p.h5"
    create_panel(path, ids=data["ids"], treatment=data["treatment"], steps=data["steps"], values=data["values"],
                 signs=data["signs"])  # fmt: skip
    return read_panel(path)


# --- (1) a frozen copy of the classic assembly path ---------------------------------------------------------------


def _frozen_frame(settings, scope, *, cohort, checkpoint, event_time, att, sign, se, ase, crit, n_treated, n_control,
                  pre, n_folded, small):  # fmt: skip
    z = z_value(settings.alpha)
    tau = sign * att
    band = crit * se
    significant = np.abs(tau) > band
    significant &= np.isfinite(band)
    return pl.DataFrame(
        {
            "metric": settings.metric, "estimator": settings.estimator, "scope": scope,
            "cohort": pl.Series(cohort, dtype=pl.Int64), "checkpoint": pl.Series(checkpoint, dtype=pl.Int64),
            "event_time": pl.Series(event_time, dtype=pl.Int64), "estimate": tau, "std_error": se,
            "analytic_se": ase, "ci_low": tau - z * se, "ci_high": tau + z * se, "band_low": tau - band,
            "band_high": tau + band, "crit": crit, "significant": significant, "pre_treatment": pre,
            "n_treated": pl.Series(n_treated, dtype=pl.Int64), "n_control": pl.Series(n_control, dtype=pl.Int64),
            "n_folded": pl.Series(n_folded, dtype=pl.Int64), "small_group": pl.Series(small, dtype=pl.Boolean),
            "alpha": settings.alpha, "draws": settings.draws, "seed": settings.seed,
        }
    )  # fmt: skip


def _frozen_estimate(panel, s: Settings) -> dict:
    """estimation.estimate.estimate as of d91aacb (memtui engine, the only band it had), returning its parts."""
    lay = build_layout(panel.values(s.metric), panel.treatment, panel.done_steps, never=NEVER, estimator=s.estimator,
                       base_period=s.base_period, control_group=s.control_group)  # fmt: skip
    est = did.point_estimates(lay)
    boot = did.bootstrap(lay, est, draws=s.draws, seed=s.seed, multiplier=s.multiplier) if s.draws else None
    alpha = s.alpha
    steps = lay.steps
    cohort_step, cell_step = steps[lay.group_index[lay.cell_group]], steps[lay.cell_t]
    event = cell_step - cohort_step
    floor = did.se_floor(lay.scale)
    ase = did.floored(est.se, floor)
    se = did.bootstrap_se(boot.cells, floor) if boot is not None else ase
    pre = lay.cell_pre
    masks = {
        "all": np.ones(len(pre), bool),
        "post": ~pre,
        "pre": pre,
        "instantaneous": lay.cell_t == lay.group_index[lay.cell_group],
        "residual": (lay.cell_t == final_index(steps, s.final_step)) & ~pre,
    }
    tmax = dict(zip(masks, did.sup_t_many(boot.cells, se, list(masks.values())), strict=True)) if boot else {}
    sign = panel.sign(s.metric)
    folded = lay.group_folded[lay.cell_group]
    small = (est.n_treated < SMALL_GROUP) | ((est.n_control < SMALL_GROUP) & lay.controls)
    draws = boot.cells if boot is not None else None

    def crit_of(name):
        return z_value(alpha) if draws is None else did.critical_value(tmax[name], alpha)

    def frame(scope, mask, crit):
        return _frozen_frame(s, scope, cohort=cohort_step[mask], checkpoint=cell_step[mask], event_time=event[mask],
                             att=est.att[mask], sign=sign, se=se[mask], ase=ase[mask], crit=crit,
                             n_treated=est.n_treated[mask], n_control=est.n_control[mask], pre=pre[mask],
                             n_folded=folded[mask], small=small[mask])  # fmt: skip

    def subset(scope):
        mask = masks[scope]
        return frame(scope, mask, np.full(mask.sum(), crit_of(scope)))

    events = np.unique(event)
    members = [np.flatnonzero(event == e) for e in events]
    every = [*members, np.flatnonzero(~pre)]
    theta, agg_draws = aggregate(lay, est.att, draws, boot.group_w if boot else None, every)
    agg_ase = did.floored(analytic_se(lay, est, every), floor)
    agg_se = did.bootstrap_se(agg_draws, floor) if agg_draws is not None else agg_ase

    crit = np.empty(len(pre))
    if s.family == "all":
        crit[:] = crit_of("all")
    else:
        crit[~pre] = crit_of("post") if (~pre).any() else np.nan
        crit[pre] = crit_of("pre") if pre.any() else np.nan

    # persistent
    p_draws = agg_draws[:-1] if agg_draws is not None else None
    post_e = events >= 0
    fam = post_e if s.family == "post" else np.ones(len(events), bool)
    crit_e = np.full(len(events), z_value(alpha))
    if p_draws is not None:
        crit_e[fam] = did.critical_value(did.sup_t(p_draws, agg_se[:-1], fam), alpha)
        if s.family == "post" and (~post_e).any():
            crit_e[~post_e] = did.critical_value(did.sup_t(p_draws, agg_se[:-1], ~post_e), alpha)
    persistent = _frozen_frame(
        s, "persistent", cohort=[None] * len(events), checkpoint=[None] * len(events), event_time=events,
        att=theta[:-1], sign=sign, se=agg_se[:-1], ase=agg_ase[:-1], crit=crit_e,
        n_treated=[int(est.n_treated[m].sum()) for m in members],
        n_control=[int(est.n_control[m].max()) for m in members], pre=events < 0,
        n_folded=[int(folded[m].sum()) for m in members], small=[bool(small[m].any()) for m in members],
    )  # fmt: skip

    # overall
    post_cells = np.flatnonzero(~pre)
    z = z_value(alpha)
    o_tau = float(sign * theta[-1])
    o_se = float(agg_se[-1])
    overall = Overall(estimate=o_tau, std_error=o_se, analytic_se=float(agg_ase[-1]), ci_low=o_tau - z * o_se,
                      ci_high=o_tau + z * o_se, significant=bool(abs(o_tau) > z * o_se), n_cells=len(post_cells),
                      small_group=bool(small[post_cells].any()))  # fmt: skip

    # pretrend
    pretrend = Pretrend(n_cells=int(pre.sum()))
    ok = pre & np.isfinite(se)
    if draws is not None and ok.any():
        stat = float(np.max(np.abs(est.att[ok]) / se[ok]))
        pc = did.critical_value(tmax["pre"], alpha)
        pretrend = Pretrend(n_cells=int(pre.sum()), sup_t=stat, p_value=float(np.mean(tmax["pre"] >= stat)), crit=pc,
                            n_significant=int(np.sum(np.abs(est.att[ok]) / se[ok] > pc)))  # fmt: skip

    notes = list(lay.notes) + group_notes(lay, est)
    flat = ~np.isfinite(se)
    if flat.any():
        notes.append(
            f"{int(flat.sum())} cells have no sampling variation (standard error under {did.SE_FLOOR_REL:.1e} times "
            "the outcome's standard deviation): no band, never marked significant"
        )
    return {
        "cells": frame("profile", masks["all"], crit),
        "instantaneous": subset("instantaneous"),
        "persistent": persistent,
        "residual": subset("residual"),
        "overall": overall,
        "pretrend": pretrend,
        "crit": float(crit[~pre][0]) if (~pre).any() else float("nan"),
        "notes": notes,
    }


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("name", [*CONFIGS, "no-draws"])
def test_classic_band_is_the_frozen_classic_path_bit_for_bit(panel, name):
    s = Settings(band="classic", **CONFIGS.get(name, {"draws": 0}))
    res = estimate(panel, s)
    want = _frozen_estimate(panel, s)
    assert res.band == "classic"
    for scope in ("cells", "instantaneous", "persistent", "residual"):
        got = getattr(res, scope)
        assert set(got["band"]) <= {"classic"}
        assert got.drop("band").equals(want[scope], null_equal=True), scope
    for key in ("overall", "pretrend"):
        got, exp = getattr(res, key), want[key]
        assert got.keys() == exp.keys()
        assert all(_same(got[k], exp[k]) for k in got), (key, got, exp)
    assert _same(res.crit, want["crit"])
    assert res.notes == want["notes"]


# --- (2) numbers d91aacb computed ---------------------------------------------------------------------------------

STORED = {
    "default": {
        "crit": 2.802359104156494, "std_error": [4.464921269267858, 4.424651600250085, 3.6093425780783805],
        "band_low": [-3.964518395638274, -7.241907594875571, 5.352350537746014],
        "band_high": [21.060107140911228, 17.557017794487283, 25.581698605141256],
        "persistent_crit": [2.4787327816137212, 2.415260609198263],
        "overall": [1.5591965610748455, 6.292912056225779, 12.404850265276584],
        "pretrend": [2.655914068222046, 0.01, 3.115283626857146], "n_significant": 9,
    },
    "nyt-universal-all": {"crit": 2.7257418632507324, "overall": [1.6167896799877866, 6.518148009341548,
                          12.85584709604575], "pretrend": [2.3373711109161377, 0.15, 2.1296225410038065],
                          "n_significant": 8},
    "difference-mammen": {"crit": 2.618933916091919, "overall": [13.545535941420832, -7.778385720437658,
                          45.319139472517705], "pretrend": [2.525636672973633, 0.23333333333333334,
                          1.9005446434402207], "n_significant": 0},
    "extractable-rank": {"crit": 2.5569002628326416, "overall": [1.3144845170995205, -34.805361824052824,
                         -29.652677200551654], "pretrend": [2.484384059906006, 0.0, 38.01717328453464],
                         "n_significant": 35},
}  # fmt: skip


@pytest.mark.parametrize("name", list(STORED))
def test_classic_band_reproduces_the_numbers_of_the_paper_band(panel, name):
    s = Settings(band="classic", **CONFIGS[name])
    res = estimate(panel, s)
    want = STORED[name]
    close = {"rel": 2e-6, "abs": 0}  # float32 draws: another BLAS kernel may move the last bits, nothing more
    assert res.crit == pytest.approx(want["crit"], **close)
    o = res.overall
    assert [o.std_error, o.ci_low, o.ci_high] == pytest.approx(want["overall"], **close)
    pt = res.pretrend
    assert [pt.crit, pt.sup_t] == pytest.approx([want["pretrend"][0], want["pretrend"][2]], **close)
    assert pt.p_value == pytest.approx(want["pretrend"][1], abs=1.5 / s.draws)
    assert int(res.cells["significant"].sum()) == want["n_significant"]
    if "std_error" in want:
        rows = [0, 7, res.cells.height - 1]
        for col in ("std_error", "band_low", "band_high"):
            assert [res.cells[col][i] for i in rows] == pytest.approx(want[col], **close), col
        pers = res.persistent["crit"].to_list()
        assert [pers[0], pers[-1]] == pytest.approx(want["persistent_crit"], **close)
