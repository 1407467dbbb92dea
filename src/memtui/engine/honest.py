"""Confidence sets that stay valid when parallel trends fails by a bounded amount (Rambachan & Roth 2023).

An event study betahat = (pre-period coefficients, post-period coefficients) with covariance sigma is read as
beta = tau + delta: the post-period effects tau (zero before treatment) plus a violation of parallel trends delta,
whose pre-period part is what the placebo coefficients estimate. The target is theta = l' tau_post. Two families
of violations, both as in R HonestDiD (github.com/asheshrambachan/HonestDiD) and its Python port moderndid:

- relative magnitudes Delta^RM(Mbar): no post-period change of delta exceeds Mbar times the largest pre-period
  change. The set is a union over which pre-period change is the largest (s) and its sign; each piece is a polyhedron
  A delta <= 0, tested by the conditional / least-favourable hybrid moment-inequality test of Andrews, Roth & Pakes
  (2023, "ARP"), inverted over a grid of theta;
- smoothness Delta^SD(M): the second differences of delta are at most M (M = 0: linear trends), with the fixed-length
  confidence interval (FLCI) of Armstrong & Kolesar: an affine estimator v' betahat whose pre-period weights minimise
  the half-length cv_alpha(worst-case bias / sd) * sd.

Periods are the event study's consecutive coefficients: the restrictions compare neighbouring ones, whatever the
spacing of the event times. The reference period (event time -1 under a universal base period) is normalised to 0
and is not in betahat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from memtui.core.errors import MemtuiError

GRID_POINTS = 1000  # HonestDiD's default number of theta values the ARP test is inverted over
LF_SIMS = 1000  # draws for the least-favourable critical value (HonestDiD's default)
_TOL_LAMBDA = 1e-6  # a moment binds when its Lagrange multiplier exceeds this (ARP, as HonestDiD)
_COARSE = 25  # grid stride of the first pass over theta; the edges are then found by bisection


@dataclass(frozen=True)
class EventStudyInput:
    """A checked event study: coefficients, covariance, the split into pre and post periods, the target weights."""

    betahat: np.ndarray
    sigma: np.ndarray
    n_pre: int
    n_post: int
    l_vec: np.ndarray

    @classmethod
    def of(cls, betahat, sigma, n_pre: int, n_post: int, l_vec=None) -> EventStudyInput:
        """Refuse, in one line, anything HonestDiD would refuse or silently misread."""
        b = np.asarray(betahat, dtype=float).ravel()
        s = np.asarray(sigma, dtype=float)
        if n_pre < 1 or n_post < 1:
            raise MemtuiError(f"need at least one pre-period and one post-period, not {n_pre} and {n_post}.")
        if len(b) != n_pre + n_post:
            raise MemtuiError(f"betahat has {len(b)} coefficients but {n_pre} pre + {n_post} post periods were given.")
        if s.shape != (len(b), len(b)):
            raise MemtuiError(f"sigma must be {len(b)} x {len(b)} like betahat, not {' x '.join(map(str, s.shape))}.")
        if not (np.all(np.isfinite(b)) and np.all(np.isfinite(s))):
            raise MemtuiError("betahat and sigma must be finite (no NaN or infinity).")
        if not np.allclose(s, s.T, rtol=1e-8, atol=1e-14 * np.abs(s).max()):
            raise MemtuiError("sigma must be symmetric.")
        if np.linalg.eigvalsh(s).min() < -1e-10 * max(np.abs(s).max(), 1e-300) or np.any(np.diag(s) <= 0):
            raise MemtuiError("sigma must be positive semi-definite with positive variances.")
        lv = np.zeros(n_post) if l_vec is None else np.asarray(l_vec, dtype=float).ravel()
        if l_vec is None:
            lv[0] = 1.0
        if len(lv) != n_post or not np.all(np.isfinite(lv)) or not lv.any():
            raise MemtuiError(f"l_vec must be {n_post} finite weights on the post periods, not all zero.")
        return cls(b, (s + s.T) / 2, n_pre, n_post, lv)

    @property
    def theta(self) -> float:
        return float(self.l_vec @ self.betahat[self.n_pre :])

    @property
    def sd_theta(self) -> float:
        post = self.sigma[self.n_pre :, self.n_pre :]
        return float(np.sqrt(self.l_vec @ post @ self.l_vec))


def original_ci(es: EventStudyInput, alpha: float = 0.05) -> tuple[float, float]:
    """The usual interval under exact parallel trends: theta-hat +- z * sd (HonestDiD's constructOriginalCS)."""
    z = stats.norm.ppf(1 - alpha / 2)
    return es.theta - z * es.sd_theta, es.theta + z * es.sd_theta


# ---------------------------------------------------------------- relative magnitudes: the ARP hybrid test


def rm_constraints(n_pre: int, n_post: int, mbar: float, s: int, positive: bool, post_only: bool = True) -> np.ndarray:
    """A with Delta^RM_{s,sign}(Mbar) = {delta: A delta <= 0}, keeping only the rows that involve a post period (the
    pre-only rows constrain nothing HonestDiD tests: its postPeriodMomentsOnly): |delta_{t+1} - delta_t| <= Mbar *
    (delta_{s} - delta_{s-1}) (sign +) or Mbar * -(...) (sign -), for post t; the columns are delta without period 0."""
    width = n_pre + n_post + 1  # delta with the normalised reference period (index n_pre) still in
    diffs = np.zeros((n_pre + n_post, width))
    rows = np.arange(n_pre + n_post)
    diffs[rows, rows], diffs[rows, rows + 1] = -1.0, 1.0
    v_max = np.zeros(width)
    v_max[n_pre + s - 1], v_max[n_pre + s] = -1.0, 1.0  # the change into period s (s = -(n_pre-1), ..., 0)
    v_max = v_max if positive else -v_max
    bound = np.vstack([np.tile(v_max, (n_pre, 1)), np.tile(mbar * v_max, (n_post, 1))])
    a = np.vstack([diffs - bound, -diffs - bound])
    a = a[np.einsum("ij,ij->i", a, a) > 1e-10]
    a = np.delete(a, n_pre, axis=1)
    return a[np.any(a[:, n_pre:] != 0, axis=1)] if post_only else a


def rm_identified_set(es: EventStudyInput, mbar: float) -> tuple[float, float]:
    """The identified set of theta under Delta^RM(mbar) at betahat taken as the truth: the union over the pieces
    (s, sign) of l' beta_post - [max, min] l' delta_post over the deltas of the piece that match the placebo
    coefficients (HonestDiD's .compute_IDset_DeltaRM)."""
    n = es.n_pre + es.n_post
    eq = np.hstack([np.eye(es.n_pre), np.zeros((es.n_pre, es.n_post))])
    objective = np.r_[np.zeros(es.n_pre), es.l_vec]
    lows, highs = [], []
    for s in range(-(es.n_pre - 1), 1):
        for positive in (True, False):
            a = rm_constraints(es.n_pre, es.n_post, mbar, s, positive, post_only=False)
            ends = []
            for direction in (1.0, -1.0):
                res = optimize.linprog(
                    -direction * objective, A_ub=a, b_ub=np.zeros(len(a)), A_eq=eq, b_eq=es.betahat[: es.n_pre],
                    bounds=[(None, None)] * n, method="highs-ds",
                )  # fmt: skip
                ends.append(direction * -res.fun if res.status == 0 else None)
            if ends[0] is not None and ends[1] is not None:
                lows.append(es.theta - ends[0])
                highs.append(es.theta - ends[1])
    if not lows:  # the piece of the largest placebo change is always feasible: only failed arithmetic lands here
        raise MemtuiError(
            f"the identified set under Mbar = {mbar:g} could not be computed (its linear programmes failed); "
            "try a smaller Mbar."
        )
    return float(min(lows)), float(max(highs))


def sd_upper_bound_m(es: EventStudyInput, alpha: float = 0.05) -> float:
    """An upper confidence bound on the largest second difference of the placebo coefficients followed by the
    reference period's 0 (HonestDiD's DeltaSD_upperBound_Mpre); the placebo sd with a single placebo coefficient."""
    if es.n_pre < 2:
        return float(np.sqrt(es.sigma[0, 0]))
    k = es.n_pre
    second = np.zeros((k - 1, k))
    for r in range(k - 2):
        second[r, r : r + 3] = (1.0, -2.0, 1.0)
    second[k - 2, k - 2 :] = (1.0, -2.0)  # the last one runs into the reference period's 0
    a = np.vstack([second, -second])
    se = np.sqrt(np.diag(a @ es.sigma[:k, :k] @ a.T))
    return float(np.max(a @ es.betahat[:k] + stats.norm.ppf(1 - alpha) * se))


def _gamma_inverse(l_vec: np.ndarray) -> np.ndarray:
    """Inverse of an invertible Gamma whose first row is l' (the other rows: unit vectors, skipping l's first non-zero
    entry), so that Gamma tau = (theta, nuisance). Any such Gamma gives the same test: the nuisance columns span the
    null space of l' whatever the basis."""
    n = len(l_vec)
    skip = int(np.flatnonzero(l_vec)[0])
    gamma = np.vstack([l_vec, np.eye(n)[[i for i in range(n) if i != skip]]])
    return np.linalg.inv(gamma)


def _eta_linprog(y: np.ndarray, w: np.ndarray):
    """linprog's answer to min eta s.t. y - x delta <= eta * sd, i.e. w (eta, delta) >= y with w = [sd, x]: the ARP
    statistic."""
    return optimize.linprog(
        np.r_[1.0, np.zeros(w.shape[1] - 1)], A_ub=-w, b_ub=-y, bounds=[(None, None)] * w.shape[1], method="highs-ds"
    )


class _PieceLps:
    """Every LP of one piece's ARP test optimises over one polytope: the statistic eta(y) = min {eta: w (eta, delta)
    >= y} is, by duality, max y'g over P = {g >= 0: w'g = e1} (w = [sd, x]), and the truncation LPs maximise other
    objectives over the same P. Only y changes (the least-favourable draws, the theta grid), so an optimal basis B
    (rows of w) found once is reused: it is optimal for a new y when its primal point z = w_B^-1 y_B is feasible,
    w z >= y (its dual vertex g_B = w_B^-T e1 >= 0 was checked when it was learnt) -- a few products instead of a
    linprog call. A y no stored basis certifies goes to linprog exactly as in the plain path, and its basis is
    learnt. ``cache=False``: linprog every time (the reference the cached path is tested against)."""

    _CERTIFY_TOL = 1e-10  # primal feasibility of a stored basis, relative to the largest |y| (rounding is ~1e-16)

    def __init__(self, x: np.ndarray, sd: np.ndarray, cache: bool = True):
        self.cache = cache
        self.w = np.column_stack([sd, x])
        m, p = self.w.shape
        self.rows = np.empty((0, p), dtype=int)  # the stored bases, their inverses and dual vertices
        self.inv = np.empty((0, p, p))
        self.g = np.empty((0, m))
        self.linprog_calls = 0

    def eta(self, y: np.ndarray):
        """(eta, the multipliers: the dual vertex) at y, or None when the LP does not solve (HonestDiD never rejects
        then)."""
        if self.cache and len(self.rows):
            value, j = self._certify(y[None, :])
            if j[0] >= 0:
                return float(value[0]), self.g[j[0]].copy()
        self.linprog_calls += 1
        res = _eta_linprog(y, self.w)
        if res.status != 0:
            return None
        lam = -res.ineqlin.marginals
        if self.cache:
            self._learn(y, res.x, lam)
        return float(res.x[0]), lam

    def etas(self, ys: np.ndarray) -> np.ndarray:
        """eta at each row of ys (NaN where the LP does not solve): certified in bulk, linprog for the rest."""
        if not self.cache:
            return np.array([np.nan if (sol := self.eta(y)) is None else sol[0] for y in ys])
        out = np.full(len(ys), np.nan)
        todo, start = np.arange(len(ys)), 0
        while len(todo):
            if start < len(self.rows):  # only the bases learnt since the last pass are new to the remaining rows
                value, j = self._certify(ys[todo], start)
                start = len(self.rows)
                out[todo[j >= 0]] = value[j >= 0]
                todo = todo[j < 0]
                if not len(todo):
                    break
            sol = self.eta(ys[todo[0]])
            out[todo[0]] = np.nan if sol is None else sol[0]
            todo = todo[1:]
        return out

    def dual_max(self, q: np.ndarray):
        """(max q'g over P, the maximising vertex g), or None when the LP does not solve."""
        if self.cache and len(self.rows):
            value, j = self._certify(q[None, :])
            if j[0] >= 0:
                return float(value[0]), self.g[j[0]].copy()
        self.linprog_calls += 1
        m, p = self.w.shape
        e1 = np.zeros(p)
        e1[0] = 1.0
        res = optimize.linprog(-q, A_eq=self.w.T, b_eq=e1, bounds=[(0, None)] * m, method="highs-ds")
        if res.status != 0:
            return None
        if self.cache:
            self._learn(q, -res.eqlin.marginals, res.x)
        return -float(res.fun), res.x

    def _certify(self, ys: np.ndarray, start: int = 0, chunk: int = 2_000_000) -> tuple[np.ndarray, np.ndarray]:
        """For each row of ys, the optimal value and the first stored basis (from ``start``) that certifies it
        (-1: none does)."""
        m, p = self.w.shape
        rows, inv = self.rows[start:], self.inv[start:]
        value, found = np.full(len(ys), np.nan), np.full(len(ys), -1)
        step = max(1, chunk // max(1, len(rows) * m))
        for lo in range(0, len(ys), step):
            y = ys[lo : lo + step]
            z = np.einsum("jab,njb->nja", inv, y[:, rows])  # every basis's primal point for every y
            slack = z @ self.w.T - y[:, None, :]
            tol = self._CERTIFY_TOL * np.abs(y).max(axis=1)
            ok = slack.min(axis=2) >= -tol[:, None]
            j = np.argmax(ok, axis=1)
            hit = ok[np.arange(len(y)), j]
            found[lo : lo + step] = np.where(hit, j + start, -1)
            value[lo : lo + step] = z[np.arange(len(y)), j, 0]
        return value, found

    def _learn(self, y: np.ndarray, z: np.ndarray, g: np.ndarray) -> None:
        """Store the optimal basis behind linprog's primal point z and dual vertex g at y: g's support first, then the
        tightest other rows, as long as they add rank. A basis that is singular, not dual feasible or does not
        certify y itself is dropped (linprog keeps answering there)."""
        m, p = self.w.shape
        slack = self.w @ z - y
        support = np.flatnonzero(g > 1e-12 * max(g.max(), 0.0))
        rest = np.setdiff1d(np.argsort(slack, kind="stable"), support, assume_unique=True)
        order = np.r_[support[np.argsort(-g[support], kind="stable")], rest]
        basis: list[int] = []
        for i in order:
            if np.linalg.matrix_rank(self.w[basis + [int(i)]]) == len(basis) + 1:
                basis.append(int(i))
            if len(basis) == p:
                break
        if len(basis) < p or any(set(basis) == set(b) for b in self.rows.tolist()):
            return
        w_b = self.w[basis]
        if np.linalg.cond(w_b) > 1e8:  # rounding in z would approach the certificate's tolerance
            return
        inv = np.linalg.inv(w_b)
        if inv[0].min() < -1e-9 * np.abs(inv[0]).max():
            return
        vertex = np.zeros(m)
        vertex[basis] = inv[0]
        rows, invs, gs = self.rows, self.inv, self.g
        self.rows, self.inv, self.g = (
            np.vstack([rows, basis]),
            np.concatenate([invs, inv[None]]),
            np.vstack([gs, vertex]),
        )
        if self._certify(y[None, :], len(rows))[1][0] < 0:
            self.rows, self.inv, self.g = rows, invs, gs


def least_favourable_cv(
    x: np.ndarray | None, sigma_y: np.ndarray, kappa: float, sims: int, seed: int, lps: _PieceLps | None = None
) -> float:
    """The 1 - kappa quantile of the ARP statistic when every moment is zero (the least favourable case), from
    ``sims`` normal draws of the moments (numpy's default_rng(seed), as moderndid draws them); ``lps``: the piece's
    LPs, whose stored bases then serve the theta grid too."""
    rng = np.random.default_rng(seed)
    xi = rng.multivariate_normal(np.zeros(len(sigma_y)), sigma_y, size=sims)
    sd = np.sqrt(np.diag(sigma_y))
    if x is None:
        return float(np.quantile(np.max(xi / sd, axis=1), 1 - kappa))
    etas = (lps if lps is not None else _PieceLps(x, sd, cache=False)).etas(xi)
    return float(np.quantile(etas[np.isfinite(etas)], 1 - kappa))


def _trunc_quantile(p: float, lo: float, hi: float) -> float:
    """The p-quantile of a standard normal truncated to [lo, hi]."""
    q = stats.truncnorm.ppf(p, lo, hi)
    return float(q) if np.isfinite(q) else float(min(max(stats.norm.ppf(p), lo), hi))


def _conditional_reject(eta: float, vlo: float, vup: float, sigma_b: float, alpha_2: float, lf_cv) -> bool:
    """ARP's second stage: eta / sigma_B against the 1 - alpha_2 quantile of a normal truncated to [vlo, vup] (vup
    capped at the least-favourable critical value in the hybrid), never below 0."""
    zlo = vlo / sigma_b
    zup = (min(vup, lf_cv) if lf_cv is not None else vup) / sigma_b
    stat = eta / sigma_b
    if not zlo <= stat <= zup:
        return False
    return bool(stat > max(0.0, _trunc_quantile(1 - alpha_2, zlo, zup)))


def _primal_truncation(y, x, sigma_y, sd, binding):
    """Truncation points of the statistic and its sd when the binding moments give a unique vertex (ARP, primal)."""
    m = len(y)
    w_b = np.column_stack([sd[binding], x[binding]])
    s_b, s_bc = np.eye(m)[binding], np.eye(m)[~binding]
    w_b_inv_s = np.linalg.solve(w_b, s_b)
    gamma_b = np.column_stack([sd[~binding], x[~binding]]) @ w_b_inv_s - s_bc
    v_b = w_b_inv_s[0]
    sigma2_b = float(v_b @ sigma_y @ v_b)
    rho = gamma_b @ sigma_y @ v_b / sigma2_b
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = -(gamma_b @ y) / rho + v_b @ y
    vlo = bound[rho > 0].max() if (rho > 0).any() else -np.inf
    vup = bound[rho < 0].min() if (rho < 0).any() else np.inf
    return float(vlo), float(vup), np.sqrt(sigma2_b)


def arp_test(y, x, sigma_y, alpha: float, lf_cv: float | None, kappa: float, lps: _PieceLps | None = None) -> bool:
    """Does the ARP test (the least-favourable hybrid when ``lf_cv`` is given) reject E[y - x delta] <= 0 for every
    delta? ``y`` are the moments at the tested theta, ``x`` the nuisance directions, ``sigma_y`` their covariance;
    ``lps``: the piece's LPs (default: linprog every time)."""
    sd = np.sqrt(np.diag(sigma_y))
    lps = lps if lps is not None else _PieceLps(x, sd, cache=False)
    sol = lps.eta(y)
    if sol is None:
        return False  # HonestDiD: an LP that does not solve never rejects
    eta, lam = sol
    alpha_2 = alpha
    if lf_cv is not None:
        if eta > lf_cv:
            return True
        alpha_2 = (alpha - kappa) / (1 - kappa)
    k = x.shape[1]
    binding = lam > _TOL_LAMBDA
    x_b = x[binding]
    full_rank = min(x_b.shape) > 0 and np.linalg.matrix_rank(x_b) == min(x_b.shape)
    if full_rank and binding.sum() == k + 1:
        vlo, vup, sigma_b = _primal_truncation(y, x, sigma_y, sd, binding)
        return _conditional_reject(eta, vlo, vup, sigma_b, alpha_2, lf_cv)
    sigma2_b = float(lam @ sigma_y @ lam)
    if abs(sigma2_b) < np.finfo(float).eps:
        return eta > 0
    vlo, vup = _dual_truncation(eta, y, lam, sigma_y, lps)
    return _conditional_reject(eta, vlo, vup, np.sqrt(sigma2_b), alpha_2, lf_cv)


def _dual_truncation(eta, y, gamma, sigma_y, lps: _PieceLps):
    """Truncation points from the dual vertex ``gamma`` when the primal one is degenerate: the values c where the dual
    LP max (s + b c)' g over its vertices g still equals c (ARP Appendix D, Algorithm 1, by HonestDiD's bisection)."""
    sig_g = sigma_y @ gamma
    b = sig_g / float(gamma @ sig_g)
    s = y - b * float(gamma @ y)

    def solve(c: float):
        sol = lps.dual_max(s + b * c)
        if sol is None:
            return False, None
        return abs(c - sol[0]) <= 1e-6, sol[1]

    ok, _ = solve(eta)
    if not ok:
        return eta, np.inf
    sigma_b = np.sqrt(float(gamma @ sig_g))
    vup = _dual_edge(solve, eta, max(100.0, eta + 20 * sigma_b), s, b)
    vlo = _dual_edge(solve, eta, min(-100.0, eta - 20 * sigma_b), s, b)
    return vlo, vup


def _dual_edge(solve, eta: float, far: float, s, b, tol: float = 1e-6, max_iter: int = 10000) -> float:
    """The last c between eta and ``far`` where ``solve(c)`` still holds (+-inf when it holds at ``far``): a few
    fixed-point steps c = s'g / (1 - b'g) on the current vertex g, then bisection."""
    ok, g = solve(far)
    if ok:
        return float(np.copysign(np.inf, far - eta))
    mid, iters, dif = far, 1, 0.0
    while True:
        denom = 1 - float(g @ b) if g is not None else 0.0
        num = float(g @ s) if g is not None else 0.0
        mid = (0.0 if abs(num) < np.finfo(float).eps ** 0.75 else num) / denom if denom else far
        ok, g = solve(mid)
        if ok:
            break
        iters += 1
        if iters >= 10 or g is None:
            dif = tol + 1
            break
    inside, outside = eta, mid
    while dif > tol and iters < max_iter:
        iters += 1
        mid = (inside + outside) / 2
        if solve(mid)[0]:
            inside = mid
        else:
            outside = mid
        dif = abs(outside - inside)
    return float(mid)


def _no_nuisance_reject(y, sigma_y, alpha: float, lf_cv: float | None, kappa: float) -> bool:
    """ARP without nuisance parameters (a single post period): the largest studentised moment, conditioned on which
    moment it is (HonestDiD's .testInIdentifiedSet and its least-favourable hybrid)."""
    sd = np.sqrt(np.diag(sigma_y))
    moments = y / sd
    j = int(np.argmax(moments))
    if lf_cv is not None and moments[j] > lf_cv:
        return True
    alpha_2 = alpha if lf_cv is None else (alpha - kappa) / (1 - kappa)
    a_t = np.eye(len(y)) / sd[:, None]
    gamma = a_t[j]
    a_bar = a_t - gamma
    sig_g = sigma_y @ gamma
    var_g = float(gamma @ sig_g)
    c = sig_g / var_g
    z = y - c * float(gamma @ y)
    ac, az = a_bar @ c, a_bar @ z
    with np.errstate(divide="ignore", invalid="ignore"):
        obj = -az / ac
    vlo = obj[ac < 0].max() if (ac < 0).any() else -np.inf
    vup = obj[ac > 0].min() if (ac > 0).any() else np.inf
    sd_b = np.sqrt(var_g)
    crit = max(0.0, sd_b * _trunc_quantile(1 - alpha_2, vlo / sd_b, vup / sd_b))
    return bool(moments[j] > crit)


@dataclass(frozen=True)
class Interval:
    """A robust confidence interval: its ends (NaN when the set is empty), whether it reaches the end of the theta grid
    it was inverted over (then the true set may be longer), and the restriction's parameter it holds for."""

    low: float
    high: float
    parameter: float
    open_end: bool = False

    def excludes_zero(self) -> bool:
        return bool(np.isfinite(self.low) and (self.low > 0 or self.high < 0))


def rm_grid(es: EventStudyInput, mbar: float) -> tuple[float, float]:
    """The theta grid of one Mbar, chosen from its own identified set as HonestDiD's computeConditionalCS_DeltaRM
    does (the set's bounds +- 20 se), so that every Mbar gets the same resolution relative to its interval: one grid
    for every Mbar puts the 1000 points of Mbar = 0 (an interval a few sd long) 100 sd apart when the largest Mbar is
    large, and none is accepted. HonestDiD's se is sd(theta-hat), which is the bounds' se only at Mbar = 0: a bound
    moves by up to Mbar sum_t t |l_t| times the largest placebo change, so that change's sd, scaled so, is added (in
    quadrature): otherwise a large Mbar's interval runs past its grid."""
    lo, hi = rm_identified_set(es, mbar)
    return lo - 20 * _rm_bound_se(es, mbar), hi + 20 * _rm_bound_se(es, mbar)


def _rm_bound_se(es: EventStudyInput, mbar: float) -> float:
    """An approximate se of the identified set's bounds under Delta^RM(mbar) (see rm_grid)."""
    k = es.n_pre
    to_changes = np.eye(k + 1, k)[1:] - np.eye(k + 1, k)[:-1]  # beta_pre, then the reference 0: its k changes
    change_sd = float(np.sqrt(np.max(np.diag(to_changes @ es.sigma[:k, :k] @ to_changes.T))))
    reach = float(np.arange(1, es.n_post + 1) @ np.abs(es.l_vec))
    return float(np.hypot(es.sd_theta, mbar * reach * change_sd))


def _accepted_span(accept, n: int) -> tuple[int, int] | None:
    """First and last accepted grid index of one acceptance region, assumed an interval (as moderndid assumes):
    every _COARSE-th point first, then bisection for each edge; every point when no coarse point is accepted."""
    coarse = np.unique(np.r_[np.arange(0, n, _COARSE), n - 1])
    hits = [i for i in coarse if accept(i)]
    if not hits:
        hits = [i for i in range(n) if i not in set(coarse) and accept(i)]
        return (hits[0], hits[-1]) if hits else None
    lo_in, hi_in = hits[0], hits[-1]
    lo_out = coarse[np.searchsorted(coarse, lo_in) - 1] if lo_in > 0 else None
    hi_out = coarse[np.searchsorted(coarse, hi_in) + 1] if hi_in < n - 1 else None
    if lo_out is not None:
        while lo_in - lo_out > 1:
            mid = (lo_in + lo_out) // 2
            lo_in, lo_out = (mid, lo_out) if accept(mid) else (lo_in, mid)
    if hi_out is not None:
        while hi_out - hi_in > 1:
            mid = (hi_in + hi_out) // 2
            hi_in, hi_out = (mid, hi_out) if accept(mid) else (hi_in, mid)
    return lo_in, hi_in


def _rm_piece_span(es, mbar, s, positive, grid, alpha, hybrid, kappa, lf_sims, seed, cache=True):
    """The accepted grid span of one piece (s, sign) of Delta^RM(Mbar)."""
    a = rm_constraints(es.n_pre, es.n_post, mbar, s, positive)
    sigma_y = a @ es.sigma @ a.T
    y0 = a @ es.betahat
    if es.n_post == 1:
        direction = a[:, es.n_pre] / es.l_vec[0]  # theta = l * tau_post
        lf = least_favourable_cv(None, sigma_y, kappa, lf_sims, seed) if hybrid else None
        return _accepted_span(
            lambda i: not _no_nuisance_reject(y0 - direction * grid[i], sigma_y, alpha, lf, kappa), len(grid)
        )
    a_gamma = a[:, es.n_pre :] @ _gamma_inverse(es.l_vec)
    direction, x = a_gamma[:, 0], a_gamma[:, 1:]
    lps = _PieceLps(x, np.sqrt(np.diag(sigma_y)), cache)  # one polytope for every LP of the piece
    lf = least_favourable_cv(x, sigma_y, kappa, lf_sims, seed, lps) if hybrid else None
    return _accepted_span(
        lambda i: not arp_test(y0 - direction * grid[i], x, sigma_y, alpha, lf, kappa, lps), len(grid)
    )


def rm_interval(
    es: EventStudyInput,
    mbar: float,
    alpha: float = 0.05,
    hybrid: bool = True,
    grid: tuple[float, float] | None = None,
    grid_points: int = GRID_POINTS,
    lf_sims: int = LF_SIMS,
    seed: int = 0,
    cache_lps: bool = True,
) -> Interval:
    """The robust confidence interval for theta under Delta^RM(mbar): the hull of the grid values of theta accepted
    for some piece (s, sign), as HonestDiD's createSensitivityResults_relativeMagnitudes reports it; ``hybrid``: the
    conditional-least-favourable hybrid ("C-LF", kappa = alpha/10, HonestDiD's default), else the conditional test;
    ``cache_lps=False`` solves every LP by linprog instead of reusing optimal bases (same answers, slower)."""
    if not (np.isfinite(mbar) and mbar >= 0):
        raise MemtuiError(f"Mbar must be 0 or more, not {mbar:g}.")
    lo, hi = grid if grid is not None else rm_grid(es, mbar)
    thetas = np.linspace(lo, hi, grid_points)
    kappa = alpha / 10
    spans = [
        _rm_piece_span(es, mbar, s, positive, thetas, alpha, hybrid, kappa, lf_sims, seed, cache_lps)
        for s in range(-(es.n_pre - 1), 1)
        for positive in (True, False)
    ]
    spans = [sp for sp in spans if sp is not None]
    if not spans:
        return Interval(np.nan, np.nan, mbar)
    first, last = min(sp[0] for sp in spans), max(sp[1] for sp in spans)
    return Interval(float(thetas[first]), float(thetas[last]), mbar, first == 0 or last == grid_points - 1)


# ---------------------------------------------------------------- smoothness: the fixed-length confidence interval


def folded_normal_quantile(p: float, mu: float) -> float:
    """cv such that P(|N(mu, 1)| <= cv) = p (HonestDiD simulates it with 10^6 draws; here it is solved exactly)."""
    mu = abs(mu)
    if mu > 40:  # P(N(mu, 1) < -cv) < Phi(-40) ~ 1e-350: nothing in double precision, so cv is mu's normal quantile
        return mu + float(stats.norm.ppf(p))  # (brentq cannot bracket it once mu swamps the quantile: 1e20 + 11)

    def cdf(x: float) -> float:
        return stats.norm.cdf(x - mu) - stats.norm.cdf(-x - mu) - p

    hi = mu + stats.norm.ppf(p) + 10
    return float(optimize.brentq(cdf, 0.0, hi, xtol=1e-14, rtol=1e-14))


@dataclass(frozen=True)
class _FlciTerms:
    """The FLCI's pieces for weights w on cumulative pre-period differences (l_pre = first differences of w): the
    variance w'Qw + q'w + c0, the bias constant and the sum the weights must reach (unbiased under linear trends)."""

    quad: np.ndarray
    lin: np.ndarray
    const: float
    bias_const: float
    total: float

    @classmethod
    def of(cls, es: EventStudyInput) -> _FlciTerms:
        k, lv = es.n_pre, es.l_vec
        to_l = np.eye(k) - np.eye(k, k=-1)  # l_pre = to_l @ w
        pre, cross = es.sigma[:k, :k], es.sigma[:k, k:]
        post = float(lv @ es.sigma[k:, k:] @ lv)
        t = np.arange(1, es.n_post + 1)
        bias_const = sum(abs(float(t[:s] @ lv[es.n_post - s :])) for s in t) - float(t @ lv)
        return cls(to_l.T @ pre @ to_l, 2 * to_l.T @ cross @ lv, post, bias_const, float(t @ lv))

    def variance(self, w: np.ndarray) -> float:
        return float(w @ self.quad @ w + self.lin @ w + self.const)


def _min_variance_weights(terms: _FlciTerms) -> np.ndarray:
    """The weights of least variance among those that sum to ``terms.total`` (a KKT system)."""
    k = len(terms.lin)
    kkt = np.block([[2 * terms.quad, np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
    return np.linalg.lstsq(kkt, np.r_[-terms.lin, terms.total], rcond=None)[0][:k]


def _least_bias(terms: _FlciTerms, h: float, start: np.ndarray) -> tuple[float, np.ndarray]:
    """Worst-case bias per unit M of the least-biased estimator with sd at most h: min const + sum |cumsum(w)| s.t.
    sum(w) = total and variance(w) <= h^2, a convex problem solved in (u, w) with u >= |cumsum(w)|."""
    k = len(start)
    tri = np.tril(np.ones((k, k)))
    scale = max(h * h, 1e-300)
    cons = [
        {"type": "ineq", "fun": lambda z: z[:k] - tri @ z[k:], "jac": lambda z: np.hstack([np.eye(k), -tri])},
        {"type": "ineq", "fun": lambda z: z[:k] + tri @ z[k:], "jac": lambda z: np.hstack([np.eye(k), tri])},
        {"type": "eq", "fun": lambda z: np.sum(z[k:]) - terms.total, "jac": lambda z: np.r_[np.zeros(k), np.ones(k)]},
        {
            "type": "ineq",
            "fun": lambda z: (h * h - terms.variance(z[k:])) / scale,
            "jac": lambda z: np.r_[np.zeros(k), -(2 * terms.quad @ z[k:] + terms.lin)] / scale,
        },
    ]
    z0 = np.r_[np.abs(tri @ start), start]
    res = optimize.minimize(
        lambda z: np.sum(z[:k]),
        z0,
        jac=lambda z: np.r_[np.ones(k), np.zeros(k)],
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-13, "maxiter": 1000},
    )
    w = res.x[k:]
    return terms.bias_const + float(np.sum(np.abs(tri @ w))), w


def flci(es: EventStudyInput, m: float, alpha: float = 0.05) -> tuple[Interval, np.ndarray]:
    """The optimal fixed-length confidence interval for theta under Delta^SD(m) (HonestDiD's findOptimalFLCI) and the
    estimator's weights on betahat: the sd h of the affine estimator is chosen in [h_min, h_0] (least variance,
    least bias) to minimise the half-length cv_alpha(m * bias(h) / h) * h."""
    if not (np.isfinite(m) and m >= 0):
        raise MemtuiError(f"M must be 0 or more, not {m:g}.")
    terms = _FlciTerms.of(es)
    w_min = _min_variance_weights(terms)
    h_min = np.sqrt(terms.variance(w_min))
    w_0 = np.r_[np.zeros(es.n_pre - 1), terms.total]
    h_0 = np.sqrt(terms.variance(w_0))
    cache: dict[float, tuple[float, np.ndarray]] = {}

    def half_length(h: float) -> float:
        if h not in cache:
            cache[h] = _least_bias(terms, h, w_min)
        bias = cache[h][0]
        return folded_normal_quantile(1 - alpha, m * bias / h) * h

    if m == 0 or h_0 <= h_min * (1 + 1e-12):
        h_star, w = h_min, w_min
    else:
        res = optimize.minimize_scalar(
            half_length, bounds=(h_min, h_0), method="bounded", options={"xatol": 1e-10 * h_0}
        )
        h_star = float(res.x)
        candidates = {h_min: half_length(h_min), h_0: half_length(h_0), h_star: half_length(h_star)}
        h_star = min(candidates, key=candidates.get)
        w = cache[h_star][1] if h_star in cache else w_0
    half = (
        folded_normal_quantile(1 - alpha, m * _least_bias(terms, h_star, w_min)[0] / h_star) * h_star
        if m
        else (stats.norm.ppf(1 - alpha / 2) * h_star)
    )
    weights = np.r_[(np.eye(es.n_pre) - np.eye(es.n_pre, k=-1)) @ w, es.l_vec]
    centre = float(weights @ es.betahat)
    return Interval(centre - half, centre + half, m), weights
