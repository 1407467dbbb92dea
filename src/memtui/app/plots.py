"""Estimate-with-band line plots drawn by plotext inside textual-plotext widgets.

plotext's log axes break on redraw, so everything here is linear; ticks are placed by hand with compact step labels.
Every colour comes from the app's theme (axes and labels through textual-plotext's "auto" theme, the lines from the
theme's variables below), so a light theme gets dark lines and readable ticks.
"""

from __future__ import annotations

import numpy as np
from textual.color import Color
from textual_plotext import PlotextPlot

from memtui.app.fmt import short_step

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
        for band in (low, high):
            b = np.asarray(band, dtype=float)[ok]
            if np.isfinite(b).all():
                plt.plot(x, b.tolist(), color=band, marker="braille")
        plt.plot(x, np.asarray(estimate, dtype=float)[ok].tolist(), color=line, marker="braille")
        plt.hline(0, color=zero)
        for value in marks:
            plt.vline(float(value), color=mark)
        plt.xticks(*_ticks(x, steps))
        if xlabel:
            plt.xlabel(xlabel)
        self.refresh()


def _ticks(x: list[float], steps: bool) -> tuple[list[float], list[str]]:
    """Up to five evenly spread ticks at data points, labelled like the heatmap's axes."""
    if not x:
        return [], []
    idx = sorted(set(np.linspace(0, len(x) - 1, min(5, len(x))).round().astype(int).tolist()))
    ticks = [x[i] for i in idx]
    labels = [short_step(v) if steps else f"{v:g}" for v in ticks]
    return ticks, labels
