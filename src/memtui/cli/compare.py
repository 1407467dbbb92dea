"""`memtui compare`: several models' panels side by side (headline figures and the correlation of their profiles),
one panel's three estimators side by side, or one panel against the paper's published estimates (``--reference``).

Files ``-o OUT.csv`` writes (docs/estimation.md, "Comparing models"):
  several panels: OUT.csv, the headline table (one row per model), and OUT-correlations.csv, the correlation
  matrices in long form (one row per metric, scope, method and ordered pair of models);
  one panel: OUT.csv, the three estimators' cells side by side with the ease term (``estimation.compare``);
  with --reference: OUT.csv, the reference comparison's cells;
  several panels with --by SPEC: the same files, a row per group (cli/compare_by.py), and OUT-differences.csv."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from memtui.cli.numbers import fixed2, p_value
from memtui.cli.options import add_by_args, add_panel_args, add_settings_args, panel_paths
from memtui.core.errors import MemtuiError
from memtui.core.text import clean, compact_count

if TYPE_CHECKING:
    import polars as pl

NAME_WIDTH = 24  # a model's name in the tables
SUMMARY = "compare models (several panels: headline figures and profile correlations) or one panel's estimators"


def add_arguments(p) -> None:
    add_panel_args(p, several=True, help="one panel per model, over the same instances")
    p.add_argument("-o", "--output", type=Path, help="CSV to write (several panels: also OUT-correlations.csv)")
    p.add_argument("--scope", default="post", choices=["post", "profile", "instantaneous", "residual"],
                   help="cells the correlations run over [post: every post-treatment cell]")  # fmt: skip
    p.add_argument("--reference", type=Path, help="the paper's estimates file: put them beside this panel's")
    p.add_argument("--model-size", help="with --reference: which model_size of the file (when it holds several)")
    p.add_argument("--pooled", action="store_true",
                   help="a seed suite: its profile pooled across seeds, their spread and agreement")  # fmt: skip
    add_settings_args(p, "compare")
    add_by_args(p)  # several panels: the comparison group by group (cli/compare_by.py)


def run(args) -> int:
    args.panels = panel_paths(args)  # the files, or --sample's: every mode below reads args.panels
    if not args.panels:
        raise MemtuiError("give one panel per model (or one panel: its estimators side by side), or --sample NAME.")
    # several models share one multiplier per instance (estimate_suite, compare_by): a clustered bootstrap would need
    # one per cluster under every model, which they do not draw (--pooled refuses --cluster itself, saying why)
    if len(args.panels) > 1 and args.cluster and not args.pooled:
        raise MemtuiError(
            "--cluster is not available when comparing several models (their joint bootstrap draws per instance); "
            "estimate each model with `memtui estimate PANEL --cluster NAME`."
        )
    out = _check_output(args.output) if args.output else None
    if getattr(args, "by", None):
        from memtui.cli.compare_by import run_by

        return run_by(args, out, _settings, companion, write_together, _suite_lines)
    if getattr(args, "shared_controls", False):
        raise MemtuiError("--shared-controls goes with --by SPEC (the groups it splits the treated instances into).")
    if args.reference is not None:
        if len(args.panels) != 1:
            raise MemtuiError("--reference compares one panel with the published estimates; give one panel.")
        return _reference(args, out)
    if getattr(args, "pooled", False):
        if len(args.panels) < 2:
            raise MemtuiError("--pooled averages a seed suite's panels; give every seed's panel.")
        from memtui.cli.pooled import run_pooled

        return run_pooled(args, out, _settings, companion, write_together)
    if len(args.panels) == 1:
        return _estimators(args, out)
    return _suite(args, out)


def _check_output(path: Path) -> Path:
    path = path.expanduser()
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder; give a file name such as {path / 'compare.csv'}.")
    if not path.parent.exists():
        raise MemtuiError(f"cannot write {path}: folder {path.parent} does not exist; create it first.")
    if path.suffix.lower() != ".csv":
        raise MemtuiError(f"{path}: -o writes CSV; give a file name ending in .csv.")
    return path


def companion(path: Path, what: str) -> Path:
    """``OUT-what.csv`` beside ``OUT.csv``."""
    return path.with_name(f"{path.stem}-{what}{path.suffix}")


def _write(frame: pl.DataFrame, path: Path) -> None:
    from memtui.core.files import atomic_write

    atomic_write(path, frame.write_csv)


def write_together(frames: dict[Path, pl.DataFrame]) -> None:
    """Write every frame as CSV, each beside its target, and rename them over their targets only once all are
    written: a full disk or any other failure leaves every target as it was (a pair of files is one result; half of
    it beside the other half of an older one would be read as one)."""
    import os

    from memtui.core.files import WriteError

    temps: dict[Path, Path] = {}
    try:
        for path, frame in frames.items():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temps[path] = tmp
            tmp.unlink(missing_ok=True)  # never write through a link planted at the temporary name
            frame.write_csv(tmp)
        for path, tmp in temps.items():
            os.replace(tmp, path)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else (str(exc).splitlines() or [type(exc).__name__])[0]
        raise WriteError(
            f"cannot write {clean(path)}: {reason}; {' and '.join(clean(p) for p in frames)} are unchanged."
        ) from None
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)


def _num(value, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def _settings(args, panel):
    from memtui.cli.options import settings_from_args

    return settings_from_args(args, panel)


def _suite(args, out: Path | None) -> int:
    from memtui.cli.options import progress_bar
    from memtui.estimation.correlations import correlations
    from memtui.estimation.headline import headline
    from memtui.estimation.suite import estimate_suite
    from memtui.estimation.suite_load import load_suite

    suite = load_suite(args.panels)
    settings = _settings(args, suite.panels[0])  # without -m: the first panel's default metric
    metric = settings.metric
    sr = estimate_suite(suite, settings, progress=progress_bar())
    table = headline(sr, metric)
    corr = correlations(sr, metric, scope=args.scope)
    for line in _suite_lines(sr, table, corr):
        print(line)
    for line in _seed_lines(sr, metric):
        print(line)
    if out is not None:
        write_together({out: table, companion(out, "correlations"): corr.frame()})
        print(f"wrote {clean(out)} ({table.height} models) and {clean(companion(out, 'correlations'))}")
    return 0


def _seed_lines(sr, metric: str) -> list[str]:
    """A seed suite's between-seed spread of the profile (how much of memorisation is data order)."""
    from memtui.estimation.headline import seed_spread

    spread = seed_spread(sr, metric)
    if spread is None:
        return []
    if not spread.n_cells:
        return ["", "between-seed spread: no post-treatment cell is estimated under every seed"]
    inst = (
        f"; instantaneous (c = g, {spread.instantaneous_cells} cells) {_num(spread.instantaneous_spread)}"
        if spread.instantaneous_cells
        else ""
    )
    return [
        "",
        f"between-seed spread of the profile over {spread.n_cells} post-treatment cells every seed estimates: mean "
        f"SD across seeds {_num(spread.spread)}{inst}; mean within-seed standard error {_num(spread.std_error)}",
        "(--pooled: the profile pooled across seeds with shared draws, and a test that the seeds agree)",
    ]


def _params(n) -> str:
    return "?" if n is None else compact_count(n)


def display_names(names: list[str], width: int = NAME_WIDTH) -> list[str]:
    """The models' names cut to ``width`` from the start (a name's end tells models apart: ``…-160m-deduped``,
    ``…exp1/checkpoints``), numbered where two still read alike, so that no two rows look the same."""
    shown = [n if len(n) <= width else "…" + n[-(width - 1) :] for n in (clean(n, None) for n in names)]
    for i, name in enumerate(shown):
        if shown.count(name) > 1:  # the same tail: number all of them but the last
            suffix = f"#{i + 1}"
            keep = width - len(suffix)
            shown[i] = (name if len(name) <= keep else "…" + name[-(keep - 1) :]) + suffix
    return shown


def _suite_lines(sr, table: pl.DataFrame, corr) -> list[str]:
    from memtui.estimation.settings import coverage

    s = sr.settings
    names = display_names(sr.names)
    width = max(8, *(len(n) for n in names))
    band = f"{s.band} simultaneous {coverage(s.alpha)} bands, B={s.draws}" if s.draws else "no bootstrap"
    lines = [
        f"{len(names)} models on {clean(corr.metric, 40)}, estimator {s.estimator}, controls "
        f"{s.control_group.replace('_', ' ')}, {band}; models by parameter count (else name)",
        "",
    ]
    events = [c for c in table.columns if c.startswith("persistent_")]
    head = (
        f"{'model':<{width}} {'params':>7} {'instant.':>9} "
        + " ".join(f"{'c-g=' + c.split('_')[1]:>9}" for c in events)
        + f" {'plateau':>8} {'residual':>9} {'overall':>9} {'signif.':>11} {'pre-trend':>10}"
    )
    lines.append(head)
    for name, r in zip(names, table.iter_rows(named=True), strict=True):
        star = "*" if r["overall_significant"] else " "
        sig = f"{r['significant_cells']}/{r['post_cells']}"
        pre = f"{r['pretrend']}" + (f" p={p_value(r['pretrend_p_value'], s.alpha)}" if r["pretrend"] != "n/a" else "")
        lines.append(
            f"{name:<{width}} {_params(r['parameters']):>7} {_num(r['instantaneous']):>9} "
            + " ".join(f"{_num(r[c]):>9}" for c in events)
            + f" {_num(r['plateau'], 'd'):>8} {_num(r['residual']):>9} {_num(r['overall']):>8}{star} {sig:>11} "
            f"{pre:>10}"
        )
    lines += [
        "",
        "instant. = mean instantaneous memorisation (c = g); c-g=k: persistent k checkpoints after training; plateau: "
        "first c - g (steps) from which the persistent curve keeps its final level inside its band; * significant",
    ]
    titles = {  # the raw r of noisy estimates is attenuated; the corrected one estimates the true profiles'
        "pearson": ("Raw Pearson correlation of the profiles", ", estimated: attenuated by their noise"),
        "pearson_corrected": ("Pearson correlation of the TRUE profiles", ", corrected for the estimates' noise"),
        "spearman": ("Raw Spearman correlation of the profiles", ", estimated"),
    }
    for method, (title, what) in titles.items():
        lines += ["", f"{title} over {corr.n_cells} {corr.scope} cells{what} [{coverage(corr.alpha)} "
                  "bootstrap interval]"]  # fmt: skip
        value, low, high = (getattr(corr, f"{method}{x}") for x in ("", "_low", "_high"))
        cell = 22
        lines.append(" " * width + "".join(f"{n:>{cell}}" for n in display_names(sr.names, cell - 2)))
        for i, name in enumerate(names):
            row = []
            for j in range(len(names)):
                if i == j:
                    row.append(f"{'1':>{cell}}")
                    continue
                text = _num(value[i, j], ".3f")
                if math.isfinite(low[i, j]):
                    text += f" [{fixed2(low[i, j])}, {fixed2(high[i, j])}]"
                elif method == "pearson_corrected" and corr.undetermined[i, j]:
                    text += " [n.d.]"  # not determined by these data: the note says why
                row.append(f"{text:>{cell}}")
            lines.append(f"{name:<{width}}" + "".join(row))
    for note in (*sr.suite.notes, *sr.notes, *corr.notes):
        lines.append(f"note   {clean(note, limit=None)}")
    for name, shown in zip(sr.names, names, strict=True):
        for note in sr.results[name][corr.metric].notes:
            lines.append(f"note   {shown}: {clean(note, limit=None)}")
    return lines


def _estimators(args, out: Path | None) -> int:
    from memtui.cli.options import progress_bar

    # every estimator side by side, with the profile and overall summaries only: these would change nothing shown
    if args.estimator != "did":
        raise MemtuiError("compare with one panel shows every estimator side by side; drop --estimator.")
    if args.final_step is not None:
        raise MemtuiError("compare with one panel shows no residual summary; drop --final-step (it picks its step).")
    from memtui.estimation.compare import compare
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(args.panels[0])
    settings = _settings(args, panel)
    comp = compare(panel, settings, progress_bar())
    for line in _estimator_lines(panel, comp):
        print(line)
    if out is not None:
        _write(comp.cells, out)
        print(f"wrote {clean(out)} ({comp.cells.height} cells, the three estimators and the ease term side by side)")
    return 0


def _estimator_lines(panel, comp) -> list[str]:
    import polars as pl

    s = comp.settings
    lines = [
        f"{clean(panel.path)}: {clean(s.metric, 40)}, the three estimators side by side (controls "
        f"{s.control_group.replace('_', ' ')}, base {s.base_period}, {s.band} band, B={s.draws})",
        "",
        f"{'estimator':<12} {'cells':>6} {'signif. post':>13} {'instant. mean':>14} {'overall':>10} {'(se)':>9}",
    ]
    for name, res in comp.results.items():
        post = res.cells.filter(~pl.col("pre_treatment"))
        inst = res.instantaneous["estimate"].mean() if res.instantaneous.height else None
        o = res.overall
        lines.append(
            f"{name:<12} {res.cells.height:>6} {int(post['significant'].sum()):>6}/{post.height:<6} "
            f"{_num(inst):>14} {_num(o['estimate']):>10} {_num(o['std_error'], '.3g'):>9}"
        )
    c = comp.cells
    ease = c.filter(~pl.col("pre_treatment") & pl.col("ease_estimate").is_not_null())
    if ease.height:
        lines.append(
            f"{'ease':<12} {ease.height:>6} {int(ease['ease_significant'].sum()):>6}/{ease.height:<6} "
            f"{'':>14} mean {_num(ease['ease_estimate'].mean()):>5}   (extractable - did, per post-treatment cell)"
        )
    diag = c.filter(pl.col("event_time") == 0).sort("cohort")
    if diag.height:
        lines += ["", "instantaneous memorisation (c = g) by cohort; * significant"]
        lines.append(f"{'cohort':>10} {'did':>12} {'difference':>12} {'extractable':>12} {'ease':>12}")
        rows = diag.to_dicts()
        shown = rows if len(rows) <= 12 else [*rows[:6], None, *rows[-4:]]
        for r in shown:
            if r is None:
                lines.append(f"{'...':>10}")
                continue
            vals = []
            for name in ("did", "difference", "extractable"):
                est, sig = r.get(f"{name}_estimate"), r.get(f"{name}_significant")
                vals.append(f"{_num(est)}{'*' if sig else ' '}")
            ease_v = f"{_num(r.get('ease_estimate'))}{'*' if r.get('ease_significant') else ' '}"
            lines.append(f"{r['cohort']:>10} " + " ".join(f"{v:>12}" for v in vals) + f" {ease_v:>12}")
    for note in comp.notes:
        lines.append(f"note   {clean(note, limit=None)}")
    return lines


def _reference(args, out: Path | None) -> int:
    from memtui.panel.hdf5 import read_panel

    try:
        from memtui.report.reference import compare_reference
    except ImportError:  # pragma: no cover - the module ships with memtui; a trimmed install may lack it
        raise MemtuiError("this memtui has no reference comparison (memtui.report.reference is missing).") from None
    panel = read_panel(args.panels[0])
    settings = _settings(args, panel)
    kwargs = {"model_size": args.model_size} if args.model_size else {}
    ref = compare_reference(panel, Path(args.reference), settings, **kwargs)
    for line in ref.lines():
        print(clean(line, limit=None))
    if out is not None:
        _write(ref.cells, out)
        print(f"wrote {clean(out)} ({ref.cells.height} cells)")
    return 0
