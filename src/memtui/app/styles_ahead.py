"""A theme change's restyle, worked out while the app is idle.

A theme change restyles every node shown (``Stylesheet.update``): for each it finds the rules whose selectors match
the node and its ancestors, keeps the most specific value of each property, sets them (``replace_rules``) and does
the same for the node's component classes (virtual nodes: an input's cursor, a bar's filled part). Finding and
merging the rules is two thirds of it, and it gives the same answer for a theme as long as nothing a selector reads
has changed: the node's and its ancestors' types, ids, classes and states, and the app's theme classes and states
(``-dark-mode``, ``:light``).

:class:`StylesAhead` works that out for the theme a change most likely goes to (the theme left last, or the other
of the default dark and light), node by node while the app is idle, with Textual's own ``Stylesheet.apply`` on a
second stylesheet holding that theme's rules, and the app's theme classes and states as the change will set them.
On the change, a node worked out ahead is given the rules found for it (``replace_rules``, as Textual); any other is
restyled as before.

What was worked out for a node is dropped whenever Textual restyles the node for any other reason: Textual restyles
a node (and what is under it, where a rule looks up the tree) whenever something its selectors read changes (its
classes, focus, hover, its disabled state, a parent's classes), so a node not restyled since is as it was. Nodes whose
rules read their siblings (``:first-child``, ``:odd``) or what is under them (``:focus-within``) are not worked out
ahead. Where Textual's internals are not as expected, nothing is worked out and Textual restyles as it always did.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING

from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.app import App
    from textual.css.styles import RenderStyles
    from textual.css.types import RulesMap
    from textual.theme import Theme

# what Stylesheet.apply reads and sets on a node beside its rules; without them Textual's apply is left alone
_NODE_FLAGS = ("_has_hover_style", "_has_focus_within", "_has_order_style", "_has_odd_or_even")
_SHEET_STATE = ("_rules", "_rules_map", "_require_parse")


@dataclass(frozen=True)
class _Worked:
    """What ``Stylesheet.apply`` would do to one node: its rules (None: no rule matched, none are set), its
    component classes' styles (None: it has none), and the flags it sets."""

    rules: RulesMap | None
    components: dict[str, RenderStyles] | None
    flags: tuple[bool, ...]


def theme_classes(classes: Iterable[str], theme: Theme) -> frozenset[str]:
    """The app's classes once ``theme`` is set (as ``App._watch_theme`` sets them)."""
    kept = {name for name in classes if not name.startswith("-theme-") and name not in ("-dark-mode", "-light-mode")}
    return frozenset(kept | {f"-theme-{theme.name}", "-dark-mode" if theme.dark else "-light-mode"})


class StylesAhead:
    """Each node's restyle for one theme, worked out ahead (:meth:`work`) and used by the change to it."""

    AGAIN = 8

    def __init__(self, app: App, stylesheet: Stylesheet, walk: Callable[[DOMNode], list[DOMNode]]) -> None:
        self._app = weakref.ref(app)
        self._stylesheet = stylesheet
        self._walk = walk  # the nodes a theme change restyles (restyle.HiddenPanes.walk)
        self._worked: weakref.WeakKeyDictionary[DOMNode, _Worked] = weakref.WeakKeyDictionary()
        self._tried: weakref.WeakSet[DOMNode] = weakref.WeakSet()  # worked out, or left to Textual, for this target
        self._redone: weakref.WeakKeyDictionary[DOMNode, int] = weakref.WeakKeyDictionary()  # times worked out again
        self._target: tuple[Theme, list] | None = None  # the theme and its parsed rules worked out for
        self._state: tuple | None = None  # the app's classes and states under that theme
        self.used = 0  # nodes restyled from what was worked out ahead (since the count was last reset)
        self._shadow: _Shadow | None = None  # the target's rules in a stylesheet of their own
        needs = ("_classes", "get_pseudo_classes", "_simulated_theme", "_component_styles", *_NODE_FLAGS)
        self.enabled = all(hasattr(stylesheet, n) for n in _SHEET_STATE) and all(hasattr(app, n) for n in needs)
        if not self.enabled:
            return
        original = stylesheet.apply

        def apply(node: DOMNode, *, animate: bool = False, cache: dict | None = None) -> None:
            worked = self._take(node)
            if worked is None:
                original(node, animate=animate, cache=cache)
            else:
                self._restyle(node, worked, animate)

        stylesheet.apply = apply  # type: ignore[method-assign]

    # ---- the change ---------------------------------------------------------------------------------------------

    def _take(self, node: DOMNode) -> _Worked | None:
        """What was worked out for ``node``, dropped as it is restyled; None unless it was worked out with the rules
        now in use and the app's classes and states now."""
        worked = self._worked.pop(node, None) if self._worked else None
        if worked is None or self._target is None or self._stylesheet._rules is not self._target[1]:
            self._again(node)
            return None
        if self._stylesheet._require_parse or self._app_state() != self._state:
            return None
        return worked

    def _again(self, node: DOMNode) -> None:
        """``node`` restyled for another reason (its state changed): worked out again while idle, up to
        ``AGAIN`` times for a target (a widget restyled on every tick is left to the change)."""
        if node in self._tried:
            count = self._redone.get(node, 0)
            if count < self.AGAIN:
                self._redone[node] = count + 1
                self._tried.discard(node)

    def _restyle(self, node: DOMNode, worked: _Worked, animate: bool) -> None:
        """As ``Stylesheet.apply`` ends, with what it would have found."""
        for name, value in zip(_NODE_FLAGS, worked.flags, strict=True):
            setattr(node, name, value)
        if worked.rules is not None:
            self._stylesheet.replace_rules(node, worked.rules, animate=animate)
        if worked.components is None:
            self._stylesheet._process_component_classes(node)
        else:  # as Stylesheet._process_component_classes, with the virtual nodes' styles worked out
            old = node._component_styles.copy()
            node._component_styles.clear()
            node._component_styles.update(worked.components)
            if any(old.get(name) != styles for name, styles in worked.components.items()):
                node.refresh()
        self.used += 1

    def _app_state(self) -> tuple:
        app = self._app()
        return (frozenset(app._classes), frozenset(app.get_pseudo_classes())) if app is not None else ()

    # ---- ahead --------------------------------------------------------------------------------------------------

    def target(self, theme: Theme | None, rules: list | None) -> None:
        """Work out the restyle to ``theme``, its stylesheet parsed into ``rules`` (None: nothing ahead)."""
        if theme is None or rules is None or not self.enabled:
            self._target = self._shadow = None
            self._worked.clear()
            return
        if self._target is not None and self._target[0] is theme and self._target[1] is rules:
            return
        self._target = (theme, rules)
        self._shadow = _Shadow(rules)
        self._worked.clear()
        self._tried = weakref.WeakSet()
        self._redone = weakref.WeakKeyDictionary()
        app = self._app()
        with self._as_if(app, theme):
            self._state = self._app_state()

    def pending(self, root: DOMNode) -> list[DOMNode]:
        """The nodes under ``root`` a change to the target theme restyles that are still to be worked out."""
        if self._target is None:
            return []
        return [node for node in self._nodes(root) if node not in self._tried]

    def work(self, root: DOMNode, budget_s: float = 0.01) -> None:
        """Work out the nodes still to do under ``root`` for about ``budget_s`` (at least one node)."""
        todo = self.pending(root)
        if not todo:
            return
        theme, shadow = self._target[0], self._shadow
        start = perf_counter()
        with self._as_if(self._app(), theme):
            for node in todo:
                self._tried.add(node)
                worked = shadow.work_out(node)
                if worked is not None:
                    self._worked[node] = worked
                if perf_counter() - start > budget_s:
                    break

    def _nodes(self, root: DOMNode) -> list[DOMNode]:
        """As ``Stylesheet.update_nodes`` restyles them: each node, and a scrolling widget's scrollbars shown."""
        nodes = []
        for node in self._walk(root):
            nodes.append(node)
            if isinstance(node, Widget) and node.is_scrollable:
                vertical = node.show_vertical_scrollbar and node.scrollbar_size_vertical
                horizontal = node.show_horizontal_scrollbar and node.scrollbar_size_horizontal
                nodes += [node.vertical_scrollbar] if vertical else []
                nodes += [node.horizontal_scrollbar] if horizontal else []
                nodes += [node.scrollbar_corner] if vertical and horizontal else []
        return nodes

    @contextmanager
    def _as_if(self, app: App | None, theme: Theme) -> Iterator[None]:
        """The app's classes and theme as a change to ``theme`` sets them, until left (nothing else runs meanwhile:
        no await within)."""
        if app is None:
            yield
            return
        classes = app._classes
        app._classes = set(theme_classes(classes, theme))
        app._simulated_theme = theme
        try:
            yield
        finally:
            app._classes = classes
            app._simulated_theme = None


class _Shadow(Stylesheet):
    """A stylesheet holding one theme's rules, whose ``apply`` notes what it would set on a node rather than set it."""

    def __init__(self, rules: list) -> None:
        super().__init__()
        self._rules = rules
        self._rules_map = None
        self._require_parse = False
        self._node: DOMNode | None = None
        self._rules_found: RulesMap | None = None
        self._components: dict[str, RenderStyles] | None = None

    def work_out(self, node: DOMNode) -> _Worked | None:
        """What ``Stylesheet.apply`` gives ``node`` with these rules; None where it reads more than the node's path
        (its siblings, what is under it): those are left to Textual."""
        flags = tuple(getattr(node, name) for name in _NODE_FLAGS)
        self._node, self._rules_found, self._components = node, None, None
        try:
            self.apply(node)
            worked = _Worked(self._rules_found, self._components, tuple(getattr(node, n) for n in _NODE_FLAGS))
        finally:
            for name, value in zip(_NODE_FLAGS, flags, strict=True):  # the node as it was
                setattr(node, name, value)
            self._node = None
        if worked.flags[1] or worked.flags[2] or worked.flags[3]:  # :focus-within, order, odd/even
            return None
        return worked

    def replace_rules(self, node: DOMNode, rules: RulesMap, animate: bool = False) -> None:  # type: ignore[override]
        if node is self._node:
            self._rules_found = rules
        else:  # a component's virtual node, made for this: styled as Textual styles it
            Stylesheet.replace_rules(node, rules, animate=animate)

    def _process_component_classes(self, node: DOMNode) -> None:
        if node is not self._node:
            return  # a virtual node has none
        names = node._get_component_classes()
        if not names:
            return
        components = {}
        for name in sorted(names):
            virtual = DOMNode(classes=name)
            virtual._attach(node)
            self.apply(virtual)
            components[name] = virtual.styles
        self._components = components
