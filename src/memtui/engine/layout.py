"""From a panel's metric matrix to the groups the estimator works on: cohorts, controls, and the cell list.

Everything downstream works on *groups* of instances stored contiguously (instances sorted by group), so that a
group's multiplier-weighted sums are one matrix product over a slice, never a gather.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.engine.blas import over_cores

NEVER_INDEX = np.iinfo(np.int64).max  # treatment index of never-treated instances


@dataclass
class Layout:
    """Instances grouped by treatment checkpoint, and the (cohort, checkpoint) cells to estimate.

    Groups are ordered by treatment index *descending*, never-treated first, so that the not-yet-treated control set
    of a cell ("treated strictly after checkpoint m") is always a prefix of the groups: ``ctrl_prefix[cell]`` groups.
    """

    steps: np.ndarray  # (T,) checkpoint steps used
    y: np.ndarray  # (N, T+1) outcomes, rows sorted by group, shifted per column; last column is 0 (no base)
    group_start: np.ndarray  # (G+1,) row offsets of groups
    group_index: np.ndarray  # (G,) treatment checkpoint index per group (NEVER_INDEX for never treated)
    group_n: np.ndarray  # (G,) instances per group
    means: np.ndarray  # (G, T+1) group means of y
    cohort_groups: np.ndarray  # indices of groups that are cohorts (have cells), in ascending treatment order
    # one entry per cell:
    cell_group: np.ndarray
    cell_t: np.ndarray
    cell_b: np.ndarray  # base column; T (the zero column) for the difference and extractable estimators
    cell_prefix: np.ndarray  # number of leading groups forming the control set (0: none, the extractable estimator)
    cell_own: np.ndarray  # whether the cell's own group sits inside that prefix and must be taken out
    cell_pre: np.ndarray  # c < g
    group_folded: np.ndarray | None = None  # (G,) instances first trained on between checkpoints, counted in the next
    scale: float = 1.0  # standard deviation of the outcomes used: what "negligibly small" is measured against
    notes: list[str] = field(default_factory=list)
    # (T+1,) what was subtracted from each column of y: estimates that are not invariant to it (the extractable
    # estimator, a level rather than a difference) add it back; 0 for the others, which are invariant
    level: np.ndarray | None = None
    controls: bool = True  # False for the extractable estimator: no control set (its counterfactual is zero)
    # (N,) the row of the ``y`` given to build_layout that each row came from: what a multiplier source keyed by
    # instance (``engine.multipliers.JointMultipliers``) looks each row's multiplier up by
    source_rows: np.ndarray | None = None

    @property
    def n_groups(self) -> int:
        return len(self.group_n)

    @property
    def n_units(self) -> int:
        return int(self.group_n.sum())

    def rows(self, g: int) -> slice:
        return slice(self.group_start[g], self.group_start[g + 1])


def treatment_index(treatment: np.ndarray, steps: np.ndarray, never: int) -> np.ndarray:
    """Index of the first checkpoint at or after each treatment step (a step between checkpoints maps forward)."""
    idx = np.searchsorted(steps, treatment, side="left").astype(np.int64)
    idx[treatment == never] = NEVER_INDEX
    return idx


# The outcomes' standard deviation must lie in this range: squares of the values stay normal doubles, and the float32
# bootstrap draws (about scale / sqrt(n)) stay far from float32's limits (1e-38 .. 3e38).
SCALES = (1e-30, 1e30)
_ROWS = 8192  # rows of a block when the kept rows are copied into the layout


def _scale(y: np.ndarray) -> float:
    """Standard deviation of the 2-d ``y`` (any strides), exactly 0 for a constant one (np.std would leave rounding
    dust), computed on ``y / max|y|`` so that neither huge nor tiny values overflow or underflow when squared. It is
    ``np.std`` of that quotient as a contiguous array, bit for bit (numpy's steps: the mean by one pairwise reduction,
    the squared deviations, their mean, its root), made piece by piece (``_pairwise``): never a contiguous copy of
    ``y`` (at 1 M instances a 1.2 GB array, first touched page by page)."""
    n = y.size
    if not n:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        high, low = float(y.max()), float(y.min())
        top = max(high, -low)  # max |y| without an |y| copy (exact: a maximum rounds nothing)
        if top == 0 or not high - low > 0:
            return 0.0
        total = _pairwise(lambda lo, k: np.divide(_piece(y, lo, k), top), 0, n)
        mean = np.float64(total) / n
        squares = _pairwise(lambda lo, k: np.square(np.divide(_piece(y, lo, k), top) - mean), 0, n)
        return top * float(np.sqrt(np.float64(squares) / n))


_PIECE = 1 << 16  # elements (512 KB of float64) of a piece of ``_pairwise``'s sum, made at once (in cache); >= 128


def _piece(y: np.ndarray, lo: int, n: int) -> np.ndarray:
    """Elements ``lo .. lo + n - 1`` of ``y`` flattened (row-major, float64), copied from the rows they lie in."""
    width = y.shape[1]
    first, last = lo // width, (lo + n - 1) // width + 1
    flat = np.asarray(y[first:last], dtype=np.float64).reshape(-1)
    return flat[lo - first * width : lo - first * width + n]


def _pairwise(piece, lo: int, n: int) -> float:
    """``np.add.reduce`` of a contiguous float64 array of ``n`` elements whose elements ``lo .. lo + k - 1``
    ``piece(lo, k)`` gives, bit for bit, without the array: numpy sums a contiguous array pairwise, splitting it at
    half its length rounded down to a multiple of 8 down to blocks of 128 (its pairwise_sum), so the sum of a large
    array is that of its two halves' sums, each numpy's sum of the half (tests/engine/test_kernels.py holds it to
    np.std). The pieces' sums are independent: a large array's are made on every core, then added in the tree's
    order."""
    leaves: list[tuple[int, int]] = []

    def split(lo: int, n: int) -> None:
        if n <= _PIECE:
            leaves.append((lo, n))
            return
        half = n // 2 - (n // 2) % 8
        split(lo, half)
        split(lo + half, n - half)

    def combine(lo: int, n: int) -> float:
        if n <= _PIECE:
            return sums[lo]
        half = n // 2 - (n // 2) % 8
        return combine(lo, half) + combine(lo + half, n - half)

    split(lo, n)
    sums: dict[int, float] = {}

    def work(items: list[int]) -> None:
        for i in items:
            sums[leaves[i][0]] = float(np.add.reduce(piece(*leaves[i])))

    over_cores(work, list(range(len(leaves))), n)
    return combine(lo, n)


def folded(treatment: np.ndarray, steps: np.ndarray, never: int) -> np.ndarray:
    """Which instances were first trained on strictly between two of ``steps`` (they join the next one's cohort)."""
    idx = np.searchsorted(steps, treatment, side="left")
    inside = (treatment != never) & (idx < len(steps))
    return inside & (steps[np.minimum(idx, len(steps) - 1)] != treatment)


def listing(pairs: list[tuple[int, int]], limit: int = 6) -> str:
    """``step (n), step (n), ...``, cut after ``limit`` entries: notes stay one short line on any panel."""
    shown = ", ".join(f"{step} ({n})" for step, n in pairs[:limit])
    return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


def build_layout(
    y: np.ndarray,
    treatment: np.ndarray,
    steps: np.ndarray,
    *,
    never: int,
    estimator: str = "did",
    base_period: str = "varying",
    control_group: str = "never_treated",
) -> Layout:
    n, t = y.shape
    notes: list[str] = []
    if t < 2 and estimator == "did":
        raise MemtuiError(
            f"only {t} completed checkpoint(s); difference-in-differences needs at least two, extract more checkpoints."
        )
    tidx = treatment_index(treatment, steps, never)

    keep, tidx = _kept_instances(y, tidx, steps, estimator, control_group, notes)

    rows = np.flatnonzero(keep)
    order = rows[np.argsort(-tidx[rows], kind="stable")]  # groups descending by treatment index: never first
    g_of = tidx[order]
    bounds = np.flatnonzero(np.diff(g_of)) + 1
    group_start = np.concatenate([[0], bounds, [len(order)]]).astype(np.int64)
    group_index = g_of[group_start[:-1]]
    group_n = np.diff(group_start)

    yy = np.zeros((len(order), t + 1))

    def fill(starts: list[int]) -> None:  # the kept rows in their order, a block at a time (no copy of them all)
        for lo in starts:
            yy[lo : lo + _ROWS, :t] = y[order[lo : lo + _ROWS]]

    over_cores(fill, list(range(0, len(order), _ROWS)), yy.size)  # each row's values copied, on any thread
    scale = _checked_scale(yy[:, :t])
    level = _centre(yy, group_start, t, estimator)
    means = _group_sums(yy, group_start) / group_n[:, None]
    group_folded = _group_folded(treatment, steps, never, order, group_start, group_index, t, notes)

    cohort_groups = np.flatnonzero(group_index < t)[::-1]
    cells = _cells(group_index, cohort_groups, t, estimator, base_period, control_group)
    return Layout(
        steps=np.asarray(steps),
        y=yy,
        group_start=group_start,
        group_index=group_index,
        group_n=group_n,
        means=means,
        cohort_groups=cohort_groups,
        group_folded=group_folded,
        scale=scale,
        notes=notes,
        level=level,
        controls=estimator != "extractable",
        source_rows=order,
        **cells,
    )


def _kept_instances(y, tidx, steps, estimator: str, control_group: str, notes: list[str]):
    """Which instances enter the estimate (complete rows in cohorts that can be estimated), and the treatment index
    with instances treated after the window folded into one group where they serve as controls; notes what it drops.
    """
    t = y.shape[1]
    complete = np.concatenate([np.isfinite(y[lo : lo + _ROWS]).all(axis=1) for lo in range(0, len(y), _ROWS)] or [[]])
    complete = complete.astype(bool)
    if not complete.all():
        notes.append(
            f"dropped {int((~complete).sum())} instances with missing or infinite values in completed checkpoints"
        )
    keep = complete.copy()
    if estimator == "did":
        first = keep & (tidx == 0)
        if first.any():
            notes.append(
                f"left out {int(first.sum())} instances treated at or before the first checkpoint "
                f"(step {steps[0]}): no pre-treatment checkpoint"
            )
            keep &= ~first
    beyond = keep & (tidx >= t) & (tidx != NEVER_INDEX)
    if beyond.any():
        if control_group == "never_treated":
            notes.append(
                f"left out {int(beyond.sum())} instances first trained on after the last completed checkpoint "
                f"(step {steps[-1]}): not yet treated within the window"
            )
            keep &= ~beyond
        else:
            notes.append(f"{int(beyond.sum())} instances treated after the last checkpoint serve as controls")
            tidx = np.where(beyond, t, tidx)  # one group "treated after the window"
    if not (keep & (tidx == NEVER_INDEX)).any():
        raise MemtuiError(
            "no never-treated instance has complete values in the completed checkpoints; "
            "check the validation instances or finish extraction."
        )
    for cohort in np.unique(tidx[(tidx < t) & (tidx > 0 if estimator == "did" else True)]):
        if not (keep & (tidx == cohort)).any():
            raise MemtuiError(
                f"every instance of cohort {steps[cohort]} has missing or infinite values in completed checkpoints, "
                "so the cohort cannot be estimated; `memtui info PANEL` shows how much of each metric is filled, "
                "estimate a metric that has the values or re-import the table with them."
            )
    return keep, tidx


def _checked_scale(values: np.ndarray) -> float:
    """The metric's scale (standard deviation), refused outside SCALES (where squares and float32 draws stay
    finite)."""
    scale = _scale(values)
    if scale and not SCALES[0] <= scale <= SCALES[1]:
        raise MemtuiError(
            f"the metric's values vary on a scale of {scale:.3g} (standard deviation); memtui estimates on scales "
            f"from {SCALES[0]:g} to {SCALES[1]:g}: rescale it, e.g. re-import it in other units."
        )
    return scale


def _group_sums(yy: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """``np.add.reduceat(yy, group_start[:-1], axis=0)`` (groups non-empty), bit for bit: each group's rows added one
    after another, as reduceat adds them, group by group (a group's rows in cache, not the whole array's) on every
    core for a large layout (numpy releases the GIL)."""
    out = np.empty((len(group_start) - 1, yy.shape[1]))

    def groups(ks) -> None:
        for k in ks:
            np.add.reduceat(yy[group_start[k] : group_start[k + 1]], [0], axis=0, out=out[k : k + 1])

    over_cores(groups, list(range(len(out))), yy.size)
    return out


def _centre(yy: np.ndarray, group_start: np.ndarray, t: int, estimator: str) -> np.ndarray:
    """Centre ``yy`` in place; returns the level the extractable estimator adds back (zero for the others)."""
    # Shift each column by the never-treated mean and, for DiD, each instance by its own mean: the estimates are
    # invariant to both, and the small centred values let the bootstrap run in float32 without losing digits. The
    # extractable estimator (a cohort's mean level) is not invariant to the column shift: it adds ``level`` back.
    # Row blocks on every core for a large layout: each row's mean is its own reduction, each subtraction elementwise,
    # so the values are the whole array's; the level is the never-treated rows' column means, taken whole.
    blocks = list(range(0, len(yy), _ROWS))
    if estimator == "did":

        def own_means(starts: list[int]) -> None:
            for lo in starts:
                part = yy[lo : lo + _ROWS, :t]
                part -= part.mean(axis=1, keepdims=True)

        over_cores(own_means, blocks, yy.size)
    level = np.zeros(t + 1)
    level[:t] = yy[group_start[0] : group_start[1], :t].mean(axis=0)

    def shift(starts: list[int]) -> None:
        for lo in starts:
            yy[lo : lo + _ROWS, :t] -= level[:t]

    over_cores(shift, blocks, yy.size)
    if estimator != "extractable":
        level[:] = 0
    return level


def _group_folded(treatment, steps, never, order, group_start, group_index, t: int, notes: list[str]) -> np.ndarray:
    """Per group, how many instances first trained on between completed checkpoints were folded into it (noted)."""
    group_folded = np.add.reduceat(folded(treatment, steps, never)[order].astype(np.int64), group_start[:-1])
    in_cohort = group_index < t
    if group_folded[in_cohort].any():
        pairs = [(int(steps[k]), int(f)) for k, f in zip(group_index, group_folded, strict=True) if k < t and f]
        notes.append(
            f"{int(group_folded[in_cohort].sum())} instances first trained on between completed checkpoints are "
            f"counted in the next checkpoint's cohort: {listing(sorted(pairs))}"
        )
    return group_folded


def _cells(group_index, cohort_groups, t, estimator, base_period, control_group) -> dict[str, np.ndarray]:
    # every (cohort, checkpoint) pair, cohort by cohort and checkpoints in order; then each its base, or dropped
    gs = np.repeat(np.asarray(cohort_groups, dtype=np.int64), t)
    ts = np.tile(np.arange(t, dtype=np.int64), len(cohort_groups))
    a = np.asarray(group_index, dtype=np.int64)[gs]
    pre = ts < a
    if estimator in ("difference", "extractable"):
        bs, keep = np.full(len(gs), t, dtype=np.int64), np.ones(len(gs), bool)
    elif base_period == "varying":  # post: the checkpoint before g; placebo: the one before c (none before c = 0)
        bs, keep = np.where(pre, ts - 1, a - 1), ~pre | (ts != 0)
    else:  # universal: always the checkpoint before g; the reference cell (c = g-1) is 0 by construction
        bs, keep = a - 1, ts != a - 1
    gs, ts, bs, pre = gs[keep], ts[keep], bs[keep], pre[keep]
    if estimator == "extractable":  # no control set: a prefix of no groups (the counterfactual is taken as zero)
        prefix = np.zeros_like(gs)
        own = np.zeros(len(gs), dtype=bool)
    elif control_group == "never_treated":
        prefix = np.ones_like(gs)
        own = np.zeros(len(gs), dtype=bool)
    else:
        # controls: groups treated strictly after max(c, b); groups are sorted by descending treatment index
        m = np.maximum(ts, np.where(bs == t, -1, bs))
        desc = group_index  # descending
        prefix = np.searchsorted(-desc, -m, side="left")  # count of groups with index > m
        own = group_index[gs] > m
    return {
        "cell_group": gs,
        "cell_t": ts,
        "cell_b": bs,
        "cell_prefix": prefix,
        "cell_own": own,
        "cell_pre": pre,
    }
