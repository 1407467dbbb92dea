"""Line plots with bands drawn by plotext inside textual-plotext widgets, laid out for the size they get.

A plot is drawn when it is rendered, at its size, so that what depends on the size is right at every size:
- the title: the fullest of its wordings that fits above the plot (plotext drops a title that does not fit, and every
  title vanished below ~110 columns);
- the y axis: scaled to the estimates, as a reader would draw it, with the bands up to a margin of the estimates'
  range beyond them; a band that reaches further is clipped at the edge and the title says so (a band of
  ±500 around estimates near 1 otherwise flattens every line onto zero);
- the y ticks: even steps that include 0, on whole rows the same number of rows apart (the axis is stretched by less
  than a step so that each tick lands on a row; plotext otherwise rounds ticks to rows unevenly, or two onto one);
- the x ticks: round steps (1, 2 or 5 x 10^k) within the data, as many as their labels leave room for.
Colours come from the theme and are checked for contrast against the theme's background as a 256-colour terminal
shows both (``PlotColours``): the plot draws no background of its own, so it sits on the pane's. plotext's log axes
break on redraw, so everything here is linear; x ticks are labelled with compact step labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.color import Color as RichColor
from rich.color import ColorSystem
from rich.text import Text
from textual.color import Color, ColorParseError
from textual_plotext import PlotextPlot

from memtui.app import palette
from memtui.app.fmt import minus, short_step

TITLE_ROWS = 1  # plotext's row above the frame
FRAME_ROWS = 2  # the frame's top and bottom lines
XTICK_ROWS = 1  # the x tick labels under the frame

# Theme variables tried in turn for each part of a plot; the first that stands out enough from the background, in
# truecolor and in 256 colours, is used (textual-light's accent, orange on light grey, does not: its primary does).
CANDIDATES = {
    "line": ("accent", "primary", "secondary", "foreground"),  # the estimate
    "band": ("foreground-muted", "foreground-darken-1", "foreground"),  # the simultaneous band
    "zero": ("foreground-darken-3", "foreground-muted", "foreground"),
    "mark": ("secondary", "primary", "warning", "foreground"),  # treatment step / c = g
    "ticks": ("foreground-muted", "foreground"),
}
# least CIE L* difference from the background (as a 256-colour terminal shows both): lines must stand out, the zero
# line and band only be seen
CONTRAST = {"line": 30.0, "band": 20.0, "zero": 15.0, "mark": 25.0, "ticks": 30.0}
# ANSI themes name the terminal's own 16 colours: plot in those (plotext writes 0-15 as the terminal's colours)
ANSI = {"line": 12, "band": 8, "zero": 7, "mark": 13, "ticks": "default"}


def lightness(rgb: tuple[int, int, int]) -> float:
    """CIE L* (0-100) of an RGB colour."""

    def lin(v: int) -> float:
        v = v / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(v) for v in rgb)
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return 116 * y ** (1 / 3) - 16 if y > 0.008856 else 903.3 * y


def as_256(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """The colour a 256-colour terminal shows for ``rgb`` (Textual's fallback when COLORTERM is not set, as over
    SSH): rich's own downgrade, which the app's output goes through."""
    triplet = RichColor.from_rgb(*rgb).downgrade(ColorSystem.EIGHT_BIT).get_truecolor()
    return triplet.red, triplet.green, triplet.blue


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """The smaller L* difference of two colours, in truecolor and as a 256-colour terminal shows them."""
    return min(abs(lightness(a) - lightness(b)), abs(lightness(as_256(a)) - lightness(as_256(b))))


@dataclass(frozen=True)
class PlotColours:
    """What a plot draws in, for one theme: RGB triples (or ANSI numbers for the ANSI themes)."""

    line: tuple | int
    band: tuple | int
    zero: tuple | int
    mark: tuple | int
    ticks: tuple | str
    models: tuple  # one per model on the Compare pane
    background: tuple[int, int, int] | None  # None: the terminal's own (ANSI themes)


def _parse(variables: dict, name: str) -> tuple[int, int, int] | None:
    value = variables.get(name)
    if not value:
        return None
    try:
        colour = Color.parse(value)
    except ColorParseError:  # e.g. "ansi_default 50%"
        return None
    if colour.a < 1:  # plotext has no alpha: blend onto the background as the terminal would show it
        colour = Color.parse(variables.get("background", "#000000")) + colour
    return colour.rgb


def _is_ansi(variables: dict) -> bool:
    """A theme of the terminal's own colours (textual-ansi): its RGB values are placeholders."""
    try:
        return Color.parse(variables.get("background", "")).ansi is not None
    except ColorParseError:
        return True


def plot_colours(variables: dict[str, str], dark: bool) -> PlotColours:
    """The plot colours of a theme (its ``theme_variables``), each readable on its background in 256 colours."""
    models = palette.model_colours(dark)
    background = _parse(variables, "background")
    if background is None or _is_ansi(variables):  # the terminal's default background and its 16 colours
        return PlotColours(**ANSI, models=tuple(palette.ANSI_MODELS), background=None)
    chosen = {}
    for part, names in CANDIDATES.items():
        options = [rgb for rgb in (_parse(variables, n) for n in names) if rgb is not None]
        readable = [rgb for rgb in options if contrast(rgb, background) >= CONTRAST[part]]
        # no theme colour stands out enough: the cube's black or white, whichever is further from the background
        fallback = (0, 0, 0) if lightness(background) > 50 else (255, 255, 255)
        chosen[part] = readable[0] if readable else fallback
    return PlotColours(**chosen, models=tuple(palette.xterm_rgb(i) for i in models), background=background)


# ---- axes ------------------------------------------------------------------------------------------------------


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


BAND_MARGIN = 1.0  # how far past the estimates' range (in that range) the y axis follows a band before clipping it


@dataclass(frozen=True)
class YAxis:
    ticks: list[float]
    labels: list[str]
    limits: tuple[float, float]
    rows: list[int]  # the canvas row of each tick, counted from the bottom (what plotext will draw)
    clipped: bool = False  # a band reaches past the limits: drawn along the edge, and the title says so


def _finite(values: list[np.ndarray]) -> np.ndarray:
    out = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values]) if values else np.array([])
    return out[np.isfinite(out)]


def y_range(estimates: list[np.ndarray], bands: list[np.ndarray]) -> tuple[float, float]:
    """The values the y axis must show: the estimates and 0, and the bands up to ``BAND_MARGIN`` times the estimates'
    range beyond them (the whole bands when the estimates have no range)."""
    est, band = _finite(estimates), _finite(bands)
    if not est.size and not band.size:
        return -1.0, 1.0
    if not est.size:
        return min(float(band.min()), 0.0), max(float(band.max()), 0.0)
    low, high = min(float(est.min()), 0.0), max(float(est.max()), 0.0)
    span = high - low
    if band.size:
        if span > 0:
            low = max(min(float(band.min()), low), low - BAND_MARGIN * span)
            high = min(max(float(band.max()), high), high + BAND_MARGIN * span)
        else:  # every estimate 0: the bands give the scale
            low, high = min(float(band.min()), low), max(float(band.max()), high)
    return low, high


def y_axis(values: list[np.ndarray], rows: int, bands: list[np.ndarray] = ()) -> YAxis:
    """Ticks for a canvas of ``rows`` rows showing ``values`` (the estimates) and ``bands`` as far as ``y_range``
    allows: even steps that include 0, about four of them, each on a whole row and the same number of rows from the
    next (at least two where the rows allow: a blank row between labels). The limits reach past the outer ticks by
    the rows left over, shared out above and below; ``clipped`` says whether a band reaches past them."""
    low, high = y_range(list(values), list(bands))
    usable = max(rows - 1, 1)
    ticks = _fewest_rows(low, high, usable)
    n = max(len(ticks) - 1, 1)
    per = max(usable // n, 1)  # rows per step
    step = (ticks[-1] - ticks[0]) / n if len(ticks) > 1 else 1.0
    spare = max(usable - n * per, 0)
    below = spare // 2
    limits = (ticks[0] - below * step / per, ticks[0] + usable * step / per - below * step / per)
    rows_at = [_row(t, limits, rows) for t in ticks]
    band = _finite(list(bands))
    clipped = bool(band.size and (band.min() < limits[0] or band.max() > limits[1]))
    return YAxis(ticks, [tick_label(t, ticks) for t in ticks], limits, rows_at, clipped)


def _fewest_rows(low: float, high: float, usable: int) -> list[float]:
    """The ticks for ``usable`` rows whose axis (the ticks, stretched to whole rows per step) is the narrowest, with a
    blank row between labels unless labels on every row make the axis a third narrower (on a plot a few rows high,
    two rows per step can force a step so coarse that the lines sit flat on zero)."""
    candidates = [nice_ticks(low, high, target) for target in (4, 3, 2, 1)]

    def drawn(ticks: list[float], spacing: int) -> float | None:
        """The span of the axis drawn with ``ticks``, at least ``spacing`` rows per step; None: they do not fit."""
        n = max(len(ticks) - 1, 1)
        per = usable // n
        return None if per < spacing else usable * (ticks[-1] - ticks[0]) / n / per

    def narrowest(spacing: int) -> tuple[float, list[float]] | None:
        fit = [(span, ticks) for ticks in candidates if (span := drawn(ticks, spacing)) is not None]
        return min(fit, key=lambda f: (f[0], -len(f[1]))) if fit else None

    spaced, dense = narrowest(2), narrowest(1)
    if spaced is not None and (dense is None or dense[0] * 1.5 >= spaced[0]):
        return spaced[1]
    return dense[1] if dense is not None else candidates[-1]


def _row(value: float, limits: tuple[float, float], rows: int) -> int:
    """The canvas row plotext draws ``value`` on (its own formula, plotext._utility.get_matrix_data)."""
    import math

    return math.floor(round(0.5 + (rows - 1) * (value - limits[0]) / (limits[1] - limits[0]), 8))


def x_ticks(x: list[float], steps: bool = True, width: int = 10_000) -> tuple[list[float], list[str]]:
    """Ticks at round steps (1, 2 or 5 x 10^k) within the data, labelled like the heatmap's axes: up to five, fewer
    where their labels would not fit ``width`` columns with a gap of three between them. The data points themselves
    where the data span less than two round steps."""
    x = sorted(set(x))
    if not x:
        return [], []

    def label(v: float) -> str:
        return short_step(v) if steps else minus(f"{v:g}")

    chosen: list[float] = []
    for target in (4, 3, 2, 1):
        ticks = _round_steps(x[0], x[-1], target)
        if len(ticks) < 2:
            continue
        chosen = ticks  # the fewest so far: what is drawn when none fits
        if sum(len(label(t)) + 3 for t in ticks) <= width:
            chosen = ticks
            break
    if len(chosen) < 2:  # a single point, or a range too narrow for round steps: the points, spread out
        idx = sorted(set(np.linspace(0, len(x) - 1, min(3, len(x))).round().astype(int).tolist()))
        chosen = [x[i] for i in idx]
    return chosen, [label(v) for v in chosen]


def _round_steps(low: float, high: float, target: int) -> list[float]:
    """The multiples of a 1, 2 or 5 x 10^k step inside [low, high], about ``target`` steps of it."""
    span = high - low
    if not np.isfinite(span) or span <= 0:
        return []
    power = 10.0 ** np.floor(np.log10(span / target))
    options = []
    for step in (m * power for m in (1, 2, 5, 10)):
        first, last = np.ceil(low / step - 1e-9), np.floor(high / step + 1e-9)
        options.append([round(float(k * step), 9) for k in np.arange(first, last + 1)])
    # the step whose ticks come nearest ``target`` intervals (fewer on a tie)
    return min(options, key=lambda t: (abs(len(t) - 1 - target), len(t)))


def fit_title(titles: tuple[str, ...], width: int, label_width: int) -> str:
    """The fullest wording that plotext will draw: centred on the canvas (the width less the y labels and the frame)
    with a free column either side and within the plot. The shortest, cut with an ellipsis, when none fits."""

    def fits(text: str) -> bool:
        start = label_width + 1 + (width - 2 - label_width) // 2 - len(text) // 2
        return start >= 1 and start + len(text) + 1 <= width

    for title in titles:
        if fits(title):
            return title
    title = titles[-1] if titles else ""
    while title and not fits(title):
        title = title[:-2] + "…" if len(title) > 2 else ""
    return title


# ---- the widget ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One line with its band: x, the estimate, and the band's edges (drawn in ``colour``, or the theme's)."""

    x: np.ndarray
    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    colour: int | None = None  # a model's index into the theme's model colours; None: the theme's line colour


class BandPlot(PlotextPlot):
    """Estimate lines with their simultaneous bands, drawn for the size and theme the widget has when rendered.

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
        self._series: list[Series] = []
        self._titles: tuple[str, ...] = ()
        self._xlabel = ""
        self._marks: tuple = ()
        self._steps = True
        self._band_marker = "braille"
        self.drawn_title = ""  # what the last render wrote above the plot (the tests read it)
        self.drawn_axis: YAxis | None = None
        self._held = False  # blank until the next show: its owner paints its words first, the plot a frame later
        self._rebuild_now = False  # the frame after a theme change: build for the new theme (see render)

    def hold(self) -> None:
        """Draw nothing until the next ``show``/``show_series`` (not the lines of data about to be replaced)."""
        if not self._held:
            self._held = True
            self.refresh()

    def show(
        self,
        x: np.ndarray,
        estimate: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        *,
        title: str | tuple[str, ...],
        xlabel: str = "",
        marks: tuple = (),
        steps: bool = True,
    ) -> None:
        """One series; ``title``: its wordings, fullest first (the widest that fits is drawn)."""
        self.show_series([Series(x, estimate, low, high)], title=title, xlabel=xlabel, marks=marks, steps=steps)

    def show_series(
        self,
        series: list[Series],
        *,
        title: str | tuple[str, ...],
        xlabel: str = "",
        marks: tuple = (),
        steps: bool = True,
        band_marker: str = "braille",
    ) -> None:
        self._series = series
        self._titles = (title,) if isinstance(title, str) else tuple(title)
        self._xlabel, self._marks, self._steps, self._band_marker = xlabel, marks, steps, band_marker
        self._version += 1
        self._held = False
        self.refresh()

    def render(self):
        if self._held:
            return Text("")
        key = (self._version, self.size, self.app.theme)
        if self._built is None or self._built[0] != key:
            if self._built is not None and self._built[0][:2] == key[:2] and not self._rebuild_now:
                # only the theme changed: the theme's first frame (the panes restyled, the heatmap recoloured) draws
                # the plot blank, on the new background, and the next one the plot in the theme's colours (plotext
                # builds the whole plot for new colours, a fifth of that first frame); not the old colours
                self.call_after_refresh(self._rebuild)
                return Text("")
            self._built = (key, self._build())
        self._rebuild_now = False
        return self._built[1]

    def _rebuild(self) -> None:
        self._rebuild_now = True
        self.refresh()

    def _build(self) -> Text:
        width, height = self.size.width, self.size.height
        colours = plot_colours(self.app.theme_variables, self.app.current_theme.dark)
        plt = self.plt
        plt.clear_figure()
        plt.plotsize(width, height)
        plt._set_size(width, height)
        plt.theme("clear")  # no background of its own: the plot sits on the pane's
        plt.ticks_color(colours.ticks)
        plt.axes_color("default")
        plt.canvas_color("default")
        shown = [s for s in self._series if np.isfinite(np.asarray(s.estimate, dtype=float)).any()]
        if not shown:
            self.drawn_title = fit_title(tuple(f"{t} — no estimates" for t in self._titles), width, 0)
            plt.title(self.drawn_title)
            plt.xticks([], [])
            plt.yticks([], [])
            self.drawn_axis = None
            return Text.from_ansi(plt.build())
        # the axis first (it depends on every series), then each line with its band clipped to it
        rows = height - TITLE_ROWS - FRAME_ROWS - XTICK_ROWS - (1 if self._xlabel else 0)
        drawn = []
        for s in shown:
            ok = np.isfinite(np.asarray(s.estimate, dtype=float))
            edges = [np.asarray(edge, dtype=float)[ok] for edge in (s.low, s.high)]
            drawn.append((s, ok, [b for b in edges if np.isfinite(b).all()]))
        axis = y_axis([np.asarray(s.estimate, dtype=float)[ok] for s, ok, _ in drawn], rows,
                      [b for _, _, edges in drawn for b in edges])  # fmt: skip
        xs: list[float] = []
        for s, ok, edges in drawn:
            x = np.asarray(s.x, dtype=float)[ok].tolist()
            xs += x
            colour = colours.line if s.colour is None else colours.models[s.colour % len(colours.models)]
            for b in edges:
                band = colours.band if s.colour is None else colour
                plt.plot(x, np.clip(b, *axis.limits).tolist(), color=band, marker=self._band_marker)
            plt.plot(x, np.asarray(s.estimate, dtype=float)[ok].tolist(), color=colour, marker="braille")
        plt.hline(0, color=colours.zero)
        for value in self._marks:
            plt.vline(float(value), color=colours.mark)
        label_width = max(len(label) for label in axis.labels)
        plt.xticks(*x_ticks(xs, self._steps, width - label_width - 3))
        if self._xlabel:
            plt.xlabel(self._xlabel)
        plt.ylim(*axis.limits)
        plt.yticks(axis.ticks, axis.labels)
        self.drawn_axis = axis
        titles = clipped_titles(self._titles) if axis.clipped else self._titles
        self.drawn_title = fit_title(titles, width, label_width)
        plt.title(self.drawn_title)
        return Text.from_ansi(plt.build())


CLIPPED = (" · bands clipped at the axis", " · bands clipped", " (clipped)")


def clipped_titles(titles: tuple[str, ...]) -> tuple[str, ...]:
    """A plot's wordings when a band reaches past the y axis: each with the fullest note first, so that the drawn
    title always says the bands are clipped (``fit_title`` draws the first that fits)."""
    return tuple(title + note for note in CLIPPED for title in titles) + ("bands clipped",)
