"""`memtui compare A.h5 B.h5 ... --by SPEC [--shared-controls]`: the suite comparison group by group
(``estimation.suite_by``), and per model the difference between groups.

Files ``-o OUT.csv`` writes (docs/estimation.md, "Comparing models"), each row naming its group:
  OUT.csv, the headline table (one row per group and model: group, treated, controls, then ``headline.headline``'s
  columns); OUT-correlations.csv, the correlation matrices in long form (group first); OUT-differences.csv, per model
  the differences between groups (overall and per event time c - g >= 0, each with its band)."""

from __future__ import annotations

from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.text import clean


def run_by(args, out: Path | None, settings_of, companion, write_together, suite_lines) -> int:
    """``compare``'s run with ``--by``: the helpers are compare's (settings, companion files, writing them together,
    the lines of one suite comparison), passed in so that this module imports nothing of compare at start-up."""
    _refuse(args)
    from memtui.cli.options import progress_bar
    from memtui.estimation.suite_by import compare_by
    from memtui.estimation.suite_load import load_suite

    suite = load_suite(args.panels)
    settings = settings_of(args, suite.panels[0])
    res = compare_by(
        suite, settings, args.by, shared_controls=args.shared_controls, scope=args.scope, progress=progress_bar()
    )
    for line in by_lines(res, suite_lines):
        print(line)
    if out is not None:
        frames = {out: res.headline(), companion(out, "correlations"): res.correlation_frame()}
        frames[companion(out, "differences")] = res.difference_frame()
        write_together(frames)
        print(f"wrote {clean(out)} ({len(res.groups)} groups x {len(res.models)} models), "
              f"{clean(companion(out, 'correlations'))} and {clean(companion(out, 'differences'))}")  # fmt: skip
    return 0


def _refuse(args) -> None:
    if args.reference is not None:
        raise MemtuiError("--by splits a suite of models by group; --reference compares one panel with the paper.")
    if getattr(args, "pooled", False):
        raise MemtuiError("--by and --pooled do not go together yet; give one of them.")
    if len(args.panels) < 2:
        raise MemtuiError("--by with one panel: memtui estimate PANEL --by SPEC gives its groups' profiles.")


def by_lines(res, suite_lines) -> list[str]:
    """The comparison of each group (as ``compare`` prints a suite's, under a line naming the group and its size),
    then per model the differences between groups and the dose-response."""
    design = (
        "shared never-treated controls" if res.shared_controls else "each group with its own never-treated controls"
    )
    from memtui.estimation.headline import headline

    lines = [f"{len(res.models)} models by {clean(res.spec, 60)}: {len(res.groups)} groups, {design}; one set of draws "
             "for every model and group"]  # fmt: skip
    for group in res.groups:
        treated, controls = res.group_size(group)
        lines += ["", f"=== group {clean(group, 60)}: {treated} treated, {controls} never-treated instances ==="]
        sr = res.suites[group]
        lines += suite_lines(sr, headline(sr, res.metric), res.correlations[group])
    lines += ["", "=== differences between groups, per model (draws shared by the groups) ==="]
    if not res.settings.draws:
        lines.append("differences between groups need bootstrap draws; use -B 1000.")
    for model, by in res.by_model.items():
        for diff in by.differences:
            o = diff.overall
            lines.append(
                f"{clean(model, 40)}: {clean(diff.a, 40)} - {clean(diff.b, 40)}: overall {o['estimate']:.4g} "
                f"[{_num(o['ci_low'])}, {_num(o['ci_high'])}], p = {_num(o['p_value'], '.3g')}; "
                f"{clean(diff.sentence(), None)}"
            )
        if by.trend is not None:
            lines.append(f"{clean(model, 40)}: dose-response {clean(by.trend.sentence(), limit=None)}")
    lines += [f"note   {clean(note, limit=None)}" for note in res.notes]
    return lines


def _num(value: float, spec: str = ".4g") -> str:
    """A number, or "n/a" where there is none (a difference with a group that has no variance has no band)."""
    return format(value, spec) if value == value and abs(value) != float("inf") else "n/a"
