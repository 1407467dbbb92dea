"""The report of `memtui demo --inserted`: verdicts, figures, ``report.md`` and ``report.json`` from the study
(:mod:`memtui.demo.inserted_study`). Each verdict is computed from the numbers and states them, whichever way it goes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from memtui.core.files import atomic_write
from memtui.demo.inserted_study import TRUTHS, Study, analyse, coverage, truth_noise
from memtui.report.svgplot import PALETTE, Series, line_plot, write_svg

FIGURES = ("inserted-dose.svg", "inserted-forgetting.svg", "inserted-scatter.svg", "inserted-spillover.svg")


def _verdict(ok: int, n: int) -> str:
    return "held" if n and ok == n else "partly" if ok else "did not hold"


def summaries(s: Study) -> dict:
    """Bias and coverage against both truths: every post cell, the instantaneous cells, the persistent curve."""
    out = {}
    for truth in ("own", "aligned", "direct"):
        out[truth] = {
            "cells": coverage(s.cells, truth),
            "cells_pointwise": coverage(s.cells, truth, "ci"),
            "instantaneous": coverage(s.instantaneous, truth),
            "persistent": coverage(s.persistent.filter(pl.col("event_time") > 0), truth),
        }
    high = s.cells.filter(pl.col("dose") >= 8)
    out["own"]["cells_dose_8_16"] = coverage(high, "own")
    out["aligned"]["cells_dose_8_16"] = coverage(high, "aligned")
    out["truth_noise"] = truth_noise(s)
    return out


def dose_table(s: Study) -> pl.DataFrame:
    """Per dose: the mean instantaneous estimate and truths over its cohorts (one per timing), significant cohorts,
    the mean persistent estimate and truths at event times > 0, and how many of these the band covers."""
    rows = []
    for d, parts in s.by_dose.items():
        inst, pers = parts["instantaneous"], parts["persistent"].filter(pl.col("event_time") > 0)
        row = {"dose": d, "cohorts": inst.height, "instantaneous": float(inst["estimate"].mean()),
               "significant": int(inst["significant"].sum()), "estimates": inst.height + pers.height}  # fmt: skip
        for t in TRUTHS:
            row[f"instantaneous_{t}"] = float(inst[t].mean())
        row["persistent"] = float(pers["estimate"].mean()) if pers.height else math.nan
        for t in ("own", "aligned"):
            row[f"persistent_{t}"] = float(pers[t].mean()) if pers.height else math.nan
            row[f"band_covers_{t}"] = int(inst[f"band_covers_{t}"].sum()) + int(pers[f"band_covers_{t}"].sum())
        rows.append(row)
    return pl.DataFrame(rows)


def claims(s: Study, summ: dict, doses: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(title, verdict, sentence with the numbers) for each thing the study checks."""
    out = []
    ident = s.identity
    ok = ident["scores_equal_before"] and ident["weights_equal_before"]
    after = "the controls too differ" if ident["controls_differ_after"] else "only canaries differ"
    out.append(("The two runs are one computation until the first copy", "held" if ok else "did not hold",
                f"the {ident['checkpoints_before']} checkpoints before step {ident['first_copy_step']} have "
                f"{'equal' if ident['weights_equal_before'] else 'different'} weights and "
                f"{'bitwise-equal' if ident['scores_equal_before'] else 'different'} scores on every canary and "
                f"control; after it, {after}"))  # fmt: skip
    out.append(_coverage_claim("The band covers the instance-specific truth", summ["own"]))
    out.append(_coverage_claim("The band covers the aligned truth (the offset before insertion removed)",
                               summ["aligned"]))  # fmt: skip
    d = summ["direct"]
    out.append(("The band covers the direct counterfactual (perturbed minus standard)",
                _verdict(sum(x["coverage"] >= 0.95 for x in (d["cells"], d["instantaneous"], d["persistent"])), 3),
                f"{d['cells']['covered']} of {d['cells']['cells']} post cells ({d['cells']['coverage']:.1%}); "
                f"bias {d['cells']['bias']:+.2f} nats, of which the controls' own change (spill-over) explains "
                f"{-float(s.cells['spill'].mean()):+.2f}"))  # fmt: skip
    out.append(_dose_claim(s, doses))
    out.append(_detection_claim(s, doses))
    return out


def _coverage_claim(title: str, summ: dict) -> tuple[str, str, str]:
    c, i, p = summ["cells"], summ["instantaneous"], summ["persistent"]
    n_ok = sum(x["coverage"] >= 0.95 for x in (c, i, p) if x["cells"])
    return (title, _verdict(n_ok, 3),
            f"the calibrated band covers it in {c['covered']} of {c['cells']} post cells ({c['coverage']:.1%}; "
            f"bias {c['bias']:+.2f}, RMSE {c['rmse']:.2f} nats), {i['covered']} of {i['cells']} instantaneous "
            f"cells (bias {i['bias']:+.2f}) and {p['covered']} of {p['cells']} persistent event times (bias "
            f"{p['bias']:+.2f}); {'every' if c['all_covered'] else 'not every'} post cell at once")  # fmt: skip


def _detection_claim(s: Study, doses: pl.DataFrame) -> tuple[str, str, str]:
    """Which doses are detected at their own checkpoint: in the estimate of every cohort (one band family over all
    post cells) and in each dose's stand-alone estimate (a family over its own cells only, so narrower)."""
    sig = doses["significant"].to_list()
    joint = s.instantaneous.group_by("dose").agg(pl.col("significant").sum()).sort("dose")
    joint_sig = dict(zip(joint["dose"].to_list(), joint["significant"].to_list(), strict=True))
    each = ", ".join(f"{d}: {joint_sig.get(d, 0)}/{n} and {k}/{n}"
                     for d, k, n in zip(doses["dose"], sig, doses["cohorts"], strict=True))  # fmt: skip
    detected = sum(joint_sig.get(d, 0) > 0 for d in doses["dose"].to_list())
    return ("Every dose is detected instantaneously", _verdict(detected, len(sig)),
            f"significant instantaneous cohorts per dose, in the estimate of all cohorts and in the dose's own "
            f"estimate: {each}")  # fmt: skip


def _dose_claim(s: Study, doses: pl.DataFrame) -> tuple[str, str, str]:
    """Instantaneous memorisation grows with the dose: per timing, the highest dose above the lowest; overall, the
    Spearman correlation of the per-cohort estimate with the dose."""
    from scipy import stats

    inst = s.instantaneous
    lo, hi = int(doses["dose"].min()), int(doses["dose"].max())
    wins = []
    for t in sorted(set(inst["timing"].to_list())):
        sub = inst.filter(pl.col("timing") == t)
        e = dict(zip(sub["dose"].to_list(), sub["estimate"].to_list(), strict=True))
        wins.append((t, e.get(hi, math.nan) > e.get(lo, math.nan)))
    rho = float(stats.spearmanr(inst["dose"], inst["estimate"])[0]) if inst.height > 2 else math.nan
    shown = ", ".join(f"{d}: {v:.2f} (truth {t:.2f}, aligned {a:.2f})" for d, v, t, a in
                      zip(doses["dose"], doses["instantaneous"], doses["instantaneous_own"],
                          doses["instantaneous_aligned"], strict=True))  # fmt: skip
    return ("Instantaneous memorisation grows with the dose", _verdict(sum(w for _, w in wins), len(wins)),
            f"dose {hi} above dose {lo} in {sum(w for _, w in wins)} of {len(wins)} timings; mean instantaneous "
            f"estimate per dose {shown}; Spearman with the dose over {inst.height} cohorts {rho:+.2f}")  # fmt: skip


def figures(s: Study, folder: Path) -> list[Path]:
    """The dose-response, the forgetting curves per dose, estimate against truth per cell, and the spill-over."""
    m = s.metric
    out = []
    inst = s.instantaneous
    series = []
    for k, t in enumerate(sorted(set(inst["timing"].to_list()), key=["early", "middle", "late"].index)):
        sub = inst.filter(pl.col("timing") == t).sort("dose")
        x = np.log2(sub["dose"].to_numpy())
        color = PALETTE[k]
        series.append(Series(f"{t}: DiD", x, sub["estimate"], sub["band_low"], sub["band_high"], color=color))
        series.append(Series(f"{t}: truth (aligned)", x, sub["aligned"], color=color, dashed=True))
    out.append(write_svg(folder / "inserted-dose.svg", line_plot(
        series, title="Instantaneous memorisation by dose", xlabel="log2 dose (copies: 1, 2, 4, 8, 16)",
        ylabel=f"{m}: ATT(g, g)")))  # fmt: skip
    series = []
    for k, (d, parts) in enumerate(s.by_dose.items()):
        pers = parts["persistent"]
        color = PALETTE[k % len(PALETTE)]
        series.append(Series(f"dose {d}", pers["event_time"], pers["estimate"], pers["band_low"], pers["band_high"],
                             color=color))  # fmt: skip
        series.append(Series(f"dose {d}: truth", pers["event_time"], pers["aligned"], color=color, dashed=True))
    out.append(write_svg(folder / "inserted-forgetting.svg", line_plot(
        series, title="Forgetting: persistent memorisation per dose", xlabel="event time c - g (steps)",
        ylabel=f"{m}: mean ATT at c - g", width=620, height=380)))  # fmt: skip
    out.append(_scatter(s, folder))
    out.append(_spill_figure(s, folder))
    return out


def _scatter(s: Study, folder: Path) -> Path:
    """Each post cell's DiD estimate against its (aligned) truth, by dose, with the diagonal."""
    cells = s.cells
    series = []
    lo = float(min(cells["aligned"].min(), cells["estimate"].min()))
    hi = float(max(cells["aligned"].max(), cells["estimate"].max()))
    series.append(Series("estimate = truth", [lo, hi], [lo, hi], color="#444", dashed=True, markers=False))
    for k, d in enumerate(sorted(set(cells["dose"].to_list()))):
        sub = cells.filter(pl.col("dose") == d)
        x = np.ravel(np.column_stack([sub["aligned"].to_numpy(), np.full(sub.height, np.nan)]))  # NaN: no line
        y = np.ravel(np.column_stack([sub["estimate"].to_numpy(), np.full(sub.height, np.nan)]))
        series.append(Series(f"dose {d}", x, y, color=PALETTE[k % len(PALETTE)]))
    return write_svg(folder / "inserted-scatter.svg", line_plot(
        series, title="DiD estimate against the truth, every post cell", xlabel="truth: aligned own effect (nats)",
        ylabel="DiD estimate (nats)", hline=None))  # fmt: skip


def _spill_figure(s: Study, folder: Path) -> Path:
    """The controls' change (perturbed minus standard): what inserting other canaries did to any canary."""
    p, st = s.pair.perturbed, s.pair.standard
    sign = p.sign(s.metric)
    diff = sign * (p.metrics[s.metric] - st.metrics[s.metric])[p.never_treated]
    mean, se = diff.mean(axis=0), diff.std(axis=0, ddof=1) / math.sqrt(len(diff))
    spill = Series("controls: perturbed - standard (±2 SE)", p.steps, mean, mean - 2 * se, mean + 2 * se)
    direct = (s.truth.group_by("checkpoint").agg(pl.col("direct").filter(pl.col("event_time") >= 0).mean())
              .sort("checkpoint"))  # fmt: skip
    canaries = Series("treated canaries: perturbed - standard (mean of cohorts)", direct["checkpoint"],
                      direct["direct"], color=PALETTE[1])  # fmt: skip
    return write_svg(folder / "inserted-spillover.svg", line_plot(
        [spill, canaries], title="What the perturbation does to canaries never inserted", xlabel="checkpoint step",
        ylabel=f"{s.metric}: perturbed - standard", width=620))  # fmt: skip


def _num(v, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:,}" if isinstance(v, int | np.integer) else f"{v:.{digits}f}"


def _md_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _design(s: Study, timings: dict | None) -> list[str]:
    cfg, p = s.pair.config, s.pair.perturbed
    demo = json.loads(p.attrs.get("demo_config", "{}") or "{}")
    n_ins = int((s.pair.dose > 0).sum())
    text = (
        f"Two GPT-NeoX models ({demo.get('layers')} x {demo.get('hidden')}, {p.n_parameters or 0:,} parameters) "
        f"trained from the same initialisation on the same rows in the same order ({demo.get('steps')} steps of "
        f"{demo.get('batch')} x {demo.get('seq_len')} byte tokens of the Unicode 3.2 corpus, Pythia's schedule shape: "
        f"warm-up, cosine to {demo.get('min_lr_ratio')} of a {demo.get('lr')} peak). The *perturbed* run also sees "
        f"{n_ins} canaries, random sequences of the corpus's byte frequencies, {cfg.get('per_group')} per (dose, "
        f"timing) group: doses {', '.join(map(str, cfg.get('doses', [])))} copies, timings "
        f"{', '.join(t for t, _ in cfg.get('timings', []))}; a canary's copies are spread over {cfg.get('window')} "
        f"steps (half of them before its cohort's first checkpoint) and replace ordinary rows of their batches. Its "
        f"{int(p.never_treated.sum())} never-inserted twins are the controls. One panel, scored by both models at "
        f"{len(p.steps)} checkpoints (one every {demo.get('every')} steps); memtui estimates from the perturbed "
        f"model's scores alone (`{s.metric}`, {s.result.settings.draws} draws, {s.result.band} band), the standard "
        "model's scores give the truth."
    )
    out = [text]
    if timings:
        shown = "; ".join(f"{n}: trained in {t.get('train_s', 0):.0f} s, extracted in {t.get('extract_s', 0):.0f} s"
                          for n, t in timings.items())  # fmt: skip
        out += ["", f"Timings: {shown}."]
    return out


def render(s: Study, summ: dict, doses: pl.DataFrame, cl, *, timings=None, fig_dir: str = ".") -> str:
    fig = (lambda n: n) if fig_dir == "." else (lambda n: f"{fig_dir.rstrip('/')}/{n}")
    out = ["# Ground truth inserted on purpose: memtui against the counterfactual model", "", *_design(s, timings)]
    out += ["", "Three truths per cohort and checkpoint (`memtui.demo.inserted_study`): the *direct* counterfactual "
            "(perturbed minus standard on the cohort's canaries); the *own* effect (the same minus that difference "
            "on the controls, the spill-over of training on other canaries), which DiD with never-inserted controls "
            "targets; and the *aligned* own effect (minus its value at the checkpoint before the cohort's "
            "insertion), against which DiD's error is exactly the standard model's DiD on the same canaries: the "
            "sampling noise of trends the band is meant to cover.", "", "## Verdicts", ""]  # fmt: skip
    out += [f"- **{t}: {v}.** {x[0].upper() + x[1:]}." for t, v, x in cl]
    rows = []
    for truth in ("own", "aligned", "direct"):
        for scope, key in (("post cells (band)", "cells"), ("post cells (pointwise 95%)", "cells_pointwise"),
                           ("instantaneous", "instantaneous"), ("persistent, c - g > 0", "persistent")):  # fmt: skip
            c = summ[truth][key]
            rows.append([truth, scope, c["cells"], _num(c.get("bias")), _num(c.get("rmse")),
                         f"{c.get('covered', 0)}/{c['cells']}", f"{c.get('coverage', math.nan):.1%}"])  # fmt: skip
    out += ["", "## Bias and coverage", "", _md_table(["truth", "scope", "cells", "bias", "RMSE", "covered",
                                                        "coverage"], rows)]  # fmt: skip
    noise = summ["truth_noise"]
    if noise["cells"]:
        out += ["", f"The truth is itself measured on {s.pair.config.get('per_group')} canaries per cohort: before a "
                f"cohort's insertion its own effect is zero in expectation, yet over the {noise['cells']} placebo "
                f"cells after the first copy of any canary it is {noise['rms_own']:.2f} nats RMS (the direct one "
                f"{noise['rms_direct']:.2f}): differences of that size between estimate and truth are the truth's "
                "noise as much as the estimate's."]  # fmt: skip
    out += ["", f"![estimate against truth]({fig('inserted-scatter.svg')}) "
            f"![spill-over]({fig('inserted-spillover.svg')})"]  # fmt: skip
    out += ["", "## Dose-response and forgetting", ""]
    rows = [[r["dose"], r["cohorts"], _num(r["instantaneous"]), _num(r["instantaneous_own"]),
             _num(r["instantaneous_aligned"]), _num(r["instantaneous_direct"]), f"{r['significant']}/{r['cohorts']}",
             _num(r["persistent"]), _num(r["persistent_own"]), _num(r["persistent_aligned"]),
             f"{r['band_covers_own']}/{r['estimates']}", f"{r['band_covers_aligned']}/{r['estimates']}"]
            for r in doses.iter_rows(named=True)]  # fmt: skip
    out.append(_md_table(["dose", "cohorts", "instantaneous (DiD)", "own", "aligned", "direct", "significant",
                          "persistent mean (DiD)", "own", "aligned", "band covers own", "covers aligned"],
                         rows))  # fmt: skip
    out += ["", "Each dose is estimated on its own canaries and every control (stand-alone estimates, one band family "
            "each); `estimate --by dose` with one set of draws would give all doses one family and a band for "
            "their differences.", "", f"![dose-response]({fig('inserted-dose.svg')})", "",
            f"![forgetting]({fig('inserted-forgetting.svg')})"]  # fmt: skip
    out += ["", "## Per cohort", "", _cohort_table(s)]
    return "\n".join(out) + "\n"


def _cohort_table(s: Study) -> str:
    rows = [[r["cohort"], r["timing"], r["dose"], _num(r["estimate"]),
             f"[{_num(r['band_low'])}, {_num(r['band_high'])}]", _num(r["own"]), _num(r["aligned"]),
             _num(r["direct"]), "yes" if r["band_covers_own"] else "**no**",
             "yes" if r["band_covers_aligned"] else "**no**"]
            for r in s.instantaneous.sort("cohort").iter_rows(named=True)]  # fmt: skip
    header = ["cohort g", "timing", "dose", "ATT(g, g)", "band", "truth: own", "aligned", "direct", "covers own",
              "covers aligned"]  # fmt: skip
    return _md_table(header, rows)


def as_json(s: Study, summ: dict, doses: pl.DataFrame, cl, timings=None) -> dict:
    """Everything the report states, and the covariates (dose and timing per instance id) it used."""
    return {
        "metric": s.metric, "band": s.result.band, "draws": s.result.settings.draws, "config": s.pair.config,
        "timings": timings or {}, "identity": s.identity, "summaries": summ,
        "claims": [{"title": t, "verdict": v, "summary": x} for t, v, x in cl],
        "dose": doses.to_dicts(), "instantaneous": s.instantaneous.to_dicts(), "persistent": s.persistent.to_dicts(),
        "cells": s.cells.to_dicts(),
        "by_dose": {str(d): {k: f.to_dicts() for k, f in parts.items()} for d, parts in s.by_dose.items()},
        "covariates": {"id": s.pair.perturbed.ids.tolist(), "dose": s.pair.dose.tolist(),
                       "timing": [str(t) for t in s.pair.timing]},
    }  # fmt: skip


def write_report(
    out_dir: str | Path,
    *,
    draws: int = 1000,
    metric: str = "loglik",
    timings: dict | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Analyse the pair in ``out_dir``, write the figures, ``report.md`` and ``report.json``; the report's path."""
    out_dir = Path(out_dir)
    s = analyse(out_dir, draws=draws, metric=metric)
    summ, doses = summaries(s), dose_table(s)
    cl = claims(s, summ, doses)
    figures(s, out_dir)
    for title, verdict, _ in cl:
        log(f"{title}: {verdict}")
    data = json.dumps(as_json(s, summ, doses, cl, timings), indent=1, default=float)
    atomic_write(out_dir / "report.json", lambda tmp: tmp.write_text(data + "\n", encoding="utf-8"))
    text = render(s, summ, doses, cl, timings=timings)
    report = out_dir / "report.md"
    atomic_write(report, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return report
