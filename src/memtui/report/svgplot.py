"""Small dependency-free SVG figures for reports: line plots with shaded bands and a legend, and a coloured grid for a
correlation matrix. Plain text out (a standalone SVG 1.1 document), so a report needs no plotting library and the
figures diff and render anywhere (GitHub shows them inline)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from memtui.core.files import atomic_write

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
FONT = 'font-family="Helvetica, Arial, sans-serif"'


@dataclass
class Series:
    """One line: ``y`` over ``x``; ``low``/``high`` shade a band around it; NaN points break the line."""

    name: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    color: str | None = None
    dashed: bool = False
    markers: bool = True


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        lo, hi = lo - 0.5 if lo == hi else hi, hi + 0.5
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.0e}".replace("e-0", "e-").replace("e+0", "e")
    return f"{v:g}"


def _text(x, y, s, size=11, anchor="middle", extra="") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {FONT}{extra}>{escape(s)}</text>'


def _runs(ok: np.ndarray) -> list[np.ndarray]:
    """Index runs where ``ok`` holds (a missing point breaks a line or a band)."""
    idx = np.flatnonzero(ok)
    return [r for r in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1) if r.size] if idx.size else []


def line_plot(
    series: Sequence[Series],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    width: int = 520,
    height: int = 320,
    hline: float | None = 0.0,
    legend: bool = True,
) -> str:
    """Lines with optional shaded bands, axes with round ticks, a legend (top right) and a reference line."""
    left, right, top, bottom = 64, 16, 30 if title else 12, 46
    pw, ph = width - left - right, height - top - bottom
    arrays = _as_arrays(series)
    xs = np.concatenate([a[0] for a in arrays]) if arrays else np.array([0.0, 1.0])
    ys = np.concatenate([v for a in arrays for v in a[1:] if v is not None]) if arrays else np.array([0.0, 1.0])
    if hline is not None:
        ys = np.append(ys, hline)
    xs, ys = xs[np.isfinite(xs)], ys[np.isfinite(ys)]
    xt = nice_ticks(float(xs.min()) if xs.size else 0.0, float(xs.max()) if xs.size else 1.0)
    yt = nice_ticks(float(ys.min()) if ys.size else 0.0, float(ys.max()) if ys.size else 1.0)
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def px(v):
        return left + (v - x0) / (x1 - x0) * pw

    def py(v):
        return top + ph - (v - y0) / (y1 - y0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
    ]
    if title:
        out.append(_text(width / 2, 18, title, 13, extra=' font-weight="bold"'))
    for t in yt:
        out.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{left + pw}" y2="{py(t):.1f}" stroke="#e5e5e5"/>')
        out.append(_text(left - 6, py(t) + 4, _fmt(t), 10, "end"))
    for t in xt:
        out.append(f'<line x1="{px(t):.1f}" y1="{top + ph}" x2="{px(t):.1f}" y2="{top + ph + 4}" stroke="#444"/>')
        out.append(_text(px(t), top + ph + 16, _fmt(t), 10))
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    if hline is not None and y0 <= hline <= y1:
        out.append(f'<line x1="{left}" y1="{py(hline):.1f}" x2="{left + pw}" y2="{py(hline):.1f}" '
                   'stroke="#888" stroke-dasharray="2,3"/>')  # fmt: skip
    if xlabel:
        out.append(_text(left + pw / 2, height - 8, xlabel, 11))
    if ylabel:
        out.append(_text(14, top + ph / 2, ylabel, 11, extra=f' transform="rotate(-90 14 {top + ph / 2:.1f})"'))
    out += _series_marks(series, arrays, px, py)
    if legend and series:
        out += _legend(series, left + pw - 8, top + 8)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _as_arrays(series: Sequence[Series]) -> list[tuple]:
    """Each series' (x, y, low, high) as float arrays (low and high None where it has no band)."""
    arrays = []
    for s in series:
        x = np.asarray(s.x, dtype=float)
        y = np.asarray(s.y, dtype=float)
        lo = np.asarray(s.low, dtype=float) if s.low is not None else None
        hi = np.asarray(s.high, dtype=float) if s.high is not None else None
        arrays.append((x, y, lo, hi))
    return arrays


def _series_marks(series: Sequence[Series], arrays: list[tuple], px, py) -> list[str]:
    """Each series' band (shaded), line and markers, over its runs of finite values; px, py map data to pixels."""
    out = []
    for i, (s, (x, y, lo, hi)) in enumerate(zip(series, arrays, strict=True)):
        color = s.color or PALETTE[i % len(PALETTE)]
        if lo is not None and hi is not None:
            for r in _runs(np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)):
                pts = [(px(x[j]), py(lo[j])) for j in r] + [(px(x[j]), py(hi[j])) for j in r[::-1]]
                path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
                out.append(f'<polygon points="{path}" fill="{color}" fill-opacity="0.18" stroke="none"/>')
        dash = ' stroke-dasharray="5,3"' if s.dashed else ""
        for r in _runs(np.isfinite(x) & np.isfinite(y)):
            path = " ".join(f"{px(x[j]):.1f},{py(y[j]):.1f}" for j in r)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>')
            if s.markers:
                out += [f'<circle cx="{px(x[j]):.1f}" cy="{py(y[j]):.1f}" r="1.8" fill="{color}"/>' for j in r]
    return out


def _legend(series: Sequence[Series], lx: float, ly: int) -> list[str]:
    """A boxed legend whose top right corner is at (lx, ly): a line sample and the name of each series."""
    out = []
    wide = max(len(s.name) for s in series) * 6.2 + 30
    out.append(f'<rect x="{lx - wide:.1f}" y="{ly}" width="{wide:.1f}" height="{16 * len(series) + 6}" '
               'fill="white" fill-opacity="0.85" stroke="#ccc"/>')  # fmt: skip
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        yy = ly + 14 + 16 * i
        dash = ' stroke-dasharray="5,3"' if s.dashed else ""
        out.append(f'<line x1="{lx - wide + 6:.1f}" y1="{yy - 4}" x2="{lx - wide + 22:.1f}" y2="{yy - 4}" '
                   f'stroke="{color}" stroke-width="2"{dash}/>')  # fmt: skip
        out.append(_text(lx - wide + 26, yy, s.name, 10, "start"))
    return out


def _diverging(v: float, vmin: float, vmax: float) -> str:
    """Blue (vmin) - white (middle) - red (vmax); grey for NaN."""
    if not math.isfinite(v):
        return "#dddddd"
    mid = (vmin + vmax) / 2
    t = max(-1.0, min(1.0, (v - mid) / ((vmax - vmin) / 2)))
    end = (178, 24, 43) if t >= 0 else (33, 102, 172)
    a = abs(t)
    r, g, b = (round(255 + (c - 255) * a) for c in end)
    return f"#{r:02x}{g:02x}{b:02x}"


def grid(
    matrix: np.ndarray,
    labels: Sequence[str],
    *,
    title: str = "",
    vmin: float = -1.0,
    vmax: float = 1.0,
    cell: int = 56,
    digits: int = 2,
    notes: Sequence[Sequence[str]] | None = None,
) -> str:
    """A square grid of coloured cells (diverging colours between vmin and vmax) with the value written in each;
    ``notes`` adds a second, smaller line per cell (e.g. an interval)."""
    m = np.asarray(matrix, dtype=float)
    n = len(labels)
    label_w = max(len(s) for s in labels) * 7 + 12 if labels else 20
    top = 30 if title else 10
    width = label_w + n * cell + 12
    height = top + n * cell + label_w
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
    ]
    if title:
        out.append(_text(width / 2, 18, title, 13, extra=' font-weight="bold"'))
    for i in range(n):
        y = top + i * cell
        out.append(_text(label_w - 6, y + cell / 2 + 4, labels[i], 11, "end"))
        for j in range(n):
            x = label_w + j * cell
            v = m[i, j]
            out.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{_diverging(v, vmin, vmax)}" '
                       'stroke="white"/>')  # fmt: skip
            ink = "white" if math.isfinite(v) and abs(v - (vmin + vmax) / 2) > 0.6 * (vmax - vmin) / 2 else "#222"
            shown = f"{v:.{digits}f}" if math.isfinite(v) else "-"
            dy = -2 if notes else 4
            out.append(_text(x + cell / 2, y + cell / 2 + dy, shown, 12, extra=f' fill="{ink}"'))
            if notes:
                out.append(_text(x + cell / 2, y + cell / 2 + 12, notes[i][j], 8, extra=f' fill="{ink}"'))
    for j in range(n):
        x = label_w + j * cell + cell / 2
        y = top + n * cell + 6
        out.append(_text(x, y, labels[j], 11, "end", extra=f" transform={quoteattr(f'rotate(-60 {x:.1f} {y})')}"))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(path: str | Path, svg: str) -> Path:
    path = Path(path)
    atomic_write(path, lambda tmp: tmp.write_text(svg, encoding="utf-8"))
    return path
