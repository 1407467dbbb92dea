"""CLI subcommands for panels and estimation: app, info, estimate, export, import, sample."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

from memtui.errors import MemtuiError
from memtui.files import refuse_existing
from memtui.samples import SAMPLES, SUITE_NAME
from memtui.text import clean

# Panel attributes `info` shows first, in this order; any other attribute follows.
_PROVENANCE = ("model", "created", "command", "memtui_version", "source")
_FORMAT_ATTRS = ("format", "format_version")
# memtui.presets.PRESETS, spelled out so that building the parser does not import polars (a test keeps them equal)
IMPORT_PRESETS = ("pythia-stats", "pythia-tokens")


def register(sub) -> None:
    """Add the panel and estimation subcommands to the `memtui` parser."""
    p = sub.add_parser("app", help="open the workbench on a panel (the default when no command is given)")
    p.add_argument(
        "panel",
        nargs="*",
        type=Path,
        help="panel file (default: the shipped synthetic sample); several panels of the same instances, one per "
        "model, open as a suite with a Compare pane",
    )
    p.add_argument(
        "--sample",
        choices=[*SAMPLES, SUITE_NAME],
        help=f"open a sample shipped with memtui instead ('{SUITE_NAME}': the four models of the shipped suite)",
    )
    p.set_defaults(func=cmd_app)

    p = sub.add_parser("info", help="describe a panel: shape, metrics, cohorts, completed checkpoints, provenance")
    p.add_argument("panel", type=Path)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("estimate", help="estimate the memorisation profile and print its summaries")
    p.add_argument("panel", type=Path)
    add_settings_args(p)
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("export", help="write estimates to CSV (significant ones by default)")
    p.add_argument("panel", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="CSV file to write")
    p.add_argument(
        "--scope",
        default="profile",
        choices=["profile", "instantaneous", "persistent", "residual"],
        help="which estimates: every (g, c) cell, the diagonal c = g, by c - g, or at the final checkpoint",
    )
    sig = p.add_mutually_exclusive_group()
    sig.add_argument(
        "--significant-only",
        dest="significant_only",
        action="store_true",
        default=True,
        help="only estimates whose simultaneous band excludes 0 (the default)",
    )
    sig.add_argument("--all", dest="significant_only", action="store_false", help="also non-significant estimates")
    add_settings_args(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="build a panel from a long table (CSV/parquet): unit, time, treatment, metrics")
    p.add_argument(
        "table", type=Path, help="the table; with --preset pythia-tokens, the folder of per-checkpoint files"
    )
    p.add_argument("panel", type=Path, help="panel file to create (.h5)")
    p.add_argument("--unit", default="seq_idx", help="unit (instance) id column [seq_idx]")
    p.add_argument("--time", default="step", help="checkpoint step / period column [step]")
    p.add_argument("--treatment", help="column with each unit's treatment step (first checkpoint that trained on it)")
    p.add_argument(
        "--from-seq-idx",
        action="store_true",
        help="derive the treatment step from a Pythia training-order index in the unit column",
    )
    p.add_argument("--batch-size", type=int, default=1024, help="sequences per step, for --from-seq-idx [1024]")
    p.add_argument("--macro-steps", type=int, default=1000, help="steps between checkpoints, for --from-seq-idx")
    p.add_argument("--metrics", help="comma-separated metric columns (default: every other numeric column)")
    p.add_argument(
        "--never-value",
        type=float,
        action="append",
        default=[],
        help="treatment value meaning never treated, besides -1 (e.g. 0); repeat for several",
    )
    p.add_argument(
        "--drop-missing-treatment",
        action="store_true",
        help="leave out units whose treatment is empty (refused otherwise), and say how many",
    )
    p.add_argument("--lower-is-better", default="", help="comma-separated metrics where lower is better (e.g. rank)")
    p.add_argument(
        "--preset",
        choices=IMPORT_PRESETS,
        help="the statistics Lesci et al. released for Pythia: pythia-stats (one parquet per model size) or "
        "pythia-tokens (a folder of per-token files, one per checkpoint); see docs/importing.md",
    )
    p.add_argument(
        "--max-step",
        type=int,
        help="with --preset: keep checkpoints up to this step (95000: the first epoch) and leave out instances first "
        "trained on after the last one kept",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing panel")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("sample", help="make a sample panel")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    s = kinds.add_parser("synthetic", help="a simulated panel with a known true memorisation profile")
    s.add_argument("panel", type=Path, help="panel file to create (.h5)")
    s.add_argument("--cohorts", type=_count, default=20, help="treated cohorts (one per checkpoint after the first)")
    s.add_argument("--per-cohort", type=_count, default=20, help="instances per cohort")
    s.add_argument("--never", type=_count, default=200, help="never-treated (validation) instances")
    s.add_argument("--checkpoints", type=_count, default=21, help="checkpoints, 1000 steps apart from step 0")
    s.add_argument("--effect", type=float, default=1.0, help="scale of the true effect (0 = no memorisation)")
    s.add_argument("--seed", type=int, default=0, help="random seed of the simulation")
    s.add_argument("--force", action="store_true", help="overwrite an existing panel")
    s.set_defaults(func=cmd_sample_synthetic)


def _count(text: str) -> int:
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
    from memtui.choices import SETTING_CHOICES as CHOICES  # the allowed values, once (and no polars at start-up)

    g = p.add_argument_group("estimation")
    g.add_argument("-m", "--metric", help="metric to estimate [loglik, else the first metric with values]")
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
    g.add_argument("-B", "--draws", type=int, default=1000, help="bootstrap draws (0: analytic only) [1000]")
    g.add_argument("--multiplier", default="rademacher", choices=list(CHOICES["multiplier"]), help="bootstrap weights")
    g.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    g.add_argument("--alpha", type=float, default=0.05, help="1 - alpha is the bands' simultaneous coverage")
    g.add_argument(
        "--family",
        default="post",
        choices=list(CHOICES["family"]),
        help="cells sharing one simultaneous band: post-treatment ones (placebo cells their own) or all",
    )
    g.add_argument(
        "--final-step",
        type=int,
        help="checkpoint for residual memorisation: the last completed one at or before it [last completed]",
    )
    g.add_argument(
        "--engine",
        default="memtui",
        choices=list(CHOICES["engine"]),
        help="memtui's engine, or the differences library (the paper's pipeline; slow, a cross-check)",
    )
    g.add_argument("--no-cache", action="store_true", help="recompute even if cached")


def settings_from_args(args, panel):
    """Settings from the command line; without --metric, the panel's default metric (the first with values)."""
    from memtui.estimate import Settings

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
    ).validate()


def _progress_bar():
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


def _estimate(args):
    from memtui.cache import cached_estimate
    from memtui.estimate import estimate
    from memtui.panel import read_panel

    panel = read_panel(args.panel)
    settings = settings_from_args(args, panel)
    run = estimate if args.no_cache else cached_estimate
    return panel, run(panel, settings, _progress_bar())


def cmd_app(args) -> int:
    from memtui.app import run_app
    from memtui.samples import sample_paths

    if args.sample and args.panel:
        raise MemtuiError("give a panel or --sample, not both.")
    if args.sample:
        paths = sample_paths(args.sample)
        return run_app(paths if len(paths) > 1 else paths[0])
    return run_app(args.panel if len(args.panel) > 1 else (args.panel[0] if args.panel else None))


def cmd_info(args) -> int:
    from memtui.panel import METRIC_LABEL, NEVER, read_panel

    p = read_panel(args.panel)
    treated = p.treatment != NEVER
    cohorts = np.unique(p.treatment[treated])
    rows = [
        ("panel", clean(p.path)),
        ("instances", f"{p.n_instances} ({int(treated.sum())} treated in {len(cohorts)} cohorts, "
                      f"{int((~treated).sum())} never treated)"),
    ]  # fmt: skip
    if len(cohorts):
        rows.append(("cohorts", f"steps {cohorts[0]} .. {cohorts[-1]}"))
    folded = _folded_note(p.treatment, p.steps)
    if folded:
        rows.append(("folded", folded))
    done = p.done_steps
    span = f", steps {done[0]} .. {done[-1]}" if len(done) else ""
    rows.append(("checkpoints", f"{int(p.done.sum())}/{p.n_checkpoints} completed{span}"))
    width = max(10, *(len(clean(n, 40)) for n in p.metrics))
    for name, y in p.metrics.items():
        coverage = np.isfinite(y[:, p.done]).mean() if p.done.any() else 0.0
        better = "higher" if p.sign(name) > 0 else "lower"
        label = clean(METRIC_LABEL.get(name, name), 80)
        rows.append(("metric", f"{clean(name, 40):<{width}} {label} ({better} is better), {coverage:.1%} filled"))
    rows.append(("tokens", "stored" if p.has_tokens else "not stored"))
    if p.n_parameters:
        config = next((c for c, done in zip(p.configs, p.done, strict=False) if done and c), "")
        rows.append(("model size", f"{p.n_parameters:,} parameters" + (f"; {clean(config)}" if config else "")))
    if p.truth is not None:
        rows.append(("truth", "simulated panel: the true profile is stored"))
    rows += [(clean(key, 40), clean(value)) for key, value in _provenance(p.attrs)]
    pad = max(len(label) for label, _ in rows) + 2  # one column for every value, however long a label
    for label, text in rows:
        print(f"{label:<{pad}}{text}")
    return 0


def _provenance(attrs: dict[str, str]) -> list[tuple[str, str]]:
    """The panel's non-empty attributes, the usual provenance first; the format markers are implied by reading it."""
    rest = sorted(k for k in attrs if k not in _PROVENANCE and k not in _FORMAT_ATTRS)
    return [(k, attrs[k]) for k in (*_PROVENANCE, *rest) if attrs.get(k)]


def _folded_note(treatment: np.ndarray, steps: np.ndarray) -> str | None:
    """How many instances the documented rule moves forward to the next checkpoint, if any."""
    from memtui.importing import FOLDED_RULE, count_folded

    folded = count_folded(treatment, steps)
    return f"{folded} instances have a treatment step between checkpoints: {FOLDED_RULE}" if folded else None


def _notes(res) -> list[str]:
    """The estimate's notes (folded cohorts, left-out instances), safe to print: metric names come from the file."""
    return [clean(n, limit=None) for n in res.notes]


def _num(value, spec: str) -> str:
    """A number for the summary, or "n/a" where there is none (a NaN is never shown as if it were a value)."""
    return format(value, spec) if value is not None and math.isfinite(value) else "n/a"


def _fmt_row(r: dict) -> str:
    star = "*" if r["significant"] else " "
    return f"{r['estimate']:10.4g} [{r['band_low']:.4g}, {r['band_high']:.4g}]{star}"


def cmd_estimate(args) -> int:
    from memtui.panel import METRIC_LABEL

    panel, res = _estimate(args)
    s = res.settings
    cells = res.cells
    post = cells.filter(~cells["pre_treatment"])
    metric = f"{clean(s.metric, 80)} ({clean(METRIC_LABEL.get(s.metric, s.metric), 80)})"
    print(f"{clean(panel.path)}: {metric}, estimator {s.estimator}, "
          f"controls {s.control_group.replace('_', ' ')}, base {s.base_period}, engine {s.engine}")  # fmt: skip
    band = (
        f"simultaneous {1 - s.alpha:.0%} band, crit {_num(res.crit, '.3f')}" if s.draws else "pointwise, no bootstrap"
    )
    print(f"profile        {len(res.cohorts)} cohorts x {len(res.checkpoints)} checkpoints: {cells.height} cells, "
          f"{post['significant'].sum()}/{post.height} post-treatment significant ({band}, B={s.draws})")  # fmt: skip
    for name, frame in (("instantaneous", res.instantaneous), ("residual", res.residual)):
        if frame.height:
            where = " (c = g)" if name == "instantaneous" else f" at step {frame['checkpoint'][0]}"
            print(f"{name:<14} mean {frame['estimate'].mean():.4g} over {frame.height} cohorts{where}, "
                  f"{frame['significant'].sum()} significant; range {frame['estimate'].min():.4g} .. "
                  f"{frame['estimate'].max():.4g}")  # fmt: skip
    pers = res.persistent.filter(res.persistent["event_time"] >= 0)
    if pers.height:
        print("persistent     by c - g: estimate [simultaneous band] (* significant)")
        rows = pers.to_dicts()
        shown = rows if len(rows) <= 8 else rows[:5] + [None] + rows[-2:]
        for r in shown:
            print("               ..." if r is None else f"    c-g={r['event_time']:<9}{_fmt_row(r)}")
    o = res.overall
    print(f"overall        average post-treatment {o.estimate:.4g} (se {_num(o.std_error, '.3g')})"
          f"{', significant' if o.significant else ''}")  # fmt: skip
    pt = res.pretrend
    if pt.n_cells and s.draws:
        verdict = "no evidence of pre-trends" if pt.p_value >= s.alpha else "pre-trends detected: check parallel trends"
        print(f"pre-trend      {pt.n_cells} placebo cells (c < g): sup-t {pt.sup_t:.3f}, "
              f"p = {pt.p_value:.3f}, {pt.n_significant} significant; {verdict}")  # fmt: skip
    for note in _notes(res):
        print(f"note           {note}")
    return 0


def cmd_export(args) -> int:
    from memtui.export import export_csv

    _, res = _estimate(args)
    rows = export_csv(res, args.output, args.scope, args.significant_only)
    which = "significant " if args.significant_only else ""
    print(f"wrote {rows} {which}{args.scope} estimates of {clean(res.settings.metric, 80)} to {clean(args.output)}")
    for note in _notes(res):
        print(f"note   {note}")
    return 0


def _check_output(path: Path, force: bool, source: Path | None = None) -> None:
    """Refuse, before any work, an output path that cannot take a new panel."""
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder; give a panel file name such as {path / 'panel.h5'}.")
    if not path.parent.is_dir():
        raise MemtuiError(f"cannot write {path}: {path.parent} is not an existing folder; create it first.")
    if source is not None and path.exists() and source.exists() and os.path.samefile(path, source):
        raise MemtuiError(f"{path} is the table being imported; write the panel to another file.")
    refuse_existing(path, force)


def _check_preset_args(args) -> None:
    """Options a preset decides itself, refused rather than silently ignored."""
    fixed = {
        "--treatment": args.treatment is not None,
        "--metrics": bool(args.metrics),
        "--never-value": bool(args.never_value),
        "--lower-is-better": bool(args.lower_is_better),
        "--drop-missing-treatment": args.drop_missing_treatment,
        "--unit": args.unit != "seq_idx",
        "--time": args.time != "step",
    }
    given = [name for name, on in fixed.items() if on]
    if given:
        raise MemtuiError(
            f"--preset {args.preset} sets the columns, treatment and metrics itself; drop {', '.join(given)}."
        )


def cmd_import(args) -> int:
    from memtui.importing import ImportSpec, check_spec, import_table, read_table

    if args.preset:
        from memtui.presets import import_preset

        _check_preset_args(args)
        check_spec(ImportSpec(from_seq_idx=True, batch_size=args.batch_size, macro_steps=args.macro_steps))
        _check_output(args.panel, args.force, source=args.table)
        done = import_preset(
            args.preset,
            args.table,
            args.panel,
            max_step=args.max_step,
            batch_size=args.batch_size,
            macro_steps=args.macro_steps,
            overwrite=args.force,
        )
        for line in done.lines():
            print(clean(line, limit=None))
        print(f"see `memtui info {clean(done.path)}`")
        return 0
    if args.max_step is not None:
        raise MemtuiError("--max-step works with --preset; for another table, filter its rows before importing.")
    spec = ImportSpec(
        unit=args.unit,
        time=args.time,
        treatment=args.treatment,
        metrics=tuple(m for m in (args.metrics or "").split(",") if m),
        never_values=tuple(args.never_value),
        from_seq_idx=args.from_seq_idx,
        batch_size=args.batch_size,
        macro_steps=args.macro_steps,
        lower_is_better=tuple(m for m in args.lower_is_better.split(",") if m),
        drop_missing_treatment=args.drop_missing_treatment,
    )
    check_spec(spec)
    _check_output(args.panel, args.force, source=args.table)
    table = read_table(args.table)
    done = import_table(table, args.panel, spec, overwrite=args.force, attrs={"source": str(args.table)})
    for line in done.lines():
        print(clean(line, limit=None))
    print(f"see `memtui info {clean(done.path)}`")
    return 0


def _simulation(args):
    """The simulation the options describe, refused up front when it makes no sense or cannot fit in memory."""
    from memtui.memory import require_memory, require_shape
    from memtui.synthetic import Simulation

    for name, value in (("--cohorts", args.cohorts), ("--per-cohort", args.per_cohort), ("--never", args.never)):
        if value < 1:
            raise MemtuiError(f"{name} must be at least 1, not {value}.")
    if args.checkpoints < 2:
        raise MemtuiError(f"--checkpoints must be at least 2, not {args.checkpoints}.")
    if args.seed < 0:
        raise MemtuiError(f"--seed must be 0 or more, not {args.seed}.")
    if not math.isfinite(args.effect):
        raise MemtuiError(f"--effect must be a finite number, not {args.effect}.")
    sim = Simulation(
        n_cohorts=args.cohorts,
        per_cohort=args.per_cohort,
        n_never=args.never,
        n_checkpoints=args.checkpoints,
        effect=args.effect,
        seed=args.seed,
    )
    fix = "use fewer --cohorts, --per-cohort, --never or --checkpoints"
    size = f"a panel of {sim.n_instances:,} instances x {sim.n_checkpoints:,} checkpoints"
    require_memory(sim.memory_needed(), size, fix)
    require_shape(sim.n_instances, sim.n_checkpoints, fix)
    if args.cohorts >= args.checkpoints:
        raise MemtuiError(
            f"{args.cohorts} cohorts need at least {args.cohorts + 1} checkpoints (cohort k is first trained at "
            f"checkpoint k); pass --checkpoints {args.cohorts + 1} or fewer --cohorts."
        )
    return sim


def cmd_sample_synthetic(args) -> int:
    from memtui.synthetic import write_synthetic

    sim = _simulation(args)
    _check_output(args.panel, args.force)
    path = write_synthetic(args.panel, sim, overwrite=args.force)
    print(f"wrote {clean(path)}: {args.cohorts} cohorts x {args.per_cohort} + {args.never} never treated, "
          f"{args.checkpoints} checkpoints")  # fmt: skip
    return 0
