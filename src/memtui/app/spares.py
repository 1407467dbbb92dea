"""Dialogs built before they are asked for, so a key opens one in a frame.

Textual builds a screen when it is pushed: composing, mounting and styling the 30-40 widgets of the settings or
export dialog was 100-250 ms of CPU before its first frame (laying out and painting it over the dimmed panes is
about 40 ms more). While the app is idle, :class:`Spares` builds the next instance of each dialog (settings, export,
the list of keys) from the arguments it would be opened with now, and starts it off the screen stack (mounted, not
shown), then restyles it when the stylesheet's rules change, lays it out for the terminal's size and renders its
widgets once. A key that opens the dialog with the same arguments pushes that instance; with other arguments (the
settings changed since) it is dropped and a new one built at once, as before. Each instance is shown once and
removed when it closes, as a new one always was, so what the user sees and types into is a dialog just built from
the current state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from textual import events

if TYPE_CHECKING:
    from textual.app import App
    from textual.geometry import Size


VALUES = (int, float, str, bytes, tuple, frozenset, PurePath, type(None))


@dataclass
class Spare:
    key: tuple  # the arguments it was built from, compared with == (objects by identity: see `same`)
    screen: SpareScreen
    styled_with: object  # the stylesheet's rules it was styled with (a new list on each parse: compared by identity)
    laid_out: Size | None = None  # the terminal size it was laid out for, off the screen stack


class SpareScreen:
    """Mixed into a dialog (a Screen) that may be built ahead: on the first showing of a spare already styled and
    laid out, Textual's restyle of the whole screen is skipped where the stylesheet's rules are still those it was
    styled with (a theme change since makes new rules), and its layout where the terminal's size is the one it was
    laid out for (Textual lays out again when the size differs). Not a Screen itself: Textual takes a widget's
    default CSS along its first widget base class, so a Screen here would hide ModalScreen's (its dimmed,
    see-through background)."""

    _styled_with: object = None  # the stylesheet's rules a spare was styled with, set when it is taken to be shown
    _first_frame_due = False  # shown, its first frame not drawn yet

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        # dispatched before Screen's own handler (Textual calls each class's, in method resolution order)
        if self._styled_with is not None and self._styled_with is self.app.stylesheet.rules:  # type: ignore[attr-defined]
            event.refresh_styles = False
        self._styled_with = None
        self._first_frame_due = True

    def _on_idle(self, event: events.Idle) -> None:
        """The first frame drawn as soon as the messages its showing posted are handled. Textual draws a screen's
        changes on its update timer's next tick (up to a 60th of a second later: it gathers the changes of a burst
        into one frame); a dialog laid out when shown was drawn at once, one laid out ahead waited for the tick
        (15 ms of the 30-35 from its key to its frame, near idle). Runs before Screen's own handler, which then
        finds nothing left to draw. What the push changes on the screen below (it is refreshed, its focused widget
        blurred) may reach the dialog after this frame: the tick then draws it again (with the lines kept, 2-3 ms),
        where before it was drawn once, a tick later."""
        if self._first_frame_due and self.is_current and not self.app._batch_count:  # type: ignore[attr-defined]  # noqa: SLF001
            self._first_frame_due = False
            self._on_timer_update()  # type: ignore[attr-defined]  # noqa: SLF001 - what the tick does


def same(a: tuple, b: tuple) -> bool:
    """Whether two argument tuples are the same: numbers, strings, tuples and dataclasses of them by value; any other
    object (an estimate result, a callable) only as itself."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        if type(x) is not type(y) or not isinstance(x, VALUES) and not _value(x):
            return False
        if x != y:
            return False
    return True


def _value(x: object) -> bool:
    """A frozen dataclass (``Settings``) compares by value."""
    params = getattr(type(x), "__dataclass_params__", None)
    return params is not None and params.frozen


class Spares:
    """At most one built, unshown instance per kind of dialog, keyed by its arguments."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._built: dict[str, Spare] = {}

    def background(self):
        """The background colour a built dialog draws over the panes (all are ``ModalScreen``s, one colour for a
        theme), None before one is built and styled."""
        screen = self.styled(laid_out=False)
        return None if screen is None else screen.styles.background  # type: ignore[attr-defined]

    def styled(self, *, laid_out: bool = True) -> SpareScreen | None:
        """A dialog built and styled with the rules now (and laid out for the terminal's size), or None."""
        rules, size = self._app.stylesheet.rules, self._app.size
        for spare in self._built.values():
            if spare.screen.is_mounted and spare.styled_with is rules and (not laid_out or spare.laid_out == size):
                return spare.screen
        return None

    def take(self, kind: str, key: tuple, build: Callable[[], SpareScreen]) -> SpareScreen:
        """The dialog to push: the spare built from ``key`` if it is ready (mounted and laid out for the terminal's
        size), else one built now."""
        spare = self._built.get(kind)
        if spare is not None and same(spare.key, key) and spare.laid_out == self._app.size:
            del self._built[kind]
            spare.screen._styled_with = spare.styled_with
            return spare.screen
        if spare is not None and spare.screen.is_mounted:  # built from other arguments: dropped
            self._drop(self._built.pop(kind))
        return build()  # (a spare still mounting is left to finish: removing it then broke its own mount handler)

    def keep(self, kind: str, key: tuple, build: Callable[[], SpareScreen]) -> None:
        """Have a spare of ``kind`` built from ``key`` ready; a spare built from other arguments is dropped once it
        has mounted (the next tick builds the new one)."""
        spare = self._built.get(kind)
        if spare is not None:
            if same(spare.key, key) or not spare.screen.is_mounted:
                return
            self._drop(self._built.pop(kind))
        rules = self._app.stylesheet.rules  # those its widgets are styled with as they mount
        screen = build()
        self._app._register(self._app, screen)  # noqa: SLF001 - what push_screen does first: compose and mount
        self._built[kind] = Spare(key, screen, rules)

    def lay_out(self) -> None:
        """Make the mounted spares what showing one would make them first, off the stack (no frame is drawn for a
        screen that is not the current one): styled with the stylesheet's rules now, and laid out for the terminal's
        size. The rules change when a widget class is first mounted (its default CSS joins the stylesheet: mounting
        the export dialog's checkbox did, after the settings dialog was built) or the theme changes; a spare styled
        with older rules was restyled whole when shown (40 widgets, 30-40 ms of the key's CPU), so that is done
        here, while idle."""
        size, rules = self._app.size, self._app.stylesheet.rules
        for spare in self._built.values():
            if not spare.screen.is_mounted:
                continue
            if spare.styled_with is not rules:
                self._app.update_styles(spare.screen, animate=False)  # what its first showing did, the same way
                spare.styled_with, spare.laid_out = rules, None  # new styles may size it anew
            if spare.laid_out != size:
                spare.screen._refresh_layout(size)  # noqa: SLF001 - Textual's own first step on showing it
                spare.laid_out = size
                self._render(spare.screen)

    @staticmethod
    def _render(screen: SpareScreen) -> None:
        """Render the spare's widgets once, off the screen stack, and drop the frame: each widget keeps the lines it
        rendered until something refreshes it, so its first frame when shown only puts them together (the settings
        dialog's widgets were 30-35 ms of that frame). With no screen below it, the dialog draws a plain background
        here; refreshed after, it draws the dimmed panes below it as they are when it is shown. Its whole screen is
        marked left to draw again, so that its first frame there is the whole screen, as a dialog's first frame
        always was (a render marks nothing left to draw: then the first frame drew only the dialog's box, the panes
        around it not yet dimmed, and the whole screen a frame later)."""
        compositor = screen._compositor  # type: ignore[attr-defined]  # noqa: SLF001
        compositor.render_update(full=True, screen_stack=[])
        compositor._dirty_regions.add(compositor.size.region)  # noqa: SLF001 - what a render clears
        screen.refresh()  # type: ignore[attr-defined]

    def ready(self, kind: str, key: tuple) -> bool:
        """Whether a spare of ``kind`` built from ``key`` is mounted, styled with the rules now and laid out for the
        terminal's size (nothing of it is left to do while a key waits)."""
        spare = self._built.get(kind)
        return (
            spare is not None
            and same(spare.key, key)
            and spare.styled_with is self._app.stylesheet.rules
            and spare.laid_out == self._app.size
        )

    def _drop(self, spare: Spare) -> None:
        if spare.screen.is_running:
            spare.screen.remove()
