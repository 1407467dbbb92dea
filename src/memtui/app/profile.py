"""Profile pane: the heatmap, its legend, the cursor cell in words, and the cursor row's memorisation path."""

from __future__ import annotations

import time

import numpy as np
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.widgets import Static

from memtui.app import palette
from memtui.app.by_view import View, legend_text, view_result
from memtui.app.fmt import integer, minus_signs, num, nums, short_step
from memtui.app.heatmap import AVERAGE_MARK, MODE_LABEL, Heatmap, HeatmapData
from memtui.app.legend import pack, swatch
from memtui.app.plots import BandPlot, Series, plot_colours
from memtui.app.summary_lines import note_lines
from memtui.core.text import clean
from memtui.estimation.estimate import EstimateResult
from memtui.panel.model import Panel

PLOT_EVERY_S = 0.1
WIDE_PLOT = 50  # columns the path plot needs beside the heatmap
# matrices read from the result for the status line and the path plot
_COLUMNS = ("std_error", "band_low", "band_high", "n_treated", "n_control")


class Legend(Static):
    """The colour ramp with its scale, and what the hatched, dimmed and blank cells mean; on one line, dropping
    the unit (it is in the title) and then shortening the blank column's note when the line is narrow."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._args: tuple = (None, "dim", "", "")
        self._averaged = False

    def show(self, scale: float | None, mode: str, unit: str, base: str = "", averaged: bool = False) -> None:
        self._args = (scale, mode, unit, base)
        self._averaged = averaged  # some checkpoint is a weight average: say what its label's mark means
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def notify_style_update(self) -> None:
        """A new theme may bring the other palette (dark or light)."""
        super().notify_style_update()
        if self.is_mounted:
            self._draw()

    def _draw(self) -> None:
        scale, mode, unit, base = self._args
        if scale is None:
            self.update("")
            return
        width = self.size.width - 2 if self.size.width > 2 else 10_000
        # the first checkpoint is every cohort's base period (varying base): that column has no estimate
        notes = [f"blank c={base}: base period, no estimate", f"blank c={base}: base"] if base else [""]
        if self._averaged:  # the one line that says what the checkpoint labels' mark is: kept before the base's note
            mark = f"{AVERAGE_MARK} weight average, not one model's"
            notes = [*(f"{mark}; {n}" for n in notes if n), mark, *notes]
        scheme = palette.scheme(self.app.current_theme.dark)
        variants = [(True, notes[0], False), (False, notes[0], False), *((False, n, False) for n in notes[1:])]
        variants += [(False, "", False), (False, "", True)]  # then no note, then the compact keys
        for show_unit, note, compact in variants:
            text = self._text(scheme, scale, mode, unit if show_unit else "τ", note, compact)
            if text.cell_len <= width:
                break
        self.update(text)

    @staticmethod
    def _text(scheme: palette.Scheme, scale: float, mode: str, unit: str, note: str, compact: bool = False) -> Text:
        hexed = palette.hex_colour
        text = Text()
        text.append(f"{num(-scale, 3)} ", style="dim")
        for index in scheme.ramp:
            text.append(" ", style=f"on {hexed(index)}")
        text.append(f" {num(scale, 3, signed=True)} {unit}", style="dim")
        text.append("  ")
        text.append(palette.DIM_GLYPH * 2, style=f"{hexed(scheme.warm[4])} on {hexed(scheme.hidden_bg)}")
        text.append(" n.s.  " if compact else f" n.s. {MODE_LABEL[mode]} (s)  ", style="dim")
        text.append(palette.HATCH * 2, style=f"{hexed(scheme.pre_fg)} on {hexed(scheme.pre_bg)}")
        text.append(" c<g", style="dim")
        if note:
            text.append(f"  {note}", style="dim")
        return text


def notes_line(result: EstimateResult | None, width: int = 10_000, rows: int = 1) -> str:
    """A line or a few saying that the estimate comes with caveats, and where they are in full (``note_lines``)."""
    if result is None or not result.notes:
        return ""
    return "\n".join(note_lines([minus_signs(clean(n, 400)) for n in result.notes], width, rows))


def notes_rows(height: int) -> int:
    """Rows the notes may take over the heatmap: one at 80 x 24, up to three on a tall terminal."""
    return max(1, min(3, (height - 18) // 6))


def _fit(variants: list[str], width: int | None) -> str:
    """The first (fullest) variant that fits ``width`` cells; the shortest, cut with an ellipsis, if none does."""
    if width is None:
        return variants[0]
    for text in variants:
        if len(text) <= width:
            return text
    return variants[-1][: max(0, width - 1)] + "…"


def truth_matrix(panel: Panel | None, result: EstimateResult) -> np.ndarray | None:
    """The simulated panel's true τ on the result's cohorts x checkpoints (NaN where the truth has no such cell), or
    None where the panel stores no truth for the metric (every panel but a simulated one: ``panel.synthetic``).
    τ = sign x ATT is what the estimates estimate, and the truth is stored as τ: they compare as they are."""
    truth = getattr(panel, "truth", None)
    metric = result.settings.metric
    if not truth or metric not in truth or "cohorts" not in truth or "steps" not in truth:
        return None
    tau = np.asarray(truth[metric], dtype=float)
    cohorts, steps = np.asarray(truth["cohorts"]), np.asarray(truth["steps"])
    if tau.shape != (len(cohorts), len(steps)):
        return None
    rows = np.clip(np.searchsorted(cohorts, result.cohorts), 0, max(len(cohorts) - 1, 0))
    cols = np.clip(np.searchsorted(steps, result.checkpoints), 0, max(len(steps) - 1, 0))
    out = np.full((len(result.cohorts), len(result.checkpoints)), np.nan)
    if len(cohorts) and len(steps):
        ok = (cohorts[rows] == result.cohorts)[:, None] & (steps[cols] == result.checkpoints)[None, :]
        out[ok] = tau[np.ix_(rows, cols)][ok]
    return out


def _averaged(panel) -> dict[int, str]:
    """The panel's checkpoints that are weight averages (step -> kind); none for a panel that cannot say."""
    if not isinstance(panel, Panel):
        return {}
    from memtui.extract.checkpoints import panel_averages

    return panel_averages(panel)


def _base_label(result: EstimateResult) -> str:
    """The first checkpoint, when its column has no estimate at all (the base period of a varying base)."""
    est = result.matrix("estimate")
    if est.shape[1] and not np.isfinite(est[:, 0]).any():
        return short_step(int(result.checkpoints[0]))
    return ""


class ProfilePane(Vertical):
    """Heatmap of tau(g, c); the cursor's cell is described below it and its cohort's path plotted."""

    BINDINGS = [
        Binding("p", "toggle_plot", "Plot", tooltip="Hide / show the path plot (the heatmap takes its rows)"),
        Binding("w", "instances", "Instances", tooltip="The cursor cell's instances, ranked by their own score"),
        # the footer at 80 columns has no room for it beside t (a truth) or a suite's n: the same key, listed by ?
        Binding("w", "instances_unlisted", show=False),
        Binding(
            "t", "toggle_truth", "Truth",
            tooltip="A simulated panel's true profile, over the estimate (on/off)",
        ),
        # a suite's footer has no room for it (n takes the slot): the same key, listed by ? only
        Binding("t", "toggle_truth_unlisted", show=False),
        Binding("t", "no_truth", show=False),  # a panel with no known truth: t says so (and stays out of the footer)
    ]  # fmt: skip

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: EstimateResult | None = None
        self._mats: dict[str, np.ndarray] = {}
        self._plotted: tuple | None = None
        self._unit = ""
        self._scale = 1.0
        self._plotted_at = 0.0
        self._plot_timer = None
        self._base = ""
        self.plot_hidden = False  # p: the heatmap takes the path plot's rows
        self.truth_shown = False  # t: the simulated panel's true profile over the estimate
        self._truth: np.ndarray | None = None  # the true τ on the result's cells (None: no known truth)
        self.split: tuple | None = None  # (ByResult, by_view.View) while the views are split by group
        self._paths_of = None  # the split whose groups' paths are in _paths
        self._paths: dict = {}

    def compose(self) -> ComposeResult:
        # markup off: messages quote the panel (metric names, attributes) and must show as written
        yield Static("", id="profile-message", classes="message", markup=False)
        yield Static("", id="profile-notes", classes="message", markup=False)
        yield Static("", id="by-legend", markup=False)
        with Container(id="profile-main"):
            yield Heatmap(id="heatmap")
            yield BandPlot(id="path-plot")
        yield Legend(id="legend")
        yield Static("", id="cell-info", markup=False)

    def on_resize(self) -> None:
        self._show_notes()
        self._layout()
        self._show_by_legend()
        if self.result is not None:
            self._describe(self.heatmap.row, self.heatmap.column)

    def action_toggle_plot(self) -> None:
        self.toggle_plot()

    def action_instances_unlisted(self) -> None:
        self.action_instances()

    def action_instances(self) -> None:
        """The cursor cell's instances (app/instances.py), best first."""
        from memtui.app.instances import open_cell

        r = self.result
        if r is None or not len(r.cohorts):
            self.app.notify("No estimate on screen yet: its cells' instances follow.", markup=False)
            return
        g, c = int(r.cohorts[self.heatmap.row]), int(r.checkpoints[self.heatmap.column])
        open_cell(self.app, self.app.panel, r.settings.metric, g, c, self.split)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """t overlays the truth where there is one; elsewhere its other binding says there is none."""
        suite = len(getattr(self.app, "models", ())) > 1
        if action == "toggle_truth":
            return self.has_truth and not suite
        if action == "toggle_truth_unlisted":
            return self.has_truth and suite
        if action == "no_truth":
            return not self.has_truth
        if action in ("instances", "instances_unlisted"):
            return (action == "instances") != (suite or self.has_truth)
        return True

    @property
    def has_truth(self) -> bool:
        """Whether the estimate shown has a known true profile to overlay (a simulated panel's)."""
        return self._truth is not None

    def action_toggle_truth_unlisted(self) -> None:
        self.action_toggle_truth()

    def action_toggle_truth(self) -> None:
        self.truth_shown = not self.truth_shown
        self._show_by_legend()
        if self.result is not None:
            self._plotted = None  # the same row, drawn again with (or without) its true path
            self._describe(self.heatmap.row, self.heatmap.column)
            self._plot_row(self.heatmap.row, self.heatmap.column)

    def action_no_truth(self) -> None:
        why = "split views compare groups" if self.split is not None else "only a simulated panel stores one"
        self.app.notify(
            f"No true profile to show: {why} (`memtui sample synthetic` makes one; `memtui info` says if a panel "
            "has it).",
            markup=False,
        )

    def toggle_plot(self) -> None:
        self.plot_hidden = not self.plot_hidden
        self.query_one(BandPlot).display = self.result is not None and not self.plot_hidden
        self.heatmap.call_after_refresh(self.heatmap.keep_cursor_visible)

    def _layout(self) -> None:
        """Path plot beside the heatmap when the matrix leaves room for it, else below (paper-size profiles)."""
        heatmap = self.heatmap
        spare = self.size.width - heatmap.virtual_size.width - 2
        self.set_class(heatmap.data is not None and spare >= WIDE_PLOT, "-wide")

    @property
    def heatmap(self) -> Heatmap:
        return self.query_one(Heatmap)

    def show(self, result: EstimateResult | None, message: str = "") -> None:
        """Draw a new result (None: show only the message, e.g. why there is no estimate yet)."""
        self.result = result
        self._plotted = None
        msg = self.query_one("#profile-message", Static)
        msg.update(message)
        msg.display = bool(message)
        self._show_notes()
        self._show_by_legend()
        if result is None:
            self._mats = {}
            self._truth = None
            self.refresh_bindings()
            self.heatmap.set_data(None)
            self.query_one(Legend).show(None, "dim", "")
            self.query_one("#cell-info", Static).update("")
            self.query_one(BandPlot).display = False
            return
        self.query_one(BandPlot).display = not self.plot_hidden
        # the truth is the whole panel's: not a group's, nor a difference of groups
        self._truth = truth_matrix(getattr(self.app, "panel", None), result) if self.split is None else None
        self.refresh_bindings()
        self._show_by_legend()
        est = result.matrix("estimate")
        sig = result.matrix("significant") == 1
        self._mats = {"estimate": est, **{name: result.matrix(name) for name in _COLUMNS}}
        pre = result.checkpoints[None, :] < result.cohorts[:, None]
        scale = palette.robust_scale(est[~pre])
        self._unit = "τ " + clean(result.settings.metric, 60)
        averaged = _averaged(getattr(self.app, "panel", None))
        self.heatmap.set_data(HeatmapData(result.cohorts, result.checkpoints, est, sig, scale, frozenset(averaged)))
        self._layout()
        # set_data scrolled to the cursor in the old layout; the new matrix can change it (a scroll bar appears, the
        # path plot moves beside or below, a notes line shows), which resizes no widget: scroll again once laid out
        self.heatmap.call_after_refresh(self.heatmap.keep_cursor_visible)
        self._scale = scale
        self._base = _base_label(result)
        self.query_one(Legend).show(scale, self.heatmap.mode, self._unit, self._base, bool(averaged))

    def _show_notes(self) -> None:
        """The notes' line(s), fitted to the pane's width and height (never cut mid-word by the edge)."""
        notes = self.query_one("#profile-notes", Static)
        width = self.size.width - 2 if self.size.width > 2 else 10_000
        notes.update(notes_line(self.result, width, notes_rows(self.size.height)))
        notes.display = bool(self.result is not None and self.result.notes)

    def _show_by_legend(self) -> None:
        """The split's line above the heatmap: what it shows, and each group's colour in the path plot, its size."""
        line = self.query_one("#by-legend", Static)
        truth = self._truth_on()
        line.display = (self.split is not None or truth) and self.result is not None
        if line.display:
            colours = plot_colours(self.app.theme_variables, self.app.current_theme.dark)
            width = self.size.width - 2 if self.size.width > 2 else 10_000
            if self.split is not None:
                line.update(legend_text(*self.split, colours.models, width))
            else:  # the truth's line in the path plot, told apart from the estimate's
                items = [Text.assemble(("━━", Style(color=swatch(colours.line))), " estimate"),
                         Text.assemble(("━━", Style(color=swatch(colours.models[1]))), " true τ (simulated)"),
                         Text("··· band", style="dim")]  # fmt: skip
                line.update(pack(Text(), items, width))

    def _truth_on(self) -> bool:
        return self.truth_shown and self._truth is not None

    def on_heatmap_cursor_moved(self, event: Heatmap.CursorMoved) -> None:
        self._describe(event.row, event.column)
        self._plot_row(event.row, event.column)

    def on_mount(self) -> None:
        self.watch(self.heatmap, "mode", self.refresh_legend, init=False)
        self.watch(self.heatmap, "cell_width", self._layout, init=False)

    def refresh_legend(self) -> None:
        if self.result is not None:
            self.query_one(Legend).show(self._scale, self.heatmap.mode, self._unit, self._base)

    def cell_text(self, row: int, column: int, width: int | None = None) -> str:
        """The status line for one cell (also what the tests read), on one line of ``width`` cells: the full
        wording when it fits, else shorter forms that drop first the counts' words, then the counts, then the
        standard error; the cell's place and its τ always stay."""
        r = self.result
        if r is None or not len(r.cohorts):
            return ""
        g, c = int(r.cohorts[row]), int(r.checkpoints[column])
        m = self._mats
        tau = m["estimate"][row, column]
        if not np.isfinite(tau):
            variants = [
                f"g {g}  c {c}  c−g {integer(c - g)} │ no estimate for this cell (base period or outside the window)",
                f"g {g} c {c} c−g {integer(c - g)} │ no estimate (base period or outside the window)",
                f"g {short_step(g)} c {short_step(c)} │ no estimate",
            ]
            return _fit(variants, width)
        sig = bool(self.heatmap.data.significant[row, column])
        placebo = ["pre-treatment (placebo)"] if c < g else []
        # the estimate, its SE and its band on one number of decimals (never [+5.443, +24])
        tau_text, se_text, low, high = nums(
            [tau, *(m[k][row, column] for k in ("std_error", "band_low", "band_high"))], signed=True
        )
        se = f"SE {se_text.lstrip('+')}"
        counts = m["n_treated"][row, column], m["n_control"][row, column]
        known = all(np.isfinite(n) for n in counts)  # a difference of two groups has no counts of its own
        nt, nc = (int(n) if known else 0 for n in counts)
        full, short = ([f"n {nt} treated / {nc} control"], [f"n {nt}/{nc}"]) if known else ([], [])
        t = f"τ {tau_text}"
        if self._truth_on():  # beside the estimate: the true τ it estimates
            true = self._truth[row, column]
            t += f" (true {num(true, signed=True)})" if np.isfinite(true) else " (true —)"
        variants = [
            " │ ".join([f"g {g}  c {c}  c−g {integer(c - g)}", *placebo, f"{t}  {se}", f"band [{low}, {high}]",
                        "significant" if sig else "not significant", *full]),
            " │ ".join([f"g {g} c {c} c−g {integer(c - g)}", *(["placebo"] if placebo else []), f"{t} {se}",
                        f"band [{low}, {high}]", "sig." if sig else "n.s.", *short]),
            " │ ".join([f"g {g} c {c}", *(["placebo"] if placebo else []), f"{t} {se}", f"[{low}, {high}]",
                        "sig." if sig else "n.s."]),
            " │ ".join([f"g {short_step(g)} c {short_step(c)}", t, f"[{low}, {high}]", "sig." if sig else "n.s."]),
        ]  # fmt: skip
        return _fit(variants, width)

    def _describe(self, row: int, column: int) -> None:
        info = self.query_one("#cell-info", Static)
        width = info.size.width - 2 if info.size.width > 2 else None  # before the first layout: the full text
        info.update(self.cell_text(row, column, width), layout=False)

    def _plot_row(self, row: int, column: int) -> None:
        """Replot the cursor row's path; while the cursor runs (key repeat) at most every PLOT_EVERY_S, plus once
        where it stops, so holding j stays fluid on paper-size profiles."""
        r = self.result
        if r is None or not len(r.cohorts):
            return
        key = (id(r), row)
        if key == self._plotted:
            return
        now = time.monotonic()
        if self._plot_timer is not None:
            self._plot_timer.stop()
            self._plot_timer = None
        if now - self._plotted_at < PLOT_EVERY_S:
            self._plot_timer = self.set_timer(PLOT_EVERY_S, lambda: self._plot_row(self.heatmap.row, 0))
            return
        self._plotted_at = now
        self._plotted = key
        g = int(r.cohorts[row])
        if self.split is not None and not self.split[1].b:  # a group on the heatmap: every group's path, coloured
            self.query_one(BandPlot).show_series(
                self._group_paths(g),
                title=(
                    f"memorisation path τ(g = {short_step(g)}, c) per group, dotted: joint band",
                    f"path τ(g = {short_step(g)}, c) per group, dotted: band",
                    f"τ(g = {short_step(g)}, c) per group",
                    f"τ(g = {short_step(g)}, c)",
                ),
                marks=(g,),
                band_marker="dot",
            )
            return
        m = self._mats
        if self.split is not None:  # a difference of two groups on the heatmap: its path
            diff = clean(self.split[1].label, 80)
            titles = (f"{diff}: path τ(g = {short_step(g)}, c), with band", f"difference τ(g = {short_step(g)}, c)")
        else:
            titles = ()
        series = [Series(r.checkpoints, m["estimate"][row], m["band_low"][row], m["band_high"][row])]
        if self._truth_on():  # the true path, in the next colour, with no band of its own
            nan = np.full(len(r.checkpoints), np.nan)
            series.append(Series(r.checkpoints, self._truth[row], nan, nan, colour=1))
            titles = titles or (
                f"memorisation path τ(g = {short_step(g)}, c) over checkpoints c, with band and the true path",
                f"path τ(g = {short_step(g)}, c), with band and the true path",
                f"path τ(g = {short_step(g)}, c) and its truth",
                f"τ(g = {short_step(g)}, c)",
            )
        self.query_one(BandPlot).show_series(
            series,
            title=titles
            or (
                f"memorisation path τ(g = {short_step(g)}, c) over checkpoints c, with band",
                f"path τ(g = {short_step(g)}, c) over checkpoints c, with band",
                f"path τ(g = {short_step(g)}, c), with band",
                f"τ(g = {short_step(g)}, c)",
            ),
            marks=(g,),
        )

    def _group_paths(self, g: int) -> list[Series]:
        """Cohort ``g``'s path in each group of the split that has the cohort, in the group's colour (its index)."""
        by = self.split[0]
        if self._paths_of is not by:  # each group's matrices once per split, not on every cursor move
            self._paths_of, self._paths = by, {}
            for name in by.names:
                res = view_result(by, View(name))
                mats = {c: res.matrix(c) for c in ("estimate", "band_low", "band_high")}
                self._paths[name] = (res.cohorts, res.checkpoints, mats)
        out = []
        for i, name in enumerate(by.names):
            cohorts, checkpoints, mats = self._paths[name]
            row = int(np.searchsorted(cohorts, g))
            if row < len(cohorts) and cohorts[row] == g:
                est, low, high = (mats[c][row] for c in ("estimate", "band_low", "band_high"))
                out.append(Series(checkpoints, est, low, high, colour=i))
        return out
