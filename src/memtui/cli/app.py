"""`memtui app`: open the workbench on a panel (the default when no command is given)."""

from __future__ import annotations

from memtui.cli.options import add_panel_args, panel_paths  # panel_paths: `memtui serve` resolves the same panels

SUMMARY = "open the workbench on a panel (the default when no command is given)"


def add_arguments(p) -> None:
    add_panel_args(
        p,
        several=True,
        dest="panel",
        help="panel file; several panels of the same instances, one per model, open as a suite with a Compare pane "
        "[default: the shipped synthetic sample]",
    )


def run(args) -> int:
    from memtui.app import run_app

    paths = panel_paths(args)
    return run_app(paths if len(paths) > 1 else (paths[0] if paths else None))
