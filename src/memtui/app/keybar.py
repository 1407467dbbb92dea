"""KeyBar: the screen's keys on one line, drawn as Textual's ``Footer(compact=True)`` draws them, by one widget.

Textual's Footer is a container of one FooterKey widget per shown binding, and it removes and mounts them all
(recomposes) whenever the screen's bindings change: on every focus change, so on every pane switch and every dialog.
Each FooterKey is a node that a theme change restyles (with its two component classes) and that renders on its own;
on the main screen that was ~40 ms of a theme change's ~140 ms of CPU (issue 33 §5.11). KeyBar draws the same line
(the same text, the same styles, cut at the same column) from the same bindings in one ``render_line``, and re-draws
it when the bindings change: no child widgets, nothing mounted.

What it copies from textual/widgets/_footer.py (Textual 8), so the line stays cell for cell the same:
- the keys: ``screen.active_bindings``, shown ones only, one per action (the first key bound to it), in order; a run
  of actions in one ``Binding.Group`` as the group's keys then its description; the command palette's key docked on
  the right (``show_command_palette``), behind a ``vkey`` border;
- the look: the same CSS variables through component classes that stand for FooterKey (``keybar--item``, with its
  ``:hover`` and ``.-disabled`` states as ``keybar--hover`` and ``keybar--disabled``), its two components
  (``keybar--key``, ``keybar--description``), the group's label and the palette key's border; each part's style is
  layered over the bar's ancestors exactly as ``DOMNode.rich_style`` layers a FooterKey's (``_walk``); the gaps
  between keys (the compact Footer's margins) have only the bar's background, as the container's blank area had;
- clicks: a key's cells (its border too) press its key (``app.simulate_key``), or ring the bell when it is disabled;
  a gap does nothing; the key under the mouse is drawn hovered, shows its tooltip and the pointer shape;
- the mouse wheel scrolls a line wider than the bar sideways, as the Footer's scrolling container did.

Text from bindings is drawn as text, never as markup (FooterKey drew it as a Rich ``Text`` too); a group's
description, which Footer drew as a Label (markup), is drawn as text here (our bindings have no groups).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual._border import BORDER_CHARS
from textual.color import Color
from textual.content import Content
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.binding import Binding
    from textual.screen import Screen

# The compact Footer's margins (textual/widgets/_footer.py's CSS, Footer.-compact): a key's right margin; a grouped
# key's margins in a group that is not compact (none in a compact one); a compact group's right margin and padding.
KEY_MARGIN_RIGHT = 1
GROUPED_MARGIN = 1
COMPACT_GROUP_MARGIN_RIGHT = 1
COMPACT_GROUP_PADDING_LEFT = 1


@dataclass(frozen=True)
class BarKey:
    """One key as FooterKey held it: what it shows, what a click presses, and its state."""

    key: str
    key_display: str
    description: str
    action: str
    enabled: bool
    tooltip: str


@dataclass(frozen=True)
class Box:
    """One of the Footer's children in its horizontal layout: a key, a group of keys, or a group's label; its
    margins collapse with its neighbours' (the larger of the two), as Textual's horizontal layout does."""

    kind: str  # "key", "group" or "label"
    margin_left: int = 0
    margin_right: int = 0
    key: BarKey | None = None
    keys: tuple[BarKey, ...] = ()  # a group's keys
    text: str = ""  # a label's text
    compact: bool = False  # a group's Binding.Group.compact


def _bar_key(app, binding: Binding, enabled: bool, description: str, tooltip: str) -> BarKey:
    return BarKey(binding.key, app.get_key_display(binding), description, binding.action, enabled, tooltip)


def bar_boxes(screen: Screen, show_command_palette: bool) -> tuple[tuple[Box, ...], BarKey | None]:
    """The boxes Footer.compose yields for ``screen`` (compact), in order, and the command palette's key (docked
    right) or None."""
    app = screen.app
    active = screen.active_bindings
    action_to_bindings: defaultdict[str, list[tuple[Binding, bool, str]]] = defaultdict(list)
    for _, binding, enabled, tooltip in active.values():
        if binding.show:
            action_to_bindings[binding.action].append((binding, enabled, tooltip))
    boxes: list[Box] = []
    for group, runs in groupby(action_to_bindings.values(), lambda multi: multi[0][0].group):
        runs = list(runs)
        if group is not None and len(runs) > 1:
            keys = []
            for multi in runs:
                binding, enabled, tooltip = multi[0]
                keys.append(_bar_key(app, binding, enabled, "", tooltip or binding.description))
            boxes.append(
                Box(
                    "group",
                    margin_right=COMPACT_GROUP_MARGIN_RIGHT if group.compact else 0,
                    keys=tuple(keys),
                    compact=group.compact,
                )
            )
            boxes.append(Box("label", text=group.description))
        else:
            for multi in runs:
                binding, enabled, tooltip = multi[0]
                key = _bar_key(app, binding, enabled, binding.description, tooltip)
                boxes.append(Box("key", margin_right=KEY_MARGIN_RIGHT, key=key))
    palette = None
    if show_command_palette and app.ENABLE_COMMAND_PALETTE:
        found = active.get(app.COMMAND_PALETTE_BINDING)
        if found is not None:
            _, binding, enabled, _ = found
            palette = _bar_key(app, binding, enabled, binding.description, binding.tooltip or binding.description)
    return tuple(boxes), palette


# a node's walk so far: its background, its colour, its style, its opacity (Textual's DOMNode.rich_style keeps these)
ROOT = (Color(0, 0, 0, 0), Color(255, 255, 255, 0), Style(), 1.0)


def _walk(chain, state=ROOT) -> tuple[Color, Color, Style, float]:
    """Walk ``state`` down through ``chain`` (styles, parent first): the loop of Textual's ``DOMNode.rich_style``,
    over a chain that may hold component styles (a FooterKey's part under the FooterKey)."""
    background, color, style, opacity = state
    for styles in chain:
        has_rule = styles.has_rule
        opacity *= styles.opacity
        if has_rule("background"):
            text_background = background + styles.background.tint(styles.background_tint)
            background += styles.background.tint(styles.background_tint).multiply_alpha(opacity)
        else:
            text_background = background
        if has_rule("color"):
            color = styles.color
        style += styles.text_style
        if has_rule("auto_color") and styles.auto_color:
            color = text_background.get_contrast_text(color.a)
    return background, color, style, opacity


def _rich(state) -> Style:
    """The Rich style at the end of a walk (the end of ``DOMNode.rich_style``)."""
    background, color, style, _ = state
    return style + Style.from_color(
        (background + color).rich_color if (background.a or color.a) else None,
        background.rich_color if background.a else None,
    )


class Looks:
    """The styles of one drawing of the line: the bar's ancestors walked once, each state of a key (hovered,
    disabled) once, not once per key."""

    def __init__(self, bar: KeyBar) -> None:
        self.bar = bar
        self.base = _walk([node.styles for node in reversed(bar.ancestors_with_self)])
        background = self.base[0]
        # the bar's blank cells: only its background (a container's blank area, as between FooterKeys)
        self.gap = Style(bgcolor=background.rich_color) if background.a else Style()
        self._keys: dict[tuple[bool, bool], tuple] = {}

    def key(self, hover: bool, enabled: bool) -> tuple[Color, Style, Style]:
        """A FooterKey's background and its key's and description's styles (each on the FooterKey's own style, as
        FooterKey.render stylized them), for its state."""
        if (hover, enabled) not in self._keys:
            names = ["keybar--item"] + ["keybar--hover"] * hover + ["keybar--disabled"] * (not enabled)
            item = _walk([self.bar.get_component_styles(*names)], self.base)
            item_style = _rich(item)
            key = item_style + _rich(_walk([self.bar.get_component_styles("keybar--key")], item))
            description = item_style + _rich(_walk([self.bar.get_component_styles("keybar--description")], item))
            self._keys[hover, enabled] = (item[0], key, description)
        return self._keys[hover, enabled]

    def label(self) -> Style:
        return _rich(_walk([self.bar.get_component_styles("keybar--label")], self.base))


class KeyBar(Widget, can_focus=False):
    """The screen's shown bindings on one line, as ``Footer(compact=True)`` shows them (the module says how)."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {
        "keybar--item",
        "keybar--hover",
        "keybar--disabled",
        "keybar--key",
        "keybar--description",
        "keybar--label",
        "keybar--palette",
    }
    # Footer's and FooterKey's CSS (textual/widgets/_footer.py), its rules moved onto the components
    DEFAULT_CSS = """
    KeyBar {
        color: $footer-foreground;
        background: $footer-background;
        dock: bottom;
        height: 1;
        width: 1fr;
        & > .keybar--item {
            background: $footer-item-background;
        }
        & > .keybar--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        & > .keybar--disabled {
            text-style: dim;
        }
        & > .keybar--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
            padding: 0;
        }
        & > .keybar--description {
            padding: 0 0 0 1;
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        & > .keybar--label {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        & > .keybar--palette {
            border-left: vkey $foreground 20%;
        }
    }
    """

    def __init__(
        self,
        *,
        show_command_palette: bool = True,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.show_command_palette = show_command_palette
        self._boxes: tuple[Box, ...] = ()
        self._palette: BarKey | None = None
        # where the keys were drawn: the flow's keys' cells (before the cut), the flow's width (where the docked
        # palette key starts) and the palette key's cells
        self._spans: list[tuple[int, int, BarKey]] = []
        self._flow_width = 0
        self._palette_span: tuple[int, int] | None = None
        self._hover: BarKey | None = None
        self._scroll_x = 0
        self._flow_total = 0  # the flow's width in cells, uncut (how far it scrolls)
        self._stale = False  # the screen's bindings changed since they were read

    # ---- the bindings ----------------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        """The screen's bindings changed (a focus change, a check_action's answer): they are read when the line is
        next drawn, once however many changes came before it (Footer recomposed after the next refresh, once per
        change), so the frame that shows a focus change shows its keys."""
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self._stale = True
            if screen is not screen.app.screen:  # under a dialog, seen dimmed: drawn again only if the keys differ
                before = (self._boxes, self._palette)  # (the panes dimmed ahead stay what the dialog shows)
                self._read_keys()
                if (self._boxes, self._palette) == before:
                    return
            self.refresh()

    def _read_keys(self) -> None:
        """Read the screen's bindings if they changed since they were last read."""
        if not self._stale or not self.is_attached:
            return
        self._stale = False
        read = bar_boxes(self.screen, self.show_command_palette)
        if read == (self._boxes, self._palette):
            return  # the same keys: the same objects, so a key under the mouse stays hovered
        self._boxes, self._palette = read
        if self._hover is not None:  # new keys (a Footer mounted new FooterKeys): none hovered until the mouse moves
            self._hover = None
            self.call_later(self._set_hover, None, force=True)  # its tooltip and pointer (not while drawing)

    @property
    def keys(self) -> list[BarKey]:
        """Every key of the line, in order (the palette's last), whether or not it fits."""
        self._read_keys()
        keys: list[BarKey] = []
        for box in self._boxes:
            if box.kind == "key":
                keys.append(box.key)
            keys.extend(box.keys)
        if self._palette is not None:
            keys.append(self._palette)
        return keys

    def visible_keys(self) -> list[BarKey]:
        """The keys drawn whole on the bar as last drawn (not under the palette key), in order (the palette's
        last)."""
        self.render_line(0)
        keys = [key for start, end, key in self._spans if start >= 0 and end <= self._flow_width]
        if self._palette_span is not None and self._palette_span[1] <= self.size.width:
            keys.append(self._palette)
        return keys

    # ---- drawing ---------------------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y != 0:
            return Strip.blank(width, Looks(self).gap)
        self._read_keys()
        return self._draw(width)

    def _key_segments(self, key: BarKey, looks: Looks) -> list[Segment]:
        """What FooterKey.render drew: the key, then its description (each with its padding)."""
        # this key, not one equal to it: the palette's key is in the flow too, and only the one under the mouse lights
        _, key_style, description_style = looks.key(key is self._hover, key.enabled)
        if not key.description:
            return [Segment(key.key_display, key_style)]
        kpad = self.get_component_styles("keybar--key").padding
        dpad = self.get_component_styles("keybar--description").padding
        return [
            Segment(" " * kpad.left + key.key_display + " " * kpad.right, key_style),
            Segment(" " * dpad.left + key.description + " " * dpad.right, description_style),
        ]

    def _box_segments(self, box: Box, looks: Looks) -> list[tuple[list[Segment], BarKey | None]]:
        """A box's runs of cells, each with the key a click there presses (None: a gap or a label)."""
        gap = looks.gap
        if box.kind == "key":
            return [(self._key_segments(box.key, looks), box.key)]
        if box.kind == "label":
            return [([Segment(box.text, looks.label())], None)]
        runs: list[tuple[list[Segment], BarKey | None]] = []
        margin = 0 if box.compact else GROUPED_MARGIN
        if box.compact:
            runs.append(([Segment(" " * COMPACT_GROUP_PADDING_LEFT, gap)], None))
        for key in box.keys:
            # the grouped keys' margins collapse between neighbours: one margin before each and after the last
            if margin:
                runs.append(([Segment(" " * margin, gap)], None))
            runs.append((self._key_segments(key, looks), key))
        if margin and box.keys:
            runs.append(([Segment(" " * margin, gap)], None))
        return runs

    def _flow(self, looks: Looks) -> list[tuple[list[Segment], BarKey | None]]:
        """The Footer's horizontal layout: its boxes with their collapsed margins, from the left edge."""
        runs: list[tuple[list[Segment], BarKey | None]] = []
        previous_right = None
        for box in self._boxes:
            space = box.margin_left if previous_right is None else max(previous_right, box.margin_left)
            if space:
                runs.append(([Segment(" " * space, looks.gap)], None))
            runs.extend(self._box_segments(box, looks))
            previous_right = box.margin_right
        return runs

    def _palette_segments(self, looks: Looks) -> list[Segment]:
        """The palette's key with its left border, drawn as the styles cache draws a FooterKey's border: the border's
        colour over the bar's background, on the key's."""
        key = self._palette
        edge, border_color = self.get_component_styles("keybar--palette").border_left
        segments = self._key_segments(key, looks)
        if edge in ("", "none", "hidden"):
            return segments
        inner, _, _ = looks.key(key is self._hover, key.enabled)
        border = Style.from_color((looks.base[0] + border_color).rich_color, inner.rich_color)
        return [Segment(BORDER_CHARS[edge][1][0], border), *segments]

    def _draw(self, width: int) -> Strip:
        """The line: the flow from the left edge (scrolled), and the palette key docked on the right over it (its
        margin cell shows the flow beneath, as the Footer's did); and where each key landed."""
        looks = Looks(self)
        gap = looks.gap
        runs = self._flow(looks)
        self._flow_total = sum(segment.cell_length for segments, _ in runs for segment in segments)
        self._flow_width = width
        self._palette_span = None
        palette: list[Segment] = []
        if self._palette is not None:
            palette = self._palette_segments(looks)
            palette_width = sum(segment.cell_length for segment in palette)
            # the docked key's width and margin come off the layout's region (how far the flow scrolls)
            self._flow_width = max(0, width - palette_width - KEY_MARGIN_RIGHT)
            self._palette_span = (self._flow_width, self._flow_width + palette_width)
        self._scroll_x = max(0, min(self._scroll_x, self._flow_total - self._flow_width))
        spans: list[tuple[int, int, BarKey]] = []
        segments: list[Segment] = []
        x = -self._scroll_x
        for run, key in runs:
            run_width = sum(segment.cell_length for segment in run)
            if key is not None:
                spans.append((x, x + run_width, key))
            segments.extend(run)
            x += run_width
        self._spans = spans
        flow = Strip(segments).crop(self._scroll_x, self._scroll_x + width).extend_cell_length(width, gap)
        if self._palette_span is None:
            return flow
        start, end = self._palette_span
        return Strip.join([flow.crop(0, start), Strip(palette), flow.crop(end, width)]).crop(0, width)

    # ---- the mouse -------------------------------------------------------------------------------------------

    def key_at(self, x: int) -> BarKey | None:
        """The key drawn at column ``x`` of the bar, if any."""
        if self._palette_span is not None and self._palette_span[0] <= x < self._palette_span[1]:
            return self._palette
        if 0 <= x < self.size.width:
            for start, end, key in self._spans:
                if start <= x < end:
                    return key
        return None

    def on_mouse_down(self, event: events.MouseDown) -> None:
        key = self.key_at(event.x)
        if key is None:
            return
        if key.enabled:
            self.app.simulate_key(key.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._set_hover(self.key_at(event.x))

    def on_leave(self, event: events.Leave) -> None:
        self._set_hover(None)

    def _set_hover(self, key: BarKey | None, force: bool = False) -> None:
        if key is self._hover and not force:
            return
        self._hover = key
        self.styles.pointer = "default" if key is None else "pointer"
        # Content, not str: a tooltip is text, never markup
        self.tooltip = Content(key.tooltip) if key is not None and key.tooltip else None
        self.refresh()

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if self._scroll_by(round(self.app.scroll_sensitivity_x)):
            event.stop()
            event.prevent_default()

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self._scroll_by(-round(self.app.scroll_sensitivity_x)):
            event.stop()
            event.prevent_default()

    def _scroll_by(self, cells: int) -> bool:
        """Scroll a line wider than the bar sideways; whether it moved."""
        scroll_x = max(0, min(self._scroll_x + cells, self._flow_total - self._flow_width))
        if scroll_x == self._scroll_x:
            return False
        self._scroll_x = scroll_x
        self.refresh()
        return True
