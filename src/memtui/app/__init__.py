"""The workbench: a keyboard-driven Textual app over one panel (``memtui`` / ``memtui PANEL``)."""

from __future__ import annotations

import sys
from pathlib import Path

from memtui.errors import MemtuiError
from memtui.text import clean


def open_app(path: Path | None = None):
    """The App for ``path`` (None: the shipped sample), or a MemtuiError for a bad panel.

    The opening estimate starts loading from the disk cache before Textual is imported, so the two overlap.
    """
    from memtui.panel import read_panel
    from memtui.samples import default_panel

    path = Path(path) if path is not None else default_panel()
    try:
        panel = read_panel(path)
    except MemtuiError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes h5py raise is one line, not a traceback
        raise MemtuiError(
            f"{path} cannot be read ({type(exc).__name__}: {clean(exc, 160)}); it may be damaged."
        ) from None
    from memtui.app.prefetch import Prefetch, default_settings

    prefetch = Prefetch(panel, default_settings(panel))
    from memtui.app.main import MemtuiApp

    return MemtuiApp(panel, prefetch=prefetch)


def run_app(path: Path | None = None) -> int:
    """Run the workbench. A bad panel is one line on stderr and status 2, printed before the terminal is taken
    over, so it stays readable after exit."""
    try:
        app = open_app(path)
    except MemtuiError as exc:
        print(f"memtui: {clean(exc, limit=None)}", file=sys.stderr)
        return 2
    return int(app.run() or 0)


__all__ = ["open_app", "run_app"]
