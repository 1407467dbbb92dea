"""A screen's frame drawn without rendering the widgets hidden behind others.

Textual's compositor renders every visible widget of a frame, back ones included, then keeps for each cut of each line
the front-most widget's segments. Widgets do not blend into those behind them (only a screen over another screen
does, through its own background), so a widget whose cuts are all taken by widgets in front of it adds nothing to
the frame. On the main screen that is the screen itself and five containers nested under the tabs (the tabbed
content, its switcher, the pane, the pane's body, its main area), each a full-screen block of blank lines: a tenth of
a frame drawn whole (a theme change, a pane shown).

:class:`OccludingCompositor` fills the cuts front to back as Textual does and renders a widget only if one of its
cuts on a line drawn is still empty, so the frame is the one Textual draws. A widget skipped keeps its lines marked
left to render (``StylesCache``): drawn when uncovered, it renders them then. Where Textual's compositor is not as
expected (``cuts``, ``visible_widgets``), it draws as Textual does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from textual._compositor import Compositor
from textual.geometry import Region
from textual.strip import Strip

_EXPECTED = all(hasattr(Compositor, name) for name in ("cuts", "visible_widgets", "_render_chops"))


class OccludingCompositor(Compositor):
    """Textual's compositor, rendering only the widgets that show in the frame (counted in ``skipped``)."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped = 0  # widgets not rendered because those in front of them covered them (the tests read it)

    def _render_chops(self, crop: Region, is_rendered_line: Callable[[int], bool]) -> Sequence[Mapping[int, Strip]]:
        if not _EXPECTED:
            return super()._render_chops(crop, is_rendered_line)
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        intersection = Region.intersection
        overlaps = crop.overlaps if crop else None
        for widget, (region, clip) in self.visible_widgets.items():  # front to back, as Textual paints them
            if overlaps is not None and not overlaps(clip):
                continue  # as Compositor._get_renders
            render_region = intersection(region, clip)
            if not render_region.width or not render_region.height:
                continue
            first_cut, last_cut = render_region.column_span
            lines = [y for y in render_region.line_range if is_rendered_line(y)]
            if all(chops[y][cut] is not None for y in lines for cut in cuts[y] if first_cut <= cut < last_cut):
                self.skipped += 1
                continue
            x, y0, width, height = render_region
            strips = widget.render_lines(Region(x - region.x, y0 - region.y, width, height))
            for y, strip in zip(render_region.line_range, strips, strict=False):
                if not is_rendered_line(y):
                    continue
                chops_line = chops[y]
                final_cuts = [cut for cut in cuts[y] if last_cut >= cut >= first_cut]
                pieces = strip.divide([cut - x for cut in final_cuts[1:]])
                for cut, piece in zip(final_cuts, pieces, strict=False):
                    if chops_line.get(cut) is None:  # front to back: the first piece for a cut is the one shown
                        chops_line[cut] = piece
        return chops  # type: ignore[return-value]


class OccludingScreen:
    """Mixed into a screen (before ``Screen``): its frames drawn by an :class:`OccludingCompositor`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._compositor = OccludingCompositor()
