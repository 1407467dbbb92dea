"""Aggregates of ATT(g,c) cells (persistent by event time, overall) with their bootstrap draws.

Weights follow R `did`'s aggte: a cell of cohort g weighs P(G = g) over the cells aggregated, and the draw includes
the influence of estimating those weights. With U_g = (1/n) sum_i v_i (1{G_i = g} - P(G = g)), the weight term of an
aggregate theta = sum_k w_k att_k reduces to (1/S) sum_k (att_k - theta) U_{g_k}, S = sum_k P(G = g_k).
"""

from __future__ import annotations

import numpy as np

from memtui.engine.layout import Layout


def aggregate(
    lay: Layout, att: np.ndarray, draws: np.ndarray | None, group_w: np.ndarray | None, members: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Point estimates and draws (aggs x B) of weighted averages of the cells listed in ``members``."""
    n_units = lay.n_units
    pg = lay.group_n / n_units
    cell_pg = pg[lay.cell_group]
    rows, cols, w_vals, u_vals = [], [], [], []
    theta = np.empty(len(members))
    for a, cells in enumerate(members):
        s = cell_pg[cells].sum()
        w = cell_pg[cells] / s
        theta[a] = w @ att[cells]
        rows.append(np.full(len(cells), a))
        cols.append(cells)
        w_vals.append(w)
        u_vals.append((att[cells] - theta[a]) / s)
    if draws is None:
        return theta, None
    from scipy import sparse  # imported here: it costs ~0.1 s of every `memtui` start

    rows, cols = np.concatenate(rows), np.concatenate(cols)
    shape = (len(members), len(att))
    weights = sparse.csr_array((np.concatenate(w_vals), (rows, cols)), shape=shape)
    by_group = sparse.csr_array(
        (np.concatenate(u_vals), (rows, lay.cell_group[cols])), shape=(len(members), lay.n_groups)
    )
    u = (group_w - pg[:, None] * group_w.sum(axis=0)) / n_units  # (G, B)
    return theta, weights @ draws + by_group @ u
