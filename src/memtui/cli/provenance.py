"""`memtui provenance`: was this model trained on this data in this order? The order-likelihood correlation over the
checkpoints and its exact permutation p-value (memtui.estimation.provenance; docs/provenance.md)."""

from __future__ import annotations

import json

SUMMARY = "was the model trained on this data in this order? exact permutation test of order vs likelihood"


def add_arguments(p) -> None:
    from memtui.cli.options import add_panel_args, count
    from memtui.estimation.provenance import DEFAULT_PERMUTATIONS, STATISTICS

    add_panel_args(p)
    p.add_argument("-m", "--metric", help="metric to test [default: loglik, else the first metric with values]")
    p.add_argument(
        "--statistic",
        default=STATISTICS[0],
        choices=list(STATISTICS),
        help="per instance: the change in the metric since each earlier checkpoint, the largest correlation over "
        "them (change), or the metric at the last checkpoint (level, what a blackbox user has) [change]",
    )
    p.add_argument("--permutations", type=count, default=DEFAULT_PERMUTATIONS,
                   help=f"permutations of the training order (the p-value's denominator is P + 1) "
                        f"[{DEFAULT_PERMUTATIONS}]")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the permutations [0]")
    p.add_argument("--alpha", type=float, default=0.05, help="level of the test [0.05]")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    from memtui.cli.options import panel_path
    from memtui.core.errors import MemtuiError
    from memtui.estimation.provenance import provenance
    from memtui.estimation.settings import check_alpha
    from memtui.panel.hdf5 import read_panel

    check_alpha(args.alpha)
    if args.seed < 0:
        raise MemtuiError(f"seed must be 0 or a positive integer, not {args.seed}.")
    panel = read_panel(panel_path(args))
    metric = args.metric if args.metric is not None else panel.default_metric
    got = provenance(panel, metric, statistic=args.statistic, permutations=args.permutations, seed=args.seed,
                     alpha=args.alpha)  # fmt: skip
    if args.json:
        print(json.dumps({"panel": str(panel.path), **got.as_dict()}, default=float))
        return 0
    _print(panel, got)
    return 0


def _num(x: float, fmt: str) -> str:
    import math

    return "-" if math.isnan(x) else format(x, fmt)


def _print(panel, got) -> None:
    from memtui.core.text import clean

    print(f"{clean(panel.path)}: {clean(got.metric, 80)}, {got.n_instances} instances with a training position "
          f"({got.n_positions} positions)")  # fmt: skip
    what = (
        f"the change since each earlier checkpoint, largest at {got.reference_step}"
        if got.statistic == "change"
        else "the level at the last checkpoint"
    )
    print(f"statistic      Spearman correlation of the training position with {what}")
    verdict = "trained on this data in this order" if got.rejects else "no evidence of training in this order"
    print(f"test           rho = {got.rho:.4f}, exact p = {got.p_value:.4g} ({got.permutations} permutations, "
          f"seed {got.seed}; one-sided: the later trained, the better the metric) at alpha {got.alpha:g}: "
          f"{verdict}")  # fmt: skip
    print("order-likelihood correlation over checkpoints (pointwise permutation p-values):")
    print(f"  {'step':>10} {'level rho':>10} {'p':>8} {'change since rho':>17} {'p':>8}")
    for r in got.rows:
        print(f"  {r.step:>10} {_num(r.level_rho, '.4f'):>10} {_num(r.level_p, '.3g'):>8} "
              f"{_num(r.change_rho, '.4f'):>17} {_num(r.change_p, '.3g'):>8}")  # fmt: skip
    for note in got.notes:
        print(f"note           {clean(note, limit=None)}")
