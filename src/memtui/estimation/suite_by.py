"""A model suite compared group by group (``memtui compare A.h5 B.h5 ... --by SPEC``): the suite comparison of every
group of instances (``estimation.headline``: headline figures per model; ``estimation.correlations``: correlations
of the models' profiles) and, per model, the difference between groups (``estimation.subgroups``: one set of
multiplier draws for every group).

The panels of a suite share their instances, so an instance belongs to the same group in every panel: the groups are
read from the covariate of the first panel (in the suite's order) that has it; the other panels may lack it, and one
that has it with other values is refused in one line. Each model's groups are estimated by ``estimate_by``, whose
multipliers are keyed by the panel's instance (``engine.multipliers``); the suite's panels list their instances in
the same order, so with one seed every model and every group sees the same multiplier for the same instance in the
same draw. One set of draws
therefore serves everything: the bands of each model in each group, the correlation of the models' profiles within
a group (joint across models, as ``estimate_suite``'s draws are), and the difference between groups of a model.

Each group's figures are those of the suite comparison run on the group's subset panels (``estimate_suite`` of
``subset_panel``): the point estimates bit for bit (both equal a lone ``estimate`` of the subset); the bands and the
corrected correlations within Monte Carlo error, as their draws come from the whole suite's multipliers rather than
the subset's own. The models' draws are joint even where their panels miss values on different instances (the
multipliers follow the instance, not the row), so every group's correlations have intervals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.correlations import Correlations, correlations
from memtui.estimation.group_spec import resolve
from memtui.estimation.headline import headline
from memtui.estimation.results import Progress
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import ByResult, estimate_by, subset_panel
from memtui.estimation.suite import SuiteResult
from memtui.estimation.suite_load import Suite, refuse_too_few_shared
from memtui.panel.model import Panel

__all__ = ["SuiteByResult", "compare_by", "group_rows", "suite_panels_by"]


@dataclass
class SuiteByResult:
    """The suite comparison of every group (``suites[group]``, a ``SuiteResult`` on the group's subset panels, and
    ``correlations[group]`` over ``scope``) and every model's subgroup estimate (``by_model[model]``, a ``ByResult``:
    its differences between groups and, for ordered groups, the dose-response trend). ``sizes[model][group]``:
    (treated, never-treated) instances of the group in that model's panel."""

    settings: Settings
    spec: str
    covariate: str
    groups: list[str]
    models: list[str]
    shared_controls: bool
    scope: str
    suites: dict[str, SuiteResult]
    correlations: dict[str, Correlations]
    by_model: dict[str, ByResult]
    sizes: dict[str, dict[str, tuple[int, int]]]
    notes: list[str] = field(default_factory=list)

    @property
    def metric(self) -> str:
        return self.settings.metric

    def group_size(self, group: str) -> tuple[int, int]:
        """The group's (treated, never-treated) instances in the first model's panel (every model's, but in a seed
        suite, where each seed trains its own instances)."""
        return self.sizes[self.models[0]][group]

    def headline(self) -> pl.DataFrame:
        """``headline.headline`` of every group, stacked: a row per group and model, the group and its size first."""
        frames = []
        for group, sr in self.suites.items():
            sizes = [self.sizes[m][group] for m in self.models]
            frames.append(
                headline(sr, self.metric).select(
                    pl.lit(group).alias("group"),
                    pl.Series("treated", [t for t, _ in sizes], dtype=pl.Int64),
                    pl.Series("controls", [c for _, c in sizes], dtype=pl.Int64),
                    pl.all(),
                )
            )
        return pl.concat(frames)

    def correlation_frame(self) -> pl.DataFrame:
        """``Correlations.frame`` of every group, stacked, the group first."""
        return pl.concat([c.frame().select(pl.lit(g).alias("group"), pl.all()) for g, c in self.correlations.items()])

    def difference_frame(self) -> pl.DataFrame:
        """Per model and difference of two groups (``ByResult.differences``): the overall difference (event_time
        null; band = its interval, p-value) and one row per event time c - g >= 0 (its simultaneous band)."""
        rows = []
        for model, by in self.by_model.items():
            for d in by.differences:
                o = d.overall
                rows.append((model, d.a, d.b, None, o["estimate"], o["std_error"], o["ci_low"], o["ci_high"],
                             bool(o["ci_low"] > 0 or o["ci_high"] < 0), o["p_value"]))  # fmt: skip
                for r in d.persistent.iter_rows(named=True):
                    rows.append((model, d.a, d.b, r["event_time"], r["estimate"], r["std_error"], r["band_low"],
                                 r["band_high"], bool(r["significant"]), None))  # fmt: skip
        schema = {"model": pl.String, "group_a": pl.String, "group_b": pl.String, "event_time": pl.Int64,
                  "estimate": pl.Float64, "std_error": pl.Float64, "low": pl.Float64, "high": pl.Float64,
                  "significant": pl.Boolean, "p_value": pl.Float64}  # fmt: skip
        return pl.DataFrame(rows, schema=schema, orient="row").with_columns(pl.lit(self.metric).alias("metric"))


def suite_panels_by(suite: Suite, spec: str, shared_controls: bool = False) -> tuple[list[Panel], str]:
    """The suite's panels, each carrying the values of the covariate ``spec`` groups by as the first panel (in the
    suite's order) that has it records them, and that covariate's name; a one-line MemtuiError where another panel
    has other values of it, or where the groups differ between panels (bins cut among each seed's treated)."""
    lead = re.match(r"\s*([A-Za-z_][\w.-]*)", spec)
    name = lead.group(1) if lead else ""
    source = next((k for k, p in enumerate(suite.panels) if name in p.covariates), 0)
    name = resolve(suite.panels[source], spec).covariate  # the spec's one-line refusals, on a panel that has it
    values = np.asarray(suite.panels[source].covariates[name])
    panels = []
    for model, panel in zip(suite.names, suite.panels, strict=True):
        theirs = panel.covariates.get(name)
        if theirs is not None and not _same_values(values, np.asarray(theirs)):
            differ = int(np.sum(_differs(values, np.asarray(theirs))))
            raise MemtuiError(
                f"the panels disagree on covariate '{clean(name, 40)}' ({clean(suite.names[source], 40)} and "
                f"{clean(model, 40)} differ at {differ} instances): write the same covariate to every panel, or to "
                "one only."
            )
        panels.append(panel if theirs is not None else replace(panel, covariates={**panel.covariates, name: values}))
    if shared_controls:  # equal-count bins are cut among the treated: one cut for all unless they differ per panel
        labels = [resolve(p, spec, among=~p.never_treated).labels for p in panels]
        if any(not np.array_equal(labels[0], lab) for lab in labels[1:]):
            raise MemtuiError(
                f"--by '{clean(spec, 60)}' makes different groups in different panels (its bins are cut among each "
                "panel's own treated instances): give the cuts (NAME:bins=a,b) or leave out --shared-controls."
            )
    return panels, name


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and not _differs(a, b).any()


def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape != b.shape:
        return np.ones(max(len(a), len(b)), bool)
    if a.dtype.kind in "iuf" and b.dtype.kind in "iuf":
        x, y = a.astype(np.float64), b.astype(np.float64)
        return ~((x == y) | (np.isnan(x) & np.isnan(y)))
    return np.array([str(u) != str(v) for u, v in zip(a, b, strict=True)], bool)


def compare_by(
    suite: Suite,
    settings: Settings,
    spec: str,
    *,
    shared_controls: bool = False,
    scope: str = "post",
    progress: Progress | None = None,
) -> SuiteByResult:
    """The suite comparison of every group of ``spec`` and each model's differences between groups, from one set of
    draws (module docstring). ``settings.metric`` is the metric compared; ``scope`` the cells correlated."""
    if len(suite.names) < 2:
        raise MemtuiError("a comparison by group needs several models' panels (one panel: memtui estimate --by).")
    if settings.covariates:  # as estimate_suite: a suite's shared draws are the difference-of-means engine's
        raise MemtuiError("covariates are estimated one model at a time (memtui estimate), not yet in a suite.")
    settings = settings.validate()
    refuse_too_few_shared(suite, settings)
    panels, covariate = suite_panels_by(suite, spec, shared_controls)
    report = progress or (lambda fraction, message: None)
    by_model: dict[str, ByResult] = {}
    m = len(suite.names)
    for k, (model, panel) in enumerate(zip(suite.names, panels, strict=True)):
        if settings.metric not in panel.metrics:
            raise MemtuiError(f"{model}: no metric '{clean(settings.metric, 60)}' in this panel; choose a metric every "
                              "panel has.")  # fmt: skip

        def part(fraction: float, stage: str, k=k, model=model) -> None:
            report((k + fraction) / m, f"{model}: {stage}")

        try:
            by_model[model] = estimate_by(panel, settings, spec, shared_controls=shared_controls, progress=part)
        except MemtuiError as exc:
            raise MemtuiError(f"{model}: {exc}") from None
    report(1.0, "correlations")
    return _assembled(suite, panels, settings, spec, covariate, shared_controls, scope, by_model)


def _assembled(suite, panels, settings, spec, covariate, shared, scope, by_model: dict[str, ByResult]) -> SuiteByResult:
    """Per group, the ``SuiteResult`` of the models' group estimates and their draws, and its correlations."""
    first = by_model[suite.names[0]]
    groups = first.names
    rows = [group_rows(p, spec, shared) for p in panels]
    suites, corrs = {}, {}
    for group in groups:
        group_suite = Suite(
            names=list(suite.names),
            panels=[subset_panel(p, r[group]) for p, r in zip(panels, rows, strict=True)],
            notes=[],
            parameters=list(suite.parameters),
            paths=list(suite.paths),
        )
        sr = SuiteResult(
            suite=group_suite,
            settings=first.settings,
            metrics=[settings.metric],
            results={n: {settings.metric: by_model[n].groups[group]} for n in suite.names},
            joint={settings.metric: True},  # multipliers keyed by instance: joint whatever rows each model drops
        )
        if settings.draws:
            sr.draws = {settings.metric: {n: by_model[n]._cells[group].boot.cells for n in suite.names}}
        suites[group] = sr
        corrs[group] = correlations(sr, settings.metric, scope=scope)
    sizes = {n: dict(by.sizes) for n, by in by_model.items()}
    notes = list(suite.notes) + list(first.notes)
    if any(s != sizes[suite.names[0]] for s in sizes.values()):
        notes.append(f"the groups' sizes differ between panels (each trains its own instances); the legend gives "
                     f"{clean(suite.names[0], 40)}'s")  # fmt: skip
    return SuiteByResult(
        settings=first.settings,
        spec=first.spec,
        covariate=covariate,
        groups=groups,
        models=list(suite.names),
        shared_controls=shared,
        scope=scope,
        suites=suites,
        correlations=corrs,
        by_model=by_model,
        sizes=sizes,
        notes=notes,
    )


def group_rows(panel: Panel, spec: str, shared_controls: bool = False) -> dict[str, np.ndarray]:
    """Per group of ``spec``, the panel rows ``estimate_by`` estimates it on: the group's instances, or (shared
    controls) its treated instances and every never-treated control."""
    treated = ~panel.never_treated
    groups = resolve(panel, spec, among=treated if shared_controls else None)
    rows = {}
    for g, name in enumerate(groups.names):
        mine = groups.labels == g
        rows[name] = np.flatnonzero((mine & treated) | panel.never_treated if shared_controls else mine)
    return rows
