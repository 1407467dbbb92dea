"""`memtui import`: build a panel from a long table (CSV/parquet): unit, time, treatment, metrics."""

from __future__ import annotations

from pathlib import Path

from memtui.cli.options import check_output
from memtui.core.errors import MemtuiError
from memtui.core.text import clean

SUMMARY = "build a panel from a long table (CSV/parquet): unit, time, treatment, metrics"

# memtui.panel.presets.PRESETS, spelled out so that building the parser does not import polars (a test keeps them equal)
IMPORT_PRESETS = ("pythia-stats", "pythia-tokens")


def add_arguments(p) -> None:
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


def run(args) -> int:
    from memtui.panel.importing import ImportSpec, check_spec, import_table, read_table

    if args.preset:
        from memtui.panel.presets import import_preset

        _check_preset_args(args)
        check_spec(ImportSpec(from_seq_idx=True, batch_size=args.batch_size, macro_steps=args.macro_steps))
        check_output(args.panel, args.force, source=args.table)
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
    check_output(args.panel, args.force, source=args.table)
    table = read_table(args.table)
    done = import_table(table, args.panel, spec, overwrite=args.force, attrs={"source": str(args.table)})
    for line in done.lines():
        print(clean(line, limit=None))
    print(f"see `memtui info {clean(done.path)}`")
    return 0
