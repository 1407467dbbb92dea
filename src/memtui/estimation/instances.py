r"""Individual memorisation scores: each trained instance's own difference-in-differences contrast.

For an instance i first trained on at checkpoint g (its cohort), and a checkpoint c at or after g,

.. math::

    s_i(c) = \mathrm{sign} \cdot \big[ (Y_{i,c} - Y_{i,g-1})
             - \tfrac{1}{n_\infty} \textstyle\sum_{j: G_j=\infty} (Y_{j,c} - Y_{j,g-1}) \big]

the instance's own change across its treatment minus the never-trained instances' mean change over the same two
checkpoints, with the metric's sign (``panel.metrics``) so that a higher score means "more memorised". The mean of
:math:`s_i(c)` over cohort g is exactly :math:`\tau(g, c) = \mathrm{sign} \cdot ATT(g, c)` of ``memtui estimate`` with
never-trained controls and no covariates: the score is that cell's contrast for one instance. The instances kept are
those the estimate keeps (complete rows over the completed checkpoints; the first checkpoint's cohort, which has no
checkpoint before it, and instances first trained on after the window are left out).

Each score is set against the never-trained instances' own scores over the same checkpoints (their change minus
their mean change): ``control_rank`` of them score at least as high, and ``p_value = (1 + control_rank) /
(1 + n_controls)`` is a per-instance empirical p-value. It is descriptive, a ranking aid: one instance's contrast is
not an estimate of anything about a population, and thousands of them are ranked at once (no multiplicity control).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine.layout import NEVER_INDEX, treatment_index
from memtui.panel.model import NEVER, Panel


@dataclass(frozen=True)
class Selection:
    """Which instances to score: one cell (cohort and checkpoint steps), one cohort at ``checkpoint``, or every
    cohort at ``checkpoint`` (None: the last completed one); ``where`` keeps a subgroup (``NAME>=VALUE``).

    ``by`` and ``group``: one group of a ``--by`` spec (``estimation.group_spec``), as `memtui estimate --by` and the
    workbench's split (``b``) make it: the group's trained instances scored against the group's **own** never-trained
    instances, so the mean score over a cohort is that group's τ(g, c) (its heatmap cell). ``by`` without ``group``:
    every group, each scored so, ranked together. ``shared_controls``: every never-trained instance is each group's
    control, as ``estimate --by --shared-controls`` (the design for doses, where controls have no dose)."""

    cohort: int | None = None
    checkpoint: int | None = None
    where: str = ""
    by: str = ""
    group: str = ""
    shared_controls: bool = False


@dataclass(frozen=True)
class InstanceScores:
    r"""Scored instances, best first (highest score). Arrays are aligned, one entry per scored instance.

    Notes
    -----
    .. math:: s_i = \mathrm{sign}\,[(Y_{i,c} - Y_{i,g-1}) - \overline{(Y_{c} - Y_{g-1})}_{\infty}]
    """

    metric: str
    sign: int
    rows: np.ndarray  # the instances' rows in the panel
    ids: np.ndarray
    cohort: np.ndarray  # the step of the cohort's checkpoint g
    checkpoint: np.ndarray  # the step of c
    base: np.ndarray  # the step of g - 1
    score: np.ndarray
    control_rank: np.ndarray  # never-trained instances scoring at least as high over the same checkpoints
    p_value: np.ndarray
    n_controls: int  # the never-trained instances the scores were set against (every group's, with --by)
    notes: tuple[str, ...] = ()
    group: np.ndarray | None = None  # per instance: its group's name ("" without a split)
    controls: np.ndarray | None = None  # per instance: the never-trained instances it was ranked among
    by: str = ""  # the split's spec ("" without one)
    groups: tuple[tuple[str, int, int], ...] = ()  # every group scored: (name, instances scored, never-trained ones)
    shared_controls: bool = False  # every group scored against all the never-trained instances

    def __post_init__(self) -> None:
        if self.group is None:
            object.__setattr__(self, "group", np.full(len(self.rows), "", dtype=object))
        if self.controls is None:
            object.__setattr__(self, "controls", np.full(len(self.rows), self.n_controls, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.rows)

    def top(self, n: int) -> InstanceScores:
        keep = slice(0, max(0, n))
        return replace(self, **{f.name: getattr(self, f.name)[keep] for f in fields(self) if f.name in _PER_INSTANCE})


_PER_INSTANCE = {"rows", "ids", "cohort", "checkpoint", "base", "score", "control_rank", "p_value", "group", "controls"}


_WHERE = re.compile(r"^\s*([^\s<>=!:]+)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")


def instance_scores(panel: Panel, metric: str, selection: Selection = Selection()) -> InstanceScores:
    """The selected instances' individual scores (module docstring), ranked best first; with a split (``by``) and no
    ``group``, every group's, each against its own never-trained instances (``every_group``)."""
    if selection.by and not selection.group:
        return every_group(panel, metric, selection)
    scores = _scores(panel, metric, selection)
    if not selection.by:
        return scores
    name = selection.group
    return replace(
        scores,
        group=np.full(len(scores), name, dtype=object),
        by=selection.by,
        groups=((name, len(scores), scores.n_controls),),
        shared_controls=selection.shared_controls,
    )


def _scores(panel: Panel, metric: str, selection: Selection) -> InstanceScores:
    steps = panel.done_steps
    y = panel.values(metric)  # completed checkpoints only: refuses a metric with no values
    if len(steps) < 2:
        raise MemtuiError(
            f"{panel._name}: only {len(steps)} completed checkpoint(s); an instance's change needs two, extract more."
        )
    tidx = treatment_index(panel.treatment, steps, NEVER)
    members = group_members(panel, selection.by, selection.group, selection.shared_controls)
    complete = np.isfinite(y).all(axis=1) & members
    notes = []
    if not complete[members].all():
        left = int((~complete[members]).sum())
        notes.append(f"left out {left} instances with missing values, as `memtui estimate` does")
    controls = np.flatnonzero(complete & (tidx == NEVER_INDEX))
    if not len(controls):
        mine = f" of group {clean(selection.group, 60)}" if selection.by else ""
        raise MemtuiError(
            f"{panel._name}: no never-trained instance{mine} has complete values; "
            + ("choose another group or split." if selection.by else "finish extraction.")
        )
    treated = complete & (tidx != NEVER_INDEX) & (tidx >= 1) & (tidx < len(steps))
    chosen, column = _selected(panel, selection, steps, tidx, treated)
    rows = np.flatnonzero(chosen)
    b = tidx[rows] - 1
    change = y[rows, column] - y[rows, b]
    sign = panel.sign(metric)
    score = np.empty(len(rows))
    control_rank = np.empty(len(rows), dtype=np.int64)
    for base in np.unique(b):  # one set of control scores per base checkpoint (the checkpoint c is shared)
        members = b == base
        d = y[controls, column] - y[controls, base]
        mean = d.mean()
        ctrl = np.sort(sign * (d - mean))
        score[members] = sign * (change[members] - mean)
        control_rank[members] = len(ctrl) - np.searchsorted(ctrl, score[members], side="left")
    order = np.lexsort((panel.ids[rows], -score))  # best first; ties by id, so the listing is reproducible
    rows, b, score, control_rank = rows[order], b[order], score[order], control_rank[order]
    return InstanceScores(
        metric=metric,
        sign=sign,
        rows=rows,
        ids=panel.ids[rows],
        cohort=steps[b + 1],
        checkpoint=np.full(len(rows), steps[column]),
        base=steps[b],
        score=score,
        control_rank=control_rank,
        p_value=(1 + control_rank) / (1 + len(controls)),
        n_controls=len(controls),
        notes=tuple(notes),
    )


def _selected(panel: Panel, sel: Selection, steps, tidx, treated) -> tuple[np.ndarray, int]:
    """The instances to score and the checkpoint's column."""
    chosen = treated.copy()
    if sel.where:
        chosen &= where_mask(panel, sel.where)
    column = _column(steps, sel.checkpoint)
    if sel.cohort is not None:
        g = _cohort_index(steps, tidx, treated, sel.cohort)
        if column < g:
            raise MemtuiError(
                f"checkpoint {int(steps[column])} comes before cohort {sel.cohort} was first trained on; an "
                "instance's score needs a checkpoint at or after its cohort's (a placebo cell has no memorisation)."
            )
        chosen &= tidx == g
    else:
        chosen &= tidx <= column  # cohorts trained on by the checkpoint
    if not chosen.any():
        what = f"cohort {sel.cohort}" if sel.cohort is not None else f"trained by step {int(steps[column])}"
        where = f" with {clean(sel.where, 60)}" if sel.where else ""
        where += f" in group {clean(sel.group, 60)}" if sel.by else ""
        raise MemtuiError(f"{panel._name}: no instance {what}{where} has complete values to score.")
    return chosen, column


def every_group(panel: Panel, metric: str, selection: Selection) -> InstanceScores:
    """Every group of the split ``selection.by``, each scored as :func:`instance_scores` scores one group (against
    the group's own never-trained instances, or every one with ``shared_controls``), ranked together best first. A
    group with nothing to score here (no instance of the cohort, no never-trained instance of its own) is left out
    with a note; where no group has any, the error gives the first group's reason."""
    groups = _split(panel, selection.by, selection.shared_controls)
    parts, notes = [], []
    for name in groups.names:  # each a name of its own (group_spec._distinct)
        try:
            parts.append(instance_scores(panel, metric, replace(selection, group=name)))
        except MemtuiError as exc:
            notes.append(f"group {clean(name, 60)} left out: {clean(str(exc), 200)}")
    if not parts:
        raise MemtuiError(f"--by '{clean(selection.by, 60)}': no group has an instance to score; {notes[0]}")
    unknown = int(((groups.labels < 0) & ~panel.never_treated).sum())
    if unknown:
        notes.append(f"{unknown} trained instances with no value of {clean(groups.covariate, 40)} belong to no group")
    merged = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _PER_INSTANCE}
    order = np.lexsort((merged["ids"], -merged["score"]))  # best first; ties by id, as one group's listing
    n_controls = parts[0].n_controls if selection.shared_controls else sum(p.n_controls for p in parts)
    return InstanceScores(
        metric=metric,
        sign=parts[0].sign,
        **{f: a[order] for f, a in merged.items()},
        n_controls=n_controls,
        notes=tuple(f"group {clean(p.groups[0][0], 60)}: {n}" for p in parts for n in p.notes) + tuple(notes),
        by=selection.by,
        groups=tuple(g for p in parts for g in p.groups),
        shared_controls=selection.shared_controls,
    )


def _split(panel: Panel, by: str, shared_controls: bool):
    """The groups of ``by`` on the panel (``group_spec.resolve``); with shared controls, equal-count bins are cut
    among the trained instances, as ``estimate --by --shared-controls`` cuts them."""
    from memtui.estimation.group_spec import resolve

    return resolve(panel, by, among=~panel.never_treated if shared_controls else None)


def group_members(panel: Panel, by: str, group: str, shared_controls: bool = False) -> np.ndarray:
    """The instances of group ``group`` of the ``--by`` spec ``by`` (every instance without a spec): its treated
    instances and its own never-trained ones (with ``shared_controls``: every never-trained one), as
    ``estimation.subgroups`` splits the panel."""
    if not by:
        if group:
            raise MemtuiError(f"group '{clean(group, 60)}' needs the split (a --by spec) it belongs to.")
        if shared_controls:
            raise MemtuiError("shared controls go with a split (a --by spec): every group keeps all the controls.")
        return np.ones(panel.n_instances, bool)
    groups = _split(panel, by, shared_controls)
    if group not in groups.names:
        shown = ", ".join(clean(n, 40) for n in groups.names[:8]) + (" ..." if len(groups.names) > 8 else "")
        raise MemtuiError(f"--by '{clean(by, 60)}' has no group '{clean(group, 60)}'; its groups are {shown}.")
    mine = groups.labels == groups.names.index(group)
    return (mine & ~panel.never_treated) | panel.never_treated if shared_controls else mine


def _column(steps: np.ndarray, checkpoint: int | None) -> int:
    """The completed checkpoint ``checkpoint`` names (its step exactly), or the last completed one."""
    if checkpoint is None:
        return len(steps) - 1
    hit = np.flatnonzero(steps == checkpoint)
    if not len(hit):
        shown = ", ".join(str(int(s)) for s in steps[:6]) + (" ..." if len(steps) > 6 else "")
        raise MemtuiError(f"no completed checkpoint at step {checkpoint}; the completed ones are {shown}.")
    return int(hit[0])


def _cohort_index(steps: np.ndarray, tidx: np.ndarray, treated: np.ndarray, cohort: int) -> int:
    """The column of the cohort first trained on at step ``cohort`` (instances first trained on between two completed
    checkpoints join the next one's cohort, as the estimate folds them)."""
    hit = np.flatnonzero(steps == cohort)
    if len(hit) and hit[0] == 0:
        raise MemtuiError(
            f"cohort {cohort} was trained on by the first completed checkpoint: it has no checkpoint before its "
            "treatment, so no change to score."
        )
    if not len(hit) or not (treated & (tidx == hit[0])).any():
        cohorts = steps[np.unique(tidx[treated])]
        shown = ", ".join(str(int(s)) for s in cohorts[:6]) + (" ..." if len(cohorts) > 6 else "")
        raise MemtuiError(f"no cohort at step {cohort} with complete values; the cohorts are {shown or 'none'}.")
    return int(hit[0])


def where_mask(panel: Panel, spec: str) -> np.ndarray:
    """The instances where ``NAME op VALUE`` holds on a covariate (op: >=, <=, >, <, ==, !=; a categorical covariate
    takes == and !=). An instance whose covariate is unknown is never selected."""
    m = _WHERE.match(spec)
    if not m:
        raise MemtuiError(
            f"--where '{clean(spec, 60)}' is not a comparison: give NAME>=VALUE (or <=, >, <, ==, !=) on a covariate."
        )
    name, op, text = m.groups()
    values = panel.covariates.get(name)
    if values is None:
        have = ", ".join(clean(k, 40) for k in panel.covariates) or "none (memtui covariates PANEL computes them)"
        raise MemtuiError(f"{panel._name}: no covariate '{clean(name, 40)}' for --where; covariates: {have}.")
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        try:
            bound = float(text)
        except ValueError:
            raise MemtuiError(f"--where '{clean(spec, 60)}': {clean(text, 40)} is not a number.") from None
        if not np.isfinite(bound):
            raise MemtuiError(f"--where '{clean(spec, 60)}': the value must be a finite number.")
        vals = values.astype(np.float64)
        known = np.isfinite(vals)
        out = np.zeros(len(vals), bool)
        out[known] = _OPS[op](vals[known], bound)
        return out
    if op not in ("==", "!="):
        raise MemtuiError(f"--where '{clean(spec, 60)}': covariate '{clean(name, 40)}' is categorical; use == or !=.")
    text_values = np.array(["" if v is None else str(v) for v in values], dtype=object)
    known = text_values != ""
    return known & ((text_values == text) if op == "==" else (text_values != text))


_OPS = {">=": np.greater_equal, "<=": np.less_equal, ">": np.greater, "<": np.less, "==": np.equal, "!=": np.not_equal}


@dataclass(frozen=True)
class InstancePath:
    """One instance's score at every completed checkpoint c, from the same base (the checkpoint before its cohort's),
    with the never-trained instances' own scores' ``quantiles`` at each c: how unusual its path is for an unseen
    text. Before its cohort's checkpoint the score is a placebo (it has not been trained on yet)."""

    steps: np.ndarray
    score: np.ndarray
    low: np.ndarray
    high: np.ndarray
    cohort: int
    base: int
    quantiles: tuple[float, float]


def instance_path(
    panel: Panel,
    metric: str,
    row: int,
    quantiles: tuple[float, float] = (0.05, 0.95),
    selection: Selection = Selection(),
) -> InstancePath:
    """The path of the instance at ``row`` (a trained one with a checkpoint before its cohort's), against the
    never-trained instances of ``selection``'s group (every one without a group), as its scores were ranked."""
    steps = panel.done_steps
    y = panel.values(metric)
    tidx = treatment_index(panel.treatment, steps, NEVER)
    a = int(tidx[row])
    if a == NEVER_INDEX or a < 1 or a >= len(steps):
        raise MemtuiError(f"instance {int(panel.ids[row])} has no cohort with a checkpoint before it to score from.")
    controls = (
        (tidx == NEVER_INDEX)
        & np.isfinite(y).all(axis=1)
        & group_members(panel, selection.by, selection.group, selection.shared_controls)
    )
    sign = panel.sign(metric)
    d = y[controls] - y[controls, a - 1][:, None]  # controls x checkpoints: each one's change since the base
    mean = d.mean(axis=0)
    ctrl = sign * (d - mean)
    low, high = np.quantile(ctrl, quantiles, axis=0) if len(ctrl) else (np.full(len(steps), np.nan),) * 2
    score = sign * (y[row] - y[row, a - 1] - mean)
    return InstancePath(steps, score, low, high, int(steps[a]), int(steps[a - 1]), quantiles)
