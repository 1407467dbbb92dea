"""A model suite: several panels over the same instances (one per model), estimated together and compared.

The instances are the same in every panel, so the multiplier bootstrap draws one multiplier per instance for all of
them and forms each group's multiplier-weighted sums with one matrix product over every model's and metric's columns
(``engine.did.bootstrap_shared``). Each model's estimate is the one ``estimation.estimate.estimate`` gives its panel
alone with the same seed, and the draws of different models are *joint*: the bootstrap law of any function of several
models' profiles, such as the correlation between two of them (``correlations``), comes from the same draws.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from statistics import NormalDist

import numpy as np
import polars as pl

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
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER, Panel

CORRELATION_SCOPES = ("post", "profile", "instantaneous", "residual")
HEADLINE_EVENTS = (1, 5, 10)  # persistent memorisation this many checkpoints after training (headline columns)
# the float32 cell draws one batch of models x metrics may hold at once; more jobs than fit run in several batches
_BATCH_BYTES = 768 << 20


@dataclass
class Suite:
    """Panels of several models over the same instances and checkpoints, ordered by parameter count (else name).

    ``panels`` share ``ids``, ``treatment`` and ``steps`` (restricted to what every file has, in the first file's
    instance order, completed checkpoints only); ``notes`` say what was left out; ``parameters`` is each model's
    parameter count, None where its panel does not record it; ``originals`` are the panels as read, unrestricted (what
    the workbench shows one model at a time)."""

    names: list[str]
    panels: list[Panel]
    notes: list[str] = field(default_factory=list)
    parameters: list[int | None] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    originals: list[Panel] = field(default_factory=list)
    few_shared: str = ""  # which steps each panel has, where they share fewer than two (``refuse_too_few_shared``)

    def panel(self, name: str) -> Panel:
        return self.panels[self.names.index(name)]

    @property
    def metrics(self) -> list[str]:
        """The metrics every panel has, in the first panel's order."""
        return [m for m in self.panels[0].metrics if all(m in p.metrics for p in self.panels[1:])]


def _parameters(panel: Panel) -> int | None:
    """The model's parameter count where the panel records it: ``Panel.n_parameters`` (``checkpoints/parameters``,
    written by extraction) or a whole-number file attribute ``model_parameters`` / ``parameters``."""
    known = getattr(panel, "n_parameters", None)
    if isinstance(known, int | np.integer) and known > 0:
        return int(known)
    for key in ("model_parameters", "parameters"):
        text = str(panel.attrs.get(key, "")).strip().replace("_", "").replace(",", "")
        if re.fullmatch(r"\d+", text) and int(text) > 0:
            return int(text)
    return None


def short_paths(names: list[str]) -> list[str]:
    """Local models are recorded by their folder's absolute path: each such name becomes its shortest tail of folder
    names that no other model's name ends with (``/home/u/runs/exp1/checkpoints`` beside ``.../exp2/checkpoints``:
    ``exp1/checkpoints``). Hub ids (``EleutherAI/pythia-70m``) and other names stay as they are."""
    parts = [PurePosixPath(n).parts if n.startswith(("/", "~", "./", "../")) else None for n in names]
    out = list(names)
    for i, mine in enumerate(parts):
        if mine is None:
            continue
        mine = tuple(p for p in mine if p != "/")
        for k in range(1, len(mine) + 1):
            tail = "/".join(mine[-k:])
            others = [
                names[j] if parts[j] is None else "/".join(q for q in parts[j] if q != "/")
                for j in range(len(names))
                if j != i
            ]
            if not any(o == tail or o.endswith("/" + tail) for o in others):
                out[i] = tail
                break
    return out


def _model_names(panels: list[Panel], paths: list[Path]) -> list[str]:
    """The model recorded in each panel (``model`` attribute, else who scored its checkpoints); the file's stem where
    there is none or two panels record the same model (two seeds of one model, or synthetic panels)."""
    recorded = [
        clean(p.attrs.get("model", "") or ", ".join(dict.fromkeys(m for m in p.models if m)), 80) for p in panels
    ]
    names = [
        r if r and recorded.count(r) == 1 else clean(path.stem, 80) for r, path in zip(recorded, paths, strict=True)
    ]
    names = short_paths(names)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):  # the same stem in two folders: number them, never merge them
        if names.count(name) > 1:
            seen[name] = seen.get(name, 0) + 1
            names[i] = f"{name} ({seen[name]})"
    return names


def _restrict(panel: Panel, rows: np.ndarray | None, cols: np.ndarray | None) -> Panel:
    """The panel on a subset of instances (``rows``, in that order) and of checkpoints (``cols``); None keeps all."""
    if rows is None and cols is None:
        return panel
    r = slice(None) if rows is None else rows
    c = slice(None) if cols is None else cols

    def pick(values, index):
        if values is None or isinstance(values, list) and not values:
            return values
        arr = np.asarray(values, dtype=object if isinstance(values, list) else None)[index]
        return list(arr) if isinstance(values, list) else arr

    extra = {}
    for name in ("parameters", "configs"):  # per-checkpoint provenance, where this memtui's Panel has it
        if hasattr(panel, name):
            extra[name] = pick(getattr(panel, name), c)
    return replace(
        panel,
        ids=panel.ids[r],
        treatment=panel.treatment[r],
        steps=panel.steps[c],
        done=panel.done[c],
        metrics={m: y[r][:, c] for m, y in panel.metrics.items()},
        split=pick(panel.split, r),
        source_index=pick(panel.source_index, r),
        revisions=pick(panel.revisions, c),
        weight_hashes=pick(panel.weight_hashes, c),
        models=pick(panel.models, c),
        provenance={k: v if k.endswith("_names") else v[r] for k, v in panel.provenance.items()},
        covariates={k: v[r] for k, v in panel.covariates.items()},
        truth=None,  # the simulated truth is per cohort of the whole panel: not kept on a part of it
        **extra,
    )


def load_suite(paths: Sequence[str | os.PathLike]) -> Suite:
    """Read the panels of a suite and put them on the instances and completed checkpoints they share.

    Instances match by id *and* treatment step; checkpoints by step, kept where every panel has completed them.
    Where the panels overlap only partly, every panel is restricted to the intersection and a note says, per model,
    how much was left out; where they share no instance or no completed checkpoint, a one-line MemtuiError."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise MemtuiError("give at least one panel file.")
    resolved = [p.resolve() for p in paths]
    if len(set(resolved)) < len(resolved):
        dup = next(p for i, p in enumerate(paths) if resolved[i] in resolved[:i])
        raise MemtuiError(f"{dup} is given twice; give each model's panel once.")
    panels = [read_panel(p) for p in paths]
    names = _model_names(panels, paths)
    notes: list[str] = []
    seeds = is_seed_suite(panels)
    if seeds:  # one model's data orders: name each panel by its seed, keep each seed's own treatment steps
        labels = [clean(p.attrs.get("seed", ""), 40) for p in panels]
        if all(labels) and len(set(labels)) == len(labels):
            names = labels
        notes.append(
            "seed suite: the same instances under each seed's data order, each panel with its own treatment steps"
        )

    keep_ids = _shared_instances(panels, seeds, notes)
    steps, few = _shared_steps(panels, names)
    restricted = _restricted(names, panels, keep_ids, steps, notes)

    params = [_parameters(p) for p in panels]
    order = sorted(range(len(panels)), key=lambda i: (params[i] is None, params[i] or 0, names[i].casefold(), names[i]))
    if len(panels) > 1 and any(params[i] is None for i in order) and any(params[i] is not None for i in order):
        notes.append("some panels record no parameter count: those models come after the others, by name")
    return Suite(
        names=[names[i] for i in order],
        panels=[restricted[i] for i in order],
        notes=notes,
        parameters=[params[i] for i in order],
        paths=[paths[i] for i in order],
        originals=[panels[i] for i in order],
        few_shared=few,
    )


def _shared_instances(panels: list[Panel], seeds: bool, notes: list[str]) -> np.ndarray:
    """Ids of the instances every panel has with the same treatment step (any step in a seed suite), in the first
    panel's order; notes how many were left out for a different step."""
    first = panels[0]
    common = np.ones(first.n_instances, bool)
    moved = 0
    for p in panels[1:]:
        pos = _positions(first.ids, p.ids)
        found = pos >= 0
        same = np.zeros_like(found)
        same[found] = True if seeds else p.treatment[pos[found]] == first.treatment[found]
        moved += int((found & ~same & common).sum())
        common &= same
    if not common.any():
        why = f" ({moved} share an id but not the treatment step)" if moved else ""
        raise MemtuiError(
            f"the panels share no instance{why}: a suite needs panels over the same instances (ids and treatment "
            "steps), e.g. one panel extracted with several models."
        )
    keep_ids = first.ids[common]
    if moved:
        notes.append(f"{moved} instances have different treatment steps in different panels: left out")
    return keep_ids


def _shared_steps(panels: list[Panel], names: list[str]) -> tuple[np.ndarray, str]:
    """The checkpoint steps every panel has completed, and where they share fewer than the two a
    difference-in-differences needs while some panel has more, which steps each has (``Suite.few_shared``); a
    one-line MemtuiError, naming them, where they share none."""
    first = panels[0]
    steps = first.done_steps
    for p in panels[1:]:
        steps = np.intersect1d(steps, p.done_steps)
    few = ""
    if len(steps) < 2 and len(panels) > 1 and max(len(p.done_steps) for p in panels) > len(steps):
        shared = f"only one completed checkpoint, step {int(steps[0])}" if len(steps) else "no completed checkpoint"
        each = "; ".join(f"{clean(n, 40)} has {_step_list(p.done_steps)}" for n, p in zip(names, panels, strict=True))
        few = f"the panels share {shared} ({each})"
    if not len(steps):
        raise MemtuiError(
            f"{few or 'the panels share no completed checkpoint'}: a suite needs the same checkpoint steps in every "
            "panel; finish extraction or compare panels of the same run."
        )
    return steps, few


def refuse_too_few_shared(suite: Suite, settings: Settings) -> None:
    """A one-line MemtuiError where the did estimator meets panels that share one completed checkpoint while some
    has more: the estimate's own "only 1 completed checkpoint ... extract more checkpoints" would misdirect (each
    panel has plenty); say that they share one, and which steps each has."""
    if suite.few_shared and settings.estimator == "did" and len(suite.panels[0].done_steps) < 2:
        raise MemtuiError(
            f"{suite.few_shared}; difference-in-differences needs at least two shared: compare panels extracted at "
            "the same checkpoint steps, or finish their extraction."
        )


def _step_list(steps: np.ndarray, limit: int = 6) -> str:
    """``steps 0, 100, 200 (3)``, cut after ``limit``: a note stays one short line on any panel."""
    if not len(steps):
        return "no completed checkpoint"
    shown = ", ".join(str(int(s)) for s in steps[:limit])
    more = f", ... {int(steps[-1])}" if len(steps) > limit else ""
    return f"steps {shown}{more} ({len(steps)})"


def _restricted(names: list[str], panels: list[Panel], keep_ids, steps, notes: list[str]) -> list[Panel]:
    """Each panel on the shared instances and checkpoints, noting per model what was left out."""
    restricted = []
    for name, p in zip(names, panels, strict=True):
        rows = _positions(keep_ids, p.ids)
        cols = np.searchsorted(p.steps, steps)
        left_rows, left_cols = p.n_instances - len(rows), int(p.done.sum()) - len(steps)
        if left_rows or left_cols:
            notes.append(
                f"{name}: left out {left_rows} of {p.n_instances} instances and {left_cols} of {int(p.done.sum())} "
                "completed checkpoints that not every panel has"
            )
        in_order = left_rows == 0 and np.array_equal(rows, np.arange(p.n_instances))
        full_cols = len(cols) == p.n_checkpoints
        restricted.append(_restrict(p, None if in_order else rows, None if full_cols else cols))
    return restricted


def is_seed_suite(panels: Sequence[Panel]) -> bool:
    """Panels ``memtui build --seeds`` wrote together: one model's instances under several data orders (attribute
    ``seed_suite``, the same in all). Their instances match by id alone: the treatment step is the seed's."""
    marks = {str(p.attrs.get("seed_suite", "")) for p in panels}
    return len(panels) > 1 and len(marks) == 1 and bool(marks.pop())


def _positions(wanted: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index in ``ids`` of each of ``wanted`` (-1 where absent)."""
    order = np.argsort(ids, kind="stable")
    at = np.searchsorted(ids, wanted, sorter=order)
    at = np.minimum(at, len(ids) - 1)
    pos = order[at]
    return np.where(ids[pos] == wanted, pos, -1)


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
    # per metric, per model: the HC1-scaled joint draws the corrected correlation uses (``_hc_joint_draws``)
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
    _threads(_prepare, every[0])
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
        assembled = _threads(lambda item: _assemble(*item), list(zip(batch, cells, strict=True)))
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


def _threads(fn, items: list) -> list:
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
        floors=[did.se_floor(lay.scale) for lay in lays], mapper=lambda fn, items: _threads(fn, list(items)),
        prepared=prepared, **common,
    )  # fmt: skip


def _assemble(job: _Job, drawn: BandDraws) -> EstimateResult:
    """Every scope of one job's estimate: the very assembly ``memtui.estimation.estimate`` makes for a lone panel."""
    from memtui.estimation.estimate import _assemble as assemble

    return assemble(job.panel, job.settings, job.lay, job.est, drawn)


@dataclass
class Correlations:
    """Correlations between the models' profiles over their common cells, with bootstrap intervals.

    ``pearson``/``spearman`` are models x models matrices of the **raw** correlation of the estimated profiles: each
    estimate carries its estimation noise, so r is attenuated towards 0 (or, where the models' noise is correlated
    through the shared instances, pulled towards that correlation); ``*_low``/``*_high`` its 1 - alpha bootstrap
    interval: the percentiles of the same correlation over the joint bootstrap draws (each model's profile plus its
    draw, every model with the same multipliers), re-centred on the point estimate on Fisher's z scale (``_interval``
    says why). That interval is about the noisy r (it covers E[r]), not about the models' true profiles.

    ``pearson_corrected`` estimates the Pearson correlation of the models' **true** profiles over the same cells: the
    cells' covariance minus the estimation noise's covariance that the joint draws measure (``_corrected_pearson``),
    with a bootstrap interval ``pearson_corrected_low``/``_high``; ``pearson_clipped`` marks the pairs whose corrected
    value fell outside [-1, 1] and is shown at the bound. Spearman has no corrected value (only the raw one).

    NaN where there is no interval or corrected value (no draws, or models whose estimates use different instances).
    ``n_cells``: the cells correlated."""

    names: list[str]
    metric: str
    scope: str
    pearson: np.ndarray
    spearman: np.ndarray
    pearson_low: np.ndarray
    pearson_high: np.ndarray
    spearman_low: np.ndarray
    spearman_high: np.ndarray
    n_cells: int
    alpha: float = 0.05
    draws: int = 0
    notes: list[str] = field(default_factory=list)
    pearson_corrected: np.ndarray | None = None
    pearson_corrected_low: np.ndarray | None = None
    pearson_corrected_high: np.ndarray | None = None
    pearson_clipped: np.ndarray | None = None

    def __post_init__(self) -> None:
        m = len(self.names)
        for name in ("pearson_corrected", "pearson_corrected_low", "pearson_corrected_high"):
            if getattr(self, name) is None:
                setattr(self, name, np.full((m, m), np.nan))
        if self.pearson_clipped is None:
            self.pearson_clipped = np.zeros((m, m), bool)

    def frame(self) -> pl.DataFrame:
        """One row per pair of models (both orders and the diagonal) and method: ``correlation`` with ``low``/``high``
        is the raw r of the estimated profiles; ``corrected`` with ``corrected_low``/``corrected_high`` the estimated
        correlation of the true profiles (Pearson rows only; ``clipped`` where it was held inside [-1, 1])."""
        rows = []
        nan = np.full((len(self.names),) * 2, np.nan)
        none = np.zeros_like(nan, dtype=bool)
        for method in ("pearson", "spearman"):
            value, low, high = (getattr(self, f"{method}{s}") for s in ("", "_low", "_high"))
            fixed = (self.pearson_corrected, self.pearson_corrected_low, self.pearson_corrected_high,
                     self.pearson_clipped) if method == "pearson" else (nan, nan, nan, none)  # fmt: skip
            for i, a in enumerate(self.names):
                for j, b in enumerate(self.names):
                    rows.append((self.metric, self.scope, method, a, b, value[i, j], low[i, j], high[i, j],
                                 *(float(f[i, j]) for f in fixed[:3]), bool(fixed[3][i, j])))  # fmt: skip
        schema = ["metric", "scope", "method", "model_a", "model_b", "correlation", "low", "high", "corrected",
                  "corrected_low", "corrected_high", "clipped"]  # fmt: skip
        return pl.DataFrame(rows, schema=schema, orient="row").with_columns(
            pl.lit(self.n_cells, dtype=pl.Int64).alias("n_cells"),
            pl.lit(self.alpha).alias("alpha"),
            pl.lit(self.draws, dtype=pl.Int64).alias("draws"),
        )


def _scope_mask(res: EstimateResult, scope: str) -> np.ndarray:
    cells = res.cells
    pre = cells["pre_treatment"].to_numpy()
    if scope == "post":
        return ~pre
    if scope == "profile":
        return np.ones(len(pre), bool)
    if scope == "instantaneous":
        return (cells["event_time"] == 0).to_numpy()
    final = res.residual["checkpoint"][0] if res.residual.height else None
    return (cells["checkpoint"] == final).to_numpy() & ~pre


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank, as Spearman's rho needs)."""
    from scipy.stats import rankdata

    return rankdata(x, axis=-1)


def _corr_rows(z: np.ndarray) -> np.ndarray:
    """Correlation matrices of the rows of each (models x cells) slab ``z`` (draws x models x cells)."""
    z = z - z.mean(axis=-1, keepdims=True)
    norm = np.sqrt(np.einsum("dmc,dmc->dm", z, z))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = z / norm[..., None]
    return np.matmul(z, np.swapaxes(z, 1, 2))


def _point_corr(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.corrcoef(x)
    return np.atleast_2d(out)


def correlations(suite_result: SuiteResult, metric: str | None = None, scope: str = "post") -> Correlations:
    """Pearson (as the paper's Fig. 7) and Spearman correlations between the models' profiles of ``metric`` over the
    cells of ``scope`` (post-treatment cells by default; "profile" all cells, "instantaneous" c = g, "residual" the
    final checkpoint) that every model estimates (finite in all), with bootstrap intervals at 1 - alpha from the
    joint draws (``Correlations``)."""
    sr = suite_result
    metric = metric or sr.metrics[0]
    if metric not in sr.metrics:
        raise MemtuiError(f"metric '{clean(metric, 60)}' was not estimated for this suite; estimate it first.")
    if scope not in CORRELATION_SCOPES:
        raise MemtuiError(f"scope must be one of {', '.join(CORRELATION_SCOPES)}, not '{scope}'.")
    names = sr.names
    results = [sr.results[name][metric] for name in names]
    notes: list[str] = []
    keys = [r.cells.select("cohort", "checkpoint") for r in results]
    same_cells = all(k.equals(keys[0]) for k in keys[1:])
    if same_cells:
        mask = _scope_mask(results[0], scope)
        for r in results:
            mask &= np.isfinite(r.cells["estimate"].to_numpy())
        est = np.stack([r.cells["estimate"].to_numpy()[mask] for r in results])
    else:  # different cells (should not happen on a suite): correlate on the cells all have, without intervals
        frames = [
            r.cells.filter(pl.Series(_scope_mask(r, scope))).select("cohort", "checkpoint", pl.col("estimate").alias(n))
            for r, n in zip(results, names, strict=True)
        ]
        joined = frames[0]
        for f in frames[1:]:
            joined = joined.join(f, on=["cohort", "checkpoint"], how="inner")
        joined = joined.drop_nulls().filter(pl.all_horizontal(pl.col(names).is_finite()))
        est = joined.select(names).to_numpy().T
        mask = None
    n_cells = est.shape[1]
    m = len(names)
    nan = np.full((m, m), np.nan)
    if n_cells < 3:
        notes.append(f"only {n_cells} common cells in scope {scope}: no correlation")
        return Correlations(names, metric, scope, nan, nan.copy(), nan.copy(), nan.copy(), nan.copy(), nan.copy(),
                            n_cells, sr.settings.alpha, sr.settings.draws, notes)  # fmt: skip
    pearson = _point_corr(est)
    spearman = _point_corr(_ranks(est))
    bounds = [nan.copy() for _ in range(4)]
    corrected = {}
    s = sr.settings
    if s.draws and same_cells and sr.joint.get(metric, False):
        draws = _joint_draws(sr, metric)
        signs = np.array([p.sign(metric) for p in sr.suite.panels], dtype=np.float32)
        rows = np.flatnonzero(mask)
        model_draws = [draws[n] for n in names]
        with one_blas_thread():
            p_draws, s_draws = _draw_correlations(est, model_draws, rows, signs)
        hc = _hc_joint_draws(sr, metric)
        with one_blas_thread():
            true = _corrected_pearson(est, [hc[n] for n in names], rows, signs, s.alpha)
        bounds = [*_interval(pearson, p_draws, s.alpha), *_interval(spearman, s_draws, s.alpha)]
        corrected = _corrected_record(true, names, notes)
    elif s.draws:
        notes.append(
            "the models' estimates use different instances (missing values differ), so their draws are not joint: "
            "no bootstrap interval and no corrected correlation"
        )
    return Correlations(names, metric, scope, pearson, spearman, *bounds, n_cells, s.alpha, s.draws, notes,
                        **corrected)  # fmt: skip


def _corrected_record(true: dict, names: list[str], notes: list[str]) -> dict:
    """``_corrected_pearson``'s matrices for ``Correlations``, clipped to [-1, 1], with notes on what was clipped and
    on profiles that vary no more than their noise."""
    point = true["point"]
    flat = [names[i] for i in np.flatnonzero(true["no_signal"])]
    if flat:
        notes.append(
            f"{', '.join(flat)}: the profile varies no more than its estimation noise over these cells, so the "
            "correlation of its true profile cannot be estimated (no corrected value)"
        )
    clipped = np.abs(point) > 1
    upper = np.triu(clipped, 1)
    if upper.any():
        pairs = ", ".join(
            f"{names[i]}–{names[j]} {point[i, j]:.3f} [{true['low'][i, j]:.3f}, {true['high'][i, j]:.3f}]"
            for i, j in zip(*np.nonzero(upper), strict=True)
        )
        notes.append(
            f"the corrected Pearson correlation fell outside [-1, 1] for {pairs} (noise around a true correlation "
            "near ±1): shown at the bound, with its interval clipped (an interval wholly beyond the bound becomes the "
            "bound alone)"
        )
    with np.errstate(invalid="ignore"):
        value = np.clip(point, -1, 1)
        low = np.clip(np.fmin(true["low"], point), -1, 1)
        high = np.clip(np.fmax(true["high"], point), -1, 1)
    whole = np.triu((low <= -1) & (high >= 1), 1)
    if whole.any():
        pairs = ", ".join(f"{names[i]}–{names[j]}" for i, j in zip(*np.nonzero(whole), strict=True))
        notes.append(
            f"the true profiles' correlation of {pairs} is not determined by these data (interval [-1, 1]): their "
            "estimation noise, shared by the cells of a cohort or checkpoint, is as large as the profiles' own "
            "variation; only the raw correlation is informative there (docs/methods.md)"
        )
    return {"pearson_corrected": value, "pearson_corrected_low": low, "pearson_corrected_high": high,
            "pearson_clipped": clipped}  # fmt: skip


def _psd_roots(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric square root of ``matrix`` with its negative eigenvalues set to 0, and the pseudo-inverse of that
    root (0 on the null space)."""
    w, v = np.linalg.eigh(matrix)
    w = np.clip(w, 0, None)
    keep = w > w.max(initial=0) * 1e-12
    root = np.sqrt(w)
    inv = np.divide(1, root, out=np.zeros_like(root), where=keep)
    return (v * root) @ v.T, (v * inv) @ v.T


def _ratio(cov: np.ndarray) -> np.ndarray:
    """Correlation entries of (..., m, m) covariance-like matrices: NaN where a diagonal entry is not positive."""
    diag = np.diagonal(cov, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        root = np.sqrt(np.where(diag > 0, diag, np.nan))
        return cov / root[..., :, None] / root[..., None, :]


def _corrected_pearson(
    est: np.ndarray,
    draws: list[np.ndarray],
    rows: np.ndarray,
    signs: np.ndarray,
    alpha: float,
    slab: int = 64,
    shifts: tuple[int, ...] = (1, 2, 3),
) -> dict:
    """The Pearson correlation of the models' true profiles over the cells ``rows``, corrected for estimation noise
    with the joint draws, and a 1 - alpha interval (unclipped: ``_corrected_record`` clips).

    Each model's estimated profile is x = t + e (t the true profile, e its estimation noise), so the cells' covariance
    matrix S of the estimates has expectation S(t) + N, N the covariance over the cells of the noise (within a model
    on the diagonal, across models off it, the instances being shared). The multiplier draws d are copies of e (their
    law given the data is e's approximate law, jointly across models and cells), so N is estimated by the mean over
    draws of the cells' covariance of d, and A = S - N estimates S(t): the method-of-moments correction for
    measurement error (Spearman 1904; Fuller 1987, *Measurement Error Models*, ch. 1-2), with correlated errors.

    The interval is a generalised confidence interval (Weerahandi 1993, JASA 88:899-905): A's error is W = C(t, e) +
    C(e, t) + (S(e) - N), C the cells' covariance, and draw b gives a copy W_b, so C_b = A - W_b is a draw of the
    true covariance's generalised pivot; the interval is the union of the alpha/2 and 1 - alpha/2 quantiles of
    ratio(C_b) and the corrected r +- z times their standard deviation (``_pivot_interval``; [-1, 1] where too many
    C_b have a non-positive diagonal, i.e. the data allow a flat true profile). S(e) - N's copy is S(d_b) - N. C(t,
    d_b) needs the unknown t: C(x, d_b) holds it plus C(e, d_b), whose variance is spurious, so the linear term's
    draws are rescaled (per pair, the 4 entries jointly) to the covariance Var_b C(x, d_b) - E C(d', d_b)^2, the
    second term the U-statistic of pairs of independent draws (b, b + s) and of each draw's own noise covariance
    (``_spurious``). ``draws``: the HC1-scaled joint draws (``_hc_joint_draws``), so that N and the interval's
    spread are not (n - 1) / n short per group.
    Why not a bootstrap world around the profiles: with noise shared by many cells (a checkpoint's controls, a
    cohort's instances; the shipped suite's noise has ~11 effective degrees of freedom over 820 post cells) S(e)
    fluctuates as much as S(t) itself, the world's C(x, d) overstated W's spread by ~20 % and its basic interval fell
    to [-1, 1] or beyond; fixing the true variances at their estimates (a test inversion) covered 87-90 %, since
    A's diagonal is as uncertain as its off-diagonal. benchmarks/correlations.py measures the coverage."""
    m, k = est.shape
    n_draws = draws[0].shape[1]
    x = est - est.mean(axis=1, keepdims=True)
    s = x @ x.T / (k - 1)
    cross = np.empty((n_draws, m, m))  # per draw: covariance over cells of x_i with d_j
    noise = np.empty((n_draws, m, m))  # per draw: covariance over cells of d_i with d_j
    pairs = np.empty((len(shifts), n_draws, m, m))  # covariance over cells of d_b,i with d_(b+s),j
    sub = [np.ascontiguousarray(d[rows].T) for d in draws]  # B x K per model: a slab of draws is contiguous

    def centred(start: int, stop: int) -> np.ndarray:
        idx = np.arange(start, stop) % n_draws
        d = np.stack([sub[j][idx] for j in range(m)], 1).astype(np.float64)  # slab x m x K
        d *= signs[None, :, None]
        return d - d.mean(axis=-1, keepdims=True)

    def one(start: int) -> None:
        stop = min(start + slab, n_draws)
        d = centred(start, stop)
        dt = np.swapaxes(d, 1, 2)
        cross[start:stop] = np.matmul(x, dt) / (k - 1)
        noise[start:stop] = np.matmul(d, dt) / (k - 1)
        for q, shift in enumerate(shifts):
            pairs[q, start:stop] = np.matmul(d, np.swapaxes(centred(start + shift, stop + shift), 1, 2)) / (k - 1)

    _threads(one, list(range(0, n_draws, slab)))
    n = noise.mean(axis=0)
    a = s - n
    point = _ratio(a)
    low, high = np.full((m, m), np.nan), np.full((m, m), np.nan)
    for i in range(m):
        for j in range(i + 1, m):
            if not np.isfinite(point[i, j]):
                continue
            pij = [i, j]
            lin = cross[:, pij][:, :, pij].reshape(n_draws, 4)
            spurious = _spurious(pairs[:, :, pij][:, :, :, pij].reshape(-1, 4), noise[:, pij][:, :, pij])
            v_x = np.cov(lin.T)
            root_t, _ = _psd_roots(v_x - spurious)
            _, inv_root_x = _psd_roots(v_x)
            lin = (lin @ (root_t @ inv_root_x).T).reshape(n_draws, 2, 2)
            w = lin + np.swapaxes(lin, 1, 2) + noise[:, pij][:, :, pij] - n[np.ix_(pij, pij)]
            low[i, j], high[i, j] = _pivot_interval(point[i, j], a[np.ix_(pij, pij)] - w, alpha)
            low[j, i], high[j, i] = low[i, j], high[i, j]
    diag = np.diagonal(a) > 0
    np.fill_diagonal(point, np.where(diag, 1.0, np.nan))
    np.fill_diagonal(low, np.where(diag, 1.0, np.nan))
    np.fill_diagonal(high, np.where(diag, 1.0, np.nan))
    return {"point": point, "low": low, "high": high, "no_signal": ~diag}


def _pivot_interval(point: float, pivot: np.ndarray, alpha: float) -> tuple[float, float]:
    """The 1 - alpha interval of a corrected correlation from its generalised pivot's draws ``pivot`` (B x 2 x 2): the
    union of the draws' alpha/2 and 1 - alpha/2 percentiles and point +- z_(1 - alpha/2) times their standard deviation
    (the draws' correlations clipped to [-1, 1]); a draw with a non-positive diagonal (the data allow a flat true
    profile) counts at both ends of the percentiles, and more than alpha/2 of them give [-1, 1].

    Why both: the draws' spread is the corrected r's sampling spread (within a few per cent on the simulated suites),
    but in the interior their asymmetry is not its asymmetry: the percentile interval missed the truth mostly from
    above (18 of 20 misses at rho 0.8, noise 0.3) and covered 85-92 % where the symmetric one covers 94-95 %; near
    +-1 the clipped draws' standard deviation is too small and the percentiles, which hold the bound, are the ones
    that cover (docs/methods.md, "Correlations of true profiles")."""
    ok = (pivot[:, 0, 0] > 0) & (pivot[:, 1, 1] > 0)
    if np.mean(~ok) > alpha / 2:
        return -1.0, 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(pivot[:, 0, 1] / np.sqrt(np.where(ok, pivot[:, 0, 0] * pivot[:, 1, 1], 1.0)), -1, 1)
    low, high = np.quantile(np.where(ok, r, -1.0), alpha / 2), np.quantile(np.where(ok, r, 1.0), 1 - alpha / 2)
    half = NormalDist().inv_cdf(1 - alpha / 2) * float(np.std(r[ok], ddof=1))
    return min(float(low), point - half), max(float(high), point + half)


def _spurious(pairs: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The covariance (4 x 4, over b) of C(e_p, d_b,q), p, q in the pair, that the linear term's draws C(x, d_b)
    carry beside C(t, d_b): the U-statistic, without the same-instance terms.

    A draw is d = sum_i v_i psi_i (Rademacher v, psi_i instance i's influence on the cells), so C(d_p, d'_q) =
    sum_ij v_i v'_j a_ij with a_ij = C(psi_i,p, psi_j,q). Over independent draws (``pairs``: C(d_b,p, d_(b+s),q))
    E[C C] = sum_ij a_ij a_ij (F), and with the second pair's roles swapped sum_ij a_ij a_ji (G); within one draw
    (``noise``: C(d_b,p, d_b,q)) Cov = sum_(i != j) a_ij (a_ij + a_ji). So sum_(i != j) a_ij a_ij = (F + Cov - G) / 2.
    F alone (the V-statistic) adds sum_i a_ii a_ii, the fourth moments of each instance's own influence, which the
    realised C(e, d) does not have in expectation: with 20 instances a cohort it overstated the spurious part by about
    10 % and the linear term's spread came out about 6 % short (docs/methods.md, "Correlations of true profiles").
    """
    f = pairs.T @ pairs / len(pairs)
    g = f[:, [0, 2, 1, 3]]  # (p, q) x (s, r): the components of the swapped pair
    within = np.cov(noise.reshape(len(noise), 4).T)
    out = (f + within - g) / 2
    return (out + out.T) / 2


def _hc_layout(lay):
    """``lay`` with each group's rows moved away from the group's mean by sqrt(n / (n - 1)) (a group of one stays):
    the point estimates are the same, and a multiplier draw's variance is the HC1 (per-group n / (n - 1)) one."""
    n = lay.group_n.astype(float)
    factor = np.sqrt(np.divide(n, n - 1, out=np.ones_like(n), where=n > 1))
    group = np.repeat(np.arange(lay.n_groups), lay.group_n)
    return replace(lay, y=lay.means[group] + factor[group, None] * (lay.y - lay.means[group]))


def _hc_joint_draws(sr: SuiteResult, metric: str) -> dict[str, np.ndarray]:
    """The joint draws of every model for ``metric`` (same seed, same multipliers per instance as the estimate) on
    the HC1-scaled layouts (``_hc_layout``), kept for the next call. The plain draws' covariance is the plug-in one,
    (n - 1) / n of the unbiased one per group: at 20 instances a cohort that left the noise covariance N 5 % short
    (the corrected r attenuated) and the interval's spread short by as much."""
    if metric in sr.hc_draws:
        return sr.hc_draws[metric]
    s = replace(sr.settings, metric=metric)
    jobs = [_Job(model=n, metric=metric, panel=p, settings=s) for n, p in zip(sr.names, sr.suite.panels, strict=True)]
    with one_blas_thread():
        _threads(_prepare, jobs)
        lays = [_hc_layout(j.lay) for j in jobs]
        source = None
        if not all(did.same_cells(lays[0], lay) for lay in lays[1:]):
            # models that miss values on different instances (a suite split by group keeps its draws joint): the
            # multipliers keyed by instance, so each instance keeps one multiplier across the models
            from memtui.engine.multipliers import JointMultipliers

            source = [JointMultipliers.per_instance(sr.suite.panels[0].n_instances)] * len(lays)
        boots = did.bootstrap_shared(lays, [j.est for j in jobs], draws=s.draws, seed=s.seed, multiplier=s.multiplier,
                                     source=source)  # fmt: skip
    sr.hc_draws = {metric: {j.model: b.cells for j, b in zip(jobs, boots, strict=True)}}  # one metric at a time
    return sr.hc_draws[metric]


def _interval(point: np.ndarray, draws: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The (alpha/2, 1 - alpha/2) percentiles of the draws' correlations, re-centred on the point estimate on Fisher's
    z scale: tanh(atanh(r) + q(atanh(r*) - median atanh(r*))).

    Why re-centred: a draw adds bootstrap noise to profiles that already carry their estimation noise, so the draws'
    correlations sit below the point estimate (attenuation), and their plain percentiles can exclude it (measured:
    r = 0.923 with plain percentiles [0.71, 0.90]). Their spread is the sampling spread of r; their location is not.
    On the z scale the interval stays inside (-1, 1) and is not symmetric where r is near 1."""
    edge = 1 - 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.arctanh(np.clip(draws, -edge, edge))
        spread = z - np.nanmedian(z, axis=0)
        q = np.nanquantile(spread, [alpha / 2, 1 - alpha / 2], axis=0)
        centre = np.arctanh(np.clip(point, -edge, edge))
        # a point at +-1 exactly (identical ranks) was moved inside for atanh: hold it inside its interval
        low, high = np.fmin(np.tanh(centre + q[0]), point), np.fmax(np.tanh(centre + q[1]), point)
    np.fill_diagonal(low, 1.0)
    np.fill_diagonal(high, 1.0)
    return low, high


def _draw_correlations(
    est: np.ndarray, draws: list[np.ndarray], rows: np.ndarray, signs: np.ndarray, slab: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Per bootstrap draw, Pearson and Spearman matrices (draws x m x m) of the models' profiles plus their draws."""
    n_draws = draws[0].shape[1]
    m = len(draws)
    sub = [d[rows] for d in draws]  # (cells, B) per model, only the cells correlated
    pearson = np.empty((n_draws, m, m))
    spearman = np.empty((n_draws, m, m))

    def one(start: int) -> None:
        stop = min(start + slab, n_draws)
        z = np.stack([est[k][None, :] + signs[k] * sub[k][:, start:stop].T.astype(np.float64) for k in range(m)], 1)
        pearson[start:stop] = _corr_rows(z)
        order = np.argsort(z, axis=-1)  # continuous draws: ties have probability ~0, so plain ranks
        ranks = np.empty_like(order, dtype=np.float64)
        np.put_along_axis(ranks, order, np.arange(z.shape[-1], dtype=np.float64), axis=-1)
        spearman[start:stop] = _corr_rows(ranks)

    _threads(one, list(range(0, n_draws, slab)))
    return pearson, spearman


def _joint_draws(sr: SuiteResult, metric: str) -> dict[str, np.ndarray]:
    """The cell draws of every model for ``metric``: kept from the estimate, else recomputed (same seed, same
    multipliers) with one shared bootstrap."""
    if metric in sr.draws and len(sr.draws[metric]) == len(sr.names):
        return sr.draws[metric]
    s = replace(sr.settings, metric=metric)
    jobs = [_Job(model=n, metric=metric, panel=p, settings=s) for n, p in zip(sr.names, sr.suite.panels, strict=True)]
    with one_blas_thread():
        _threads(_prepare, jobs)
        boots = _shared_draws(jobs, s, band=CLASSIC)  # the draws alone: the classic band reads nothing else
    sr.draws = {metric: {j.model: b.boot.cells for j, b in zip(jobs, boots, strict=True)}}  # one metric at a time
    return sr.draws[metric]


# --- headline figures -------------------------------------------------------------------------------------------


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


__all__ = [
    "CORRELATION_SCOPES",
    "Correlations",
    "Suite",
    "SuiteResult",
    "correlations",
    "estimate_suite",
    "headline",
    "load_suite",
    "plateau",
]


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
