"""The dimmed panes behind a dialog, drawn while idle.

A dialog (a ``ModalScreen``: settings, export, the list of keys, the open dialog) has a see-through background:
Textual draws it by rendering the whole screen below anew and blending each of its segments with the dialog's
background colour (``BackgroundScreen``), in the dialog's first frame: 30-40 ms of a dialog key's CPU at 120 x 40,
about half of ``ctrl+o``'s. The screen below is the main screen, which does not change while the key is handled.

:class:`Backdrop` keeps those blended segments, made while the app is idle after the main screen's latest frame, and
a dialog mixing in :class:`DimmedBackdrop` draws them when they are still what Textual would draw: the main screen
drew no frame since, nothing on it waits to be drawn, and the size and the colour are the same. Otherwise it draws
them anew, as Textual does, and keeps them. The segments are Textual's own (``BackgroundScreen.process_segments`` of
the main screen's compositor), so what is drawn is the same either way.

A dialog's own lines are those segments with its style added to each, cut into lines (Textual's ``RichVisual``):
10-15 ms more of its first frame at 120 x 40. They are kept too, made while idle for a dialog built ahead, and a
dialog takes them where its size and every style that goes into them are the same as that one's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from textual._context import visible_screen_stack
from textual.renderables.background_screen import BackgroundScreen
from textual.visual import Visual, visualize
from textual.widget import _RenderCache

if TYPE_CHECKING:
    from textual.color import Color
    from textual.screen import Screen
    from textual.strip import Strip


class Backdrop:
    """The blended segments of one screen (the main screen) for one colour, and the frame they were made after."""

    def __init__(self) -> None:
        self.frames = 0  # redraws of the main screen's changes (``MainScreen._compositor_refresh``)
        self._key: tuple | None = None  # (screen, size, colour, frames) the segments were made for
        self._segments: list[Segment] = []
        self._made = 0  # segments made so far: which segments the lines kept were cut from
        self._lines: tuple[tuple, list[Strip]] | None = None  # (what they were made for, a dialog's lines)
        self._frames_asked = -1
        self.hits = self.misses = 0  # dialogs drawn on kept segments / on segments made at once (for tests)
        self.lines_kept = 0  # dialogs drawn on kept lines (for tests)

    def quiet(self) -> bool:
        """Whether the main screen drew nothing since this was last asked (the idle app asks once a tick): the
        panes are dimmed ahead once they have stopped changing, not between the frames of a cursor held down (a
        key arriving meanwhile would wait for the 30-40 ms it takes)."""
        still = self.frames == self._frames_asked
        self._frames_asked = self.frames
        return still

    def drawn(self) -> None:
        """The main screen drew a frame: what is kept may no longer be what it shows."""
        self.frames += 1

    def fresh(self, screen: Screen, colour: Color) -> bool:
        """Whether the segments kept are what dimming ``screen`` in ``colour`` gives now."""
        return self._key == self._key_for(screen, colour) and not waiting(screen)

    def make(self, screen: Screen, colour: Color, console: Console, options: ConsoleOptions) -> list[Segment]:
        """``screen`` dimmed in ``colour``, as Textual's ``BackgroundScreen`` renders it, and kept."""
        segments = list(BackgroundScreen(screen, colour).__rich_console__(console, options))
        self._key, self._segments = self._key_for(screen, colour), segments
        self._made += 1
        return segments

    def make_lines(self, dialog: Screen, screen: Screen, colour: Color) -> None:
        """The lines ``dialog`` draws over ``screen`` dimmed in ``colour``, made and kept, as its first frame makes
        them (``Widget._render_content``): for a dialog built ahead, while idle."""
        visual = visualize(dialog, _Kept(self, screen, colour), markup=dialog._render_markup)  # noqa: SLF001
        width, height = dialog.size
        self.keep_lines(dialog, Visual.to_strips(dialog, visual, width, height, dialog.visual_style))

    def keep_lines(self, dialog: Screen, lines: list[Strip]) -> None:
        self._lines = (self._lines_key(dialog), lines)

    def lines(self, dialog: Screen, screen: Screen, colour: Color) -> list[Strip] | None:
        """The lines kept, where they are what ``dialog`` would make now: the segments kept are fresh, and they were
        cut for a dialog of its size and styles. None otherwise."""
        if self._lines is None or not self.fresh(screen, colour):
            return None
        key, lines = self._lines
        if key != self._lines_key(dialog):
            return None
        self.lines_kept += 1
        return lines

    def _lines_key(self, dialog: Screen) -> tuple:
        # what ``Visual.to_strips`` reads of the dialog: its size, base style, link style and alignment (a text
        # selection is never kept: see DimmedBackdrop)
        styles = dialog.styles
        links = dialog.link_style if dialog.auto_links else None
        return (self._made, self._key, dialog.size, dialog.visual_style, links, styles.content_align)

    def segments(self, screen: Screen, colour: Color, console: Console, options: ConsoleOptions) -> list[Segment]:
        if self.fresh(screen, colour):
            self.hits += 1
            return self._segments
        self.misses += 1
        return self.make(screen, colour, console, options)

    def _key_for(self, screen: Screen, colour: Color) -> tuple:
        return (screen, screen.size, colour, self.frames)


def waiting(screen: Screen) -> bool:
    """Whether a widget on ``screen`` is marked to be drawn and not drawn yet (its next frame may differ). The
    screen itself is left out: pushing a dialog marks it (suspended), and what it draws (a plain background) is
    the same; were it to change, its redraw comes through ``MainScreen._compositor_refresh``, and anything kept
    is out of date from then."""
    compositor = screen._compositor  # noqa: SLF001 - where Textual keeps what is left to draw
    if screen._dirty_widgets or screen._layout_required or compositor._dirty_regions:  # noqa: SLF001
        return True
    return any(
        w._repaint_required or w._layout_required  # noqa: SLF001
        for w in compositor.widgets
        if w is not screen
    )


class _Kept:
    """A renderable of segments already made (the dimmed screen below)."""

    def __init__(self, backdrop: Backdrop, screen: Screen, colour: Color) -> None:
        self._backdrop, self._screen, self._colour = backdrop, screen, colour

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        return self._backdrop.segments(self._screen, self._colour, console, options)

    def lines(self, dialog: Screen) -> list[Strip] | None:
        return self._backdrop.lines(dialog, self._screen, self._colour)

    def keep_lines(self, dialog: Screen, lines: list[Strip]) -> None:
        """Keep the lines just made from the segments kept (fresh or made for them)."""
        self._backdrop.keep_lines(dialog, lines)


class DimmedBackdrop:
    """Mixed into a dialog (before ``ModalScreen``): its see-through background drawn from the app's
    :class:`Backdrop` where the screen below is the main screen (``Screen.render``, otherwise as Textual's), and its
    lines taken from those kept where they are what it would make (``Widget._render_content``)."""

    def _render_content(self) -> None:
        kept = getattr(self._render(), "_renderable", None)  # type: ignore[attr-defined]
        if not isinstance(kept, _Kept) or self.text_selection is not None:  # type: ignore[attr-defined]
            super()._render_content()  # type: ignore[misc]
            return
        lines = kept.lines(self)
        if lines is not None:
            self._render_cache = _RenderCache(self.size, lines)  # type: ignore[attr-defined]
            self._dirty_regions.clear()  # type: ignore[attr-defined]
            return
        super()._render_content()  # type: ignore[misc]
        kept.keep_lines(self, self._render_cache.lines)  # type: ignore[attr-defined]

    def render(self):
        backdrop = getattr(self.app, "backdrop", None)  # type: ignore[attr-defined]
        background = self.styles.background  # type: ignore[attr-defined]
        stack = visible_screen_stack.get(None)
        if backdrop is None or not stack or background.a >= 1 or not getattr(stack[-1], "dims_from_backdrop", False):
            return super().render()  # type: ignore[misc]
        base = stack.pop()  # as Screen.render: the screens below it draw themselves in turn
        if base is self:
            stack.append(base)
            return super().render()  # type: ignore[misc]
        return _Kept(backdrop, base, background)
