"""Subgroup profiles (``memtui estimate --by SPEC``): one profile per group of instances from one set of multiplier
draws, the differences between groups with simultaneous bands, and a dose-response trend for ordered groups.

Each group's estimate is ``estimate`` of the panel restricted to the group (its treated instances and, by default,
its own never-treated controls, as `differences`' ``split_sample_by``; with ``shared_controls`` every never-treated
control of the panel, the design for doses, where controls have no dose): its point estimates are those of a
stand-alone estimate on the subset, bit for bit. The bootstraps draw their multipliers from one source keyed by the
panel's instance (``engine.multipliers``), so the same instance has the same multiplier in every group's draw:

- the **joint band** of the groups' profiles is simultaneous over every group's post-treatment cells (and over every
  group's event times for persistent memorisation): per draw the largest studentised deviation over all groups, so
  a claim about any group at any cell holds jointly; it is wider than each group's own band;
- the **difference** of two groups (``group_tests.difference``) has draws that are the difference of their draws;
- the **trend** (``group_tests.trend``) of ordered groups (bins or levels of a numeric covariate) on their mean
  covariate has draws that are the same linear combination of the groups' draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.engine import did, drdid
from memtui.engine.band import BandDraws
from memtui.engine.band_registry import get_band
from memtui.engine.multipliers import JointMultipliers
from memtui.estimation.estimate import Prepared, aggregate_members, cell_masks, finished, prepared
from memtui.estimation.group_spec import Groups, group_labels, resolve
from memtui.estimation.group_tests import Difference, Trend, difference, trend
from memtui.estimation.results import EstimateResult, Progress
from memtui.estimation.settings import Settings
from memtui.panel.model import Panel

__all__ = ["ByResult", "estimate_by", "group_labels", "subset_panel"]


def subset_panel(panel: Panel, rows: np.ndarray) -> Panel:
    """The panel restricted to the instances ``rows`` (every per-instance array cut; checkpoints unchanged)."""

    def cut(arr):
        return None if arr is None else np.asarray(arr)[rows]

    provenance = {k: (v if k.endswith("_names") else np.asarray(v)[rows]) for k, v in panel.provenance.items()}
    return replace(
        panel,
        ids=panel.ids[rows],
        treatment=panel.treatment[rows],
        metrics={k: v[rows] for k, v in panel.metrics.items()},
        split=cut(panel.split),
        source_index=cut(panel.source_index),
        lengths=cut(panel.lengths),
        provenance=provenance,
        covariates={k: np.asarray(v)[rows] for k, v in panel.covariates.items()},
    )


@dataclass
class ByResult:
    """Every group's estimate (``groups``, as ``estimate`` makes it, with its own bands), the joint critical values
    (``joint_crit``: "profile" over every group's post-treatment cells, "persistent" over every group's event times
    c - g >= 0), the default differences (two groups: the first minus the second; ordered groups: the last minus
    the first; categorical ones: each group minus the largest) and, for ordered groups, the trend."""

    settings: Settings
    spec: str
    covariate: str
    names: list[str]
    shared_controls: bool
    groups: dict[str, EstimateResult]
    joint_crit: dict[str, float]
    differences: list[Difference]
    trend: Trend | None
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # per group: (treated, never-treated) instances
    notes: list[str] = field(default_factory=list)
    _cells: dict = field(default_factory=dict, repr=False)  # per group: estimate._Cells (draws, se, laws)

    def joint(self, name: str, scope: str = "profile") -> pl.DataFrame:
        """Group ``name``'s profile ("profile") or event-study curve ("persistent") with the joint band on its
        post-treatment rows (placebo rows keep their own band)."""
        res = self.groups[name]
        frame = res.cells if scope == "profile" else res.persistent
        post = ~pl.col("pre_treatment")
        crit = pl.when(post).then(pl.lit(self.joint_crit[scope])).otherwise(pl.col("crit"))
        band = crit * pl.col("std_error")
        return frame.with_columns(
            crit.alias("crit"),
            (pl.col("estimate") - band).alias("band_low"),
            (pl.col("estimate") + band).alias("band_high"),
            (band.is_finite() & (pl.col("estimate").abs() > band)).fill_null(False).alias("significant"),
        )

    def difference(self, a: str, b: str) -> Difference:
        """Group ``a`` minus group ``b``, from the groups' joint draws (``group_tests.difference``)."""
        if not self.settings.draws:
            raise MemtuiError("differences between groups need bootstrap draws; use -B 1000.")
        return difference(a, b, self._cells[a], self._cells[b], self.settings.alpha)


def estimate_by(
    panel: Panel,
    settings: Settings,
    spec: str,
    *,
    shared_controls: bool = False,
    progress: Progress | None = None,
) -> ByResult:
    """One estimate per group of ``spec`` (``group_spec``) from one set of draws; see the module docstring."""
    if settings.engine != "memtui":
        raise MemtuiError("subgroups are estimated by memtui's engine; use --engine memtui with --by.")
    settings = settings.validate()
    treated = ~panel.never_treated
    groups = resolve(panel, spec, among=treated if shared_controls else None)
    source = _source(panel, settings)
    report = progress or (lambda fraction, message: None)
    report(0.0, "preparing")
    subsets, preps, sizes = {}, {}, {}
    for g, name in enumerate(groups.names):
        rows = _rows(groups, g, panel, shared_controls)
        subsets[name] = subset_panel(panel, rows)
        try:
            subsets[name].refuse_mixed_stages()  # as estimate_parts does, group by group
            preps[name] = prepared(subsets[name], settings, source.subset(rows))
        except MemtuiError as exc:
            raise MemtuiError(f"group {name}: {exc}") from None
        sizes[name] = (int(treated[rows].sum()), int((~treated[rows]).sum()))
    draws = _joint_bootstrap(settings, list(preps.values()), lambda f: report(0.05 + 0.85 * f, "bootstrap"))
    report(0.9, "summaries")
    results, cells = {}, {}
    for name, drawn in zip(groups.names, draws, strict=True):
        results[name], cells[name] = finished(subsets[name], settings, preps[name], drawn)
    report(1.0, "done")
    return _assembled(panel, settings, groups, shared_controls, results, cells, sizes)


def _joint_bootstrap(settings: Settings, preps: list[Prepared], progress) -> list[BandDraws | None]:
    """Every group's bootstrap in one pass over the draws (the band's ``bootstraps`` with a source per group: the
    multipliers drawn once per chunk for all groups, each group's draws bit for bit those of its lone bootstrap with
    that source): per group, the band's draws; None without draws."""
    if not settings.draws:
        return [None] * len(preps)
    band = get_band(settings.band)
    lays, ests, sources = [p.lay for p in preps], [p.est for p in preps], [p.source for p in preps]
    common = {"draws": settings.draws, "seed": settings.seed, "multiplier": settings.multiplier}
    masks = [cell_masks(lay, settings) for lay in lays]
    members = [aggregate_members(lay)[2] for lay in lays]
    floors = [did.se_floor(lay.scale) for lay in lays]
    if isinstance(ests[0], drdid.DrEstimates):  # doubly robust cells: their own bootstrap, group by group
        return [
            band.bootstrap(p.lay, p.est, m, a, floor=f, progress=None, source=p.source, **common)
            for p, m, a, f in zip(preps, masks, members, floors, strict=True)
        ]  # fmt: skip
    return band.bootstraps(lays, ests, masks, members, floors=floors, progress=progress, source=sources, **common)


def _source(panel: Panel, settings: Settings) -> JointMultipliers:
    if settings.cluster:
        from memtui.estimation.clusters import cluster_source

        return cluster_source(panel, settings.cluster)
    return JointMultipliers.per_instance(panel.n_instances)


def _rows(groups: Groups, g: int, panel: Panel, shared_controls: bool) -> np.ndarray:
    """The panel rows of group ``g``: its instances, or its treated instances and every never-treated control."""
    mine = groups.labels == g
    if shared_controls:
        mine = (mine & ~panel.never_treated) | panel.never_treated
    return np.flatnonzero(mine)


def _assembled(panel, settings, groups: Groups, shared, results, cells, sizes) -> ByResult:
    names = groups.names
    joint = _joint_crits(cells, settings.alpha) if settings.draws else {"profile": np.nan, "persistent": np.nan}
    diffs, tr = [], None
    if settings.draws:
        diffs = [difference(a, b, cells[a], cells[b], settings.alpha) for a, b in _pairs(names, groups, sizes)]
        if groups.ordered and len(names) > 2:
            centres = groups.centres(~panel.never_treated)
            tr = trend(groups.covariate, names, centres, [cells[n] for n in names], settings.alpha)
    left = int(((groups.labels < 0) & (~panel.never_treated if shared else True)).sum())
    notes = [f"{left} instances with no value of {groups.covariate} belong to no group"] if left else []
    if shared:
        notes.append("every group is compared with all never-treated controls (shared controls)")
    return ByResult(
        settings=settings,
        spec=groups.spec,
        covariate=groups.covariate,
        names=names,
        shared_controls=shared,
        groups=results,
        joint_crit=joint,
        differences=diffs,
        trend=tr,
        sizes=sizes,
        notes=notes,
        _cells=cells,
    )


def _pairs(names: list[str], groups: Groups, sizes: dict) -> list[tuple[str, str]]:
    if len(names) == 2:
        return [(names[0], names[1])]
    if groups.ordered:
        return [(names[-1], names[0])]
    ref = max(names, key=lambda n: sizes[n][0])
    return [(n, ref) for n in names if n != ref]


def _joint_crits(cells: dict, alpha: float) -> dict[str, float]:
    """Simultaneous critical values over every group's post-treatment cells and event times (c - g >= 0): the
    quantile of the per-draw maximum of the groups' sup-t statistics, which share their draws."""
    profile = _fmax([c.tmax["post"] for c in cells.values()])
    persistent = _fmax([_event_law(c) for c in cells.values()])
    return {"profile": did.critical_value(profile, alpha), "persistent": did.critical_value(persistent, alpha)}


def _fmax(laws: list[np.ndarray]) -> np.ndarray:
    out = laws[0].astype(float)
    for law in laws[1:]:
        out = np.fmax(out, law)
    return out


def _event_law(c) -> np.ndarray:
    """The sup-t law of one group's event-time aggregates c - g >= 0, as its persistent band formed it."""
    events = c.aggregates[0]
    return c.aggregate_law(slice(0, len(events)), events >= 0)
