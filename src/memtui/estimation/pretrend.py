"""The pre-trend check: one joint test that every placebo cell (c < g) is zero (no anticipation, parallel trends
before training), the sup-t over the placebo cells with a standard error.

Its law is the band's own law of the placebo family (``BandDraws.cell_laws``'s ``"pre"``): under ``--band
permutation`` the maximum over the observed labelling and P permutations of the labels (the cohorts' and the
never-trained controls'), so its p-value (the share of the P + 1 labellings whose maximum reaches the observed one)
is exact under the sharp null of no cohort-specific effect anywhere (placebo and post-treatment cells alike). Where
there is memorisation after training it is not exact (the permuted rows carry it into other groups' placebo cells,
the permuted controls' as much as the cohorts', so it cancels in expectation), measured at 3-5 % with effects in every
cohort (docs/calibration-study.md, "The permutation band's constructions"); with the controls fixed it reached 16 %
at 30 per cohort, and rows centred by their cohort's post-treatment estimates made the law too narrow (14 %). Under
the bootstrap bands, the studentised (calibrated) or fixed-se (classic) bootstrap law.
"""

from __future__ import annotations

import numpy as np

from memtui.engine import did
from memtui.estimation.results import Pretrend


def pretrend(draws, se, att, pre, alpha: float, law: np.ndarray | None = None) -> Pretrend:
    """Joint sup-t test of the placebo cells ``pre`` (no anticipation => all zero) from the band's law of their
    maximum (``law``; without it, the fixed-se sup-t of ``draws``); no test without draws or placebo cells."""
    none = Pretrend(n_cells=int(pre.sum()))
    if draws is None or not pre.any():
        return none
    ok = pre & np.isfinite(se)
    if not ok.any():
        return none
    stat = float(np.max(np.abs(att[ok]) / se[ok]))
    law = did.sup_t(draws, se, ok) if law is None else law  # the same law: sup-t over the pre cells with an se
    crit = did.critical_value(law, alpha)
    return Pretrend(
        n_cells=int(pre.sum()),
        sup_t=stat,
        p_value=float(np.mean(law >= stat)),
        crit=crit,
        n_significant=int(np.sum(np.abs(att[ok]) / se[ok] > crit)),
    )
