"""Comparing subgroups' estimates made from one set of multiplier draws: the difference of two groups with its
simultaneous band, and the dose-response trend test.

Every group's bootstrap drew the same multiplier for the same panel instance (``engine.multipliers``), so the draws
of group A's cell minus group B's cell are draws of the difference: its standard error and band account for whatever
the groups share (the never-treated controls under ``shared_controls``, whose part cancels in the difference, or the
clusters that span groups). The difference's band is the classic one (R did's: robust bootstrap standard error, sup-t
critical value over the family) whatever band the groups' own profiles use.

A difference has a band only where both groups have a standard error of their own. A group with no sampling
variation at a cell (one treated instance against one control: its influence function is 0, its draws all 0, its se
n/a) would lend the difference the other group's spread alone, a band that leaves out half the uncertainty: there the
difference has its estimate and nothing else (no se, no band, no p-value, never significant).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from memtui.engine import did
from memtui.estimation.results import z_value


@dataclass
class Difference:
    """Group ``a`` minus group ``b``: per cell of both profiles (``cells``), per event time (``persistent``, c - g
    >= 0; the instantaneous memorisation is event time 0) and the overall average (``overall``: estimate, std_error,
    ci_low, ci_high, p_value). Bands are simultaneous over the post-treatment cells and over the event times."""

    a: str
    b: str
    persistent: pl.DataFrame
    overall: dict
    _cells: Callable[[], pl.DataFrame] = field(repr=False, default=None)
    no_variance: tuple[str, ...] = ()  # the groups with no standard error at some compared cell or event time

    @functools.cached_property
    def cells(self) -> pl.DataFrame:
        """Per cell of both profiles, made when first asked for (a robust se per cell: a sort of every draw)."""
        return self._cells()

    def count(self, scope: str = "persistent") -> tuple[int, int, int]:
        """(k above, k below, n): at how many post-treatment cells, or event times c - g > 0, the band of A - B lies
        wholly above zero, wholly below it, out of how many."""
        frame = self.cells.filter(~pl.col("pre_treatment")) if scope == "cells" else self.persistent
        if scope != "cells":
            frame = frame.filter(pl.col("event_time") > 0)
        sig = frame["significant"].to_numpy()
        est = frame["estimate"].to_numpy()
        return int((sig & (est > 0)).sum()), int((sig & (est < 0)).sum()), frame.height

    def unbanded(self, scope: str = "persistent") -> int:
        """Of the rows ``count`` counts, how many have no band (a group without sampling variation there)."""
        frame = self.cells.filter(~pl.col("pre_treatment")) if scope == "cells" else self.persistent
        if scope != "cells":
            frame = frame.filter(pl.col("event_time") > 0)
        return int((~np.isfinite(frame["std_error"].to_numpy())).sum())

    def sentence(self, scope: str = "persistent") -> str:
        above, below, n = self.count(scope)
        where = "post-treatment cells" if scope == "cells" else "checkpoints after training (event times c - g > 0)"
        missing = self.unbanded(scope)
        why = f"{' and '.join(self.no_variance) or 'a group'} has no sampling variation (se n/a)"
        if n and missing == n:
            return f"{self.a} - {self.b} has no band at any of the {n} {where}: {why}, so no verdict"
        text = (
            f"memorisation of {self.a} exceeds that of {self.b} at {above} of {n} {where}, falls short of it at "
            f"{below} (simultaneous band)"
        )
        return f"{text}; no band at {missing} ({why} there)" if missing else text


def _matched(keys_a: np.ndarray, keys_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, ia, ib = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
    return ia, ib


def _band(theta: np.ndarray, draws: np.ndarray, floor: float, families: list[np.ndarray], alpha: float,
          defined: np.ndarray | None = None) -> dict:  # fmt: skip
    """Robust bootstrap se and a simultaneous critical value per family (classic band) of estimates ``theta``; no se
    (so no band) where ``defined`` is False (a member without a standard error of its own)."""
    se = did.bootstrap_se(draws, floor)
    if defined is not None:
        se = np.where(defined, se, np.nan)
    crit = np.full(len(theta), np.nan)
    for fam in families:
        if fam.any():
            crit[fam] = did.critical_value(did.sup_t(draws, se, fam), alpha)
    band = crit * se
    significant = np.isfinite(band) & (np.abs(theta) > band)
    return {
        "estimate": theta,
        "std_error": se,
        "band_low": theta - band,
        "band_high": theta + band,
        "crit": crit,
        "significant": significant,
    }


def difference(a: str, b: str, ca, cb, alpha: float) -> Difference:
    """Group ``a`` minus group ``b`` from their ``estimate._Cells`` (same draws, same sign)."""
    floor = max(ca.floor, cb.floor)
    big = int(max(ca.cell_step.max(), cb.cell_step.max())) + 1
    ia, ib = _matched(ca.cohort_step * big + ca.cell_step, cb.cohort_step * big + cb.cell_step)
    sign = ca.sign
    theta = sign * (ca.est.att[ia] - cb.est.att[ib])
    pre = ca.pre[ia]
    cell_ok = np.isfinite(ca.se[ia]) & np.isfinite(cb.se[ib])

    def cells() -> pl.DataFrame:
        draws = np.subtract(ca.draws[ia], cb.draws[ib]) * np.float32(sign)
        return pl.DataFrame(
            {
                "cohort": pl.Series(ca.cohort_step[ia], dtype=pl.Int64),
                "checkpoint": pl.Series(ca.cell_step[ia], dtype=pl.Int64),
                "event_time": pl.Series(ca.event[ia], dtype=pl.Int64),
                "pre_treatment": pre,
                **_band(theta, draws, floor, [~pre, pre], alpha, cell_ok),
            }
        )

    ev_a, _, th_a, dr_a, _, se_a = ca.aggregates
    ev_b, _, th_b, dr_b, _, se_b = cb.aggregates
    ja, jb = _matched(ev_a, ev_b)
    post = ev_a[ja] >= 0
    keep = post  # the event-study curve after training: instantaneous (0) and persistent (> 0)
    ja, jb = ja[keep], jb[keep]
    e_theta = sign * (th_a[ja] - th_b[jb])
    e_draws = sign * (dr_a[ja] - dr_b[jb])
    e_ok = np.isfinite(se_a[ja]) & np.isfinite(se_b[jb])
    persistent = pl.DataFrame(
        {
            "event_time": pl.Series(ev_a[ja], dtype=pl.Int64),
            **_band(e_theta, e_draws, floor, [ev_a[ja] > 0], alpha, e_ok),
        }
    )
    o_theta = float(sign * (th_a[-1] - th_b[-1]))
    o_draws = sign * (dr_a[-1] - dr_b[-1])
    o_ok = bool(np.isfinite(se_a[-1]) and np.isfinite(se_b[-1]))
    o_se = float(did.bootstrap_se(o_draws[None], floor)[0]) if o_ok else float("nan")
    z = z_value(alpha)
    overall = {
        "estimate": o_theta,
        "std_error": o_se,
        "ci_low": o_theta - z * o_se,
        "ci_high": o_theta + z * o_se,
        "p_value": float(np.mean(np.abs(o_draws) >= abs(o_theta))) if np.isfinite(o_se) else float("nan"),
    }
    lacking = tuple(
        name
        for name, ok in ((a, np.isfinite(ca.se[ia]).all() and np.isfinite(se_a[ja]).all() and np.isfinite(se_a[-1])),
                         (b, np.isfinite(cb.se[ib]).all() and np.isfinite(se_b[jb]).all() and np.isfinite(se_b[-1])))
        if not ok
    )  # fmt: skip
    return Difference(a=a, b=b, persistent=persistent, overall=overall, _cells=cells, no_variance=lacking)


@dataclass
class Trend:
    """Dose-response: the groups' overall estimates against their mean covariate, with a weighted least-squares
    slope (weights 1 / se^2) and its bootstrap test.

    The slope is a fixed linear combination of the groups' overall estimates, slope = sum_g L_g theta_g, so its
    draws are the same combination of the groups' joint draws (which carry the shared controls' and clusters'
    correlation); its standard error is their robust spread (IQR / 1.349), its p-value the share of draws at least
    as far from 0 as the slope (two-sided; the draws are centred, so this is the bootstrap's law under no trend)."""

    covariate: str
    table: pl.DataFrame  # group, centre, estimate, std_error, band_low, band_high (simultaneous over groups)
    slope: float
    std_error: float
    ci_low: float
    ci_high: float
    p_value: float
    increasing: int  # adjacent groups whose estimate rises
    steps: int  # adjacent pairs

    def sentence(self) -> str:
        return (
            f"trend in {self.covariate}: slope {self.slope:.4g} per unit (se {self.std_error:.3g}, "
            f"interval [{self.ci_low:.4g}, {self.ci_high:.4g}], p = {self.p_value:.3g}); the estimate rises "
            f"at {self.increasing} of {self.steps} steps between adjacent groups"
        )


def trend(covariate: str, names: list[str], centres: np.ndarray, cells: list, alpha: float) -> Trend:
    """The dose-response of ordered groups (their ``estimate._Cells``) on ``centres``."""
    sign = cells[0].sign
    theta = np.array([sign * c.aggregates[2][-1] for c in cells])
    draws = np.stack([sign * c.aggregates[3][-1] for c in cells])
    floor = max(c.floor for c in cells)
    table = pl.DataFrame(
        {"group": names, "centre": centres, **_band(theta, draws, floor, [np.ones(len(names), bool)], alpha)}
    )
    se = table["std_error"].to_numpy()
    ok = np.isfinite(se) & np.isfinite(centres)
    w = np.where(ok, 1 / np.where(ok, se, 1) ** 2, 0.0)
    xbar = (w @ np.where(ok, centres, 0)) / w.sum() if w.sum() else np.nan
    dx = np.where(ok, centres - xbar, 0.0)
    denom = w @ dx**2
    coef = w * dx / denom if denom > 0 else np.full(len(w), np.nan)
    slope = float(coef @ theta)
    slope_draws = coef @ draws
    s_se = float(did.bootstrap_se(slope_draws[None], 0.0)[0]) if np.isfinite(slope) else float("nan")
    z = z_value(alpha)
    return Trend(
        covariate=covariate,
        table=table,
        slope=slope,
        std_error=s_se,
        ci_low=slope - z * s_se,
        ci_high=slope + z * s_se,
        p_value=float(np.mean(np.abs(slope_draws) >= abs(slope))) if np.isfinite(slope) else float("nan"),
        increasing=int((np.diff(theta) > 0).sum()),
        steps=len(theta) - 1,
    )
