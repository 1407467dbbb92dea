r"""`memtui provenance`: was this model trained on this data in this order? An exact permutation test.

Kuditipudi et al. (2025), "Blackbox model provenance via palimpsestic membership inference": a model remembers what it
saw last best, so over the instances of a data order its likelihood rises with the instance's training position; a
Spearman correlation between the two, compared with its law when the order is permuted, gives an exact p-value. The
order a model saw its data in is a seeded uniform shuffle, so under the null (this model's likelihoods do not depend on
this order: it was not trained on it, or not in it) every permutation of the positions is as likely as the one
recorded, and the p-value

.. math:: p = \frac{1 + \#\{b : \rho^*_b \ge \rho\}}{P + 1}

over P seeded permutations is exact in finite samples whatever the likelihoods' law (ties included: the positions'
mid-ranks are permuted as they are).

A panel knows more than a blackbox model: each instance's score at every checkpoint. The instance's own difficulty
dominates its likelihood at any one checkpoint (on the shipped panels the final likelihood's correlation with the
position is 0.00-0.03), so the default statistic is the change since an earlier checkpoint c, s_i(c) = y_i,last -
y_i,c (sign-adjusted: higher is better), which cancels the instance's difficulty: instances trained after c gained
their memorisation in it, those trained before c lost some since. The test statistic is the largest Spearman
correlation over every reference checkpoint c, and each permutation is scored by the same maximum, so choosing c
costs nothing in exactness. ``statistic="level"`` tests the likelihood at the last checkpoint alone (what a blackbox
user of the final model has). Per-instance statistics never depend on the positions, only the positions are permuted.

The table reports, at every completed checkpoint c, the order-likelihood correlation of the level y_c (negative while
training runs: the instances already seen are ahead of those to come) and of the change since c, each with its own
permutation p-value (pointwise; the headline p-value is the one that answers the question).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.panel.model import NEVER, Panel

STATISTICS = ("change", "level")
DEFAULT_PERMUTATIONS = 999
MAX_PERMUTATIONS = 1_000_000
MIN_TREATED = 10  # fewer instances with a training position give a permutation law too coarse to say anything
_CHUNK = 200  # permutations scored per matrix product


@dataclass(frozen=True)
class CheckpointRow:
    """One completed checkpoint: the order-likelihood correlation of the level and of the change since it."""

    step: int
    level_rho: float
    level_p: float
    change_rho: float  # NaN at the last checkpoint (no change since it)
    change_p: float


@dataclass
class Provenance:
    """The test's answer: the statistic, its correlation and exact p-value, and the table over checkpoints."""

    metric: str
    statistic: str
    permutations: int
    seed: int
    alpha: float
    n_instances: int  # instances with a training position and a value at every completed checkpoint
    n_positions: int  # distinct training positions among them
    rho: float
    p_value: float
    reference_step: int | None  # the change statistic's best reference checkpoint (None for the level)
    rows: list[CheckpointRow]
    notes: list[str] = field(default_factory=list)

    @property
    def rejects(self) -> bool:
        """Whether the order-likelihood correlation is significant at alpha (the model was trained in this order)."""
        return self.p_value <= self.alpha

    def as_dict(self) -> dict:
        return {
            "metric": self.metric,
            "statistic": self.statistic,
            "permutations": self.permutations,
            "seed": self.seed,
            "alpha": self.alpha,
            "n_instances": self.n_instances,
            "n_positions": self.n_positions,
            "rho": self.rho,
            "p_value": self.p_value,
            "rejects": self.rejects,
            "reference_step": self.reference_step,
            # NaN (no change after the last checkpoint, a metric constant there) as null: strict JSON has no NaN
            "checkpoints": [{k: None if v != v else v for k, v in vars(r).items()} for r in self.rows],
            "notes": self.notes,
        }


def _standardised_ranks(x: np.ndarray) -> np.ndarray:
    """Per column, mid-ranks centred and scaled to unit norm (a constant column: NaN, no correlation)."""
    from scipy.stats import rankdata

    r = rankdata(x, axis=0)
    r -= r.mean(axis=0)
    norm = np.sqrt((r * r).sum(axis=0))
    return np.divide(r, norm, out=np.full_like(r, np.nan), where=norm > 0)


def _permutation_counts(q: np.ndarray, cols: np.ndarray, observed: np.ndarray, headline, permutations: int, seed: int):
    """Per column, how many permuted correlations reach the observed one, and how many permuted headline statistics
    (``headline(rho*)``: a function of a (k, columns) block) reach ``headline(observed)``."""
    rng = np.random.default_rng(seed)
    n = len(q)
    usable = np.isfinite(observed)
    filled = np.where(usable[:, None], np.nan_to_num(cols.T), 0.0).T  # NaN columns: 0, never counted
    top = headline(observed[None, :])[0]
    hits, head = np.zeros(len(observed), np.int64), 0
    done = 0
    while done < permutations:
        k = min(_CHUNK, permutations - done)
        idx = rng.permuted(np.tile(np.arange(n), (k, 1)), axis=1)
        star = q[idx] @ filled  # (k, columns): the correlations with permuted positions
        star[:, ~usable] = np.nan
        # a tie counts as reaching: rounding must not make a permutation equal to the observed order look smaller
        slack = 1e-12
        hits += (star >= observed[None, :] - slack).sum(axis=0)
        head += int((headline(star) >= top - slack).sum())
        done += k
    return hits, head


def _rows(steps: np.ndarray, observed: np.ndarray, p: np.ndarray) -> list[CheckpointRow]:
    """The table over checkpoints: ``observed`` and ``p`` hold the levels' columns, then the changes' (one fewer)."""
    t = len(steps)

    def at(i: int) -> tuple[float, float]:
        ok = i < len(observed) and np.isfinite(observed[i])
        return (float(observed[i]), float(p[i])) if ok else (math.nan, math.nan)

    return [CheckpointRow(int(steps[c]), *at(c), *(at(t + c) if c < t - 1 else (math.nan, math.nan))) for c in range(t)]


def _checked(panel: Panel, metric: str, statistic: str, permutations: int, alpha: float):
    """The metric (higher is better), which instances the test uses and how many have a position; one-line refusals
    of what cannot be tested."""
    if statistic not in STATISTICS:
        raise MemtuiError(f"statistic must be one of {', '.join(STATISTICS)}, not '{statistic}'.")
    if not 1 <= permutations <= MAX_PERMUTATIONS:
        raise MemtuiError(f"--permutations must be from 1 to {MAX_PERMUTATIONS:,}, not {permutations}.")
    if 1 / (permutations + 1) > alpha:
        raise MemtuiError(
            f"{permutations} permutations cannot give a p-value at or below alpha {alpha:g} (the smallest is "
            f"1/(P + 1)); use --permutations {math.ceil(1 / alpha) - 1} or more."
        )
    y = panel.sign(metric) * panel.values(metric)  # higher is better; the one-line error for a missing metric
    steps = panel.done_steps
    trained = (panel.treatment != NEVER) & np.isfinite(y).all(axis=1)
    n_known = int((panel.treatment != NEVER).sum())
    if n_known == 0:
        raise MemtuiError(
            f"{panel._name}: no instance has a training position (every one is never-trained), so there is no order "
            "to test; provenance needs a panel built from a data order."
        )
    if int(trained.sum()) < MIN_TREATED or len(np.unique(panel.treatment[trained])) < 2:
        raise MemtuiError(
            f"{panel._name}: {int(trained.sum())} instance(s) with a training position and a value at every completed "
            f"checkpoint, at {len(np.unique(panel.treatment[trained]))} position(s); provenance needs at least "
            f"{MIN_TREATED} at 2 or more positions."
        )
    if len(steps) < 2 and statistic == "change":
        raise MemtuiError("the change statistic needs two completed checkpoints; use --statistic level.")
    return y, trained, n_known


def provenance(
    panel: Panel,
    metric: str,
    *,
    statistic: str = "change",
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    alpha: float = 0.05,
) -> Provenance:
    """The exact permutation test of ``panel``'s metric against its instances' training positions (module
    docstring); refuses, in one line, panels without training positions or with too few of them."""
    y, trained, n_known = _checked(panel, metric, statistic, permutations, alpha)
    steps = panel.done_steps
    yt, pos = y[trained], panel.treatment[trained]
    q = _standardised_ranks(pos.astype(float)[:, None])[:, 0]
    cols = _standardised_ranks(np.concatenate([yt, yt[:, -1:] - yt[:, :-1]], axis=1))  # levels, then changes since c
    t = len(steps)
    observed = q @ np.nan_to_num(cols)
    observed[~np.isfinite(cols).all(axis=0)] = np.nan

    def headline(rho: np.ndarray) -> np.ndarray:
        if statistic == "level":
            return rho[:, t - 1]
        return np.nanmax(np.where(np.isfinite(rho[:, t:]), rho[:, t:], -np.inf), axis=1)

    if not np.isfinite(headline(observed[None, :])[0]):
        raise MemtuiError(f"metric '{metric}' does not vary over the instances: there is no correlation to test.")
    hits, head = _permutation_counts(q, cols, observed, headline, permutations, seed)
    rows = _rows(steps, observed, (1 + hits) / (permutations + 1))
    reference = None
    if statistic == "change":
        changes = np.where(np.isfinite(observed[t:]), observed[t:], -np.inf)
        reference = int(steps[int(np.argmax(changes))])
    notes = []
    dropped = n_known - int(trained.sum())
    if dropped:
        notes.append(f"{dropped} instance(s) with a training position but a missing value at a completed checkpoint "
                     "are left out")  # fmt: skip
    return Provenance(
        metric=metric, statistic=statistic, permutations=permutations, seed=seed, alpha=alpha,
        n_instances=int(trained.sum()), n_positions=len(np.unique(pos)),
        rho=float(headline(observed[None, :])[0]), p_value=(1 + head) / (permutations + 1),
        reference_step=reference, rows=rows, notes=notes,
    )  # fmt: skip
