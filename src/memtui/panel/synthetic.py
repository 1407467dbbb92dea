"""Simulated panels with a known true memorisation profile, for tests, benchmarks and the default sample.

Y_ic = a_i + trend_c + sign * tau(g_i, c) * 1{c >= g_i} + noise, where tau spikes at c = g (instantaneous
memorisation), decays with c - g towards a small floor (residual memorisation), and is stronger for later cohorts.
Instance effects a_i and the common trend are what difference-in-differences removes; the noise is what the bands
account for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER

# per metric: (sign, level, trend amplitude, instance sd, noise sd, peak effect)
_METRICS = {
    "loglik": (1, -600.0, 250.0, 60.0, 8.0, 12.0),
    "accuracy": (1, 0.30, 0.12, 0.04, 0.006, 0.012),
    "rank": (-1, 60.0, -30.0, 8.0, 1.2, 2.0),
}


@dataclass(frozen=True)
class Simulation:
    n_cohorts: int = 20
    per_cohort: int = 20
    n_never: int = 200
    n_checkpoints: int = 21
    step: int = 1000
    decay: float = 2.5  # in checkpoints
    floor: float = 0.15  # residual memorisation as a share of the peak
    late_boost: float = 1.0  # the last cohort's peak is (1 + late_boost) times the first's
    effect: float = 1.0  # scales every true effect (0 = no memorisation at all)
    seed: int = 0

    @property
    def n_instances(self) -> int:
        return self.n_cohorts * self.per_cohort + self.n_never

    def memory_needed(self) -> int:
        """Peak bytes of ``simulate`` + ``create_panel``: every metric's matrix plus a metric's temporaries."""
        return self.n_instances * self.n_checkpoints * 8 * (len(_METRICS) + 3)

    @property
    def steps(self) -> np.ndarray:
        return np.arange(self.n_checkpoints) * self.step

    @property
    def cohorts(self) -> np.ndarray:
        return np.arange(1, self.n_cohorts + 1) * self.step

    def tau(self, peak: float) -> np.ndarray:
        """True memorisation (cohorts x checkpoints), positive = better on trained instances; 0 before treatment."""
        g = self.cohorts[:, None] / self.step
        c = self.steps[None, :] / self.step
        e = c - g
        scale = peak * self.effect * (1 + self.late_boost * (g - 1) / max(self.n_cohorts - 1, 1))
        shape = self.floor + (1 - self.floor) * np.exp(-np.clip(e, 0, None) / self.decay)
        return np.where(e >= 0, scale * shape, 0.0)


def simulate(sim: Simulation) -> dict:
    """Arrays for ``create_panel``: ids, treatment, steps, values and the truth."""
    rng = np.random.default_rng(sim.seed)
    n_treated = sim.n_cohorts * sim.per_cohort
    treatment = np.concatenate([np.repeat(sim.cohorts, sim.per_cohort), np.full(sim.n_never, NEVER)])
    n = len(treatment)
    cohort_row = np.searchsorted(sim.cohorts, treatment[:n_treated])
    steps = sim.steps
    progress = 1 - np.exp(-steps / (steps[-1] / 3 + 1))
    values, truth = {}, {"cohorts": sim.cohorts, "steps": steps}
    for name, (sign, level, trend, inst_sd, noise_sd, peak) in _METRICS.items():
        tau = sim.tau(peak)
        y = (
            level
            + trend * progress[None, :]
            + rng.normal(0, inst_sd, (n, 1))
            + rng.normal(0, noise_sd, (n, len(steps)))
        )
        y[:n_treated] += sign * tau[cohort_row]
        values[name] = y
        truth[name] = tau
    return {
        "ids": np.arange(n),
        "treatment": treatment,
        "steps": steps,
        "values": values,
        "signs": {name: spec[0] for name, spec in _METRICS.items()},
        "truth": truth,
    }


def write_synthetic(path, sim: Simulation = Simulation(), *, overwrite: bool = False):
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
        data = simulate(sim)
    if not all(np.isfinite(y).all() for y in data["values"].values()):
        raise MemtuiError(f"an effect of {sim.effect:g} makes the simulated values overflow; choose a smaller effect.")
    attrs = {"model": "synthetic", "simulation": repr(sim)}
    return create_panel(path, metrics=list(data["values"]), attrs=attrs, overwrite=overwrite, **data)
