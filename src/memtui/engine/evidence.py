"""What the calibration study measured (docs/calibration-study.md, docs/methods.md "Small cohorts"): the
family-wise error of each band at the designs it simulated, R `did`'s small-group rule, and the notes they give an
estimate. The bands' own notes (``band_calibrated``, ``band_classic``) are written from these; no numerics here.
``estimation.evidence`` is the same table for the layers above, with each band's thresholds from the registry."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from memtui.engine.layout import listing

SMALL_GROUP = 5  # R `did` warns about groups smaller than this; measured in docs/methods.md ("Small cohorts")


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


def pct(rate: tuple[float, float]) -> str:
    return f"{100 * rate[0]:.0f} %"


def design(lay, est) -> tuple[list[tuple[int, int]], int, int | None]:
    """An estimate's design as the notes read it: (step, instances) of every cohort, the post-treatment cells and
    the smallest control set of a cell (None: the estimator has none)."""
    cohorts = [(int(lay.steps[lay.group_index[g]]), int(lay.group_n[g])) for g in lay.cohort_groups]
    min_control = int(est.n_control.min()) if lay.controls and len(est.n_control) else None
    return cohorts, int((~lay.cell_pre).sum()), min_control


def control_note(min_control: int | None, limit: int, band: str) -> list[str]:
    """The note of a cell whose control set is under ``limit`` instances, where ``band`` is not known to hold."""
    if min_control is None or min_control >= limit:
        return []
    return [
        f"a cell has only {min_control} control instance(s): the {band} band is not known to hold its level with "
        f"control sets under {limit} (column small_group); `memtui calibrate PANEL` measures this design"
    ]


def r_did_notes(lay, est) -> list[str]:
    """Say which cohorts and control sets are too small for the inference to hold (R `did`'s rule)."""
    notes = []
    t = len(lay.steps)
    small = [(int(lay.steps[lay.group_index[g]]), int(lay.group_n[g])) for g in lay.cohort_groups]
    small = [(step, n) for step, n in small if n < SMALL_GROUP]
    if small:
        notes.append(
            f"{len(small)} cohort(s) have fewer than {SMALL_GROUP} instances, step (n): {listing(small)}; their "
            "standard errors run low and bands too narrow (docs/estimation.md, small cohorts): treat their "
            "significance with caution (column small_group)"
        )
    few = (est.n_control < SMALL_GROUP) & lay.controls  # the extractable estimator has no control set at all
    if few.any():
        never = int(lay.group_n[0]) if lay.group_index[0] >= t else 0
        which = (
            f"the control group has only {never} never-treated instance(s)"
            if never < SMALL_GROUP
            else f"{int(few.sum())} cells have fewer than {SMALL_GROUP} control instances"
        )
        notes.append(f"{which}: standard errors run low and bands too narrow (column small_group)")
    return notes


def small_cells(lay, est, limit: int) -> np.ndarray:
    """The ``small_group`` column: the cell's cohort or control set has fewer than ``limit`` instances."""
    return (est.n_treated < limit) | ((est.n_control < limit) & lay.controls)
