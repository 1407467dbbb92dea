"""``memtui sensitivity``: how large a violation of parallel trends a memorisation summary survives (HonestDiD)."""

from __future__ import annotations

import argparse

from memtui.cli.options import add_panel_args, add_settings_args, count

SUMMARY = "robust intervals under violations of parallel trends, and the breakdown value (Rambachan & Roth)"
DESCRIPTION = (
    "Robust confidence intervals for the instantaneous or persistent memorisation of a panel when parallel trends "
    "may fail: relative magnitudes (rm: post-treatment violations at most Mbar times the largest placebo change, the "
    "conditional-least-favourable hybrid test) or smoothness (sd: the violation's slope changes by at most M per "
    "event time, the fixed-length CI); and the breakdown value, the largest Mbar or M at which the interval still "
    "excludes 0. Estimated with the universal base period, as HonestDiD requires."
)


def _grid(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of numbers") from None
    if not values:
        raise argparse.ArgumentTypeError("the grid needs at least one value")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_panel_args(p)
    g = p.add_argument_group("sensitivity")
    g.add_argument(
        "--target",
        default="instantaneous",
        help="instantaneous (event time 0), persistent (the average over event times > 0) or persistent:EVENT "
        "(one event time, in steps) [instantaneous]",
    )
    g.add_argument("--method", default="rm", choices=["rm", "sd"], help="rm: relative magnitudes; sd: smoothness [rm]")
    g.add_argument("--grid", type=_grid, help="Mbar (rm) or M (sd) values, comma-separated [rm: 0,0.5,1,1.5,2]")
    g.add_argument("--pre", type=count, help="keep the last PRE placebo event times [all]")
    g.add_argument("--post", type=count, help="keep the first POST post-treatment event times [all]")
    add_settings_args(p, "sensitivity")
    # the universal base period is HonestDiD's requirement; the band is not sensitivity's (it refuses --band): the
    # settings take a band that refuses no multiplier its bootstrap can use (--multiplier mammen too)
    p.set_defaults(base_period="universal", band=_band_for_every_multiplier())


def _band_for_every_multiplier() -> str:
    """The first registered band that refuses none of the multipliers, asked of the band objects."""
    from dataclasses import asdict
    from types import SimpleNamespace

    from memtui.engine.band_registry import BANDS
    from memtui.estimation.choices import SETTING_CHOICES
    from memtui.estimation.settings import Settings

    defaults = asdict(Settings())
    for name, band in BANDS.items():
        probes = (SimpleNamespace(**{**defaults, "band": name, "multiplier": m}) for m in SETTING_CHOICES["multiplier"])
        if all(band.refusal(probe) is None for probe in probes):
            return name
    raise AssertionError("no registered band takes every multiplier; sensitivity needs one")


def run(args) -> int:
    from memtui.cli.numbers import fixed2
    from memtui.cli.options import panel_path, settings_from_args
    from memtui.core.text import clean
    from memtui.estimation.sensitivity import event_study, sensitivity
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(panel_path(args))
    settings = settings_from_args(args, panel)
    study = event_study(panel, settings, pre=args.pre, post=args.post)
    res = sensitivity(study, args.target, args.method, args.grid, alpha=settings.alpha, seed=settings.seed)
    cover = f"{100 * (1 - settings.alpha):g}%"
    print(f"{clean(panel.path)}: {settings.metric}, {res.target}")
    print(f"  estimate {fixed2(res.estimate)}, {cover} CI under parallel trends "
          f"[{fixed2(res.original[0])}, {fixed2(res.original[1])}]; {study.n_pre} placebo and {study.n_post} "
          "post-treatment event times")  # fmt: skip
    print(f"  {res.parameter:>8}  {cover} robust CI")
    for iv in res.intervals:
        flag = "" if iv.excludes_zero() else "  (includes 0)"
        print(f"  {iv.parameter:>8.4g}  [{fixed2(iv.low)}, {fixed2(iv.high)}]{flag}")
    print(res.sentence())
    for note in res.notes:
        print(f"note: {note}")
    return 0
