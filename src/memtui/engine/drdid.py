"""Doubly robust difference-in-differences with covariates: ATT(g,c) of Sant'Anna & Zhao (2020) per cell, as R `did`'s
``att_gt(xformla = ..., est_method = "dr")`` computes it with ``DRDID::drdid_panel`` (the "traditional" DR estimator),
with its influence functions, analytic standard errors and multiplier bootstrap.

For a cell with cohort g, checkpoint t, base b and control set C (n = n_g + n_C instances, dY = y_t - y_b):
  * the propensity score p(x) of being in g rather than C: a logit of 1{g} on (1, x) by Newton / IRLS (glm's fit),
    clipped at 1 - 1e-6; controls with p >= 0.995 get no weight (DRDID's trimming);
  * the outcome regression: least squares of dY on (1, x) over the controls, beta;
  * ATT = mean_g(dY - x'beta) - sum_C w (dY - x'beta) / sum_C w,   w = p / (1 - p),
with the influence function of DRDID::drdid_panel (estimation effects of beta and of the logit included).

Covariates are per instance and time-invariant, so the logit depends on the cell only through its treated and
control *rows*, and the regression's design is the same for every cell with the same controls: cells are grouped by
(cohort, control set) -- one group per cohort with never-treated controls -- and each group costs one logit fit and
one least-squares factorisation applied to all its cells at once (a matrix right-hand side).

Influence functions are kept per group as matrices over its row slices, scaled so that a bootstrap draw of a cell is
sum_i v_i phi_i and its analytic variance sum_i phi_i^2 (R `did`'s n/n1 rescaling of DRDID's influence function,
divided by n): the bootstrap is one matrix product per distinct row slice per chunk of draws. Without covariates
(x = 1) the estimator is the difference of means of ``did.point_estimates`` and phi its influence function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine import did
from memtui.engine.layout import Layout
from memtui.engine.multipliers import JointMultipliers

PS_CLIP = 1 - 1e-6  # DRDID: pmin(ps.fit, 1 - 1e-6), "avoid divide by zero"
TRIM_LEVEL = 0.995  # DRDID's trim.level: controls with a propensity score at or above it get no weight
OVERLAP_LIMIT = 0.999  # R did: a cell whose logit fits any instance at or above this violates overlap (left out)
_MAX_ITER = 50


@dataclass
class Design:
    """The covariates as R's ``model.matrix(~ a + b)`` builds them: an intercept, numeric columns as they are, each
    categorical one as dummies of its levels but the first; ``keep`` the instances with every covariate known."""

    matrix: np.ndarray  # (instances kept, k), intercept first
    names: list[str]
    keep: np.ndarray  # (instances,) bool
    notes: list[str] = field(default_factory=list)


def _missing(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "fiub":
        return ~np.isfinite(values.astype(float))
    return np.array([v is None or v == "" or (isinstance(v, float) and v != v) for v in values], dtype=bool)


def design_matrix(covariates: dict[str, np.ndarray], names: Sequence[str]) -> Design:
    """The design matrix of the covariates ``names`` (refused, one line, where the panel lacks one); instances with
    an unknown or non-finite covariate are left out, as R `did` drops incomplete rows (noted)."""
    absent = [name for name in names if name not in covariates]
    if absent:
        have = ", ".join(sorted(covariates)) or "none"
        raise MemtuiError(
            f"the panel has no covariate {', '.join(absent)} (it has: {have}); `memtui covariates PANEL` computes them."
        )
    if len(set(names)) != len(names):
        raise MemtuiError(f"covariates named twice: {', '.join(names)}.")
    n = len(next(iter(covariates.values()))) if covariates else 0
    keep = np.ones(n, dtype=bool)
    for name in names:
        keep &= ~_missing(np.asarray(covariates[name]))
    notes = []
    if not keep.all():
        notes.append(
            f"left out {int((~keep).sum())} instances with an unknown covariate ({', '.join(names)}), "
            "as R did drops incomplete rows"
        )
    columns, labels = [np.ones(int(keep.sum()))], ["(Intercept)"]
    for name in names:
        values = np.asarray(covariates[name])[keep]
        _refuse_constant(name, values)
        if values.dtype.kind in "fiub":
            columns.append(values.astype(float))
            labels.append(name)
            continue
        levels = sorted({str(v) for v in values})  # levels present among the kept instances, as R drops empty ones
        for level in levels[1:]:
            columns.append((values.astype(str) == level).astype(float))
            labels.append(f"{name}{level}")
    return Design(matrix=np.column_stack(columns), names=labels, keep=keep, notes=notes)


def _refuse_constant(name: str, values: np.ndarray) -> None:
    """A covariate with one value among the instances used is the intercept again: the design is singular in every
    cohort. Named here, before any cohort's fit would call the controls collinear without saying which covariate."""
    if not len(values):
        return
    numeric = values.dtype.kind in "fiub"
    distinct = np.unique(values.astype(float)) if numeric else np.unique(values.astype(str))
    if len(distinct) == 1:
        shown = f"{distinct[0]:g}" if numeric else f"'{clean(distinct[0], 40)}'"
        raise MemtuiError(
            f"covariate {clean(name, 40)} is constant ({shown} for all {len(values)} instances used): it cannot "
            "adjust for anything; drop it."
        )


@dataclass
class Slab:
    """The influence functions of some cells on one contiguous slice of layout rows: ``phi[j, i]`` for cell
    ``cells[j]`` and row ``rows.start + i``."""

    rows: slice
    cells: np.ndarray
    phi: np.ndarray  # (len(cells), rows), float64


@dataclass
class DrEstimates(did.CellEstimates):
    """``did.CellEstimates`` (dm: the cohort's regression-adjusted change, dmu: the controls' weighted one) with the
    influence functions the bootstrap and the aggregates' standard errors need, and the fits' diagnostics."""

    slabs: list[Slab] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _logit(x: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, bool]:
    """Maximum-likelihood logit coefficients by IRLS from glm's start (mu = (d + 1/2) / 2), iterated to full
    convergence (R's glm and fastglm stop at a relative deviance change of 1e-8, within that of this fit)."""
    eta = np.log((d + 0.5) / (1.5 - d))
    gamma = np.zeros(x.shape[1])
    for it in range(_MAX_ITER):
        mu = 1 / (1 + np.exp(-eta))
        w = np.maximum(mu * (1 - mu), 1e-300)
        z = eta + (d - mu) / w
        sw = np.sqrt(w)
        new = np.linalg.lstsq(x * sw[:, None], z * sw, rcond=None)[0]
        step = np.max(np.abs(new - gamma))
        gamma, eta = new, x @ new
        if it and step <= 1e-13 * (1 + np.max(np.abs(gamma))):
            return gamma, True
    return gamma, False


def _propensity(x: np.ndarray, n1: int, cohort: str) -> tuple[np.ndarray, bool]:
    """The propensity score of the cohort's n1 instances (the first rows of ``x``) against the controls, refused
    where the covariates separate them (R did leaves such cells out; memtui asks for other covariates)."""
    d = np.zeros(len(x))
    d[:n1] = 1
    gamma, converged = _logit(x, d)
    ps = 1 / (1 + np.exp(-(x @ gamma)))
    if ps.max() >= OVERLAP_LIMIT:
        raise MemtuiError(
            f"the covariates predict membership of cohort {cohort} almost perfectly (a propensity score of "
            f"{ps.max():.4f}, at or above {OVERLAP_LIMIT}): no overlap with the controls, as R did refuses; drop or "
            "coarsen a covariate."
        )
    return np.minimum(ps, PS_CLIP), converged


def _inverse(a: np.ndarray, what: str) -> np.ndarray:
    if np.linalg.cond(a) * np.finfo(float).eps >= 1:  # R: rcond(crossprod(X)) < .Machine$double.eps
        raise MemtuiError(
            f"the covariates are collinear {what} (the design matrix is singular, as R did refuses): drop a covariate "
            "or a level that does not occur there."
        )
    return np.linalg.inv(a)


def drdid_panel(
    xt: np.ndarray, xc: np.ndarray, dyt: np.ndarray, dyc: np.ndarray, cohort: str = "?"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """``DRDID::drdid_panel`` for m outcomes at once (columns of ``dyt`` (n1, m) and ``dyc`` (n0, m)) sharing the
    treated rows ``xt`` and control rows ``xc`` of the design. Returns ATT (m,), the influence functions on the
    treated (n1, m) and control (n0, m) rows in DRDID's scale (its se is sqrt(mean(psi^2) / n)), the treated and
    control components (eta_treat, eta_cont) and whether the logit converged."""
    n1, n0 = len(xt), len(xc)
    n = n1 + n0
    x = np.vstack([xt, xc])
    ps, converged = _propensity(x, n1, cohort)
    ps_c = ps[n1:]
    w_c = np.where(ps_c < TRIM_LEVEL, ps_c / (1 - ps_c), 0.0)
    xtx_inv = _inverse(xc.T @ xc, f"among the controls of cohort {cohort}")
    beta = xtx_inv @ (xc.T @ dyc)  # (k, m): one factorisation, every outcome
    et, ec = dyt - xt @ beta, dyc - xc @ beta
    sw = w_c.sum()
    eta_t = et.sum(axis=0) / n1
    eta_c = (w_c @ ec) / sw
    # asymptotic linear representations: OLS (controls only) and the logit's coefficients
    xa = xc @ (n * xtx_inv)  # (n0, k): x_i' (X_C'X_C / n)^-1
    hessian = n * _inverse(x.T @ ((ps * (1 - ps))[:, None] * x), f"in the propensity score of cohort {cohort}")
    d = np.zeros(n)
    d[:n1] = 1
    xh = ((d - ps)[:, None] * x) @ hessian  # (n, k)
    rc = ec - eta_c
    m1 = xt.sum(axis=0) / n
    m2 = xc.T @ (w_c[:, None] * rc) / n  # (k, m)
    m3 = (w_c @ xc) / n
    mean_wt, mean_wc = n1 / n, sw / n
    psi_t = (et - eta_t) / mean_wt - (xh[:n1] @ m2) / mean_wc
    psi_c = -ec * (xa @ m1)[:, None] / mean_wt - (w_c[:, None] * rc + xh[n1:] @ m2 - ec * (xa @ m3)[:, None]) / mean_wc
    return eta_t - eta_c, psi_t, psi_c, eta_t, eta_c, converged


def _control_slices(lay: Layout, g: int, prefix: int, own: bool) -> list[slice]:
    """Layout rows of a cell's control set: the first ``prefix`` groups, less the cohort's own group if inside."""
    end = int(lay.group_start[prefix])
    if not own:
        return [slice(0, end)]
    r = lay.rows(g)
    return [s for s in (slice(0, int(r.start)), slice(int(r.stop), end)) if s.stop > s.start]


def point_estimates(lay: Layout, x: np.ndarray) -> DrEstimates:
    """ATT(g,c), analytic standard errors and influence functions of every cell of ``lay`` (a DiD layout) with the
    design ``x`` (layout rows, intercept first): R did's att_gt with est_method = "dr", cell by cell."""
    x = _standardised(x)
    n_cells = len(lay.cell_group)
    att, se2 = np.empty(n_cells), np.zeros(n_cells)
    dm, dmu = np.empty(n_cells), np.empty(n_cells)
    n_c = np.empty(n_cells, dtype=np.int64)
    slabs: list[Slab] = []
    keys = np.stack([lay.cell_group, lay.cell_prefix, lay.cell_own.astype(np.int64)], axis=1)
    unique, which = np.unique(keys, axis=0, return_inverse=True)
    _check_memory(lay, unique, np.bincount(which.ravel(), minlength=len(unique)))
    unconverged = []
    for key, (g, prefix, own) in enumerate(unique):
        cells = np.flatnonzero(which.ravel() == key)
        treated, controls = lay.rows(g), _control_slices(lay, g, prefix, bool(own))
        yc = np.vstack([lay.y[s] for s in controls])
        t, b = lay.cell_t[cells], lay.cell_b[cells]
        yt = lay.y[treated]
        cohort = str(lay.steps[lay.group_index[g]])
        a, psi_t, psi_c, eta_t, eta_c, ok = drdid_panel(
            x[treated], np.vstack([x[s] for s in controls]), yt[:, t] - yt[:, b], yc[:, t] - yc[:, b], cohort
        )
        if not ok:
            unconverged.append(cohort)
        n = len(yt) + len(yc)
        att[cells], dm[cells], dmu[cells], n_c[cells] = a, eta_t, eta_c, len(yc)
        start = 0
        for s, psi in [(treated, psi_t)] + [(s, None) for s in controls]:
            if psi is None:
                size = s.stop - s.start
                psi, start = psi_c[start : start + size], start + size
            phi = np.ascontiguousarray(psi.T) / n  # draw = sum_i v_i phi_i: R did's (N / n) psi over N
            se2[cells] += np.einsum("ij,ij->i", phi, phi)
            slabs.append(Slab(rows=s, cells=cells, phi=phi))
    notes = []
    if unconverged:
        notes.append(f"the propensity score did not converge for cohort(s) {', '.join(unconverged)} (as glm warns)")
    return DrEstimates(
        att=att, se=np.sqrt(se2), n_treated=lay.group_n[lay.cell_group].astype(np.int64), n_control=n_c, dmu=dmu,
        dm=dm, slabs=_merged(slabs), notes=notes,
    )  # fmt: skip


def _check_memory(lay: Layout, keys: np.ndarray, cells_per_key: np.ndarray) -> None:
    """Refuse, before computing them, influence functions that would not fit in memory: float64 and the bootstrap's
    float32 copy, one entry per cell per instance of its cohort and control set."""
    rows = lay.group_n[keys[:, 0]] + lay.group_start[keys[:, 1]] - keys[:, 2] * lay.group_n[keys[:, 0]]
    need = 12 * int(rows @ cells_per_key)
    have = did.available_memory()
    if have is not None and need > have:
        raise MemtuiError(
            f"doubly robust DiD with covariates needs about {need / 2**30:.1f} GiB for its influence functions and "
            f"{have / 2**30:.1f} GiB are free: estimate fewer checkpoints or cohorts, or without covariates."
        )


def _standardised(x: np.ndarray) -> np.ndarray:
    """``x`` with each non-intercept column centred and scaled: the fits are invariant to it (an intercept absorbs
    the shift, the coefficients the scale), and the logit and least squares are better conditioned."""
    x = np.array(x, dtype=float)
    centre = x[:, 1:].mean(axis=0)
    spread = x[:, 1:].std(axis=0)
    x[:, 1:] = (x[:, 1:] - centre) / np.where(spread > 0, spread, 1)
    return x


def _merged(slabs: list[Slab]) -> list[Slab]:
    """Slabs over the same rows stacked into one (one matrix product per distinct slice in the bootstrap: with
    never-treated controls every cohort's cells share the control slice)."""
    by_rows: dict[tuple[int, int], list[Slab]] = {}
    for s in slabs:
        by_rows.setdefault((s.rows.start, s.rows.stop), []).append(s)
    return [
        Slab(rows=group[0].rows, cells=np.concatenate([s.cells for s in group]), phi=np.vstack([s.phi for s in group]))
        for group in by_rows.values()
    ]


def bootstrap(
    lay: Layout,
    est: DrEstimates,
    *,
    draws: int,
    seed: int,
    multiplier: str = "rademacher",
    chunk: int = 128,
    progress: Callable[[float], None] | None = None,
    source: JointMultipliers | None = None,
) -> did.BootstrapDraws:
    """B multiplier-bootstrap draws of every cell, sum_i v_i phi_i, with the multipliers ``did.bootstrap`` draws for
    the same layout and seed (so, without covariates, its draws up to float32 rounding), chunked over draws;
    ``source``: multipliers keyed by panel instance or cluster, as ``did.bootstrap_shared`` takes them."""
    f32 = np.float32
    rng = np.random.default_rng(seed)
    out = np.empty((len(est.att), draws), dtype=f32)
    group_w = np.empty((lay.n_groups, draws))
    phis = [s.phi.astype(f32) for s in est.slabs]
    for start in range(0, draws, chunk):
        bc = min(chunk, draws - start)
        if source is None:
            v = did.multipliers(rng, (lay.n_units, bc), multiplier, f32)
        else:
            v = source.take(did.multipliers(rng, (source.n_keys, bc), multiplier, f32), lay.source_rows)
        group_w[:, start : start + bc] = np.add.reduceat(v, lay.group_start[:-1], axis=0)
        acc = np.zeros((len(est.att), bc), dtype=f32)
        for slab, phi in zip(est.slabs, phis, strict=True):
            acc[slab.cells] += phi @ v[slab.rows]
        out[:, start : start + bc] = acc
        if progress:
            progress((start + bc) / draws)
    return did.BootstrapDraws(cells=out, group_w=group_w)


def analytic_se(lay: Layout, est: DrEstimates, members: list[np.ndarray]) -> np.ndarray:
    """Influence-function standard error of each aggregate (``summaries``' weights, their estimation included): the
    exact variance of the aggregate's bootstrap draw given the data, sum_i (sum_k w_k phi_ik + weight term_i)^2."""
    from memtui.engine.summaries import _weights

    _, w_vals, u_vals, pg = _weights(lay, est.att, members)
    weights = np.zeros((len(members), len(est.att)))
    u = np.zeros((len(members), lay.n_groups))
    for a, cells in enumerate(members):
        weights[a, cells] = w_vals[a]
        np.add.at(u[a], lay.cell_group[cells], u_vals[a])
    # weight term: (1/N) sum_k u_k (1{G_i = g_k} - P(G = g_k)), per instance through its group
    coef = np.repeat((u - (u @ pg)[:, None]) / lay.n_units, lay.group_n, axis=1)  # (aggregates, N)
    for slab in est.slabs:
        coef[:, slab.rows] += weights[:, slab.cells] @ slab.phi
    return np.sqrt(np.einsum("ij,ij->i", coef, coef))
