"""A skew-aware bootstrap-t: Mammen multipliers with each draw's variance re-estimated exactly (issue 22).

The calibrated band (``engine.bands``) studentises Rademacher draws. Rademacher multipliers are symmetric (E v^3 = 0):
every bootstrap t* is symmetric, so the band cannot follow a studentised statistic whose law is skewed — persistent,
one-sided moves of an instance (a random walk of skewed steps) at small cohorts (docs/calibration-study.md,
"Skewed residuals"). Mammen's two-point multipliers (v = (1 -+ sqrt 5) / 2 with probabilities (sqrt 5 +- 1) /
(2 sqrt 5): E v = 0, E v^2 = 1, E v^3 = 1; Liu 1988, Mammen 1993) carry the third moment into the draws.

With them sum (v_i z_i)^2 moves from draw to draw, so the re-estimated variance needs each cell's v^2-weighted sum
of squared influence terms. In the bootstrap world instance i of a cell's cohort contributes v_i z_i (z_i its centred
change, T* = sum v_i z_i / n_T), and with the HC1 (n / (n - 1)) correction

    var*_T = (sum v_i^2 z_i^2 - n_T T*^2) / (n_T (n_T - 1)),

one product per group and chunk: the group's squared changes (rows x the group's cells) against v^2. The control
part is re-estimated the same way with ``variance="exact"`` (one product per control group over every cell it serves:
n_C x cells, affordable for small panels only); without it the control part keeps its sample sum of squares and is
re-centred as in the calibrated band, var*_C = var_C - C*^2 / (n_C - 1) — the control set is the large one (hundreds
of never-trained instances), so the term it leaves out is of order 1 / sqrt(n_C) of the smaller part.

The draws are ``did.bootstrap_shared``'s own (multiplier "mammen", its per-chunk callback): the callback re-draws each
chunk's multipliers from a generator with the same seed (the same stream, as the bootstrap draws them), which
``tests/engine/test_skewed_band.py`` checks against the bootstrap's own cohort sums. The laws returned are one-sided:
per draw the maximum of t* and of -t* over each mask's cells, so a band can take equal-tailed critical values (the
two tails differ under skewed draws) or the symmetric max |t*|.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memtui.engine import bands, did
from memtui.engine.bands import CellVariances
from memtui.engine.layout import Layout

MULTIPLIER = "mammen"
VARIANCES = ("exact", "treated", "recentred")


@dataclass
class SkewLaws:
    """Per mask, the bootstrap law of max_k t*_k (``top``) and of max_k -t*_k (``bottom``) over its usable cells."""

    top: list[np.ndarray]
    bottom: list[np.ndarray]

    def symmetric(self, i: int) -> np.ndarray:
        return np.maximum(self.top[i], self.bottom[i])


def _group_squares(lay: Layout) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per group, its cells and the squared centred changes of its rows for those cells (rows x cells, float64)."""
    return [(idx, d * d) for idx, d in bands.group_changes(lay)]


def _control_squares(lay: Layout, est: did.CellEstimates) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per control group h, the cells it is a control of and (change - the cell's control mean change)^2 of its rows."""
    g, t, b, p, own = lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own
    upto = int(p.max()) if len(p) else 0
    in_ctrl = np.arange(upto)[:, None] < p[None, :]
    in_ctrl[g[own], np.flatnonzero(own)] = False
    out = []
    for h in range(upto):
        idx = np.flatnonzero(in_ctrl[h])
        if len(idx):
            y = lay.y[lay.rows(h)]
            e = y[:, t[idx]] - y[:, b[idx]] - est.dmu[idx]
            out.append((h, idx, e * e))
    return out


def _weighted_sums(lay: Layout, parts, v2: np.ndarray, n_cells: int, control: bool) -> np.ndarray:
    """(cells, chunk): each cell's v^2-weighted sum of squares over the rows of ``parts``."""
    s = np.zeros((n_cells, v2.shape[1]))
    for part in parts:
        h, idx, sq = part if control else (None, *part)
        k = h if control else lay.cell_group[idx[0]]
        s[idx] += sq.T @ v2[lay.rows(k)]
    return s


def _per_cell(n: np.ndarray) -> np.ndarray:
    """(cells, 1): 1 / n where n > 0, else 0 (a group of one instance, no control set)."""
    return np.divide(1, n, out=np.zeros_like(n), where=n > 0)[:, None]


def _fold(masks, block: slice, span: slice, t_star: np.ndarray, top: list, bottom: list) -> None:
    """Each mask's running max t* and max -t* over the block's cells, for the draws ``span``."""
    for i, m in enumerate(masks):
        local = m[block]
        if local.any():
            np.maximum(top[i][span], t_star[local].max(axis=0), out=top[i][span])
            np.maximum(bottom[i][span], (-t_star[local]).max(axis=0), out=bottom[i][span])


def skewed_bootstrap(
    lay: Layout,
    est: did.CellEstimates,
    var: CellVariances,
    masks: list[np.ndarray],
    *,
    draws: int,
    seed: int,
    chunk: int = 128,
    variance: str = "treated",
) -> tuple[did.BootstrapDraws, SkewLaws]:
    """``did.bootstrap`` with Mammen multipliers (the same draws, bit for bit) and the one-sided studentised sup laws
    of every mask (cells with a finite ``var.se`` only). Instance-level multipliers (no clusters, no keyed source)
    and the HC1 variances of ``bands.cell_variances``. ``variance``: which parts of each draw's variance are
    re-estimated from the v^2-weighted squares: "exact" (both), "treated" (the cohort's; the control part
    re-centred), "recentred" (neither: the sample sums of squares re-centred, as the calibrated band does)."""
    if variance not in VARIANCES:
        raise ValueError(f"unknown variance {variance!r}")
    if not var.hc:
        raise ValueError("the skew-aware band re-estimates HC1 variances")
    n_t = var.n_t
    inv_t, inv_c, k_t, k_c = (
        _per_cell(n) for n in (var.n_t * (var.n_t - 1), var.n_c * (var.n_c - 1), n_t - 1, var.n_c - 1)
    )
    usable = np.isfinite(var.se)
    masks = [np.asarray(m, bool) & usable for m in masks]
    treated_sq = _group_squares(lay) if variance != "recentred" else None
    control_sq = _control_squares(lay, est) if variance == "exact" and lay.controls else None
    rng = np.random.default_rng(seed)  # the bootstrap's own stream: same seed, same draws in the same order
    top = [np.full(draws, -np.inf) for _ in masks]
    bottom = [np.full(draws, -np.inf) for _ in masks]
    state: dict = {}

    def studentise(j: int, start: int, block: slice, treated, ctrl, out) -> None:
        bc = out.shape[1]
        if block.start == 0:
            v = did.multipliers(rng, (lay.n_units, bc), MULTIPLIER, np.float32).astype(float)
            v2 = v * v
            if treated_sq is not None:
                state["s_t"] = _weighted_sums(lay, treated_sq, v2, len(n_t), control=False)
            if control_sq is not None:
                state["s_c"] = _weighted_sums(lay, control_sq, v2, len(n_t), control=True)
        tb, cb = treated.astype(float), ctrl.astype(float)
        s_t = state["s_t"][block] * inv_t[block] if treated_sq is not None else var.var_t[block, None]
        den = s_t - k_t[block] * tb * tb
        if control_sq is not None:
            den += state["s_c"][block] * inv_c[block] - k_c[block] * cb * cb
        else:
            den += var.var_c[block, None] - k_c[block] * cb * cb
        with np.errstate(divide="ignore", invalid="ignore"):
            t_star = out / np.sqrt(np.maximum(den, 0))
        t_star[np.isnan(t_star)] = 0  # 0 / 0: a cell whose draw and spread are both nil
        _fold(masks, block, slice(start, start + bc), t_star, top, bottom)

    boot = did.bootstrap_shared([lay], [est], draws=draws, seed=seed, multiplier=MULTIPLIER, chunk=chunk,
                                on_chunk=studentise)[0]  # fmt: skip
    return boot, SkewLaws(top, bottom)


def critical_values(laws: SkewLaws, i: int, alpha: float, tails: str = "equal") -> tuple[float, float]:
    """(upper, lower) critical values of mask i: a cell is flagged where t > upper or -t > lower. ``tails``:
    "equal" (each side at alpha / 2) or "symmetric" (both the (1 - alpha) quantile of max |t*|)."""
    if tails == "symmetric":
        c = did.critical_value(laws.symmetric(i), alpha)
        return c, c
    return did.critical_value(laws.top[i], alpha / 2), did.critical_value(laws.bottom[i], alpha / 2)
