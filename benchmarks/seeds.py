"""Coverage of the pooled estimate across seeds (``estimation.seeds``) on simulated seed suites with a known truth.

    python benchmarks/seeds.py                  # 200 replications per design, B = 500 (a few minutes)
    python benchmarks/seeds.py --reps 50 --draws 300

Each replication simulates S seed panels over the same instances (panel/synthetic_seeds.py: instance-by-checkpoint
effects and instance memorisation strengths shared by every seed, treatment steps shuffled per seed, each panel in
its own row order) and estimates the pooled profile twice: with one multiplier per instance shared by every seed (the
seed as a block) and with independent multipliers per seed (the seeds treated as independent). It prints, per
design, how often:

- the simultaneous band over the post-treatment cells covers every cell of the pooled truth;
- the persistent curve's band (c - g >= 0) covers the truth at every event time;
- the overall average's pointwise interval covers its truth (shared draws; and the independent-seeds standard error);
- the agreement test (largest studentised deviation of a seed from the pooled profile) rejects, per scope: its level
  when the seeds share one truth, its power when seed 0's effect is ``odd`` times the others'.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from memtui.estimation.results import z_value
from memtui.estimation.seeds import estimate_pooled
from memtui.estimation.settings import Settings
from memtui.panel.synthetic_seeds import SeedSimulation, simulate_seeds

SCOPES = ("profile", "instantaneous", "persistent", "residual", "overall")


def truths(sim: SeedSimulation, result) -> dict[str, np.ndarray]:
    """The pooled truth at the result's post cells, event times c - g >= 0 and overall (equal cohort sizes: each
    aggregate is the plain mean of its cells' truths)."""
    tau = sim.pooled_truth()
    base = sim.base
    post = result.cells.filter(~result.cells["pre_treatment"])
    gi = np.searchsorted(base.cohorts, post["cohort"].to_numpy())
    ci = np.searchsorted(base.steps, post["checkpoint"].to_numpy())
    cell_truth = tau[gi, ci]
    event = post["event_time"].to_numpy()
    pers = result.persistent.filter(~result.persistent["pre_treatment"])
    per_event = np.array([cell_truth[event == e].mean() for e in pers["event_time"].to_numpy()])
    return {"cells": cell_truth, "persistent": per_event, "overall": np.array([cell_truth.mean()])}


def covered(result, truth: dict[str, np.ndarray], alpha: float) -> dict[str, bool]:
    post = result.cells.filter(~result.cells["pre_treatment"])
    pers = result.persistent.filter(~result.persistent["pre_treatment"])

    def inside(frame, t) -> bool:
        return bool(np.all((frame["band_low"].to_numpy() <= t) & (t <= frame["band_high"].to_numpy())))

    o = result.summaries["overall"]
    z = z_value(alpha)
    return {
        "profile band": inside(post, truth["cells"]),
        "persistent band": inside(pers, truth["persistent"]),
        "overall interval": abs(o.estimate - truth["overall"][0]) <= z * o.std_error,
        "overall, independent se": abs(o.estimate - truth["overall"][0]) <= z * o.independent_se,
    }


def replicate(sim: SeedSimulation, settings: Settings, reps: int, shared: bool = True) -> dict[str, float]:
    """Coverage (and the agreement test's rejection rate per scope) over ``reps`` replications."""
    hits: dict[str, list[bool]] = {}
    for r in range(reps):
        s = replace(sim, seed=sim.seed + r)
        res = estimate_pooled(simulate_seeds(s), replace(settings, seed=r), shared=shared)
        for key, ok in covered(res, truths(s, res), settings.alpha).items():
            hits.setdefault(key, []).append(ok)
        for scope in SCOPES:
            hits.setdefault(f"reject {scope}", []).append(res.agreement[scope].rejected)
    return {key: float(np.mean(v)) for key, v in hits.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--odd", type=float, default=2.0, help="seed 0's effect as a multiple of the others' (power)")
    args = ap.parse_args()
    settings = Settings(draws=args.draws, band="classic")
    small = SeedSimulation(n_seeds=args.seeds)
    large = replace(small, per_cohort=100, n_never=300)
    flat = replace(small, shared_sd=0.0, effect_sd=0.0, noise_sd=1.2)
    designs = {
        "20/cohort, shared draws": (small, True),
        "20/cohort, independent draws": (small, False),
        "20/cohort, nothing shared": (flat, True),
        f"20/cohort, seed 0 x{args.odd:g}": (replace(small, odd_seed=args.odd), True),
        "100/cohort, shared draws": (large, True),
        "100/cohort, independent draws": (large, False),
        "100/cohort, seed 0 x1.5": (replace(large, odd_seed=1.5), True),
    }
    print(
        f"{args.reps} replications, B = {args.draws}, {args.seeds} seeds, {small.n_cohorts} cohorts (+ "
        f"{small.n_never} or {large.n_never} controls), {small.n_checkpoints} checkpoints, classic band, nominal 95%"
    )
    rows = {}
    for name, (design, shared) in designs.items():
        start = time.perf_counter()
        rows[name] = replicate(design, settings, args.reps, shared)
        print(f"  {name}: {time.perf_counter() - start:.0f} s", flush=True)
    keys = list(next(iter(rows.values())))
    short = {"profile band": "prof.band", "persistent band": "pers.band", "overall interval": "overall",
             "overall, independent se": "ovr.ind.se", **{f"reject {s}": f"rej.{s[:5]}" for s in SCOPES}}  # fmt: skip
    width = max(len(n) for n in rows)
    print()
    print(f"{'design':<{width}} " + " ".join(f"{short[k]:>10}" for k in keys))
    for name, row in rows.items():
        print(f"{name:<{width}} " + " ".join(f"{row[k]:>10.3f}" for k in keys))


if __name__ == "__main__":
    main()
