"""Estimate-with-band line plots drawn by plotext inside textual-plotext widgets.

plotext's log axes break on redraw, so everything here is linear; ticks are placed by hand with compact step labels.
"""

from __future__ import annotations

import numpy as np
from textual_plotext import PlotextPlot

from memtui.app.fmt import short_step

LINE = 208  # estimate: the warm end of the heatmap ramp
BAND = 244  # simultaneous band
ZERO = 240
MARK = 39  # treatment step / cursor column


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

    def render(self):
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
                plt.plot(x, b.tolist(), color=BAND, marker="braille")
        plt.plot(x, np.asarray(estimate, dtype=float)[ok].tolist(), color=LINE, marker="braille")
        plt.hline(0, color=ZERO)
        for value in marks:
            plt.vline(float(value), color=MARK)
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
