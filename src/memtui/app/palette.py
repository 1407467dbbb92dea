"""The heatmap's diverging palettes, chosen from xterm-256 colour-cube entries: one for dark themes, one for light.

Over SSH ``COLORTERM`` is often unset and Textual falls back to 256 colours. Every colour below *is* a 256-colour
cube (or grey-ramp) entry given as its exact RGB, so the 256-colour downgrade maps each ramp colour onto itself (and
each grey onto itself or its grey-ramp neighbour) and the map looks the same in truecolor and in 256 colours. Each
ramp starts near the theme's background at 0 and moves away from it in lightness as |tau| grows (lighter on a dark
theme, darker on a light one), warm for memorisation (tau > 0), cool for the opposite sign, with matched lightness
steps; the greys of hidden and pre-treatment cells sit just off the background. A light theme with the dark palette
would draw every near-zero cell black.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.color import Color
from rich.style import Style

LEVELS = 8  # colour steps per sign
HATCH = "╱"
DIM_GLYPH = "░"  # non-significant cells in "dim" mode: the colour at a quarter of the cell


@dataclass(frozen=True)
class Scheme:
    """One palette: the two ramps (from |tau| = 0 outwards) and the greys of the cells without a colour."""

    warm: tuple[int, ...]  # tau > 0
    cool: tuple[int, ...]  # tau < 0
    hidden_bg: int  # a non-significant cell in "hide" mode
    pre_bg: int  # pre-treatment (placebo) cells, hatched
    pre_fg: int
    plain_fg: int  # the cursor's colour on a cell without a ramp colour

    @property
    def ramp(self) -> tuple[int, ...]:
        """Ramp index k in [-LEVELS, LEVELS), sign folded in: k < 0 cool, k >= 0 warm; ramp[k + LEVELS] is its
        colour index."""
        return tuple(reversed(self.cool)) + self.warm

    def colours(self) -> tuple[int, ...]:
        return (*self.ramp, self.hidden_bg, self.pre_bg, self.pre_fg, self.plain_fg)


# CIE L* of the steps, dark: warm 18 27 36 45 55 61 68 77, cool 14 20 26 32 43 54 66 80
DARK = Scheme(
    warm=(52, 88, 124, 160, 166, 202, 208, 214),  # dark red -> orange -> amber
    cool=(18, 19, 20, 21, 26, 32, 38, 45),  # dark blue -> azure -> cyan
    hidden_bg=235,
    pre_bg=234,
    pre_fg=240,
    plain_fg=231,
)
# light: warm 89 79 70 62 53 45 36 27, cool 87 84 72 59 46 32 26 20
LIGHT = Scheme(
    warm=(224, 217, 210, 203, 196, 160, 124, 88),  # pale pink -> red -> dark red
    cool=(189, 153, 111, 69, 27, 21, 20, 19),  # pale lavender -> blue -> navy
    hidden_bg=188,  # the cube's light grey: rich maps the grey ramp's lightest entries one step off
    pre_bg=188,
    pre_fg=246,
    plain_fg=16,
)


def scheme(dark: bool) -> Scheme:
    return DARK if dark else LIGHT


def xterm_rgb(index: int) -> tuple[int, int, int]:
    """The RGB value xterm (and rich's downgrade) assigns to a 256-colour index >= 16."""
    if index >= 232:
        v = 8 + 10 * (index - 232)
        return v, v, v
    i = index - 16
    levels = [0 if v == 0 else 55 + 40 * v for v in (i // 36, (i // 6) % 6, i % 6)]
    return levels[0], levels[1], levels[2]


def cube(index: int) -> Color:
    return Color.from_rgb(*xterm_rgb(index))


def hex_colour(index: int) -> str:
    """``#rrggbb`` of a 256-colour entry, for rich style strings."""
    return "#{:02x}{:02x}{:02x}".format(*xterm_rgb(index))


def lightness(index: int) -> float:
    """CIE L* (0-100) of a 256-colour entry, to pick a readable text colour on it."""

    def lin(v: int) -> float:
        v = v / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(v) for v in xterm_rgb(index))
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return 116 * y ** (1 / 3) - 16 if y > 0.008856 else 903.3 * y


def readable_on(index: int) -> Color:
    """Black on light colours, white on dark ones."""
    return cube(16) if lightness(index) > 60 else cube(231)


def levels(values: np.ndarray, scale: float) -> np.ndarray:
    """Ramp position (0 .. 2*LEVELS-1) of each value, symmetric around 0 and saturating at +-scale."""
    step = np.floor(np.abs(values) / scale * LEVELS)
    step = np.clip(np.nan_to_num(step), 0, LEVELS - 1).astype(np.int64)
    return np.where(values < 0, LEVELS - 1 - step, LEVELS + step)


def robust_scale(values: np.ndarray, quantile: float = 0.98) -> float:
    """The colour scale's half-range: a high quantile of |tau| so that one outlier cannot wash out the map."""
    finite = np.abs(values[np.isfinite(values)])
    if not finite.size:
        return 1.0
    scale = float(np.quantile(finite, quantile))
    return scale if scale > 0 else float(finite.max()) or 1.0


def solid(s: Scheme, level: int) -> Style:
    return Style(bgcolor=cube(s.ramp[level]))


def dimmed(s: Scheme, level: int) -> Style:
    return Style(color=cube(s.ramp[level]), bgcolor=cube(s.hidden_bg))


def hidden(s: Scheme) -> Style:
    return Style(bgcolor=cube(s.hidden_bg))


def pre(s: Scheme, level: int | None = None) -> Style:
    """Pre-treatment cells: hatched grey, or hatched in the ramp colour when the placebo cell is significant."""
    return Style(color=cube(s.pre_fg if level is None else s.ramp[level]), bgcolor=cube(s.pre_bg))


def cursor_fg(s: Scheme, level: int | None) -> Color:
    """A colour that stands out on the cursor's cell: readable on its ramp colour, else the scheme's plain one."""
    return cube(s.plain_fg) if level is None else readable_on(s.ramp[level])


# One colour per model on the Compare pane, distinct in hue, as 256-colour cube entries (the same in truecolor and
# after the 256-colour fallback): on dark themes light ones (CIE L* 70-97), on light themes dark ones (L* 27-54), so
# each stands out from every built-in theme's background by 25 L* or more, in 256 colours too (tests: test_app_plots).
MODELS_DARK = (214, 45, 213, 77, 210, 227, 147, 87)  # amber, sky, pink, green, salmon, yellow, lavender, aqua
MODELS_LIGHT = (166, 25, 127, 28, 160, 94, 30, 55)  # orange, blue, purple, green, red, brown, teal, indigo
ANSI_MODELS = (9, 12, 13, 10, 11, 14, 1, 4)  # ANSI themes: the terminal's own colours


def model_colours(dark: bool) -> tuple[int, ...]:
    return MODELS_DARK if dark else MODELS_LIGHT
