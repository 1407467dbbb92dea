"""ATT(g,c) point estimates, influence-function standard errors and the multiplier bootstrap, without ever forming
the N x cells influence matrix.

For a cell with cohort k, checkpoint t and base b, the influence function of unit i (scaled as in R `did`) is
    n * [ 1{i in k} (dY_i - dM_k) / n_k  -  1{i in C} (dY_i - dmu_C) / n_C ],    dY_i = y_it - y_ib,
so a multiplier-bootstrap draw (1/n) sum_i v_i psi_i is a difference of multiplier-weighted sums of cohort-centred
outcomes. With R_g = sum_{i in g} v_i y_i (one matrix product per group per chunk of draws) and W_g = sum v_i, every
cell's draw is a handful of gathers from R and W.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from memtui.engine.layout import Layout

_SE_FLOOR = np.sqrt(np.finfo(float).eps) * 10  # R `did`: bootstrap se below this is treated as degenerate
_IQR_NORMAL = 1.3489795003921634  # norm.ppf(0.75) - norm.ppf(0.25)


@dataclass
class CellEstimates:
    att: np.ndarray
    se: np.ndarray  # analytic (influence function)
    n_treated: np.ndarray
    n_control: np.ndarray
    dmu: np.ndarray  # control change per cell (needed by the bootstrap)
    dm: np.ndarray  # treated change per cell


def _prefix_sums(arr: np.ndarray, upto: int) -> np.ndarray:
    """out[p] = sum of the first p entries along axis 0, for p = 0..upto."""
    out = np.zeros((upto + 1, *arr.shape[1:]), dtype=arr.dtype)
    np.cumsum(arr[:upto], axis=0, out=out[1:])
    return out


def point_estimates(lay: Layout) -> CellEstimates:
    g, t, b, p, own = lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own
    m, n = lay.means, lay.group_n.astype(float)
    upto = int(p.max()) if len(p) else 1
    cum_n = _prefix_sums(n, upto)
    cum_nm = _prefix_sums(n[:, None] * m, upto)

    n_t = n[g]
    n_c = cum_n[p] - own * n_t
    dm = m[g, t] - m[g, b]
    mu_t = (cum_nm[p, t] - own * n_t * m[g, t]) / n_c
    mu_b = (cum_nm[p, b] - own * n_t * m[g, b]) / n_c
    dmu = mu_t - mu_b

    # Sums of squared centred changes: per group from Z'Z (only the columns cells use), plus between-group spread.
    z = lay.y - np.repeat(m, lay.group_n, axis=0)
    q = np.stack([z[lay.rows(k)].T @ z[lay.rows(k)] for k in range(lay.n_groups)])  # (G, T+1, T+1)
    ss_group = q[:, t, t] + q[:, b, b] - 2 * q[:, t, b]  # (G, cells)
    ss_treated = ss_group[g, np.arange(len(g))]
    dm_all = m[:, t] - m[:, b]  # (G, cells)
    in_ctrl = np.arange(lay.n_groups)[:, None] < p[None, :]
    in_ctrl[g[own], np.flatnonzero(own)] = False
    ss_control = (in_ctrl * (ss_group + n[:, None] * (dm_all - dmu) ** 2)).sum(axis=0)
    se = np.sqrt(ss_treated / n_t**2 + ss_control / n_c**2)
    return CellEstimates(
        att=dm - dmu, se=se, n_treated=n_t.astype(np.int64), n_control=n_c.astype(np.int64), dmu=dmu, dm=dm
    )


def multipliers(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    if kind == "rademacher":
        bits = np.unpackbits(np.frombuffer(rng.bytes((shape[0] * shape[1] + 7) // 8), dtype=np.uint8))
        return bits[: shape[0] * shape[1]].reshape(shape) * 2.0 - 1.0
    if kind == "mammen":
        s5 = np.sqrt(5.0)
        low = rng.random(shape) < (s5 + 1) / (2 * s5)
        return np.where(low, (1 - s5) / 2, (1 + s5) / 2)
    raise ValueError(f"unknown multiplier {kind!r}")


@dataclass
class BootstrapDraws:
    cells: np.ndarray  # (cells, B): draws of ATT(g,c) - its estimate
    group_w: np.ndarray  # (G, B): sum of multipliers per group (for the weight influence of aggregates)


def bootstrap(
    lay: Layout,
    est: CellEstimates,
    *,
    draws: int,
    seed: int,
    multiplier: str = "rademacher",
    chunk: int = 128,
    progress: Callable[[float], None] | None = None,
) -> BootstrapDraws:
    """B multiplier-bootstrap draws of every cell: about B*N*T multiply-adds, chunked over draws to bound memory."""
    g, t, b, p, own = lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own
    n = lay.group_n.astype(float)
    upto = int(p.max()) if len(p) else 1
    n_c = est.n_control.astype(float)
    rng = np.random.default_rng(seed)
    out = np.empty((len(g), draws))
    group_w = np.empty((lay.n_groups, draws))
    y = lay.y
    for start in range(0, draws, chunk):
        bc = min(chunk, draws - start)
        v = multipliers(rng, (lay.n_units, bc), multiplier)
        r = np.empty((lay.n_groups, y.shape[1], bc))
        for k in range(lay.n_groups):
            rows = lay.rows(k)
            np.matmul(y[rows].T, v[rows], out=r[k])
        w = np.add.reduceat(v, lay.group_start[:-1], axis=0)  # (G, bc)
        group_w[:, start : start + bc] = w
        cum_r = _prefix_sums(r, upto)
        cum_w = _prefix_sums(w, upto)
        own_col = own[:, None]
        r_gt, r_gb = r[g, t], r[g, b]  # (cells, bc)
        treated = (r_gt - r_gb - w[g] * est.dm[:, None]) / n[g][:, None]
        ctrl_sum = cum_r[p, t] - cum_r[p, b] - own_col * (r_gt - r_gb)
        ctrl_w = cum_w[p] - own_col * w[g]
        control = (ctrl_sum - ctrl_w * est.dmu[:, None]) / n_c[:, None]
        out[:, start : start + bc] = treated - control
        if progress:
            progress((start + bc) / draws)
    return BootstrapDraws(cells=out, group_w=group_w)


def bootstrap_se(draws: np.ndarray) -> np.ndarray:
    """Robust bootstrap standard error per row, as R `did`: IQR of the draws over the normal IQR (type-1 quantiles)."""
    nb = draws.shape[1]
    k25, k75 = int(np.ceil(nb * 0.25)) - 1, int(np.ceil(nb * 0.75)) - 1
    part = np.partition(draws, [k25, k75], axis=1)
    se = (part[:, k75] - part[:, k25]) / _IQR_NORMAL
    se[~(se > _SE_FLOOR)] = np.nan
    return se


def sup_t(draws: np.ndarray, se: np.ndarray) -> np.ndarray:
    """Per draw, the largest |draw / se| over the rows with a usable se (the sup-t statistic's bootstrap law)."""
    ok = np.isfinite(se)
    if not ok.any():
        return np.full(draws.shape[1], np.nan)
    return np.max(np.abs(draws[ok]) / se[ok, None], axis=0)


def critical_value(tmax: np.ndarray, alpha: float) -> float:
    """(1 - alpha) quantile of the sup-t draws (type-1, as R `did`)."""
    if not np.isfinite(tmax).any():
        return float("nan")
    return float(np.quantile(tmax, 1 - alpha, method="inverted_cdf"))
