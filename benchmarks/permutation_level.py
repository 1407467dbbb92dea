"""Level, strong control and power of the permutation band against the calibrated band, on panels with a known truth
(docs/methods.md, "The permutation band"; docs/estimation.md's band table).

    python benchmarks/permutation_level.py            # the table the docs quote (about 30 minutes on one core)
    python benchmarks/permutation_level.py --quick    # a small version (about two minutes)

Every panel runs through ``memtui.estimation.estimate`` as a user runs it, once per band (P = B = ``--draws``, seed =
the panel's), on the same data. Rows:

- **null, skewed persistent noise**: benchmarks/skewed_noise.py's ``rwexp`` design (a random walk of centred
  exponential steps, instance levels N(0, 1)), 20 cohorts x 21 checkpoints, 200 never-trained; no effect anywhere.
  Counted per panel: the post band flags a cell (family-wise error), the pre-trend check rejects (p < alpha).
- **partial null**: the same noise, an effect at c = g only (``--transient`` times the noise's step sd, every cohort):
  family-wise error over the null post cells (c > g), strong control.
Columns: the permutation band (every instance's label relabelled, the never-trained controls' included), the
treated labels alone relabelled with the controls fixed (``PermutationBand.controls`` off: the band before issue 29's
construction study), its centred law (each treated row less its own cohort's estimated post-treatment effects
before relabelling: ``PermutationBand.centred``, off in the band) and the calibrated band.

- **power**: benchmarks/calibration.py's panels (white noise sd 8, instance sd 60) with its profile (peak 12 x effect,
  decaying to 15 %) at effect ``--effect`` (the issue's delta), 100 per cohort, 20 x 21: the share of the truly
  non-zero post cells each band flags, and the family-wise error of the pre-trend check.

Monte-Carlo standard error of a share p over R panels: sqrt(p (1 - p) / R). Runs on one thread.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.calibration import Design, panel_arrays  # noqa: E402
from benchmarks.skewed_noise import noise  # noqa: E402
from memtui.engine.band_permutation import PERMUTATION  # noqa: E402
from memtui.estimation.estimate import estimate  # noqa: E402
from memtui.estimation.settings import Settings  # noqa: E402
from memtui.panel.model import NEVER, Panel  # noqa: E402

# the columns: the permutation band (every label relabelled, the controls' included: exact under the sharp null), the
# treated labels alone (controls fixed), its centred law (each treated row less its own cohort's estimated
# post-treatment effects first: engine.permutations.centre_rows, off in the band) and the calibrated band
BANDS = ("permutation", "treated", "centred", "calibrated")


def run_band(panel, band: str, settings: dict, seed: int):
    """One estimate under ``band`` (a column of ``BANDS``); "treated" and "centred" run the permutation band with the
    controls fixed or its law centred (the registered band's switches, put back after)."""
    if band not in ("centred", "treated"):
        return estimate(panel, Settings(band=band, seed=seed, **settings))
    switch = "centred" if band == "centred" else "controls"
    before = getattr(PERMUTATION, switch)
    setattr(PERMUTATION, switch, not before)
    try:
        return estimate(panel, Settings(band="permutation", seed=seed, **settings))
    finally:
        setattr(PERMUTATION, switch, before)


def skewed_panel(seed: int, per: int, transient: float = 0.0, cohorts: int = 20, never: int = 200, t: int = 21):
    """A panel of skewed persistent noise (``rwexp``), cohort k first trained at checkpoint k; with ``transient``, an
    effect at c = g only. Returns the panel and, per instance, its cohort's checkpoint index (-1: never)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 1000
    treatment = np.concatenate([np.repeat(steps[1 : cohorts + 1], per), np.full(never, NEVER)])
    y = rng.normal(0, 1, (len(treatment), 1)) + noise(rng, "rwexp", len(treatment), t)
    if transient:
        k = np.arange(cohorts * per) // per + 1  # cohort k's checkpoint index
        y[np.arange(cohorts * per), k] += transient / np.sqrt(t)  # the steps' sd is 1 / sqrt(t)
    return _panel(y, treatment, steps)


def _panel(y, treatment, steps) -> Panel:
    return Panel(ids=np.arange(len(treatment)), treatment=treatment, steps=steps, done=np.ones(len(steps), bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


def flagged(result, cells=None) -> bool:
    """Whether the post band flags a post-treatment cell (of those ``cells`` select, a boolean over post cells)."""
    post = result.cells.filter(~result.cells["pre_treatment"])
    sig = post["significant"].to_numpy()
    return bool(sig[cells].any() if cells is not None else sig.any())


def run(settings: dict, make, reps: int, seed0: int, count) -> dict:
    """Per band, the share of ``reps`` panels (``make(seed)``) for which ``count(result)`` holds (or its mean)."""
    got = {band: [] for band in BANDS}
    for r in range(reps):
        panel = make(seed0 + r)
        for band in BANDS:
            result = run_band(panel, band, settings, seed0 + r)
            got[band].append(count(result))
    return {band: np.asarray(v, float) for band, v in got.items()}


def share(x: np.ndarray) -> str:
    p = float(np.mean(x))
    return f"{100 * p:.1f} ± {100 * np.sqrt(max(p * (1 - p), 1e-12) / len(x)):.1f} %"


def _mean(x: np.ndarray) -> str:
    """A mean share over panels with its Monte-Carlo standard error (the panels' spread over sqrt(R))."""
    return f"{100 * x.mean():.1f} ± {100 * x.std(ddof=1) / np.sqrt(len(x)):.1f} %"


def rows(args) -> list[str]:
    out = []
    common = {"draws": args.draws}
    null = run(common, lambda s: skewed_panel(s, 30), args.reps, 0, lambda r: (flagged(r), r.pretrend.p_value < 0.05))
    for i, what in enumerate(("post family, family-wise error", "pre-trend check rejects")):
        out.append(
            f"| null, rwexp 30/cohort 20x21 | {what} | {args.reps} | "
            + " | ".join(share(null[b][:, i]) for b in BANDS)
            + " |"
        )

    def partial(result) -> bool:
        post = result.cells.filter(~result.cells["pre_treatment"])
        return flagged(result, (post["checkpoint"] > post["cohort"]).to_numpy())

    transient = run(common, lambda s: skewed_panel(50_000 + s, 30, args.transient), args.reps, 50_000, partial)
    out.append(
        f"| partial null: effect {args.transient:g} sd at c = g, rwexp 30/cohort | family-wise error over the null "
        f"cells c > g | {args.reps} | " + " | ".join(share(transient[b]) for b in BANDS) + " |"
    )
    design = Design("100/cohort, 20x21", 20, 100, 200, 21, args.power_reps)
    for effect in args.effect:
        out += _power(design, effect, args.power_reps, common)
    return out


def _power(design, effect: float, reps: int, common: dict) -> list[str]:
    def power_panel(seed: int):
        y, treatment, steps, _ = panel_arrays(design, seed, effect)
        return _panel(y, treatment, steps)

    def true_cells(result) -> tuple[float, bool]:
        post = result.cells.filter(~result.cells["pre_treatment"])
        return float(post["significant"].to_numpy().mean()), result.pretrend.p_value < 0.05

    power = run(common, power_panel, reps, 10_000, true_cells)
    return [
        f"| power: effect {effect:g} (peak {12 * effect:g}, noise sd 8), 100/cohort 20x21 | share of the true (post) "
        f"cells flagged | {reps} | " + " | ".join(_mean(power[b][:, 0]) for b in BANDS) + " |",
        f"| same panels | pre-trend check rejects | {reps} | "
        + " | ".join(share(power[b][:, 1]) for b in BANDS)
        + " |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 panels a row, P = B = 199")
    parser.add_argument("--reps", type=int, default=400, help="panels of each null row [400]")
    parser.add_argument("--power-reps", type=int, default=200, help="panels of the power row [200]")
    parser.add_argument("--draws", type=int, default=999, help="permutations P and bootstrap draws B [999]")
    parser.add_argument("--transient", type=float, default=3.0, help="partial null's effect at c = g, in step sds [3]")
    parser.add_argument("--effect", type=lambda v: [float(x) for x in v.split(",")], default=[0.5, 1.0],
                        help="power rows' effects (calibration.py's units), comma-separated [0.5,1]")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.reps, args.power_reps, args.draws = 40, 20, 199
    start = time.perf_counter()
    print(f"| design | what | panels | {' | '.join(BANDS)} |")
    print("|---|---|---:|" + "---:|" * len(BANDS))
    for row in rows(args):
        print(row, flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s; P = B = {args.draws}, alpha 0.05")


if __name__ == "__main__":
    main()
