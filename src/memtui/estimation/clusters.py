"""The clusters of a clustered bootstrap (``Settings.cluster``): which instances share a multiplier.

Instances drawn into the same training batch share the optimizer step that trained them (and the gradient update,
and whatever made the data loader put them together): their memorisation is not independent, and a bootstrap that
gives each its own multiplier understates the standard errors. ``--cluster batch`` gives every instance trained in
the same optimizer step one multiplier (the step recorded as ``instances/provenance/step`` by ``memtui build``);
``--cluster NAME`` clusters by a categorical covariate. Never-treated controls were never in a batch: each is a
cluster of its own, unless a covariate names their cluster. The draws are then R `did`'s ``clustervars`` bootstrap
(the influence function summed within clusters: Callaway & Sant'Anna 2021, remark 10).
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
    """The multiplier source of a bootstrap clustered by ``name`` (``cluster_labels``)."""
    return JointMultipliers.clustered(cluster_labels(panel, name))
