"""The three estimators of one metric side by side, and the ease term (``memtui compare`` on one panel, the
workbench's estimators block): extractable memorisation less its DiD counterpart, per cell, with its own band."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from memtui.engine import did
from memtui.engine.band_registry import get_band
from memtui.engine.layout import build_layout
from memtui.estimation.estimate import ALL_ESTIMATORS, estimate
from memtui.estimation.results import EstimateResult, Progress
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel


@dataclass
class Comparison:
    """The three estimators of one metric side by side (``memtui compare``, the workbench): ``results`` by estimator,
    and ``cells``, one row per (cohort, checkpoint) of the extractable estimator (every cohort and checkpoint), with
    each estimator's ``{name}_estimate``, ``_band_low``, ``_band_high``, ``_significant`` (null where that estimator
    has no cell), and the **ease** = extractable − DiD per cell: the part of the naive "extractable memorisation"
    that is not memorisation (the cohort's level before training plus the controls' change), with its own
    ``ease_std_error`` (and ``ease_analytic_se``), simultaneous band (``ease_band_low``/``_high``; post-treatment
    cells are one family, placebo cells another, or all one with ``family="all"``; under ``settings.band``: the
    calibrated band studentises by the HC1 standard error, the classic one by the IQR bootstrap one) and
    ``ease_significant``; ``band``: the band of the estimators and of the ease (``Band.linear_band``)."""

    settings: Settings
    results: dict[str, EstimateResult]
    cells: pl.DataFrame
    ease_crit: float
    notes: list[str] = field(default_factory=list)


def compare(
    panel: Panel,
    settings: Settings,
    progress: Progress | None = None,
    estimate_fn: Callable[[Panel, Settings, Progress | None], EstimateResult] | None = None,
) -> Comparison:
    """Every estimator of ``settings.metric`` with the other settings as given, and the ease of each DiD cell.

    ``estimate_fn`` computes each estimator's result (default ``estimate``); the workbench passes the cached one, so
    the estimate it already shows is not computed twice."""
    from dataclasses import replace

    estimate_fn = estimate_fn or estimate

    settings = replace(settings, engine="memtui").validate()
    report = progress or (lambda fraction, message: None)
    results = {}
    for i, name in enumerate(ALL_ESTIMATORS):
        results[name] = estimate_fn(
            panel,
            replace(settings, estimator=name),
            lambda f, msg, i=i, name=name: report((i + 0.9 * f) / (len(ALL_ESTIMATORS) + 1), f"{name}: {msg}"),
        )
    report(len(ALL_ESTIMATORS) / (len(ALL_ESTIMATORS) + 1), "ease")
    ease, crit, pre = _ease(panel, settings)
    frame = _joined(results, ease)
    post = ~pre
    notes = list(dict.fromkeys(n for r in results.values() for n in r.notes))
    report(1.0, "done")
    return Comparison(
        settings=settings,
        results=results,
        cells=frame.with_columns(pl.lit(settings.band).alias("band")),
        ease_crit=float(crit[post][0]) if post.any() else float("nan"),
        notes=notes,
    )


def _ease(panel: Panel, settings: Settings) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
    """The ease of each DiD cell (extractable at c less its DiD counterpart) with its band (``settings.band``): the
    cells' frame, critical values and which cells are pre-treatment."""
    y, steps = panel.values(settings.metric), panel.done_steps
    kw = {"never": NEVER, "base_period": settings.base_period, "control_group": settings.control_group}
    lay = build_layout(y, panel.treatment, steps, estimator="extractable", **kw)
    ref = build_layout(y, panel.treatment, steps, estimator="did", **kw)
    cells, cols, coef, point = did.ease_terms(lay, ref)
    n = len(ref.cell_group)
    sign = panel.sign(settings.metric)
    floor = did.se_floor(lay.scale)
    pre = ref.cell_pre
    families = [np.ones(n, bool)] if settings.family == "all" else [~pre, pre]
    # --cluster: one multiplier per cluster, as the estimators' bands (the analytic column stays instance-level)
    source = None
    if settings.cluster and settings.draws:
        from memtui.estimation.clusters import cluster_source

        source = cluster_source(panel, settings.cluster)
    ase, se, crit = get_band(settings.band).linear_band(
        lay, cells, cols, coef, n, families, draws=settings.draws, seed=settings.seed, floor=floor,
        multiplier=settings.multiplier, alpha=settings.alpha, source=source,
    )  # fmt: skip
    tau = sign * point
    ease = pl.DataFrame(
        {
            "cohort": pl.Series(steps[ref.group_index[ref.cell_group]], dtype=pl.Int64),
            "checkpoint": pl.Series(steps[ref.cell_t], dtype=pl.Int64),
            "ease_estimate": tau,
            "ease_std_error": se,
            "ease_analytic_se": ase,
            "ease_band_low": tau - crit * se,
            "ease_band_high": tau + crit * se,
            "ease_significant": np.isfinite(crit * se) & (np.abs(tau) > crit * se),
        }
    )
    return ease, crit, pre


def _joined(results: dict[str, EstimateResult], ease: pl.DataFrame) -> pl.DataFrame:
    """One row per cell: every estimator's estimate, band and significance, then the ease's columns."""
    key = ["cohort", "checkpoint"]
    frame = results["extractable"].cells.select(*key, "event_time", "pre_treatment")
    for name, res in results.items():
        part = res.cells.select(
            *key, *(pl.col(c).alias(f"{name}_{c}") for c in ("estimate", "band_low", "band_high", "significant"))
        )
        frame = frame.join(part, on=key, how="left")
    frame = frame.join(ease, on=key, how="left").sort(key)
    return frame
