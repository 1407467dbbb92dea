"""Estimates pane: the CSV export's rows in a sortable table.

Textual's DataTable builds every row up front (seconds for 10,000 rows), so this is a line-API table over the polars
frame: sorting is a polars sort, and only the rows on screen are ever formatted.
"""

from __future__ import annotations

import polars as pl
from rich.segment import Segment
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from memtui.app.fmt import cell
from memtui.app.scrolling import scroll_to_cursor
from memtui.estimate import SCOPES, EstimateResult
from memtui.export import export_frame

HEADER = 1
CELL_LIMIT = 60  # a text cell (a metric name from the panel) is cut to this many characters
GAP = 2  # spaces between columns


def _width(frame: pl.DataFrame, name: str) -> int:
    """Column width from the header and the widest value, without formatting every row."""
    dtype = frame.schema[name]
    series = frame[name]
    if dtype == pl.Boolean:
        body = 5
    elif dtype.is_float():
        body = 11  # '%.5g' of a negative number in exponent form: -1.2346e+05
    elif dtype.is_integer():
        body = max((len(str(v)) for v in (series.min(), series.max()) if v is not None), default=1)
    else:
        body = min(int(series.cast(pl.String).str.len_chars().max() or 1), CELL_LIMIT)
    return max(len(name) + 2, body)  # + 2: room for the sort arrow


class EstimatesTable(ScrollView, can_focus=True):
    """Rows of a polars frame; a row cursor and a column cursor (the sort column is chosen with it)."""

    BINDINGS = [
        Binding("up,k", "move(-1, 0)", "Up", show=False),
        Binding("down,j", "move(1, 0)", "Down", show=False),
        Binding("left,h", "move(0, -1)", "Column left", show=False),
        Binding("right,l", "move(0, 1)", "Column right", show=False),
        Binding("g,home", "first", "First row", show=False),
        Binding("G,end", "last", "Last row", show=False),
        Binding("pageup,ctrl+u", "page(-1)", "Page up", show=False),
        Binding("pagedown,ctrl+d", "page(1)", "Page down", show=False),
        Binding("o", "sort", "Sort", tooltip="Sort by the column under the cursor; again to reverse"),
        Binding("enter", "open", "Show in profile", tooltip="Move the profile cursor to this row's cell"),
    ]

    COMPONENT_CLASSES = {"table--header", "table--header-cursor", "table--cursor", "table--cell-cursor"}

    DEFAULT_CSS = """
    EstimatesTable { background: $background; }
    EstimatesTable > .table--header { color: $text-accent; text-style: bold; }
    EstimatesTable > .table--header-cursor { color: $text; background: $accent 40%; text-style: bold; }
    EstimatesTable > .table--cursor { background: $surface-lighten-1; }
    EstimatesTable > .table--cell-cursor { background: $accent 40%; text-style: bold; }
    """

    sort_by: reactive[str | None] = reactive(None, init=False)
    descending: reactive[bool] = reactive(False, init=False)

    class Open(Message):
        """Enter on a row that is a (cohort, checkpoint) cell."""

        def __init__(self, cohort: int, checkpoint: int) -> None:
            super().__init__()
            self.cohort = cohort
            self.checkpoint = checkpoint

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.frame = pl.DataFrame()
        self._source = pl.DataFrame()
        self._columns: list[str] = []
        self._values: list[list] = []
        self._widths: list[int] = []
        self._right: list[bool] = []
        self._offsets: list[int] = []
        self.row = 0
        self.column = 0

    def set_frame(self, frame: pl.DataFrame) -> None:
        self._source = frame
        if self.sort_by is not None and self.sort_by not in frame.columns:
            self.sort_by = None
        if self._columns != frame.columns:
            self._widths = [_width(frame, c) for c in frame.columns] if frame.width else []
            self._columns = list(frame.columns)
            self._right = [frame.schema[c].is_numeric() for c in frame.columns]
            self._offsets = [sum(self._widths[:i]) + GAP * i for i in range(len(self._widths))]
        self._apply_sort()

    def _apply_sort(self) -> None:
        frame = self._source
        if self.sort_by is not None and frame.height:
            frame = frame.sort(self.sort_by, descending=self.descending, nulls_last=True, maintain_order=True)
        self.frame = frame
        self._values = [frame[c].to_list() for c in frame.columns]
        total = (self._offsets[-1] + self._widths[-1]) if self._widths else 0
        self.virtual_size = Size(total, HEADER + frame.height)
        self.row = min(self.row, max(frame.height - 1, 0))
        self.column = min(self.column, max(len(self._columns) - 1, 0))
        self._keep_cursor_visible()
        self.refresh()

    def watch_sort_by(self) -> None:
        self._apply_sort()

    def watch_descending(self) -> None:
        self._apply_sort()

    def row_values(self, row: int) -> dict:
        return {c: self._values[i][row] for i, c in enumerate(self._columns)}

    # ---- rendering --------------------------------------------------------------------------------------------

    def _line(self, texts: list[str], styles: list) -> Strip:
        segments = []
        gap = Segment(" " * GAP, styles[-1])
        for i, (text, width, right) in enumerate(zip(texts, self._widths, self._right, strict=True)):
            text = text[:width]
            segments.append(Segment(text.rjust(width) if right else text.ljust(width), styles[i]))
            segments.append(gap)
        return Strip(segments)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        if not self._columns:
            return Strip.blank(width, base)
        sx, sy = self.scroll_offset
        if y < HEADER:
            head = self.get_component_rich_style("table--header")
            mark = self.get_component_rich_style("table--header-cursor")
            arrow = "▼" if self.descending else "▲"
            texts = [(f"{arrow} " if c == self.sort_by else "") + c for c in self._columns]
            styles = [mark if i == self.column else head for i in range(len(texts))] + [head]
        else:
            row = sy + y - HEADER
            if row >= self.frame.height:
                return Strip.blank(width, base)
            texts = [cell(values[row]) for values in self._values]
            style = base
            if row == self.row:
                style = base + self.get_component_rich_style("table--cursor")
            styles = [style] * (len(texts) + 1)
            if row == self.row:
                styles[self.column] = base + self.get_component_rich_style("table--cell-cursor")
        return self._line(texts, styles).crop(sx, sx + width).extend_cell_length(width, base)

    # ---- cursor -----------------------------------------------------------------------------------------------

    def move_to(self, row: int, column: int) -> None:
        row = min(max(row, 0), max(self.frame.height - 1, 0))
        column = min(max(column, 0), max(len(self._columns) - 1, 0))
        if (row, column) != (self.row, self.column):
            self.row, self.column = row, column
            self._keep_cursor_visible()
            self.refresh()

    def _keep_cursor_visible(self) -> None:
        if not self._columns:
            return
        region = self.scrollable_content_region
        x0 = self._offsets[self.column]
        scroll_to_cursor(
            self, x0, x0 + self._widths[self.column], self.row, region.width, max(1, region.height - HEADER)
        )

    def on_resize(self) -> None:
        self._keep_cursor_visible()

    def action_move(self, rows: int, columns: int) -> None:
        self.move_to(self.row + rows, self.column + columns)

    def action_first(self) -> None:
        self.move_to(0, self.column)

    def action_last(self) -> None:
        self.move_to(self.frame.height - 1, self.column)

    def action_page(self, direction: int) -> None:
        self.move_to(self.row + direction * max(1, self.scrollable_content_region.height - HEADER - 1), self.column)

    def action_sort(self) -> None:
        if not self._columns:
            return
        name = self._columns[self.column]
        if self.sort_by == name:
            self.descending = not self.descending
        else:
            self.descending = False
            self.sort_by = name

    def action_open(self) -> None:
        if not self.frame.height or "cohort" not in self._columns:
            return
        values = self.row_values(self.row)
        if values.get("cohort") is not None and values.get("checkpoint") is not None:
            self.post_message(self.Open(int(values["cohort"]), int(values["checkpoint"])))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or not self._columns:
            return
        sx, sy = self.scroll_offset
        x = sx + offset.x
        column = max(i for i, start in enumerate(self._offsets) if start <= x) if x >= 0 else 0
        if offset.y < HEADER:
            self.move_to(self.row, column)
            self.action_sort()
        else:
            self.move_to(sy + offset.y - HEADER, column)


class EstimatesPane(Vertical):
    """The table plus a line saying what it shows; significant only by default, like `memtui export`."""

    BINDINGS = [
        Binding("s", "toggle_significant", "Significant only", tooltip="Show only significant rows, or all"),
        Binding("t", "next_scope", "Scope", tooltip="Profile / instantaneous / persistent / residual"),
    ]

    significant_only: reactive[bool] = reactive(True, init=False)
    scope: reactive[str] = reactive("profile", init=False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: EstimateResult | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="estimates-info", markup=False)
        yield EstimatesTable(id="estimates-table")

    @property
    def table(self) -> EstimatesTable:
        return self.query_one(EstimatesTable)

    def show(self, result: EstimateResult | None, message: str = "") -> None:
        self.result = result
        info = self.query_one("#estimates-info", Static)
        if result is None:
            self.table.set_frame(pl.DataFrame())
            info.update(message or "No estimate yet.")
            return
        frame = export_frame(result, self.scope, self.significant_only)
        self.table.set_frame(frame)
        total = result.scope(self.scope).height
        which = "significant rows" if self.significant_only else "rows"
        info.update(
            f"{self.scope}: {frame.height} {which} of {total} │ "
            "s all/significant · t scope · o sort by column · enter show in profile"
        )

    def watch_significant_only(self) -> None:
        self.show(self.result)

    def watch_scope(self) -> None:
        self.show(self.result)

    def action_toggle_significant(self) -> None:
        self.significant_only = not self.significant_only

    def action_next_scope(self) -> None:
        self.scope = SCOPES[(SCOPES.index(self.scope) + 1) % len(SCOPES)]
