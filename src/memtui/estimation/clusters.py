"""The clusters of a clustered bootstrap (``Settings.cluster``): which instances share a multiplier.

Instances drawn into the same training batch share the optimizer step that trained them (and the gradient update,
and whatever made the data loader put them together): their memorisation is not independent, and a bootstrap that
gives each its own multiplier understates the standard errors. ``--cluster batch`` gives every instance trained in
the same optimizer step one multiplier (the step recorded as ``instances/provenance/step`` by ``memtui build``);
``--cluster NAME`` clusters by a categorical covariate. Never-treated controls were never in a batch: each is a
cluster of its own, unless a covariate names their cluster. The draws are then R `did`'s ``clustervars`` bootstrap
(the influence function summed within clusters: Callaway & Sant'Anna 2021, remark 10).

A clustering that leaves a side of a cell one cluster is refused: a cell's treated part of the influence function is
each instance's deviation from its cohort's mean, so summed over a cohort that is a single cluster (every cohort one
batch: `memtui build -k 1`) it is 0, and the band would come from the controls alone (the classic band then calls a
panel without pre-trends one with them; the calibrated band finds no variation at all). The same holds for the
never-treated controls when one covariate level holds them all, and for a variable with a single level.
"""

from __future__ import annotations

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine.multipliers import JointMultipliers
from memtui.panel.model import NEVER, Panel


def cluster_labels(panel: Panel, name: str) -> np.ndarray:
    """Per instance, its cluster (an integer; below 0: a cluster of its own)."""
    if name == "batch":
        step = panel.provenance.get("step")
        if step is None or np.asarray(step).ndim != 1:
            raise MemtuiError(
                f"{panel._name}: --cluster batch needs each instance's optimizer step, which this panel does not "
                "record (instances/provenance/step, written by `memtui build` from a training order); cluster by a "
                "categorical covariate instead (--cluster NAME)."
            )
        return np.where(panel.treatment == NEVER, -1, np.asarray(step, dtype=np.int64))
    values = panel.covariates.get(name)
    if values is None:
        have = ", ".join(clean(k, 40) for k in panel.covariates) or "none"
        raise MemtuiError(
            f"{panel._name}: no covariate '{clean(name, 40)}' to cluster by (covariates: {have}); --cluster takes "
            "batch or a categorical covariate."
        )
    if values.dtype.kind == "f":
        known = np.isfinite(values)
        codes = np.full(len(values), -1, dtype=np.int64)
        codes[known] = np.unique(values[known], return_inverse=True)[1]
        return codes
    text = np.asarray(values, dtype=object).astype(str)
    missing = np.isin(text, ["", "None", "nan"])
    codes = np.full(len(text), -1, dtype=np.int64)
    codes[~missing] = np.unique(text[~missing], return_inverse=True)[1]
    return codes


def cluster_source(panel: Panel, name: str) -> JointMultipliers:
    """The multiplier source of a bootstrap clustered by ``name`` (``cluster_labels``), refused in one line where it
    cannot vary (``refuse_degenerate``)."""
    labels = cluster_labels(panel, name)
    refuse_degenerate(panel, name, labels)
    return JointMultipliers.clustered(labels)


def _clusters(labels: np.ndarray) -> int:
    """How many clusters the instances ``labels`` form (a label below 0: a cluster of its own)."""
    return len(np.unique(labels[labels >= 0])) + int((labels < 0).sum())


def refuse_degenerate(panel: Panel, name: str, labels: np.ndarray) -> None:
    """A one-line MemtuiError where the clustering leaves no variation to draw from: a variable with one level, a
    cohort of two or more instances that is one cluster (its cells' treated part would vanish), or never-treated
    controls that are all one cluster."""
    option = f"--cluster {clean(name, 40)}"
    fix = "use more batches per cohort" if name == "batch" else "cluster by a variable with several levels in each"
    known = labels[labels >= 0]
    if len(known) > 1 and len(np.unique(known)) == 1 and not (labels < 0).any():
        raise MemtuiError(
            f"{option} has one level: every instance is in one cluster, so the clustered bootstrap has no variation; "
            "cluster by a variable with several levels, or leave --cluster out."
        )
    never = panel.treatment == NEVER
    cohorts = [(int(g), int((panel.treatment == g).sum())) for g in np.unique(panel.treatment[~never])]
    single = [(g, n) for g, n in cohorts if n > 1 and _clusters(labels[panel.treatment == g]) == 1]
    if single:
        from memtui.engine.layout import listing

        which = (
            "each cohort is one cluster"
            if len(single) == sum(n > 1 for _, n in cohorts)
            else f"{len(single)} cohort(s) are each one cluster, step (n): {listing(single)}"
        )
        raise MemtuiError(
            f"{option}: {which}, so the clustered bootstrap has no variation within them (their cells' standard "
            f"errors would come from the controls alone); {fix} cohort, or leave --cluster out."
        )
    if never.sum() > 1 and _clusters(labels[never]) == 1:
        raise MemtuiError(
            f"{option}: the {int(never.sum())} never-treated controls are one cluster, so the clustered bootstrap has "
            "no variation among them; cluster by a variable with several levels among the controls, or leave "
            "--cluster out."
        )
