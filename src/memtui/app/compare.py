"""Compare pane: every model of a suite on one screen — instantaneous memorisation by cohort, persistent by c − g and
residual by cohort overlaid (each model's line with its band, a legend of model names), and the matrices of
correlations between the models' profiles as small coloured grids. A seed suite (one model's data orders) adds the
pooled estimate across seeds (``estimation.seeds``): each summary pooled, the seeds' spread, and whether they agree.

Split by group (the workbench's ``b`` or the settings' split), the pane compares the models group by group
(``estimation.suite_by.compare_by``: one set of draws for every model and group): a legend names each group with its
size, the text gives each group's per-model summaries and each model's difference between groups, and the plots and
grids show one group at a time (``v`` / ``V``: the next or previous group, as on the Profile pane).

The suite is estimated in a thread of the pane's own (``estimation.suite.estimate_suite``: shared draws, so all models
cost little more than one) and the result arrives as a typed message; results are kept per settings and split, so
cycling back to a metric is immediate."""

from __future__ import annotations

import math
import re
import textwrap

import numpy as np
from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from memtui.app import palette
from memtui.app.compare_split import group_legend, split_lines
from memtui.app.fmt import minus, minus_signs, num, short_step
from memtui.app.legend import legend, pack
from memtui.app.plots import BandPlot, Series, plot_colours
from memtui.app.restyle import RestyleSelfOnFocus
from memtui.app.summaries import final_checkpoint
from memtui.core.errors import MemtuiError
from memtui.core.text import clean, compact_count
from memtui.estimation.settings import Settings

BAND_MARKER = "dot"  # each model's band, in the model's colour: dotted, so the lines stay the estimates


class OverlayPlot(BandPlot):
    """Several models' estimate lines (braille) with their bands (dotted, same colour) on one pair of axes; the
    legend is a line of its own above the plot (``legend``), never drawn over the data."""

    DEFAULT_CSS = "OverlayPlot { height: 1fr; min-height: 9; }"

    def overlay(self, series: list[Series], *, title: str | tuple[str, ...], marks: tuple = ()) -> None:
        self.show_series(series, title=title, marks=marks, band_marker=BAND_MARKER)


def correlation_grid(
    names: list[str],
    matrix: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    title: str,
    scheme: palette.Scheme = palette.DARK,
    line_width: int = 10_000,
    *,
    undetermined: np.ndarray | None = None,
    clipped: np.ndarray | None = None,
) -> Text:
    """A k × k grid of correlations, each cell coloured on the heatmap's ramp (so +1 is the strongest warm colour),
    with the bootstrap interval of each pair listed under it, in lines of ``line_width`` that break between pairs.

    ``undetermined`` marks the pairs whose value the data do not determine (a corrected correlation without an
    interval: every correlation in [-1, 1] fits the data): their cell says ``n.d.`` and their interval "not
    determined", never a number that looks like a finding. ``clipped`` marks values held at ±1 (the estimate fell
    beyond it): a ``*`` follows them."""
    k = len(names)
    undetermined = np.zeros((k, k), bool) if undetermined is None else undetermined
    clipped = np.zeros((k, k), bool) if clipped is None else clipped
    width = max(6, *(len(clean(n, 24)) for n in names))
    text = Text(f"{title}\n", style="bold")
    text.append(" " * (width + 1) + "".join(f"{i + 1:>7}" for i in range(k)) + "\n")
    lv = palette.levels(np.nan_to_num(matrix, nan=0.0), 1.0)
    for i, name in enumerate(names):
        text.append(f"{i + 1} {clean(name, 24):<{width}}")
        for j in range(k):
            value = matrix[i, j]
            if not math.isfinite(value):
                text.append(f"{'—':>7}")
                continue
            if undetermined[i, j] and i != j:
                text.append(f"{'n.d.':>6} ", style="dim")
                continue
            bg = scheme.ramp[int(lv[i, j])]
            mark = "*" if clipped[i, j] and i != j else " "
            style = Style(color=palette.readable_on(bg), bgcolor=palette.cube(bg))
            text.append(" ")
            text.append(minus(f"{value:+.2f}{mark}"), style=style)
        text.append("\n")
    pairs = [
        Text(f"{i + 1}–{j + 1} not determined" if undetermined[i, j]
             else f"{i + 1}–{j + 1} [{num(low[i, j], 2)}, {num(high[i, j], 2)}]", style="dim")
        for i in range(k)
        for j in range(i + 1, k)
        if math.isfinite(low[i, j]) or undetermined[i, j]
    ]  # fmt: skip
    if pairs:
        text.append_text(pack(Text("intervals:", style="dim"), pairs, line_width))
        text.append("\n")
    keys = []
    if np.triu(undetermined, 1).any():
        keys.append("n.d.: not determined by these data (no interval); the raw correlation below is informative")
    if np.triu(clipped & ~undetermined, 1).any():
        keys.append("*: the corrected value fell beyond ±1 and is shown at the bound")
    for line in keys:  # wrapped to the pane (80 columns leave about 78)
        text.append(wrapped(line, line_width) + "\n", style="dim")
    return text


def wrapped(line: str, width: int) -> str:
    """``line`` in lines of at most ``width`` (at least 20) columns, broken between words but never inside an
    interval ``[a, b]``, which stays whole on one line as the grid's own intervals do."""
    kept = re.sub(r"\[[^\[\]]*\]", lambda m: m.group(0).replace(" ", "\xa0"), line)  # textwrap breaks at ASCII spaces
    return "\n".join(textwrap.wrap(kept, max(width, 20), subsequent_indent="  ")).replace("\xa0", " ")


PLOTS = ("instantaneous", "persistent", "residual")


class ComparePane(RestyleSelfOnFocus, VerticalScroll, can_focus=True):
    """Every model of the suite side by side for the current metric and settings."""

    class Ready(Message):
        """The suite's estimate (or why there is none) for ``settings``, split by ``by`` (``split``: the
        ``SuiteByResult``) or not (``suite_result`` and its correlations ``pearson``)."""

        def __init__(self, settings: Settings, suite_result=None, pearson=None, error: str = "", seeds=(), *,
                     by: str = "", split=None) -> None:  # fmt: skip
            super().__init__()
            self.settings, self.suite_result, self.pearson, self.error = settings, suite_result, pearson, error
            self.seeds = list(seeds)  # a seed suite's pooled lines (``seed_lines``)
            self.by, self.split = by, split

        @property
        def key(self) -> tuple[Settings, str]:
            return self.settings, self.by

    def __init__(self, suite=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.settings: Settings | None = None
        self.by = ""
        self.group = 0  # the group of the split whose plots and grids are shown
        self._ready: dict[tuple[Settings, str], ComparePane.Ready] = {}
        self._drawn_theme: str | None = None  # the theme the legends and the grid were drawn in
        self._pending: tuple[Settings, str] | None = None  # what the running worker estimates

    def compose(self) -> ComposeResult:
        yield Static("", id="compare-by", classes="message", markup=False)
        yield Static("", id="compare-text", markup=False)
        for name in PLOTS:
            yield Static("", id=f"compare-{name}-legend", classes="compare-legend", markup=False)
            yield OverlayPlot(id=f"compare-{name}", classes="compare-plot")
        yield Static("", id="compare-grid", markup=False)

    def notify_style_update(self) -> None:
        """A restyle: after a new theme, the grid's cells (coloured on the heatmap's palette) and the legends (in
        the plots' colours) are drawn in its colours. Restyled, not on the theme's signal: a theme change leaves the
        pane out while it is hidden and restyles it before it is shown (``restyle.HiddenPanes``), so a hidden pane
        no longer redraws its text on the theme's key."""
        super().notify_style_update()
        if self._drawn_theme is not None and self._drawn_theme != self.app.theme:
            self._redraw_text()

    def on_resize(self) -> None:
        """The legends and the intervals are packed into lines of the pane's width."""
        self._redraw_text()

    def _redraw_text(self) -> None:
        ready = self._ready.get((self.settings, self.by)) if self.settings is not None else None
        if ready is not None and not ready.error:
            self._show_legends(ready)
            self._show_grid(ready)
            self._show_groups(ready)

    def _width(self) -> int:
        width = self.scrollable_content_region.width - 2  # the statics' padding
        return width if width > 10 else 10_000  # before the first layout: one line, redrawn on resize

    def show_settings(self, settings: Settings, by: str = "") -> None:
        """Show the suite for ``settings``, split by group (``by``) or not: at once when estimated before, else
        estimate it in the background."""
        if by != self.by:
            self.by, self.group = by, 0
        self.query_one("#compare-by", Static).display = False  # the split's legend, once there is one
        self.settings = settings
        if self.suite is None or len(self.suite.names) < 2:
            self._message("Compare needs several panels of the same instances: `memtui A.h5 B.h5 …` opens a suite.")
            return
        if (settings, by) in self._ready:
            self._show(self._ready[settings, by])
            return
        split = f" by {clean(by, 40)}" if by else ""
        self._message(f"Estimating {len(self.suite.names)} models on {clean(settings.metric, 40)}{split}…")
        if self._pending != (settings, by):  # shown again while being estimated: the running worker goes on
            self._pending = (settings, by)
            self._estimate(settings, by)

    def next_group(self, step: int = 1) -> None:
        """Show the next (or previous) group of the split in the plots and grids."""
        ready = self._ready.get((self.settings, self.by)) if self.settings is not None else None
        if ready is None or ready.split is None:
            self.app.notify(
                "Compare is not split: b (or the settings, o) splits it by a covariate." if not self.by
                else "The split is still being estimated.", markup=False,
            )  # fmt: skip
            return
        self.group = (self.group + step) % len(ready.split.groups)
        self._show(ready)

    def _message(self, text: str) -> None:
        self.query_one("#compare-text", Static).update(text)
        for plot in self.query(OverlayPlot):
            plot.display = False
        for line in self.query(".compare-legend"):
            line.display = False
        self.query_one("#compare-grid", Static).update("")

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def _estimate(self, settings: Settings, by: str = "") -> None:
        from dataclasses import replace

        from memtui.estimation.correlations import correlations
        from memtui.estimation.suite import estimate_suite
        from memtui.estimation.suite_by import compare_by

        worker = get_current_worker()

        def progress(fraction: float, stage: str) -> None:
            if worker.is_cancelled:
                raise _Cancelled

        # the comparison is of causal profiles: the workbench's naive estimators are shown per model elsewhere
        causal = replace(settings, engine="memtui")
        try:
            if by:
                ready = self.Ready(settings, by=by, split=compare_by(self.suite, causal, by, progress=progress))
            else:
                sr = estimate_suite(self.suite, causal, progress=progress)
                corr = correlations(sr, settings.metric, scope="post")
                ready = self.Ready(settings, sr, corr, seeds=self._pooled(causal, progress))
        except _Cancelled:
            return
        except MemtuiError as exc:
            ready = self.Ready(settings, error=str(exc), by=by)
        except Exception as exc:  # noqa: BLE001 - a bug must not leave the pane waiting: it says so instead
            ready = self.Ready(settings, error=f"{type(exc).__name__}: {exc}", by=by)
        self.post_message(ready)

    def _pooled(self, settings: Settings, progress) -> list[str]:
        """A seed suite's pooled lines (none for a suite of models); a refusal is one line in their place."""
        from memtui.estimation.seeds import estimate_pooled
        from memtui.estimation.suite_load import is_seed_suite

        if not is_seed_suite(self.suite.panels):
            return []
        try:
            pooled = estimate_pooled(self.suite.panels, settings, self.suite.names, progress=progress)
        except MemtuiError as exc:
            return ["", f"Pooled across seeds: {clean(str(exc))}"]
        return seed_lines(pooled)

    @on(Ready)
    def _on_ready(self, event: Ready) -> None:
        self._ready[event.key] = event
        if event.key == self._pending:
            self._pending = None
        if event.key == (self.settings, self.by):
            self._show(event)

    def _shown(self, ready: Ready):
        """The suite result and correlations the plots and grids show: the whole suite's, or the shown group's."""
        if ready.split is None:
            return ready.suite_result, ready.pearson
        group = ready.split.groups[self.group % len(ready.split.groups)]
        return ready.split.suites[group], ready.split.correlations[group]

    def _text_lines(self, ready: Ready) -> list[str]:
        sr, metric = self._shown(ready)[0], ready.settings.metric
        names = sr.names
        lines = [f"{len(names)} models on {clean(metric, 40)} ({ready.settings.estimator}); lines = estimates, dots = "
                 f"each model's simultaneous {1 - ready.settings.alpha:.0%} band."]  # fmt: skip
        if ready.split is not None:  # each group's models, then the differences; the plots show one group
            notes = ready.split.notes
            lines += split_lines(ready.split)
        else:
            notes = [*sr.suite.notes, *sr.notes]
            for i, (name, params) in enumerate(zip(names, sr.suite.parameters, strict=True)):
                res = sr.results[name][metric]
                inst = res.instantaneous["estimate"].mean() if res.instantaneous.height else float("nan")
                size = f" ({compact_count(params)} parameters)" if params else ""
                lines.append(f"  {i + 1} {clean(name, 40)}{size}: mean instantaneous {num(inst, signed=True)}, "
                             f"overall {num(res.overall['estimate'], signed=True)}")  # fmt: skip
            lines += ready.seeds
        return [minus_signs(line) for line in lines + [f"⚠ {clean(n)}" for n in notes]]  # one minus sign

    def _show(self, ready: Ready) -> None:
        if ready.error:
            self._message(f"Compare: {clean(ready.error)}")
            return
        sr, metric = self._shown(ready)[0], ready.settings.metric
        names = sr.names
        self.query_one("#compare-text", Static).update("\n".join(self._text_lines(ready)))
        self._show_groups(ready)
        for widget in (*self.query(OverlayPlot), *self.query(".compare-legend")):
            widget.display = True

        def series(frame_of, x_col) -> list[Series]:
            out = []
            for i, name in enumerate(names):
                frame = frame_of(sr.results[name][metric]).sort(x_col)
                cols = [frame[c].cast(float).to_numpy() for c in ("estimate", "band_low", "band_high")]
                out.append(Series(frame[x_col].to_numpy(), *cols, colour=i))
            return out

        final = short_step(final_checkpoint(sr.results[names[0]][metric]))  # the same checkpoints for every model
        self.query_one("#compare-instantaneous", OverlayPlot).overlay(
            series(lambda r: r.instantaneous, "cohort"),
            title=("Instantaneous memorisation τ(g, g) by cohort g", "Instantaneous τ(g, g) by cohort g",
                   "Instantaneous τ(g, g)"),
        )  # fmt: skip
        self.query_one("#compare-persistent", OverlayPlot).overlay(
            series(lambda r: r.persistent, "event_time"),
            title=("Persistent memorisation by c − g (left of the line: placebo)", "Persistent memorisation by c − g",
                   "Persistent by c − g"),
            marks=(0,),
        )  # fmt: skip
        self.query_one("#compare-residual", OverlayPlot).overlay(
            series(lambda r: r.residual, "cohort"),
            title=(f"Residual memorisation τ(g, {final}) by cohort g", f"Residual τ(g, {final}) by cohort g",
                   f"Residual τ(g, {final})"),
        )  # fmt: skip
        self._show_legends(ready)
        self._show_grid(ready)

    def _show_groups(self, ready: Ready) -> None:
        """The split's legend: each group with its size, the one the plots and grids show marked."""
        note = self.query_one("#compare-by", Static)
        note.display = ready.split is not None
        if ready.split is not None:
            note.update(group_legend(ready.split, self.group % len(ready.split.groups), self._width()))

    def _show_legends(self, ready: Ready) -> None:
        names = [f"{i + 1} {clean(name, 20)}" for i, name in enumerate(self._shown(ready)[0].names)]
        colours = plot_colours(self.app.theme_variables, self.app.current_theme.dark).models
        self._drawn_theme = self.app.theme
        text = legend(names, colours, self._width())
        for line in self.query(".compare-legend"):
            line.update(text)

    def _show_grid(self, ready: Ready) -> None:
        sr, c = self._shown(ready)
        names = sr.names
        scheme = palette.scheme(self.app.current_theme.dark)
        self._drawn_theme = self.app.theme
        title = f"Pearson correlation of the true profiles, corrected for noise ({c.n_cells} cells)"
        width = self._width()
        grid = correlation_grid(names, c.pearson_corrected, c.pearson_corrected_low, c.pearson_corrected_high, title,
                                scheme, width, undetermined=undetermined(c), clipped=c.pearson_clipped)  # fmt: skip
        for note in c.notes:  # what the correlations could not say (as `memtui compare` prints them), wrapped
            grid.append(wrapped(minus_signs(f"⚠ {clean(note, 1000)}"), width) + "\n", style="dim")
        grid.append("\n")
        raw = "Raw Pearson correlation of the profiles (estimated: attenuated by their noise)"
        grid.append_text(correlation_grid(names, c.pearson, c.pearson_low, c.pearson_high, raw, scheme, width))
        grid.append("\n")
        grid.append_text(
            correlation_grid(names, c.spearman, c.spearman_low, c.spearman_high, "Raw Spearman", scheme, width)
        )
        self.query_one("#compare-grid", Static).update(grid)


def undetermined(c) -> np.ndarray:
    """The pairs whose corrected correlation the data do not determine (``Correlations.undetermined``: no interval;
    ``estimation.correlations._corrected_record`` notes the same pairs)."""
    return c.undetermined


def seed_lines(pooled) -> list[str]:
    """The pooled estimate across seeds in a few lines: per summary the pooled value ± its standard error (one
    multiplier per instance shared by every seed) and the seeds' range and sd; per scope whether the seeds agree."""
    s = pooled.settings
    lines = ["", f"Pooled across {len(pooled.names)} seeds (the seeds' mean; ± its standard error from draws shared by "
             f"every seed; classic {1 - s.alpha:.0%} band) and the spread across seeds:"]  # fmt: skip
    for name, summ in pooled.summaries.items():
        label = name.replace("persistent_", "persistent, c − g = checkpoint ")
        lines.append(f"  {label}: {num(summ.estimate, signed=True)} ± {num(summ.std_error, 2)}; seeds "
                     f"{num(summ.min, signed=True)} … {num(summ.max, signed=True)}, sd {num(summ.sd, 2)}")  # fmt: skip
    verdicts = []
    for a in pooled.agreement.values():
        if not math.isfinite(a.statistic):
            verdicts.append(f"{a.scope} —")
        else:
            verdicts.append(f"{a.scope} {'differ (' + clean(a.seed, 20) + ')' if a.rejected else 'agree'} "
                            f"p={a.p_value:.3f}")  # fmt: skip
    lines.append("  Do the seeds agree (largest studentised deviation from the pooled value)? " + "; ".join(verdicts))
    return lines


class _Cancelled(Exception):
    pass
