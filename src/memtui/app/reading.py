"""Reading a panel for the workbench: whatever a damaged file makes h5py raise becomes one line."""

from __future__ import annotations

from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.text import clean


def read_for_app(path: Path):
    """``read_panel``, with whatever a damaged file makes h5py raise turned into one line."""
    from memtui.panel.hdf5 import read_panel

    try:
        return read_panel(path)
    except MemtuiError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes h5py raise is one line, not a traceback
        raise MemtuiError(
            f"{path} cannot be read ({type(exc).__name__}: {clean(exc, 160)}); it may be damaged."
        ) from None
