"""`memtui estimate`: estimate the memorisation profile and print its summaries."""

from __future__ import annotations

import math

from memtui.cli.numbers import p_value
from memtui.cli.options import (
    add_by_args,
    add_covariates_arg,
    add_panel_args,
    add_settings_args,
    estimate_from_args,
    printable_notes,
    run_notes,
)
from memtui.core.text import clean

SUMMARY = "estimate the memorisation profile and print its summaries"


def add_arguments(p) -> None:
    add_panel_args(p)
    add_settings_args(p, "estimate")
    add_covariates_arg(p)
    add_by_args(p)
    p.add_argument("--engine-device", default="auto", choices=["auto", "cpu", "torch-cpu", "cuda"],
                   help="where the bootstrap's group sums run: auto (a CUDA GPU for a large panel where torch finds "
                        "one, else the CPU's compiled loop), cpu, torch-cpu (torch's CPU path, to check it) or cuda; "
                        "the same numbers within float32 rounding (auto reads a cached estimate whichever device "
                        "computed it, a device named only one it computed)")  # fmt: skip


def _num(value, spec: str) -> str:
    """A number for the summary, or "n/a" where there is none (a NaN is never shown as if it were a value)."""
    return format(value, spec) if value is not None and math.isfinite(value) else "n/a"


def _fmt_row(r: dict) -> str:
    star = "*" if r["significant"] else " "
    if r["band_low"] is None or not (math.isfinite(r["band_low"]) and math.isfinite(r["band_high"])):
        return f"{_num(r['estimate'], '10.4g'):>10} (no band: no sampling variation){star}"
    return f"{_num(r['estimate'], '10.4g'):>10} [{r['band_low']:.4g}, {r['band_high']:.4g}]{star}"


def run(args) -> int:
    from memtui.engine import torch_bootstrap
    from memtui.estimation.results import persistent_cells
    from memtui.estimation.settings import coverage
    from memtui.panel.model import METRIC_LABEL

    if args.engine_device != "auto":
        torch_bootstrap.check(args.engine_device)  # refused before the panel is read
    with torch_bootstrap.using(args.engine_device):
        if args.by:
            return _print_by(args)
        panel, res = estimate_from_args(args)
    s = res.settings
    cells = res.cells
    post = cells.filter(~cells["pre_treatment"])
    metric = f"{clean(s.metric, 80)} ({clean(METRIC_LABEL.get(s.metric, s.metric), 80)})"
    print(f"{clean(panel.path)}: {metric}, estimator {s.estimator}, "
          f"controls {s.control_group.replace('_', ' ')}, base {s.base_period}, engine {s.engine}")  # fmt: skip
    band = (
        f"{res.band} simultaneous {coverage(s.alpha)} band, crit {_num(res.crit, '.3f')}"
        if s.draws
        else "pointwise, no bootstrap"
    )
    draws = _draws(res.band, s.draws)
    print(f"profile        {len(res.cohorts)} cohorts x {len(res.checkpoints)} checkpoints: {cells.height} cells, "
          f"{post['significant'].sum()}/{post.height} post-treatment significant ({band}, {draws})")  # fmt: skip
    for name, frame in (("instantaneous", res.instantaneous), ("residual", res.residual)):
        if frame.height:
            where = " (c = g)" if name == "instantaneous" else f" at step {frame['checkpoint'][0]}"
            print(f"{name:<14} mean {frame['estimate'].mean():.4g} over {frame.height} cohorts{where}, "
                  f"{frame['significant'].sum()} significant; range {frame['estimate'].min():.4g} .. "
                  f"{frame['estimate'].max():.4g}")  # fmt: skip
    pers = persistent_cells(res)
    if pers.height:
        print("persistent (c > g) by c - g: estimate [simultaneous band] (* significant)")
        rows = pers.to_dicts()
        shown = rows if len(rows) <= 8 else rows[:5] + [None] + rows[-2:]
        for r in shown:
            print("               ..." if r is None else f"    c-g={r['event_time']:<9}{_fmt_row(r)}")
    o = res.overall
    print(f"overall        average post-treatment {o.estimate:.4g} (se {_num(o.std_error, '.3g')})"
          f"{', significant' if o.significant else ''}")  # fmt: skip
    pt = res.pretrend
    if pt.n_cells and s.draws and not math.isfinite(pt.p_value):  # no placebo cell has a standard error
        print(
            f"pre-trend      {pt.n_cells} placebo cells (c < g), none with sampling variation or a band "
            "(the metric changes alike for every instance there, or the cells are too small): nothing to test"
        )
    elif pt.n_cells and s.draws:
        verdict = "no evidence of pre-trends" if pt.p_value >= s.alpha else "pre-trends detected: check parallel trends"
        print(f"pre-trend      {pt.n_cells} placebo cells (c < g): sup-t {pt.sup_t:.3f}, "
              f"p = {p_value(pt.p_value, s.alpha)}, {pt.n_significant} significant; {verdict}")  # fmt: skip
    for note in (*printable_notes(res), *run_notes(args)):
        print(f"note           {note}")
    return 0


def _draws(band: str, draws: int) -> str:
    """How the header names the draws: the band's own label (P=... for permutations), else B=... (bootstrap)."""
    from memtui.engine.band_registry import BANDS

    label = getattr(BANDS.get(band), "draws_label", None)
    return label(draws) if label is not None else f"B={draws}"


def _print_by(args) -> int:
    from memtui.cli.options import estimate_by_from_args
    from memtui.estimation.settings import coverage

    panel, by = estimate_by_from_args(args)
    s = by.settings
    design = "shared never-treated controls" if by.shared_controls else "each group with its own controls"
    print(f"{clean(panel.path)}: {clean(s.metric, 80)} by {clean(by.spec, 80)}: {len(by.names)} groups, {design}")
    if s.draws:
        print(f"joint band     {coverage(s.alpha)} simultaneous over every group: profile crit "
              f"{_num(by.joint_crit['profile'], '.3f')}, persistent crit {_num(by.joint_crit['persistent'], '.3f')} "
              f"({s.band}, {_draws(s.band, s.draws)})")  # fmt: skip
    for name in by.names:
        res = by.groups[name]
        cells = by.joint(name) if s.draws else res.cells
        post = cells.filter(~cells["pre_treatment"])
        inst = res.instantaneous
        o = res.overall
        treated, controls = by.sizes[name]
        print(f"group {clean(name, 40):<24} {treated} treated, {controls} controls: {post['significant'].sum()}/"
              f"{post.height} post cells significant (joint band); instantaneous mean "
              f"{_num(inst['estimate'].mean() if inst.height else None, '.4g')}; overall {o.estimate:.4g} "
              f"(se {_num(o.std_error, '.3g')})")  # fmt: skip
    for diff in by.differences:
        o = diff.overall
        ci = f"[{_num(o['ci_low'], '.4g')}, {_num(o['ci_high'], '.4g')}]"
        print(f"difference     {clean(diff.a, 40)} - {clean(diff.b, 40)}: overall {o['estimate']:.4g} {ci}, "
              f"p = {_num(o['p_value'], '.3g')}")  # fmt: skip
        print(f"               {clean(diff.sentence(), limit=None)}")
    if by.trend is not None:
        print(f"dose-response  {clean(by.trend.sentence(), limit=None)}")
    for note in (*by.notes, *run_notes(args)):
        print(f"note           {clean(note, limit=None)}")
    return 0
