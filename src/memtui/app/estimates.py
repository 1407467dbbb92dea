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

from memtui.app.fmt import cell, float_format
from memtui.app.paint_style import BaseStylePerPaint
from memtui.app.scrolling import scroll_to_cursor
from memtui.core.text import clean
from memtui.estimation.estimate import SCOPES, EstimateResult
from memtui.report.export import export_frame

HEADER = 1
CELL_LIMIT = 60  # a text cell (a metric name from the panel) is cut to this many characters
GAP = 2  # spaces between columns
# the same for every row of one estimate: said once in the line above the table instead of taking ~35 columns
CONSTANT = ("metric", "estimator", "scope", "alpha", "draws", "seed", "band")
# stay put while the rest scrolls sideways: they say which cell a row is
FIXED = ("cohort", "checkpoint")
# the estimate and its inference first, so that they are on screen at 80 columns; the data behind them after
ORDER = (
    "cohort", "checkpoint", "event_time", "estimate", "band_low", "band_high", "significant", "std_error",
    "ci_low", "ci_high", "analytic_se", "pre_treatment", "n_treated", "n_control", "n_folded", "small_group",
)  # fmt: skip


# short headers for the CSV's long column names, so that the estimate, its band and its significance fit 80 columns
HEADERS = {"checkpoint": "ckpt", "event_time": "c−g", "significant": "sig", "std_error": "SE",
           "pre_treatment": "pre", "small_group": "small", "analytic_se": "analytic SE"}  # fmt: skip


def header(name: str) -> str:
    return HEADERS.get(name, name)


def table_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """The export rows as the table shows them: constant columns out, the rest in ORDER (unknown ones last)."""
    keep = [c for c in ORDER if c in frame.columns]
    keep += [c for c in frame.columns if c not in keep and c not in CONSTANT]
    return frame.select(keep)


def _spec(frame: pl.DataFrame, name: str) -> str | None:
    """The column's float format (one precision for every row), from its largest magnitude."""
    if not frame.schema[name].is_float():
        return None
    finite = frame[name].filter(frame[name].is_finite())
    return float_format(float(finite.abs().max()) if finite.len() else None)


def _width(frame: pl.DataFrame, name: str, spec: str | None) -> int:
    """Column width from the header and the widest value, without formatting every row."""
    dtype, series = frame.schema[name], frame[name]
    numeric = dtype.is_float() or dtype.is_integer()
    text = not numeric and dtype != pl.Boolean
    longest = series.cast(pl.String).str.len_chars().max() if text else None
    lo, hi = (series.min(), series.max()) if numeric else (None, None)
    return _fitted(name, dtype, lo, hi, longest, spec)


def _fitted(name: str, dtype: pl.DataType, lo, hi, longest, spec: str | None) -> int:
    """A column's width from its statistics: its extremes (numbers), its longest value (text)."""
    if dtype == pl.Boolean:
        body = 5
    elif dtype.is_float():
        extremes = [v for v in (lo, hi) if v is not None]
        body = max(max((len(cell(float(v), spec)) for v in extremes), default=3), 3)  # 3: NaN
    elif dtype.is_integer():
        body = max((len(str(v)) for v in (lo, hi) if v is not None), default=1)
    else:
        body = min(int(longest or 1), CELL_LIMIT)
    return max(len(header(name)) + 2, body)  # + 2: room for the sort arrow


def column_formats(frame: pl.DataFrame) -> tuple[list[str | None], list[int]]:
    """Each column's float format (``_spec``) and width (``_width``), from one pass of polars over the frame: the
    statistics they need (a float column's largest finite magnitude, each column's extremes, a text column's longest
    value) are one ``select``, not a few polars calls per column (a table of 20 columns shown on its pane's key spent
    15 ms in them)."""
    stats: list[pl.Expr] = []
    for i, name in enumerate(frame.columns):
        dtype, col = frame.schema[name], pl.col(name)
        if dtype.is_float():
            stats.append(col.filter(col.is_finite()).abs().max().alias(f"{i}a"))
        if dtype.is_float() or dtype.is_integer():
            stats += [col.min().alias(f"{i}n"), col.max().alias(f"{i}x")]
        elif dtype != pl.Boolean:
            stats.append(col.cast(pl.String).str.len_chars().max().alias(f"{i}s"))
    row = frame.select(stats).row(0, named=True) if stats else {}
    specs: list[str | None] = []
    widths: list[int] = []
    for i, name in enumerate(frame.columns):
        dtype = frame.schema[name]
        largest = row.get(f"{i}a")
        spec = float_format(None if largest is None else float(largest)) if dtype.is_float() else None
        specs.append(spec)
        widths.append(_fitted(name, dtype, row.get(f"{i}n"), row.get(f"{i}x"), row.get(f"{i}s"), spec))
    return specs, widths


class EstimatesTable(BaseStylePerPaint, ScrollView, can_focus=True):
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
        # out of the footer, which keeps the model key of a suite at 80 columns (a header click sorts too; ? lists it)
        Binding(
            "greater_than_sign",
            "sort",
            "Sort",
            show=False,
            tooltip="Sort by the column under the cursor; again to reverse",
        ),  # fmt: skip
        Binding("enter", "open", "Show in profile", show=False, tooltip="Move the profile cursor to this row's cell"),
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
        self._specs: list[str | None] = []
        self._fixed = 0  # how many leading columns stay put
        self._fixed_width = 0
        self.row = 0
        self.column = 0

    def set_frame(self, frame: pl.DataFrame) -> None:
        self._source = frame
        if self.sort_by is not None and self.sort_by not in frame.columns:
            self.sort_by = None
        # widths and precisions from this frame (a new estimate can change a column's magnitude)
        self._specs, self._widths = column_formats(frame)
        self._columns = list(frame.columns)
        self._right = [frame.schema[c].is_numeric() for c in frame.columns]
        self._fixed = next((i for i, c in enumerate(self._columns) if c not in FIXED), len(self._columns))
        self._fixed_width = sum(w + GAP for w in self._widths[: self._fixed])
        # x offsets: fixed columns from 0; the others from 0 of the part that scrolls
        self._offsets = []
        for i in range(len(self._widths)):
            start = 0 if i in (0, self._fixed) else self._offsets[-1] + self._widths[i - 1] + GAP
            self._offsets.append(start)
        self._apply_sort()

    def _apply_sort(self) -> None:
        frame = self._source
        if self.sort_by is not None and frame.height:
            frame = frame.sort(self.sort_by, descending=self.descending, nulls_last=True, maintain_order=True)
        self.frame = frame
        self._values = [frame[c].to_list() for c in frame.columns]
        scrolling = (self._offsets[-1] + self._widths[-1]) if len(self._widths) > self._fixed else 0
        self.virtual_size = Size(self._fixed_width + scrolling, HEADER + frame.height)
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

    def _line(self, texts: list[str], styles: list, columns: range) -> Strip:
        segments = []
        gap = Segment(" " * GAP, styles[-1])
        for i in columns:
            text, width = texts[i][: self._widths[i]], self._widths[i]
            segments.append(Segment(text.rjust(width) if self._right[i] else text.ljust(width), styles[i]))
            segments.append(gap)
        return Strip(segments)

    def _split(self, texts: list[str], styles: list, sx: int, width: int) -> Strip:
        """The fixed columns as they are, then the others scrolled by ``sx``: only those on screen are drawn (the
        line of every column, cropped, was most of a pane key's drawing of the table)."""
        fixed = self._line(texts, styles, range(self._fixed))
        end = sx + max(0, width - self._fixed_width)
        shown = [i for i in range(self._fixed, len(self._columns))
                 if self._offsets[i] < end and self._offsets[i] + self._widths[i] + GAP > sx]  # fmt: skip
        if not shown:
            return Strip.join([fixed, Strip([])])
        start = self._offsets[shown[0]]
        rest = self._line(texts, styles, range(shown[0], shown[-1] + 1)).crop(sx - start, end - start)
        return Strip.join([fixed, rest])

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.base_style
        if not self._columns:
            return Strip.blank(width, base)
        sx, sy = self.scroll_offset
        if y < HEADER:
            head = self.get_component_rich_style("table--header")
            mark = self.get_component_rich_style("table--header-cursor")
            arrow = "▼" if self.descending else "▲"
            texts = [(f"{arrow} " if c == self.sort_by else "") + header(c) for c in self._columns]
            styles = [mark if i == self.column else head for i in range(len(texts))] + [head]
        else:
            row = sy + y - HEADER
            if row >= self.frame.height:
                return Strip.blank(width, base)
            texts = [cell(values[row], spec) for values, spec in zip(self._values, self._specs, strict=True)]
            style = base
            if row == self.row:
                style = base + self.get_component_rich_style("table--cursor")
            styles = [style] * (len(texts) + 1)
            if row == self.row:
                styles[self.column] = base + self.get_component_rich_style("table--cell-cursor")
        return self._split(texts, styles, sx, width).crop(0, width).extend_cell_length(width, base)

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
        if self.column < self._fixed:  # always on screen: scroll only vertically
            x0, x1 = self.scroll_offset.x, self.scroll_offset.x
        else:
            x0 = self._offsets[self.column]
            x1 = x0 + self._widths[self.column]
        width = max(1, region.width - self._fixed_width)
        scroll_to_cursor(self, x0, x1, self.row, width, max(1, region.height - HEADER))

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
        if offset.x < self._fixed_width:
            starts = list(enumerate(self._offsets[: self._fixed]))
            x = offset.x
        else:
            starts = list(enumerate(self._offsets))[self._fixed :]
            x = sx + offset.x - self._fixed_width
        column = max((i for i, start in starts if start <= x), default=0)
        if offset.y < HEADER:
            self.move_to(self.row, column)
            self.action_sort()
        else:
            self.move_to(sy + offset.y - HEADER, column)


def info_variants(result: EstimateResult, scope: str, shown: int, significant_only: bool) -> list[str]:
    """The line above the table, fullest first: the rows shown out of the rows the table has for the scope (the
    significant ones of those it shows with n.s. on: persistent is c > g there, never the placebo event times), then
    the settings every row shares, dropping the least needed first so that the count and the metric stay whole."""
    total = export_frame(result, scope, significant_only=False).height  # rows the table can show, never more
    which = "significant rows" if significant_only else "rows"
    s = result.settings
    metric = clean(s.metric, 60)
    head = f"{scope}: {shown} {which} of {total}"
    tails = [
        f"{metric} · {s.estimator} · α {s.alpha:g} · {s.draws} draws · seed {s.seed} · {s.band} band",
        f"{metric} · {s.estimator} · α {s.alpha:g} · {s.draws} draws · {s.band}",
        f"{metric} · {s.estimator} · α {s.alpha:g}",
        metric,
    ]
    return [f"{head} │ {tail}" for tail in tails] + [f"{scope}: {shown} of {total}"]


class EstimatesPane(Vertical):
    """The table plus a line saying what it shows; significant only by default, like `memtui export`."""

    BINDINGS = [
        Binding("s", "toggle_significant", "n.s.", tooltip="Hide / show non-significant rows"),
        Binding("t", "next_scope", "Scope", tooltip="Profile / instantaneous / persistent / residual"),
    ]

    significant_only: reactive[bool] = reactive(True, init=False)
    scope: reactive[str] = reactive("profile", init=False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: EstimateResult | None = None
        self._info: list[str] = []  # the line above the table, fullest wording first

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
        frame = table_frame(export_frame(result, self.scope, self.significant_only))
        self.table.set_frame(frame)
        self._info = info_variants(result, self.scope, frame.height, self.significant_only)
        self._show_info()

    def on_resize(self) -> None:
        self._show_info()

    def _show_info(self) -> None:
        """The fullest wording of the line above the table that fits its width."""
        info = self.query_one("#estimates-info", Static)
        if self.result is None or not self._info:
            return
        width = info.size.width - 2 if info.size.width > 2 else 10_000
        info.update(next((text for text in self._info if len(text) <= width), self._info[-1]))

    def watch_significant_only(self) -> None:
        self.show(self.result)

    def watch_scope(self) -> None:
        self.show(self.result)

    def action_toggle_significant(self) -> None:
        self.significant_only = not self.significant_only

    def action_next_scope(self) -> None:
        self.scope = SCOPES[(SCOPES.index(self.scope) + 1) % len(SCOPES)]
