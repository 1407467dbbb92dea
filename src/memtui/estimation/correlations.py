"""Correlations between the models' profiles of a suite (``correlations``): the raw Pearson and Spearman r of the
estimated profiles with intervals from the joint bootstrap draws, and the Pearson correlation of the models' true
profiles, corrected for the estimates' noise, with its generalised-pivot interval (``_corrected_pearson``;
docs/methods.md, "Correlations of true profiles").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine import did
from memtui.engine.blas import one_blas_thread
from memtui.estimation.results import EstimateResult
from memtui.estimation.suite import SuiteResult, joint_draws, prepared_jobs, threads

__all__ = ["CORRELATION_SCOPES", "Correlations", "correlations"]

CORRELATION_SCOPES = ("post", "profile", "instantaneous", "residual")


@dataclass
class Correlations:
    """Correlations between the models' profiles over their common cells, with bootstrap intervals.

    ``pearson``/``spearman`` are models x models matrices of the **raw** correlation of the estimated profiles: each
    estimate carries its estimation noise, so r is attenuated towards 0 (or, where the models' noise is correlated
    through the shared instances, pulled towards that correlation); ``*_low``/``*_high`` its 1 - alpha bootstrap
    interval: the percentiles of the same correlation over the joint bootstrap draws (each model's profile plus its
    draw, every model with the same multipliers), re-centred on the point estimate on Fisher's z scale (``_interval``
    says why). That interval is about the noisy r (it covers E[r]), not about the models' true profiles.

    ``pearson_corrected`` estimates the Pearson correlation of the models' **true** profiles over the same cells: the
    cells' covariance minus the estimation noise's covariance that the joint draws measure (``_corrected_pearson``),
    with a bootstrap interval ``pearson_corrected_low``/``_high`` (NaN where these data do not determine it:
    ``undetermined``); ``pearson_clipped`` marks the pairs whose corrected value fell outside [-1, 1] and is shown at
    the bound. Spearman has no corrected value (only the raw one).

    NaN where there is no interval or corrected value (no draws, or models whose estimates use different instances).
    ``n_cells``: the cells correlated."""

    names: list[str]
    metric: str
    scope: str
    pearson: np.ndarray
    spearman: np.ndarray
    pearson_low: np.ndarray
    pearson_high: np.ndarray
    spearman_low: np.ndarray
    spearman_high: np.ndarray
    n_cells: int
    alpha: float = 0.05
    draws: int = 0
    notes: list[str] = field(default_factory=list)
    pearson_corrected: np.ndarray | None = None
    pearson_corrected_low: np.ndarray | None = None
    pearson_corrected_high: np.ndarray | None = None
    pearson_clipped: np.ndarray | None = None

    def __post_init__(self) -> None:
        m = len(self.names)
        for name in ("pearson_corrected", "pearson_corrected_low", "pearson_corrected_high"):
            if getattr(self, name) is None:
                setattr(self, name, np.full((m, m), np.nan))
        if self.pearson_clipped is None:
            self.pearson_clipped = np.zeros((m, m), bool)

    @property
    def undetermined(self) -> np.ndarray:
        """The pairs whose true profiles' correlation these data do not determine: a corrected value with NaN bounds
        (every correlation in [-1, 1] fits them; ``_corrected_interval``)."""
        with np.errstate(invalid="ignore"):
            return np.isfinite(self.pearson_corrected) & np.isnan(self.pearson_corrected_low)

    def frame(self) -> pl.DataFrame:
        """One row per pair of models (both orders and the diagonal) and method: ``correlation`` with ``low``/``high``
        is the raw r of the estimated profiles; ``corrected`` with ``corrected_low``/``corrected_high`` the estimated
        correlation of the true profiles (Pearson rows only; ``clipped`` where it was held inside [-1, 1])."""
        rows = []
        nan = np.full((len(self.names),) * 2, np.nan)
        none = np.zeros_like(nan, dtype=bool)
        for method in ("pearson", "spearman"):
            value, low, high = (getattr(self, f"{method}{s}") for s in ("", "_low", "_high"))
            fixed = (self.pearson_corrected, self.pearson_corrected_low, self.pearson_corrected_high,
                     self.pearson_clipped) if method == "pearson" else (nan, nan, nan, none)  # fmt: skip
            for i, a in enumerate(self.names):
                for j, b in enumerate(self.names):
                    rows.append((self.metric, self.scope, method, a, b, value[i, j], low[i, j], high[i, j],
                                 *(float(f[i, j]) for f in fixed[:3]), bool(fixed[3][i, j])))  # fmt: skip
        schema = ["metric", "scope", "method", "model_a", "model_b", "correlation", "low", "high", "corrected",
                  "corrected_low", "corrected_high", "clipped"]  # fmt: skip
        return pl.DataFrame(rows, schema=schema, orient="row").with_columns(
            pl.lit(self.n_cells, dtype=pl.Int64).alias("n_cells"),
            pl.lit(self.alpha).alias("alpha"),
            pl.lit(self.draws, dtype=pl.Int64).alias("draws"),
        )


def _scope_mask(res: EstimateResult, scope: str) -> np.ndarray:
    cells = res.cells
    pre = cells["pre_treatment"].to_numpy()
    if scope == "post":
        return ~pre
    if scope == "profile":
        return np.ones(len(pre), bool)
    if scope == "instantaneous":
        return (cells["event_time"] == 0).to_numpy()
    final = res.residual["checkpoint"][0] if res.residual.height else None
    return (cells["checkpoint"] == final).to_numpy() & ~pre


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank, as Spearman's rho needs)."""
    from scipy.stats import rankdata

    return rankdata(x, axis=-1)


def _corr_rows(z: np.ndarray) -> np.ndarray:
    """Correlation matrices of the rows of each (models x cells) slab ``z`` (draws x models x cells)."""
    z = z - z.mean(axis=-1, keepdims=True)
    norm = np.sqrt(np.einsum("dmc,dmc->dm", z, z))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = z / norm[..., None]
    return np.matmul(z, np.swapaxes(z, 1, 2))


def _point_corr(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.corrcoef(x)
    return np.atleast_2d(out)


def correlations(suite_result: SuiteResult, metric: str | None = None, scope: str = "post") -> Correlations:
    """Pearson (as the paper's Fig. 7) and Spearman correlations between the models' profiles of ``metric`` over the
    cells of ``scope`` (post-treatment cells by default; "profile" all cells, "instantaneous" c = g, "residual" the
    final checkpoint) that every model estimates (finite in all), with bootstrap intervals at 1 - alpha from the
    joint draws (``Correlations``)."""
    sr = suite_result
    metric = metric or sr.metrics[0]
    if metric not in sr.metrics:
        raise MemtuiError(f"metric '{clean(metric, 60)}' was not estimated for this suite; estimate it first.")
    if scope not in CORRELATION_SCOPES:
        raise MemtuiError(f"scope must be one of {', '.join(CORRELATION_SCOPES)}, not '{scope}'.")
    names = sr.names
    results = [sr.results[name][metric] for name in names]
    notes: list[str] = []
    keys = [r.cells.select("cohort", "checkpoint") for r in results]
    same_cells = all(k.equals(keys[0]) for k in keys[1:])
    if same_cells:
        mask = _scope_mask(results[0], scope)
        for r in results:
            mask &= np.isfinite(r.cells["estimate"].to_numpy())
        est = np.stack([r.cells["estimate"].to_numpy()[mask] for r in results])
    else:  # different cells (should not happen on a suite): correlate on the cells all have, without intervals
        frames = [
            r.cells.filter(pl.Series(_scope_mask(r, scope))).select("cohort", "checkpoint", pl.col("estimate").alias(n))
            for r, n in zip(results, names, strict=True)
        ]
        joined = frames[0]
        for f in frames[1:]:
            joined = joined.join(f, on=["cohort", "checkpoint"], how="inner")
        joined = joined.drop_nulls().filter(pl.all_horizontal(pl.col(names).is_finite()))
        est = joined.select(names).to_numpy().T
        mask = None
    n_cells = est.shape[1]
    m = len(names)
    nan = np.full((m, m), np.nan)
    if n_cells < 3:
        notes.append(f"only {n_cells} common cells in scope {scope}: no correlation")
        return Correlations(names, metric, scope, nan, nan.copy(), nan.copy(), nan.copy(), nan.copy(), nan.copy(),
                            n_cells, sr.settings.alpha, sr.settings.draws, notes)  # fmt: skip
    pearson = _point_corr(est)
    spearman = _point_corr(_ranks(est))
    bounds = [nan.copy() for _ in range(4)]
    corrected = {}
    s = sr.settings
    if s.draws and same_cells and sr.joint.get(metric, False):
        draws = joint_draws(sr, metric)
        signs = np.array([p.sign(metric) for p in sr.suite.panels], dtype=np.float32)
        rows = np.flatnonzero(mask)
        model_draws = [draws[n] for n in names]
        with one_blas_thread():
            p_draws, s_draws = _draw_correlations(est, model_draws, rows, signs)
        hc = _hc_joint_draws(sr, metric)
        with one_blas_thread():
            true = _corrected_pearson(est, [hc[n] for n in names], rows, signs, s.alpha)
        bounds = [*_interval(pearson, p_draws, s.alpha), *_interval(spearman, s_draws, s.alpha)]
        corrected = _corrected_record(true, names, notes)
    elif s.draws:
        notes.append(
            "the models' estimates use different instances (missing values differ), so their draws are not joint: "
            "no bootstrap interval and no corrected correlation"
        )
    return Correlations(names, metric, scope, pearson, spearman, *bounds, n_cells, s.alpha, s.draws, notes,
                        **corrected)  # fmt: skip


def _corrected_record(true: dict, names: list[str], notes: list[str]) -> dict:
    """``_corrected_pearson``'s matrices for ``Correlations``, clipped to [-1, 1], with notes on what was clipped and
    on profiles that vary no more than their noise."""
    point = true["point"]
    flat = [names[i] for i in np.flatnonzero(true["no_signal"])]
    if flat:
        notes.append(
            f"{', '.join(flat)}: the profile varies no more than its estimation noise over these cells, so the "
            "correlation of its true profile cannot be estimated (no corrected value)"
        )
    clipped = np.abs(point) > 1
    undetermined = np.isfinite(point) & np.isnan(true["low"])
    upper = np.triu(clipped, 1)
    if upper.any():
        pairs = ", ".join(
            f"{names[i]}–{names[j]} {point[i, j]:.3f} "
            + ("(not determined)" if undetermined[i, j] else f"[{true['low'][i, j]:.3f}, {true['high'][i, j]:.3f}]")
            for i, j in zip(*np.nonzero(upper), strict=True)
        )
        notes.append(
            f"the corrected Pearson correlation fell outside [-1, 1] for {pairs} (noise around a true correlation "
            "near ±1): shown at the bound, with its interval clipped (an interval wholly beyond the bound becomes the "
            "bound alone)"
        )
    with np.errstate(invalid="ignore"):
        value = np.clip(point, -1, 1)
        low = np.where(undetermined, np.nan, np.clip(np.fmin(true["low"], point), -1, 1))
        high = np.where(undetermined, np.nan, np.clip(np.fmax(true["high"], point), -1, 1))
    whole = np.triu(undetermined, 1)
    if whole.any():
        pairs = ", ".join(f"{names[i]}–{names[j]}" for i, j in zip(*np.nonzero(whole), strict=True))
        notes.append(
            f"the true profiles' correlation of {pairs} is not determined by these data (no interval: every "
            "correlation in [-1, 1] fits them): their estimation noise, shared by the cells of a cohort or checkpoint, "
            "is as large as the profiles' own variation; only the raw correlation is informative there "
            "(docs/methods.md)"
        )
    return {"pearson_corrected": value, "pearson_corrected_low": low, "pearson_corrected_high": high,
            "pearson_clipped": clipped}  # fmt: skip


def _psd_roots(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric square root of ``matrix`` with its negative eigenvalues set to 0, and the pseudo-inverse of that
    root (0 on the null space)."""
    w, v = np.linalg.eigh(matrix)
    w = np.clip(w, 0, None)
    keep = w > w.max(initial=0) * 1e-12
    root = np.sqrt(w)
    inv = np.divide(1, root, out=np.zeros_like(root), where=keep)
    return (v * root) @ v.T, (v * inv) @ v.T


def _ratio(cov: np.ndarray) -> np.ndarray:
    """Correlation entries of (..., m, m) covariance-like matrices: NaN where a diagonal entry is not positive."""
    diag = np.diagonal(cov, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        root = np.sqrt(np.where(diag > 0, diag, np.nan))
        return cov / root[..., :, None] / root[..., None, :]


def _corrected_pearson(
    est: np.ndarray,
    draws: list[np.ndarray],
    rows: np.ndarray,
    signs: np.ndarray,
    alpha: float,
    slab: int = 64,
    shifts: tuple[int, ...] = (1, 2, 3),
) -> dict:
    """The Pearson correlation of the models' true profiles over the cells ``rows``, corrected for estimation noise
    with the joint draws, and a 1 - alpha interval (unclipped: ``_corrected_record`` clips).

    Each model's estimated profile is x = t + e (t the true profile, e its estimation noise), so the cells' covariance
    matrix S of the estimates has expectation S(t) + N, N the covariance over the cells of the noise (within a model
    on the diagonal, across models off it, the instances being shared). The multiplier draws d are copies of e (their
    law given the data is e's approximate law, jointly across models and cells), so N is estimated by the mean over
    draws of the cells' covariance of d, and A = S - N estimates S(t): the method-of-moments correction for
    measurement error (Spearman 1904; Fuller 1987, *Measurement Error Models*, ch. 1-2), with correlated errors.

    The interval is a generalised confidence interval (Weerahandi 1993, JASA 88:899-905): A's error is W = C(t, e) +
    C(e, t) + (S(e) - N), C the cells' covariance, and draw b gives a copy W_b, so C_b = A - W_b is a draw of the
    true covariance's generalised pivot; the interval inverts a test of A01 - rho sqrt(A00 A11) = 0 whose standard
    error comes from the copies W_b (``_corrected_interval``; NaN where it cannot be determined, e.g. where the data
    allow a flat true profile). S(e) - N's copy is S(d_b) - N. C(t,
    d_b) needs the unknown t: C(x, d_b) holds it plus C(e, d_b), whose variance is spurious, so the linear term's
    draws are rescaled (per pair, the 4 entries jointly) to the covariance Var_b C(x, d_b) - E C(d', d_b)^2, the
    second term the U-statistic of pairs of independent draws (b, b + s) and of each draw's own noise covariance
    (``_spurious``). ``draws``: the HC1-scaled joint draws (``_hc_joint_draws``), so that N and the interval's
    spread are not (n - 1) / n short per group.
    Why not a bootstrap world around the profiles: with noise shared by many cells (a checkpoint's controls, a
    cohort's instances; the shipped suite's noise has ~11 effective degrees of freedom over 820 post cells) S(e)
    fluctuates as much as S(t) itself, the world's C(x, d) overstated W's spread by ~20 % and its basic interval fell
    to [-1, 1] or beyond; fixing the true variances at their estimates (a test inversion) covered 87-90 %, since
    A's diagonal is as uncertain as its off-diagonal. benchmarks/correlations.py measures the coverage."""
    a, pivots = _corrected_pivots(est, draws, rows, signs, slab, shifts)
    point = _ratio(a)
    m = len(a)
    low, high = np.full((m, m), np.nan), np.full((m, m), np.nan)
    for (i, j), pivot in pivots.items():
        low[i, j], high[i, j] = _corrected_interval(a[np.ix_((i, j), (i, j))], pivot, alpha)
        low[j, i], high[j, i] = low[i, j], high[i, j]
    diag = np.diagonal(a) > 0
    np.fill_diagonal(point, np.where(diag, 1.0, np.nan))
    np.fill_diagonal(low, np.where(diag, 1.0, np.nan))
    np.fill_diagonal(high, np.where(diag, 1.0, np.nan))
    return {"point": point, "low": low, "high": high, "no_signal": ~diag}


def _corrected_pivots(
    est: np.ndarray, draws: list[np.ndarray], rows: np.ndarray, signs: np.ndarray, slab: int, shifts: tuple[int, ...]
) -> tuple[np.ndarray, dict[tuple[int, int], np.ndarray]]:
    """The corrected covariance matrix A = S - N of the models' profiles over the cells ``rows`` and, per pair (i, j)
    of models with a finite corrected correlation, the B draws (B x 2 x 2) of its generalised pivot C_b = A - W_b
    (``_corrected_pearson`` says how)."""
    m, k = est.shape
    n_draws = draws[0].shape[1]
    x = est - est.mean(axis=1, keepdims=True)
    s = x @ x.T / (k - 1)
    cross = np.empty((n_draws, m, m))  # per draw: covariance over cells of x_i with d_j
    noise = np.empty((n_draws, m, m))  # per draw: covariance over cells of d_i with d_j
    pairs = np.empty((len(shifts), n_draws, m, m))  # covariance over cells of d_b,i with d_(b+s),j
    sub = [np.ascontiguousarray(d[rows].T) for d in draws]  # B x K per model: a slab of draws is contiguous

    def centred(start: int, stop: int) -> np.ndarray:
        idx = np.arange(start, stop) % n_draws
        d = np.stack([sub[j][idx] for j in range(m)], 1).astype(np.float64)  # slab x m x K
        d *= signs[None, :, None]
        return d - d.mean(axis=-1, keepdims=True)

    def one(start: int) -> None:
        stop = min(start + slab, n_draws)
        d = centred(start, stop)
        dt = np.swapaxes(d, 1, 2)
        cross[start:stop] = np.matmul(x, dt) / (k - 1)
        noise[start:stop] = np.matmul(d, dt) / (k - 1)
        for q, shift in enumerate(shifts):
            pairs[q, start:stop] = np.matmul(d, np.swapaxes(centred(start + shift, stop + shift), 1, 2)) / (k - 1)

    threads(one, list(range(0, n_draws, slab)))
    n = noise.mean(axis=0)
    a = s - n
    point = _ratio(a)
    pivots = {}
    for i in range(m):
        for j in range(i + 1, m):
            if not np.isfinite(point[i, j]):
                continue
            pij = [i, j]
            lin = cross[:, pij][:, :, pij].reshape(n_draws, 4)
            spurious = _spurious(pairs[:, :, pij][:, :, :, pij].reshape(-1, 4), noise[:, pij][:, :, pij])
            v_x = np.cov(lin.T)
            root_t, _ = _psd_roots(v_x - spurious)
            _, inv_root_x = _psd_roots(v_x)
            lin = (lin @ (root_t @ inv_root_x).T).reshape(n_draws, 2, 2)
            w = lin + np.swapaxes(lin, 1, 2) + noise[:, pij][:, :, pij] - n[np.ix_(pij, pij)]
            pivots[i, j] = a[np.ix_(pij, pij)] - w
    return a, pivots


def _corrected_interval(a: np.ndarray, pivot: np.ndarray, alpha: float) -> tuple[float, float]:
    """The 1 - alpha interval of a pair's corrected correlation r = A01 / sqrt(A00 A11) (``a``: the pair's 2 x 2
    corrected covariance, its diagonal positive) from the draws of its generalised pivot ``pivot`` (B x 2 x 2, C_b =
    A - W_b): the correlations rho in [-1, 1] that a level-alpha test of g(rho) = A01 - rho sqrt(A00 A11) = 0 accepts.
    g's error, linearised in A's error W, is W01 - rho (A11 W00 + A00 W11) / (2 sqrt(A00 A11)); its copies over the
    draws W_b = A - C_b give the test two ways, and the interval is their union: with g's standard deviation
    (Fieller's 1954 interval for a ratio, a quadratic inequality in rho: ``_fieller``) and with the percentiles of the
    pivot's g (``_pivot_percentiles``). (NaN, NaN) where it cannot be determined: sqrt(A00 A11) is within z standard
    errors of 0 (the data allow a flat true profile: every rho fits) or every rho in [-1, 1] is accepted; the bound
    alone where every rho in [-1, 1] is rejected (r lies beyond the bound by more than its noise allows).

    Why a test on the covariance scale: the ratio's own draws are clipped at +-1 and skewed there, and the sampling
    spread of r shrinks towards the bound, so neither their percentiles nor r +- z sd held their level near it (87-88 %
    at rho 0.95 with 8 checkpoints, 60 instances a cohort and noise correlated across the models). g is linear in
    A, whose draws' spread is its sampling spread, its spread is taken at each rho tried, and the bound is where rho
    is looked for, not where draws are clipped. Why the union: near the bound g's error is skewed (the noise's
    covariance S(e) - N), which the percentiles hold and the standard deviation does not; in the interior the
    percentiles alone covered 1-2 points less (docs/methods.md, "Correlations of true profiles")."""
    s = float(np.sqrt(a[0, 0] * a[1, 1]))
    w = a[None] - pivot
    u = w[:, 0, 1]
    v = (a[1, 1] * w[:, 0, 0] + a[0, 0] * w[:, 1, 1]) / (2 * s)
    first = _fieller(a[0, 1], s, u, v, alpha)
    if first is None:
        return math.nan, math.nan
    second = _pivot_percentiles(a[0, 1], s, u - u.mean(), v - v.mean(), alpha)
    low, high = min(first[0], second[0]), max(first[1], second[1])
    if low <= -1 and high >= 1:
        return math.nan, math.nan
    if low > 1 or high < -1:
        return (1.0, 1.0) if low > 1 else (-1.0, -1.0)
    return max(low, -1.0), min(high, 1.0)


def _fieller(a01: float, s: float, u: np.ndarray, v: np.ndarray, alpha: float) -> tuple[float, float] | None:
    """The rho with (a01 - rho s)^2 <= z^2 Var(u - rho v) (unclipped), None where s is within z standard errors of 0
    (the set is unbounded)."""
    (suu, suv), (_, svv) = np.cov(np.stack([u, v]))
    z2 = NormalDist().inv_cdf(1 - alpha / 2) ** 2
    qa, qb, qc = s * s - z2 * svv, a01 * s - z2 * suv, a01**2 - z2 * suu  # qa rho^2 - 2 qb rho + qc <= 0
    if qa <= 0:
        return None
    half = math.sqrt(max(qb * qb - qa * qc, 0.0))  # >= 0 in exact arithmetic: rho = a01 / s is always accepted
    return (qb - half) / qa, (qb + half) / qa


def _pivot_percentiles(a01: float, s: float, u: np.ndarray, v: np.ndarray, alpha: float) -> tuple[float, float]:
    """The ends of the rho in [-1, 1] at which a01 - rho s lies between the alpha/2 and 1 - alpha/2 percentiles of
    -(u_b - rho v_b) (the pivot's side of g's error: C_b = A - W_b), found on a grid and refined by bisection;
    (2, 2) where none does (beyond +1) and (-2, -2) below -1."""

    def accepted(rho: np.ndarray) -> np.ndarray:
        err = u[None, :] - rho[:, None] * v[None, :]
        lo, hi = np.quantile(err, [alpha / 2, 1 - alpha / 2], axis=1)
        g = a01 - rho * s
        return (-hi <= g) & (g <= -lo)

    grid = np.linspace(-1.0, 1.0, 101)
    ok = accepted(grid)
    if not ok.any():
        return (2.0, 2.0) if a01 > 0 else (-2.0, -2.0)
    first, last = np.flatnonzero(ok)[[0, -1]]

    def edge(inside: float, outside: float) -> float:
        for _ in range(30):
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if accepted(np.array([mid]))[0] else (inside, mid)
        return inside

    low = -1.0 if first == 0 else edge(grid[first], grid[first - 1])
    high = 1.0 if last == len(grid) - 1 else edge(grid[last], grid[last + 1])
    return low, high


def _spurious(pairs: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The covariance (4 x 4, over b) of C(e_p, d_b,q), p, q in the pair, that the linear term's draws C(x, d_b)
    carry beside C(t, d_b): the U-statistic, without the same-instance terms.

    A draw is d = sum_i v_i psi_i (Rademacher v, psi_i instance i's influence on the cells), so C(d_p, d'_q) =
    sum_ij v_i v'_j a_ij with a_ij = C(psi_i,p, psi_j,q). Over independent draws (``pairs``: C(d_b,p, d_(b+s),q))
    E[C C] = sum_ij a_ij a_ij (F), and with the second pair's roles swapped sum_ij a_ij a_ji (G); within one draw
    (``noise``: C(d_b,p, d_b,q)) Cov = sum_(i != j) a_ij (a_ij + a_ji). So sum_(i != j) a_ij a_ij = (F + Cov - G) / 2.
    F alone (the V-statistic) adds sum_i a_ii a_ii, the fourth moments of each instance's own influence, which the
    realised C(e, d) does not have in expectation: with 20 instances a cohort it overstated the spurious part by about
    10 % and the linear term's spread came out about 6 % short (docs/methods.md, "Correlations of true profiles").
    """
    f = pairs.T @ pairs / len(pairs)
    g = f[:, [0, 2, 1, 3]]  # (p, q) x (s, r): the components of the swapped pair
    within = np.cov(noise.reshape(len(noise), 4).T)
    out = (f + within - g) / 2
    return (out + out.T) / 2


def _hc_layout(lay):
    """``lay`` with each group's rows moved away from the group's mean by sqrt(n / (n - 1)) (a group of one stays):
    the point estimates are the same, and a multiplier draw's variance is the HC1 (per-group n / (n - 1)) one."""
    n = lay.group_n.astype(float)
    factor = np.sqrt(np.divide(n, n - 1, out=np.ones_like(n), where=n > 1))
    group = np.repeat(np.arange(lay.n_groups), lay.group_n)
    return replace(lay, y=lay.means[group] + factor[group, None] * (lay.y - lay.means[group]))


def _hc_joint_draws(sr: SuiteResult, metric: str) -> dict[str, np.ndarray]:
    """The joint draws of every model for ``metric`` (same seed, same multipliers per instance as the estimate) on
    the HC1-scaled layouts (``_hc_layout``), kept for the next call. The plain draws' covariance is the plug-in one,
    (n - 1) / n of the unbiased one per group: at 20 instances a cohort that left the noise covariance N 5 % short
    (the corrected r attenuated) and the interval's spread short by as much."""
    if metric in sr.hc_draws:
        return sr.hc_draws[metric]
    s = sr.settings
    with one_blas_thread():
        jobs = prepared_jobs(sr, metric)
        lays = [_hc_layout(j.lay) for j in jobs]
        source = None
        if not all(did.same_cells(lays[0], lay) for lay in lays[1:]):
            # models that miss values on different instances (a suite split by group keeps its draws joint): the
            # multipliers keyed by instance, so each instance keeps one multiplier across the models
            from memtui.engine.multipliers import JointMultipliers

            source = [JointMultipliers.per_instance(sr.suite.panels[0].n_instances)] * len(lays)
        boots = did.bootstrap_shared(lays, [j.est for j in jobs], draws=s.draws, seed=s.seed, multiplier=s.multiplier,
                                     source=source)  # fmt: skip
    sr.hc_draws = {metric: {j.model: b.cells for j, b in zip(jobs, boots, strict=True)}}  # one metric at a time
    return sr.hc_draws[metric]


def _interval(point: np.ndarray, draws: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The (alpha/2, 1 - alpha/2) percentiles of the draws' correlations, re-centred on the point estimate on Fisher's
    z scale: tanh(atanh(r) + q(atanh(r*) - median atanh(r*))).

    Why re-centred: a draw adds bootstrap noise to profiles that already carry their estimation noise, so the draws'
    correlations sit below the point estimate (attenuation), and their plain percentiles can exclude it (measured:
    r = 0.923 with plain percentiles [0.71, 0.90]). Their spread is the sampling spread of r; their location is not.
    On the z scale the interval stays inside (-1, 1) and is not symmetric where r is near 1."""
    edge = 1 - 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.arctanh(np.clip(draws, -edge, edge))
        spread = z - np.nanmedian(z, axis=0)
        q = np.nanquantile(spread, [alpha / 2, 1 - alpha / 2], axis=0)
        centre = np.arctanh(np.clip(point, -edge, edge))
        # a point at +-1 exactly (identical ranks) was moved inside for atanh: hold it inside its interval
        low, high = np.fmin(np.tanh(centre + q[0]), point), np.fmax(np.tanh(centre + q[1]), point)
    np.fill_diagonal(low, 1.0)
    np.fill_diagonal(high, 1.0)
    return low, high


def _draw_correlations(
    est: np.ndarray, draws: list[np.ndarray], rows: np.ndarray, signs: np.ndarray, slab: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Per bootstrap draw, Pearson and Spearman matrices (draws x m x m) of the models' profiles plus their draws."""
    n_draws = draws[0].shape[1]
    m = len(draws)
    sub = [d[rows] for d in draws]  # (cells, B) per model, only the cells correlated
    pearson = np.empty((n_draws, m, m))
    spearman = np.empty((n_draws, m, m))

    def one(start: int) -> None:
        stop = min(start + slab, n_draws)
        z = np.stack([est[k][None, :] + signs[k] * sub[k][:, start:stop].T.astype(np.float64) for k in range(m)], 1)
        pearson[start:stop] = _corr_rows(z)
        order = np.argsort(z, axis=-1)  # continuous draws: ties have probability ~0, so plain ranks
        ranks = np.empty_like(order, dtype=np.float64)
        np.put_along_axis(ranks, order, np.arange(z.shape[-1], dtype=np.float64), axis=-1)
        spearman[start:stop] = _corr_rows(ranks)

    threads(one, list(range(0, n_draws, slab)))
    return pearson, spearman
