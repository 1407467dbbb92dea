"""The workbench's split by group (``estimation.subgroups.estimate_by``, `memtui estimate --by`), as plain functions
of a panel and a ``ByResult`` (testable without an app): the specs the settings dialog and ``b`` offer, what the
Profile pane's heatmap shows for each view (one group, with the joint band, or the difference of two groups), the
legend naming each group with its size, and the Summaries pane's per-group lines.

A group's cells carry the **joint** band (simultaneous over every group's post-treatment cells, ``ByResult.joint``),
so a colour on any group's heatmap is a claim that holds with the others; the per-group means use each group's own
band, as `memtui estimate --by` prints them. A difference is ``group_tests.Difference``: its own simultaneous band
over the cells both groups have.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl
from rich.style import Style
from rich.text import Text

from memtui.app.fmt import minus_signs, num, nums
from memtui.app.legend import pack, swatch
from memtui.app.summary_lines import means_lines
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.group_spec import MAX_LEVELS, resolve
from memtui.estimation.results import EstimateResult
from memtui.estimation.subgroups import ByResult
from memtui.panel.model import Panel


def by_options(panel: Panel) -> list[str]:
    """The split specs offered for ``panel``: none (""), then per covariate its levels (categorical, or numeric with
    few values) and its quartiles (numeric with more), each one that makes two groups or more on this panel."""
    offered = [""]
    for name, values in panel.covariates.items():
        values = np.asarray(values)
        candidates = [name]
        if values.dtype.kind == "f":
            distinct = len(np.unique(values[np.isfinite(values)]))
            candidates = ([name] if distinct <= MAX_LEVELS else []) + ([f"{name}:quartiles"] if distinct > 4 else [])
        for spec in candidates:
            try:
                resolve(panel, spec)
            except MemtuiError:  # one value only, or nothing known: no split to offer
                continue
            offered.append(spec)
    return offered


@dataclass(frozen=True)
class View:
    """What the Profile pane's heatmap shows of a split: group ``a`` (``b`` empty), or ``a`` minus ``b``."""

    a: str
    b: str = ""

    @property
    def label(self) -> str:
        return f"{self.a} − {self.b}" if self.b else self.a


def views(by: ByResult) -> list[View]:
    """Every group, then the differences `memtui estimate --by` tests (none without bootstrap draws)."""
    return [View(name) for name in by.names] + [View(d.a, d.b) for d in by.differences]


def view_result(by: ByResult, view: View) -> EstimateResult:
    """The profile the heatmap draws for ``view``: a group's estimate with the joint band on its post-treatment
    cells, or the difference of two groups' cells with the difference's band (no instance counts: two groups')."""
    res = by.groups[view.a]
    if not view.b:
        if not by.settings.draws:
            return res
        return dataclasses.replace(res, cells=by.joint(view.a), crit=by.joint_crit["profile"])
    diff = next(d for d in by.differences if (d.a, d.b) == (view.a, view.b))
    cells = diff.cells.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("n_treated"), pl.lit(None, dtype=pl.Float64).alias("n_control")
    )
    return dataclasses.replace(
        res,
        cells=cells,
        instantaneous=res.instantaneous.clear(),
        persistent=res.persistent.clear(),
        residual=res.residual.clear(),
        crit=float("nan"),
        cohorts=np.unique(cells["cohort"].to_numpy()),
        notes=[],
    )


def size_label(by: ByResult, name: str) -> str:
    treated, controls = by.sizes[name]
    return f"{minus_signs(clean(name, 40))} ({treated} treated, {controls} controls)"


def legend_text(by: ByResult, view: View, colours: tuple, width: int) -> Text:
    """The Profile pane's line above the heatmap: the split, what the heatmap shows, and each group's colour in the
    path plot with its size, packed into lines of ``width`` that break between groups."""
    band = "joint band" if by.settings.draws else "pointwise"
    shown = minus_signs(f"difference {clean(view.label, 90)}" if view.b else f"{clean(view.a, 40)} ({band})")
    head = Text(f"by {clean(by.spec, 40)} · heatmap: {shown} (v: next) ·", style="bold")
    items = [
        Text.assemble(("━━", Style(color=swatch(colours[i % len(colours)]))), f" {size_label(by, name)}")
        for i, name in enumerate(by.names)
    ]
    return pack(head, items, width)


def by_lines(by: ByResult, final_step: int) -> list[str]:
    """The Summaries pane's split: each group's means (its own band), the difference tests and the dose-response."""
    design = "shared never-treated controls" if by.shared_controls else "each group with its own never-treated controls"
    lines = [f"Split by {clean(by.spec, 60)}: {len(by.names)} groups, {design}."]
    if by.settings.draws:
        lines.append(
            f"  The joint {1 - by.settings.alpha:.0%} band covers every group at once (profile crit "
            f"{num(by.joint_crit['profile'], 3)}): the Profile pane colours by it; the counts below use each "
            "group's own band."
        )
    for name in by.names:
        res = by.groups[name]
        lines.append(f"  Group {size_label(by, name)}: overall {num(res.overall.estimate, signed=True)}")
        lines += [f"    {line}" for line in means_lines(res, final_step)]
    for diff in by.differences:
        o = diff.overall
        estimate, low, high = nums((o["estimate"], o["ci_low"], o["ci_high"]), signed=True)
        lines.append(
            f"  Difference {clean(diff.a, 40)} − {clean(diff.b, 40)}: overall {estimate} "
            f"[{low}, {high}], p = {num(o['p_value'], 2)}; "
            f"{clean(diff.sentence(), limit=None)}."
        )
    if not by.settings.draws:
        lines.append("  Differences between groups need bootstrap draws (settings, o).")
    if by.trend is not None:
        lines.append(f"  Dose-response: {clean(by.trend.sentence(), limit=None)}.")
    lines += [f"  ⚠ {clean(note)}" for note in by.notes]
    return lines
