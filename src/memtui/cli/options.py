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


# The shared estimation options a verb does not honour, and why. Such a verb refuses the option in one line with the
# reason (``_Refused``, hidden from its --help): accepted and ignored, it would print numbers the user did not ask for.
# Keyed by the option's dest; a verb not listed honours every option of the group. (--no-cache is honoured by every
# verb: one that caches nothing, compare and sensitivity, recomputes every time, which is all it asks.)
NOT_HONOURED = {
    "calibrate": {
        "family": "it reports the family-wise error of every family",
        "final_step": "its null panels are simulated over every checkpoint (no residual summary)",
        "engine": "its null panels are estimated by memtui's engine",
        "cluster": "its null panels are simulated and bootstrapped per instance, not per cluster",
    },
    "instances": {
        "estimator": "its score is the DiD contrast of one instance (its change less the never-trained mean change)",
        "base_period": "its score always takes the checkpoint before the instance's cohort as the base",
        "control_group": "its score is set against the never-trained instances only",
        "draws": "it bootstraps nothing (p_ctrl ranks each score among the never-trained instances' own)",
        "multiplier": "it bootstraps nothing",
        "seed": "it bootstraps nothing",
        "alpha": "it draws no band",
        "family": "it draws no band",
        "engine": "its scores are computed directly from the panel",
        "band": "it draws no band",
        "cluster": "it bootstraps nothing",
        "no_cache": "it caches nothing: the scores are computed every time",
    },
    "sensitivity": {
        "family": "its robust intervals are HonestDiD's, not a simultaneous band",
        "final_step": "it estimates event times, not the residual summary",
        "engine": "its event study is estimated by memtui's engine",
        "band": "its robust intervals are HonestDiD's, not a simultaneous band",
        "cluster": "its event study's covariance is bootstrapped per instance, not per cluster",
    },
}


def add_settings_args(p: argparse.ArgumentParser, verb: str) -> None:
    """The estimation group: every option ``verb`` honours, and a one-line refusal of those it does not
    (``NOT_HONOURED``)."""
    refused = NOT_HONOURED.get(verb, {})
    g = p.add_argument_group("estimation")
    for flags, kwargs in _settings_options():
        dest = flags[-1].lstrip("-").replace("-", "_")
        if dest in refused:
            nargs = 0 if kwargs.get("action") == "store_true" else None
            why = f"{verb} does not take {flags[-1]}: {refused[dest]}"
            g.add_argument(*flags, action=_Refused, why=why, default=kwargs.get("default"), nargs=nargs)
        else:
            g.add_argument(*flags, **kwargs)


def _settings_options() -> list[tuple[tuple[str, ...], dict]]:
    """The estimation group's options: flags and argparse keywords (the choices read the settings' registries, the
    defaults a default ``Settings``: each is written once, there)."""
    from memtui.estimation.choices import SETTING_CHOICES as CHOICES
    from memtui.estimation.settings import ALPHA_RANGE, Settings

    d = Settings()

    return [
        (("-m", "--metric"), {"help": f"metric to estimate [default: {d.metric}, else the first metric with values]"}),
        (("--estimator",), {"default": d.estimator, "choices": list(CHOICES["estimator"]),
                            "help": "did: difference-in-differences (causal); difference: trained - never-trained "
                                    "at c; extractable: the cohort's level at c, counterfactual taken as 0"}),
        (("--base-period",), {"default": d.base_period, "choices": list(CHOICES["base_period"]),
                              "help": "pre-treatment cells against the checkpoint before c (varying) or before g "
                                      "(universal)"}),
        (("--control-group",), {"default": d.control_group, "choices": list(CHOICES["control_group"]),
                                "help": "controls: validation instances only, or also instances not trained on yet"}),
        (("-B", "--draws"), {"type": int, "default": d.draws,
                             "help": "bootstrap draws B, or the permutation band's permutations P (0: analytic only)"}),
        (("--multiplier",), {"default": d.multiplier, "choices": list(CHOICES["multiplier"]),
                             "help": "bootstrap weights"}),
        (("--seed",), {"type": int, "default": d.seed, "help": "seed of the bootstrap draws"}),
        (("--alpha",), {"type": float, "default": d.alpha,
                        "help": f"1 - alpha is the bands' simultaneous coverage; {ALPHA_RANGE} [{d.alpha:g}]"}),
        (("--family",), {"default": d.family, "choices": list(CHOICES["family"]),
                         "help": "cells sharing one simultaneous band: post-treatment ones (placebo cells their own) "
                                 "or all"}),
        (("--final-step",), {"type": int,
                             "help": "checkpoint for residual memorisation: the last completed one at or before it "
                                     "[default: last completed]"}),
        (("--engine",), {"default": d.engine, "choices": list(CHOICES["engine"]),
                         "help": "memtui's engine, or the differences library (the paper's pipeline; slow, a "
                                 "cross-check)"}),
        (("--band",), {"default": d.band, "action": _ChosenBand, "choices": list(CHOICES["band"]),
                       "help": BAND_HELP}),
        (("--cluster",), {"default": d.cluster, "metavar": "batch|NAME", "type": cluster_name,
                          "help": "clustered bootstrap: one multiplier per training batch (the optimizer step the "
                                  "build recorded) or per level of a categorical covariate (inside one cohort for "
                                  "--band calibrated); controls each their own cluster"}),
        (("--no-cache",), {"action": "store_true", "help": "recompute even if cached"}),
    ]  # fmt: skip


class _Refused(argparse.Action):
    """A shared option this verb does not honour: refused in one line with the reason (``NOT_HONOURED``), and left
    out of the verb's --help. Its dest keeps the group's default, so the verb's settings are what they always were."""

    def __init__(self, option_strings, dest, why: str, **kwargs) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.why = why

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(self.why)


def covariate_names(text: str) -> tuple[str, ...]:
    """``length,zlib`` -> ("length", "zlib"): the covariates of doubly robust DiD, comma-separated."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of covariate names")
    return tuple(_named(name) for name in names)


def cluster_name(text: str) -> str:
    """``--cluster``: ``batch`` or a covariate's name, by the one naming rule (panel.names)."""
    return text if text in ("", "batch") else _named(text.strip())


def _named(name: str) -> str:
    """``name`` where it follows the covariates' naming rule; argparse's one-line refusal otherwise, which names the
    option itself (parsing runs before the CLI's handler of memtui's own errors)."""
    from memtui.panel.names import check_covariate_name

    try:
        return check_covariate_name(name)
    except MemtuiError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


BAND_HELP = (
    "simultaneous band: calibrated (studentised bootstrap-t; holds its level with small cohorts; the default), "
    "permutation (P = -B permutations of the cohort labels; exact under no memorisation where the training order is "
    "a uniform shuffle, with less power than calibrated where there are effects) or classic (R did's and the paper's; "
    "needed for --multiplier mammen)"
)


def add_band_arg(p) -> None:
    """``--band``: which simultaneous band marks estimates significant (every verb that reports significance)."""
    from memtui.estimation.choices import SETTING_CHOICES as CHOICES
    from memtui.estimation.settings import DEFAULT_BAND

    p.add_argument("--band", default=DEFAULT_BAND, action=_ChosenBand, choices=list(CHOICES["band"]), help=BAND_HELP)


class _ChosenBand(argparse.Action):
    """``--band`` that remembers it was given: without it, covariates fall back to the classic band (with a note)
    instead of refusing the default one."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.band_chosen = True


COVARIATES_BAND_NOTE = (
    "--covariates uses the classic band (R did's); the calibrated band is not derived for doubly robust DiD."
)


def _band(args, panel=None) -> str:
    """The band asked for. Without --band: ``estimation.settings.default_band`` (the permutation band on a panel whose
    training order is a uniform shuffle with controls drawn from it, else the calibrated one; a note says why); with
    --covariates the classic one (the calibrated band is not derived for doubly robust DiD). What was decided and why
    is kept for ``run_notes`` (said after the results: an error is one line, never a note and then the error). An
    explicit --band the settings cannot serve is refused by Settings."""
    from memtui.engine.band_classic import CLASSIC
    from memtui.estimation.settings import DEFAULT_BAND, default_band, order_not_shuffled

    if getattr(args, "band_chosen", False) or args.band != DEFAULT_BAND:
        return args.band
    if getattr(args, "covariates", ()):
        args.band_note = COVARIATES_BAND_NOTE
        return CLASSIC.name
    if panel is None:
        return args.band
    band, why = default_band(panel, draws=args.draws, control_group=args.control_group, covariates=(),
                             cluster=getattr(args, "cluster", "") or "", engine=args.engine)  # fmt: skip
    if band != DEFAULT_BAND:
        args.band_note = f"band: {band} ({why}); --band calibrated for the bootstrap-t band"
    elif args.draws and order_not_shuffled(panel) is None:  # a shuffled order whose design rules permutation out
        args.band_note = f"band: calibrated, not permutation: {why}"
    return band


def run_notes(args) -> list[str]:
    """What the command line decided for the user (a default it changed), to print after the results' own notes."""
    note = getattr(args, "band_note", None)
    return [note] if note else []


def settings_from_args(args, panel):
    """Settings from the command line; without --metric, the panel's default metric (the first with values). A
    covariate the panel does not have (--covariates, --cluster) is refused here, for every verb, before any work."""
    from memtui.estimation.settings import Settings

    settings = Settings(
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
        band=_band(args, panel),
        covariates=getattr(args, "covariates", ()),
        cluster=getattr(args, "cluster", "") or "",
    ).validate()
    have = ", ".join(clean(k, 40) for k in panel.covariates) or "none"
    missing = [clean(name, 40) for name in settings.covariates if name not in panel.covariates]
    if missing:
        raise MemtuiError(
            f"{clean(panel.path)}: no covariate {', '.join(missing)} for --covariates (it has: {have}); "
            "`memtui covariates PANEL` computes or imports them."
        )
    if settings.cluster not in ("", "batch", *panel.covariates):
        raise MemtuiError(
            f"{clean(panel.path)}: no covariate {clean(settings.cluster, 40)} for --cluster (it has: {have}); "
            "--cluster takes batch or a categorical covariate."
        )
    return settings


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

    if getattr(args, "shared_controls", False):
        raise MemtuiError("--shared-controls goes with --by SPEC (the groups it splits the treated instances into).")
    panel = read_panel(panel_path(args))
    settings = settings_from_args(args, panel)
    run = estimate if args.no_cache else cached_estimate
    return panel, run(panel, settings, progress_bar())


def estimate_by_from_args(args):
    """The panel and its subgroup estimates (``--by``; never cached: each group is an estimate of its own)."""
    from memtui.estimation.subgroups import estimate_by
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(panel_path(args))
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


def add_panel_args(p, *, several: bool = False, dest: str | None = None, help: str = PANEL_HELP) -> None:
    """The panel a verb reads: a file, or ``--sample NAME``, a panel shipped with memtui (every verb that reads panels
    takes both, and refuses both at once: ``panel_path``). ``several``: one file per model (``dest`` ``panels``, or
    ``panel`` for the app), and ``--sample suite`` for the shipped suite's four."""
    from memtui.panel.samples import SAMPLES, SUITE_NAME

    if several:
        p.add_argument(dest or "panels", type=Path, nargs="*", metavar="PANEL", help=help)
    else:
        p.add_argument("panel", type=Path, nargs="?", help=help)
    suite = f"; '{SUITE_NAME}': the four models of the shipped suite" if several else ""
    p.add_argument(
        "--sample",
        choices=[*SAMPLES, SUITE_NAME] if several else list(SAMPLES),
        help=f"a panel shipped with memtui instead of a file{suite} (`memtui info --sample NAME` describes it)",
    )


def panel_paths(args) -> list[Path]:
    """The panels the arguments name (``add_panel_args``): the files given, the sample's, or none."""
    from memtui.panel.samples import sample_paths

    given = args.panel if hasattr(args, "panel") else args.panels  # calibrate's `panels` is a count of its own
    given = [] if given is None else list(given) if isinstance(given, list) else [given]
    sample = getattr(args, "sample", None)
    if sample and given:
        raise MemtuiError("give a panel or --sample, not both.")
    return sample_paths(sample) if sample else given


def panel_path(args) -> Path:
    """The one panel a verb reads: its PANEL argument or ``--sample NAME``'s file."""
    from memtui.panel.samples import SAMPLES

    paths = panel_paths(args)
    if not paths:
        raise MemtuiError(f"give a panel file, or --sample NAME for a shipped one ({', '.join(SAMPLES)}).")
    return paths[0]
