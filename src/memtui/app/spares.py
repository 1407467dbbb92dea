"""Dialogs built before they are asked for, so a key opens one in a frame.

Textual builds a screen when it is pushed: composing, mounting and styling the 30-40 widgets of the settings or
export dialog was 100-250 ms of CPU before its first frame (laying out and painting it over the dimmed panes is
about 40 ms more). While the app is idle, :class:`Spares` builds the next instance of each dialog from the
arguments it would be opened with now, and starts it off the screen stack (mounted, not shown). A key that opens
the dialog with the same arguments pushes that instance; with other arguments (the settings changed since) it is
dropped and a new one built at once, as before. Each instance is shown once and removed when it closes, as a new
one always was, so what the user sees and types into is a dialog just built from the current state.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen


VALUES = (int, float, str, bytes, tuple, frozenset, PurePath, type(None))


class Spare(NamedTuple):
    key: tuple  # the arguments it was built from, compared with == (objects by identity: see `same`)
    screen: Screen


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

    def take(self, kind: str, key: tuple, build: Callable[[], Screen]) -> Screen:
        """The dialog to push: the spare built from ``key`` if there is one, else one built now."""
        spare = self._built.pop(kind, None)
        if spare is not None:
            if same(spare.key, key) and spare.screen.is_running:
                return spare.screen
            self._drop(spare)
        return build()

    def keep(self, kind: str, key: tuple, build: Callable[[], Screen]) -> None:
        """Have a spare of ``kind`` built from ``key`` ready; a spare built from other arguments is dropped."""
        spare = self._built.get(kind)
        if spare is not None:
            if same(spare.key, key):
                return
            self._drop(self._built.pop(kind))
        screen = build()
        self._app._register(self._app, screen)  # noqa: SLF001 - what push_screen does first: compose and mount
        self._built[kind] = Spare(key, screen)

    def ready(self) -> bool:
        """Whether every spare built is mounted (nothing of theirs is left to do while a key waits)."""
        return all(spare.screen.is_mounted for spare in self._built.values())

    def _drop(self, spare: Spare) -> None:
        if spare.screen.is_running:
            spare.screen.remove()
