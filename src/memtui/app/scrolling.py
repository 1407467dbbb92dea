"""Cursor-following scrolling shared by the line-API grids (the profile heatmap and the estimates table)."""

from __future__ import annotations

from textual.scroll_view import ScrollView


def scroll_to_cursor(view: ScrollView, x0: int, x1: int, row: int, width: int, height: int) -> None:
    """Scroll the least that shows columns x0..x1 of ``row`` in a data area of ``width`` x ``height`` cells."""
    sx, sy = view.scroll_offset
    if x0 < sx:
        sx = x0
    elif x1 > sx + width:
        sx = x1 - width
    if row < sy:
        sy = row
    elif row >= sy + height:
        sy = row - height + 1
    if (sx, sy) != tuple(view.scroll_offset):
        view.scroll_to(sx, sy, animate=False, force=True)
