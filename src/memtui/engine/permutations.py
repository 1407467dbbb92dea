"""Cohort-label permutations: the randomisation distribution of the cells' studentised estimates (``--band
permutation``, ``engine.band_permutation``).

A model saw its training data in a seeded uniform shuffle, so which treated instances fall in which cohort is random
by design. Under the sharp null of no cohort-specific effect (every treated instance's outcomes would be what they are
whichever cohort it had fallen in) every relabelling of the treated instances that keeps the cohorts' sizes was as
likely as the one observed, and a statistic computed the same way under each of them has the observed one's law: the
test is exact in finite samples whatever the noise looks like (skewed, heavy-tailed, persistent). The never-trained
controls drawn from the same order past the last trained step (``--controls beyond``) are part of that experiment:
with ``controls=True`` (the band) their label is permuted with the cohorts', so that a permuted cohort and the permuted
controls draw the treated instances (and their effects) alike; with ``controls=False`` they are fixed.

A permutation re-indexes the treated rows: cohort g's sums are those of the rows the permutation gives it. Each cell's
estimate and standard error are then the real estimate's own formulas (``did.point_estimates``: the difference of the
cohort's and the controls' changes, the HC1 variance of both) from four per-cohort column sums: y, y^2, y times the
cohort's base column and y times the previous column (a cell's base is the cohort's base for post-treatment cells and
the checkpoint before c for varying-base placebo cells). Fixed controls' part of every cell is computed once; permuted
controls are one more group of the sums (their change) and their part of the variance comes from their Gram matrix per
permutation (``_control_grams``: their cells' bases differ by cohort, so every pair of columns is some cell's). The sums
are one pass over the treated rows per permutation (``_kernels.c``'s ``perm_sums``, which also gathers the permuted
controls' rows for their Gram as it reads them; a sparse product in numpy where the library is not built).

Permutations are drawn over *keys*: by default each instance's data row (each treated instance's rank among the
treated instances with the controls fixed), or a ``JointMultipliers`` source's keys (subgroups, seeds). Permutation j
puts the keys in a uniformly random order and hands the cohorts' slots out in that order, so two layouts with the same
treated instances and cohort sizes (one panel scored by several models, several metrics) get the same relabelling, and
layouts on disjoint subsets of one keyed panel (subgroups) independent relabellings within each: a permutation
stratified by subset, exact for their joint statements."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from memtui.engine import kernels, torch_bootstrap
from memtui.engine.blas import one_blas_thread
from memtui.engine.layout import NEVER_INDEX, Layout
from memtui.engine.torch_permutation import TorchPermutationSums

_CHUNK = 16  # permutations per pass (the sums of a chunk: chunk x cohorts x columns x 4 float32)


def unsupported(lay: Layout) -> str | None:
    """Why ``lay`` has no permutation band (None where it has): controls that are the never-trained instances alone
    (the first group), and every cell's base the cohort's own base, the checkpoint before c or none."""
    if lay.n_groups < 2 or lay.group_index[0] != NEVER_INDEX:
        return "the layout has no never-trained controls"
    if lay.controls and not (np.all(lay.cell_prefix == 1) and not lay.cell_own.any()):
        return "its controls are not the never-trained instances alone (not-yet-treated controls)"
    return None


@dataclass
class Plan:
    """What every permutation of one layout reuses: the treated rows (float32, padded), the cohorts' slots, the
    cells' coordinates in the sums, the controls' fixed part of each cell and the keys permutations are drawn over."""

    y: np.ndarray  # (treated rows, padded width) float32: column 0 zero, then the layout's columns
    starts: np.ndarray  # (cohorts + 1,) the cohorts' slots among the treated rows (the layout's own sizes)
    base: np.ndarray  # (cohorts,) each cohort's base column, padded coordinates
    keys: np.ndarray  # (treated rows,) the key each treated row is permuted by
    n_keys: int
    row_of_key: np.ndarray  # (n_keys,) the treated row of each key (-1: none)
    by_key: np.ndarray  # (treated rows,) the treated rows in ascending order of their keys
    cohort: np.ndarray  # per cell: its cohort (0-based among the treated groups)
    col_t: np.ndarray  # per cell: its checkpoint's and its base's padded columns
    col_b: np.ndarray
    split: np.ndarray  # (cohorts,) padded column from which a cohort's cross products are with its base (before it:
    # with the previous column)
    cross: np.ndarray  # per cell: 1 its squares have a cross term (the sums' c at its column), 0 none (base: none)
    n: np.ndarray  # per cell: its cohort's size (float)
    shift: np.ndarray  # per cell: the controls' change less the level the estimate adds back (att = dm - shift)
    ctrl_var: np.ndarray  # per cell: the controls' part of the variance where they are fixed (0 where permuted)
    treated_rows: slice  # the permuted rows in the layout (the treated ones, or every row with the controls)
    ctrl_group: int = -1  # the controls' group in the sums (0) where they are permuted with the treated, else -1
    ctrl_n: float = 0.0  # the controls' number
    rebased: np.ndarray | None = None  # with the controls permuted: ``y`` less each row's first checkpoint, centred
    centre: np.ndarray | None = None  # the mean ``rebased`` is centred by (double)


def plan(
    lay: Layout, est, keys: np.ndarray | None = None, n_keys: int | None = None, *, centred: bool = False,
    controls: bool = False,
) -> Plan:  # fmt: skip
    """The ``Plan`` of ``lay`` (``unsupported`` must be None). ``keys``, ``n_keys``: the key of each of the layout's
    data rows (``Layout.source_rows`` index them) and how many keys there are (a source shared by layouts on subsets
    of one panel: subgroups, seeds); default: each treated instance's rank among the treated instances (by data row),
    so that layouts of the same instances (a suite's models and metrics) key them alike whatever else they hold.
    ``centred``: each treated row less its own cohort's estimated post-treatment effects (``centre_rows``), so that
    permutations do not carry one cohort's effects into another; not exact, and measured anti-conservative (see
    ``centre_rows``): the band runs uncentred. ``controls``: the never-trained controls are permuted with the treated
    instances (their label one more group of the sums, the first), not fixed."""
    if centred and controls:
        raise ValueError("the centred rows are for fixed controls")
    first = 0 if controls else 1  # the first group permuted
    treated = slice(int(lay.group_start[first]), lay.n_units)
    width = lay.y.shape[1]
    padded = 1 + width  # no wider: the rows are read in random order, every byte a cost (perm_sums tiles them)
    y = np.zeros((lay.n_units - treated.start, padded), np.float32)
    y[:, 1 : width + 1] = lay.y[treated]
    rows = lay.source_rows if lay.source_rows is not None else np.arange(lay.n_units)
    if keys is None and controls:  # each instance keyed by its data row: the same instances, the same keys
        keys, n_keys = np.arange(int(rows.max()) + 1), int(rows.max()) + 1
    elif keys is None:  # each treated instance keyed by its rank among them: the same instances, the same keys
        keys = np.empty(int(rows.max()) + 1, np.int64)
        keys[np.sort(rows[treated])] = np.arange(lay.n_units - treated.start)
        n_keys = lay.n_units - treated.start
    starts = lay.group_start[first:] - treated.start
    cohort = lay.cell_group - first
    # each cohort's base: the base of its instantaneous cell (c = g), whatever the estimator (the controls: none)
    inst = lay.cell_t == lay.group_index[lay.cell_group]
    base = np.full(lay.n_groups - first, width - 1, np.int64)
    base[cohort[inst]] = lay.cell_b[inst]
    with_base = (lay.cell_b == base[cohort]) & (lay.cell_b != width - 1)
    lagged = ~with_base & (lay.cell_b == lay.cell_t - 1)
    none = lay.cell_b == width - 1
    split = np.full(len(base), width + 1, np.int64)  # padded: from this column on, products with the base
    np.minimum.at(split, cohort[with_base], lay.cell_t[with_base] + 1)
    if not np.all(with_base | lagged | none) or np.any(lay.cell_t[lagged] + 1 >= split[cohort[lagged]]):
        raise ValueError("a cell's base is neither its cohort's, the checkpoint before it nor none")
    if centred:
        centre_rows(lay, est, y, starts, lagged)
    level = lay.level if lay.level is not None else np.zeros(width)
    lift = level[lay.cell_t] - level[lay.cell_b]
    # permuted controls: their change and variance are each permutation's own (``_control_parts``)
    shift, ctrl_var = (-lift, np.zeros(len(lift))) if controls else (est.dmu - lift, _control_variance(lay))
    rebased, rebase_centre = _rebased(y, width) if controls else (None, None)
    keys = np.asarray(keys)[rows[treated]]
    row_of_key = np.full(int(n_keys), -1, np.int64)
    row_of_key[keys] = np.arange(len(keys))
    if np.count_nonzero(row_of_key >= 0) != len(keys):
        raise ValueError("two treated rows share a key: permutations need one key per instance")
    return Plan(
        y=y, starts=starts, base=base + 1, split=np.minimum(split, padded), keys=keys,
        n_keys=int(n_keys), row_of_key=row_of_key, by_key=np.argsort(keys, kind="stable"), cohort=cohort,
        col_t=lay.cell_t + 1, col_b=lay.cell_b + 1,
        cross=(~none).astype(np.int64), n=lay.group_n[lay.cell_group].astype(float),
        shift=shift, ctrl_var=ctrl_var, treated_rows=treated, ctrl_group=0 if controls else -1,
        ctrl_n=float(lay.group_n[0]), rebased=rebased, centre=rebase_centre,
    )  # fmt: skip


def _rebased(y: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The padded rows' used columns (0 .. width) less each row's first checkpoint (column 1), then less their mean
    over every row (float32, contiguous), and that mean: what the permuted controls' Gram products read
    (``_control_grams``; _kernels.c's ``perm_sums`` makes the same rows as it reads them). The instances' levels, which
    dwarf the changes, and the changes' common mean are taken out before the float32 products, so a permuted control
    set's own mean (its Gram's centring, in double) is small beside their spread."""
    z = y[:, : width + 1] - y[:, 1:2]
    centre = z.mean(axis=0, dtype=np.float64)
    return np.ascontiguousarray(z - centre, dtype=np.float32), centre


def centre_rows(lay: Layout, est, y: np.ndarray, starts: np.ndarray, lagged: np.ndarray) -> None:
    """Subtract from each treated row of ``y`` (padded: column c + 1 holds checkpoint c) its cohort's estimated
    post-treatment effects, in place: cell (g, c)'s estimate at column c of cohort g's rows. A post-treatment cell's
    estimate is the cohort's mean change from its base (a placebo column or none, left as observed) to c less the
    controls', so under the observed labelling every post-treatment cell of the centred rows estimates 0 exactly (its
    standard error unchanged: a constant per column within a cohort), and the placebo cells (c < g: their columns are
    before the base) are as observed. A permuted cohort then holds rows whose own effects are taken out (Freedman-Lane's
    residual permutation, the placebo cells' null kept). But an estimate is the cohort's change less the controls':
    subtracting it puts the controls' mean change into the cohort's rows, where a permuted estimate cancels it, so the
    permutation law lacks the controls' (and the treated rows' common) noise that the observed estimate carries: too
    narrow (docs/methods.md measures it), hence off by default."""
    post = ~lay.cell_pre
    if np.any(post & lagged):
        raise ValueError("a post-treatment cell's base is the checkpoint before it: cannot centre its cohort")
    effect = np.zeros((len(starts) - 1, y.shape[1]), np.float32)
    effect[lay.cell_group[post] - 1, lay.cell_t[post] + 1] = np.nan_to_num(est.att[post])
    y -= np.repeat(effect, np.diff(starts), axis=0)


def _control_variance(lay: Layout) -> np.ndarray:
    """Per cell, the controls' part of its HC1 variance, as ``did.point_estimates`` forms it for a control set of one
    group (the never-trained instances): their centred changes' sum of squares over their size squared."""
    if not lay.controls:
        return np.zeros(len(lay.cell_group))
    z = lay.y[lay.rows(0)] - lay.means[0]
    gram = z.T @ z
    t, b = lay.cell_t, lay.cell_b
    return (gram[t, t] + gram[b, b] - 2 * gram[t, b]) / float(lay.group_n[0]) ** 2


def orders(p: Plan, seeds: np.ndarray) -> np.ndarray:
    """One permutation per seed (count x treated rows): row j lists, slot by slot, the treated row the j-th
    permutation puts there.

    Permutation j is a permutation pi of the treated instances' keys: the keys in a uniformly random order
    (Fisher-Yates with splitmix64 seeded by ``seeds[j]``) matched, in turn, with the keys in ascending order; an
    instance then takes the cohort the observed labelling gave its image (a relabelling a o pi of the observed labels
    a). Layouts of the same instances get the same pi: one panel scored by several models, several metrics (one
    labelling: the same relabelling) and the seeds of a seed suite (independent labellings a_s, each relabelled by the
    same pi: their joint law is invariant under it, so joint statements stay exact). The orders pi induces on
    disjoint subsets of the keys are independent and uniform: subgroups get a permutation stratified by group. The
    compiled loop and numpy make the same permutations."""
    seeds = np.ascontiguousarray(seeds, np.uint64)
    out = np.empty((len(seeds), len(p.keys)), np.int64)
    if compiled():  # the same mapping as below, made as the keys are shuffled
        work = np.empty(p.n_keys, np.int64)
        _LIB.perm_orders(len(seeds), p.n_keys, seeds.ctypes.data, p.row_of_key.ctypes.data, p.by_key.ctypes.data,
                         len(p.keys), work.ctypes.data, out.ctypes.data)  # fmt: skip
        return out
    shuffled = _shuffled(p, seeds)  # per permutation: the treated rows in its key order
    # pi maps the m-th treated row in key order to the m-th in shuffled order: the slot of row pi(i) goes to row i
    np.put_along_axis(out, shuffled, p.by_key[None, :], axis=1)
    return out


def _shuffled(p: Plan, seeds: np.ndarray) -> np.ndarray:
    """numpy's Fisher-Yates of ``perm_orders``, the same draws: per seed, the treated rows in its order of the keys."""
    state = seeds.copy()
    work = np.tile(np.arange(p.n_keys, dtype=np.int64), (len(seeds), 1))
    rows = np.arange(len(seeds))
    for i in range(p.n_keys - 1, 0, -1):
        other = _below(state, i + 1)
        kept = work[:, i].copy()
        work[:, i] = work[rows, other]
        work[rows, other] = kept
    mapped = p.row_of_key[work]
    return mapped[mapped >= 0].reshape(len(seeds), len(p.keys))


_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _splitmix(state: np.ndarray, todo: np.ndarray) -> np.ndarray:
    """splitmix64's next draw of the streams ``todo`` (advancing their states), as _kernels.c's."""
    state[todo] += _GOLDEN
    z = state[todo].copy()
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _below(state: np.ndarray, n: int) -> np.ndarray:
    """Per stream, a uniform integer in [0, n) as _kernels.c's ``below`` draws it (Lemire, with its rejections)."""
    threshold = np.uint64(((1 << 32) - n) % n)
    out = np.empty(len(state), np.int64)
    todo = np.ones(len(state), bool)
    while todo.any():
        product = (_splitmix(state, todo) >> np.uint64(32)) * np.uint64(n)
        ok = (product & np.uint64(0xFFFFFFFF)) >= threshold
        idx = np.flatnonzero(todo)
        out[idx[ok]] = (product[ok] >> np.uint64(32)).astype(np.int64)
        todo[idx[ok]] = False
    return out


def _library():
    """_kernels.c's ``perm_sums`` and ``perm_cells`` with their argument types, or None (not built, switched off, a
    library of another version)."""
    lib = kernels._LIB
    if lib is None or not hasattr(lib, "perm_version"):
        return None
    lib.perm_version.restype = ctypes.c_int64
    if lib.perm_version() != 7:
        return None
    lib.perm_sums.argtypes = [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 8 + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3
    lib.perm_sums.restype = None
    lib.perm_cells.argtypes = [*[ctypes.c_int64] * 4, *[ctypes.c_void_p] * 12, ctypes.c_int64, ctypes.c_double,
                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_double, ctypes.c_void_p,
                               ctypes.c_void_p]  # fmt: skip
    lib.perm_cells.restype = None
    lib.perm_orders.argtypes = [ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 3, ctypes.c_int64,
                                ctypes.c_void_p, ctypes.c_void_p]  # fmt: skip
    lib.perm_orders.restype = None
    return lib


_LIB = _library()


def compiled() -> bool:
    """Whether the compiled sums run (not switched off by ``MEMTUI_KERNELS=numpy``, as the bootstrap's loop)."""
    return _LIB is not None and os.environ.get("MEMTUI_KERNELS", "").lower() != "numpy"


def sums(p: Plan, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per permutation (the rows of ``order``) and cohort, the column sums s, q, c (count x cohorts x width, float32)
    of y, y^2 and the cross products (y times the previous column before the cohort's ``split``, times its base
    column from it on)."""
    count, n_rows = order.shape
    groups, width = len(p.base), p.y.shape[1]
    out = [np.zeros((count, groups, width), np.float32) for _ in range(3)]
    if compiled():
        order = np.ascontiguousarray(order, np.int64)
        _LIB.perm_sums(count, n_rows, groups, width, p.y.ctypes.data, order.ctypes.data, p.starts.ctypes.data,
                       p.base.ctypes.data, p.split.ctypes.data, *(a.ctypes.data for a in out), -1, 0, None, None,
                       None)  # fmt: skip
        return out[0], out[1], out[2]
    from scipy import sparse

    lag = np.zeros_like(p.y)
    lag[:, 1:] = p.y[:, 1:] * p.y[:, :-1]
    stacked = np.hstack([p.y, p.y * p.y, lag])
    label = np.repeat(np.arange(groups), np.diff(p.starts))
    before = np.arange(width)[None, :] < p.split[:, None]  # (cohorts, width): the lag's columns
    for j in range(count):
        ones = sparse.csr_array((np.ones(n_rows, np.float32), (label, order[j])), shape=(groups, n_rows))
        s_q_l = ones @ stacked
        based = sparse.csr_array((p.y[order[j], p.base[label]], (label, order[j])), shape=(groups, n_rows))
        out[0][j], out[1][j] = s_q_l[:, :width], s_q_l[:, width : 2 * width]
        out[2][j] = np.where(before, s_q_l[:, 2 * width :], based @ p.y)
    for a in out:
        a[:, :, 0] = 0
    return out[0], out[1], out[2]


def _control_grams(p: Plan, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per permutation, the permuted controls' Gram matrix (count x w x w, float32: one BLAS product of their rows of
    ``p.rebased``, gathered) and their rows' mean (count x w, double): their centred Gram is gram - n m m' (w: the
    used columns, the sums' coordinates)."""
    first, last = p.starts[p.ctrl_group], p.starts[p.ctrl_group + 1]
    count, width = len(order), p.rebased.shape[1]
    grams = np.empty((count, width, width), np.float32)
    means = np.empty((count, width))
    buf = np.empty((last - first, width), np.float32)
    for j in range(count):  # one permutation's rows at a time: they stay in cache for their product
        np.take(p.rebased, order[j, first:last], axis=0, out=buf)
        means[j] = buf.mean(axis=0, dtype=np.float64)
        np.matmul(buf.T, buf, out=grams[j])
    return grams, means


def _compiled_sums(p: Plan, order: np.ndarray):
    """``sums`` and, with the controls permuted, ``_control_grams`` (None, None where they are fixed) from the
    compiled loop: one permutation at a time, the controls' rows gathered while ``perm_sums`` reads them and their
    Gram matrix made while they are in cache."""
    count, n_rows = order.shape
    groups, width = len(p.base), p.y.shape[1]
    s, q, c = (np.zeros((count, groups, width), np.float32) for _ in range(3))
    order = np.ascontiguousarray(order, np.int64)
    args = (n_rows, groups, width, p.y.ctypes.data)
    rest = (p.starts.ctypes.data, p.base.ctypes.data, p.split.ctypes.data)
    if p.ctrl_group < 0:
        _LIB.perm_sums(count, *args, order.ctypes.data, *rest, s.ctypes.data, q.ctypes.data, c.ctypes.data, -1, 0,
                       None, None, None)  # fmt: skip
        return (s, q, c), None, None
    gw = p.rebased.shape[1]
    grams, means = np.empty((count, gw, gw), np.float32), np.empty((count, gw))
    buf = np.empty((p.starts[p.ctrl_group + 1] - p.starts[p.ctrl_group], gw), np.float32)
    for j in range(count):
        _LIB.perm_sums(1, *args, order[j].ctypes.data, *rest, s[j].ctypes.data, q[j].ctypes.data, c[j].ctypes.data,
                       p.ctrl_group, gw, p.centre.ctypes.data, buf.ctypes.data, means[j].ctypes.data)  # fmt: skip
        np.matmul(buf.T, buf, out=grams[j])
    return (s, q, c), grams, means


def _control_parts(p: Plan, order: np.ndarray) -> np.ndarray:
    """The controls' part of each cell's variance: fixed (``p.ctrl_var``, per cell) where the controls are, else per
    permutation (count x cells): the permuted controls' centred changes' sum of squares over their number squared, as
    ``_control_variance`` forms the observed controls', from their Gram matrix (``_control_grams``; _kernels.c's
    ``perm_cells`` forms the same from it)."""
    if p.ctrl_group < 0:
        return p.ctrl_var
    return _control_parts_of(p, *_control_grams(p, order))


def _control_parts_of(p: Plan, gram: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``_control_parts`` from the permuted controls' Grams and means."""
    t, b = p.col_t, p.col_b
    out = gram[:, t, t].astype(np.float64) + gram[:, b, b] - 2 * gram[:, t, b].astype(np.float64)
    out -= p.ctrl_n * (mean[:, t] - mean[:, b]) ** 2
    return np.maximum(out, 0) / (p.ctrl_n * p.ctrl_n)


def cell_stats(p: Plan, s, q, c, ctrl_var: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per permutation and cell, the estimate and its variance (count x cells, float64) from the sums: the real
    estimate's formulas (``did.point_estimates``) with the cohort's rows the permutation gave it (and the controls'
    part of the variance ``ctrl_var``, per cell or per permutation and cell: by default the fixed controls')."""
    g, ct, cb, n = p.cohort, p.col_t, p.col_b, p.n
    dm = (s[:, g, ct].astype(float) - s[:, g, cb]) / n
    ss = q[:, g, ct].astype(float) + q[:, g, cb] - 2 * p.cross * c[:, g, ct].astype(float) - n * dm * dm
    np.maximum(ss, 0, out=ss)
    att = dm - p.shift
    if p.ctrl_group >= 0:  # the permuted controls' change
        att -= (s[:, p.ctrl_group, ct].astype(float) - s[:, p.ctrl_group, cb]) / p.ctrl_n
    return att, ss / (n * n) + (p.ctrl_var if ctrl_var is None else ctrl_var)


@dataclass
class Drawn:
    """A layout's permutations: each cell's estimate under each, less its mean over them (cells x P, float32: the
    draws downstream reads, centred as a bootstrap's are), that mean (``centre``: the permuted estimates are
    ``cells + centre``) and, per family of cells, the law of the studentised maximum over them: the observed
    labelling's first, then the P permutations' (P + 1 values: exact p-values have P + 1 in the denominator)."""

    cells: np.ndarray
    centre: np.ndarray
    laws: dict[str, np.ndarray]


def _classes(fams: dict[str, np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The cells' classes by which families hold them: each cell's class (-1: in none) and, per family, its classes
    (a family's maximum is the maximum of its classes', each class's taken once)."""
    member = np.zeros(len(next(iter(fams.values()))), np.int64)
    for i, m in enumerate(fams.values()):
        member |= m.astype(np.int64) << i
    kinds, label = np.unique(member, return_inverse=True)
    label = np.where(member[...] > 0, label - int(kinds[0] == 0), -1)
    kinds = kinds[kinds > 0]
    return label.astype(np.int64), [np.flatnonzero(kinds >> i & 1) for i in range(len(fams))]


def _chunk(p: Plan, order: np.ndarray, label: np.ndarray, n_labels: int, floor: float, cells: np.ndarray,
           start: int, device_sums: TorchPermutationSums | None = None) -> np.ndarray:  # fmt: skip
    """One chunk of permutations: their estimates into ``cells[:, start:]`` and each class's maximum |t| (chunk x
    classes). ``device_sums``: the sums (and permuted controls' Grams) made by torch on the engine device."""
    top = np.zeros((len(order), n_labels))
    # permuted controls: their Gram matrices, which perm_cells reads per cell; fixed: their part of each cell
    if device_sums is not None:
        s, gram, mean = device_sums.sums(order)
    elif compiled():
        s, gram, mean = _compiled_sums(p, order)
    else:
        s, (gram, mean) = sums(p, order), (_control_grams(p, order) if p.ctrl_group >= 0 else (None, None))
    if compiled():
        att = np.empty((len(order), len(p.cohort)), np.float32)
        _LIB.perm_cells(
            len(order), len(p.cohort), len(p.base), p.y.shape[1], *(a.ctypes.data for a in s), p.cohort.ctypes.data,
            p.col_t.ctypes.data, p.col_b.ctypes.data, p.cross.ctypes.data, p.n.ctypes.data, p.shift.ctypes.data,
            p.ctrl_var.ctypes.data, None if gram is None else gram.ctypes.data,
            None if mean is None else mean.ctypes.data, 0 if gram is None else gram.shape[1], floor * floor,
            label.ctypes.data, n_labels, p.ctrl_group, p.ctrl_n, att.ctypes.data, top.ctypes.data,
        )  # fmt: skip
        cells[:, start : start + len(order)] = att.T
        return np.sqrt(top)
    att, var = cell_stats(p, *s, ctrl_var=p.ctrl_var if gram is None else _control_parts_of(p, gram, mean))
    cells[:, start : start + len(order)] = att.T
    se = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > floor, np.abs(att) / se, 0.0)
    for k in range(n_labels):
        top[:, k] = t[:, label == k].max(axis=1)
    return top


def permute(
    lay: Layout, est, masks: dict[str, np.ndarray], se: np.ndarray, *, count: int, seed: int, floor: float,
    keys: np.ndarray | None = None, n_keys: int | None = None, progress: Callable[[float], None] | None = None,
    prepared: Plan | None = None, centred: bool = False, controls: bool = False,
) -> Drawn:  # fmt: skip
    """``count`` seeded permutations of ``lay``'s cohort labels: the cells' permuted estimates and each mask's law of
    max |estimate / its standard error| over its cells with a usable ``se`` (the observed standard errors, floored:
    a cell without one is in no family). Each permutation's standard errors are its own (the estimate's formula), a
    permuted one at or below ``floor`` leaving its cell out of that permutation's maximum. ``controls``: the
    never-trained controls permuted with the treated instances (``plan``)."""
    p = prepared if prepared is not None else plan(lay, est, keys, n_keys, centred=centred, controls=controls)
    device = torch_bootstrap.permutation_device()  # the engine setting's torch device, or None: the compiled sums
    device_sums = None if device is None else TorchPermutationSums(device, p)  # the rows uploaded once
    usable = np.isfinite(se)
    fams = {name: np.asarray(m, bool) & usable for name, m in masks.items()}
    label, classes = _classes(fams)
    n_labels = int(label.max()) + 1
    observed = np.abs(est.att / np.where(usable, se, 1.0))
    top = np.zeros((count, max(n_labels, 1)))
    cells = np.empty((len(lay.cell_group), count), np.float32)
    seeds = np.random.default_rng(seed).integers(0, 2**63, count, dtype=np.int64).astype(np.uint64)
    chunks = [(start, seeds[start : start + _CHUNK]) for start in range(0, count, _CHUNK)]
    done = [0]
    slot_group = np.repeat(np.arange(len(p.starts) - 1), np.diff(p.starts))
    unchanged = np.zeros(count, bool)

    def one(item) -> None:
        start, mine = item
        order = orders(p, mine)
        top[start : start + len(order), :n_labels] = _chunk(p, order, label, n_labels, floor, cells, start,
                                                            device_sums)  # fmt: skip
        # a permutation that leaves every instance in its cohort is the observed labelling (a design with few
        # labellings draws it): its maxima are the observed ones, not their float32 recomputation
        unchanged[start : start + len(order)] = (slot_group[order] == slot_group).all(axis=1)
        done[0] += len(order)
        if progress is not None:
            progress(min(1.0, done[0] / count))

    workers = min(len(chunks), os.cpu_count() or 1)
    # the permuted controls' Gram products on one BLAS thread each: the chunks already run on every core, and
    # OpenBLAS's own threads inside each of them spun 40x the CPU on a loaded machine (benchmarks/permutation_cost.py)
    with one_blas_thread():
        if workers <= 1:
            for item in chunks:
                one(item)
        else:  # the compiled loops release the GIL: chunks on every core (each writes its own columns)
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(one, chunks))
    laws = {}
    for (name, m), mine in zip(fams.items(), classes, strict=True):
        laws[name] = np.full(count + 1, np.nan)
        if m.any():  # the observed labelling's maximum first, then the permutations'
            laws[name][0] = observed[m].max()
            laws[name][1:] = np.where(unchanged, laws[name][0], top[:, mine].max(axis=1))
    centre = cells.mean(axis=1, dtype=np.float64)
    cells -= centre.astype(np.float32)[:, None]
    return Drawn(cells=cells, centre=centre, laws=laws)
