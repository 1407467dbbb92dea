"""The ease band of `compare` and the pointwise intervals under both bands, on null panels with a known truth.

Null panels (docs/calibration-study.md's scales: instance level sd 60, white noise sd 8, a common trend), cohort k
first trained at checkpoint k, never-treated controls. Without memorisation every DiD cell is 0 and the ease
(extractable - DiD = the cohort's level at the base plus the controls' change) has expectation trend[c] (the
instance levels have mean 0). Reports, with Monte-Carlo standard errors over panels:

- the ease band's family-wise error (post family; all cells one family), classic against calibrated;
- the pointwise coverage of ci_low/ci_high (profile cells, and the persistent event times) under the classic band
  (z x IQR bootstrap se), the calibrated band before (z x HC1 se) and now (Welch t per cell, bootstrap-t per event
  time); for coverage the Monte-Carlo error is over panels (each panel's share of cells covered).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/ease_calibration.py [--panels 300] [--per-cohort 30 10]
    [--timing SAMPLE.h5]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from memtui.estimation.compare import _ease, compare
from memtui.estimation.estimate import estimate
from memtui.estimation.results import z_value
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel


def null_panel(cohorts: int, per_cohort: int, never: int, checkpoints: int, seed: int) -> tuple[Panel, np.ndarray]:
    """A panel without memorisation and its trend (the ease's expectation at each checkpoint)."""
    rng = np.random.default_rng(seed)
    treatment = np.concatenate([np.repeat(np.arange(1, cohorts + 1), per_cohort), np.full(never, NEVER)])
    n = len(treatment)
    trend = np.linspace(0, 50, checkpoints)
    y = rng.normal(0, 60, (n, 1)) + trend[None, :] + rng.normal(0, 8, (n, checkpoints))
    panel = Panel(ids=np.arange(n), treatment=treatment, steps=np.arange(checkpoints), done=np.ones(checkpoints, bool),
                  metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip
    return panel, trend


def ease_flags(panel: Panel, trend: np.ndarray, settings: Settings) -> dict[str, bool]:
    """Whether the ease band misses the truth anywhere in the post family and in the all-cells family."""
    out = {}
    for family in ("post", "all"):
        frame, _, pre = _ease(panel, replace(settings, family=family))
        truth = trend[frame["checkpoint"].to_numpy()]
        miss = (frame["ease_band_low"].to_numpy() > truth) | (frame["ease_band_high"].to_numpy() < truth)
        out[family] = bool(miss[~pre].any() if family == "post" else miss.any())
    return out


def coverage(res, z_old: bool = False) -> tuple[float, float]:
    """Shares of the profile cells and of the persistent event times whose pointwise interval covers 0."""
    shares = []
    for frame in (res.cells, res.persistent):
        est, se = frame["estimate"].to_numpy(), frame["std_error"].to_numpy()
        lo, hi = frame["ci_low"].to_numpy(), frame["ci_high"].to_numpy()
        if z_old:
            z = z_value(res.settings.alpha)
            lo, hi = est - z * se, est + z * se
        ok = np.isfinite(lo)
        shares.append(float(np.mean((lo[ok] <= 0) & (hi[ok] >= 0))))
    return shares[0], shares[1]


def pct(x: list[float]) -> str:
    a = np.asarray(x, float)
    return f"{100 * a.mean():.1f} ± {100 * a.std(ddof=1) / np.sqrt(len(a)):.1f}"


def run(per_cohort: int, panels: int, draws: int, cohorts: int = 8, checkpoints: int = 10, never: int = 200) -> None:
    rows: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for seed in range(panels):
        panel, trend = null_panel(cohorts, per_cohort, never, checkpoints, seed)
        for band in ("classic", "calibrated"):
            s = Settings(draws=draws, seed=seed + 1, band=band)
            for fam, miss in ease_flags(panel, trend, s).items():
                rows.setdefault(f"ease FWE {fam} {band}", []).append(miss)
            res = estimate(panel, s)
            cells, events = coverage(res)
            rows.setdefault(f"ci cells {band}", []).append(cells)
            rows.setdefault(f"ci persistent {band}", []).append(events)
            if band == "calibrated":
                cells, events = coverage(res, z_old=True)
                rows.setdefault("ci cells calibrated, before (z x HC1 se)", []).append(cells)
                rows.setdefault("ci persistent calibrated, before (z x analytic se)", []).append(events)
    took = (time.perf_counter() - t0) / panels
    print(f"\n{per_cohort}/cohort, {cohorts} cohorts x {checkpoints} checkpoints, {never} never-treated, "
          f"B = {draws}, {panels} panels ({took:.2f} s/panel)")  # fmt: skip
    print("| quantity | % (± MC se) |\n|---|---|")
    for name, vals in rows.items():
        print(f"| {name} | {pct(vals)} |")


def timing(path: str, repeats: int = 3) -> None:
    """One compare of a shipped sample, classic ease vs calibrated ease (the estimators under the calibrated band in
    both), alternated in one process: the ease's own cost, and the whole compare's."""
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(path)
    s = Settings(draws=1000, seed=1)
    best: dict[str, float] = {}
    for _ in range(repeats):
        for band in ("classic", "calibrated"):
            t0 = time.perf_counter()
            _ease(panel, replace(s, band=band))
            best[f"ease {band}"] = min(best.get(f"ease {band}", 1e9), time.perf_counter() - t0)
    t0 = time.perf_counter()
    compare(panel, s)
    whole = time.perf_counter() - t0
    extra = best["ease calibrated"] - best["ease classic"]
    print(f"{path}: ease classic {best['ease classic']:.3f} s, calibrated {best['ease calibrated']:.3f} s "
          f"(ratio {best['ease calibrated'] / best['ease classic']:.2f}); whole calibrated compare {whole:.2f} s, "
          f"so compare with the calibrated ease / with the classic ease = {whole / (whole - extra):.3f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--panels", type=int, default=300)
    ap.add_argument("--draws", type=int, default=999)
    ap.add_argument("--per-cohort", type=int, nargs="+", default=[30, 10])
    ap.add_argument("--timing", nargs="*", default=None)
    a = ap.parse_args()
    if a.timing is not None:
        for path in a.timing:
            timing(path)
        return
    for n in a.per_cohort:
        run(n, a.panels, a.draws)


if __name__ == "__main__":
    main()
