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


@dataclass(frozen=True)
class SuiteSimulation:
    """Two or more models scoring the same instances, with a known correlation between their true profiles.

    Model 0's true profile over the post-treatment cells (c >= g) is ``Simulation.tau``'s shape (a spike at c = g
    decaying to a floor, stronger for later cohorts); every other model's is ``rho`` times it plus ``sqrt(1 - rho^2)``
    times a fixed random profile orthogonal to it (and to the constant), each scaled to sd 1 over the post cells, so
    the correlation of the true profiles over the post cells is ``rho`` exactly. Pre-treatment cells are 0.

    Y_ic = a_i + trend_c + tau(g_i, c) 1{c >= g_i} + noise_ic, where the noise of model k > 0 is ``noise_corr`` times
    model 0's noise on the same instance and checkpoint plus an independent part (the same texts scored by two models
    err alike). Its sd is set so that a post cell's standard error, sd * sqrt(2 / per_cohort + 2 / n_never) (the
    difference across c and g - 1 of treated and control means), is ``noise`` times the profiles' sd."""

    rho: float = 0.8
    noise: float = 0.3
    noise_corr: float = 0.0
    n_models: int = 2
    n_cohorts: int = 12
    per_cohort: int = 20
    n_never: int = 100
    n_checkpoints: int = 14
    step: int = 1000
    profile_seed: int = 0  # the true profiles (fixed across replications of a design)
    seed: int = 0  # the noise

    def __post_init__(self) -> None:
        if not -1 <= self.rho <= 1 or not -1 <= self.noise_corr <= 1 or self.n_models < 2 or self.noise < 0:
            raise MemtuiError("rho and noise_corr must lie in [-1, 1], noise >= 0, and a suite needs two models.")

    @property
    def base(self) -> Simulation:
        return Simulation(n_cohorts=self.n_cohorts, per_cohort=self.per_cohort, n_never=self.n_never,
                          n_checkpoints=self.n_checkpoints, step=self.step)  # fmt: skip

    @property
    def noise_sd(self) -> float:
        return self.noise / np.sqrt(2 / self.per_cohort + 2 / self.n_never)

    def true_profiles(self) -> np.ndarray:
        """models x cohorts x checkpoints: each model's true tau (0 before treatment)."""
        base = self.base
        shape = base.tau(1.0)
        post = base.steps[None, :] >= base.cohorts[:, None]
        a = shape[post] - shape[post].mean()
        a /= a.std()
        rng = np.random.default_rng(self.profile_seed)
        out = np.zeros((self.n_models, *shape.shape))
        out[0][post] = 1.0 + a
        for k in range(1, self.n_models):
            u = rng.normal(size=a.size)
            u -= u.mean()
            u -= (u @ a) / (a @ a) * a
            u /= u.std()
            out[k][post] = 1.0 + self.rho * a + np.sqrt(1 - self.rho**2) * u
        return out


def simulate_suite(sim: SuiteSimulation) -> tuple[list, np.ndarray]:
    """The suite's panels (in memory, metric ``loglik``) and the true profiles (models x cohorts x checkpoints)."""
    from memtui.panel.model import Panel

    base = sim.base
    rng = np.random.default_rng(sim.seed)
    n_treated = base.n_cohorts * base.per_cohort
    treatment = np.concatenate([np.repeat(base.cohorts, base.per_cohort), np.full(base.n_never, NEVER)])
    n, t = len(treatment), base.n_checkpoints
    cohort_row = np.searchsorted(base.cohorts, treatment[:n_treated])
    steps = base.steps
    trend = 2.0 * (1 - np.exp(-steps / (steps[-1] / 3 + 1)))
    truth = sim.true_profiles()
    level = rng.normal(0, 1.0, (n, 1))
    first = rng.normal(0, sim.noise_sd, (n, t))
    panels = []
    for k in range(sim.n_models):
        noise = (
            first
            if k == 0
            else sim.noise_corr * first + np.sqrt(1 - sim.noise_corr**2) * rng.normal(0, sim.noise_sd, (n, t))
        )
        y = level + trend[None, :] + noise
        y[:n_treated] += truth[k][cohort_row]
        panels.append(
            Panel(
                ids=np.arange(n),
                treatment=treatment,
                steps=steps,
                done=np.ones(t, bool),
                metrics={"loglik": y},
                signs={"loglik": 1},
                attrs={"model": f"model{k}"},
            )  # fmt: skip
        )
    return panels, truth
