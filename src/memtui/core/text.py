"""Text that came from a file, made safe to show: no control characters reach the user's terminal.

A panel attribute, a table's column name or a progress file is data from a file anyone may have written. Printed raw,
an ESC sequence in it could retitle, recolour or clear the user's terminal (or hide what follows it), so everything
memtui shows that it read from a file goes through :func:`clean` first.
"""

from __future__ import annotations

import re
import unicodedata

# C0 and C1 controls (tab and newline included: a shown value is one line), DEL, and the bidirectional overrides that
# can make a line read differently from what it holds.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(value: object, limit: int | None = 400) -> str:
    """``str(value)`` with control characters replaced by ``?`` and cut to ``limit`` characters (None: no limit)."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = _UNSAFE.sub("?", unicodedata.normalize("NFC", text))
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def compact_count(n: float) -> str:
    """A count in three significant digits with k, M or B: 858880 -> '859k' (model sizes in tables and titles)."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)
