"""The classic band (R `did`, csdid, `differences`; ``--band classic``): the (1 - alpha) quantile of
max_k |draw_k / se_k| over a family of cells, the draws and the robust (IQR) bootstrap standard errors se fixed.
Pointwise intervals are normal (z). It holds its level with large cohorts only (docs/calibration-study.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtui.engine.band import z_value

if TYPE_CHECKING:
    import numpy as np

    from memtui.engine.did import BootstrapDraws


@dataclass
class ClassicDraws:
    """The classic band of one layout: everything is read from the cells' draws."""

    boot: BootstrapDraws
    agg_weighted: None = None
    pointwise_overall: bool = False

    def cell_se(self, floor: float) -> np.ndarray:
        from memtui.engine import did

        return did.bootstrap_se(self.boot.cells, floor)

    def cell_laws(self, masks: dict[str, np.ndarray], se: np.ndarray) -> dict[str, np.ndarray]:
        from memtui.engine import did

        # every band's sup-t law from one pass over the draws
        return dict(zip(masks, did.sup_t_many(self.boot.cells, se, list(masks.values())), strict=True))

    def cell_pointwise(self, alpha: float) -> None:
        return None

    def critical_value(self, law: np.ndarray, alpha: float) -> float:
        from memtui.engine import did

        return did.critical_value(law, alpha)

    def aggregate_se(self, draws, floor: float, analytic: Callable[[], np.ndarray]):
        from memtui.engine import did

        return did.floored(analytic(), floor), did.bootstrap_se(draws, floor)

    def aggregate_law(self, draws, se, rows: slice, mask) -> np.ndarray:
        from memtui.engine import did

        return did.sup_t(draws, se, mask)

    def aggregate_pointwise(self, draws, se, rows: slice, alpha: float) -> None:
        return None

    def unbanded(self, lay, est, flat):
        return [], flat


class ClassicBand:
    """R did's band (``Band``)."""

    name = "classic"
    summary = "R did's, csdid's and the paper's band: sup-t of the draws with the bootstrap standard errors fixed"
    small_group_below = 5  # R did's flag (engine.evidence.SMALL_GROUP): the band of before, bit for bit
    miscalibrated_below = 300
    small_sample_plan = False  # plans with the large-sample critical value and normal power

    def refusal(self, settings: Any) -> str | None:
        return None  # every multiplier, engine, covariate and cluster setting

    def bootstrap_bytes(self, draws: int, *, n_cells, n_groups, n_aggregates, n_units, width) -> int:
        from memtui.engine import did

        return did.bootstrap_bytes(draws, n_cells, n_groups, n_aggregates, n_units=n_units, width=width)

    def bootstrap(self, lay, est, masks, members, *, floor, draws, seed, multiplier, progress, source) -> ClassicDraws:
        from memtui.engine import did, drdid

        run = drdid.bootstrap if isinstance(est, drdid.DrEstimates) else did.bootstrap
        return ClassicDraws(run(lay, est, draws=draws, seed=seed, multiplier=multiplier, progress=progress,
                                source=source))  # fmt: skip

    def bootstraps(
        self, lays, ests, masks, members, *, floors, draws, seed, multiplier, progress=None, source=None, pool=None,
        mapper=None, prepared=None,
    ) -> list[ClassicDraws]:  # fmt: skip
        from memtui.engine import did

        common = {"draws": draws, "seed": seed, "multiplier": multiplier, "progress": progress, "pool": pool}
        return [ClassicDraws(boot) for boot in did.bootstrap_shared(lays, ests, source=source, **common)]

    def prepare(self, lay, est, floor, members) -> None:
        return None

    def from_draws(self, boot) -> ClassicDraws:
        return ClassicDraws(boot)

    def notes(self, lay, est, drawn: bool) -> list[str]:
        from memtui.engine import evidence

        return evidence.r_did_notes(lay, est)

    def design_notes(self, cohorts, post_cells, min_control) -> list[str]:
        import numpy as np

        from memtui.engine import evidence

        limit = self.miscalibrated_below
        small = [(step, n) for step, n in cohorts if n < limit]
        notes = []
        if small:
            m = evidence.nearest(float(np.median(np.array([n for _, n in cohorts]))), post_cells)
            notes.append(
                f"the classic band over-rejects at this design: null panels of the nearest simulated design "
                f"({m.label}) flag a post-treatment cell in {evidence.pct(m.classic)} of panels (calibrated band "
                f"{evidence.pct(m.calibrated)}, nominal 5 %); {len(small)} of {len(cohorts)} cohorts have fewer than "
                f"{limit} instances; `memtui calibrate PANEL` measures this design (column small_group)"
            )
        return notes + evidence.control_note(min_control, limit, self.name)

    def linear_band(self, lay, cells, cols, coef, n_cells, families, *, draws, seed, floor, multiplier, alpha, source):
        import numpy as np

        from memtui.engine import did

        crit = np.full(n_cells, z_value(alpha))
        se, out = did.linear_bootstrap(
            lay, cells, cols, coef, n_cells, draws=draws, seed=seed, multiplier=multiplier, source=source
        )
        se = ase = did.floored(se, floor)
        if draws:
            se = did.bootstrap_se(out, floor)
            for fam in families:
                if fam.any():
                    crit[fam] = did.critical_value(did.sup_t(out, se, fam), alpha)
        return ase, se, crit

    def plan_crit(self, normal_crit: float, df: float) -> None:
        return None  # the large-sample plan


CLASSIC = ClassicBand()
