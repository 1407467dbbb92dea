"""Time `estimate --by` (G subgroup profiles from one set of draws) against one estimate of the whole panel.

    python benchmarks/subgroups.py                      # the paper's full size: 16,300 x 144, B = 1000, 8 groups
    python benchmarks/subgroups.py --shape first-epoch --groups 4 --draws 500 --repeat 3
    python benchmarks/subgroups.py --repeat 4 --against /path/to/main/src   # rounds of both versions, alternating

The panel is synthetic (panel/synthetic.py, the shapes of benchmarks/estimate.py) with a categorical covariate of G
equally likely levels; every run uses the same settings (the default calibrated band) in this process, one after the
other, and each round times one estimate of the whole panel before and after `--by` (the pair brackets the machine's
load; the smaller is "one estimate").

The issue's target: G groups cost at most 1.5 x one estimate + G x the per-group share. **The per-group share** is
the per-cell part of one group's estimate: the work over (cells x draws) that each group must do for its own cells
whatever is shared, since its profile has about as many cells as the whole panel's (each group's cohorts span every
checkpoint) and its draws are its own numbers. It is measured on a lone estimate of the first group's sample, as the
time spent in the functions that work on cells x draws: the cells' draws gathered from the group sums
(``did._Stack.cell_draws``), their studentising and running maxima (the calibrated band's ``on_chunk``), the
aggregates' draws (``summaries.aggregate``) and, for the classic band, the robust standard errors and sup-t laws
(``did.bootstrap_se``, ``did.sup_t_many``). What the groups share or split (multiplier draws, the group sums' matrix
products, layouts, point estimates, analytic standard errors, frames) must then come to at most 1.5 x one estimate.
The stricter reading (a group's share = one estimate x its share of the instances: 2.5 x one estimate in all for
separate samples) is printed too. Every time is taken in wall seconds and in CPU seconds of the process's threads; on
a machine shared with other work the CPU seconds are the steadier (waiting for a core is not counted in them).

``--against SRC`` loads the memtui under SRC (another checkout's src folder) into this process beside this tree's
and alternates their rounds, so that a before/after meets the same load.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import time

import numpy as np

from memtui.engine import did
from memtui.estimation import estimate as estimate_module
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.estimation.subgroups import estimate_by, subset_panel
from memtui.panel.model import Panel
from memtui.panel.synthetic import Simulation, simulate

SHAPES = {
    "first-epoch": Simulation(n_cohorts=95, per_cohort=100, n_never=2000, n_checkpoints=96),
    "full": Simulation(n_cohorts=143, per_cohort=100, n_never=2000, n_checkpoints=144),
}


def make_panel(sim: Simulation, groups: int) -> Panel:
    d = simulate(sim)
    rng = np.random.default_rng(1)
    levels = np.array([f"d{k}" for k in range(groups)], dtype=object)
    return Panel(ids=d["ids"], treatment=d["treatment"], steps=d["steps"], done=np.ones(len(d["steps"]), bool),
                 metrics={"loglik": d["values"]["loglik"]}, signs=d["signs"],
                 covariates={"domain": rng.choice(levels, len(d["ids"]))})  # fmt: skip


def timed(fn):
    """(wall seconds, CPU seconds of the process's threads, fn's result)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - start, time.process_time() - cpu, out


@contextlib.contextmanager
def per_cell_timer():
    """Seconds (wall, CPU) spent in the functions that work on (cells x draws) while the block runs (one thread: a
    lone estimate runs them on the calling thread)."""
    spent = [0.0, 0.0]

    def clocked(fn):
        def run(*args, **kwargs):
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
                spent[1] += time.process_time() - cpu

        return run

    def shared(*args, on_chunk=None, **kwargs):
        return boot(*args, on_chunk=None if on_chunk is None else clocked(on_chunk), **kwargs)

    boot, cells, agg = did.bootstrap_shared, did._Stack.cell_draws, estimate_module.aggregate
    se, sup = did.bootstrap_se, did.sup_t_many
    did.bootstrap_shared, did._Stack.cell_draws, estimate_module.aggregate = shared, clocked(cells), clocked(agg)
    did.bootstrap_se, did.sup_t_many = clocked(se), clocked(sup)
    try:
        yield spent
    finally:
        did.bootstrap_shared, did._Stack.cell_draws, estimate_module.aggregate = boot, cells, agg
        did.bootstrap_se, did.sup_t_many = se, sup


def one_round(panel: Panel, settings: Settings, shared: bool) -> dict:
    """One estimate, --by, one estimate again and a lone estimate of the first group, each timed in wall and CPU
    seconds (CPU time is what a loaded machine changes least: waiting for a core is not counted)."""
    one_a, cpu_a, res = timed(lambda: estimate(panel, settings))
    with per_cell_timer() as in_by:  # the same functions inside --by (its groups run one after another)
        by_t, by_cpu, by = timed(lambda: estimate_by(panel, settings, "domain", shared_controls=shared))
    one_b, cpu_b, _ = timed(lambda: estimate(panel, settings))
    first = by.names[0]
    mine = panel.covariates["domain"] == first.split("=", 1)[1]
    rows = np.flatnonzero((mine & ~panel.never_treated) | panel.never_treated if shared else mine)
    alone = subset_panel(panel, rows)
    with per_cell_timer() as spent:
        lone, _, _ = timed(lambda: estimate(alone, settings))
    cpu = {"one": min(cpu_a, cpu_b), "by": by_cpu, "share": spent[1], "in_by": in_by[1]}
    return {"one_a": one_a, "one_b": one_b, "one": min(one_a, one_b), "by": by_t, "share": spent[0], "lone": lone,
            "in_by": in_by[0], "res": res, "by_result": by, "load": os.getloadavg()[0], "cpu": cpu}  # fmt: skip


def report(label: str, k: int, r: dict, panel: Panel, shared: bool) -> None:
    """Print one round's timings and the ratio to the issue's target."""
    by = r["by_result"]
    g = len(by.names)
    n, n_never = panel.n_instances, int(panel.never_treated.sum())
    shares = [(t + (n_never if shared else c)) / n for t, c in (by.sizes[x] for x in by.names)]
    target = 1.5 * r["one"] + g * r["share"]
    strict = 1.5 * r["one"] + r["one"] * sum(shares)
    cells = sum(by.groups[x].cells.height for x in by.names)
    print(f"round {k + 1}{label} (load average {r['load']:.1f})")
    height = r["res"].cells.height
    print(f"  one estimate   {r['one']:7.2f} s (runs {r['one_a']:.2f}, {r['one_b']:.2f}; {height} cells)")
    print(f"  --by domain    {r['by']:7.2f} s ({g} groups, {cells} cells) = {r['by'] / r['one']:.2f} x one")
    print(f"  per-group share {r['share']:6.2f} s (per-cell part of a lone estimate of {by.names[0]}, "
          f"{r['lone']:.2f} s in all)")  # fmt: skip
    rest = r["by"] - r["in_by"]
    print(f"  inside --by    {r['in_by']:7.2f} s per-cell ({r['in_by'] / g:.2f} s a group), the rest "
          f"{rest:.2f} s = {rest / r['one']:.2f} x one (what the groups share or split)")  # fmt: skip
    print(f"  target         {target:7.2f} s = 1.5 x one + {g} x share = {target / r['one']:.2f} x one: "
          f"{'met' if r['by'] <= target else 'NOT met'} (by / target = {r['by'] / target:.2f})")  # fmt: skip
    print(f"  strict target  {strict:7.2f} s = {strict / r['one']:.2f} x one (share = instances' share): "
          f"{'met' if r['by'] <= strict else 'not met'}")  # fmt: skip
    c = r["cpu"]
    c_rest, c_target = c["by"] - c["in_by"], 1.5 * c["one"] + g * c["share"]
    print(f"  CPU seconds    one {c['one']:.2f}, --by {c['by']:.2f}, share {c['share']:.2f}, per-cell inside --by "
          f"{c['in_by']:.2f}, the rest {c_rest:.2f} = {c_rest / c['one']:.2f} x one; by / target = "
          f"{c['by'] / c_target:.2f}")  # fmt: skip


def _ours() -> dict:
    return {k: v for k, v in sys.modules.items() if k == "memtui" or k.startswith("memtui.")}


@contextlib.contextmanager
def _using(modules: dict):
    """``modules`` (one memtui's) in sys.modules while the block runs: what memtui imports inside its functions
    (scipy-free paths import memtui modules lazily) comes from the same version as the caller."""
    saved = _ours()
    for k in saved:
        del sys.modules[k]
    sys.modules.update(modules)
    try:
        yield
    finally:
        for k in modules:
            sys.modules.pop(k, None)
        sys.modules.update(saved)


def bound_to(src: str):
    """This benchmark as a second module bound to the memtui under ``src`` (another checkout's src folder, e.g. a
    git worktree of main), and that memtui's modules: both versions live in one process, so their rounds alternate
    under the same load."""
    saved = _ours()
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, os.path.abspath(src))
    try:
        spec = importlib.util.spec_from_file_location("_subgroups_against", __file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in ("memtui.engine.bands", "memtui.estimation.clusters", "memtui.estimation.crosscheck"):
            importlib.import_module(name)  # imported lazily by memtui's functions: bind this version's now
        theirs = _ours()
    finally:
        sys.path.remove(os.path.abspath(src))
        for k in _ours():
            del sys.modules[k]
        sys.modules.update(saved)
    if not os.path.samefile(os.path.dirname(theirs["memtui"].__file__), os.path.join(src, "memtui")):
        raise SystemExit(f"--against {src}: memtui was not imported from there")
    return module, theirs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=list(SHAPES), default="full")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--band", choices=["calibrated", "classic"], default="calibrated")
    ap.add_argument("--shared-controls", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--against", metavar="SRC", help="another checkout's src folder: its rounds alternate with ours")
    args = ap.parse_args()
    sim = SHAPES[args.shape]
    versions = [("", sys.modules[__name__], _ours())]
    if args.against:
        versions = [(" this tree", *versions[0][1:]), (f" {args.against}", *bound_to(args.against))]
    runs = []
    for label, module, modules in versions:
        with _using(modules):
            panel = module.make_panel(sim, args.groups)
            module.estimate(panel, module.Settings(draws=20, band=args.band))  # warm up: imports, first-call costs
            runs.append((label, module, modules, panel, module.Settings(draws=args.draws, band=args.band)))
    threads = {k: os.environ.get(k, "unset") for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    print(f"panel {runs[0][3].n_instances} instances x {sim.n_checkpoints} checkpoints, B = {args.draws}, "
          f"{args.band} band, {args.groups} groups{' (shared controls)' if args.shared_controls else ''}; "
          f"{os.cpu_count()} cores, {threads}")  # fmt: skip
    for k in range(args.repeat):
        for label, module, modules, panel, settings in runs:
            with _using(modules):
                r = module.one_round(panel, settings, args.shared_controls)
            report(label, k, r, panel, args.shared_controls)


if __name__ == "__main__":
    main()
