"""The report of `memtui demo --seeds`: each seed's memorisation, the pooled estimate across seeds, and whether the
seeds agree (:mod:`memtui.estimation.seeds`), as markdown. The verdict on instantaneous memorisation is computed from
the numbers and says plainly when it did not hold."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from memtui.core.files import atomic_write
from memtui.core.text import clean
from memtui.estimation.settings import coverage
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import NEVER

LABELS = {"instantaneous": "instantaneous (c = g)", "residual": "residual (final checkpoint)", "overall": "overall"}


def _num(value, spec: str = ".3g") -> str:
    return "n/a" if value is None or not math.isfinite(float(value)) else format(float(value), spec)


def _p(p: float) -> str:
    return "n/a" if not math.isfinite(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def order_lines(panels: list[Path], names: list[str]) -> list[str]:
    """How far the data order moved the same instances: per other seed, the share of treated instances in another
    cohort than under the home seed, and the median distance between their training steps."""
    loaded = [read_panel(p) for p in panels]
    home = loaded[0]
    treated = home.treatment != NEVER
    steps = home.provenance["seed_steps"]
    lines = [f"The panels hold the same {home.n_instances} instances: {int(treated.sum())} sampled from {names[0]}'s "
             f"training positions, {int((~treated).sum())} held-out controls (never in the dataset)."]  # fmt: skip
    for k, (name, panel) in enumerate(zip(names[1:], loaded[1:], strict=True), start=1):
        moved = float(np.mean(panel.treatment[treated] != home.treatment[treated]))
        gap = np.abs(steps[treated, k] - steps[treated, 0])
        lines.append(f"Under {name}, {100 * moved:.0f}% of the sampled instances fall in another cohort than under "
                     f"{names[0]} (median distance between their steps {np.median(gap):.0f}).")  # fmt: skip
    return lines


def summary_table(pooled) -> list[str]:
    """Per summary: each seed's value, the pooled value with its interval and standard errors."""
    names = pooled.names
    cov = coverage(pooled.settings.alpha)
    lines = [f"| summary | {' | '.join(names)} | pooled | {cov} interval | se | se if seeds independent | seed sd |",
             "|---|" + "---:|" * (len(names) + 5)]  # fmt: skip
    for key, s in pooled.summaries.items():
        label = LABELS.get(key, f"persistent, {key.split('_')[-1]} checkpoint(s) after")
        seeds = " | ".join(_num(v, ".4g") for v in s.seeds)
        lines.append(f"| {label} | {seeds} | **{_num(s.estimate, '.4g')}** | [{_num(s.low)}, {_num(s.high)}] | "
                     f"{_num(s.std_error)} | {_num(s.independent_se)} | {_num(s.sd)} |")  # fmt: skip
    own = [int(pooled.seeds[n].instantaneous["significant"].sum()) for n in names]
    inst = pooled.instantaneous
    lines.append(f"| significant instantaneous cells | {' | '.join(f'{v} of {inst.height}' for v in own)} | "
                 f"**{int(inst['significant'].sum())} of {inst.height}** | simultaneous band | | | |")  # fmt: skip
    return lines


def agreement_table(pooled) -> list[str]:
    lines = ["| scope | cells | seed sd | pooled se | max \\|t\\| | critical value | p | verdict |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for a in pooled.agreement.values():
        verdict = "n/a" if not math.isfinite(a.statistic) else f"differ ({a.seed})" if a.rejected else "agree"
        lines.append(f"| {a.scope} | {a.n} | {_num(a.spread)} | {_num(a.std_error)} | {_num(a.statistic, '.3f')} | "
                     f"{_num(a.crit, '.3f')} | {_p(a.p_value)} | {verdict} |")  # fmt: skip
    return lines


def verdict(pooled) -> str:
    """Is the pooled instantaneous memorisation positive and significant? One sentence with the numbers."""
    s = pooled.summaries["instantaneous"]
    inst = pooled.instantaneous
    up = int(((inst["estimate"] > 0) & inst["significant"]).sum())
    held = s.low > 0
    return (f"Pooled instantaneous memorisation is {_num(s.estimate, '.4g')} nats "
            f"[{_num(s.low)}, {_num(s.high)}]: {'positive and significant' if held else 'not significantly positive'}"
            f"; {up} of {inst.height} instantaneous cells are positive and outside the simultaneous band.")  # fmt: skip


def render(pooled, panels: list[Path], cfg, timings: dict, total_s: float) -> str:
    base = pooled.settings
    model = clean(str(read_panel(panels[0]).attrs.get("model", "")), 300)
    lines = [
        "# memtui demo --seeds: one tiny model, two data orders",
        "",
        f"{model}, once under each of megatron-core's GPTDataset orders with seeds {', '.join(map(str, cfg.seeds))}, "
        f"from the same initial weights; a checkpoint every {cfg.base.every} steps. Metric: {base.metric}; "
        f"{base.draws} bootstrap draws with one multiplier per instance shared by every seed.",
        "",
        *order_lines(panels, pooled.names),
        "",
        verdict(pooled),
        "",
        "## Each seed and the pooled estimate",
        "",
        *summary_table(pooled),
        "",
        "## Do the seeds agree?",
        "",
        "The largest studentised deviation of a seed from the pooled value, calibrated by the joint draws; seed sd is "
        "the mean over the scope's cells of the SD of the seeds' estimates (how much of memorisation is data order).",
        "",
        *agreement_table(pooled),
        "",
        "## Notes",
        "",
        *(f"- {clean(n, limit=None)}" for n in pooled.notes),
        *(f"- {name}: trained in {t['train_s']:.0f} s, extracted in {t['extract_s']:.0f} s" for name, t in
          timings.items()),
        f"- the whole demo took {total_s:.0f} s; open the suite with `memtui compare {' '.join(p.name for p in panels)}"
        " --pooled`",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(path: Path, pooled, panels: list[Path], cfg, timings: dict, total_s: float) -> Path:
    text = render(pooled, panels, cfg, timings, total_s)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path
