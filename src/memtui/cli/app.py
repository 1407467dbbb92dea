"""`memtui app`: open the workbench on a panel (the default when no command is given)."""

from __future__ import annotations

from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.panel.samples import SAMPLES, SUITE_NAME

SUMMARY = "open the workbench on a panel (the default when no command is given)"


def add_arguments(p) -> None:
    p.add_argument(
        "panel",
        nargs="*",
        type=Path,
        help="panel file (default: the shipped synthetic sample); several panels of the same instances, one per "
        "model, open as a suite with a Compare pane",
    )
    p.add_argument(
        "--sample",
        choices=[*SAMPLES, SUITE_NAME],
        help=f"open a sample shipped with memtui instead ('{SUITE_NAME}': the four models of the shipped suite)",
    )


def run(args) -> int:
    from memtui.app import run_app
    from memtui.panel.samples import sample_paths

    if args.sample and args.panel:
        raise MemtuiError("give a panel or --sample, not both.")
    if args.sample:
        paths = sample_paths(args.sample)
        return run_app(paths if len(paths) > 1 else paths[0])
    return run_app(args.panel if len(args.panel) > 1 else (args.panel[0] if args.panel else None))
