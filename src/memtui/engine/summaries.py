"""Aggregates of ATT(g,c) cells (persistent by event time, overall) with their bootstrap draws and analytic standard
errors.

Weights follow R `did`'s aggte: a cell of cohort g weighs P(G = g) over the cells aggregated, and the draw includes
the influence of estimating those weights. With U_g = (1/n) sum_i v_i (1{G_i = g} - P(G = g)), the weight term of an
aggregate theta = sum_k w_k att_k reduces to (1/S) sum_k (att_k - theta) U_{g_k}, S = sum_k P(G = g_k).

A bootstrap draw of an aggregate is linear in the multipliers, sum_i v_i c_i, so its analytic variance (the variance of
the influence function over n^2, as for a cell) is sum_i c_i^2. The coefficient c_i of an instance depends on the
instance only through its outcomes and its group: c_i = y_i . A[G_i] + B[G_i] with a (groups x columns) matrix A and a
vector B per aggregate, so the sum costs one pass over the outcomes per block of aggregates, never an instance x cells
matrix.
"""

from __future__ import annotations

import numpy as np

from memtui.engine.blas import over_cores
from memtui.engine.did import CellEstimates
from memtui.engine.layout import Layout

_BLOCK_ELEMENTS = 1 << 22  # aggregates x groups x columns held at once while forming A: ~32 MiB


def _weights(lay: Layout, att: np.ndarray, members: list[np.ndarray]):
    n_units = lay.n_units
    pg = lay.group_n / n_units
    cell_pg = pg[lay.cell_group]
    theta = np.empty(len(members))
    w_vals, u_vals = [], []
    for a, cells in enumerate(members):
        s = cell_pg[cells].sum()
        w = cell_pg[cells] / s
        theta[a] = w @ att[cells]
        w_vals.append(w)
        u_vals.append((att[cells] - theta[a]) / s)
    return theta, w_vals, u_vals, pg


def aggregate(
    lay: Layout,
    att: np.ndarray,
    draws: np.ndarray | None,
    group_w: np.ndarray | None,
    members: list[np.ndarray],
    weighted: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Point estimates and draws (aggs x B) of weighted averages of the cells listed in ``members``. ``weighted``:
    the float32 product of the cells' weights and draws, where the bootstrap's compiled loop made it already
    (``engine.bands``; the same sums in the same order, bit for bit)."""
    theta, w_vals, u_vals, pg = _weights(lay, att, members)
    if draws is None:
        return theta, None
    from scipy import sparse  # imported here: it costs ~0.1 s of every `memtui` start

    rows = np.concatenate([np.full(len(cells), a) for a, cells in enumerate(members)])
    cols = np.concatenate(members)
    shape = (len(members), len(att))
    # in the draws' own float32: scipy would otherwise upcast every slab of cell draws to float64 (a copy per slab);
    # the draws carry Monte-Carlo error of ~1/sqrt(B), far above float32 rounding of a weighted sum
    weights = sparse.csr_array((np.concatenate(w_vals).astype(draws.dtype), (rows, cols)), shape=shape)
    by_group = sparse.csr_array(
        (np.concatenate(u_vals), (rows, lay.cell_group[cols])), shape=(len(members), lay.n_groups)
    )
    # one product over every draw: the weights are in the draws' dtype, so scipy reads the (contiguous) draws in place;
    # a slab of columns would be a strided view, which scipy copies whole (each output element is the same sum either
    # way: the products are column by column)
    w = group_w
    u = (w - pg[:, None] * w.sum(axis=0)) / lay.n_units  # (G, B)
    if weighted is None:
        weighted = weights @ np.ascontiguousarray(draws)
    out = weighted + by_group @ u
    return theta, out


def analytic_se(
    lay: Layout, est: CellEstimates, members: list[np.ndarray], clusters: np.ndarray | None = None, weights=None
) -> np.ndarray:
    """Influence-function standard error of each aggregate in ``members`` (weight estimation included), scaled as the
    cells' analytic ones: the exact variance of the aggregate's multiplier-bootstrap draw given the data. With
    ``clusters`` (per layout row; each cluster inside one group), the influence is summed within clusters first: the
    exact variance of the draw with one multiplier per cluster. ``weights``: ``_weights`` of these members, where the
    caller has them already."""
    _, w_vals, u_vals, pg = weights or _weights(lay, est.att, members)
    n_groups, width = lay.n_groups, lay.y.shape[1]
    g_all, t_all, b_all, p_all, own_all = lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own
    n_t_all = lay.group_n[g_all].astype(float)
    n_c_all = est.n_control.astype(float)
    upto = int(p_all.max()) if len(p_all) else 0  # control sets are prefixes of at most `upto` groups
    within = None if clusters is None else [_runs(clusters[lay.rows(k)]) for k in range(n_groups)]
    block = max(1, _BLOCK_ELEMENTS // (n_groups * width))
    out = np.empty(len(members))
    for start in range(0, len(members), block):
        part = range(start, min(start + block, len(members)))
        a = np.repeat(np.arange(len(part)), [len(members[k]) for k in part])
        cells = np.concatenate([members[k] for k in part])
        w = np.concatenate([w_vals[k] for k in part])
        u = np.concatenate([u_vals[k] for k in part])
        g, t, b, p, own = g_all[cells], t_all[cells], b_all[cells], p_all[cells], own_all[cells]
        n_c = n_c_all[cells]
        wt, wc = w / n_t_all[cells], np.divide(w, n_c, out=np.zeros_like(w), where=n_c > 0)  # 0: no control set
        coef = np.zeros((len(part), n_groups, width))
        const = np.zeros((len(part), n_groups))
        # treated: (1/n_g) sum_{i in g} v_i (y_it - y_ib - dm)
        _add_at(coef, (a, g, t), wt)
        _add_at(coef, (a, g, b), -wt)
        _add_at(const, (a, g), -wt * est.dm[cells])
        # controls, the first p groups: accumulated at p, then summed over every prefix that covers a group. Only the
        # first `upto` groups are ever controls (one, the never-treated, by default): the sums stop there, and add to
        # the other groups nothing but zeros, which the sums over all groups added before (bit for bit the same)
        at_p = np.zeros((len(part), upto + 1, width))
        _add_at(at_p, (a, p, t), -wc)
        _add_at(at_p, (a, p, b), wc)
        coef[:, :upto] += np.cumsum(at_p[:, ::-1], axis=1)[:, ::-1][:, 1:]
        c_at_p = np.zeros((len(part), upto + 1))
        _add_at(c_at_p, (a, p), wc * est.dmu[cells])
        const[:, :upto] += np.cumsum(c_at_p[:, ::-1], axis=1)[:, ::-1][:, 1:]
        if own.any():  # the cell's own group sits inside the prefix: take it back out
            ao, go, wo = a[own], g[own], wc[own]
            _add_at(coef, (ao, go, t[own]), wo)
            _add_at(coef, (ao, go, b[own]), -wo)
            _add_at(const, (ao, go), -wo * est.dmu[cells][own])
        # weights: (1/n) sum_k u_k (1{G_i = g_k} - P(G = g_k))
        _add_at(const, (a, g), u / lay.n_units)
        const -= np.bincount(a, weights=u * pg[g], minlength=len(part))[:, None] / lay.n_units
        out[start : start + len(part)] = np.sqrt(_squared_influence(lay, coef, const, within))
    return out


def _squared_influence(lay: Layout, coef: np.ndarray, const: np.ndarray, within: list | None) -> np.ndarray:
    """Per aggregate of a block, the sum over instances (or clusters: ``within``, per group) of its squared influence
    sum_col coef y + const, group by group (large layouts' groups on every core, BLAS on one thread), the groups'
    sums added in their order whichever thread made each."""
    sums = np.empty((lay.n_groups, coef.shape[0]))

    def groups(ks: list[int]) -> None:
        for k in ks:
            c = lay.y[lay.rows(k)] @ coef[:, k, :].T + const[:, k]  # (n_k, block)
            if within is not None:
                order, starts = within[k]
                c = np.add.reduceat(c[order], starts, axis=0)
            sums[k] = np.einsum("ij,ij->j", c, c)

    over_cores(groups, list(range(lay.n_groups)), lay.y.size)
    total = np.zeros(coef.shape[0])
    for k in range(lay.n_groups):
        total += sums[k]
    return total


def _add_at(arr: np.ndarray, index: tuple[np.ndarray, ...], values: np.ndarray) -> None:
    """``np.add.at(arr, index, values)`` through the flat index: the same additions in the same order (so the same
    sums, bit for bit), by numpy's fast path for one integer index (several times faster than a tuple of indices)."""
    if not arr.flags.c_contiguous:  # reshape would copy, and the sums would be lost
        raise ValueError("_add_at needs a contiguous array")
    np.add.at(arr.reshape(-1), np.ravel_multi_index(index, arr.shape), values)


def _runs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order that puts equal ``codes`` together and where each run starts (for ``np.add.reduceat``)."""
    order = np.argsort(codes, kind="stable")
    return order, np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
