"""The permutation band (``--band permutation``): exact by design where the training order is a seeded uniform
shuffle (Pythia/NeoX/PolyPythias, OLMo, Amber), because which treated instances fall in which cohort is then a
randomised experiment.

Its statistic is the studentised max |t| over a family of cells; its critical value the (1 - alpha) quantile of that
maximum over the observed labelling and P = ``draws`` permutations of the labels of every instance, the never-trained
controls' included (each group's size kept; ``engine.permutations``): the controls were drawn from the same shuffled
order past the last trained step, so their label is randomised too, and a permuted cohort and the permuted controls
then draw the treated instances alike, so the effects they carry cancel instead of widening the law (with the
controls fixed, ``controls=False``, the band flagged 32 % of the true cells where the calibrated band flags 40 %:
docs/calibration-study.md). Each permutation's t is computed as the real estimate's (the same difference of means,
the same HC1 standard error, the permuted controls' own). The band is estimate +/- crit * se with the
estimate's analytic standard error, so flags, export, Summaries, compare and plan read it as any band. A family's
p-value, the share of the P + 1 labellings whose maximum reaches the observed one, is exact under the sharp null of no
cohort-specific effect (no memorisation anywhere): its level is at most alpha whatever the noise looks like.

The aggregates (persistent memorisation by event time, the overall average) are the same weighted averages of the
permuted cells (a permutation keeps the cohorts' sizes, so their weights): their laws are max |aggregate| / its
observed analytic standard error over the permutations, exact for that (unstudentised per permutation) statistic.
Pointwise cell intervals are normal (z). The ease of ``compare`` (not a cohort effect) keeps the calibrated band.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memtui.engine.band_calibrated import CALIBRATED

if TYPE_CHECKING:
    import numpy as np

    from memtui.engine.did import BootstrapDraws


@dataclass
class PermutationDraws:
    """The permutation band of one layout: the permuted cells (``boot.cells``, cells x P: each permutation's estimate
    less its mean over the permutations, centred as a bootstrap's draws), the families' laws (the observed maximum
    first), the observed aggregates and the aggregates' means over the permutations (``centre``: an aggregate's
    permuted values are its draws plus it)."""

    boot: BootstrapDraws
    laws: dict[str, np.ndarray]
    se: np.ndarray  # the cells' analytic standard errors, floored
    theta: np.ndarray  # the aggregates' observed values (event times, then the overall average)
    centre: np.ndarray  # the aggregates' means over the permutations
    agg_weighted: None = None
    pointwise_overall: bool = True  # the overall average's interval: its own permutation quantile
    _agg_se: np.ndarray | None = field(default=None, repr=False)

    def cell_se(self, floor: float) -> np.ndarray:
        return self.se

    def cell_laws(self, masks: dict[str, np.ndarray], se: np.ndarray) -> dict[str, np.ndarray]:
        return {name: self.laws[name] for name in masks}

    def cell_pointwise(self, alpha: float) -> None:
        return None

    def critical_value(self, law: np.ndarray, alpha: float) -> float:
        from memtui.engine import did

        return did.critical_value(law, alpha)

    def aggregate_se(self, draws, floor: float, analytic: Callable[[], np.ndarray]):
        from memtui.engine import did

        self._agg_se = did.floored(analytic(), floor)
        return self._agg_se, self._agg_se

    def aggregate_law(self, draws, se, rows: slice, mask) -> np.ndarray:
        import numpy as np

        from memtui.engine import did

        observed = np.abs(self.theta[rows] / se)
        usable = np.asarray(mask, bool) & np.isfinite(se)
        first = observed[usable].max() if usable.any() else np.nan
        permuted = draws + self.centre[rows].astype(draws.dtype)[:, None]
        return np.concatenate([[first], did.sup_t(permuted, se, mask)])

    def aggregate_pointwise(self, draws, se, rows: slice, alpha: float) -> np.ndarray:
        import numpy as np

        d, s, theta, centre = draws[rows], se[rows], self.theta[rows], self.centre[rows]
        # per aggregate, the (1 - alpha) quantile of |value| / se over the observed labelling and the permutations
        laws = np.abs(np.concatenate([theta[:, None], d + centre.astype(d.dtype)[:, None]], axis=1)) / s[:, None]
        out = np.quantile(laws, 1 - alpha, axis=1, method="inverted_cdf")
        return np.where(np.isfinite(s), out, np.nan)

    def unbanded(self, lay, est, flat):
        return [], flat


class PermutationBand:
    """The cohort-label permutation band (``Band``)."""

    name = "permutation"
    summary = (
        "randomisation test: P permutations of the cohort labels (the training order is a uniform shuffle); exact "
        "under no cohort-specific effect"
    )
    small_group_below = 2  # exact at any size: only a cohort of one instance has no variance of its own
    miscalibrated_below = 1  # exact by design: no cohort size where it over-rejects
    small_sample_plan = True  # plans as the calibrated band (the permutation quantile is close to its Welch t)

    def __init__(self, *, centred: bool = False, controls: bool = True) -> None:
        # uncentred (the band): the raw rows relabelled, exact under the sharp null of no memorisation. centred: each
        # treated row less its own cohort's estimated post-treatment effects first; measured anti-conservative (the
        # estimates bring the controls' noise into the treated rows, where it cancels: docs/methods.md), kept for
        # benchmarks/permutation_level.py
        self.centred = centred
        # controls permuted with the treated instances (the band): a permuted cohort and the permuted controls draw
        # the treated instances alike, so the effects they carry cancel in expectation; fixed (False): the treated
        # labels alone, whose law widens with every effect in the data (docs/methods.md, benchmarks/
        # permutation_constructions.py)
        self.controls = controls

    @property
    def _controls(self) -> bool:
        """Whether the controls are permuted with the treated instances (never with the centred rows)."""
        return self.controls and not self.centred

    def draws_label(self, draws: int) -> str:
        """How a header names the number of draws: P permutations."""
        return f"P={draws}"

    def refusal(self, settings: Any) -> str | None:
        if not settings.draws:
            return None  # no draws: pointwise analytic bands, as every band's
        if settings.control_group != "never_treated":
            return (
                "the permutation band keeps the never-trained controls fixed and permutes the treated instances; "
                "not-yet-treated controls move with the labels: use --control-group never_treated or --band "
                "calibrated."
            )
        if settings.covariates:
            return "the permutation band is not built for covariates (doubly robust DiD); use --band classic."
        if settings.cluster:
            return (
                "the permutation band permutes instances, not clusters; use --band calibrated with --cluster (or "
                "no --cluster)."
            )
        if settings.engine == "differences":
            return "engine differences gives only the classic band; use --band classic with --engine differences."
        return None

    def bootstrap_bytes(self, draws: int, *, n_cells, n_groups, n_aggregates, n_units, width) -> int:
        from memtui.engine import permutations

        # the permuted cells, the aggregates' draws and their copy; per permutation of a chunk its sums, its cells'
        # estimates, its slots and the permuted controls' Gram matrix; the rows and the controls' rows centred
        per_draw = 4 * n_cells + 8 * n_aggregates * 2
        gram = 4 * (width + 2) ** 2
        chunk = permutations._CHUNK * (3 * 4 * n_groups * (width + 17) + 20 * n_cells + 8 * n_units + gram)
        rows = 2 * 4 * n_units * (width + 17)
        return int(draws) * per_draw + 2 * chunk + rows + (32 << 20)

    def bootstrap(self, lay, est, masks, members, *, floor, draws, seed, multiplier, progress, source):
        return self._one(lay, est, masks, members, floor=floor, draws=draws, seed=seed, progress=progress,
                         source=source)  # fmt: skip

    def _one(self, lay, est, masks, members, *, floor, draws, seed, progress, source, prepared=None):
        import numpy as np

        from memtui.core.errors import MemtuiError
        from memtui.engine import did, permutations
        from memtui.engine.summaries import aggregate

        problem = permutations.unsupported(lay)
        if problem is not None:
            raise MemtuiError(f"the permutation band cannot run here: {problem}; use --band calibrated.")
        se = did.floored(est.se, floor)
        keys, n_keys = (source.keys, source.n_keys) if source is not None else (None, None)
        drawn = permutations.permute(
            lay, est, masks, se, count=draws, seed=seed, floor=floor, keys=keys, n_keys=n_keys, progress=progress,
            prepared=prepared, centred=self.centred, controls=self._controls,
        )  # fmt: skip
        # a permutation keeps the cohorts' sizes: the aggregates' weights do not move (no weight term)
        boot = did.BootstrapDraws(cells=drawn.cells, group_w=np.zeros((lay.n_groups, draws)))
        theta = aggregate(lay, est.att, None, None, members)[0]
        centre = aggregate(lay, drawn.centre, None, None, members)[0]
        return PermutationDraws(boot=boot, laws=drawn.laws, se=se, theta=theta, centre=centre)

    def bootstraps(
        self, lays, ests, masks, members, *, floors, draws, seed, multiplier, progress=None, source=None, pool=None,
        mapper=None, prepared=None,
    ) -> list[PermutationDraws]:  # fmt: skip
        # every layout's own permutations, each drawn over the same keys with the same seed: layouts with the same
        # treated instances get the same relabelling (a suite's models and metrics), subsets of one panel a
        # relabelling within each (subgroups), so their joint statements are exact; each is its lone bootstrap
        sources = list(source) if isinstance(source, list | tuple) else [source] * len(lays)
        out = []
        for j, (lay, est) in enumerate(zip(lays, ests, strict=True)):
            mine = prepared[j] if prepared else None
            agg = mine[1] if mine is not None else members[j]
            tell = (lambda f, j=j: progress((j + f) / len(lays))) if progress else None
            out.append(self._one(lay, est, masks[j], agg, floor=floors[j], draws=draws, seed=seed, progress=tell,
                                 source=sources[j], prepared=mine[0] if mine is not None else None))  # fmt: skip
        return out

    def prepare(self, lay, est, floor, members):
        from memtui.engine import permutations

        if permutations.unsupported(lay) is not None:
            return None
        return permutations.plan(lay, est, centred=self.centred, controls=self._controls), members

    def from_draws(self, boot) -> None:
        return None  # permutations, not multiplier draws

    def notes(self, lay, est, drawn: bool) -> list[str]:
        from memtui.engine import evidence

        if not drawn:  # pointwise, analytic bands: R did's rule, as every band without draws
            return evidence.r_did_notes(lay, est)
        import math

        treated, never = int(lay.n_units - lay.group_n[0]), int(lay.group_n[0])
        if self._controls:
            notes = [
                f"permutation band: the labels of the {treated} treated and {never} never-trained instances permuted "
                "(cohort and control sizes kept); exact under the sharp null of no cohort-specific effect where the "
                "training order is a uniform shuffle and the controls were drawn from it (past the last trained step)"
            ]
        else:
            notes = [
                f"permutation band: the cohort labels of the {treated} treated instances permuted (cohort sizes kept, "
                f"the {never} never-trained instances fixed); exact under the sharp null of no cohort-specific effect "
                "where the training order is a uniform shuffle"
            ]
        # how many distinct labellings there are: N! / prod n_g! (a permutation within a cohort changes nothing)
        sizes = lay.group_n[0 if self._controls else 1 :]
        treated = treated + never if self._controls else treated
        labellings = math.lgamma(treated + 1) - sum(math.lgamma(int(n) + 1) for n in sizes)
        if labellings < math.log(20):
            notes.append(
                f"only {round(math.exp(labellings))} distinct labellings of the treated instances exist: the "
                "permutation band cannot mark anything significant at 5 % (a p-value is at least one over their "
                "number); use --band calibrated"
            )
        return notes

    def design_notes(self, cohorts, post_cells, min_control) -> list[str]:
        return []  # exact by design at any cohort size

    def linear_band(self, lay, cells, cols, coef, n_cells, families, *, draws, seed, floor, multiplier, alpha, source):
        # the ease (naive minus DiD) is not a cohort effect that relabelling nulls: the calibrated band's
        return CALIBRATED.linear_band(lay, cells, cols, coef, n_cells, families, draws=draws, seed=seed, floor=floor,
                                      multiplier="rademacher", alpha=alpha, source=None)  # fmt: skip

    def plan_crit(self, normal_crit: float, df: float) -> float:
        return CALIBRATED.plan_crit(normal_crit, df)


PERMUTATION = PermutationBand()
