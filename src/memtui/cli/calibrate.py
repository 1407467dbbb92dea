"""`memtui calibrate`: the family-wise error of each band family at a panel's own design, on simulated null panels
matched to it (memtui.estimation.calibration; the method is in docs/methods.md, "Calibrating a panel's bands")."""

from __future__ import annotations

import json

SUMMARY = "family-wise error of every band at this panel's design (null simulation)"


def add_arguments(p) -> None:
    from memtui.cli.options import add_panel_args, add_settings_args

    add_panel_args(p)
    p.add_argument(
        "--panels",
        type=_panels,
        help="null panels to simulate [as many as fit in about 30 s, 60 to 400]; the Monte-Carlo error of a 5 %% "
        "rate is about 2.2 points at 100 panels, 1.1 at 400",
    )
    p.add_argument(
        "--noise",
        default="resampled",
        choices=["resampled", "gaussian"],
        help="noise of the null panels: the panel's own residual trajectories re-coloured by each group's covariance "
        "(resampled), or normal noise with the same covariances [resampled]",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_settings_args(p, "calibrate")


def _panels(text: str) -> int:
    import argparse

    from memtui.cli.options import count

    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--panels must be at least 1, not {value}")
    return value


def run(args) -> int:
    from memtui.cli.options import panel_path, progress_bar, settings_from_args
    from memtui.estimation import calibration as cb
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(panel_path(args))
    settings = settings_from_args(args, panel)
    result = None if args.no_cache else cb.load_cached(panel, settings, args.noise)
    if result is not None and args.panels is not None and result.panels != args.panels:
        result = None
    if result is None:
        result = cb.calibrate(panel, settings, panels=args.panels, noise=args.noise, progress=progress_bar())
        problem = cb.store(panel, settings, result)
        if problem:
            result.notes.append(f"calibration not cached: {problem}")
    if args.json:
        print(json.dumps({"panel": str(panel.path), "metric": settings.metric, **result.as_dict()}, default=float))
        return 0
    _print(panel, settings, result)
    return 0


def _print(panel, settings, result) -> None:
    from memtui.core.text import clean
    from memtui.estimation.calibration import FAMILIES
    from memtui.estimation.settings import DEFAULT_BAND

    d = result.design
    sizes = (f"{d['per_cohort_min']}" if d["per_cohort_min"] == d["per_cohort_max"]
             else f"{d['per_cohort_min']}..{d['per_cohort_max']} (median {d['per_cohort_median']:g})")  # fmt: skip
    print(f"{clean(panel.path)}: {clean(settings.metric, 80)}, estimator {settings.estimator}, controls "
          f"{settings.control_group.replace('_', ' ')}, base {settings.base_period}")  # fmt: skip
    print(f"design         {d['cohorts']} cohorts of {sizes} instances, {d['validation']} validation, "
          f"{d['checkpoints']} checkpoints: {d['cells']} cells ({d['post_cells']} post-treatment)")  # fmt: skip
    how = ("the panel's residual trajectories, each change scaled to its group's spread" if result.noise == "resampled"
           else "normal, each group's covariance from the panel's residuals")  # fmt: skip
    print(f"simulated      {result.panels} null panels ({result.noise} noise: {how}; B = {result.draws}, seed "
          f"{result.seed}) in {result.seconds:.0f} s")  # fmt: skip
    print(
        f"family-wise error, % of null panels with a false positive (nominal {100 * result.alpha:g}; "
        "± Monte-Carlo s.e.), one row per band:"
    )
    print(f"  {'band':<13}" + "".join(f"{f:>16}" for f in FAMILIES) + f"{'crit (post)':>13}")
    for b in result.bands:
        if b in result.skipped:
            print(f"  {b:<13} not calibrated: {clean(result.skipped[b], limit=None)}")
            continue
        cells = []
        for f in FAMILIES:
            p, se = result.rate(b, f)
            cells.append(f"{100 * p:5.1f} ± {100 * se:4.1f}{'!' if result.over(b, f) else ' '}")
        print(f"  {b:<13}" + "".join(f"{c:>16}" for c in cells) + f"{result.crit[b]:>13.3f}")
    print("  (! : above nominal by more than two Monte-Carlo errors)")
    band = getattr(settings, "band", DEFAULT_BAND)
    for i, b in enumerate(sorted(result.bands, key=lambda name: name != band)):  # the settings' band first
        print(f"{'verdict' if i == 0 else '':<15}{clean(result.verdict(b), limit=None)}")
    for note in result.notes:
        print(f"note           {clean(note, limit=None)}")
