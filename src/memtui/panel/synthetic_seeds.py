"""Simulated seed suites with a known truth: the same instances under several data orders (seeds), for the pooled
estimate's tests and benchmark (``estimation.seeds``, benchmarks/seeds.py).

Under seed s instance i is trained at cohort g_s(i): the home seed (s = 0) has ``per_cohort`` instances per cohort,
every other seed a random permutation of those cohort labels over the same treated instances (each seed's data order
puts the same instance at another step); ``n_never`` controls are never trained under any seed (a validation set).

    Y_sic = a_i + trend_s(c) + u_ic + e_sic + 1{c >= g_s(i)} (m_s tau(g_s(i), c) + eta_i)

a_i: the instance's level (removed by differencing); u_ic: an instance-by-checkpoint effect **shared by every seed**
(how hard the text is at that point of training, whoever trained the model); eta_i: the instance's own memorisation
strength (mean 0), **shared by every seed**; e_sic: the seed's own noise. The shared effects make the seeds' estimates
correlated through the instances (the same controls in every seed, the same treated instances in every seed's
summaries), which a pooled bootstrap treating seeds as independent misses. m_s = ``odd_seed`` for seed 0 and 1 for the
others: the seeds share one truth when it is 1. Each seed's panel lists the instances in its own random row order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.panel.model import NEVER, Panel
from memtui.panel.synthetic import Simulation


@dataclass(frozen=True)
class SeedSimulation:
    n_seeds: int = 4
    n_cohorts: int = 8
    per_cohort: int = 20
    n_never: int = 60
    n_checkpoints: int = 10
    step: int = 1000
    shared_sd: float = 1.0  # u_ic, shared across seeds
    effect_sd: float = 1.0  # eta_i, shared across seeds
    noise_sd: float = 0.5  # e_sic, each seed's own
    peak: float = 1.0  # tau's peak (Simulation.tau's shape: spike at c = g decaying to a floor)
    odd_seed: float = 1.0  # seed 0's effect is this multiple of the others'
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_seeds < 2 or min(self.shared_sd, self.effect_sd, self.noise_sd) < 0:
            raise MemtuiError("a seed suite needs two seeds or more, and the standard deviations must be >= 0.")

    @property
    def base(self) -> Simulation:
        return Simulation(n_cohorts=self.n_cohorts, per_cohort=self.per_cohort, n_never=self.n_never,
                          n_checkpoints=self.n_checkpoints, step=self.step)  # fmt: skip

    def truth(self) -> np.ndarray:
        """seeds x cohorts x checkpoints: each seed's true tau(g, c) (0 before treatment; eta has mean 0)."""
        tau = self.base.tau(self.peak)
        scale = np.ones(self.n_seeds)
        scale[0] = self.odd_seed
        return scale[:, None, None] * tau[None]

    def pooled_truth(self) -> np.ndarray:
        """cohorts x checkpoints: the mean over seeds of their true profiles (what the pooled estimate estimates)."""
        return self.truth().mean(axis=0)


def simulate_seeds(sim: SeedSimulation) -> list[Panel]:
    """One panel per seed (metric ``loglik``, attribute ``seed_suite``), each in its own row order."""
    base = sim.base
    rng = np.random.default_rng(sim.seed)
    n_treated = base.n_cohorts * base.per_cohort
    n, t = n_treated + base.n_never, base.n_checkpoints
    steps = base.steps
    home = np.repeat(base.cohorts, base.per_cohort)
    level = rng.normal(0, 1.0, (n, 1))
    shared = rng.normal(0, sim.shared_sd, (n, t))
    eta = rng.normal(0, sim.effect_sd, n_treated)
    truth = sim.truth()
    panels = []
    for s in range(sim.n_seeds):
        cohort = home if s == 0 else rng.permutation(home)
        treatment = np.concatenate([cohort, np.full(base.n_never, NEVER)])
        trend = rng.uniform(1, 3) * (1 - np.exp(-steps / (steps[-1] / 3 + 1)))
        y = level + trend[None, :] + shared + rng.normal(0, sim.noise_sd, (n, t))
        row = np.searchsorted(base.cohorts, cohort)
        after = steps[None, :] >= cohort[:, None]
        y[:n_treated] += truth[s][row] + np.where(after, eta[:, None], 0.0)
        order = rng.permutation(n)
        panels.append(
            Panel(
                ids=np.arange(n)[order],
                treatment=treatment[order],
                steps=steps,
                done=np.ones(t, bool),
                metrics={"loglik": y[order]},
                signs={"loglik": 1},
                attrs={"seed_suite": f"simulated {sim.seed}", "seed": f"seed{s}"},
            )  # fmt: skip
        )
    return panels
