"""`memtui sample`: make a sample panel."""

from __future__ import annotations

import math
from pathlib import Path

from memtui.cli.options import check_output, count
from memtui.core.errors import MemtuiError
from memtui.core.text import clean

SUMMARY = "make a sample panel"


def add_arguments(p) -> None:
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    s = kinds.add_parser("synthetic", help="a simulated panel with a known true memorisation profile")
    s.add_argument("panel", type=Path, help="panel file to create (.h5)")
    s.add_argument("--cohorts", type=count, default=20, help="treated cohorts (one per checkpoint after the first)")
    s.add_argument("--per-cohort", type=count, default=20, help="instances per cohort")
    s.add_argument("--never", type=count, default=200, help="never-treated (validation) instances")
    s.add_argument("--checkpoints", type=count, default=21, help="checkpoints, 1000 steps apart from step 0")
    s.add_argument("--effect", type=float, default=1.0, help="scale of the true effect (0 = no memorisation)")
    s.add_argument("--seed", type=int, default=0, help="random seed of the simulation")
    s.add_argument("--force", action="store_true", help="overwrite an existing panel")
    from memtui.demo.token_sample import NAME, SUMMARY

    t = kinds.add_parser(NAME, help=SUMMARY)  # the shipped sample of that name is its output
    t.add_argument("panel", type=Path, help="panel file to create (.h5)")
    t.add_argument("--force", action="store_true", help="overwrite an existing panel")


def _simulation(args):
    """The simulation the options describe, refused up front when it makes no sense or cannot fit in memory."""
    from memtui.core.memory import require_memory, require_shape
    from memtui.panel.synthetic import Simulation

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


def run(args) -> int:
    return {"synthetic": _synthetic}.get(args.kind, _token_sample)(args)


def _token_sample(args) -> int:
    from memtui.demo.token_sample import make_token_sample

    check_output(args.panel, args.force)
    path = make_token_sample(args.panel, overwrite=args.force, log=lambda line: print(line, flush=True))
    print(f"wrote {clean(path)}; open it with `memtui {clean(path)}` (w on a cell, enter on an instance)")
    return 0


def _synthetic(args) -> int:
    from memtui.panel.synthetic import write_synthetic

    sim = _simulation(args)
    check_output(args.panel, args.force)
    path = write_synthetic(args.panel, sim, overwrite=args.force)
    print(f"wrote {clean(path)}: {args.cohorts} cohorts x {args.per_cohort} + {args.never} never treated, "
          f"{args.checkpoints} checkpoints")  # fmt: skip
    return 0
