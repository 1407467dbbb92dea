"""What the workbench shows, as text and colours, for tests that check the picture without a snapshot file: the
screen's lines as a terminal would show them, and the styled segments of a region."""

from __future__ import annotations

import io

from rich.console import Console


def screen_text(app) -> str:
    """The whole screen (dialogs over it included) as plain text, one line per terminal row."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, color_system="truecolor",
                      record=True, legacy_windows=False, safe_box=False)  # fmt: skip
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def widget_lines(widget) -> list[str]:
    """The rows of one widget's region of the screen."""
    region = widget.region
    lines = screen_text(widget.app).splitlines()
    return [line[region.x : region.right] for line in lines[region.y : region.bottom]]
