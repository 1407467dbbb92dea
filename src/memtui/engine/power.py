"""Power of the simultaneous band for a planned panel: what a cell's standard error depends on, the band's critical
value for a planned family of cells, and the cohort size that detects an effect with a given power.

A DiD cell (g, c) with base b is a difference of means of the change Y_c - Y_b between the cohort (n_g instances) and
the never-treated controls (n_0), so its variance is V_T(c - b) / n_g + V_C(c - b) / n_0, with V(L) the variance of an
instance's change over L checkpoints (the *variogram*), one for treated and one for control instances. The variogram
also fixes every covariance between cells (only changes enter a cell), which is what the critical value of the
simultaneous band needs:

    Cov(X_c - X_b, X_c' - X_b') = [V(|c - b'|) + V(|c' - b|) - V(|c - c'|) - V(|b - b'|)] / 2,

exactly for a process with stationary increments. Cells of one cohort share their instances, cells of different
cohorts only the controls. See docs/methods.md ("Planning a panel") for what this assumes.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from memtui.engine.did import critical_value

_CHUNK_ELEMENTS = 1 << 22  # draws x cohorts x checkpoints held at once while simulating the sup-t law: ~32 MiB
# Multiply-adds the critical value's simulation may cost (draws x cohorts x checkpoints^2): about a second or two.
WORK_BUDGET = 4e9
MIN_DRAWS = 200  # below this the simulated quantile is too noisy; the Sidak bound is used instead
# Draws of the critical value's simulation when the work budget allows: its Monte-Carlo error is then about 0.02,
# about a point of power (1000 draws, the bootstrap's default, leave about 0.04)
PLAN_DRAWS = 5000


def power(effect, se, crit):
    """P(|estimate| / se > crit) for a normal estimate with mean ``effect`` and standard deviation ``se``."""
    ratio = np.abs(np.asarray(effect, dtype=float)) / np.asarray(se, dtype=float)
    return ndtr(ratio - crit) + ndtr(-ratio - crit)


def detectable_ratio(target: float, crit: float) -> float:
    """The effect / se at which a cell is significant with probability ``target`` against critical value ``crit``.

    Power rises monotonically with effect / se from 2 Phi(-crit) (the false-positive rate) at 0; a target at or below
    that needs no effect at all (0). Without the far tail the answer is crit + z_target; brentq solves the exact one.
    """
    if not 0 < target < 1:
        raise ValueError(f"target power must be in (0, 1), not {target}")
    floor = float(power(0.0, 1.0, crit))
    if target <= floor:
        return 0.0
    high = crit + float(ndtri(target)) + 1.0  # the one-tail answer plus a margin: power there exceeds the target
    return float(brentq(lambda r: float(power(r, 1.0, crit)) - target, 0.0, high, xtol=1e-12, rtol=1e-14))


def extend(variogram: np.ndarray, width: int) -> np.ndarray:
    """V(0 .. width-1): the variogram given (V[0] = 0), with lags beyond the last one given held at its last value."""
    v = np.asarray(variogram, dtype=float)
    out = np.full(max(width, 1), v[-1])
    out[: min(len(v), width)] = v[:width]
    out[0] = 0.0
    return out


def increment_covariance(variogram: np.ndarray, width: int) -> np.ndarray:
    """Covariance of (X_t - X_0), t = 0 .. width-1, for a process with variogram V; only differences of X enter a
    cell, so the reference X_0 drops out. An estimated variogram need not be a valid one: the matrix is made positive
    semi-definite by clipping negative eigenvalues at zero."""
    v = extend(variogram, width)
    lag = np.abs(np.arange(width)[:, None] - np.arange(width)[None, :])
    cov = 0.5 * (v[:, None] + v[None, :] - v[lag])
    w, u = np.linalg.eigh(cov)
    return (u * np.clip(w, 0, None)) @ u.T


def n_post_cells(cohorts: int, checkpoints: int) -> int:
    """Post-treatment cells c >= g when cohort k = 1 .. G is first trained at checkpoint k of T (indices 0 .. T-1)."""
    k = np.arange(1, cohorts + 1)
    return int(np.clip(checkpoints - k, 0, None).sum())


def sidak_crit(n_cells: int, alpha: float) -> float:
    """Critical value of a simultaneous band over ``n_cells`` independent normal cells: an upper bound for
    positively correlated ones."""
    per_cell = -np.expm1(np.log1p(-alpha) / n_cells)  # 1 - (1 - alpha)^(1/K) without cancellation
    return float(-ndtri(per_cell / 2))


class BandModel:
    """The simultaneous band of a planned design: cohort k = 1 .. G first trained at checkpoint k of T (base k - 1),
    post-treatment cells c >= k, instances whose changes follow the treated and control variograms."""

    def __init__(self, v_treated: np.ndarray, v_control: np.ndarray, *, cohorts: int, checkpoints: int):
        self.cohorts, self.checkpoints = cohorts, checkpoints
        self.work = cohorts * checkpoints * checkpoints  # multiply-adds per draw
        if self.work * MIN_DRAWS > WORK_BUDGET:
            return
        # unit-size covariances and their factors, once: a group of n has covariance cov / n, factor fac / sqrt(n)
        self.cov_t = increment_covariance(v_treated, checkpoints)
        self.cov_c = increment_covariance(v_control, checkpoints)
        self.fac_t, self.fac_c = _factor(self.cov_t), _factor(self.cov_c)

    def crit(self, n_treated: float, n_control: float, alpha: float, draws: int, seed: int = 0) -> tuple[float, int]:
        """Critical value of the band over the post-treatment cells with n_treated instances per cohort and
        n_control validation instances, and the draws used (0: the design is too large to simulate quickly and the
        Sidak bound is returned).

        Per draw, each cohort's mean path over the T checkpoints and the controls' mean path are drawn from the
        variograms' increment covariances, every cell is formed as the engine forms it and divided by its exact
        standard deviation, and the (1 - alpha) quantile of the largest |cell| is the sup-t critical value the
        engine's bootstrap estimates.
        """
        g, t = self.cohorts, self.checkpoints
        draws = int(min(draws, WORK_BUDGET // max(self.work, 1)))
        if draws < MIN_DRAWS:
            return sidak_crit(n_post_cells(g, t), alpha), 0
        # float32: the draws only feed a quantile whose Monte-Carlo error is far above float32 rounding
        fac_t = (self.fac_t / np.sqrt(n_treated)).astype(np.float32)
        fac_c = (self.fac_c / np.sqrt(n_control)).astype(np.float32)
        base = np.arange(g)  # cohort k (row k - 1) has base checkpoint k - 1
        post = np.arange(t)[None, :] >= base[:, None] + 1

        def change_var(cov):
            d = np.diag(cov)
            return d[None, :] + d[base][:, None] - 2 * cov[base]

        var = change_var(self.cov_t) / n_treated + change_var(self.cov_c) / n_control
        ok = post & (var > 0)
        inv_sd = np.zeros((g, t), dtype=np.float32)
        inv_sd[ok] = 1 / np.sqrt(var[ok])
        rng = np.random.default_rng(seed)
        tmax = np.empty(draws)
        chunk = max(1, _CHUNK_ELEMENTS // (g * t))
        for start in range(0, draws, chunk):
            bc = min(chunk, draws - start)
            # (bc, G, T): the cohorts' mean paths; (bc, T): the controls' (a factor has one column per eigenvalue kept)
            # (2-D products: numpy's batched 3-D matmul is several times slower than one BLAS call)
            paths = (rng.standard_normal((bc * g, fac_t.shape[1]), dtype=np.float32) @ fac_t.T).reshape(bc, g, t)
            ctrl = rng.standard_normal((bc, fac_c.shape[1]), dtype=np.float32) @ fac_c.T
            # cell (k, c) = (path_k[c] - path_k[base]) - (ctrl[c] - ctrl[base])
            paths -= ctrl[:, None, :]
            at_base = np.take_along_axis(paths, base[None, :, None], axis=2)
            paths -= at_base
            np.abs(paths, out=paths)
            paths *= inv_sd  # cells outside the family (c < g) weigh 0
            tmax[start : start + bc] = paths.reshape(bc, -1).max(axis=1)
        return critical_value(tmax, alpha), draws


def simultaneous_crit(
    v_treated: np.ndarray,
    v_control: np.ndarray,
    *,
    cohorts: int,
    checkpoints: int,
    n_treated: float,
    n_control: float,
    alpha: float,
    draws: int,
    seed: int = 0,
) -> tuple[float, int]:
    """``BandModel(...).crit(...)`` in one call."""
    model = BandModel(v_treated, v_control, cohorts=cohorts, checkpoints=checkpoints)
    return model.crit(n_treated, n_control, alpha, draws, seed)


def _factor(cov: np.ndarray) -> np.ndarray:
    """F with F F' = cov. Eigenvalues under 1e-10 of the largest (rounding dust, or clipped negatives) become 0: in
    float32 their square roots would be subnormal numbers, which make the matrix products many times slower."""
    w, u = np.linalg.eigh(cov)
    keep = w > 1e-10 * max(float(w.max()), 0.0)
    return u[:, keep] * np.sqrt(w[keep])
