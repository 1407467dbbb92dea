"""Which permutation construction keeps the permutation band's level without paying for other cohorts' effects
(issue 29): every construction's post family-wise error, pre-trend rejections and power on the same panels.

    python benchmarks/permutation_constructions.py --skewed 30 --panels 200             # the skewed null
    python benchmarks/permutation_constructions.py --skewed 100 --effect 0.2 --panels 100 --calibrated
    python benchmarks/permutation_constructions.py --placebo sample_panels/suite-neox-41k.h5 --panels 100

Constructions (numpy, written here from the estimate's own formulas: the cell's estimate is its cohort's mean change
from the base less the controls', its variance the cohort's centred changes' sum of squares over n^2 plus the
controls'):

- ``treated``: the band as built before this study: the treated instances' cohort labels permuted (sizes kept), the
  never-trained controls fixed. Exact under no memorisation anywhere; a permuted cohort holds instances of cohorts
  treated inside its window, whose effects shift its estimate (the controls have none), so the law widens.
- ``all``: the labels of every instance permuted, the never-trained controls' label ("never") included, sizes kept.
  Exact under the same null where the controls are part of the randomised order (drawn from the shuffled order past
  the last trained step: ``--controls beyond``, the default of every shuffled order). A permuted cohort and the
  permuted controls draw the treated instances alike, so the effects they carry cancel in expectation: the law is not
  shifted, only widened by the effects' spread (small against the noise for effects of the noise's size).
- ``all-fixedvar``: ``all`` with the controls' part of each cell's variance label-invariant (the change's variance
  over every instance, over the controls' size): what the compiled loop computes without a per-permutation gram.
- ``pool``: per cell (g, c), only the instances exchangeable under that cell's own null (cohort g, the cohorts not
  yet treated at c, the controls) relabelled: each cell's test exact under its own null alone; one uniform order of
  the instances per cohort (cells of one cohort stay coupled) and one for the controls (shared by every cell).

Counted per panel: the post family flags a cell (|t| above the (1 - alpha) quantile of the P + 1 maxima), the
pre-trend test rejects (its p-value, the share of the P + 1 placebo maxima reaching the observed one, below alpha),
and the share of post cells flagged (power where every post cell has an effect). ``--calibrated`` adds the calibrated
band through ``memtui.estimation.estimate`` on the same panels (B = ``--draws``). ± is one Monte-Carlo s.e.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placebo as pb  # noqa: E402

from memtui.engine.layout import build_layout  # noqa: E402
from memtui.panel.model import NEVER  # noqa: E402

CONSTRUCTIONS = ("treated", "all", "all-fixedvar", "pool")


class Cells:
    """One panel's cells: per instance (rows in group order) its change over each cell's window, the cohorts."""

    def __init__(self, panel):
        y = panel.values("loglik")
        lay = build_layout(y, panel.treatment, panel.steps, never=NEVER)
        self.lay = lay
        self.d = lay.y[:, lay.cell_t] - lay.y[:, lay.cell_b]  # (units, cells)
        self.group = np.repeat(np.arange(lay.n_groups), lay.group_n)  # 0: never trained
        self.h = np.repeat(lay.group_index, lay.group_n)  # treatment column (NEVER_INDEX: controls)
        self.cell_g = lay.cell_group
        self.pre = lay.cell_pre
        self.n = lay.group_n.astype(float)
        self.fixed_cvar = self.d.var(axis=0) / self.n[0]  # label-invariant control variance (all-fixedvar)

    def stats(self, label: np.ndarray, fixed_var: bool = False) -> np.ndarray:
        """|t| per cell under ``label`` (each instance's group)."""
        g = self.cell_g
        out = np.empty(self.d.shape[1])
        ctrl = label == 0
        dc = self.d[ctrl]
        mc = dc.mean(axis=0)
        vc = self.fixed_cvar if fixed_var else ((dc - mc) ** 2).sum(axis=0) / self.n[0] ** 2
        for k in np.unique(g):
            cells = np.flatnonzero(g == k)
            dk = self.d[label == k][:, cells]
            m = dk.mean(axis=0)
            v = ((dk - m) ** 2).sum(axis=0) / self.n[k] ** 2
            out[cells] = np.abs(m - mc[cells]) / np.sqrt(v + vc[cells])
        return out

    def pool_stats(self, orders: np.ndarray, ctrl_order: np.ndarray) -> np.ndarray:
        """|t| per cell with each cell's own exchangeable pool relabelled: ``orders[k]`` a uniform order of the
        instances for group k's cells, ``ctrl_order`` the controls' (shared)."""
        out = np.empty(self.d.shape[1])
        n_c = int(self.n[0])
        for k in np.unique(self.cell_g):
            cells = np.flatnonzero(self.cell_g == k)
            own = self.lay.group_index[k]
            t = self.lay.cell_t[cells]
            # cell (g, c) post: its pool is cohort g, the cohorts treated after c, the controls; a placebo cell (base
            # c - 1): the cohorts treated after c (g among them) and the controls
            hi = self.h[orders[k]]
            elig = (hi[:, None] > t[None, :]) | (hi[:, None] == own)
            pick = elig & (np.cumsum(elig, axis=0) <= self.n[k])
            mine = np.zeros_like(pick)
            mine[orders[k]] = pick
            rest = (self.h[ctrl_order][:, None] > t[None, :]) | (self.h[ctrl_order][:, None] == own)
            rest &= ~mine[ctrl_order]
            ctl = np.zeros_like(pick)
            ctl[ctrl_order] = rest & (np.cumsum(rest, axis=0) <= n_c)
            dk = self.d[:, cells]
            out[cells] = _t(dk, mine, self.n[k], ctl, n_c)
        return out


def _t(d: np.ndarray, a: np.ndarray, na: float, b: np.ndarray, nb: float) -> np.ndarray:
    ma, mb = (d * a).sum(0) / na, (d * b).sum(0) / nb
    va = (((d - ma) ** 2) * a).sum(0) / na**2
    vb = (((d - mb) ** 2) * b).sum(0) / nb**2
    return np.abs(ma - mb) / np.sqrt(va + vb)


def laws(c: Cells, how: str, draws: int, rng: np.random.Generator):
    """Observed |t| per cell and the P + 1 maxima over the post and the placebo cells."""
    post, pre = ~c.pre, c.pre
    observed = c.stats(c.group)
    top = np.empty((draws + 1, 2))
    top[0] = observed[post].max(), observed[pre].max() if pre.any() else 0
    treated = np.flatnonzero(c.group > 0)
    for j in range(1, draws + 1):
        if how == "treated":
            label = c.group.copy()
            label[treated] = c.group[rng.permutation(treated)]
            t = c.stats(label)
        elif how in ("all", "all-fixedvar"):
            t = c.stats(c.group[rng.permutation(len(c.group))], fixed_var=how == "all-fixedvar")
        else:
            orders = [rng.permutation(len(c.group)) for _ in range(c.lay.n_groups)]
            t = c.pool_stats(orders, rng.permutation(len(c.group)))
        top[j] = t[post].max(), t[pre].max() if pre.any() else 0
    if how == "all-fixedvar":  # the observed statistic with the same (label-invariant) controls' variance
        observed = c.stats(c.group, fixed_var=True)
        top[0] = observed[post].max(), observed[pre].max() if pre.any() else 0
    return observed, top


def crit(law: np.ndarray, alpha: float) -> float:
    return float(np.quantile(law, 1 - alpha, method="inverted_cdf"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skewed", type=int, metavar="N")
    ap.add_argument("--effect", type=float, default=0.0)
    ap.add_argument("--placebo", metavar="PANEL", nargs="*", default=[])
    ap.add_argument("--panels", type=int, default=100)
    ap.add_argument("--draws", type=int, default=199)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--how", default=",".join(CONSTRUCTIONS))
    ap.add_argument("--calibrated", action="store_true", help="the calibrated band on the same panels too")
    args = ap.parse_args()
    hows = args.how.split(",")
    args.skewed = args.skewed or 0
    args.panels_ = args.placebo
    args.panels, n = args.placebo, args.panels
    args.n, args.metric, args.cohorts, args.per_cohort = n, "loglik", None, None
    srcs = pb.sources(args)
    names = [*hows, *(["calibrated"] if args.calibrated else [])]
    hits = {h: np.zeros(4) for h in names}
    total, began = 0, time.perf_counter()
    settings = pb.band_settings("calibrated", args.draws, args.alpha) if args.calibrated else None
    for k, (label, make) in enumerate(srcs):
        print(label, flush=True)
        for i in range(n):
            rng = np.random.default_rng([args.seed, k, i])
            panel = make(rng)
            seed = int(rng.integers(2**31))
            c = Cells(panel)
            post = ~c.pre
            for h in hows:
                observed, top = laws(c, h, args.draws, np.random.default_rng([seed, 7]))
                cv = crit(top[:, 0], args.alpha)
                share = float(np.mean(observed[post] > cv))
                p_pre = float(np.mean(top[:, 1] >= top[0, 1]))
                hits[h] += (share > 0, p_pre < args.alpha, share, share**2)
            if settings is not None:
                got = pb.flags(panel, settings, seed)
                hits["calibrated"] += (got[0], got[1], got[2], got[2] ** 2)
        total += n
    print(f"\n{total} panels, P = {args.draws}, alpha {args.alpha:g}, seed {args.seed}, "
          f"{time.perf_counter() - began:.0f} s\n")  # fmt: skip
    print("| construction | panels | post family-wise error (%) | pre-trend rejections (%) | post cells flagged (%) |")
    print("|---|---|---|---|---|")
    for h in names:
        post, pre, cells, squares = hits[h]
        mean = cells / total
        spread = math.sqrt(max(squares / total - mean**2, 0) / max(total - 1, 1))
        print(f"| {h} | {total} | {pb.rate(int(post), total)} | {pb.rate(int(pre), total)} | "
              f"{100 * mean:.1f} ± {100 * spread:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
