"""The study of `memtui demo --inserted`: memtui's DiD estimates from the perturbed model against the truth the
standard model gives (:mod:`memtui.demo.inserted`).

Two truths per cohort g and checkpoint c, both from the same canaries scored by both models (sign-adjusted metric Y):

- the **direct counterfactual** ``direct(g, c) = mean over g's canaries of Y_perturbed - Y_standard``: the effect of
  the whole perturbation (every canary inserted) on these canaries;
- the **instance-specific effect** ``own(g, c) = direct(g, c) - spill(c)``, where ``spill(c)`` is the same difference
  on the never-inserted controls: what training on *other* canaries did to any canary (the model learns what random
  sequences look like). The paper's memorisation is the effect of training on the instance itself, and DiD with
  never-inserted controls targets exactly this: the perturbed model's DiD minus ``own`` is
  ``[T_std(c) - C_std(c)] - [T_pert(g-1) - C_pert(g-1)]``, two differences between exchangeable random draws under
  a model that has not seen the cohort, zero in expectation. Against ``direct`` the DiD is short by ``spill(c)``.
- the **aligned** effect ``own(g, c) - own(g, g-1)``: a cohort of a few canaries starts off a little better or worse
  placed than the controls once other canaries have been trained on (``own`` before the cohort's insertion is zero in
  expectation, not in a sample), and that offset persists; subtracting it at the checkpoint before g (DiD's own base
  period) leaves DiD minus ``aligned`` = the *standard* model's DiD on the same canaries and controls, the pure
  sampling noise of trends under a model that never saw a canary: what the band is there to cover.

Everything the report states is computed here from the two panels; verdicts say what did not hold as plainly as what
did. Dose groups are stand-alone estimates on the canaries of one dose and every control (``estimate --by dose``
with joint draws would replace them: one band family across doses, and a test of the difference between doses).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.estimation.estimate import estimate
from memtui.estimation.results import EstimateResult
from memtui.estimation.settings import DEFAULT_BAND, DEFAULT_DRAWS, Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import Panel

TRUTHS = ("own", "aligned", "direct")


@dataclass
class Pair:
    perturbed: Panel
    standard: Panel
    dose: np.ndarray  # per instance; 0 for controls
    timing: np.ndarray  # per instance; "never" for controls
    config: dict


@dataclass
class Study:
    metric: str
    pair: Pair
    result: EstimateResult  # memtui on the perturbed panel
    truth: pl.DataFrame  # per (cohort, checkpoint): direct, spill, own, dose, timing, n
    cells: pl.DataFrame  # post cells: estimate and bands joined with the truths
    instantaneous: pl.DataFrame
    persistent: pl.DataFrame
    by_dose: dict[int, dict[str, pl.DataFrame]]  # dose -> {"instantaneous", "persistent"} (stand-alone estimates)
    identity: dict


def load_pair(out_dir: Path) -> Pair:
    """Both panels, checked to hold the same canaries at the same checkpoints, every checkpoint scored."""
    paths = [Path(out_dir) / f"{n}.h5" for n in ("perturbed", "standard")]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise MemtuiError(f"{', '.join(missing)} not found: the report reads the panels of `memtui demo --inserted`.")
    p, s = (read_panel(x) for x in paths)
    same = np.array_equal(p.ids, s.ids) and np.array_equal(p.treatment, s.treatment)
    if not same or not np.array_equal(p.steps, s.steps) or not (p.done.all() and s.done.all()):
        raise MemtuiError("the perturbed and standard panels differ in instances or checkpoints, or are not done.")
    dose = p.provenance.get("duplicates")
    if dose is None:
        raise MemtuiError(f"{paths[0]} records no insertion doses (provenance/duplicates).")
    timing = p.covariates.get("timing")
    if timing is None:
        raise MemtuiError(f"{paths[0]} records no insertion timings (instances/covariates/timing).")
    cfg = json.loads(p.attrs.get("inserted_config", "{}") or "{}")
    return Pair(p, s, np.asarray(dose, dtype=np.int64), np.asarray(timing, dtype=object), cfg)


def truth_cells(pair: Pair, metric: str) -> pl.DataFrame:
    """The two truths for every (cohort, checkpoint): means over the cohort's canaries and over the controls."""
    p, s = pair.perturbed, pair.standard
    sign = p.sign(metric)
    diff = sign * (p.metrics[metric] - s.metrics[metric])
    never = p.never_treated
    spill = diff[never].mean(axis=0)
    rows = []
    for g in np.unique(p.treatment[~never]):
        m = p.treatment == g
        direct = diff[m].mean(axis=0)
        own = direct - spill
        base = own[max(0, int(np.searchsorted(p.steps, g)) - 1)]  # the checkpoint before g: DiD's base period
        for j, c in enumerate(p.steps.tolist()):
            rows.append((int(g), int(c), int(c - g), float(direct[j]), float(spill[j]), float(own[j]),
                         float(own[j] - base), int(pair.dose[m][0]), str(pair.timing[m][0]), int(m.sum())))  # fmt: skip
    schema = ["cohort", "checkpoint", "event_time", "direct", "spill", "own", "aligned", "dose", "timing", "n"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def _joined(frame: pl.DataFrame, truth: pl.DataFrame) -> pl.DataFrame:
    """Estimate rows joined with the truths of their cell, and whether each interval covers each truth."""
    keep = ["cohort", "checkpoint", "estimate", "std_error", "ci_low", "ci_high", "band_low", "band_high"]
    keep.append("significant")
    out = frame.select(keep).join(truth.drop("event_time"), on=["cohort", "checkpoint"], how="left")
    out = out.with_columns((pl.col("checkpoint") - pl.col("cohort")).alias("event_time"))
    for t in TRUTHS:
        out = out.with_columns(
            pl.col(t).is_between(pl.col("band_low"), pl.col("band_high")).alias(f"band_covers_{t}"),
            pl.col(t).is_between(pl.col("ci_low"), pl.col("ci_high")).alias(f"ci_covers_{t}"),
        )
    return out


def persistent_truth(truth: pl.DataFrame) -> pl.DataFrame:
    """The truths averaged over cohorts at each event time, weighted by cohort size (as memtui aggregates)."""
    return (
        truth.group_by("event_time")
        .agg(*[((pl.col(t) * pl.col("n")).sum() / pl.col("n").sum()).alias(t) for t in (*TRUTHS, "spill")])
        .sort("event_time")
    )


def _persistent_joined(frame: pl.DataFrame, truth: pl.DataFrame) -> pl.DataFrame:
    keep = ["event_time", "estimate", "ci_low", "ci_high", "band_low", "band_high", "significant", "n_treated"]
    out = frame.filter(pl.col("event_time") >= 0).select(keep).join(persistent_truth(truth), on="event_time")
    for t in TRUTHS:
        out = out.with_columns(pl.col(t).is_between(pl.col("band_low"), pl.col("band_high")).alias(f"band_covers_{t}"))
    return out.sort("event_time")


def identity(pair: Pair, first_step: int) -> dict:
    """Before the first copy the runs are one computation: equal weights and bitwise-equal scores (every metric)."""
    p, s = pair.perturbed, pair.standard
    before = p.steps < first_step
    equal = [all(np.array_equal(p.metrics[m][:, j], s.metrics[m][:, j], equal_nan=True) for m in p.metrics)
             for j in range(len(p.steps))]  # fmt: skip
    hashes = [a == b and bool(a) for a, b in zip(p.weight_hashes, s.weight_hashes, strict=True)]
    return {
        "first_copy_step": first_step,
        "checkpoints_before": int(before.sum()),
        "scores_equal_before": bool(np.all(np.array(equal)[before])),
        "weights_equal_before": bool(np.all(np.array(hashes)[before])),
        "checkpoints_after_with_equal_scores": int(np.sum(np.array(equal)[~before])),
        "controls_differ_after": bool(
            np.any(p.metrics["loglik"][p.never_treated][:, ~before] != s.metrics["loglik"][p.never_treated][:, ~before])
        ),
    }


def first_copy_step(pair: Pair) -> int:
    steps = pair.perturbed.provenance.get("insertion_steps")
    return int(steps[steps > 0].min())


def coverage(frame: pl.DataFrame, truth: str, prefix: str = "band") -> dict:
    """Bias (estimate - truth), RMSE and the share of cells whose interval covers the truth."""
    if not frame.height:
        return {"cells": 0}
    err = (frame["estimate"] - frame[truth]).to_numpy()
    cov = frame[f"{prefix}_covers_{truth}"].to_numpy()
    return {"cells": frame.height, "bias": float(err.mean()), "rmse": float(np.sqrt((err**2).mean())),
            "covered": int(cov.sum()), "coverage": float(cov.mean()), "all_covered": bool(cov.all())}  # fmt: skip


def dose_estimates(pair: Pair, settings: Settings, truth: pl.DataFrame) -> dict[int, dict[str, pl.DataFrame]]:
    """Per dose, the estimate on that dose's canaries and every control (``estimate --by dose --shared-controls``:
    one set of draws for all doses, each dose's estimate the stand-alone one), joined with their truths."""
    from memtui.estimation.subgroups import estimate_by

    by = estimate_by(pair.perturbed, settings, "dose", shared_controls=True)
    out = {}
    for name, r in by.groups.items():
        d = int(float(name.partition("=")[2]))  # "dose=16"
        t = truth.filter(pl.col("dose") == d)
        out[d] = {"instantaneous": _joined(r.instantaneous, t), "persistent": _persistent_joined(r.persistent, t)}
    return out


def analyse(
    out_dir: str | Path, *, draws: int = DEFAULT_DRAWS, metric: str = "loglik", band: str = DEFAULT_BAND
) -> Study:
    pair = load_pair(Path(out_dir))
    settings = Settings(metric=metric, draws=draws, band=band)
    result = estimate(pair.perturbed, settings)
    truth = truth_cells(pair, metric)
    post = result.cells.filter(~pl.col("pre_treatment"))
    study = Study(
        metric=metric, pair=pair, result=result, truth=truth, cells=_joined(post, truth),
        instantaneous=_joined(result.instantaneous, truth), persistent=_persistent_joined(result.persistent, truth),
        by_dose=dose_estimates(pair, settings, truth), identity=identity(pair, first_copy_step(pair)),
    )  # fmt: skip
    return study


def truth_noise(s: Study) -> dict:
    """How noisy the truth itself is: before a cohort's first checkpoint its own effect is zero in expectation, yet
    after the first copy of *any* canary its measured value is not (canaries differ in what other canaries teach the
    model about them, and a cohort is a handful of canaries); the RMS over those placebo cells says by how much."""
    first = s.identity["first_copy_step"]
    pre = s.truth.filter((pl.col("checkpoint") < pl.col("cohort")) & (pl.col("checkpoint") >= first))
    if not pre.height:
        return {"cells": 0}
    return {"cells": pre.height, "rms_own": float(np.sqrt((pre["own"] ** 2).mean())),
            "rms_direct": float(np.sqrt((pre["direct"] ** 2).mean()))}  # fmt: skip
