"""Estimate-with-band line plots drawn by plotext inside textual-plotext widgets.

plotext's log axes break on redraw, so everything here is linear; ticks are placed by hand with compact step labels.
Every colour comes from the app's theme (axes and labels through textual-plotext's "auto" theme, the lines from the
theme's variables below), so a light theme gets dark lines and readable ticks.
"""

from __future__ import annotations

import numpy as np
from textual.color import Color
from textual_plotext import PlotextPlot

from memtui.app.fmt import minus, short_step

# which theme variable draws what (the summaries pane's plots share these)
LINE = "accent"  # the estimate
BAND = "foreground-muted"  # the simultaneous band
ZERO = "foreground-darken-3"
MARK = "secondary"  # treatment step / c = g


def theme_colour(app, name: str) -> tuple[int, int, int]:
    """An RGB triple plotext can draw, from the app's current theme (a 256-colour terminal maps it down)."""
    value = app.theme_variables.get(name) or app.theme_variables.get("foreground") or "#888888"
    colour = Color.parse(value)
    if colour.a < 1:  # plotext has no alpha: blend onto the background as the terminal would show it
        colour = Color.parse(app.theme_variables.get("background", "#000000")) + colour
    return colour.rgb


class BandPlot(PlotextPlot):
    """One series tau(x) with its simultaneous band; empty plots show a message instead of axes.

    PlotextPlot rebuilds the whole plot on every render, including renders caused by unrelated layout changes
    elsewhere on screen; this caches the built plot until the data, the size or the theme change.
    """

    DEFAULT_CSS = """
    BandPlot { height: 1fr; min-height: 7; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._version = 0
        self._built: tuple | None = None
        self._shown: tuple | None = None  # the last show() call, replayed in a new theme's colours
        self._shown_theme = ""

    def render(self):
        if self._shown is not None and self._shown_theme != self.app.theme:
            args, kwargs = self._shown
            self.show(*args, **kwargs)
        key = (self._version, self.size, self.app.theme, self.theme)
        if self._built is None or self._built[0] != key:
            self._built = (key, super().render())
        return self._built[1]

    def show(
        self,
        x: np.ndarray,
        estimate: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        *,
        title: str,
        xlabel: str = "",
        marks: tuple = (),
        steps: bool = True,
    ) -> None:
        self._shown = ((x, estimate, low, high), dict(title=title, xlabel=xlabel, marks=marks, steps=steps))
        self._shown_theme = self.app.theme
        line, band, zero, mark = (theme_colour(self.app, name) for name in (LINE, BAND, ZERO, MARK))
        self._version += 1
        plt = self.plt
        plt.clear_figure()
        plt.title(title)
        ok = np.isfinite(estimate)
        if not ok.any():
            plt.xticks([], [])
            plt.yticks([], [])
            plt.title(f"{title} — no estimates")
            self.refresh()
            return
        x = np.asarray(x, dtype=float)[ok].tolist()
        shown = [np.asarray(estimate, dtype=float)[ok]]
        for edge in (low, high):
            b = np.asarray(edge, dtype=float)[ok]
            if np.isfinite(b).all():
                plt.plot(x, b.tolist(), color=band, marker="braille")
                shown.append(b)
        plt.plot(x, shown[0].tolist(), color=line, marker="braille")
        plt.hline(0, color=zero)
        for value in marks:
            plt.vline(float(value), color=mark)
        plt.xticks(*_ticks(x, steps))
        set_y_axis(plt, shown)
        if xlabel:
            plt.xlabel(xlabel)
        self.refresh()


def set_y_axis(plt, values: list[np.ndarray]) -> None:
    """Even ticks that always include 0, on an axis that ends on ticks, over the finite ``values``: the zero line
    sits on the row labelled 0."""
    finite = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    finite = finite[np.isfinite(finite)]
    ticks = nice_ticks(float(finite.min()), float(finite.max()))
    plt.ylim(ticks[0], ticks[-1])
    plt.yticks(ticks, [tick_label(t, ticks) for t in ticks])


def x_ticks(x: list[float], steps: bool = True) -> tuple[list[float], list[str]]:
    """Up to five evenly spread ticks at the distinct data points, labelled like the heatmap's axes."""
    return _ticks(sorted(set(x)), steps)


def nice_ticks(low: float, high: float, target: int = 4) -> list[float]:
    """Evenly spaced ticks at 1, 2, 2.5 or 5 x 10^k that cover [low, high] and 0, about ``target`` intervals."""
    low, high = min(low, 0.0), max(high, 0.0)
    span = high - low
    if not np.isfinite(span) or span <= 0:
        return [-1.0, 0.0, 1.0] if span == 0 and low == 0 else [min(low, 0.0), 0.0, max(high, 0.0)]
    raw = span / target
    power = 10.0 ** np.floor(np.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first, last = np.floor(low / step + 1e-9), np.ceil(high / step - 1e-9)
    return [round(float(k * step), 12) for k in np.arange(first, last + 1)]


def tick_label(value: float, ticks: list[float]) -> str:
    """One precision for every tick of an axis (enough decimals for its step), so the labels line up."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = max(0, -int(np.floor(np.log10(step) + 1e-9)))
    if abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6:  # 2.5 x 10^k needs one more digit
        decimals += 1
    text = f"{value:.{decimals}f}"
    return "0" if float(text) == 0 else minus(text)


def _ticks(x: list[float], steps: bool) -> tuple[list[float], list[str]]:
    """Up to five evenly spread ticks at data points, labelled like the heatmap's axes."""
    if not x:
        return [], []
    idx = sorted(set(np.linspace(0, len(x) - 1, min(5, len(x))).round().astype(int).tolist()))
    ticks = [x[i] for i in idx]
    labels = [short_step(v) if steps else minus(f"{v:g}") for v in ticks]
    return ticks, labels
