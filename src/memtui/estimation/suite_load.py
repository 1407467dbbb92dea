"""A model suite loaded: several panels over the same instances (one per model), put on the instances and completed
checkpoints they share (``load_suite``), in order of parameter count, with notes on what was left out.

Estimating the suite jointly is ``estimation.suite`` (``estimate_suite``); correlating its models' profiles is
``estimation.correlations``; its headline figures and a seed suite's spread are ``estimation.headline``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import Panel

__all__ = ["Suite", "is_seed_suite", "load_suite", "refuse_too_few_shared", "short_paths"]


@dataclass
class Suite:
    """Panels of several models over the same instances and checkpoints, ordered by parameter count (else name).

    ``panels`` share ``ids``, ``treatment`` and ``steps`` (restricted to what every file has, in the first file's
    instance order, completed checkpoints only); ``notes`` say what was left out; ``parameters`` is each model's
    parameter count, None where its panel does not record it; ``originals`` are the panels as read, unrestricted (what
    the workbench shows one model at a time)."""

    names: list[str]
    panels: list[Panel]
    notes: list[str] = field(default_factory=list)
    parameters: list[int | None] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    originals: list[Panel] = field(default_factory=list)
    few_shared: str = ""  # which steps each panel has, where they share fewer than two (``refuse_too_few_shared``)

    def panel(self, name: str) -> Panel:
        return self.panels[self.names.index(name)]

    @property
    def metrics(self) -> list[str]:
        """The metrics every panel has, in the first panel's order."""
        return [m for m in self.panels[0].metrics if all(m in p.metrics for p in self.panels[1:])]


def _parameters(panel: Panel) -> int | None:
    """The model's parameter count where the panel records it: ``Panel.n_parameters`` (``checkpoints/parameters``,
    written by extraction) or a whole-number file attribute ``model_parameters`` / ``parameters``."""
    known = getattr(panel, "n_parameters", None)
    if isinstance(known, int | np.integer) and known > 0:
        return int(known)
    for key in ("model_parameters", "parameters"):
        text = str(panel.attrs.get(key, "")).strip().replace("_", "").replace(",", "")
        if re.fullmatch(r"\d+", text) and int(text) > 0:
            return int(text)
    return None


def short_paths(names: list[str]) -> list[str]:
    """Local models are recorded by their folder's absolute path: each such name becomes its shortest tail of folder
    names that no other model's name ends with (``/home/u/runs/exp1/checkpoints`` beside ``.../exp2/checkpoints``:
    ``exp1/checkpoints``). Hub ids (``EleutherAI/pythia-70m``) and other names stay as they are."""
    parts = [PurePosixPath(n).parts if n.startswith(("/", "~", "./", "../")) else None for n in names]
    out = list(names)
    for i, mine in enumerate(parts):
        if mine is None:
            continue
        mine = tuple(p for p in mine if p != "/")
        for k in range(1, len(mine) + 1):
            tail = "/".join(mine[-k:])
            others = [
                names[j] if parts[j] is None else "/".join(q for q in parts[j] if q != "/")
                for j in range(len(names))
                if j != i
            ]
            if not any(o == tail or o.endswith("/" + tail) for o in others):
                out[i] = tail
                break
    return out


def _model_names(panels: list[Panel], paths: list[Path]) -> list[str]:
    """The model recorded in each panel (``model`` attribute, else who scored its checkpoints); the file's stem where
    there is none or two panels record the same model (two seeds of one model, or synthetic panels)."""
    recorded = [
        clean(p.attrs.get("model", "") or ", ".join(dict.fromkeys(m for m in p.models if m)), 80) for p in panels
    ]
    names = [
        r if r and recorded.count(r) == 1 else clean(path.stem, 80) for r, path in zip(recorded, paths, strict=True)
    ]
    names = short_paths(names)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):  # the same stem in two folders: number them, never merge them
        if names.count(name) > 1:
            seen[name] = seen.get(name, 0) + 1
            names[i] = f"{name} ({seen[name]})"
    return names


def _restrict(panel: Panel, rows: np.ndarray | None, cols: np.ndarray | None) -> Panel:
    """The panel on a subset of instances (``rows``, in that order) and of checkpoints (``cols``); None keeps all."""
    if rows is None and cols is None:
        return panel
    r = slice(None) if rows is None else rows
    c = slice(None) if cols is None else cols

    def pick(values, index):
        if values is None or isinstance(values, list) and not values:
            return values
        arr = np.asarray(values, dtype=object if isinstance(values, list) else None)[index]
        return list(arr) if isinstance(values, list) else arr

    extra = {}
    for name in ("parameters", "configs"):  # per-checkpoint provenance, where this memtui's Panel has it
        if hasattr(panel, name):
            extra[name] = pick(getattr(panel, name), c)
    return replace(
        panel,
        ids=panel.ids[r],
        treatment=panel.treatment[r],
        steps=panel.steps[c],
        done=panel.done[c],
        metrics={m: y[r][:, c] for m, y in panel.metrics.items()},
        split=pick(panel.split, r),
        source_index=pick(panel.source_index, r),
        revisions=pick(panel.revisions, c),
        weight_hashes=pick(panel.weight_hashes, c),
        models=pick(panel.models, c),
        provenance={k: v if k.endswith("_names") else v[r] for k, v in panel.provenance.items()},
        covariates={k: v[r] for k, v in panel.covariates.items()},
        truth=None,  # the simulated truth is per cohort of the whole panel: not kept on a part of it
        **extra,
    )


def load_suite(paths: Sequence[str | os.PathLike]) -> Suite:
    """Read the panels of a suite and put them on the instances and completed checkpoints they share.

    Instances match by id *and* treatment step; checkpoints by step, kept where every panel has completed them.
    Where the panels overlap only partly, every panel is restricted to the intersection and a note says, per model,
    how much was left out; where they share no instance or no completed checkpoint, a one-line MemtuiError."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise MemtuiError("give at least one panel file.")
    resolved = [p.resolve() for p in paths]
    if len(set(resolved)) < len(resolved):
        dup = next(p for i, p in enumerate(paths) if resolved[i] in resolved[:i])
        raise MemtuiError(f"{dup} is given twice; give each model's panel once.")
    panels = [read_panel(p) for p in paths]
    names = _model_names(panels, paths)
    notes: list[str] = []
    seeds = is_seed_suite(panels)
    if seeds:  # one model's data orders: name each panel by its seed, keep each seed's own treatment steps
        labels = [clean(p.attrs.get("seed", ""), 40) for p in panels]
        if all(labels) and len(set(labels)) == len(labels):
            names = labels
        notes.append(
            "seed suite: the same instances under each seed's data order, each panel with its own treatment steps"
        )

    keep_ids = _shared_instances(panels, seeds, notes)
    steps, few = _shared_steps(panels, names)
    restricted = _restricted(names, panels, keep_ids, steps, notes)

    params = [_parameters(p) for p in panels]
    order = sorted(range(len(panels)), key=lambda i: (params[i] is None, params[i] or 0, names[i].casefold(), names[i]))
    if len(panels) > 1 and any(params[i] is None for i in order) and any(params[i] is not None for i in order):
        notes.append("some panels record no parameter count: those models come after the others, by name")
    return Suite(
        names=[names[i] for i in order],
        panels=[restricted[i] for i in order],
        notes=notes,
        parameters=[params[i] for i in order],
        paths=[paths[i] for i in order],
        originals=[panels[i] for i in order],
        few_shared=few,
    )


def _shared_instances(panels: list[Panel], seeds: bool, notes: list[str]) -> np.ndarray:
    """Ids of the instances every panel has with the same treatment step (any step in a seed suite), in the first
    panel's order; notes how many were left out for a different step."""
    first = panels[0]
    common = np.ones(first.n_instances, bool)
    moved = 0
    for p in panels[1:]:
        pos = _positions(first.ids, p.ids)
        found = pos >= 0
        same = np.zeros_like(found)
        same[found] = True if seeds else p.treatment[pos[found]] == first.treatment[found]
        moved += int((found & ~same & common).sum())
        common &= same
    if not common.any():
        why = f" ({moved} share an id but not the treatment step)" if moved else ""
        raise MemtuiError(
            f"the panels share no instance{why}: a suite needs panels over the same instances (ids and treatment "
            "steps), e.g. one panel extracted with several models."
        )
    keep_ids = first.ids[common]
    if moved:
        notes.append(f"{moved} instances have different treatment steps in different panels: left out")
    return keep_ids


def _shared_steps(panels: list[Panel], names: list[str]) -> tuple[np.ndarray, str]:
    """The checkpoint steps every panel has completed, and where they share fewer than the two a
    difference-in-differences needs while some panel has more, which steps each has (``Suite.few_shared``); a
    one-line MemtuiError, naming them, where they share none."""
    first = panels[0]
    steps = first.done_steps
    for p in panels[1:]:
        steps = np.intersect1d(steps, p.done_steps)
    few = ""
    if len(steps) < 2 and len(panels) > 1 and max(len(p.done_steps) for p in panels) > len(steps):
        shared = f"only one completed checkpoint, step {int(steps[0])}" if len(steps) else "no completed checkpoint"
        each = "; ".join(f"{clean(n, 40)} has {_step_list(p.done_steps)}" for n, p in zip(names, panels, strict=True))
        few = f"the panels share {shared} ({each})"
    if not len(steps):
        raise MemtuiError(
            f"{few or 'the panels share no completed checkpoint'}: a suite needs the same checkpoint steps in every "
            "panel; finish extraction or compare panels of the same run."
        )
    return steps, few


def refuse_too_few_shared(suite: Suite, settings: Settings) -> None:
    """A one-line MemtuiError where the did estimator meets panels that share one completed checkpoint while some
    has more: the estimate's own "only 1 completed checkpoint ... extract more checkpoints" would misdirect (each
    panel has plenty); say that they share one, and which steps each has."""
    if suite.few_shared and settings.estimator == "did" and len(suite.panels[0].done_steps) < 2:
        raise MemtuiError(
            f"{suite.few_shared}; difference-in-differences needs at least two shared: compare panels extracted at "
            "the same checkpoint steps, or finish their extraction."
        )


def _step_list(steps: np.ndarray, limit: int = 6) -> str:
    """``steps 0, 100, 200 (3)``, cut after ``limit``: a note stays one short line on any panel."""
    if not len(steps):
        return "no completed checkpoint"
    shown = ", ".join(str(int(s)) for s in steps[:limit])
    more = f", ... {int(steps[-1])}" if len(steps) > limit else ""
    return f"steps {shown}{more} ({len(steps)})"


def _restricted(names: list[str], panels: list[Panel], keep_ids, steps, notes: list[str]) -> list[Panel]:
    """Each panel on the shared instances and checkpoints, noting per model what was left out."""
    restricted = []
    for name, p in zip(names, panels, strict=True):
        rows = _positions(keep_ids, p.ids)
        cols = np.searchsorted(p.steps, steps)
        left_rows, left_cols = p.n_instances - len(rows), int(p.done.sum()) - len(steps)
        if left_rows or left_cols:
            notes.append(
                f"{name}: left out {left_rows} of {p.n_instances} instances and {left_cols} of {int(p.done.sum())} "
                "completed checkpoints that not every panel has"
            )
        in_order = left_rows == 0 and np.array_equal(rows, np.arange(p.n_instances))
        full_cols = len(cols) == p.n_checkpoints
        restricted.append(_restrict(p, None if in_order else rows, None if full_cols else cols))
    return restricted


def is_seed_suite(panels: Sequence[Panel]) -> bool:
    """Panels ``memtui build --seeds`` wrote together: one model's instances under several data orders (attribute
    ``seed_suite``, the same in all). Their instances match by id alone: the treatment step is the seed's."""
    marks = {str(p.attrs.get("seed_suite", "")) for p in panels}
    return len(panels) > 1 and len(marks) == 1 and bool(marks.pop())


def _positions(wanted: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index in ``ids`` of each of ``wanted`` (-1 where absent)."""
    order = np.argsort(ids, kind="stable")
    at = np.searchsorted(ids, wanted, sorter=order)
    at = np.minimum(at, len(ids) - 1)
    pos = order[at]
    return np.where(ids[pos] == wanted, pos, -1)
