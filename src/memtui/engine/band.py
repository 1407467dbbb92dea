"""What a simultaneous band is to the rest of memtui: the ``Band`` protocol and what its bootstrap gives one layout
(``BandDraws``). The bands themselves are ``band_calibrated`` and ``band_classic``; ``band_registry`` names them.

Every estimate (lone, a suite's, subgroups', the ease of ``compare``), the memory policy (``engine.memory``), the
settings' refusals, ``calibrate`` and ``plan`` ask the band object, never its name: a new band is one module that
implements these two protocols and one line in ``band_registry`` (docs/architecture.md, "How to add a band").

The draws themselves are the multiplier bootstrap's (``did.bootstrap``): a band decides how they are studentised,
which laws their maxima follow, the standard errors the bands are drawn with, which settings it supports, which
notes its design gets and what it costs in memory. Without draws (-B 0) every band is pointwise and analytic; only
its ``small_group_below`` and notes still apply.

This module imports nothing heavy (the CLI builds its choices from the registry at start-up): the band modules
import numpy and their numerics inside their methods.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from memtui.engine.did import BootstrapDraws, CellEstimates
    from memtui.engine.layout import Layout
    from memtui.engine.multipliers import JointMultipliers


def z_value(alpha: float) -> float:
    """Two-sided normal critical value (statistics.NormalDist: scipy.stats costs a second to import); from the lower
    tail, so that a small alpha is not lost in 1 - alpha / 2 rounding to 1. Every band's pointwise value without
    draws."""
    return -NormalDist().inv_cdf(alpha / 2)


class BandDraws(Protocol):
    """One layout's bootstrap under a band: the cells' draws and how the band reads them."""

    boot: BootstrapDraws  # the cells' multiplier-bootstrap draws (cells x B, float32)
    agg_weighted: np.ndarray | None  # the aggregates' weighted draws where the bootstrap already made them, else None
    pointwise_overall: bool  # whether the overall average's interval takes its own bootstrap critical value (else z)

    def cell_se(self, floor: float) -> np.ndarray:
        """Per cell, the standard error its band is drawn with (NaN at or below ``floor``: no band)."""
        ...

    def cell_laws(self, masks: dict[str, np.ndarray], se: np.ndarray) -> dict[str, np.ndarray]:
        """Per mask of cells, the law (B,) of the maximum whose quantile is the mask's simultaneous critical value."""
        ...

    def cell_pointwise(self, alpha: float) -> np.ndarray | None:
        """Per cell, its pointwise critical value (``ci_low``/``ci_high``); None: the normal z."""
        ...

    def critical_value(self, law: np.ndarray, alpha: float) -> float:
        """The simultaneous critical value of a law made by ``cell_laws`` or ``aggregate_law``."""
        ...

    def aggregate_se(
        self, draws: np.ndarray, floor: float, analytic: Callable[[], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The aggregates' (event times, then the overall average) analytic and band standard errors, from their
        draws; ``analytic()``: the influence-function standard errors (unfloored), where the band uses them."""
        ...

    def aggregate_law(self, draws: np.ndarray, se: np.ndarray, rows: slice, mask: np.ndarray) -> np.ndarray:
        """The simultaneous law of the aggregates ``rows`` (``draws``, ``se`` already cut to them) in ``mask``."""
        ...

    def aggregate_pointwise(self, draws: np.ndarray, se: np.ndarray, rows: slice, alpha: float) -> np.ndarray | None:
        """Per aggregate of ``rows`` (``draws``, ``se``: all the aggregates), its pointwise critical value; None: z."""
        ...

    def unbanded(self, lay: Layout, est: CellEstimates, flat: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Notes on the cells this band gives no band for a reason of its own, and the rest of ``flat`` (the cells
        without a finite standard error) for the generic note."""
        ...


class Band(Protocol):
    """A simultaneous band: its name, what it supports, its bootstrap, its cost and its notes."""

    name: str
    summary: str  # one line: what it is (the docs' table, the help)
    small_group_below: int  # a cell whose cohort or control set is smaller is flagged small_group
    miscalibrated_below: int  # instances per cohort below which the calibration study found it over-rejects
    small_sample_plan: bool  # whether ``plan`` maps the large-sample critical value through ``plan_crit``

    def refusal(self, settings: Any) -> str | None:
        """Why this band cannot serve ``settings`` (an ``estimation.Settings``: read by attribute), in one line with
        what to do; None where it can."""
        ...

    def bootstrap_bytes(
        self, draws: int, *, n_cells: int, n_groups: int, n_aggregates: int, n_units: int, width: int
    ) -> int:
        """Peak memory of one estimate's bootstrap of ``draws`` draws and its summaries under this band."""
        ...

    def bootstrap(
        self, lay: Layout, est: CellEstimates, masks: dict[str, np.ndarray], members: list[np.ndarray], *,
        floor: float, draws: int, seed: int, multiplier: str, progress: Callable[[float], None] | None,
        source: JointMultipliers | None,
    ) -> BandDraws:  # fmt: skip
        """One layout's bootstrap (``masks``: the cell subsets with a band of their own; ``members``: the cells of
        each aggregate)."""
        ...

    def bootstraps(
        self, lays: list[Layout], ests: list[CellEstimates], masks: list[dict[str, np.ndarray]],
        members: list[list[np.ndarray]], *, floors: list[float], draws: int, seed: int, multiplier: str,
        progress: Callable[[float], None] | None = None, source: Any = None, pool: Any = None,
        mapper: Callable | None = None, prepared: list | None = None,
    ) -> list[BandDraws]:  # fmt: skip
        """Several layouts with the same groups and cells from one set of multipliers (a suite, subgroups): each
        result is that layout's lone ``bootstrap``, bit for bit. ``prepared``: each layout's ``prepare``."""
        ...

    def prepare(self, lay: Layout, est: CellEstimates, floor: float, members: list[np.ndarray]) -> Any:
        """What ``bootstraps`` can be given beforehand (a suite makes the next metric's while a bootstrap runs);
        None where the band needs nothing."""
        ...

    def from_draws(self, boot: BootstrapDraws) -> BandDraws | None:
        """This band read from another band's draws of the same layout and seed, where it needs nothing the
        bootstrap's loop forms (``calibrate`` serves every band from one bootstrap); None where it does."""
        ...

    def notes(self, lay: Layout, est: CellEstimates, drawn: bool) -> list[str]:
        """The notes on an estimate's design (small cohorts, small control sets); ``drawn``: with a bootstrap."""
        ...

    def design_notes(self, cohorts: list[tuple[int, int]], post_cells: int, min_control: int | None) -> list[str]:
        """The notes of a design where this band is known not to hold its level (``estimation.evidence``)."""
        ...

    def linear_band(
        self, lay: Layout, cells: np.ndarray, cols: np.ndarray, coef: np.ndarray, n_cells: int,
        families: list[np.ndarray], *, draws: int, seed: int, floor: float, multiplier: str, alpha: float,
        source: JointMultipliers | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """The band of linear functionals of group means (the ease of ``compare``): their analytic and band
        standard errors and each one's critical value (its family's; z without draws)."""
        ...

    def plan_crit(self, normal_crit: float, df: float) -> float | None:
        """``plan``'s critical value of a c = g cell with Welch ``df`` whose large-sample one is ``normal_crit``
        (with ``small_sample_plan``); None: the band plans with the large-sample value (and normal power)."""
        ...
