"""Null panels with skewed or persistent residuals: family-wise error of the calibrated post band (the studentised
sup-|t| bootstrap) against an equal-tailed bootstrap-t (max t and max -t over the post cells, each at alpha/2).

    python benchmarks/skewed_noise.py                      # the designs of docs/calibration-study.md, 400 panels each
    python benchmarks/skewed_noise.py --reps 100 --designs 20,30,200,21,rwexp

A design is ``cohorts,per_cohort,never,checkpoints,noise``; noise: ``normal``; ``exp`` / ``lognormal`` (iid skewed,
standardised); ``scalemix`` (normal with a lognormal scale per instance); ``rwnorm`` / ``rwexp`` (a random walk of
normal / centred exponential steps: skewed *changes*); ``slopes`` (normal plus an exponential slope per instance).
No effect anywhere: every flagged post cell is a false positive. The studentised draws are formed exactly as
``engine.bands`` forms them (the per-draw variance re-centred by T*^2 / (n_T - 1) and C*^2 / (n_C - 1)) in
``did.bootstrap_shared``'s own callback, so the symmetric column is memtui's calibrated band (checked: the same
critical value as ``bands.calibrated_bootstrap`` to float32 precision). ``--mammen`` adds the skew-aware variants of
``engine.skewed`` (Mammen multipliers, each draw's variance re-estimated: issue 22), on the same panels and seeds.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from memtui.engine import bands, did, skewed  # noqa: E402
from memtui.engine.layout import build_layout  # noqa: E402
from memtui.panel.model import NEVER  # noqa: E402

# the skew-aware band's variants (engine.skewed): control part re-estimated exactly, or re-centred only
MAMMEN = {"none": (), "all": skewed.VARIANCES, "exact,recentred": ("exact", "recentred")}
MAMMEN.update({v: (v,) for v in skewed.VARIANCES})
DESIGNS = (
    "20,30,200,21,normal 20,30,200,21,exp 20,30,200,21,lognormal 20,30,200,21,scalemix 20,30,200,21,rwnorm "
    "20,30,200,21,rwexp 20,100,200,21,rwexp 20,30,200,21,slopes 40,48,512,41,lognormal 40,48,512,41,slopes"
)


def noise(rng: np.random.Generator, kind: str, n: int, t: int) -> np.ndarray:
    if kind == "normal":
        return rng.normal(0, 1, (n, t))
    if kind == "exp":
        return rng.exponential(1, (n, t)) - 1
    if kind == "lognormal":  # sigma 1, standardised
        return (rng.lognormal(0, 1, (n, t)) - np.exp(0.5)) / np.sqrt((np.e - 1) * np.e)
    if kind == "scalemix":
        return rng.normal(0, 1, (n, t)) * rng.lognormal(0, 1, (n, 1)) / np.e
    if kind == "rwnorm":
        return np.cumsum(rng.normal(0, 1, (n, t)), axis=1) / np.sqrt(t)
    if kind == "rwexp":
        return np.cumsum(rng.exponential(1, (n, t)) - 1, axis=1) / np.sqrt(t)
    if kind == "slopes":
        return rng.normal(0, 1, (n, t)) + (rng.exponential(1, (n, 1)) - 1) * np.arange(t)[None, :] / t * 3
    raise SystemExit(f"unknown noise {kind!r}")


def flags(seed: int, cohorts: int, per: int, never: int, t: int, kind: str, draws: int, alpha: float, mammen: str):
    """Whether the symmetric and the equal-tailed band flag a post cell of one null panel."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 1000
    treatment = np.concatenate([np.repeat(steps[1 : cohorts + 1], per), np.full(never, NEVER)])
    y = rng.normal(0, 1, (len(treatment), 1)) + noise(rng, kind, len(treatment), t)
    lay = build_layout(y, treatment, steps, never=NEVER)
    est = did.point_estimates(lay)
    var = bands.cell_variances(lay, est)
    post = ~lay.cell_pre
    k_t = 1 / (var.n_t - 1)
    k_c = np.divide(1, var.n_c - 1, out=np.zeros_like(var.n_c), where=var.n_c > 1)
    total = var.var_t + var.var_c
    top, bottom = np.full(draws, -np.inf), np.full(draws, -np.inf)

    def studentise(j, start, block, treated, ctrl, out):
        p = post[block]
        if not p.any():
            return
        den = total[block, None] - k_t[block, None] * treated.astype(float) ** 2 - k_c[block, None] * ctrl**2
        t_star = (out / np.sqrt(np.maximum(den, 1e-300)))[p]
        span = slice(start, start + out.shape[1])
        np.maximum(top[span], t_star.max(axis=0), out=top[span])
        np.maximum(bottom[span], (-t_star).max(axis=0), out=bottom[span])

    did.bootstrap_shared([lay], [est], draws=draws, seed=seed, on_chunk=studentise)
    t_obs = est.att[post] / var.se[post]
    crit = np.quantile(np.maximum(top, bottom), 1 - alpha, method="inverted_cdf")
    hi, lo = (np.quantile(x, 1 - alpha / 2, method="inverted_cdf") for x in (top, bottom))
    out = [bool(np.any(np.abs(t_obs) > crit)), bool(np.any((t_obs > hi) | (-t_obs > lo)))]
    for variance in MAMMEN[mammen]:
        laws = skewed.skewed_bootstrap(lay, est, var, [post], draws=draws, seed=seed, variance=variance)[1]
        for tails in ("symmetric", "equal"):
            up, down = skewed.critical_values(laws, 0, alpha, tails)
            out.append(bool(np.any((t_obs > up) | (-t_obs > down))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--designs", default=DESIGNS, help="space-separated cohorts,per_cohort,never,checkpoints,noise")
    ap.add_argument("--mammen", choices=tuple(MAMMEN), default="all", help="the skew-aware band's variants to add")
    args = ap.parse_args()
    print(f"{args.reps} null panels per design, B = {args.draws}, family post, alpha 0.05\n")
    names = ["symmetric (calibrated)", "equal-tailed"]
    names += [f"Mammen {v} {tails}" for v in MAMMEN[args.mammen] for tails in ("symmetric", "equal-tailed")]
    print("| design | noise | " + " | ".join(names) + " |\n|---|---|" + "---|" * len(names))
    for spec in args.designs.split():
        *sizes, kind = spec.split(",")
        hits = np.array(
            [flags(1000 + s, *map(int, sizes), kind, args.draws, 0.05, args.mammen) for s in range(args.reps)]
        )
        rate, mc = hits.mean(axis=0), np.sqrt(hits.mean(axis=0) * (1 - hits.mean(axis=0)) / args.reps)
        size = f"{sizes[0]} cohorts of {sizes[1]}, {sizes[2]} never, {sizes[3]} checkpoints"
        cells = " | ".join(f"{r:.1%} ± {e:.1%}" for r, e in zip(rate, mc, strict=True))
        print(f"| {size} | {kind} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
