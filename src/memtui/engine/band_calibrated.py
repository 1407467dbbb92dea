"""The calibrated band (``--band calibrated``, the default): a studentised (bootstrap-t) multiplier bootstrap of the
sup-t statistic, each draw studentised by its own re-estimated standard error (``engine.bands`` holds its numerics
and says why). It holds its level from about 10 instances per cohort (docs/calibration-study.md); its pointwise
intervals are the cells' Welch t and the aggregates' own bootstrap-t. Rademacher multipliers and memtui's
difference-of-means engine only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtui.engine.band_classic import CLASSIC

if TYPE_CHECKING:
    import numpy as np

    from memtui.engine.bands import CalibratedBands


@dataclass
class CalibratedDraws:
    """The calibrated band of one layout: the classic draws plus the laws the bootstrap's loop formed with them."""

    cal: CalibratedBands
    pointwise_overall: bool = True

    @property
    def boot(self):
        return self.cal.boot

    @property
    def agg_weighted(self):
        return self.cal.agg_weighted

    def cell_se(self, floor: float) -> np.ndarray:
        return self.cal.se  # HC1 analytic, floored when made (bands.calibrated_parts)

    def cell_laws(self, masks: dict[str, np.ndarray], se: np.ndarray) -> dict[str, np.ndarray]:
        return self.cal.tmax  # the studentised laws the bootstrap formed, per mask

    def cell_pointwise(self, alpha: float) -> np.ndarray | None:
        from memtui.engine import bands

        return bands.pointwise_t(self.cal.var, alpha) if self.cal.var is not None else None

    def critical_value(self, law: np.ndarray, alpha: float) -> float:
        from memtui.engine import did

        return did.critical_value(law, alpha)

    def aggregate_se(self, draws, floor: float, analytic: Callable[[], np.ndarray]):
        return self.cal.agg_se, self.cal.agg_se  # the band studentises by the analytic (HC1) one

    def aggregate_law(self, draws, se, rows: slice, mask) -> np.ndarray:
        from memtui.engine import bands

        return bands.aggregate_laws(draws, se, self.cal.agg_correction[rows], [mask])[0]

    def aggregate_pointwise(self, draws, se, rows: slice, alpha: float) -> np.ndarray:
        from memtui.engine import bands

        return bands.pointwise_aggregate_crit(draws[rows], se[rows], self.cal.agg_correction[rows], alpha)

    def unbanded(self, lay, est, flat):
        # a cohort (or control set) of one instance has no variance of its own: the calibrated band gives its cells
        # no band (the classic band studentised them by the other group's variance alone: far too narrow)
        lone = flat & ((est.n_treated == 1) | ((est.n_control == 1) & lay.controls))
        notes = []
        if lone.any():
            notes.append(
                f"{int(lone.sum())} cells whose cohort or control set has a single instance have no band under the "
                "calibrated band (one instance has no variance of its own): never marked significant; --band classic "
                "ignores that part of the variance"
            )
        return notes, flat & ~lone


class CalibratedBand:
    """The bootstrap-t band (``Band``)."""

    name = "calibrated"
    summary = "bootstrap-t: each draw studentised by its own re-estimated standard error; holds with small cohorts"
    small_group_below = 10  # where the calibration study shows it does not hold its level
    miscalibrated_below = 10
    small_sample_plan = True  # plans with plan_crit's Welch t critical value and non-central t power

    def refusal(self, settings: Any) -> str | None:
        if settings.covariates and settings.draws:
            return (
                "the calibrated band is not built for covariates (its per-draw variance is the difference-of-means "
                "one); use --band classic (R did's band) with --covariates."
            )
        if settings.multiplier != "rademacher":
            return (
                f"the calibrated band needs Rademacher multipliers, not {settings.multiplier}; use --band classic for "
                f"{settings.multiplier.capitalize()} weights."
            )
        if settings.engine == "differences":
            return (
                "engine differences gives only the classic band (R did's); use --band classic with --engine "
                "differences."
            )
        return None

    def bootstrap_bytes(self, draws: int, *, n_cells, n_groups, n_aggregates, n_units, width) -> int:
        from memtui.engine import bands

        return bands.bootstrap_bytes(draws, n_cells, n_groups, n_aggregates, n_units=n_units, width=width)

    def bootstrap(self, lay, est, masks, members, *, floor, draws, seed, multiplier, progress, source):
        from memtui.engine import bands

        return CalibratedDraws(bands.calibrated_bootstrap(
            lay, est, masks, draws=draws, seed=seed, floor=floor, multiplier=multiplier, members=members,
            progress=progress, source=source,
        ))  # fmt: skip

    def bootstraps(
        self, lays, ests, masks, members, *, floors, draws, seed, multiplier, progress=None, source=None, pool=None,
        mapper=None, prepared=None,
    ) -> list[CalibratedDraws]:  # fmt: skip
        from memtui.engine import bands

        cals = bands.calibrated_bootstraps(
            lays, ests, masks, draws=draws, seed=seed, floors=floors, multiplier=multiplier,
            members=None if prepared else members, progress=progress, mapper=mapper, source=source, pool=pool,
            prepared=prepared,
        )  # fmt: skip
        return [CalibratedDraws(cal) for cal in cals]

    def prepare(self, lay, est, floor, members):
        from memtui.engine import bands

        # the variances and the aggregates' standard errors depend on the layout alone
        return bands.calibrated_parts(lay, est, floor, members)

    def from_draws(self, boot) -> None:
        return None  # its laws are formed inside the bootstrap's loop

    def notes(self, lay, est, drawn: bool) -> list[str]:
        from memtui.engine import evidence

        if not drawn:  # pointwise, analytic bands: R did's rule, as every band without draws
            return evidence.r_did_notes(lay, est)
        return self.design_notes(*evidence.design(lay, est))

    def design_notes(self, cohorts, post_cells, min_control) -> list[str]:
        from memtui.engine import evidence
        from memtui.engine.layout import listing

        limit = self.miscalibrated_below
        small = [(step, n) for step, n in cohorts if n < limit]
        ones = [(s, n) for s, n in small if n == 1]
        rest = [(s, n) for s, n in small if n > 1]
        notes = []
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
        return notes + evidence.control_note(min_control, limit, self.name)

    def linear_band(self, lay, cells, cols, coef, n_cells, families, *, draws, seed, floor, multiplier, alpha, source):
        import numpy as np

        from memtui.engine import bands, did
        from memtui.engine.band import z_value

        if not draws:  # no bootstrap: analytic standard errors and pointwise bands, as every band's
            return CLASSIC.linear_band(lay, cells, cols, coef, n_cells, families, draws=draws, seed=seed, floor=floor,
                                       multiplier=multiplier, alpha=alpha, source=source)  # fmt: skip
        crit = np.full(n_cells, z_value(alpha))
        # bootstrap-t: each draw studentised by its re-estimated (stratified HC1) variance, as the cells' band
        ase, se, _, laws = bands.linear_studentized(
            lay, cells, cols, coef, n_cells, families, draws=draws, seed=seed, floor=floor, multiplier=multiplier,
            source=source,
        )  # fmt: skip
        for fam, law in zip(families, laws, strict=True):
            if fam.any():
                crit[fam] = did.critical_value(law, alpha)
        return ase, se, crit

    def plan_crit(self, normal_crit: float, df: float) -> float:
        """The t quantile with ``df`` degrees of freedom at the normal critical value's per-cell level."""
        from scipy import stats

        return float(stats.t.isf(stats.norm.sf(normal_crit), df))


CALIBRATED = CalibratedBand()
