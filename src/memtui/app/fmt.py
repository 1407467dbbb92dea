"""Number formatting shared by the panes: compact steps for axes, fixed significant digits for estimates.

Every number the app shows is written with one minus sign, U+2212 (−), never the hyphen-minus: ``minus`` below, used
by every formatter here (a `-19k` beside a `−10` read as two different things)."""

from __future__ import annotations

import math

from memtui.core.text import clean


def minus(text: str) -> str:
    """A formatted number with the typographic minus sign (−) for the hyphen-minus Python writes."""
    return text.replace("-", "−")


def integer(value) -> str:
    """A whole number as the app writes it: ``-4000`` -> '−4000'."""
    return minus(str(int(value)))


def short_step(step: int) -> str:
    """1000 -> '1k', 1500 -> '1.5k', 143000 -> '143k', 2000000 -> '2M', -2000 -> '−2k': checkpoint, cohort and
    c − g labels."""
    step = int(step)
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if abs(step) >= size and step % (size // 10) == 0:
            value = step / size
            return minus(f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}")
    return integer(step)


def num(value, digits: int = 4, signed: bool = False) -> str:
    """A float with ``digits`` significant digits; '—' for missing values."""
    if value is None:
        return "—"
    value = float(value)
    if not math.isfinite(value):
        return "—"
    return minus(f"{value:+.{digits}g}" if signed else f"{value:.{digits}g}")


def float_format(largest: float | None) -> str:
    """One format for a whole column of floats, so its numbers align on the decimal point: four significant
    digits for the column's largest magnitude (and as many decimals for every other row), or exponent form for
    a column whose largest value is huge or tiny."""
    if largest is None or not math.isfinite(largest) or largest == 0:
        return ".4f"
    if largest >= 1e5 or largest < 1e-3:
        return ".3e"
    return f".{min(6, max(1, 3 - math.floor(math.log10(largest))))}f"


def cell(value, spec: str | None = None) -> str:
    """A table cell: like the CSV but nulls blank and floats in the column's ``spec`` (5 significant digits
    without one)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return minus(format(value, spec) if spec else f"{value:.5g}")
    if isinstance(value, str):  # from the panel (a metric name): no control characters into the terminal
        return clean(value, 60)
    if isinstance(value, int):
        return integer(value)
    return str(value)


def markup_literal(text: str) -> str:
    """``text`` for a place that parses Textual markup (the command palette), shown exactly as written: every ``[``
    escaped, so nothing in it can open a style, a link or an ``@click`` action, or fail to parse."""
    return text.replace("[", "\\[")
