"""The Compare pane split by group (``estimation.suite_by.compare_by``), as plain functions of its result (testable
without an app): the legend naming each group with its size and marking the one the plots and grids show, each
group's per-model summaries, and per model the difference between groups (the draws every group shares)."""

from __future__ import annotations

from rich.text import Text

from memtui.app.fmt import minus_signs, num, nums
from memtui.app.legend import pack
from memtui.core.text import clean


def group_label(split, group: str) -> str:
    treated, controls = split.group_size(group)
    return f"{minus_signs(clean(group, 40))} ({treated} treated, {controls} controls)"


def group_legend(split, shown: int, width: int) -> Text:
    """The line above the pane: the split, and each group with its size, the one shown in bold (v / V: next)."""
    head = Text(f"by {clean(split.spec, 40)} · plots and grids: group {shown + 1} (v: next) ·", style="bold")
    items = [
        Text(f"{i + 1} {group_label(split, g)}", style="bold reverse" if i == shown else "")
        for i, g in enumerate(split.groups)
    ]
    return pack(head, items, width)


def split_lines(split) -> list[str]:
    """Per group, each model's mean instantaneous memorisation and overall estimate; then per model the difference
    between groups (overall, its interval and p-value; the count of event times where its band excludes 0)."""
    design = "shared never-treated controls" if split.shared_controls else "each group with its own controls"
    lines = [f"{len(split.models)} models by {clean(split.spec, 60)}: {len(split.groups)} groups, {design}; one set of "
             "draws for every model and group."]  # fmt: skip
    for i, group in enumerate(split.groups):
        lines.append(f"Group {i + 1} {group_label(split, group)}:")
        sr = split.suites[group]
        for k, model in enumerate(split.models):
            res = sr.results[model][split.metric]
            inst = res.instantaneous["estimate"].mean() if res.instantaneous.height else float("nan")
            lines.append(f"  {k + 1} {clean(model, 40)}: mean instantaneous {num(inst, signed=True)}, overall "
                         f"{num(res.overall['estimate'], signed=True)}")  # fmt: skip
    if not split.settings.draws:
        lines.append("Differences between groups need bootstrap draws (settings, o).")
    for model, by in split.by_model.items():
        for d in by.differences:
            o = d.overall
            above, below, n = d.count()
            estimate, low, high = nums((o["estimate"], o["ci_low"], o["ci_high"]), signed=True)
            lines.append(
                f"{clean(model, 40)}: {clean(d.a, 40)} − {clean(d.b, 40)} overall {estimate} "
                f"[{low}, {high}], p = {num(o['p_value'], 2)}; "
                f"above at {above}, below at {below} of {n} event times c − g > 0"
            )
        if by.trend is not None:
            lines.append(f"{clean(model, 40)}: dose-response {clean(by.trend.sentence(), limit=None)}")
    return [minus_signs(line) for line in lines]  # group names and sentences from below: one minus sign
