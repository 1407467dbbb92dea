"""The workbench's remembered preferences (theme, animations) in ``$XDG_CONFIG_HOME/memtui/config.json``.

A missing, unreadable or hand-mangled file is the defaults, never an error: preferences must not stop the app from
opening a panel. Written through ``atomic_write``, so a crash mid-save never leaves half a file.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from memtui.core.files import atomic_write

DEFAULT_THEME = "textual-dark"


@dataclass(frozen=True)
class Preferences:
    theme: str = DEFAULT_THEME
    animations: bool = True  # the tab underline slide; off makes pane switches settle at once


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if Path(base).is_absolute() else Path.home() / ".config"  # the spec ignores relative paths
    return root / "memtui" / "config.json"


def load() -> Preferences:
    try:
        data = json.loads(config_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Preferences()
    if not isinstance(data, dict):
        return Preferences()
    theme = data.get("theme")
    animations = data.get("animations")
    return Preferences(
        theme=theme if isinstance(theme, str) and theme and len(theme) < 100 else DEFAULT_THEME,
        animations=animations if isinstance(animations, bool) else True,
    )


def save(preferences: Preferences) -> None:
    """Best effort: raises memtui.core.files.WriteError (a MemtuiError) when the folder cannot be written."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(preferences), indent=2) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
