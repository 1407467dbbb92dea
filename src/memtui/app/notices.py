"""Notices (Textual's toasts) that fit their box: a path too long for a line is shortened from its start (``…/`` and
the folders nearest the file), never broken mid-word over several lines; one notice of a kind at a time.

A toast is 60 columns wide, at most half the screen, less its padding and its coloured left edge: 37 columns of text
at 80 columns. Rich wrapped a longer path anywhere inside it, and three notices in a row stacked over the heatmap.
"""

from __future__ import annotations

import re

from rich.cells import cell_len

TOAST_WIDTH, TOAST_FRAME = 60, 3  # Textual's Toast: width 60, max-width 50 %, padding 1 either side, border-left


def toast_text_width(screen_width: int) -> int:
    """The columns of text in one line of a toast on a screen ``screen_width`` wide."""
    return max(10, min(TOAST_WIDTH, screen_width // 2) - TOAST_FRAME)


def shorten_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` columns: ``…/`` and the last folders and the file's name that fit; where the
    name alone is too long, its start (the panel it came from) and its end (the settings, the suffix) around ``…``."""
    if cell_len(path) <= width:
        return path
    parts = path.rstrip("/").split("/")
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if cell_len(f"…/{part}/{tail}") > width:
            break
        tail = f"{part}/{tail}"
    out = f"…/{tail}" if len(parts) > 1 else tail
    if cell_len(out) <= width:
        return out
    head = "…/" if len(parts) > 1 else ""
    room = max(2, width - len(head) - 1)
    return f"{head}{tail[: room - room // 3]}…{tail[-(room // 3) :]}"


_PATHLIKE = re.compile(r"\S*/\S*")  # a word with a slash in it: a path (the sentence's own punctuation kept)


def fit_paths(message: str, width: int) -> str:
    """``message`` with every path longer than a toast's line shortened from its start to fit one."""

    def fit(match: re.Match) -> str:
        word = match.group(0)
        end = len(word) - len(word.rstrip(".,;:)'\"`"))  # the sentence's full stop stays after the path
        path, after = (word[:-end], word[-end:]) if end else (word, "")
        return shorten_path(path, width - len(after)) + after if cell_len(word) > width else word

    return _PATHLIKE.sub(fit, message)
