"""The findings report of `memtui demo --suite`: does a suite of tiny models reproduce the paper's three claims?

(i) larger models memorise more, instantaneously and persistently; (ii) instantaneous memorisation tracks the
learning rate (correlation across cohorts between the instantaneous estimate and the rate at the cohort's training
steps); (iii) the profiles of different sizes correlate. Each claim gets a verdict computed from the numbers, stated
with them, whichever way it goes: the report says what did not hold as plainly as what did. Estimation is
:mod:`estimation.suite` (joint bootstrap draws, so correlations between models have intervals:
:mod:`estimation.correlations`); figures are SVG from :mod:`memtui.report.svgplot`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.core.text import clean
from memtui.demo.train import DemoConfig, lr_at
from memtui.estimation.correlations import Correlations, correlations
from memtui.estimation.headline import headline
from memtui.estimation.settings import DEFAULT_BAND, DEFAULT_DRAWS, Settings
from memtui.estimation.suite import SuiteResult, estimate_suite
from memtui.estimation.suite_load import load_suite
from memtui.report.svgplot import Series, grid, line_plot, write_svg

FIGURES = ("instantaneous.svg", "lr.svg", "persistent.svg", "correlations.svg", "tracking.svg")


@dataclass
class Claim:
    key: str  # i, ii, iii
    title: str
    verdict: str  # held, partly, did not hold
    summary: str  # one sentence with the numbers


@dataclass
class Findings:
    metric: str
    result: SuiteResult
    table: pl.DataFrame  # headline figures per model, plus persistent_mean
    lr: dict[int, float]  # cohort -> mean learning rate over its macro-batch's steps
    tracking: pl.DataFrame  # per model: pearson, p, spearman, p, partial (controlling for the step)
    corr: Correlations
    claims: list[Claim] = field(default_factory=list)
    config: DemoConfig | None = None


def demo_config(panel) -> DemoConfig:
    """The training settings the demo recorded in the panel (``demo_config`` attribute)."""
    text = panel.attrs.get("demo_config", "")
    try:
        fields = json.loads(text)
        known = set(DemoConfig.__dataclass_fields__)
        return DemoConfig(**{k: v for k, v in fields.items() if k in known})
    except (TypeError, ValueError):
        raise MemtuiError(
            "the panel records no demo training settings (attribute demo_config); the findings report is for panels "
            "made by `memtui demo --suite`."
        ) from None


def cohort_lr(cfg: DemoConfig, cohorts: Sequence[int]) -> dict[int, float]:
    """Cohort g was trained on in the macro-batch of steps g - every + 1 .. g: the mean rate over those steps."""
    return {
        int(g): float(np.mean([lr_at(cfg, s) for s in range(max(1, int(g) - cfg.every + 1), int(g) + 1)]))
        for g in cohorts
    }


def _partial(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """Pearson correlation of x and y after removing a linear trend in z from each."""
    design = np.column_stack([np.ones_like(z), z])

    def resid(v):
        return v - design @ np.linalg.lstsq(design, v, rcond=None)[0]

    rx, ry = resid(x), resid(y)
    den = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / den) if den > 0 else math.nan


def analyse(
    panels: Sequence[str | Path], *, draws: int = DEFAULT_DRAWS, metric: str = "loglik", band: str = DEFAULT_BAND
) -> Findings:
    from scipy import stats

    suite = load_suite(panels)
    cfg = demo_config(suite.panels[0])
    sr = estimate_suite(suite, Settings(metric=metric, draws=draws, band=band))
    table = headline(sr, metric)
    persistent_mean = []
    for name in suite.names:
        p = sr.results[name][metric].persistent.filter(pl.col("event_time") > 0)
        persistent_mean.append(float(p["estimate"].mean()) if p.height else math.nan)
    table = table.with_columns(pl.Series("persistent_mean", persistent_mean, dtype=pl.Float64))
    cohorts = sr.results[suite.names[0]][metric].instantaneous["cohort"].to_list()
    lr = cohort_lr(cfg, cohorts)
    rows = []
    for name in suite.names:
        inst = sr.results[name][metric].instantaneous.sort("cohort")
        g = inst["cohort"].to_numpy().astype(float)
        y = inst["estimate"].to_numpy()
        x = np.array([lr[int(c)] for c in g])
        ok = np.isfinite(y)
        r, p = stats.pearsonr(x[ok], y[ok])
        rho, p_rho = stats.spearmanr(x[ok], y[ok])
        rows.append((name, int(ok.sum()), float(r), float(p), float(rho), float(p_rho), _partial(x[ok], y[ok], g[ok])))
    tracking = pl.DataFrame(
        rows, schema=["model", "cohorts", "pearson", "p", "spearman", "p_spearman", "partial"], orient="row"
    )
    corr = correlations(sr, metric, scope="post")
    f = Findings(metric, sr, table, lr, tracking, corr, config=cfg)
    f.claims = [_claim_size(f), _claim_lr(f), _claim_corr(f)]
    return f


def _increasing(values: Sequence[float]) -> bool:
    v = np.asarray(values, dtype=float)
    return bool(np.all(np.isfinite(v)) and np.all(np.diff(v) > 0))


def _claim_size(f: Findings) -> Claim:
    from scipy import stats

    t = f.table
    names, params = t["model"].to_list(), t["parameters"].to_list()
    inst, pers = t["instantaneous"].to_numpy(), t["persistent_mean"].to_numpy()
    up_i, up_p = _increasing(inst), _increasing(pers)
    size = np.log([p or math.nan for p in params])
    rho_i = float(stats.spearmanr(size, inst)[0]) if len(names) > 2 else math.nan
    rho_p = float(stats.spearmanr(size, pers)[0]) if len(names) > 2 else math.nan
    verdict = "held" if up_i and up_p else "partly" if up_i or up_p else "did not hold"
    shown_i = " < ".join(f"{v:.2f}" for v in inst) if up_i else ", ".join(f"{v:.2f}" for v in inst)
    shown_p = " < ".join(f"{v:.2f}" for v in pers) if up_p else ", ".join(f"{v:.2f}" for v in pers)
    summary = (
        f"from {names[0]} to {names[-1]}, mean instantaneous memorisation is {shown_i} "
        f"({'increasing' if up_i else 'not increasing'} with size; Spearman with size {rho_i:+.2f}) and mean "
        f"persistent memorisation (event times > 0) is {shown_p} ({'increasing' if up_p else 'not increasing'}; "
        f"Spearman {rho_p:+.2f})"
    )
    return Claim("i", "Larger models memorise more, instantaneously and persistently", verdict, summary)


def _claim_lr(f: Findings) -> Claim:
    t = f.tracking
    sig = [(r > 0 and p < 0.05) for r, p in zip(t["pearson"], t["p"], strict=True)]
    verdict = "held" if all(sig) else "partly" if any(sig) else "did not hold"
    each = "; ".join(
        f"{m}: Pearson {r:+.2f} (p {p:.2g}), Spearman {s:+.2f}"
        for m, r, p, s in zip(t["model"], t["pearson"], t["p"], t["spearman"], strict=True)
    )
    summary = (
        f"across {t['cohorts'][0]} cohorts, the instantaneous estimate and the cohort's learning rate correlate "
        f"positively and significantly (p < 0.05) for {sum(sig)} of {len(sig)} models ({each})"
    )
    return Claim("ii", "Instantaneous memorisation tracks the learning rate", verdict, summary)


def _pairs(c: Correlations) -> list[tuple[str, str, float, float, float]]:
    n = len(c.names)
    return [(c.names[i], c.names[j], c.pearson[i, j], c.pearson_low[i, j], c.pearson_high[i, j])
            for i in range(n) for j in range(i + 1, n)]  # fmt: skip


def _corrected(c: Correlations, a: str, b: str) -> list[str]:
    """The corrected (true-profile) Pearson correlation of a pair and its interval, as the report's two cells: an
    pair the data do not determine reads "not determined" (the number alone would look like a finding), a clipped
    value says so."""
    i, j = c.names.index(a), c.names.index(b)
    v, lo, hi = c.pearson_corrected[i, j], c.pearson_corrected_low[i, j], c.pearson_corrected_high[i, j]
    if not np.isfinite(v):
        return ["n/a", "n/a"]
    clipped = ", clipped" if c.pearson_clipped is not None and c.pearson_clipped[i, j] else ""
    if c.undetermined[i, j]:
        return [f"not determined ({v:.2f}{clipped})", "none"]
    return [f"{v:.2f}" + (f" ({clipped[2:]})" if clipped else ""), f"[{lo:.2f}, {hi:.2f}]"]


def _claim_corr(f: Findings) -> Claim:
    pairs = _pairs(f.corr)
    r = np.array([p[2] for p in pairs])
    low = np.array([p[3] for p in pairs])
    positive = np.isfinite(r) & (r > 0) & (np.isnan(low) | (low > 0))
    verdict = "held" if positive.all() else "partly" if positive.any() else "did not hold"
    small_large = pairs[len(f.corr.names) - 2] if pairs else None  # (first, last)
    summary = (
        f"over {f.corr.n_cells} post-treatment cells, the Pearson correlation between two models' profiles ranges "
        f"from {np.nanmin(r):.2f} to {np.nanmax(r):.2f} (median {np.nanmedian(r):.2f}); {int(positive.sum())} of "
        f"{len(pairs)} pairs are positive with a 95% bootstrap interval above 0"
    )
    if small_large:
        a, b, v, lo, hi = small_large
        summary += f"; smallest vs largest ({a}, {b}): {v:.2f} [{lo:.2f}, {hi:.2f}]"
    return Claim("iii", "Profiles correlate across sizes", verdict, summary)


def figures(f: Findings, folder: Path) -> list[Path]:
    """Write the report's figures into ``folder``; their paths."""
    m = f.metric
    names = f.result.names
    res = {n: f.result.results[n][m] for n in names}
    out = []
    inst = [Series(n, *_cols(res[n].instantaneous.sort("cohort"), "cohort")) for n in names]
    out.append(write_svg(folder / "instantaneous.svg", line_plot(
        inst, title="Instantaneous memorisation by cohort", xlabel="cohort g (training step)",
        ylabel=f"{m}: ATT(g, g)")))  # fmt: skip
    cfg = f.config
    steps = np.arange(1, cfg.steps + 1)
    lr_series = [
        Series("learning rate", steps, [lr_at(cfg, int(s)) for s in steps], markers=False, color="#444"),
        Series("mean over the cohort's steps", list(f.lr), list(f.lr.values()), color="#ff7f0e"),
    ]
    out.append(write_svg(folder / "lr.svg", line_plot(
        lr_series, title="Learning-rate schedule (warm-up, cosine to 10%)", xlabel="training step",
        ylabel="learning rate", hline=None)))  # fmt: skip
    pers = [Series(n, *_cols(res[n].persistent.sort("event_time"), "event_time")) for n in names]
    out.append(write_svg(folder / "persistent.svg", line_plot(
        pers, title="Persistent memorisation by c - g", xlabel="event time c - g (steps)",
        ylabel=f"{m}: mean ATT at c - g")))  # fmt: skip
    c = f.corr
    notes = [[f"[{c.pearson_low[i, j]:.2f}, {c.pearson_high[i, j]:.2f}]" if i != j else "" for j in range(len(names))]
             for i in range(len(names))]  # fmt: skip
    out.append(write_svg(folder / "correlations.svg", grid(
        c.pearson, names, title="Raw Pearson correlation of estimated profiles", notes=notes, cell=74)))  # fmt: skip
    cohorts = np.array(list(f.lr))
    lr = np.array(list(f.lr.values()))
    track = [Series("learning rate", cohorts, _z(lr), color="#444", dashed=True)]
    for n in names:
        i = res[n].instantaneous.sort("cohort")
        track.append(Series(n, i["cohort"].to_numpy(), _z(i["estimate"].to_numpy())))
    out.append(write_svg(folder / "tracking.svg", line_plot(
        track, title="Instantaneous memorisation and learning rate, standardised", xlabel="cohort g",
        ylabel="z-score across cohorts")))  # fmt: skip
    return out


def _cols(frame: pl.DataFrame, x: str):
    return (frame[x].to_numpy(), frame["estimate"].to_numpy(), frame["band_low"].to_numpy(),
            frame["band_high"].to_numpy())  # fmt: skip


def _recorded_times(panel) -> dict:
    """The training and extraction seconds the suite demo wrote into the panel (rewriting a report keeps them)."""
    try:
        return {k: float(panel.attrs[f"demo_{k}"]) for k in ("train_s", "extract_s") if f"demo_{k}" in panel.attrs}
    except ValueError:
        return {}


def _z(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    sd = np.nanstd(v)
    return (v - np.nanmean(v)) / sd if sd > 0 else v * 0


def _num(v, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:,}" if isinstance(v, int | np.integer) else f"{v:.{digits}f}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render(f: Findings, *, figures_dir: str = ".", timings: dict | None = None, command: str = "") -> str:
    """The report as Markdown; figures are linked relative to the report (``figures_dir``)."""
    cfg, m = f.config, f.metric
    fig = (lambda name: f"{figures_dir.rstrip('/')}/{name}") if figures_dir != "." else (lambda name: name)
    t = f.table
    sr = f.result
    out = ["# Findings in miniature: memorisation across a suite of tiny GPT-NeoX models", ""]
    out.append(
        f"{len(sr.names)} GPT-NeoX models of different sizes trained from scratch on CPU on the same rows in the same "
        f"order (the Unicode 3.2 corpus of `memtui demo`, {cfg.steps} steps of {cfg.batch} rows x {cfg.seq_len} byte "
        f"tokens), with Pythia's schedule shape: linear warm-up over {cfg.warmup} steps to a peak of {cfg.lr:g}, then "
        f"cosine decay to {cfg.min_lr_ratio:g} of the peak. One panel ({sr.suite.panels[0].n_instances} instances, "
        f"{len(f.lr)} cohorts, {len(sr.suite.panels[0].steps)} checkpoints, one every {cfg.every} steps) scored with "
        f"every model; metric `{m}` (summed log-likelihood of a row's {cfg.seq_len - 1} predicted tokens, nats); "
        f"Callaway & Sant'Anna DiD, never-trained validation rows as controls, {sr.settings.draws} bootstrap draws "
        f"shared by all models, {sr.settings.band} simultaneous bands (docs/calibration-study.md). The setup was "
        "chosen for time before any result was seen and was not tuned afterwards."
    )
    if command:
        out += ["", f"Made by `{command}`."]
    out += ["", "## Verdicts", ""]
    for c in f.claims:
        out.append(f"- **({c.key}) {c.title}: {c.verdict}.** {c.summary[0].upper() + c.summary[1:]}.")
    out += ["", "## Models", ""]
    out.append(_models_table(sr, timings))
    out += ["", f"## (i) Size: {f.claims[0].verdict}", ""]
    rows = [[r["model"], _num(r["parameters"]), _num(r["instantaneous"]), _num(r["persistent_mean"]),
             _num(r["persistent_1"]), _num(r["persistent_5"]), _num(r["residual"]),
             f"{r['significant_cells']}/{r['post_cells']}", r["pretrend"]]
            for r in t.iter_rows(named=True)]  # fmt: skip
    header = ["model", "parameters", "instantaneous", "persistent (mean, c-g > 0)", "persistent c-g = 1 ckpt",
              "persistent c-g = 5 ckpt", "residual", "significant cells", "pre-trends"]  # fmt: skip
    out.append(_md_table(header, rows))
    out += ["", "Instantaneous memorisation by cohort (left) beside the learning-rate schedule (right); persistent "
            "memorisation by event time c - g (bands: 95% simultaneous).", "",
            f"![instantaneous]({fig('instantaneous.svg')}) ![learning rate]({fig('lr.svg')})", "",
            f"![persistent]({fig('persistent.svg')})"]  # fmt: skip
    out += ["", f"## (ii) Learning rate: {f.claims[1].verdict}", ""]
    rows = [[r["model"], r["cohorts"], f"{r['pearson']:+.2f}", f"{r['p']:.2g}", f"{r['spearman']:+.2f}",
             f"{r['p_spearman']:.2g}", f"{r['partial']:+.2f}"] for r in f.tracking.iter_rows(named=True)]  # fmt: skip
    out.append(_md_table(["model", "cohorts", "Pearson", "p", "Spearman", "p", "Pearson given the step"], rows))
    out += ["", "The rate decays over training while the model also changes, so a correlation across cohorts can come "
            "from any trend over training; the last column removes a linear trend in the cohort's step from both "
            "(what is left is the schedule's curvature).", "", f"![tracking]({fig('tracking.svg')})"]  # fmt: skip
    out += _correlation_section(f, fig)
    notes = list(sr.suite.notes) + list(sr.notes) + list(f.corr.notes)
    for name in sr.names:
        notes += [f"{name}: {n}" for n in sr.results[name][m].notes]
    if notes:
        out += ["", "## Notes", ""] + [f"- {clean(n, 400)}" for n in dict.fromkeys(notes)]
    return "\n".join(out) + "\n"


def _correlation_section(f: Findings, fig) -> list[str]:
    """Section (iii): the models' raw and noise-corrected profile correlations, pair by pair, and their figure."""
    out = ["", f"## (iii) Correlation across sizes: {f.claims[2].verdict}", ""]
    rows = [
        [a, b, f"{v:.2f}", f"[{lo:.2f}, {hi:.2f}]", *_corrected(f.corr, a, b)] for a, b, v, lo, hi in _pairs(f.corr)
    ]
    out.append(_md_table(["model", "model", "Pearson (raw)", "95% bootstrap interval", "true profiles (corrected)",
                          "its 95% interval"], rows))  # fmt: skip
    out += ["", "The raw r is the correlation of the estimated profiles, attenuated by their estimation noise; the "
            "corrected one estimates the correlation of the models' true profiles (docs/methods.md, \"Correlations "
            "of true profiles\"). Where it has no interval the data do not determine it, and only the raw r is "
            "informative."]  # fmt: skip
    sp = f.corr.spearman
    off = sp[~np.eye(len(f.result.names), dtype=bool)]
    out += ["", f"Over {f.corr.n_cells} post-treatment cells (c >= g); Spearman ranges from {np.nanmin(off):.2f} to "
            f"{np.nanmax(off):.2f}.", "", f"![correlations]({fig('correlations.svg')})"]  # fmt: skip
    return out


def _models_table(sr, timings: dict | None) -> str:
    """The models' table: size, shape, and training and extraction times (given, else recorded on each panel)."""
    rows = []
    for name, params in zip(sr.names, sr.suite.parameters, strict=True):
        panel = sr.suite.panel(name)
        c = demo_config(panel)
        tm = (timings or {}).get(name) or _recorded_times(panel)
        rows.append([name, _num(params), f"{c.layers} x {c.hidden}", _num(tm.get("train_s"), 0),
                     _num(tm.get("extract_s"), 0)])  # fmt: skip
    return _md_table(["model", "parameters", "layers x hidden", "training s", "extraction s"], rows)


def write_report(
    out_dir: str | Path,
    panels: Sequence[str | Path],
    *,
    draws: int = 1000,
    metric: str = "loglik",
    timings: dict | None = None,
    config=None,
    log: Callable[[str], None] = print,
    command: str = "memtui demo --suite",
) -> Path:
    """Estimate the suite, write the figures and ``out_dir/report.md``; the report's path."""
    del config  # the settings are read back from the panels, so a report can be rewritten from them alone
    out_dir = Path(out_dir)
    f = analyse(panels, draws=draws, metric=metric)
    figures(f, out_dir)
    for c in f.claims:
        log(f"({c.key}) {c.title}: {c.verdict}")
    report = out_dir / "report.md"
    text = render(f, timings=timings, command=command)
    atomic_write(report, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return report
