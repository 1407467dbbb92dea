"""A suite's headline figures (``headline``: per model, what `memtui compare` prints; ``plateau``) and, for a seed
suite, how much of its profile is data order (``seed_spread``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.suite import SuiteResult
from memtui.estimation.suite_load import is_seed_suite

__all__ = ["HEADLINE_EVENTS", "SeedSpread", "headline", "plateau", "seed_spread"]

HEADLINE_EVENTS = (1, 5, 10)  # persistent memorisation this many checkpoints after training (headline columns)


def plateau(persistent: pl.DataFrame) -> int | None:
    """Where persistent memorisation plateaus: the first event time e >= 0 from which on every later point of the
    curve has the final level (its estimate at the largest event time) inside its simultaneous band. None where the
    curve has no post-treatment point with a band."""
    post = persistent.filter(pl.col("event_time") >= 0).sort("event_time")
    if not post.height:
        return None
    final = post["estimate"][-1]
    low, high = post["band_low"].to_numpy(), post["band_high"].to_numpy()
    inside = (low <= final) & (final <= high)  # NaN bands (no variation) are never inside
    if not inside[-1]:
        return None
    outside = np.flatnonzero(~inside)
    first = outside[-1] + 1 if len(outside) else 0
    return int(post["event_time"][int(first)])


def _persistent_at(persistent: pl.DataFrame, k: int) -> float | None:
    """Persistent memorisation k checkpoints after training: the k-th positive event time of the curve."""
    post = persistent.filter(pl.col("event_time") > 0).sort("event_time")
    return float(post["estimate"][k - 1]) if post.height >= k else None


def headline(suite_result: SuiteResult, metric: str | None = None) -> pl.DataFrame:
    """Per model, the figures `memtui compare` prints (docs/estimation.md, "Comparing models")."""
    sr = suite_result
    metric = metric or sr.metrics[0]
    if metric not in sr.metrics:
        raise MemtuiError(f"metric '{clean(metric, 60)}' was not estimated for this suite; estimate it first.")
    rows = []
    for name, params in zip(sr.names, sr.suite.parameters, strict=True):
        res = sr.results[name][metric]
        post = res.cells.filter(~pl.col("pre_treatment"))
        pt = res.pretrend
        if pt["n_cells"] and res.settings.draws and math.isfinite(pt["p_value"]):
            verdict = "ok" if pt["p_value"] >= res.settings.alpha else "pre-trends"
        else:
            verdict = "n/a"
        row = {
            "model": name,
            "parameters": params,
            "metric": metric,
            "instantaneous": _mean(res.instantaneous),
            **{f"persistent_{k}": _persistent_at(res.persistent, k) for k in HEADLINE_EVENTS},
            "plateau": plateau(res.persistent),
            "residual": _mean(res.residual),
            "overall": res.overall["estimate"],
            "overall_std_error": res.overall["std_error"],
            "overall_significant": res.overall["significant"],
            "significant_cells": int(post["significant"].sum()),
            "post_cells": post.height,
            "pretrend_p_value": pt["p_value"],
            "pretrend": verdict,
        }
        rows.append(row)
    schema = {
        "model": pl.String,
        "parameters": pl.Int64,
        "metric": pl.String,
        "instantaneous": pl.Float64,
        **{f"persistent_{k}": pl.Float64 for k in HEADLINE_EVENTS},
        "plateau": pl.Int64,
        "residual": pl.Float64,
        "overall": pl.Float64,
        "overall_std_error": pl.Float64,
        "overall_significant": pl.Boolean,
        "significant_cells": pl.Int64,
        "post_cells": pl.Int64,
        "pretrend_p_value": pl.Float64,
        "pretrend": pl.String,
    }
    return pl.DataFrame(rows, schema=schema)


def _mean(frame: pl.DataFrame) -> float | None:
    return float(frame["estimate"].mean()) if frame.height else None


@dataclass
class SeedSpread:
    """How much of a seed suite's profile is data order: per (cohort, checkpoint) cell that every seed estimates
    (post-treatment), the standard deviation of the estimates across seeds, beside the mean standard error of one
    seed's estimate. A spread well above the standard error says the profile depends on the order the data came in,
    not only on sampling noise. ``instantaneous`` restricts to c = g."""

    n_cells: int
    spread: float  # mean over cells of the between-seed standard deviation
    std_error: float  # mean over cells and seeds of the within-seed standard error
    instantaneous_spread: float
    instantaneous_cells: int


def seed_spread(suite_result: SuiteResult, metric: str | None = None) -> SeedSpread | None:
    """The between-seed spread of a seed suite's profile (None for a suite of models, or fewer than 2 panels)."""
    sr = suite_result
    metric = metric or sr.metrics[0]
    if len(sr.names) < 2 or not is_seed_suite(sr.suite.panels):
        return None
    frames = []
    for k, name in enumerate(sr.names):
        c = sr.results[name][metric].cells.filter(~pl.col("pre_treatment"))
        se = pl.when(pl.col("std_error").is_finite()).then(pl.col("std_error")).otherwise(pl.col("analytic_se"))
        frames.append(c.select("cohort", "checkpoint", "event_time", pl.col("estimate").alias(f"e{k}"),
                               se.alias(f"s{k}")))  # fmt: skip
    joined = frames[0]
    for f in frames[1:]:
        joined = joined.join(f.drop("event_time"), on=["cohort", "checkpoint"], how="inner")
    est = joined.select([f"e{k}" for k in range(len(frames))]).to_numpy()
    se = joined.select([f"s{k}" for k in range(len(frames))]).to_numpy()
    ok = np.isfinite(est).all(axis=1)
    est, se, inst = est[ok], se[ok], joined["event_time"].to_numpy()[ok] == 0
    if not len(est):
        return SeedSpread(0, math.nan, math.nan, math.nan, 0)
    sd = est.std(axis=1, ddof=1)
    return SeedSpread(
        n_cells=len(est),
        spread=float(sd.mean()),
        std_error=float(np.nanmean(se)) if np.isfinite(se).any() else math.nan,
        instantaneous_spread=float(sd[inst].mean()) if inst.any() else math.nan,
        instantaneous_cells=int(inst.sum()),
    )
