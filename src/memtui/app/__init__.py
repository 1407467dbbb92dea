"""The workbench: a keyboard-driven Textual app over one panel (``memtui`` / ``memtui PANEL``)."""

from __future__ import annotations

import sys
from pathlib import Path

from memtui.errors import MemtuiError


def run_app(path: Path | None = None) -> int:
    """Open the workbench on ``path`` (None: the shipped sample). A bad panel is one line on stderr and status 2,
    printed before the terminal is taken over, so it stays readable after exit."""
    from memtui.cli import default_panel
    from memtui.panel import read_panel

    path = Path(path) if path is not None else default_panel()
    try:
        panel = read_panel(path)
    except MemtuiError as exc:
        print(f"memtui: {exc}", file=sys.stderr)
        return 2
    from memtui.app.main import MemtuiApp

    return int(MemtuiApp(panel).run() or 0)


__all__ = ["run_app"]
