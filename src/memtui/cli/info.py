"""`memtui info`: describe a panel: shape, metrics, cohorts, completed checkpoints, provenance."""

from __future__ import annotations

import numpy as np

from memtui.cli.options import add_panel_args, panel_path
from memtui.core.text import clean

SUMMARY = "describe a panel: shape, metrics, cohorts, completed checkpoints, covariates, provenance"

# Panel attributes `info` shows first, in this order; any other attribute follows.
_PROVENANCE = ("model", "created", "command", "memtui_version", "source")


_FORMAT_ATTRS = ("format", "format_version")


def add_arguments(p) -> None:
    add_panel_args(p)


def run(args) -> int:
    from memtui.panel import metrics as registry
    from memtui.panel.hdf5 import read_panel
    from memtui.panel.model import NEVER

    path = panel_path(args)
    p = read_panel(path)
    treated = p.treatment != NEVER
    cohorts = np.unique(p.treatment[treated])
    rows = [
        ("panel", clean(p.path)),
        ("instances", f"{p.n_instances} ({int(treated.sum())} treated in {len(cohorts)} cohorts, "
                      f"{int((~treated).sum())} never treated)"),
    ]  # fmt: skip
    if len(cohorts):
        rows.append(("cohorts", f"steps {cohorts[0]} .. {cohorts[-1]}"))
    folded = _folded_note(p.treatment, p.steps)
    if folded:
        rows.append(("folded", folded))
    done = p.done_steps
    span = f", steps {done[0]} .. {done[-1]}" if len(done) else ""
    rows.append(("checkpoints", f"{int(p.done.sum())}/{p.n_checkpoints} completed{span}"))
    from memtui.extract.integrity import read_duplicates

    # steps extract refused because their weights are another step's (their columns stay undone)
    rows += [("duplicate weights", f"step{step} = step{same_as}") for step, same_as in read_duplicates(path)]
    from memtui.extract.shards import info_rows

    # steps that carry another checkpoint's weight file (a shard): refused before scoring, or marked if scored
    rows += info_rows(path, p.steps, p.done)
    from memtui.extract.checkpoints import checkpoint_info_rows

    rows += checkpoint_info_rows(p)  # weight averages; the last run's manifest: irregular and missing steps
    width = max(10, *(len(clean(n, 40)) for n in p.metrics))
    for name, y in p.metrics.items():
        coverage = np.isfinite(y[:, p.done]).mean() if p.done.any() else 0.0
        better = "higher" if p.sign(name) > 0 else "lower"
        label = clean(registry.label(name), 80)
        rows.append(("metric", f"{clean(name, 40):<{width}} {label} ({better} is better), {coverage:.1%} filled"))
    rows.append(("tokens", "stored" if p.has_tokens else "not stored"))
    rows += _token_score_rows(path, p.steps)
    if p.n_parameters:
        config = next((c for c, done in zip(p.configs, p.done, strict=False) if done and c), "")
        rows.append(("model size", f"{p.n_parameters:,} parameters" + (f"; {clean(config)}" if config else "")))
    if p.provenance:
        rows.append(("order", _order_note(p)))
    rows += _covariate_rows(p.covariates)
    if p.truth is not None:
        rows.append(("truth", "simulated panel: the true profile is stored"))
    rows += [(clean(key, 40), clean(value)) for key, value in _provenance(p.attrs)]
    pad = max(len(label) for label, _ in rows) + 2  # one column for every value, however long a label
    for label, text in rows:
        print(f"{label:<{pad}}{text}")
    return 0


def _token_score_rows(path, steps: np.ndarray) -> list[tuple[str, str]]:
    """What ``extract --token-scores`` stored: which instances, at which checkpoints, and its size on disk."""
    from memtui.core.errors import MemtuiError
    from memtui.extract.token_scores import fmt_bytes
    from memtui.panel.token_scores import read_layout

    try:
        layout = read_layout(path)
    except MemtuiError as exc:  # info describes the rest of the panel all the same
        return [("token scores", f"unreadable: {clean(str(exc), 200)}")]
    if layout is None:
        return []
    ids = ", ".join(map(str, layout.ids[:8])) + (f", … ({len(layout.ids) - 8} more)" if len(layout.ids) > 8 else "")
    done = steps[layout.done]
    span = f", steps {done[0]} .. {done[-1]}" if len(done) else ""
    return [
        ("token scores", f"{len(layout.ids)} instances (ids {ids}); {int(layout.done.sum())}/{len(steps)} checkpoints"
                         f"{span}; {fmt_bytes(layout.stored_bytes)} stored (float16, compressed)"),
    ]  # fmt: skip


def _covariate_rows(covariates: dict) -> list[tuple[str, str]]:
    """One row per covariate (``instances/covariates``): name, kind, missing count, range or levels."""
    from memtui.panel.covariates import covariate_lines

    return [("covariate", line) for line in covariate_lines(covariates)]


def _provenance(attrs: dict[str, str]) -> list[tuple[str, str]]:
    """The panel's non-empty attributes, the usual provenance first; the format markers are implied by reading it."""
    rest = sorted(k for k in attrs if k not in _PROVENANCE and k not in _FORMAT_ATTRS)
    return [(k, attrs[k]) for k in (*_PROVENANCE, *rest) if attrs.get(k)]


def _folded_note(treatment: np.ndarray, steps: np.ndarray) -> str | None:
    """How many instances the documented rule moves forward to the next checkpoint, if any."""
    from memtui.panel.importing import FOLDED_RULE, count_folded

    folded = count_folded(treatment, steps)
    return f"{folded} instances have a treatment step between checkpoints: {FOLDED_RULE}" if folded else None


def _order_note(p) -> str:
    """What the panel records of each instance's place in its data order (``instances/provenance``)."""
    rows = [k for k in p.provenance if not k.endswith("_names")]
    text = "per instance: " + ", ".join(rows)
    if p.stage_names:
        stages = np.unique(p.provenance["stage"]) if "stage" in p.provenance else []
        text += f"; stages {', '.join(clean(p.stage_names[int(s)], 40) for s in stages)}"
        text += " (controls within each stage)" if len(stages) < 2 else " (mixed: estimated only per stage)"
    seeds = p.provenance_attrs.get("seeds")
    if seeds:
        text += f"; seed suite {clean(seeds, 200)} (this panel: {clean(p.attrs.get('seed', '?'), 40)})"
    return text
