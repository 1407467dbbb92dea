"""`memtui build`: build a panel to extract into from a data order (docs/suites.md). The orders, their option groups,
which options each takes and the dispatch all come from the registry (``memtui.orders.registry``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from memtui.core.errors import MemtuiError

SUMMARY = "build a panel to extract into, from a Pythia-layout memmap, a token-id file or a family's data order"
DESCRIPTION = (
    "Either --memmap (rows of --seq-len uint16 tokens in training order) with --validation, "
    "sampled per macro-batch like Lesci et al.; or --tokens (npy/npz/parquet) with a treatment-step column; "
    "or --order FAMILY: the family's own data order (GPT-NeoX/Megatron maps, an OLMo or OLMo-core config, Amber's "
    "chunks), -k batches x -m instances per cohort between the --steps checkpoints, with never-trained controls "
    "(--controls beyond: past the last trained step; validation: a held-out set). An option given to an order that "
    "does not take it is refused. See docs/suites.md."
)
# The options every order may take: each order names those it honours (Order.shared). Defaults are None so that an
# option given to an order that does not take it is refused, not silently ignored; the orders apply the defaults.
_COMMON: list[tuple[tuple[str, ...], dict]] = [
    (("--validation",), {"type": Path, "help": "never-trained validation token ids (.npy, rows x length)"}),
    (("--tokens",), {"help": "token ids with treatment steps (.npz, .parquet, or .npy); --order neox: the corpus"}),
    (("--steps",), {"help": "the panel's checkpoint steps [default: every macro-batch / every treatment step]"}),
    (("--batch-size",), {"type": int, "help": "rows per training step (memmap: 1024)"}),
    (("--macro",), {"type": int, "help": "steps per macro-batch = checkpoint interval (memmap) [default: 1000]"}),
    (("--batches", "-k"), {"type": int, "help": "batches sampled per macro-batch [default: 10]"}),
    (("--rows", "-m"), {"type": int, "help": "rows sampled per batch [default: 10]"}),
    (("--n-validation",), {"type": int, "help": "validation rows to sample [default: all]"}),
    (("--seq-len",), {"type": int, "help": "tokens per row (--memmap: 2049, Pythia's)"}),
    (("--seed",), {"type": int, "help": "seed of the sampled batches, rows and validation rows [default: 0]"}),
]


class _Declared:
    """An argparse group that records the options an order declares (its own) and adds each option once: an option
    two orders share (olmo's --config for olmo-core) is shown in the first order's group."""

    def __init__(self, group, seen: set[str], own: set[str], flags: dict[str, str]):
        self.group, self.seen, self.own, self.flags = group, seen, own, flags

    def add_argument(self, *names: str, **kwargs):
        dest = kwargs.get("dest") or next(n for n in names if n.startswith("--"))[2:].replace("-", "_")
        self.own.add(dest)
        self.flags.setdefault(dest, next(n for n in names if n.startswith("--")))
        if dest in self.seen:
            return None
        self.seen.add(dest)
        return self.group.add_argument(*names, **kwargs)


def _declare(p: argparse.ArgumentParser) -> tuple[dict[str, set[str]], dict[str, str]]:
    """Add the build's options to ``p``; each option's orders (dest -> names) and its flag (dest -> --flag)."""
    from memtui.orders.registry import ORDERS

    p.add_argument("out", type=Path, help="panel file to create (.h5)")
    flags: dict[str, str] = {}
    for names, kwargs in _COMMON:
        action = p.add_argument(*names, **kwargs)
        flags[action.dest] = "/".join(sorted(names, key=len))
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    o = p.add_argument_group(
        "any --order",
        "-k/-m: batches per cohort x instances per batch (neox: k x m sequences per cohort); --steps: the panel's "
        "checkpoints (default: every --macro steps); --n-validation: controls to draw [1000; neox --validation "
        "rows: all]; --seed: the sampling seed. Without --order: --memmap FILE is --order memmap, --tokens FILE "
        "--order table.",
    )
    o.add_argument("--order", choices=tuple(ORDERS), help="build from this data order (docs/suites.md)")
    o.add_argument(
        "--controls",
        choices=("beyond", "validation"),
        help="never-trained controls: 'beyond' the last trained step (--train-steps, else the last "
        "checkpoint) in the same order, or a 'validation' / held-out set (required for seed suites "
        "and later epochs) [default: beyond]",
    )
    o.add_argument("--train-steps", type=int, help="the model's last training step (beyond controls start after it)")
    flags |= {"controls": "--controls", "train_steps": "--train-steps"}
    seen = {a.dest for a in p._actions}  # noqa: SLF001 - the options declared so far
    owners: dict[str, set[str]] = {}
    for name, order in ORDERS.items():
        own: set[str] = set()
        order.add_arguments(_Declared(p.add_argument_group(order.title, order.description), seen, own, flags))
        for dest in own | set(order.shared):
            owners.setdefault(dest, set()).add(name)
    return owners, flags


def add_arguments(p) -> None:
    _declare(p)


def _chosen(args) -> str:
    """The order: --order, else the one a source option selects (--memmap: memmap, --tokens: table)."""
    from memtui.orders.base import given
    from memtui.orders.registry import ORDERS

    if args.order:
        return args.order
    for name, order in ORDERS.items():
        if order.selected_by and given(args, order.selected_by):
            return name
    raise MemtuiError("give either --memmap (with --validation) or --tokens, or --order FAMILY.")


def _refuse_foreign(args, name: str) -> None:
    """Every option the build accepts is honoured by the chosen order or refused here, in one line."""
    from memtui.orders.base import given
    from memtui.orders.registry import ORDERS

    owners, flags = _declare(argparse.ArgumentParser(add_help=False))
    order = ORDERS[name]
    for dest, names in owners.items():
        if name in names or not given(args, dest):
            continue
        if dest in order.refusals:
            raise MemtuiError(order.refusals[dest])
        listed = [n for n in ORDERS if n in names]
        either = listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} or {listed[-1]}"
        raise MemtuiError(f"{flags[dest]} belongs to --order {either}, not {name}.")


def _spec(args):
    from memtui.orders.base import SamplingSpec, or_default

    if (args.batches is not None and args.batches < 1) or (args.rows is not None and args.rows < 1):
        raise MemtuiError("-k (batches per cohort) and -m (instances per batch) must be >= 1.")
    if args.n_validation is not None and args.n_validation < 1:
        raise MemtuiError("--n-validation must be >= 1: a panel needs never-trained controls.")
    return SamplingSpec(
        steps=args.steps,
        macro=args.macro,
        k=or_default(args.batches, 10),
        m=or_default(args.rows, 10),
        n_controls=args.n_validation,
        controls=or_default(args.controls, "beyond"),
        train_steps=args.train_steps,
        seed=or_default(args.seed, 0),
    )


def run(args) -> int:
    from memtui.extract.build import build_order
    from memtui.orders.registry import ORDERS

    name = _chosen(args)
    _refuse_foreign(args, name)
    spec = _spec(args)
    outs = build_order(ORDERS[name].check(args), args.out, spec, overwrite=args.force)
    from memtui.panel.hdf5 import read_panel

    for out in outs:
        panel = read_panel(out)
        n_val = int(panel.never_treated.sum())
        print(
            f"built {out}: {panel.n_instances} instances ({panel.n_instances - n_val} treated, {n_val} validation), "
            f"{panel.n_checkpoints} checkpoints {panel.steps[0]}..{panel.steps[-1]}; "
            f"next: memtui extract {out} --model MODEL"
        )
        short = _short_rows(panel)
        if short:
            print(short)
    if len(outs) > 1:
        print(f"a seed suite: memtui compare {' '.join(map(str, outs))}")
    return 0


def _short_rows(panel) -> str | None:
    """A warning when rows are too short for the extractability metrics, which extraction then leaves empty."""
    if panel.lengths is None or panel.extractable_kl is None:
        return None
    k, ell = panel.extractable_kl
    short = int((panel.lengths < k + ell).sum())
    if not short:
        return None
    return (
        f"warning: {short} of {panel.n_instances} instances are shorter than k + l = {k + ell} tokens, so their "
        f"extractable and extractable_len stay empty ({k} prefix tokens, then {ell} to reproduce)"
    )
