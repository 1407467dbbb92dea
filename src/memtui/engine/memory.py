"""The bootstrap's memory policy: what an estimate's draws will hold (asked of its band: ``Band.bootstrap_bytes``)
and a one-line refusal, before anything is allocated, of a number of draws that cannot fit."""

from __future__ import annotations

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.memory import human
from memtui.engine import did
from memtui.engine.band import Band
from memtui.engine.band_registry import get_band


def _band(band: Band | str) -> Band:
    return get_band(band) if isinstance(band, str) else band


def bootstrap_bytes(draws: int, lay, band: Band | str) -> int:
    """Peak memory of an estimate's bootstrap of ``draws`` draws of layout ``lay`` under ``band`` (a band or its
    name): the cells, groups and aggregates (event times and the overall average) it holds."""
    n_events = len(np.unique(lay.cell_t - lay.group_index[lay.cell_group]))
    size = {"n_cells": len(lay.cell_group), "n_groups": lay.n_groups, "n_aggregates": n_events + 1}
    return _band(band).bootstrap_bytes(draws, **size, n_units=lay.n_units, width=lay.y.shape[1])


def check_memory(draws: int, lay, band: Band | str) -> None:
    """Refuse, before allocating anything, a bootstrap whose draws cannot fit in the memory available."""
    band = _band(band)
    need = bootstrap_bytes(draws, lay, band)
    have = did.available_memory()
    if have is not None and need > have:
        per_draw = bootstrap_bytes(1, lay, band) - bootstrap_bytes(0, lay, band)
        fits = int((have - (need - draws * per_draw)) / per_draw) // 100 * 100
        advice = f"use at most about {fits} draws (-B {fits})" if fits >= 20 else "use -B 0 (analytic bands)"
        raise MemtuiError(
            f"{draws} bootstrap draws of {len(lay.cell_group)} cells need about {human(need)} of memory and "
            f"{human(have)} is available; {advice}."
        )
