"""A model suite: several panels over the same instances (one per model), estimated together and compared.

The instances are the same in every panel, so the multiplier bootstrap draws one multiplier per instance for all of
them and forms each group's multiplier-weighted sums with one matrix product over every model's and metric's columns
(``engine.did.bootstrap_shared``). Each model's estimate is the one ``estimation.estimate.estimate`` gives its panel
alone with the same seed, and the draws of different models are *joint*: the bootstrap law of any function of several
models' profiles, such as the correlation between two of them (``correlations``), comes from the same draws.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine import did
from memtui.engine.band import Band, BandDraws
from memtui.engine.band_classic import CLASSIC
from memtui.engine.band_registry import get_band
from memtui.engine.blas import one_blas_thread
from memtui.engine.layout import build_layout
from memtui.engine.memory import check_memory
from memtui.estimation.estimate import aggregate_members, cell_masks, estimate
from memtui.estimation.results import EstimateResult, Progress
from memtui.estimation.settings import Settings
from memtui.estimation.suite_load import Suite, refuse_too_few_shared
from memtui.panel.model import NEVER, Panel

__all__ = ["SuiteResult", "estimate_suite", "joint_draws", "prepared_jobs", "threads"]

# the float32 cell draws one batch of models x metrics may hold at once; more jobs than fit run in several batches
_BATCH_BYTES = 768 << 20


@dataclass
class _Job:
    """One model x metric estimate in progress."""

    model: str
    metric: str
    panel: Panel
    settings: Settings
    lay: object = None
    est: object = None
    rows_key: bytes = b""  # which instances the estimate uses: jobs with the same key have joint draws
    parts: object = None  # what the band makes from the layout beforehand (``Band.prepare``), or None


@dataclass
class SuiteResult:
    """Every model x metric estimate of a suite: ``results[model][metric]``, each equal to ``estimate`` of that
    model's panel (``suite.panels``) alone with the same settings.

    ``draws[metric][model]`` keeps the bootstrap draws of the cells (float32, cells x B, as ``results``' cells are
    ordered) for the metrics estimated with ``keep_draws``; ``correlations`` recomputes them for the others."""

    suite: Suite
    settings: Settings
    metrics: list[str]
    results: dict[str, dict[str, EstimateResult]]
    draws: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    joint: dict[str, bool] = field(default_factory=dict)  # whether a metric's draws share multipliers per instance
    # per metric, per model: the HC1-scaled joint draws of the corrected correlation (``correlations._hc_joint_draws``)
    hc_draws: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return self.suite.names


def estimate_suite(
    suite: Suite,
    settings: Settings,
    metrics: Sequence[str] | None = None,
    progress: Progress | None = None,
    keep_draws: Sequence[str] | None = None,
) -> SuiteResult:
    """Estimate every model of the suite on every metric in ``metrics`` (default: ``settings.metric``), sharing the
    multiplier draws and the bootstrap's matrix products across models and metrics.

    ``results[model][metric]`` equals ``estimate(suite.panel(model), replace(settings, metric=metric))`` bit for bit,
    whatever the BLAS kernel or the number of cores: each model's draws come from the very matrix products a lone
    estimate makes (``did.bootstrap_shared``), and tests hold every frame, summary, note and critical value equal.
    ``keep_draws``: the metrics whose cell draws are kept for ``correlations`` (default: the first metric)."""
    settings = settings.validate()
    if settings.covariates:  # its shared draws are the difference-of-means engine's (engine.drdid is per estimate)
        raise MemtuiError("covariates are estimated one model at a time (memtui estimate), not yet in a suite.")
    refuse_too_few_shared(suite, settings)
    metrics = list(dict.fromkeys(metrics or [settings.metric]))
    keep = set(metrics[:1] if keep_draws is None else keep_draws)
    report = progress or (lambda fraction, message: None)
    for name, panel in zip(suite.names, suite.panels, strict=True):
        for metric in metrics:
            if metric not in panel.metrics:
                raise MemtuiError(
                    f"{name}: no metric '{clean(metric, 60)}' in this panel (it has: {', '.join(panel.metrics)}); "
                    "choose a metric every panel has."
                )
    results: dict[str, dict[str, EstimateResult]] = {name: {} for name in suite.names}
    out = SuiteResult(suite=suite, settings=settings, metrics=metrics, results=results)
    total = len(metrics) * len(suite.names)
    if settings.engine != "memtui" or settings.draws == 0:
        # nothing to share: the paper's pipeline runs each estimate itself, and without draws there is no bootstrap
        for k, (metric, name) in enumerate((m, n) for m in metrics for n in suite.names):
            report(k / total, f"{name}: {metric}")
            results[name][metric] = estimate(suite.panel(name), replace(settings, metric=metric))
        report(1.0, "done")
        return out

    with one_blas_thread():
        _estimate_jobs(suite, settings, metrics, keep, out, report)
    report(1.0, "done")
    return out


def _estimate_jobs(suite: Suite, settings: Settings, metrics: list[str], keep: set, out: SuiteResult, report) -> None:
    total = len(metrics) * len(suite.names)
    done = 0
    # the metrics whose draws are kept go last: the others hand their draws arrays on (``did.DrawsPool``) and the
    # kept ones take them, so one metric's arrays are ever mapped fresh, not two (first touches of fresh memory cost
    # ~5 us a page here: 0.3-0.5 s of the suite benchmark). Each metric's draws do not depend on the order
    requested = list(metrics)
    metrics = [m for m in metrics if m not in keep] + [m for m in metrics if m in keep]
    notes: dict[str, list[str]] = {}
    every = [
        [
            _Job(model=name, metric=metric, panel=panel, settings=replace(settings, metric=metric))
            for name, panel in zip(suite.names, suite.panels, strict=True)
        ]
        for metric in metrics
    ]
    report(0.0, f"{metrics[0]}: preparing")
    threads(_prepare, every[0])
    pool = did.DrawsPool()  # each metric's draws, once its frames are made, are the next one's (unless kept)
    # the next metric's layouts are prepared on one more thread while this metric's bootstrap runs: the bootstrap
    # leaves a core idle whenever it holds the GIL (its serial parts), and a layout's work is the job's alone, so
    # every estimate is what it was; memory holds one metric's layouts more (~0.15 GB at the paper's size)
    with ThreadPoolExecutor(1) as ahead:
        for k, (metric, jobs) in enumerate(zip(metrics, every, strict=True)):
            following = ahead.submit(_prepare_all, every[k + 1]) if k + 1 < len(every) else None
            before = len(out.notes)
            _estimate_metric(metric, jobs, settings, keep, out, report, done, total, pool)
            notes[metric] = out.notes[before:]
            del out.notes[before:]
            done += len(jobs)
            if following is not None:
                following.result()  # its refusal (a MemtuiError), if any, is raised here
    # back in the order asked for: each model's metrics, the notes of each metric, and which metrics' draws are joint
    for name in out.results:
        out.results[name] = {m: out.results[name][m] for m in requested}
    out.joint = {m: out.joint[m] for m in requested}
    out.draws = {m: out.draws[m] for m in requested if m in out.draws}
    out.notes += [note for m in requested for note in notes[m]]


def _prepare_all(jobs: list[_Job]) -> None:
    for job in jobs:
        _prepare(job)


def _estimate_metric(metric: str, jobs: list[_Job], settings: Settings, keep: set, out: SuiteResult, report,
                     done: int, total: int, pool: did.DrawsPool | None = None) -> None:  # fmt: skip
    """The bootstrap and the frames of one metric's prepared jobs (``_prepare``), batch after batch; the draws it
    does not keep go back to ``pool``."""
    out.joint[metric] = len({j.rows_key for j in jobs}) == 1
    if not out.joint[metric]:
        out.notes.append(
            f"{metric}: the panels have missing values on different instances, so the models' estimates use "
            "different instances and their draws are not joint: the correlations have no interval"
        )
    for batch in _batches(jobs):
        base, share = done / total, len(batch) / total
        stage = f"{metric}: bootstrap"
        cells = _shared_draws(
            batch, settings, lambda f, b=base, s=share, m=stage: report(b + 0.5 * s * f, m), pool=pool,
        )  # fmt: skip
        assembled = threads(lambda item: _assemble(*item), list(zip(batch, cells, strict=True)))
        for job, drawn, res in zip(batch, cells, assembled, strict=True):
            out.results[job.model][metric] = res
            if metric in keep:
                out.draws.setdefault(metric, {})[job.model] = drawn.boot.cells
            elif pool is not None:  # the frames are made and nothing refers to the draws any more
                pool.give([drawn.boot.cells])
            job.lay = job.est = job.parts = None
        # the batch's draws (and the band's laws) go now, not when the next batch's replace them: held
        # through the next batch's bootstrap they were a whole batch of draws on top of its own (the peak)
        del cells, assembled, drawn, res
        done += len(batch)
        report(done / total, f"{metric}: summaries")


def _prepare(job: _Job) -> None:
    """The layout and point estimates of one job (``estimate``'s first steps, with its one-line refusals)."""
    s = job.settings
    try:
        job.panel.refuse_mixed_stages()
        y = job.panel.values(s.metric)
        lay = build_layout(
            y,
            job.panel.treatment,
            job.panel.done_steps,
            never=NEVER,
            estimator=s.estimator,
            base_period=s.base_period,
            control_group=s.control_group,
        )
        if not len(lay.cell_group):
            raise MemtuiError(
                "no (cohort, checkpoint) cell can be estimated: no treated cohort falls inside the window."
            )
        if lay.scale == 0:
            raise MemtuiError(
                f"metric '{s.metric}' has the same value for every instance and completed checkpoint used, so there "
                "is nothing to estimate; choose a metric that varies."
            )
        check_memory(s.draws, lay, get_band(s.band))
    except MemtuiError as exc:
        raise MemtuiError(f"{job.model}: {exc}") from None
    job.lay = lay
    job.est = did.point_estimates(lay)
    job.rows_key = np.packbits(np.isfinite(y).all(axis=1)).tobytes()
    if s.draws > 0:
        # what the band can make from the layout alone (the calibrated band's variances and the aggregates'
        # standard errors): made here, on the thread that prepares the next metric while this one's bootstrap runs,
        # it leaves the bootstrap less to wait for
        job.parts = get_band(s.band).prepare(lay, job.est, did.se_floor(lay.scale), aggregate_members(lay)[2])


def _batches(jobs: list[_Job]) -> list[list[_Job]]:
    """Jobs that can share multipliers (same groups and cells), in runs that fit ``_BATCH_BYTES`` of draws."""
    groups: list[list[_Job]] = []
    for job in jobs:
        for group in groups:
            if did.same_cells(group[0].lay, job.lay):
                group.append(job)
                break
        else:
            groups.append([job])
    batches = []
    for group in groups:
        per_job = 4 * len(group[0].lay.cell_group) * group[0].settings.draws
        size = max(1, _BATCH_BYTES // max(per_job, 1))
        batches += [group[start : start + size] for start in range(0, len(group), size)]
    return batches


def threads(fn, items: list) -> list:
    """``fn`` over ``items`` on every core: the heavy work is numpy, which releases the GIL."""
    workers = min(len(items), os.cpu_count() or 1)
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def _shared_draws(
    batch: list[_Job], settings: Settings, progress=None, pool: did.DrawsPool | None = None, band: Band | None = None
) -> list[BandDraws]:
    """The bootstrap of every job of ``batch`` from one set of multipliers (``band``'s ``bootstraps``; default the
    settings' band), so each job's draws, and what the band reads from them, are bit for bit those ``estimate``
    makes for it alone."""
    lays, ests = [j.lay for j in batch], [j.est for j in batch]
    common = {"draws": settings.draws, "seed": settings.seed, "multiplier": settings.multiplier, "progress": progress,
              "pool": pool}  # fmt: skip
    prepared = [j.parts for j in batch] if all(j.parts is not None for j in batch) else None
    members = None if prepared else [aggregate_members(lay)[2] for lay in lays]  # made with the parts already
    return (band or get_band(settings.band)).bootstraps(
        lays, ests, [cell_masks(j.lay, j.settings) for j in batch], members,
        floors=[did.se_floor(lay.scale) for lay in lays], mapper=lambda fn, items: threads(fn, list(items)),
        prepared=prepared, **common,
    )  # fmt: skip


def _assemble(job: _Job, drawn: BandDraws) -> EstimateResult:
    """Every scope of one job's estimate: the very assembly ``memtui.estimation.estimate`` makes for a lone panel."""
    from memtui.estimation.estimate import _assemble as assemble

    return assemble(job.panel, job.settings, job.lay, job.est, drawn)


def joint_draws(sr: SuiteResult, metric: str) -> dict[str, np.ndarray]:
    """The cell draws of every model for ``metric``: kept from the estimate, else recomputed (same seed, same
    multipliers) with one shared bootstrap."""
    if metric in sr.draws and len(sr.draws[metric]) == len(sr.names):
        return sr.draws[metric]
    with one_blas_thread():
        jobs = prepared_jobs(sr, metric)
        boots = _shared_draws(jobs, jobs[0].settings, band=CLASSIC)  # the draws alone: the classic band reads no more
    sr.draws = {metric: {j.model: b.boot.cells for j, b in zip(jobs, boots, strict=True)}}  # one metric at a time
    return sr.draws[metric]


def prepared_jobs(sr: SuiteResult, metric: str) -> list[_Job]:
    """Every model's job for ``metric`` with its layout and point estimates made (``_prepare``), as the estimate
    made them: what the draws of a metric the estimate did not keep are recomputed from."""
    s = replace(sr.settings, metric=metric)
    jobs = [_Job(model=n, metric=metric, panel=p, settings=s) for n, p in zip(sr.names, sr.suite.panels, strict=True)]
    threads(_prepare, jobs)
    return jobs
