"""Numbers as the command line prints them: ASCII only (a '-' minus, an 'x' for times), and never rounded into
something they are not (a p-value of 0.049 shown as 0.05 at alpha 0.05, a bound of -0.004 shown as -0.00)."""

from __future__ import annotations

import math


def p_value(p: float, alpha: float = 0.05) -> str:
    """Three decimals, more where three would put the shown value on the other side of ``alpha`` than the value
    itself (0.0496 at 0.05 is 0.0496, not 0.050); '<0.001' below that (below alpha / 10 for a smaller alpha)."""
    if p is None or not math.isfinite(p):
        return "n/a"
    floor = min(0.001, alpha / 10)
    if 0 <= p < floor:
        return f"<{floor:g}"
    for digits in range(3, 10):
        text = f"{p:.{digits}f}"
        if (float(text) < alpha) == (p < alpha):
            return text
    return repr(p)


def fixed2(x: float) -> str:
    """Two decimals, but a value that rounds to zero keeps its first significant digit and its sign: -0.004, never
    -0.00 (which reads as a bound at zero, and a sign that tells nothing)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x != 0 and round(x, 2) == 0:
        return f"{x:.1g}"
    return f"{x:.2f}".replace("-0.00", "0.00")
