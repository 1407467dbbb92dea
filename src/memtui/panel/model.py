"""The panel in memory: instances x checkpoints x metrics, the metric definitions and the treatment codes.

Nothing here reads or writes a file (``memtui.panel.hdf5`` does), so the estimation takes a ``Panel`` without h5py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.panel import metrics as registry

NEVER = -1  # treatment step stored for never-treated (validation) instances
PAD = -1  # token id stored after the end of a shorter instance
# Views of the metric registry (``memtui.panel.metrics``, the one list), kept for the modules that import them here.
METRICS = registry.NAMES
METRIC_SIGN = {name: m.sign for name, m in registry.REGISTRY.items()}
METRIC_LABEL = {name: m.label for name, m in registry.REGISTRY.items()}
EXTRACTABLE_METRICS = registry.EXTRACTABILITY
# Carlini et al.'s (k, l)-extractability as Biderman et al. measured it on Pythia: 32 prefix, 32 suffix tokens. The
# (k, l) a panel's extractability metrics are defined with are the attributes `k` and `l` of their datasets.
EXTRACTABLE_DEFAULT = (32, 32)


@dataclass(repr=False)
class Panel:
    """A panel read into memory. Metric matrices are (instances, checkpoints) float64, NaN where not computed."""

    ids: np.ndarray
    treatment: np.ndarray  # first checkpoint step that has trained on the instance; NEVER for validation
    steps: np.ndarray
    done: np.ndarray
    metrics: dict[str, np.ndarray]
    split: np.ndarray = None
    source_index: np.ndarray = None
    revisions: list[str] = field(default_factory=list)
    weight_hashes: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)  # the model that scored each checkpoint ("" where none yet)
    parameters: np.ndarray | None = None  # its parameter count per checkpoint (0: not recorded)
    configs: list[str] = field(default_factory=list)  # its architecture and shape in one line per checkpoint
    averages: list[str] = field(default_factory=list)  # per checkpoint: the kind of weight average it is ("": none)
    scorings: list[str] = field(default_factory=list)  # per checkpoint: device, dtype and scorer path ("": unknown)
    signs: dict[str, int] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=dict)
    truth: dict[str, np.ndarray] | None = None  # simulated panels: cohorts, steps and the true tau per metric
    path: Path | None = None
    has_tokens: bool = False
    lengths: np.ndarray | None = None  # each instance's row length in tokens, where the panel stores tokens
    extractable_kl: tuple[int, int] | None = None  # the (k, l) its extractability metrics are defined with
    # where each instance came from in its family's data order (``instances/provenance``; empty for panels built
    # before it or from a table): per-instance arrays (first axis = instances) and the lookup tables they index
    provenance: dict[str, np.ndarray] = field(default_factory=dict)
    provenance_attrs: dict[str, str] = field(default_factory=dict)
    # per-instance covariates (``instances/covariates/NAME``; empty for panels without them): float64 arrays (NaN =
    # unknown) for numeric ones, object arrays of str for categorical ones
    covariates: dict[str, np.ndarray] = field(default_factory=dict)

    def __repr__(self) -> str:
        # Short: a repr is made where nobody reads it (Textual's ``@work`` describes each worker by its arguments'
        # reprs, on the key that starts it), and the dataclass's printed every array (6 ms on a pane switch).
        where = f" {self.path.name}" if self.path is not None else ""
        return (
            f"<Panel{where}: {self.n_instances} instances x {self.n_checkpoints} checkpoints, "
            f"metrics {', '.join(self.metrics)}>"
        )

    @property
    def n_instances(self) -> int:
        return len(self.ids)

    @property
    def n_parameters(self) -> int | None:
        """The scoring model's parameter count, where extraction recorded it (the largest, if models were mixed)."""
        if self.parameters is None:
            return None
        known = self.parameters[self.done & (self.parameters > 0)]
        return int(known.max()) if len(known) else None

    @property
    def n_checkpoints(self) -> int:
        return len(self.steps)

    @property
    def never_treated(self) -> np.ndarray:
        return self.treatment == NEVER

    def sign(self, metric: str) -> int:
        return self.signs.get(metric, registry.sign(metric))

    def values(self, metric: str) -> np.ndarray:
        """The metric's matrix restricted to completed checkpoints (columns where ``done``); read-only (a view of the
        panel's own where every checkpoint is done: a copy of a 1 M-instance panel was seconds of page faults)."""
        if metric not in self.metrics:
            raise MemtuiError(
                f"{self._name}: no metric '{metric}' in this panel (it has: {', '.join(self.metrics) or 'none'})."
            )
        whole = self.metrics[metric]
        y = whole.view() if self.done.all() and whole.shape[1:] == self.done.shape else whole[:, self.done]
        y.flags.writeable = False
        if not any(np.isfinite(y[lo : lo + 4096]).any() for lo in range(0, len(y), 4096)):
            short = self._too_short_for(metric)
            if short:
                raise MemtuiError(f"{self._name}: metric '{metric}' has no values: {short}.")
            # only point to extraction where it can work: a panel without token ids cannot be extracted
            how = (
                f"run `memtui extract {self._name} --model MODEL`"
                if self.has_tokens
                else "choose a metric that has values or import a table that has it"
            )
            raise MemtuiError(f"{self._name}: metric '{metric}' has no values yet; {how}.")
        return y

    def _too_short_for(self, metric: str) -> str | None:
        """Why an extractability metric can have no value: every row shorter than k + l (None if some row is not)."""
        if metric not in registry.EXTRACTABILITY or self.lengths is None or not len(self.lengths):
            return None
        k, ell = self.extractable_kl or EXTRACTABLE_DEFAULT
        if (self.lengths >= k + ell).any():
            return None
        return (
            f"every instance is shorter than k + l = {k + ell} tokens (the longest has {int(self.lengths.max())}), "
            f"and ({k}, {ell})-extractability decodes l = {ell} tokens after a prefix of k = {k}; extraction leaves it "
            "empty: choose another metric, or build a panel with longer rows"
        )

    @property
    def default_metric(self) -> str:
        """The metric shown and estimated when none is named, by the one rule (``panel.metrics.default_metric``):
        the first in the registry's order that has values, loglik where it has; else the first in that order."""
        return registry.default_metric(self.metrics, self._has_values)

    def _has_values(self, metric: str) -> bool:
        return bool(self.done.any() and np.isfinite(self.metrics[metric][:, self.done]).any())

    @property
    def done_steps(self) -> np.ndarray:
        return self.steps[self.done]

    @property
    def stage_names(self) -> list[str]:
        """The training stages the instances come from (``provenance/stage_names``), empty where none is recorded."""
        names = self.provenance.get("stage_names")
        return [] if names is None else [str(v) for v in names]

    def refuse_mixed_stages(self) -> None:
        """Instances of different training stages (another data mix) are not exchangeable: a control from stage 1
        says nothing about what a stage-2 instance would have scored untrained. One panel per stage is estimated."""
        stage = self.provenance.get("stage")
        if stage is None or len(np.unique(stage)) < 2:
            return
        names = self.stage_names
        found = [names[int(s)] if 0 <= int(s) < len(names) else str(int(s)) for s in np.unique(stage)]
        raise MemtuiError(
            f"{self._name}: its instances come from {len(found)} training stages ({', '.join(found)}), whose controls "
            "are not exchangeable; build one panel per stage (memtui build --order ... --stage-name) and estimate each."
        )

    @property
    def _name(self) -> str:
        return str(self.path) if self.path else "panel"
