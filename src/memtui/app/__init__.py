"""The workbench: a keyboard-driven Textual app over one panel (``memtui`` / ``memtui PANEL``) or a suite of models
(``memtui A.h5 B.h5 …``)."""

from __future__ import annotations

import sys
from pathlib import Path

from memtui.app.reading import read_for_app
from memtui.core.errors import MemtuiError
from memtui.core.text import clean


def open_app(path: Path | list[Path] | None = None):
    """The App for ``path`` (None: the shipped sample; several: a suite, one model per panel), or a MemtuiError for a
    bad panel or panels that do not form a suite.

    The opening estimate starts loading from the disk cache before Textual is imported, so the two overlap.
    """
    from memtui.panel.samples import default_panel

    paths = [Path(p) for p in path] if isinstance(path, list | tuple) else [Path(path or default_panel())]
    suite = None
    if len(paths) > 1:
        from memtui.estimation.suite_load import load_suite

        try:
            suite = load_suite(paths)
        except MemtuiError:
            raise
        except Exception as exc:  # noqa: BLE001 - as for one panel
            raise MemtuiError(f"the panels cannot be read ({type(exc).__name__}: {clean(exc, 160)}).") from None
    # a suite has read its panels already (in its order: by parameter count, else by name)
    models = suite.originals if suite is not None else [read_for_app(p) for p in paths]
    panel = models[0]
    from memtui.app.prefetch import Prefetch, default_settings

    prefetch = Prefetch(panel, default_settings(panel))
    from memtui.app.main import MemtuiApp

    return MemtuiApp(panel, prefetch=prefetch, models=models, suite=suite)


def run_app(path: Path | list[Path] | None = None) -> int:
    """Run the workbench. A bad panel is one line on stderr and status 2, printed before the terminal is taken
    over, so it stays readable after exit."""
    try:
        app = open_app(path)
    except MemtuiError as exc:
        print(f"memtui: {clean(exc, limit=None)}", file=sys.stderr)
        return 2
    return int(app.run() or 0)


__all__ = ["open_app", "read_for_app", "run_app"]
