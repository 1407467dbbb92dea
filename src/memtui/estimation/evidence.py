"""What the calibration study measured: the family-wise error of each band at the designs it simulated, and the notes
an estimate gets when its design is one where its band is known not to hold its level.

This replaces R `did`'s fixed rule ("groups under 5 instances") with evidence (docs/calibration-study.md and
docs/estimation.md, "Small cohorts"): null panels of 20 cohorts x 21 checkpoints (white noise, 200
never-treated controls, B = 1000) show the classic band flagging a post-treatment cell in 94 % of panels at 10
instances per cohort, 46 % at 20, 8 % at 100 and 6.5 % at 300, and 22 % at the paper's design (100 per cohort,
95 x 96); the calibrated band holds 5 % from 10 per cohort up, but not below: 13 % at 5 per cohort and every panel at
3 (a Rademacher bootstrap of 3 instances has too few sign patterns to reach the tails of a t law with 2 degrees of
freedom); cohorts of 2 mostly get an infinite band, cohorts of 1 none. A design the study did not simulate is
measured by `memtui calibrate PANEL` (estimation/calibration.py). No numerics here: the notes and the app read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# below this many instances per cohort a band is known not to hold its level (see the table below)
MISCALIBRATED_BELOW = {"calibrated": 10, "classic": 300}


@dataclass(frozen=True)
class Measured:
    """One simulated design: post-family family-wise error (share, Monte-Carlo s.e.) of each band."""

    per_cohort: int
    cohorts: int
    checkpoints: int
    post_cells: int
    panels: int
    classic: tuple[float, float]
    calibrated: tuple[float, float]
    source: str

    @property
    def label(self) -> str:
        return f"{self.per_cohort}/cohort, {self.cohorts}x{self.checkpoints}"

    def rate(self, band: str) -> tuple[float, float]:
        return getattr(self, band)


_S20 = "docs/calibration-study.md"
_SMALL = "docs/estimation.md (small cohorts, memtui.estimation.calibration)"
STUDY = (
    Measured(2, 20, 21, 210, 300, (0.993, 0.005), (0.047, 0.012), _SMALL),
    Measured(3, 20, 21, 210, 300, (0.990, 0.006), (1.000, 0.002), _SMALL),
    Measured(5, 20, 21, 210, 300, (1.000, 0.002), (0.133, 0.020), _SMALL),
    Measured(10, 20, 21, 210, 300, (0.937, 0.014), (0.047, 0.012), _SMALL),
    Measured(20, 20, 21, 210, 1000, (0.460, 0.016), (0.049, 0.007), _S20),
    Measured(30, 20, 21, 210, 1000, (0.265, 0.014), (0.063, 0.008), _S20),
    Measured(100, 20, 21, 210, 1000, (0.080, 0.009), (0.050, 0.007), _S20),
    Measured(300, 20, 21, 210, 600, (0.065, 0.010), (0.048, 0.009), _S20),
    Measured(100, 95, 96, 4560, 60, (0.217, 0.053), (0.033, 0.023), _S20),
)


def nearest(per_cohort: float, post_cells: float) -> Measured:
    """The simulated design closest to one with ``per_cohort`` instances per cohort and ``post_cells`` cells (on a
    log scale; the cohort size counts twice as much as the number of cells, which moves the error less)."""

    def distance(m: Measured) -> float:
        return 2 * abs(math.log(max(per_cohort, 1) / m.per_cohort)) + abs(math.log(max(post_cells, 1) / m.post_cells))

    return min(STUDY, key=distance)


def known_miscalibrated(per_cohort: np.ndarray, band: str) -> np.ndarray:
    """Per cohort (or cell, given its cohort's size): whether the band is known not to hold its level there."""
    return np.asarray(per_cohort) < MISCALIBRATED_BELOW.get(band, MISCALIBRATED_BELOW["calibrated"])


def _pct(rate: tuple[float, float]) -> str:
    return f"{100 * rate[0]:.0f} %"


def design_notes(
    cohorts: list[tuple[int, int]], post_cells: int, band: str, min_control: int | None = None
) -> list[str]:
    """The notes of an estimate whose design is known to be mis-calibrated under ``band``.

    ``cohorts``: (step, instances) of every cohort; ``post_cells``: post-treatment cells; ``min_control``: the
    smallest control set of a cell (None: the estimator has none)."""
    from memtui.engine.layout import listing

    limit = MISCALIBRATED_BELOW.get(band, MISCALIBRATED_BELOW["calibrated"])
    small = [(step, n) for step, n in cohorts if n < limit]
    notes = []
    if small and band == "classic":
        sizes = np.array([n for _, n in cohorts])
        m = nearest(float(np.median(sizes)), post_cells)
        notes.append(
            f"the classic band over-rejects at this design: null panels of the nearest simulated design ({m.label}) "
            f"flag a post-treatment cell in {_pct(m.classic)} of panels (calibrated band {_pct(m.calibrated)}, "
            f"nominal 5 %); {len(small)} of {len(cohorts)} cohorts have fewer than {limit} instances; `memtui "
            "calibrate PANEL` measures this design (column small_group)"
        )
    elif small:
        ones = [(s, n) for s, n in small if n == 1]
        rest = [(s, n) for s, n in small if n > 1]
        if ones:
            notes.append(
                f"{len(ones)} cohort(s) have a single instance, step (n): {listing(ones)}; the calibrated band gives "
                "their cells no band (no variance of their own): never significant (column small_group)"
            )
        if rest:
            notes.append(
                f"{len(rest)} cohort(s) have fewer than {limit} instances, step (n): {listing(rest)}; the calibrated "
                "band over-rejects with cohorts this small (null panels: 100 % family-wise error at 3 per cohort, "
                "13 % at 5, 5 % at 10; cohorts of 2 mostly get no finite band): treat their significance with caution "
                "(column small_group); `memtui calibrate PANEL` measures this design"
            )
    if min_control is not None and min_control < limit:
        notes.append(
            f"a cell has only {min_control} control instance(s): the {band} band is not known to hold its level with "
            f"control sets under {limit} (column small_group); `memtui calibrate PANEL` measures this design"
        )
    return notes


def group_notes(lay, est, band: str = "calibrated") -> list[str]:
    """``design_notes`` of an estimate's layout and cells: the drop-in replacement of ``results.group_notes``."""
    cohorts = [(int(lay.steps[lay.group_index[g]]), int(lay.group_n[g])) for g in lay.cohort_groups]
    min_control = int(est.n_control.min()) if lay.controls and len(est.n_control) else None
    return design_notes(cohorts, int((~lay.cell_pre).sum()), band, min_control)


def small_cells(lay, est, band: str = "calibrated") -> np.ndarray:
    """The ``small_group`` column: the cell's cohort or control set is one where ``band`` is known not to hold."""
    limit = MISCALIBRATED_BELOW.get(band, MISCALIBRATED_BELOW["calibrated"])
    return (est.n_treated < limit) | ((est.n_control < limit) & lay.controls)
