"""What the calibration study measured: the family-wise error of each band at the designs it simulated, and the notes
an estimate gets when its design is one where its band is known not to hold its level.

This replaces R `did`'s fixed rule ("groups under 5 instances") with evidence (docs/calibration-study.md and
docs/estimation.md, "Small cohorts"): null panels of 20 cohorts x 21 checkpoints (white noise, 200
never-treated controls, B = 1000) show the classic band flagging a post-treatment cell in 94 % of panels at 10
instances per cohort, 46 % at 20, 8 % at 100 and 6.5 % at 300, and 22 % at the paper's design (100 per cohort,
95 x 96); the calibrated band holds 5 % from 10 per cohort up, but not below: 13 % at 5 per cohort and every panel at
3 (a Rademacher bootstrap of 3 instances has too few sign patterns to reach the tails of a t law with 2 degrees of
freedom); cohorts of 2 mostly get an infinite band, cohorts of 1 none. A design the study did not simulate is
measured by `memtui calibrate PANEL` (estimation/calibration.py). No numerics here: the notes and the app read it; the
table is ``engine.evidence`` and each band's notes are its own (``Band.design_notes``), so the bands can write them.
"""

from __future__ import annotations

import numpy as np

from memtui.engine import evidence as _evidence
from memtui.engine.band_registry import BANDS, DEFAULT_BAND
from memtui.engine.evidence import STUDY as STUDY
from memtui.engine.evidence import Measured as Measured
from memtui.engine.evidence import nearest as nearest

# below this many instances per cohort a band is known not to hold its level (see the table above), per band
MISCALIBRATED_BELOW = {name: band.miscalibrated_below for name, band in BANDS.items()}


def _band(band: str):
    return BANDS.get(band, BANDS[DEFAULT_BAND])


def known_miscalibrated(per_cohort: np.ndarray, band: str) -> np.ndarray:
    """Per cohort (or cell, given its cohort's size): whether the band is known not to hold its level there."""
    return np.asarray(per_cohort) < _band(band).miscalibrated_below


def design_notes(
    cohorts: list[tuple[int, int]], post_cells: int, band: str, min_control: int | None = None
) -> list[str]:
    """The notes of an estimate whose design is known to be mis-calibrated under ``band``.

    ``cohorts``: (step, instances) of every cohort; ``post_cells``: post-treatment cells; ``min_control``: the
    smallest control set of a cell (None: the estimator has none)."""
    return _band(band).design_notes(cohorts, post_cells, min_control)


def group_notes(lay, est, band: str = DEFAULT_BAND) -> list[str]:
    """``design_notes`` of an estimate's layout and cells: the drop-in replacement of ``results.group_notes``."""
    cohorts, post_cells, min_control = _evidence.design(lay, est)
    return design_notes(cohorts, post_cells, band, min_control)


def small_cells(lay, est, band: str = DEFAULT_BAND) -> np.ndarray:
    """The ``small_group`` column: the cell's cohort or control set is one where ``band`` is known not to hold."""
    return _evidence.small_cells(lay, est, _band(band).miscalibrated_below)
