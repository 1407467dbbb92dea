"""A theme change, made cheaper: each widget marked for repaint once (not once per colour per ancestor), and the
stylesheet parsed once per theme.

Textual (8.x) restyles a node rule by rule, and each colour rule that changes refreshes the node *and every node
under it* (``ColorProperty.__set__`` calls ``Styles.refresh(children=True)``; a scrollbar colour does it twice). A
theme changes every colour of every node, so a DOM of N nodes D deep was refreshed about N × D × (colours changed)
times, each refresh looking the widget up in the compositor to mark its region dirty: three quarters of the CPU of a
theme change. Inside :func:`batched_refreshes` those refreshes are collected and done once per node when the restyle
ends, before the screen is laid out and painted, so the frame drawn is the same.

Textual also re-parses every stylesheet (the app's and each widget class's default CSS) with the theme's colours on
each change, about a third of what was left; :class:`ParsedThemes` keeps the rules parsed for each theme (and set
of sources), so going back to a theme seen before skips the parse, and parses themes ahead while the app is idle.

A restyle of the screen also restyled the panes not shown (the Summaries, Estimates, Extraction and Compare panes
behind the Profile pane: four fifths of the main screen's nodes); :class:`HiddenPanes` restyles each when it is
shown, or while the app is idle, whichever comes first.

All lean on Textual's internals (``Styles.refresh``'s signature, ``Stylesheet``'s ``_rules``): where those are not
as expected, nothing is changed and Textual restyles as it always did.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING

from textual._context import NoActiveAppError
from textual.css.model import SelectorType
from textual.css.styles import Styles
from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode

if TYPE_CHECKING:
    from textual.app import App
    from textual.theme import Theme
    from textual.widgets import ContentSwitcher


@contextmanager
def batched_refreshes() -> Iterator[None]:
    """Within it, ``Styles.refresh`` only notes which nodes (and subtrees) need a refresh; on leaving, each is
    refreshed once, with a layout if any of its refreshes asked for one."""
    nodes: dict[DOMNode, bool] = {}  # node -> layout asked for
    subtrees: dict[DOMNode, bool] = {}  # node whose descendants all need a refresh -> layout asked for

    def note(styles: Styles, *, layout: bool = False, children: bool = False, parent: bool = False, repaint=True):
        node = styles.node
        if node is None or not node._is_mounted:  # as Styles.refresh
            return
        if parent and node._parent is not None:
            nodes.setdefault(node._parent, False)
        nodes[node] = nodes.get(node, False) or layout
        if children:
            subtrees[node] = subtrees.get(node, False) or layout

    original = Styles.refresh
    Styles.refresh = note  # type: ignore[method-assign]
    try:
        yield
    finally:
        Styles.refresh = original  # type: ignore[method-assign]
        for node, layout in subtrees.items():
            if any(subtrees.get(above, False) >= layout for above in node.ancestors if above in subtrees):
                continue  # a subtree above covers this one
            for child in node.walk_children(with_self=False):
                nodes[child] = nodes.get(child, False) or layout
        for node, layout in nodes.items():
            node.refresh(layout=layout)


class ParsedThemes:
    """Make ``stylesheet.reparse`` (a theme change) reuse the rules parsed before for the same CSS variables and
    sources: those it parsed itself, those in use when the variables changed (the theme left), and those parsed
    ahead (:meth:`parse_ahead`, while the app is idle). At most ``themes`` sets are kept."""

    def __init__(self, stylesheet: Stylesheet, themes: int = 24) -> None:
        self._stylesheet = stylesheet
        self._themes = themes
        self._parsed: dict[tuple, list] = {}
        if not all(hasattr(stylesheet, name) for name in ("_variables", "_rules", "_rules_map", "_require_parse")):
            self._themes = 0  # another Textual: its own parse each time, nothing kept
            return
        reparse, set_variables = stylesheet.reparse, stylesheet.set_variables

        def leaving(variables: dict[str, str]) -> None:
            if not stylesheet._require_parse:  # the rules in use are parsed from these variables and sources
                self._keep(self._key(), stylesheet._rules)
            set_variables(variables)

        def cached() -> None:
            rules = self._parsed.get(self._key())
            if rules is None:
                reparse()  # raises on bad CSS, as before; nothing is kept then
                self._keep(self._key(), stylesheet._rules)
                return
            stylesheet._rules = rules  # what reparse would set, from the same sources and variables
            stylesheet._rules_map = None
            stylesheet._require_parse = False

        stylesheet.set_variables = leaving  # type: ignore[method-assign]
        stylesheet.reparse = cached  # type: ignore[method-assign]

    def _key(self, variables: dict[str, str] | None = None) -> tuple:
        sheet = self._stylesheet
        variables = sheet._variables if variables is None else variables
        return tuple(sorted(variables.items())), tuple(sheet.source.items())

    def _keep(self, key: tuple, rules: list) -> None:
        if key not in self._parsed and len(self._parsed) >= self._themes:
            self._parsed.pop(next(iter(self._parsed)))
        self._parsed[key] = rules

    @property
    def room(self) -> int:
        """How many sets of rules are kept (0: none, Textual parses on each change)."""
        return self._themes

    def parsed(self, variables: dict[str, str]) -> bool:
        """Whether the rules for ``variables`` and the stylesheet's sources now are kept."""
        return not self._themes or self._key(variables) in self._parsed

    def rules(self, variables: dict[str, str]) -> list | None:
        """The rules kept for ``variables`` and the stylesheet's sources now (the list a change to them puts in
        use), None where none are."""
        return self._parsed.get(self._key(variables)) if self._themes else None

    def parse_ahead(self, variables: dict[str, str]) -> None:
        """Parse the stylesheet's sources with ``variables`` (a theme's) and keep the rules, as ``reparse`` would
        parse them (in a fresh stylesheet, from the same sources), so that a change to that theme skips the parse.
        CSS that does not parse is left for the change to report, as before."""
        if self.parsed(variables):
            return
        fresh = Stylesheet(variables=variables)
        for read_from, (css, is_defaults, tie_breaker, scope) in self._stylesheet.source.items():
            fresh.add_source(css, read_from=read_from, is_default_css=is_defaults, tie_breaker=tie_breaker, scope=scope)
        try:
            fresh.parse()
        except Exception:  # noqa: BLE001 - the theme change parses again and reports it
            self._keep(self._key(variables), None)  # type: ignore[arg-type] - tried: not again for these sources
            return
        self._keep(self._key(variables), fresh.rules)


def add_default_css(stylesheet: Stylesheet, classes: Iterable[type]) -> bool:
    """Add the default CSS of widgets of ``classes`` (and of their bases) to ``stylesheet``, as mounting the first
    of each adds it (``Widget._post_register``): CSS already there is left as it is. False where Textual's internals
    are not as expected (nothing added: the first mount adds it, as before)."""
    get_default_css, css_bases = getattr(DOMNode, "_get_default_css", None), getattr(DOMNode, "_css_bases", None)
    if get_default_css is None or css_bases is None:
        return False
    for cls in classes:
        # what an instance's _get_default_css reads of it is its classes' chain (_node_bases): no instance is made
        for read_from, css, tie_breaker, scope in get_default_css(SimpleNamespace(_node_bases=css_bases(cls))):
            stylesheet.add_source(css, read_from=read_from, is_default_css=True, tie_breaker=tie_breaker, scope=scope)
    return True


def css_variables(app: App, theme: Theme) -> dict[str, str]:
    """The CSS variables ``App.get_css_variables`` gives with ``theme`` the app's theme (without setting it, nor
    the app's ``theme_variables``): what a change to ``theme`` parses the stylesheet with."""
    return {**app.get_theme_variable_defaults(), **theme.to_color_system().generate(), **theme.variables}


def batch_restyles(stylesheet: Stylesheet) -> None:
    """Make ``stylesheet.update_nodes`` (what restyles a screen: a theme change, a screen shown after one) refresh
    each node once (:func:`batched_refreshes`)."""
    if not {"layout", "children", "parent"} <= inspect.signature(Styles.refresh).parameters.keys():
        return  # another Textual: its own refreshes, unbatched
    update_nodes: Callable[..., None] = stylesheet.update_nodes

    def batched(nodes: Iterable[DOMNode], animate: bool = False) -> None:
        with batched_refreshes():
            update_nodes(nodes, animate=animate)

    stylesheet.update_nodes = batched  # type: ignore[method-assign]


class HiddenPanes:
    """The children of a ``ContentSwitcher`` it does not show (the panes behind the one shown) left out of a restyle
    of the screen (``Stylesheet.update``: a theme change, new CSS), and restyled when shown or while the app is idle
    (:meth:`restyle_one`). A pane left out is restyled whole, as Textual's restyle would have done it: a hidden
    pane is not laid out, so what its styles are computed from (its classes, its state, the rules) is what it was
    when it was left out, or newer; the pane itself is restyled with the rest (it holds the ``display`` the switcher
    sets). A restyle of a node and what is under it (``App.update_styles``, a class or focus change) still reaches
    into a hidden pane, as before."""

    def __init__(self, stylesheet: Stylesheet) -> None:
        # parents whose hidden children's subtrees are left out: the switchers, and forms' rows (watch_rows)
        self._parents: weakref.WeakSet[DOMNode] = weakref.WeakSet()
        self._stale: weakref.WeakSet[DOMNode] = weakref.WeakSet()  # panes left out of a restyle since their last

        def update(root: DOMNode, animate: bool = False) -> None:  # as Stylesheet.update, less the hidden panes
            stylesheet.update_nodes(self.walk(root, restyling=True), animate=animate)

        if hasattr(stylesheet, "update_nodes"):
            stylesheet.update = update  # type: ignore[method-assign]

    def watch(self, switcher: ContentSwitcher) -> None:
        """Leave ``switcher``'s hidden children out of restyles; a child it shows is restyled before it is drawn
        (the switcher's ``current`` changes, and the child's ``display`` with it, before the next frame)."""
        self._parents.add(switcher)
        switcher.watch(switcher, "current", self.restyle_shown, init=False)

    def watch_rows(self, parent: DOMNode) -> None:
        """Leave what is under ``parent``'s hidden children (a form's rows that show only in some mode: the
        Extraction pane's SLURM fields) out of restyles, as a switcher's hidden panes. Whatever shows one calls
        :meth:`restyle_shown` before the next frame."""
        self._parents.add(parent)

    def walk(self, root: DOMNode, restyling: bool = False) -> list[DOMNode]:
        """``root`` and the nodes under it, depth first as ``walk_children``, less what is under a hidden pane: what
        a restyle of ``root`` restyles. ``restyling``: they are restyled, the panes left out are noted."""
        nodes: list[DOMNode] = []
        stack = [iter((root,))]
        while stack:
            node = next(stack[-1], None)
            if node is None:
                stack.pop()
                continue
            nodes.append(node)
            if node._parent in self._parents:
                if not node.display:
                    if restyling:
                        self._stale.add(node)
                    continue
                if restyling:
                    self._stale.discard(node)  # restyled whole here
            stack.append(iter(node.children))
        return nodes

    def restyle_shown(self) -> None:
        """Restyle what was left out under a child shown since."""
        for pane in [pane for pane in self._stale if pane.display]:
            self._restyle(pane)

    def _restyle(self, pane: DOMNode) -> None:
        self._stale.discard(pane)
        if pane.is_attached:
            pane.app.stylesheet.update_nodes(pane.walk_children(with_self=False), animate=False)

    @property
    def stale(self) -> bool:
        """Whether a pane is still to be restyled."""
        return bool(self._stale)

    def restyle_one(self) -> None:
        """Restyle one pane left out (while the app is idle: a pane key then finds it styled)."""
        pane = next(iter(self._stale), None)
        if pane is not None:
            self._restyle(pane)


_FOCUS_STATES = frozenset({"focus", "blur"})


def _focus_ancestor_selectors(stylesheet: Stylesheet) -> list:
    """The selector parts, not last in their selector, that ask whether a node has the focus (``Tabs:focus .x``):
    the only rules that style a node by whether something above it has the focus. Kept per parse of the rules."""
    rules = stylesheet.rules
    memo = getattr(stylesheet, "_memtui_focus_ancestors", None)
    if memo is not None and memo[0] is rules:
        return memo[1]
    parts = [
        part
        for rule in rules
        for selector_set in rule.selector_set
        for part in selector_set.selectors[:-1]
        if part.pseudo_classes & _FOCUS_STATES
    ]
    stylesheet._memtui_focus_ancestors = (rules, parts)  # type: ignore[attr-defined]
    return parts


class RestyleSelfOnFocus:
    """For a pane (a container of many widgets) that takes the focus: Textual restyles the widget gaining or losing
    the focus *and every widget under it* (for rules like ``Tabs:focus .underline--bar``); where no rule styles what
    is under this widget by its focus, only the widget itself is restyled. Its own colours changing still refresh
    what is under it (a colour set refreshes the subtree), so the frame drawn is the same. A pane of 50 widgets
    took 60-100 ms of CPU to gain the focus, and as much again to lose it."""

    def watch_has_focus(self, _has_focus: bool) -> None:
        try:
            stylesheet = self.app.stylesheet  # type: ignore[attr-defined]
        except NoActiveAppError:
            return
        parts = _focus_ancestor_selectors(stylesheet)
        if any(part.type == SelectorType.UNIVERSAL or part._check(self) for part in parts):
            super().watch_has_focus(_has_focus)  # type: ignore[misc]
            return
        stylesheet.update_nodes([self], animate=True)
