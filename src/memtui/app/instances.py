"""The Instances screens: the instances of the heatmap's cursor cell ranked by their own score, and one instance.

``InstancesScreen`` lists the cell's instances best first (``estimation.instances``: each one's DiD contrast, whose
mean over the cohort is the cell's τ) with their p_ctrl and text. Like the workbench, it splits by a covariate: ``b``
picks the split spec (none first, then ``by_view.by_options``), ``v`` the group listed, whose instances are scored
against the group's own never-trained ones (so their mean is the group's τ, its heatmap cell); opened from a split
heatmap it starts on the group shown. Enter opens ``InstanceScreen``: the instance's
text wrapped to the terminal, its path across checkpoints against the never-trained instances' spread, and, where
the panel stores per-token scores, each token coloured by the log-probability it gained across its treatment.
Both screens own their keys; their workers post the typed messages below. Opened from the Profile pane (its
``action_instances``) with :func:`open_cell`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from memtui.app import palette, token_colours
from memtui.app.fmt import short_step
from memtui.app.keybar import KeyBar
from memtui.app.plots import BandPlot, Series
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.panel.model import Panel

LISTED = 200  # instances listed (decoding every one of a paper-size cohort would take long and help nobody)
DESCRIPTIVE = "p_ctrl: share of never-trained texts scoring as high (descriptive, not a population estimate)"


@dataclass
class InstancesReady(Message):
    """The list worker's outcome for (cohort, checkpoint) and the group: the rows best first, or the one-line
    reason."""

    cohort: int
    checkpoint: int
    group: tuple[str, str]
    rows: list
    n_scored: int = 0
    n_controls: int = 0
    decoder: object = None
    error: str = ""


@dataclass
class InstanceReady(Message):
    """The detail worker's outcome for one instance: its path, its tokens' gains (None: no per-token scores)."""

    id: int
    path: object = None
    gain: np.ndarray | None = None
    error: str = ""  # no path (the instance cannot be scored)
    note: str = ""  # the per-token scores could not be read (the path is still shown)


def open_cell(app, panel: Panel, metric: str, cohort: int, checkpoint: int, split=None) -> None:
    """Push the Instances screen for cell (cohort, checkpoint), or say in a notice why a cell has none. ``split``:
    the heatmap's (``ByResult``, ``View``) where it is split by group: the list starts on the group shown (a
    difference's first group)."""
    if checkpoint < cohort:
        app.notify(
            f"g {cohort}, c {checkpoint} is a pre-treatment (placebo) cell: its instances have not been trained on "
            "yet. Move to c ≥ g.",
            severity="warning",
            markup=False,
        )
        return
    by, group = (split[0].spec, split[1].a) if split is not None else ("", "")
    app.push_screen(InstancesScreen(panel, metric, cohort, checkpoint, by, group))


class InstancesScreen(Screen[None]):
    """The cell's instances, best first; Enter opens one."""

    BINDINGS = [
        Binding("escape,backspace", "back", "Back", tooltip="Back to the panes"),
        # priority: the table has the focus, and its own enter (select the row, unlisted) would hide this one
        Binding(
            "enter", "open", "Open", tooltip="Open the instance: its text, path and per-token gains", priority=True
        ),
        Binding("b", "next_by(1)", "Split", tooltip="Split by the next covariate spec (none first)"),
        Binding("B", "next_by(-1)", "Previous split", show=False, tooltip="Split by the previous covariate spec"),
        Binding("v", "next_group(1)", "Group", tooltip="List the split's next group"),
        Binding("V", "next_group(-1)", "Previous group", show=False, tooltip="List the split's previous group"),
        Binding("question_mark", "app.help", "Keys", tooltip="List every key"),
    ]
    DEFAULT_CSS = """
    InstancesScreen #instances-head { height: auto; padding: 0 1; }
    InstancesScreen #instances-table { height: 1fr; }
    """

    def __init__(self, panel: Panel, metric: str, cohort: int, checkpoint: int, by: str = "", group: str = "") -> None:
        super().__init__()
        self.panel, self.metric, self.cohort, self.checkpoint = panel, metric, cohort, checkpoint
        self.by, self.group = by, group  # the split spec and the group listed ("", "": every instance)
        self.rows: list = []
        self.decoder = None

    def compose(self) -> ComposeResult:
        # markup off: the head quotes the panel's metric name
        yield Static(self._head("scoring…"), id="instances-head", markup=False)
        table = DataTable(id="instances-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield KeyBar()

    def _head(self, status: str) -> str:
        group = f"group {clean(self.group, 40)} of {clean(self.by, 40)}" if self.by else "all instances"
        controls = "the group's never-trained" if self.by else "the never-trained"
        return (
            f"Instances of g {self.cohort}, c {self.checkpoint} · {clean(self.metric, 40)} · {group} · {status}\n"
            f"score: own change since step before g, less {controls} mean change (mean = the cell's τ). "
            f"{DESCRIPTIVE}"
        )

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="instances", exit_on_error=False)
    def _load(self) -> None:
        from memtui.estimation.instances import Selection, instance_scores
        from memtui.extract.tokenizer import decoder_for
        from memtui.report.instances import read_rows

        key = (self.by, self.group)
        try:
            selection = Selection(self.cohort, self.checkpoint, by=self.by, group=self.group)
            scores = instance_scores(self.panel, self.metric, selection)
            decoder = decoder_for(self.panel) if self.panel.has_tokens else None
            rows = read_rows(self.panel, scores.top(LISTED), decoder)
            ready = InstancesReady(self.cohort, self.checkpoint, key, rows, len(scores), scores.n_controls, decoder)
        except Exception as exc:  # noqa: BLE001 - a bug must not leave the screen waiting: it says so instead
            ready = InstancesReady(self.cohort, self.checkpoint, key, [], error=_reason(exc))
        self.post_message(ready)

    @on(InstancesReady)
    def _ready(self, event: InstancesReady) -> None:
        if event.group != (self.by, self.group):  # a list for a group no longer chosen
            return
        head = self.query_one("#instances-head", Static)
        if event.error:
            self.rows = []
            self.query_one(DataTable).clear(columns=True)
            head.update(self._head(f"no instances: {clean(event.error)}"))
            return
        self.rows, self.decoder = event.rows, event.decoder
        shown = f"best {len(event.rows)} shown" if len(event.rows) < event.n_scored else "all shown"
        text = "text: " + (clean(event.decoder.description, 80) if event.decoder is not None else "no token ids")
        status = f"{event.n_scored} scored ({shown}), {event.n_controls} never-trained · {text}"
        head.update(self._head(status))
        self._fill(event.rows)

    def _fill(self, rows: list) -> None:
        table = self.query_one(DataTable)
        covariates = list(rows[0].covariates)[:2] if rows else []
        table.clear(columns=True)
        for name in ("#", "id", "score", "p_ctrl", *(clean(c, 12) for c in covariates)):
            table.add_column(Text(name), key=name)
        table.add_column(Text("text"), key="text")
        for r in rows:  # Text cells: a string cell would be read as markup, and the text is a training corpus's
            cov = [Text(_value(r.covariates[c])) for c in covariates]
            cells = [Text(str(r.rank)), Text(str(r.id)), Text(f"{r.score:+.3g}"), Text(f"{r.p_value:.3f}"), *cov]
            table.add_row(*cells, Text(r.text[:200] or "(no token ids)"), key=str(r.rank))
        table.focus()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_open(self) -> None:
        table = self.query_one(DataTable)
        if self.rows and 0 <= table.cursor_row < len(self.rows):
            row = self.rows[table.cursor_row]
            self.app.push_screen(InstanceScreen(self.panel, self.metric, row, self.decoder, self.by, self.group))

    def action_next_by(self, step: int = 1) -> None:
        """The next split spec (none first), as the workbench's b offers them; the list shows its first group."""
        from memtui.app.by_view import by_options

        options = by_options(self.panel)
        if len(options) < 2:
            self.notify("This panel has no covariate to split by: `memtui covariates PANEL` adds them.", markup=False)
            return
        index = options.index(self.by) if self.by in options else 0
        by = options[(index + step) % len(options)]
        self._show_group(by, self._groups(by)[0] if by else "")

    def action_next_group(self, step: int = 1) -> None:
        """The split's next group (v, as on the heatmap)."""
        if not self.by:
            self.notify("No split: b splits the list by a covariate.", markup=False)
            return
        names = self._groups(self.by)
        index = names.index(self.group) if self.group in names else -step
        self._show_group(self.by, names[(index + step) % len(names)])

    def _groups(self, by: str) -> list[str]:
        from memtui.estimation.group_spec import resolve

        return resolve(self.panel, by).names  # offered by by_options, so it resolves

    def _show_group(self, by: str, group: str) -> None:
        self.by, self.group, self.rows = by, group, []
        self.query_one("#instances-head", Static).update(self._head("scoring…"))
        self._load()

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, MemtuiError) else f"{type(exc).__name__}: {exc}"


def _value(v) -> str:
    if v is None:
        return "?"
    return f"{v:.4g}" if isinstance(v, float) else clean(v, 12)


class InstanceScreen(Screen[None]):
    """One instance: its text (tokens coloured by their gain where the panel has per-token scores) and its path."""

    BINDINGS = [
        Binding("escape,backspace", "back", "Back", tooltip="Back to the ranked instances"),
        Binding("question_mark", "app.help", "Keys", tooltip="List every key"),
    ]
    DEFAULT_CSS = """
    InstanceScreen #instance-head { height: auto; padding: 0 1; }
    InstanceScreen #instance-text-box { height: auto; max-height: 60%; min-height: 3; padding: 0 1; }
    InstanceScreen #instance-legend { height: auto; padding: 0 1; }
    InstanceScreen #instance-path { height: 1fr; min-height: 7; }
    """

    def __init__(self, panel: Panel, metric: str, row, decoder, by: str = "", group: str = "") -> None:
        super().__init__()
        self.panel, self.metric, self.row, self.decoder = panel, metric, row, decoder
        self.by, self.group = by, group  # the split whose never-trained instances its score was set against
        self.gain: np.ndarray | None = None
        self.scale = 1.0

    def compose(self) -> ComposeResult:
        r = self.row
        head = (
            f"Instance {r.id} · rank {r.rank} · cohort g {r.cohort} (base {r.base}) · score at c {r.checkpoint}: "
            f"{r.score:+.4g} · p_ctrl {r.p_value:.3f} (descriptive)"
        ) + (f" · group {clean(self.group, 40)}, against its own never-trained" if self.by else "")
        yield Static(head, id="instance-head", markup=False)
        with VerticalScroll(id="instance-text-box"):
            yield Static(self._text(), id="instance-text")
        yield Static("", id="instance-legend", markup=False)
        yield BandPlot(id="instance-path")
        yield KeyBar()

    def _text(self) -> Text:
        if not self.row.tokens:
            return Text("(the panel stores no token ids)")
        tokens = self.row.tokens
        pieces = self.decoder.pieces(tokens) if self.decoder is not None else [f"{t} " for t in tokens]
        scheme = palette.scheme(self.app.current_theme.dark)
        return token_colours.coloured(pieces, self.gain, scheme, self.scale)

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="instance", exit_on_error=False)
    def _load(self) -> None:
        from memtui.estimation.instances import Selection, instance_path
        from memtui.panel.token_scores import read_token_scores

        r = self.row
        try:
            path = instance_path(self.panel, self.metric, r.row, selection=Selection(by=self.by, group=self.group))
        except Exception as exc:  # noqa: BLE001 - a bug must not leave the screen waiting: it says so instead
            self.post_message(InstanceReady(r.id, error=_reason(exc)))
            return
        gain, note = None, ""
        try:  # the text and the path stand without them: a damaged per-token dataset is a line in the legend
            scores = read_token_scores(self.panel, [r.id]) if self.panel.has_tokens else None
            if scores and r.id in scores:
                steps = list(self.panel.steps)
                by_token = token_colours.by_token(scores[r.id])
                gain = token_colours.gains(by_token, steps.index(r.cohort), steps.index(r.base), len(r.tokens))
        except Exception as exc:  # noqa: BLE001 - as above
            note = _reason(exc)
        self.post_message(InstanceReady(r.id, path, gain, note=note))

    @on(InstanceReady)
    def _ready(self, event: InstanceReady) -> None:
        legend = self.query_one("#instance-legend", Static)
        if event.error:
            legend.update(f"No path: {clean(event.error)}")
            return
        r = self.row
        self.gain = event.gain
        if event.gain is not None and np.isfinite(event.gain).any():
            self.scale = token_colours.scale_of(event.gain)
            scheme = palette.scheme(self.app.current_theme.dark)
            legend.update(token_colours.legend(scheme, self.scale, r.base, r.cohort))
            self.query_one("#instance-text", Static).update(self._text())
        elif event.note:
            legend.update(f"Per-token scores not shown: {clean(event.note)}")
        else:
            legend.update("No per-token scores for this instance (memtui extract --token-scores stores them).")
        p = event.path
        lo, hi = (int(q * 100) for q in p.quantiles)
        g = short_step(p.cohort)
        self.query_one(BandPlot).show_series(
            [Series(p.steps, p.score, p.low, p.high)],
            title=(
                f"instance {r.id}: its score at each c (base {short_step(p.base)}), band: never-trained {lo}–{hi}%",
                f"instance {r.id}: score by c; band: never-trained {lo}–{hi}%",
                f"score by c (g = {g})",
            ),
            marks=(p.cohort,),
        )

    def action_back(self) -> None:
        self.dismiss(None)
