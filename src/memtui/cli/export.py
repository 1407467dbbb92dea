"""`memtui export`: write estimates to CSV (significant ones by default)."""

from __future__ import annotations

from pathlib import Path

from memtui.cli.options import (
    add_by_args,
    add_covariates_arg,
    add_panel_args,
    add_settings_args,
    estimate_from_args,
    printable_notes,
    run_notes,
)
from memtui.core.errors import MemtuiError
from memtui.core.text import clean

SUMMARY = "write estimates to CSV (significant ones by default)"


def add_arguments(p) -> None:
    add_panel_args(p)
    p.add_argument("-o", "--output", type=Path, required=True, help="CSV file to write")
    p.add_argument(
        "--scope",
        default="profile",
        choices=["profile", "instantaneous", "persistent", "residual"],
        help="which estimates: every (g, c) cell, the diagonal c = g, by c - g for c > g, or at the final checkpoint",
    )
    sig = p.add_mutually_exclusive_group()
    sig.add_argument(
        "--significant-only",
        dest="significant_only",
        action="store_true",
        default=True,
        help="only estimates whose simultaneous band excludes 0 (the default)",
    )
    sig.add_argument("--all", dest="significant_only", action="store_false", help="also non-significant estimates")
    add_settings_args(p, "export")
    add_covariates_arg(p)
    add_by_args(p)


def run(args) -> int:
    from memtui.report.export import export_csv, significance

    if args.final_step is not None and args.scope != "residual":
        raise MemtuiError(
            f"--final-step picks the checkpoint of the residual scope; give it with --scope residual (the {args.scope} "
            "scope does not depend on it)."
        )
    if args.by:
        return _run_by(args)
    _, res = estimate_from_args(args)
    rows = export_csv(res, args.output, args.scope, args.significant_only)
    which = "significant " if args.significant_only else ""
    print(f"wrote {rows} {which}{args.scope} estimates of {clean(res.settings.metric, 80)} to {clean(args.output)} "
          f"(significance: {significance(res.settings)})")  # fmt: skip
    for note in (*printable_notes(res), *run_notes(args)):
        print(f"note   {note}")
    return 0


def _run_by(args) -> int:
    """``--by``: every group's rows in one CSV, a column ``group`` first."""
    from memtui.cli.options import estimate_by_from_args
    from memtui.report.export import export_by_frame, export_csv, significance

    _, by = estimate_by_from_args(args)
    rows = export_csv(export_by_frame(by, args.scope, args.significant_only), args.output)
    which = "significant " if args.significant_only else ""
    print(f"wrote {rows} {which}{args.scope} estimates of {len(by.names)} groups ({clean(by.spec, 80)}) to "
          f"{clean(args.output)} (significance: {significance(by.settings)})")  # fmt: skip
    for note in (*by.notes, *run_notes(args)):
        print(f"note   {clean(note, limit=None)}")
    return 0
