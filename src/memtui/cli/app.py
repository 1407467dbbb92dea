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
        help="panel file; several panels of the same instances, one per model, open as a suite with a Compare pane "
        "[default: the shipped synthetic sample]",
    )
    p.add_argument(
        "--sample",
        choices=[*SAMPLES, SUITE_NAME],
        help=f"open a sample shipped with memtui instead ('{SUITE_NAME}': the four models of the shipped suite)",
    )


def panel_paths(args) -> list[Path]:
    """The panels the arguments name: the files given, the sample's, or none (the workbench's default sample)."""
    from memtui.panel.samples import sample_paths

    if args.sample and args.panel:
        raise MemtuiError("give a panel or --sample, not both.")
    return sample_paths(args.sample) if args.sample else list(args.panel)


def run(args) -> int:
    from memtui.app import run_app

    paths = panel_paths(args)
    return run_app(paths if len(paths) > 1 else (paths[0] if paths else None))
