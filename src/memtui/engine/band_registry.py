"""The bands by name, as linearmodels' ``CovarianceManager`` names its covariance estimators: the settings' choices
and refusals, the CLI's ``--band`` and the dialogs read this table; nothing else names a band.

Adding a band: its module (``band_<name>.py``, implementing ``engine.band.Band``), one line in ``BANDS`` and its name
in ``BandName`` (docs/architecture.md, "How to add a band")."""

from __future__ import annotations

from typing import Literal

from memtui.core.errors import MemtuiError
from memtui.engine.band import Band
from memtui.engine.band_calibrated import CALIBRATED
from memtui.engine.band_classic import CLASSIC
from memtui.engine.band_permutation import PERMUTATION

# Settings.band's type; a test holds it equal to BANDS' names
BandName = Literal["calibrated", "classic", "permutation"]

# in the order the choices list them; the first is the default
BANDS: dict[str, Band] = {band.name: band for band in (CALIBRATED, CLASSIC, PERMUTATION)}
DEFAULT_BAND: BandName = "calibrated"


def band_names() -> tuple[str, ...]:
    """The registered bands' names, default first."""
    return tuple(BANDS)


def get_band(name: str) -> Band:
    """The band called ``name``; a one-line refusal naming the bands for any other."""
    band = BANDS.get(name)
    if band is None:
        raise MemtuiError(f"band must be one of {', '.join(BANDS)}, not '{name}'.")
    return band
