"""The memorisation profile as a colour matrix, drawn with Textual's line API.

Rows are cohorts g, columns checkpoints c. A row is rendered as run-length segments of identical cells and cached,
so a paper-size profile (143 x 144) repaints in a few milliseconds; only the cursor row is rebuilt on a move. The
cohort labels (left) and checkpoint labels (top) stay fixed while the matrix scrolls under them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from memtui.app import palette
from memtui.app.fmt import short_step
from memtui.app.paint_style import BaseStylePerPaint
from memtui.app.scrolling import scroll_to_cursor

HEADER = 1  # checkpoint label line
MODES = ("dim", "hide", "show")  # how non-significant post-treatment cells are drawn
MODE_LABEL = {"dim": "dimmed", "hide": "hidden", "show": "shown"}
AVERAGE_MARK = "~"  # after a checkpoint's label: its model is a weight average (EMA, soup, merge), not one model's

# Cell codes: 0 missing, then one block of 2*LEVELS codes per kind (solid, dimmed, pre significant), then flat kinds.
_N = 2 * palette.LEVELS
SOLID, DIMMED, PRE_SIG = 1, 1 + _N, 1 + 2 * _N
HIDDEN, PRE = 1 + 3 * _N, 2 + 3 * _N


@dataclass
class HeatmapData:
    cohorts: np.ndarray  # row steps g
    checkpoints: np.ndarray  # column steps c
    estimate: np.ndarray  # rows x columns, NaN where there is no cell
    significant: np.ndarray  # rows x columns bool
    scale: float  # |tau| at which the colour saturates
    averaged: frozenset = frozenset()  # checkpoint steps whose model is a weight average: labelled with AVERAGE_MARK

    @property
    def pre(self) -> np.ndarray:
        return self.checkpoints[None, :] < self.cohorts[:, None]


def _cell_table(scheme: palette.Scheme) -> tuple[list[Style | None], list[str], list[int | None]]:
    """Style, glyph and ramp level (for the cursor colour) per cell code."""
    styles: list[Style | None] = [None]
    glyphs, lv = [" "], [None]
    for make, glyph in ((palette.solid, " "), (palette.dimmed, palette.DIM_GLYPH), (palette.pre, palette.HATCH)):
        for level in range(_N):
            styles.append(make(scheme, level))
            glyphs.append(glyph)
            lv.append(level if make is palette.solid else None)
    styles += [palette.hidden(scheme), palette.pre(scheme)]
    glyphs += [" ", palette.HATCH]
    lv += [None, None]
    return styles, glyphs, lv


class Heatmap(BaseStylePerPaint, ScrollView, can_focus=True):
    """Cohorts down, checkpoints across; a cursor picks one (g, c) cell."""

    BINDINGS = [
        Binding("up,k", "move(-1, 0)", "Up", show=False),
        Binding("down,j", "move(1, 0)", "Down", show=False),
        Binding("left,h", "move(0, -1)", "Left", show=False),
        Binding("right,l", "move(0, 1)", "Right", show=False),
        Binding("g", "first_row", "First cohort", show=False),
        Binding("G", "last_row", "Last cohort", show=False),
        Binding("home,0", "first_column", "First checkpoint", show=False),
        Binding("end,dollar_sign", "last_column", "Last checkpoint", show=False),
        Binding("pageup,ctrl+u", "page(-1)", "Page up", show=False),
        Binding("pagedown,ctrl+d", "page(1)", "Page down", show=False),
        # out of the footer, which keeps the model key of a suite at 80 columns (? lists it)
        Binding("i", "diagonal", "c=g", show=False, tooltip="Jump to the cohort's instantaneous cell (c = g)"),
        Binding("s", "cycle_mode", "n.s.", tooltip="Dim / hide / show non-significant cells"),
        Binding("plus,equals_sign", "zoom(1)", "Wider", show=False),
        Binding("minus", "zoom(-1)", "Narrower", show=False),
    ]

    COMPONENT_CLASSES = {"heatmap--label", "heatmap--label-cursor", "heatmap--header", "heatmap--empty"}

    DEFAULT_CSS = """
    Heatmap { background: $background; }
    Heatmap > .heatmap--label { color: $text-muted; }
    Heatmap > .heatmap--label-cursor { color: $text; background: $accent 40%; text-style: bold; }
    Heatmap > .heatmap--header { color: $text-muted; }
    Heatmap > .heatmap--empty { color: $text-muted; }
    """

    mode: reactive[str] = reactive("dim")
    cell_width: reactive[int] = reactive(2)

    class CursorMoved(Message):
        def __init__(self, heatmap: Heatmap, row: int, column: int) -> None:
            super().__init__()
            self.heatmap = heatmap
            self.row = row
            self.column = column

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data: HeatmapData | None = None
        self.row = 0
        self.column = 0
        self._codes = np.zeros((0, 0), dtype=np.int64)
        self.scheme = palette.DARK
        self._styles, self._glyphs, self._levels = _cell_table(self.scheme)
        self._rows: dict[int, Strip] = {}
        self._labels: list[str] = []
        self._gutter = 6
        self.painted_at: float | None = None  # first paint of the current data (the speed benchmark waits for it)

    # ---- data -------------------------------------------------------------------------------------------------

    def set_data(self, data: HeatmapData | None) -> None:
        """New profile; keeps the cursor on the same (g, c) when both still exist."""
        old = self.data
        g = c = None
        if old is not None and len(old.cohorts) and len(old.checkpoints):
            g, c = old.cohorts[self.row], old.checkpoints[self.column]
        self.data = data
        self.painted_at = None
        if data is None:
            self._codes = np.zeros((0, 0), dtype=np.int64)
        else:
            self.row = _nearest(data.cohorts, g, self.row)
            self.column = _nearest(data.checkpoints, c, self.column)
            if old is None and len(data.cohorts) and len(data.checkpoints):  # open on the first cohort's c = g cell
                self.column = min(
                    int(np.searchsorted(data.checkpoints, data.cohorts[self.row])), len(data.checkpoints) - 1
                )
            self._labels = [short_step(s) for s in data.cohorts]
        self._recode()
        self.keep_cursor_visible()
        self._announce()

    def _recode(self) -> None:
        """Cell codes for the whole matrix, in numpy; rows are then rendered from runs of equal codes."""
        self._rows.clear()
        d = self.data
        if d is None:
            self.virtual_size = Size(0, 0)
            self.refresh()
            return
        est = d.estimate
        finite = np.isfinite(est)
        lv = palette.levels(np.where(finite, est, 0.0), d.scale)
        pre = d.pre
        sig = d.significant & finite
        post = finite & ~pre
        codes = np.zeros(est.shape, dtype=np.int64)
        if self.mode == "show":
            codes[post] = SOLID + lv[post]
        else:
            codes[post & sig] = SOLID + lv[post & sig]
            rest = post & ~sig
            codes[rest] = (DIMMED + lv[rest]) if self.mode == "dim" else HIDDEN
        codes[finite & pre & ~sig] = PRE
        codes[finite & pre & sig] = PRE_SIG + lv[finite & pre & sig]
        self._codes = codes
        self._gutter = max((len(s) for s in self._labels), default=3) + 2
        self.virtual_size = Size(self._gutter + est.shape[1] * self.cell_width, HEADER + est.shape[0])
        self.refresh()

    def on_mount(self) -> None:
        self._follow_theme()

    def notify_style_update(self) -> None:
        """A new theme: the cached rows hold the old theme's base style, and maybe the other palette."""
        super().notify_style_update()
        self._follow_theme()
        self._rows.clear()

    def _follow_theme(self) -> None:
        scheme = palette.scheme(self.app.current_theme.dark)
        if scheme is not self.scheme:
            self.scheme = scheme
            self._styles, self._glyphs, self._levels = _cell_table(scheme)
            self._rows.clear()
            self.refresh()

    def watch_mode(self) -> None:
        self._recode()

    def watch_cell_width(self) -> None:
        self._recode()
        self.keep_cursor_visible()

    # ---- rendering --------------------------------------------------------------------------------------------

    def _row_strip(self, row: int, cursor: int | None = None) -> Strip:
        if cursor is None and row in self._rows:
            return self._rows[row]
        codes = self._codes[row]
        cw = self.cell_width
        cuts = np.flatnonzero(np.diff(codes)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [len(codes)]))
        segments = []
        base = self.base_style
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            code = int(codes[start])
            style = self._styles[code] or base
            glyph = self._glyphs[code] * cw
            if cursor is not None and start <= cursor < end:
                if cursor > start:
                    segments.append(Segment(glyph * (cursor - start), style))
                mark = "[" + " " * (cw - 2) + "]" if cw >= 2 else "◆"
                mark_colour = palette.cursor_fg(self.scheme, self._levels[code])
                segments.append(Segment(mark, style + Style(color=mark_colour, bold=True)))
                if end > cursor + 1:
                    segments.append(Segment(glyph * (end - cursor - 1), style))
            else:
                segments.append(Segment(glyph * (end - start), style))
        strip = Strip(segments, len(codes) * cw)
        if cursor is None:
            self._rows[row] = strip
        return strip

    def _header_strip(self, sx: int = 0, view: int | None = None) -> Strip:
        """The checkpoint labels over the columns ``sx`` .. ``sx + view`` on screen (the whole matrix by default)."""
        d = self.data
        cw = self.cell_width
        n = len(d.checkpoints)
        width = n * cw
        end = width if view is None else min(width, sx + view)  # the labels stay within what is on screen
        first, last = min(n - 1, -(-sx // cw)), max(0, end // cw - 1)
        labels = [short_step(s) + (AVERAGE_MARK if int(s) in d.averaged else "") for s in d.checkpoints]
        widest = max(len(s) for s in labels) + 1
        stride = max(1, -(-widest // cw))
        # Placed in order of importance, each only where it keeps a space from those already placed: the cursor
        # column's label (highlighted), the first and the last column on screen (so the axis always says where it
        # starts and ends, also when the matrix is wider than the terminal), then evenly spaced ones. A label starts
        # at its column, or ends at the edge of the screen when it would run over.
        order = [self.column, first, last, *range(first + stride, last, stride)]
        taken: list[tuple[int, int]] = []
        chars = [" "] * width
        x0 = x1 = 0
        for col in dict.fromkeys(order):
            text = labels[col][: end - sx]
            x = max(sx, min(col * cw, end - len(text)))
            if col * cw >= end or col * cw + cw <= sx:  # the cursor's column scrolled out of view
                continue
            if any(x < b + 1 and a < x + len(text) + 1 for a, b in taken):
                continue
            taken.append((x, x + len(text)))
            chars[x : x + len(text)] = text
            if col == self.column:
                x0, x1 = x, max(x + len(text), min(width, col * cw + cw))
        line = "".join(chars)
        head = self.get_component_rich_style("heatmap--header")
        mark = self.get_component_rich_style("heatmap--label-cursor")
        return Strip([Segment(line[:x0], head), Segment(line[x0:x1], mark), Segment(line[x1:], head)], width)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.base_style
        d = self.data
        if d is None or not self._codes.size:
            text = " no estimate" if y == 0 else ""
            return Strip([Segment(text, self.get_component_rich_style("heatmap--empty"))]).extend_cell_length(
                width, base
            )
        sy = self.scroll_offset.y
        gw = self._gutter
        sx, data_w = self._window(width)
        if y < HEADER:
            left = Strip([Segment("g╲c".rjust(gw - 1) + " ", self.get_component_rich_style("heatmap--header"))])
            right = self._header_strip(sx, data_w).crop(sx, sx + data_w)
        else:
            row = sy + y - HEADER
            if row >= len(d.cohorts):
                return Strip.blank(width, base)
            label_style = "heatmap--label-cursor" if row == self.row else "heatmap--label"
            left = Strip([Segment(self._labels[row].rjust(gw - 1) + " ", self.get_component_rich_style(label_style))])
            strip = self._row_strip(row, self.column if row == self.row else None)
            right = strip.crop(sx, sx + data_w)
        if self.painted_at is None:
            self.painted_at = time.perf_counter()
        return Strip.join([left, right]).extend_cell_length(width, base)

    def _window(self, width: int) -> tuple[int, int]:
        """The part of the matrix on screen, in whole columns: it starts at the first column wholly scrolled into
        view and ends at the last that fits (the cells left over stay blank). A column cut by an edge would show
        under no label, or under its neighbour's, and read as a cell of its own."""
        sx = self.scroll_offset.x
        cw = self.cell_width
        start = -(-sx // cw) * cw
        end = sx + max(0, width - self._gutter)
        return start, max(0, (end - start) // cw * cw)

    # ---- cursor -----------------------------------------------------------------------------------------------

    @property
    def painted(self) -> bool:
        return self.painted_at is not None

    @property
    def shape(self) -> tuple[int, int]:
        return self._codes.shape if self._codes.ndim == 2 else (0, 0)

    def move_to(self, row: int, column: int) -> None:
        rows, cols = self.shape
        if not rows or not cols:
            return
        row = min(max(row, 0), rows - 1)
        column = min(max(column, 0), cols - 1)
        if (row, column) == (self.row, self.column):
            return
        self.row, self.column = row, column
        self.keep_cursor_visible()
        self.refresh()
        self._announce()

    def _announce(self) -> None:
        self.post_message(self.CursorMoved(self, self.row, self.column))

    def keep_cursor_visible(self) -> None:
        if self.data is None:
            return
        region = self.scrollable_content_region
        x0 = self.column * self.cell_width
        width, height = max(1, region.width - self._gutter), max(1, region.height - HEADER)
        scroll_to_cursor(self, x0, x0 + self.cell_width, self.row, width, height)

    def on_resize(self) -> None:
        self.keep_cursor_visible()

    def action_move(self, rows: int, columns: int) -> None:
        self.move_to(self.row + rows, self.column + columns)

    def action_first_row(self) -> None:
        self.move_to(0, self.column)

    def action_last_row(self) -> None:
        self.move_to(self.shape[0] - 1, self.column)

    def action_first_column(self) -> None:
        self.move_to(self.row, 0)

    def action_last_column(self) -> None:
        self.move_to(self.row, self.shape[1] - 1)

    def action_page(self, direction: int) -> None:
        page = max(1, self.scrollable_content_region.height - HEADER - 1)
        self.move_to(self.row + direction * page, self.column)

    def action_diagonal(self) -> None:
        if self.data is not None and len(self.data.cohorts):
            g = self.data.cohorts[self.row]
            self.move_to(self.row, int(np.searchsorted(self.data.checkpoints, g)))

    def action_cycle_mode(self) -> None:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]

    def action_zoom(self, step: int) -> None:
        self.cell_width = min(6, max(1, self.cell_width + step))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or self.data is None:
            return
        sy = self.scroll_offset.y
        sx, shown = self._window(self.scrollable_content_region.width)
        if self._gutter <= offset.x < self._gutter + shown and offset.y >= HEADER:
            self.move_to(sy + offset.y - HEADER, (sx + offset.x - self._gutter) // self.cell_width)


def _nearest(steps: np.ndarray, value, fallback: int) -> int:
    """Index of ``value`` in ``steps`` if present, else the fallback index clamped into range."""
    if not len(steps):
        return 0
    if value is not None:
        idx = int(np.searchsorted(steps, value))
        if idx < len(steps) and steps[idx] == value:
            return idx
    return min(max(fallback, 0), len(steps) - 1)
