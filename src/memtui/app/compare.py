"""Compare pane: every model of a suite on one screen — instantaneous memorisation by cohort, persistent by c − g and
residual by cohort overlaid (each model's line with its band, a legend of model names), and the matrices of
correlations between the models' profiles as small coloured grids.

The suite is estimated in a thread of the pane's own (``estimation.suite.estimate_suite``: shared draws, so all models
cost little more than one) and the result arrives as a typed message; results are kept per settings, so cycling
back to a metric is immediate."""

from __future__ import annotations

import math

import numpy as np
from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker
from textual_plotext import PlotextPlot

from memtui.app import palette
from memtui.app.fmt import minus, num
from memtui.app.plots import set_y_axis, x_ticks
from memtui.core.errors import MemtuiError
from memtui.core.text import clean, compact_count
from memtui.estimation.settings import Settings

# one 256-colour index per model, distinct in hue and readable on dark and light backgrounds
MODEL_COLOURS = (208, 39, 170, 71, 196, 178, 37, 99)
ZERO = 244


def model_colour(index: int) -> int:
    return MODEL_COLOURS[index % len(MODEL_COLOURS)]


class OverlayPlot(PlotextPlot):
    """Several models' estimate lines (braille) with their bands (dotted, same colour) on one pair of axes.

    The built plot is cached until the data, the size or the theme change (PlotextPlot rebuilds on every render)."""

    DEFAULT_CSS = "OverlayPlot { height: 1fr; min-height: 9; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._version = 0
        self._built: tuple | None = None

    def render(self):
        key = (self._version, self.size, self.app.theme)
        if self._built is None or self._built[0] != key:
            self._built = (key, super().render())
        return self._built[1]

    def overlay(self, series: list[tuple[str, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]], *, title: str,
                marks: tuple = (), bands: bool = True) -> None:  # fmt: skip
        """``series``: (label, colour, x, estimate, band low, band high) per model."""
        self._version += 1
        plt = self.plt
        plt.clear_figure()
        plt.title(title)
        xs: list[float] = []
        for label, colour, x, est, low, high in series:
            ok = np.isfinite(est)
            if not ok.any():
                continue
            xv = np.asarray(x, dtype=float)[ok].tolist()
            xs += xv
            if bands:
                for edge in (low, high):
                    e = np.asarray(edge, dtype=float)[ok]
                    if np.isfinite(e).all():
                        plt.plot(xv, e.tolist(), color=colour, marker="dot")
            plt.plot(xv, np.asarray(est, dtype=float)[ok].tolist(), color=colour, marker="braille", label=label)
        if not xs:
            plt.title(f"{title} — no estimates")
            plt.xticks([], [])
            plt.yticks([], [])
        else:
            plt.hline(0, color=ZERO)
            for value in marks:
                plt.vline(float(value), color=ZERO)
            set_y_axis(plt, [v for *_, est, low, high in series for v in (est, low, high)])
            plt.xticks(*x_ticks(xs))
        self.refresh()


def correlation_grid(
    names: list[str],
    matrix: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    title: str,
    scheme: palette.Scheme = palette.DARK,
) -> Text:
    """A k × k grid of correlations, each cell coloured on the heatmap's ramp (so +1 is the strongest warm colour),
    with the bootstrap interval of each pair listed under it for the pairs that fit."""
    width = max(6, *(len(clean(n, 24)) for n in names))
    text = Text(f"{title}\n", style="bold")
    text.append(" " * (width + 1) + "".join(f"{i + 1:>7}" for i in range(len(names))) + "\n")
    lv = palette.levels(np.nan_to_num(matrix, nan=0.0), 1.0)
    for i, name in enumerate(names):
        text.append(f"{i + 1} {clean(name, 24):<{width}}")
        for j in range(len(names)):
            value = matrix[i, j]
            if not math.isfinite(value):
                text.append(f"{'—':>7}")
                continue
            bg = scheme.ramp[int(lv[i, j])]
            text.append(" ")
            text.append(minus(f"{value:+.2f} "), style=Style(color=palette.readable_on(bg), bgcolor=palette.cube(bg)))
        text.append("\n")
    pairs = [
        f"{i + 1}–{j + 1} [{num(low[i, j], 2)}, {num(high[i, j], 2)}]"
        for i in range(len(names))
        for j in range(i + 1, len(names))
        if math.isfinite(low[i, j])
    ]
    if pairs:
        text.append("intervals: " + "  ".join(pairs) + "\n", style="dim")
    return text


class ComparePane(VerticalScroll, can_focus=True):
    """Every model of the suite side by side for the current metric and settings."""

    class Ready(Message):
        """The suite's estimate (or why there is none) for ``settings``."""

        def __init__(self, settings: Settings, suite_result=None, pearson=None, error: str = "") -> None:
            super().__init__()
            self.settings, self.suite_result, self.pearson, self.error = settings, suite_result, pearson, error

    def __init__(self, suite=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.settings: Settings | None = None
        self._ready: dict[Settings, ComparePane.Ready] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="compare-text", markup=False)
        yield OverlayPlot(id="compare-instantaneous", classes="compare-plot")
        yield OverlayPlot(id="compare-persistent", classes="compare-plot")
        yield OverlayPlot(id="compare-residual", classes="compare-plot")
        yield Static("", id="compare-grid", markup=False)

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme) -> None:
        """The grid's cells are coloured on the heatmap's palette, which differs between dark and light themes."""
        ready = self._ready.get(self.settings) if self.settings is not None else None
        if ready is not None and not ready.error:
            self._show_grid(ready)

    def show_settings(self, settings: Settings) -> None:
        """Show the suite for ``settings``: at once when estimated before, else estimate it in the background."""
        self.settings = settings
        if self.suite is None or len(self.suite.names) < 2:
            self._message("Compare needs several panels of the same instances: `memtui A.h5 B.h5 …` opens a suite.")
            return
        if settings in self._ready:
            self._show(self._ready[settings])
            return
        self._message(f"Estimating {len(self.suite.names)} models on {clean(settings.metric, 40)}…")
        self._estimate(settings)

    def _message(self, text: str) -> None:
        self.query_one("#compare-text", Static).update(text)
        for plot in self.query(OverlayPlot):
            plot.display = False
        self.query_one("#compare-grid", Static).update("")

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def _estimate(self, settings: Settings) -> None:
        from dataclasses import replace

        from memtui.estimation.suite import correlations, estimate_suite

        worker = get_current_worker()

        def progress(fraction: float, stage: str) -> None:
            if worker.is_cancelled:
                raise _Cancelled

        try:
            # the comparison is of causal profiles: the workbench's naive estimators are shown per model elsewhere
            sr = estimate_suite(self.suite, replace(settings, engine="memtui"), progress=progress)
            corr = correlations(sr, settings.metric, scope="post")
            ready = self.Ready(settings, sr, corr)
        except _Cancelled:
            return
        except MemtuiError as exc:
            ready = self.Ready(settings, error=str(exc))
        self.post_message(ready)

    @on(Ready)
    def _on_ready(self, event: Ready) -> None:
        self._ready[event.settings] = event
        if event.settings == self.settings:
            self._show(event)

    def _show(self, ready: Ready) -> None:
        if ready.error:
            self._message(f"Compare: {clean(ready.error)}")
            return
        sr, metric = ready.suite_result, ready.settings.metric
        names = sr.names
        lines = [f"{len(names)} models on {clean(metric, 40)} ({ready.settings.estimator}); lines = estimates, dots = "
                 f"each model's simultaneous {1 - ready.settings.alpha:.0%} band."]  # fmt: skip
        for i, (name, params) in enumerate(zip(names, sr.suite.parameters, strict=True)):
            res = sr.results[name][metric]
            inst = res.instantaneous["estimate"].mean() if res.instantaneous.height else float("nan")
            size = f" ({compact_count(params)} parameters)" if params else ""
            lines.append(f"  {i + 1} {clean(name, 40)}{size}: mean instantaneous {num(inst, signed=True)}, overall "
                         f"{num(res.overall['estimate'], signed=True)}")  # fmt: skip
        lines += [f"⚠ {clean(n)}" for n in (*sr.suite.notes, *sr.notes)]
        self.query_one("#compare-text", Static).update("\n".join(lines))
        for plot in self.query(OverlayPlot):
            plot.display = True

        def series(frame_of, x_col):
            out = []
            for i, name in enumerate(names):
                frame = frame_of(sr.results[name][metric]).sort(x_col)
                cols = [frame[c].cast(float).to_numpy() for c in ("estimate", "band_low", "band_high")]
                out.append((f"{i + 1} {clean(name, 20)}", model_colour(i), frame[x_col].to_numpy(), *cols))
            return out

        self.query_one("#compare-instantaneous", OverlayPlot).overlay(
            series(lambda r: r.instantaneous, "cohort"), title="Instantaneous memorisation τ(g, g) by cohort g"
        )
        self.query_one("#compare-persistent", OverlayPlot).overlay(
            series(lambda r: r.persistent, "event_time"), title="Persistent memorisation by c − g", marks=(0,)
        )
        self.query_one("#compare-residual", OverlayPlot).overlay(
            series(lambda r: r.residual, "cohort"), title="Residual memorisation by cohort g at the final checkpoint"
        )
        self._show_grid(ready)

    def _show_grid(self, ready: Ready) -> None:
        c, names = ready.pearson, ready.suite_result.names
        scheme = palette.scheme(self.app.current_theme.dark)
        title = f"Pearson correlation of the profiles ({c.n_cells} cells)"
        grid = correlation_grid(names, c.pearson, c.pearson_low, c.pearson_high, title, scheme)
        grid.append("\n")
        grid.append_text(correlation_grid(names, c.spearman, c.spearman_low, c.spearman_high, "Spearman", scheme))
        self.query_one("#compare-grid", Static).update(grid)


class _Cancelled(Exception):
    pass
