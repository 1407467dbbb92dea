"""The heatmap's diverging palette, chosen from xterm-256 colour-cube entries.

Over SSH ``COLORTERM`` is often unset and Textual falls back to 256 colours. Every colour below *is* a 256-colour
cube (or grey-ramp) entry given as its exact RGB, so the 256-colour downgrade maps each one onto itself and the map
looks the same in truecolor and in 256 colours. The two ramps rise in lightness from near-black at 0 (dark
terminals), warm for memorisation (tau > 0), cool for the opposite sign, with matched lightness steps.
"""

from __future__ import annotations

import numpy as np
from rich.color import Color
from rich.style import Style

LEVELS = 8  # colour steps per sign
WARM = (52, 88, 124, 160, 166, 202, 208, 214)  # tau > 0: dark red -> orange -> amber
COOL = (18, 19, 20, 21, 26, 32, 38, 45)  # tau < 0: dark blue -> azure -> cyan
HIDDEN_BG = 235  # a non-significant cell in "hide" mode
PRE_BG = 234  # pre-treatment (placebo) cells, hatched
PRE_FG = 240
HATCH = "╱"
DIM_GLYPH = "░"  # non-significant cells in "dim" mode: the colour at a quarter of the cell


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


def lightness(index: int) -> float:
    """CIE L* of a 256-colour entry, to pick a readable cursor glyph colour."""

    def lin(v: int) -> float:
        v = v / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(v) for v in xterm_rgb(index))
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return 116 * y ** (1 / 3) - 16 if y > 0.008856 else 903.3 * y


# Ramp index k in [-LEVELS, LEVELS), sign folded in: k < 0 cool, k >= 0 warm. RAMP[k + LEVELS] is its colour index.
RAMP = tuple(reversed(COOL)) + WARM


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


def solid(level: int) -> Style:
    return Style(bgcolor=cube(RAMP[level]))


def dimmed(level: int) -> Style:
    return Style(color=cube(RAMP[level]), bgcolor=cube(HIDDEN_BG))


def hidden() -> Style:
    return Style(bgcolor=cube(HIDDEN_BG))


def pre(level: int | None = None) -> Style:
    """Pre-treatment cells: hatched grey, or hatched in the ramp colour when the placebo cell is significant."""
    return Style(color=cube(PRE_FG if level is None else RAMP[level]), bgcolor=cube(PRE_BG))


def cursor_fg(level: int | None) -> Color:
    """Black on light cells, white elsewhere, so the cursor stays visible on every colour."""
    if level is not None and lightness(RAMP[level]) > 60:
        return cube(16)
    return cube(231)
