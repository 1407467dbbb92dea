"""`memtui instances`: the instances of a cell, a cohort, a subgroup or the whole panel, ranked by their individual
memorisation score (each instance's own DiD contrast), with their decoded text."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from memtui.cli.options import add_panel_args, add_settings_args, panel_path
from memtui.core.errors import MemtuiError
from memtui.core.text import clean

SUMMARY = "rank instances by their own memorisation score (one instance's DiD contrast), with their text"
DESCRIPTION = (
    "An instance's score is its own change across its treatment (Y_i,c - Y_i,g-1) minus the never-trained instances' "
    "mean change over the same checkpoints, signed so that higher is more memorised: the cell's DiD contrast for one "
    "instance (their mean over a cohort is the cell's estimate, never-trained controls, no covariates). p_ctrl ranks "
    "it among the never-trained instances over the same checkpoints: descriptive, not a population estimate."
)
DEFAULT_TOP = 20


def _cell(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        g, c = (int(p.strip()) for p in parts)
    except ValueError:
        why = f"'{clean(text, 40)}' is not COHORT,CHECKPOINT (two steps, e.g. 64,128)"
        raise argparse.ArgumentTypeError(why) from None
    return g, c


def _step(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{clean(text, 40)}' is not a checkpoint step (a whole number)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{value}' is not a checkpoint step (steps are 0 or more)")
    return value


def _top(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{clean(text, 40)}' is not a count (0: every instance)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--top {value}: give a count of 1 or more, or 0 for every instance")
    return value


def add_arguments(p) -> None:
    add_panel_args(p)
    which = p.add_argument_group("which instances (default: every trained one, at the last completed checkpoint)")
    pick = which.add_mutually_exclusive_group()
    pick.add_argument("--cell", type=_cell, metavar="G,C", help="the cohort first trained on at step G, at step C")
    pick.add_argument("--cohort", type=_step, metavar="G", help="the cohort first trained on at step G")
    which.add_argument(
        "--where",
        metavar="NAME>=VALUE",
        default="",
        help="only instances where a covariate comparison holds (>=, <=, >, <, ==, !=; == or != for a categorical one)",
    )
    split = p.add_argument_group("by group (the split of `memtui estimate --by`)")
    split.add_argument(
        "--by",
        metavar="SPEC",
        help="split into groups, as estimate --by: NAME (a covariate's levels), NAME>=VALUE (a comparison), "
        "NAME:quartiles (or :deciles, :K, :bins=a,b,c); each row shows its group, each group's instances are scored "
        "against the group's own never-trained instances (so a cohort's mean score is the group's tau)",
    )
    split.add_argument(
        "--group",
        metavar="NAME",
        help="only this group of --by, named as the listing and estimate --by name it (kind=prose, x<0.5, "
        "'not x>=3', 'x in [1, 2)')",
    )
    split.add_argument(
        "--shared-controls",
        action="store_true",
        help="with --by: score every group against all never-trained instances (doses: controls have none)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--top", type=_top, default=DEFAULT_TOP, help="how many, best first (0: all) [default: 20]")
    out.add_argument("--json", action="store_true", help="print JSON (with token ids) instead of the listing")
    out.add_argument("-o", "--output", type=Path, help="also write the rows to this CSV file")
    add_settings_args(p, "instances")


def run(args) -> int:
    from memtui.estimation.instances import Selection, instance_scores
    from memtui.extract.tokenizer import decoder_for
    from memtui.panel.hdf5 import read_panel
    from memtui.report import instances as report

    if args.cell is not None and args.final_step is not None:
        raise MemtuiError("--cell names its checkpoint; --final-step goes with --cohort or the whole panel.")
    _check_split(args)
    panel = read_panel(panel_path(args))
    _check_output(args.output, panel.path)
    metric = args.metric if args.metric is not None else panel.default_metric
    split = {
        "where": args.where,
        "by": args.by or "",
        "group": args.group or "",
        "shared_controls": args.shared_controls,
    }
    if args.cell is not None:
        selection = Selection(cohort=args.cell[0], checkpoint=args.cell[1], **split)
    else:
        selection = Selection(cohort=args.cohort, checkpoint=_final(panel, args.final_step), **split)
    scores = instance_scores(panel, metric, selection)
    shown = scores.top(args.top) if args.top else scores
    decoder = decoder_for(panel) if panel.has_tokens else None
    found = report.read_rows(panel, shown, decoder)
    if args.output is not None:
        from memtui.report.export import export_csv

        export_csv(report.frame(found, scores), args.output)
    if args.json:
        json.dump(report.as_json(found, scores, decoder), sys.stdout, indent=1, allow_nan=False)
        print()
        return 0
    _print(panel, scores, found, decoder)
    if args.output is not None:
        print(f"wrote {len(found)} instances to {clean(args.output)}")
    return 0


def _check_split(args) -> None:
    """``--by`` and ``--group`` given empty, and ``--group`` or ``--shared-controls`` without ``--by``: refused, never
    read as "no split"."""
    empty = {"--by": (args.by, "a spec such as kind or x:quartiles"), "--group": (args.group, "a group's name")}
    for option, (value, what) in empty.items():
        if value is not None and not value.strip():
            raise MemtuiError(f"{option} is empty; give {what}.")
    for given, option in ((args.group, "--group NAME"), (args.shared_controls, "--shared-controls")):
        if given and not args.by:
            raise MemtuiError(f"{option} goes with --by SPEC (the split into groups); add one, e.g. --by kind.")


def _check_output(output: Path | None, panel: Path) -> None:
    """``-o`` must not name the panel itself (the CSV would replace it) nor any HDF5 file (another panel)."""
    if output is None or not output.exists():
        return
    if output.is_file() and os.path.samefile(output, panel):
        raise MemtuiError(f"{clean(output)} is the panel being read; write the CSV to another file.")
    if output.is_file():
        with open(output, "rb") as f:
            if f.read(8) == b"\x89HDF\r\n\x1a\n":
                raise MemtuiError(f"{clean(output)} is an HDF5 file (a panel?); -o writes a CSV: choose another name.")


def _final(panel, final_step: int | None) -> int | None:
    """``--final-step``: the last completed checkpoint at or before it (as `memtui estimate` reads it)."""
    if final_step is None:
        return None
    done = panel.done_steps
    before = done[done <= final_step]
    if not len(before):
        raise MemtuiError(f"--final-step {final_step} comes before the first completed checkpoint (step {done[0]}).")
    return int(before[-1])


def _print(panel, scores, found, decoder) -> None:
    from memtui.panel import metrics as registry

    better = "higher" if scores.sign > 0 else "lower"
    name = clean(panel.path.name if panel.path else "panel", 80)
    cohorts = sorted(set(scores.cohort.tolist()))
    at = int(scores.checkpoint[0])
    which = f"cohort {cohorts[0]}" if len(cohorts) == 1 else f"{len(cohorts)} cohorts"
    print(f"{name}: {clean(scores.metric, 40)} ({clean(registry.label(scores.metric), 60)}, {better} is better); "
          f"{len(scores)} instances of {which} scored at step {at}, best {len(found)} shown")  # fmt: skip
    if scores.by:
        print(_split_line(scores))
    width = max(40, shutil.get_terminal_size((120, 24)).columns)
    cov = list(found[0].covariates)[:3] if found else []
    wide = min(GROUP_WIDTH, max((len(r.group) for r in found), default=5)) if scores.by else 0
    head = (
        f"{'rank':>5} {'id':>10}"
        + (f" {'group':<{wide}}" if wide else "")
        + f" {'cohort':>7} {'score':>10} {'p_ctrl':>7}"
    )
    head += "".join(f" {clean(c, 10):>10}" for c in cov)
    print(head + "  text")
    for r in found:
        group = f" {clean(r.group, wide):<{wide}}" if wide else ""
        line = f"{r.rank:>5} {r.id:>10}{group} {r.cohort:>7} {r.score:>10.4g} {r.p_value:>7.3f}"
        line += "".join(f" {_cov(r.covariates[c]):>10}" for c in cov)
        room = max(10, width - len(line) - 2)
        text = r.text if r.text else "(no token ids in the panel)"
        print(f"{line}  {text[: room - 1] + '…' if len(text) > room else text}")
    print(
        f"score: the instance's own change from the checkpoint before its cohort's to step {at}, less the "
        f"{_controls(scores)} mean change, signed so that higher is more memorised."
    )
    print(report_note())
    print(f"text: {decoder.description if decoder is not None else 'the panel stores no token ids'}")
    for note in scores.notes:
        print(f"note   {clean(note, limit=None)}")


GROUP_WIDTH = 24  # the group column's widest (a longer name is cut with …; --json and -o carry it whole)


def _split_line(scores) -> str:
    """The line under the header naming the split and its groups, with how many of each were scored."""
    shown = ", ".join(f"{clean(g, 40)} {n}" for g, n, _ in scores.groups[:8])
    more = f" and {len(scores.groups) - 8} more" if len(scores.groups) > 8 else ""
    against = (
        "all never-trained instances (shared controls)" if scores.shared_controls else "its own never-trained ones"
    )
    return f"by {clean(scores.by, 60)}: {shown}{more} scored; each group against {against}"


def _controls(scores) -> str:
    """Whose mean change the score subtracts, for the footer."""
    if not scores.by or scores.shared_controls:
        return f"{scores.n_controls} never-trained instances'"
    counts = ", ".join(f"{clean(g, 40)} {c}" for g, _, c in scores.groups[:8])
    return f"group's own never-trained instances' ({counts})"


def report_note() -> str:
    from memtui.report.instances import DESCRIPTIVE

    return DESCRIPTIVE


def _cov(value) -> str:
    if value is None:
        return "?"
    return f"{value:.4g}" if isinstance(value, float) else clean(value, 10)
