"""Number formatting shared by the panes: compact steps for axes, fixed significant digits for estimates.

One number format: a fixed number of significant digits with the trailing zeros kept (``+24.00`` beside ``+5.443``,
never ``+24``; ``+0.000``, never ``+0``), and the numbers that belong together (an estimate and its interval, a
column) on one number of decimals (``nums``). Every number the app shows is written with one minus sign, U+2212 (−),
never the hyphen-minus: ``minus`` below, used by every formatter here (a `-19k` beside a `−10` read as two different
things), and ``minus_signs`` for the words other layers write (a group ``x<-0.64``, a range ``[-1.6, 3.9]``)."""

from __future__ import annotations

import math
import re

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


EXPONENT_BELOW, EXPONENT_FROM = 1e-4, 1e6  # magnitudes written as 1.234e−05 / 1.234e+06


def _exponent(value: float, digits: int) -> int:
    """The power of ten of ``value`` once rounded to ``digits`` significant digits (9.9996 -> 1, as 10.00)."""
    return int(f"{abs(value):.{max(digits, 1) - 1}e}".split("e")[1])


def decimals(largest: float, digits: int = 4) -> int:
    """Decimals that give ``largest`` (a magnitude) ``digits`` significant digits; ``digits - 1`` for 0."""
    if not math.isfinite(largest) or largest == 0:
        return max(digits - 1, 0)
    return max(0, digits - 1 - _exponent(largest, digits))


def num(value, digits: int = 4, signed: bool = False) -> str:
    """A float with ``digits`` significant digits, trailing zeros kept (24 -> '24.00', 0 -> '0.000'); whole numbers
    past ``digits`` digits as they are (12345), exponent form below 1e−4 and from 1e6; '—' for missing values."""
    if value is None:
        return "—"
    value = float(value) + 0.0  # -0.0 -> 0.0: no "−0.000"
    if not math.isfinite(value):
        return "—"
    sign = "+" if signed else ""
    if value != 0 and not EXPONENT_BELOW <= abs(value) < EXPONENT_FROM:
        return minus(f"{value:{sign}.{max(digits, 1) - 1}e}")
    return minus(f"{value:{sign}.{decimals(abs(value), digits)}f}")


def nums(values, digits: int = 4, signed: bool = False) -> list[str]:
    """Numbers that are read together (an estimate and its band, a CI's two ends) on one number of decimals: those
    that give the largest of them ``digits`` significant digits (``[+5.44, +24.00]``, never ``[+5.443, +24]``).
    Missing values are '—'; magnitudes that need the exponent form are written each on its own."""
    values = [None if v is None else float(v) + 0.0 for v in values]
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    largest = max(finite, default=0.0)
    if largest >= EXPONENT_FROM or 0 < largest < EXPONENT_BELOW:
        return [num(v, digits, signed) for v in values]
    places = decimals(largest, digits)
    sign = "+" if signed else ""
    return [num(v) if v is None or not math.isfinite(v) else minus(f"{v:{sign}.{places}f}") for v in values]


# a hyphen-minus that is a minus sign: before a number and after no letter, digit or point (x<-0.6, [-1.6, 3.9]; not
# neox-41k, 2026-11-26 or 1e-3), or an operator between spaces (c - g)
_MINUS = re.compile(r"(?<![\w.\-])-(?=\.?\d)| - ")


def minus_signs(text: str) -> str:
    """Words from the layers below (group names, sentences) with every hyphen-minus that is a minus sign written as
    the app writes it, so a line never shows ``-0.64`` beside ``−3.2``; hyphens in names and options stay."""
    return _MINUS.sub(lambda m: " − " if m.group(0) == " - " else "−", text)


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
