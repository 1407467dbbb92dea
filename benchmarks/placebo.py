"""Real-noise placebo panels: the family-wise error of every band on a panel's own never-trained rows (issue 29).

    python benchmarks/placebo.py sample_panels/tiny-gptneox.h5 sample_panels/suite-neox-*.h5 --panels 100
    python benchmarks/placebo.py PANEL.h5 --band permutation --panels 400 --seed 1
    python benchmarks/placebo.py --skewed 30 --panels 400                 # the skewed random walk, no real panel
    python benchmarks/placebo.py --skewed 100 --effect 0.2 --panels 100   # its power: the share of true cells flagged

A placebo panel keeps the noise real and makes the truth known: its instances are the never-trained rows of a real
panel (no model ever trained on them), given fake cohorts at random: ``--cohorts`` fake training steps (evenly spread
over the completed checkpoints after the first), ``--per-cohort`` instances each, drawn without replacement; the rest
stay never-trained controls. No instance was trained at its fake step, so every cell's true effect is zero and any
flagged cell is a false positive, while the noise (the checkpoints' real movements, their skew, their correlation over
training) is the model's own.

Each placebo panel is estimated exactly as ``memtui estimate`` estimates it (``estimation.estimate`` with the band's
settings, B draws, the panel's seed), once per band (``--band``: any band of the registry, default all). Counted per
panel: whether the post band flags a post-treatment cell (the family-wise error, ``post``) and whether the pre-trend
test rejects (``pretrend``). Printed: a markdown row per band with each rate and its Monte-Carlo standard error
sqrt(p (1 - p) / R), over every panel of every source panel; a band that refuses the settings is a row saying why.
Panel i of source panel k is seeded by (``--seed``, k, i): the same command gives the same table.

``--skewed N`` replaces the real panels by issue 29's skewed design (benchmarks/skewed_noise.py's ``rwexp``): 20
cohorts of N, 200 never-trained, 21 checkpoints, each instance a level plus a random walk of centred exponential
steps (variance 1/21 each: skewed, persistent changes). ``--effect D`` adds D to every treated instance from its
cohort's step on (every post-treatment cell's truth is D) and reports each band's power: the share of post cells it
flags, averaged over panels.
"""

from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per run; set before numpy loads BLAS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from memtui.core.errors import MemtuiError  # noqa: E402
from memtui.engine.band_registry import BANDS  # noqa: E402
from memtui.estimation.estimate import estimate  # noqa: E402
from memtui.estimation.settings import Settings  # noqa: E402
from memtui.panel.hdf5 import read_panel  # noqa: E402
from memtui.panel.model import NEVER, Panel  # noqa: E402


def never_rows(panel: Panel, metric: str) -> np.ndarray:
    """The panel's never-trained rows of ``metric`` over its completed checkpoints, those with every value."""
    y = panel.values(metric)[panel.treatment == NEVER]
    return y[np.isfinite(y).all(axis=1)]


def placebo(y: np.ndarray, steps: np.ndarray, cohorts: int, per_cohort: int, rng: np.random.Generator) -> Panel:
    """One placebo panel: the rows ``y`` with ``cohorts`` fake cohorts of ``per_cohort`` at random, the rest never
    trained (a fake cohort's step: one of ``cohorts`` checkpoints evenly spread after the first)."""
    fake = steps[np.unique(np.linspace(1, len(steps) - 1, cohorts).round().astype(int))]
    treatment = np.full(len(y), NEVER, dtype=np.int64)
    chosen = rng.permutation(len(y))[: len(fake) * per_cohort]
    treatment[chosen] = np.repeat(fake, per_cohort)
    # stored under the estimate's default metric name whatever it was: a band's flags do not depend on the sign
    return Panel(ids=np.arange(len(y)), treatment=treatment, steps=steps, done=np.ones(len(steps), bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


def skewed(per_cohort: int, effect: float, rng: np.random.Generator) -> Panel:
    """Issue 29's skewed design (module docstring): 20 cohorts of ``per_cohort``, 200 never-trained, 21 checkpoints."""
    t = 21
    steps = np.arange(t) * 1000
    treatment = np.concatenate([np.repeat(steps[1:21], per_cohort), np.full(200, NEVER)])
    n = len(treatment)
    y = rng.normal(0, 1, (n, 1)) + np.cumsum(rng.exponential(1, (n, t)) - 1, axis=1) / math.sqrt(t)
    y += effect * ((treatment[:, None] != NEVER) & (steps[None, :] >= treatment[:, None]))
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool), metrics={"loglik": y},
                 signs={"loglik": 1})  # fmt: skip


def design(n_never: int, checkpoints: int, cohorts: int | None, per_cohort: int | None) -> tuple[int, int]:
    """The fake design: by default up to 8 cohorts, and half the never-trained rows split among them (32 per cohort on
    the shipped real panels' 512: about the 30 per cohort of the calibration study's designs)."""
    cohorts = cohorts or min(8, checkpoints - 1)
    per_cohort = per_cohort or max(2, n_never // (2 * cohorts))
    if cohorts < 1 or cohorts > checkpoints - 1:
        raise SystemExit(f"--cohorts must be from 1 to {checkpoints - 1} (the completed checkpoints after the first)")
    if cohorts * per_cohort >= n_never:
        raise SystemExit(f"{cohorts} cohorts of {per_cohort} leave no control among {n_never} never-trained rows")
    return cohorts, per_cohort


def band_settings(band: str, draws: int, alpha: float) -> Settings | str:
    """The settings a band runs placebos with, or why it refuses them (its one-line error)."""
    try:
        return Settings(band=band, draws=draws, alpha=alpha)
    except MemtuiError as exc:
        return str(exc)


def flags(panel: Panel, settings: Settings, seed: int) -> tuple[bool, bool, float]:
    """Whether the post band flags a cell, whether the pre-trend test rejects, as `memtui estimate` runs them, and the
    share of post cells flagged (the power, where every post cell has an effect)."""
    from dataclasses import replace

    res = estimate(panel, replace(settings, seed=seed))
    post = res.cells.filter(~res.cells["pre_treatment"])["significant"].to_numpy()
    p = res.pretrend.p_value
    return bool(post.any()), bool(np.isfinite(p) and p < settings.alpha), float(post.mean())


def rate(hits: int, n: int) -> str:
    p = hits / n
    return f"{100 * p:.1f} ± {100 * math.sqrt(max(p * (1 - p), 0.25 / n) / n):.1f}"


def sources(args) -> list[tuple[str, object]]:
    """Each source of panels: its label and a function of an rng giving one panel."""
    if args.skewed:
        label = f"skewed random walk, 20 cohorts of {args.skewed}, 200 never, 21 checkpoints, effect {args.effect:g}"
        return [(label, lambda rng: skewed(args.skewed, args.effect, rng))]
    if args.effect:
        raise SystemExit("--effect needs --skewed: a placebo's truth is zero by design")
    out = []
    for path in args.panels:
        panel = read_panel(path)
        y, steps = never_rows(panel, args.metric), panel.done_steps
        cohorts, per = design(len(y), len(steps), args.cohorts, args.per_cohort)
        label = (f"{path}: {len(y)} never-trained rows, {len(steps)} checkpoints -> {cohorts} fake cohorts of {per}, "
                 f"{len(y) - cohorts * per} controls")  # fmt: skip
        out.append((label, lambda rng, y=y, steps=steps, c=cohorts, p=per: placebo(y, steps, c, p, rng)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("panels", nargs="*", help="panels whose never-trained rows make the placebos")
    ap.add_argument("--band", choices=["all", *BANDS], default="all", help="the band to measure [all]")
    ap.add_argument("--panels", dest="n", type=int, default=100, help="placebo panels per source panel [100]")
    ap.add_argument("--metric", default="loglik")
    ap.add_argument("--cohorts", type=int, help="fake cohorts [up to 8]")
    ap.add_argument("--per-cohort", type=int, help="instances per fake cohort [half the never-trained rows split]")
    ap.add_argument("--skewed", type=int, metavar="N", help="issue 29's skewed design with N per cohort instead")
    ap.add_argument("--effect", type=float, default=0.0, help="with --skewed: every post cell's true effect [0]")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.n < 1 or not (args.panels or args.skewed):
        raise SystemExit("give panels (or --skewed N) and --panels of at least 1")
    names = tuple(BANDS) if args.band == "all" else (args.band,)
    settings = {b: band_settings(b, args.draws, args.alpha) for b in names}
    hits = {b: [0, 0, 0.0, 0.0] for b in names}  # post flags, pre-trend rejections, share of post cells and its square
    total, began = 0, time.perf_counter()
    for k, (label, make) in enumerate(sources(args)):
        print(label, flush=True)
        for i in range(args.n):
            rng = np.random.default_rng([args.seed, k, i])
            panel = make(rng)
            seed = int(rng.integers(2**31))
            for b, s in settings.items():
                if isinstance(s, Settings):
                    got = flags(panel, s, seed)
                    for j, value in enumerate((*got, got[2] ** 2)):
                        hits[b][j] += value
        total += args.n
    took = time.perf_counter() - began
    print(f"\n{total} panels ({args.n} per source), B = {args.draws}, alpha {args.alpha:g}, seed {args.seed}, "
          f"{args.metric}; {took:.0f} s\n")  # fmt: skip
    print("| band | panels | post family-wise error (%) | pre-trend rejections (%) | post cells flagged (%) |")
    print("|---|---|---|---|---|")
    for b, s in settings.items():
        if isinstance(s, Settings):
            post, pre, cells, squares = hits[b]
            mean = cells / total
            spread = math.sqrt(max(squares / total - mean**2, 0) / max(total - 1, 1))  # MC error of the mean share
            print(
                f"| {b} | {total} | {rate(post, total)} | {rate(pre, total)} | {100 * mean:.1f} ± {100 * spread:.1f} |"
            )
        else:
            print(f"| {b} | - | refused: {s} | | |")


if __name__ == "__main__":
    main()
