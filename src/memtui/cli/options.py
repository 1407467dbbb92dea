"""Options and helpers that several verbs share: the estimation settings, progress bars, counts."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.files import refuse_existing
from memtui.core.text import clean


def count(text: str) -> int:
    """A whole number, also in the 1e5 notation people use for sizes."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
    return int(value)


def add_settings_args(p: argparse.ArgumentParser) -> None:
    from memtui.estimation.choices import SETTING_CHOICES as CHOICES
    from memtui.estimation.settings import ALPHA_RANGE

    g = p.add_argument_group("estimation")
    g.add_argument("-m", "--metric", help="metric to estimate [default: loglik, else the first metric with values]")
    g.add_argument(
        "--estimator",
        default="did",
        choices=list(CHOICES["estimator"]),
        help="did: difference-in-differences (causal); difference: trained - never-trained at c; extractable: the "
        "cohort's level at c, counterfactual taken as 0",
    )
    g.add_argument(
        "--base-period",
        default="varying",
        choices=list(CHOICES["base_period"]),
        help="pre-treatment cells against the checkpoint before c (varying) or before g (universal)",
    )
    g.add_argument(
        "--control-group",
        default="never_treated",
        choices=list(CHOICES["control_group"]),
        help="controls: validation instances only, or also instances not trained on yet",
    )
    g.add_argument("-B", "--draws", type=int, default=1000, help="bootstrap draws (0: analytic only)")
    g.add_argument("--multiplier", default="rademacher", choices=list(CHOICES["multiplier"]), help="bootstrap weights")
    g.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    g.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help=f"1 - alpha is the bands' simultaneous coverage; {ALPHA_RANGE} [0.05]",
    )
    g.add_argument(
        "--family",
        default="post",
        choices=list(CHOICES["family"]),
        help="cells sharing one simultaneous band: post-treatment ones (placebo cells their own) or all",
    )
    g.add_argument(
        "--final-step",
        type=int,
        help="checkpoint for residual memorisation: the last completed one at or before it [default: last completed]",
    )
    g.add_argument(
        "--engine",
        default="memtui",
        choices=list(CHOICES["engine"]),
        help="memtui's engine, or the differences library (the paper's pipeline; slow, a cross-check)",
    )
    add_band_arg(g)
    g.add_argument(
        "--cluster",
        default="",
        metavar="batch|NAME",
        help="clustered bootstrap: one multiplier per training batch (the optimizer step the build recorded) or per "
        "level of a categorical covariate (inside one cohort for --band calibrated); controls each their own cluster",
    )
    g.add_argument("--no-cache", action="store_true", help="recompute even if cached")


def covariate_names(text: str) -> tuple[str, ...]:
    """``length,zlib`` -> ("length", "zlib"): the covariates of doubly robust DiD, comma-separated."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of covariate names")
    return names


def add_covariates_arg(p) -> None:
    """``--covariates``: doubly robust DiD conditioning on per-instance covariates (the verbs that estimate one)."""
    p.add_argument(
        "--covariates",
        type=covariate_names,
        default=(),
        metavar="A,B",
        help="doubly robust DiD with these per-instance covariates (R did's xformla, est_method dr; the classic "
        "band); per-instance values from the panel (instances/covariates)",
    )


def add_by_args(p: argparse.ArgumentParser) -> None:
    """``--by`` and ``--shared-controls``: subgroup profiles from one set of draws (estimation.subgroups)."""
    g = p.add_argument_group("subgroups")
    g.add_argument(
        "--by",
        metavar="SPEC",
        help="one profile per group of instances, from one set of draws: NAME (a covariate's levels), NAME>=VALUE (a "
        "comparison), NAME:quartiles (or :deciles, :K, :bins=a,b,c); with the difference between groups",
    )
    g.add_argument(
        "--shared-controls",
        action="store_true",
        help="split only the treated instances; every group keeps all never-treated controls (doses)",
    )


def add_band_arg(p) -> None:
    """``--band``: which simultaneous band marks estimates significant (every verb that reports significance)."""
    from memtui.estimation.choices import SETTING_CHOICES as CHOICES

    p.add_argument(
        "--band",
        default="calibrated",
        action=_ChosenBand,
        choices=list(CHOICES["band"]),
        help="simultaneous band: calibrated (studentised bootstrap-t; holds its level with small cohorts) or classic "
        "(R did's and the paper's; needed for --multiplier mammen) [calibrated]",
    )


class _ChosenBand(argparse.Action):
    """``--band`` that remembers it was given: without it, covariates fall back to the classic band (with a note)
    instead of refusing the default one."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.band_chosen = True


def _band(args) -> str:
    """The band asked for; the default calibrated band is not derived for doubly robust DiD, so with --covariates and
    no --band the classic one is used and the user told so (an explicit --band calibrated is refused by Settings)."""
    if getattr(args, "covariates", ()) and args.band == "calibrated" and not getattr(args, "band_chosen", False):
        print("note: --covariates uses the classic band (R did's); the calibrated band is not derived for doubly "
              "robust DiD.", file=sys.stderr)  # fmt: skip
        return "classic"
    return args.band


def settings_from_args(args, panel):
    """Settings from the command line; without --metric, the panel's default metric (the first with values)."""
    from memtui.estimation.settings import Settings

    return Settings(
        metric=args.metric if args.metric is not None else panel.default_metric,
        estimator=args.estimator,
        base_period=args.base_period,
        control_group=args.control_group,
        draws=args.draws,
        multiplier=args.multiplier,
        seed=args.seed,
        alpha=args.alpha,
        family=args.family,
        final_step=args.final_step,
        engine=args.engine,
        band=_band(args),
        covariates=getattr(args, "covariates", ()),
        cluster=getattr(args, "cluster", "") or "",
    ).validate()


def progress_bar():
    """A one-line progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(fraction: float, message: str) -> None:
        filled = int(30 * fraction)
        sys.stderr.write(f"\r{message:<12} [{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%}")
        if fraction >= 1:
            sys.stderr.write("\r" + " " * 60 + "\r")
        sys.stderr.flush()

    return show


def estimate_from_args(args):
    """The panel the command names and its estimate under the command's settings (from the cache unless --no-cache)."""
    from memtui.estimation.cache import cached_estimate
    from memtui.estimation.estimate import estimate
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(args.panel)
    settings = settings_from_args(args, panel)
    run = estimate if args.no_cache else cached_estimate
    return panel, run(panel, settings, progress_bar())


def estimate_by_from_args(args):
    """The panel and its subgroup estimates (``--by``; never cached: each group is an estimate of its own)."""
    from memtui.estimation.subgroups import estimate_by
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(args.panel)
    settings = settings_from_args(args, panel)
    return panel, estimate_by(panel, settings, args.by, shared_controls=args.shared_controls, progress=progress_bar())


def printable_notes(res) -> list[str]:
    """The estimate's notes (folded cohorts, left-out instances), safe to print: metric names come from the file."""
    return [clean(n, limit=None) for n in res.notes]


def check_output(path: Path, force: bool, source: Path | None = None) -> None:
    """Refuse, before any work, an output path that cannot take a new panel."""
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder; give a panel file name such as {path / 'panel.h5'}.")
    if not path.parent.is_dir():
        raise MemtuiError(f"cannot write {path}: {path.parent} is not an existing folder; create it first.")
    if source is not None and path.exists() and source.exists() and os.path.samefile(path, source):
        raise MemtuiError(f"{path} is the table being imported; write the panel to another file.")
    refuse_existing(path, force)


PANEL_HELP = "the panel file (.h5: made by memtui build, import or sample)"
