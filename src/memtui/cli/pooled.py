"""`memtui compare SUITE --pooled`: a seed suite's pooled estimate (``estimation.seeds``) as lines and CSV files.
Not a verb of its own: ``cli.compare`` calls ``run_pooled``.

Files ``-o OUT.csv`` writes: OUT.csv, the pooled profile (one row per (cohort, checkpoint) cell every seed
estimates: estimate, std_error, independent_se, crit, band_low/high, significant, seed_sd/min/max), and
OUT-persistent.csv, the pooled persistent curve by c - g with the same columns."""

from __future__ import annotations

import math
from pathlib import Path

from memtui.cli.numbers import p_value
from memtui.core.errors import MemtuiError
from memtui.core.text import clean

SUMMARY_LABELS = {"instantaneous": "instantaneous (c = g)", "residual": "residual (final checkpoint)",
                  "overall": "overall"}  # fmt: skip


def run_pooled(args, out: Path | None, settings_of, companion, write_together) -> int:
    """Load the panels as a suite, refuse anything but a seed suite, estimate and print the pooled profile."""
    from memtui.cli.options import progress_bar
    from memtui.estimation.seeds import estimate_pooled
    from memtui.estimation.suite_load import is_seed_suite, load_suite

    suite = load_suite(args.panels)
    if not is_seed_suite(suite.panels):
        raise MemtuiError(
            "--pooled averages one model's seeds: these panels are not a seed suite (memtui build --order neox "
            "--seeds writes one; its panels carry the same seed_suite attribute)."
        )
    settings = settings_of(args, suite.panels[0])
    pooled = estimate_pooled(suite.panels, settings, suite.names, progress=progress_bar())
    for line in pooled_lines(pooled, suite.notes):
        print(line)
    if out is not None:
        write_together({out: pooled.cells, companion(out, "persistent"): pooled.persistent})
        print(f"wrote {clean(out)} ({pooled.cells.height} pooled cells) and {clean(companion(out, 'persistent'))}")
    return 0


def _num(value, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def pooled_lines(pr, suite_notes=()) -> list[str]:
    """The pooled estimate's summary: settings, the profile's band, the scalar summaries with their spread across
    seeds, the agreement tests and the notes."""
    from memtui.estimation.settings import coverage

    s = pr.settings
    post = pr.cells.filter(~pr.cells["pre_treatment"])
    lines = [
        f"pooled over {len(pr.names)} seeds ({', '.join(clean(n, 30) for n in pr.names)}) on {clean(s.metric, 40)}, "
        f"estimator {s.estimator}, controls {s.control_group.replace('_', ' ')}; one multiplier per instance shared "
        f"by every seed, B={s.draws}; classic simultaneous {coverage(s.alpha)} bands",
        f"profile: {post.height} post-treatment cells every seed estimates, {int(post['significant'].sum())} "
        f"significant (critical value {_num(pr.crit, '.3f')}); mean SD across seeds {_num(_mean(post['seed_sd']))}, "
        f"mean pooled standard error {_num(_mean(post['std_error']))} (seeds as independent: "
        f"{_num(_mean(post['independent_se']))})",
        "",
        f"{'summary':<28} {'pooled':>9} {'(se)':>8} {coverage(s.alpha) + ' interval':>22} {'indep. se':>9} "
        f"{'seed sd':>8} {'seed min – max':>19}",
    ]
    for name, summ in pr.summaries.items():
        label = SUMMARY_LABELS[name] if name in SUMMARY_LABELS else f"persistent, {name.split('_')[-1]} ckpt after"
        interval = f"[{_num(summ.low)}, {_num(summ.high)}]"
        lines.append(
            f"{label:<28} {_num(summ.estimate):>9} {_num(summ.std_error, '.3g'):>8} {interval:>22} "
            f"{_num(summ.independent_se, '.3g'):>9} {_num(summ.sd, '.3g'):>8} "
            f"{_num(summ.min) + ' – ' + _num(summ.max):>19}"
        )
    lines += ["", "do the seeds agree? largest studentised deviation of a seed from the pooled value (joint draws)",
              f"{'scope':<14} {'cells':>6} {'seed sd':>9} {'pooled se':>10} {'max |t|':>8} {'crit':>7} {'p':>7}  "
              "verdict"]  # fmt: skip
    for a in pr.agreement.values():
        verdict = "n/a" if not math.isfinite(a.statistic) else f"differ ({a.seed})" if a.rejected else "agree"
        p = p_value(a.p_value, s.alpha) if math.isfinite(a.p_value) else "n/a"
        lines.append(
            f"{a.scope:<14} {a.n:>6} {_num(a.spread, '.3g'):>9} {_num(a.std_error, '.3g'):>10} "
            f"{_num(a.statistic, '.3f'):>8} {_num(a.crit, '.3f'):>7} {p:>7}  {verdict}"
        )
    lines.append("seed sd: mean over the scope's cells of the SD of the seeds' estimates (how much is data order)")
    lines += [f"note   {clean(n, limit=None)}" for n in (*suite_notes, *pr.notes)]
    return lines


def _mean(series) -> float:
    values = series.drop_nans().drop_nulls()
    return float(values.mean()) if len(values) else math.nan
