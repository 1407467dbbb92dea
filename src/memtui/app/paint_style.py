"""A line-by-line widget's base style taken once per paint.

``DOMNode.rich_style`` walks up every ancestor and composes their colours each time it is read; a widget that reads
it for each line it draws (and for each row it rebuilds after a theme change) walked the tree twice a line, about a
tenth of a theme change's CPU for the heatmap. Within one paint the ancestors' styles cannot change (the compositor
draws between restyles), so the style read when the paint starts holds for every line of it.
"""

from __future__ import annotations

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip


class BaseStylePerPaint:
    """Mixed into a widget (before its Textual base class): :attr:`base_style` is ``rich_style``, read once per
    ``render_lines`` call (and anew outside one)."""

    _paint_style: Style | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        self._paint_style = self.rich_style  # type: ignore[attr-defined]
        try:
            return super().render_lines(crop)  # type: ignore[misc]
        finally:
            self._paint_style = None

    @property
    def base_style(self) -> Style:
        return self.rich_style if self._paint_style is None else self._paint_style  # type: ignore[attr-defined]
