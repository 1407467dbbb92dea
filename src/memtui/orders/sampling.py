"""A panel's instances from a known data order: treated instances per cohort and never-trained controls.

An order is one or more *stages* (OLMo 2 / OLMo 3: pretraining, then mid-training mixes), each its own token files,
global indices (instance number at each position of the order) and batch size. Step s of a stage trains positions
``[(s-1)·B, s·B)`` (the trainers increment the step before each batch); a stage's step s is the panel's step
``offset + s``. An instance's treatment step is the first panel checkpoint at or after the step that trained it, so a
cohort is the steps between two checkpoints. Per cohort, ``k`` of its batches are drawn and ``m`` instances in each
(Lesci et al.'s design, as ``memtui build --memmap``), seeded.

Controls are never trained by the last checkpoint of the panel: instances at positions after the stage's last
trained step ("beyond"), or a held-out token set ("held-out"). Instances of a later stage are not exchangeable with
an earlier stage's (another data mix), so each stage gets its own controls and every instance records its stage:
the estimator compares within a stage.

Instances the library masks out of the loss (OLMo's repetition filter) were never trained on: they are dropped from
treated and control sets alike and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances
from memtui.orders.repetition import RepetitionFilter
from memtui.orders.tokenfiles import TokenFiles

ID_SHIFT = 40  # id = (2·stage + held-out) << 40 | instance number: unique across stages and sets
NEVER = -1


@dataclass
class Stage:
    name: str  # "stage1", "stage2-ingredient1", ...
    files: TokenFiles
    # the global indices (uint32) when first needed: memory-mapped, or a ShuffledOrder (read at positions: order[pos])
    indices: Callable[[], np.ndarray]
    batch: int  # instances per step
    offset: int = 0  # the panel's step before this stage's step 1
    last_step: int | None = None  # the stage's last step (None: as many as the order holds)
    instance_filter: RepetitionFilter | None = None
    heldout: TokenFiles | None = None
    revision: Callable[[int], str] | None = None  # a local step's checkpoint name on the hub
    first_epoch: bool = True  # False: every instance was trained in an earlier epoch, none is "beyond" the panel
    notes: list[str] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)  # panel attributes (what the order never trained)

    def steps_in_order(self, n_positions: int) -> int:
        held = n_positions // self.batch
        return held if self.last_step is None else min(self.last_step, held)


@dataclass
class SampledOrder:
    """What a panel needs from an order, with each instance's provenance."""

    ids: np.ndarray  # int64
    treatment: np.ndarray  # int64: panel step of the first checkpoint that has trained it, NEVER for controls
    tokens: np.ndarray  # (n, L) int64
    stage: np.ndarray  # int16: index into stage_names
    file: np.ndarray  # int32: index into files (stage's token files, or its held-out files)
    offset: np.ndarray  # int64: first token's index within that file
    position: np.ndarray  # int64: position in the stage's order (-1: held-out)
    stage_names: list[str]
    files: list[list[str]]  # per stage: its token files then its held-out files
    steps: list[int]
    revisions: list[str]
    counts: dict[str, int]
    notes: list[str]
    source: np.ndarray | None = None  # the domain of each instance where the data names one ("" where not)

    @property
    def split(self) -> np.ndarray:
        return np.where(self.treatment == NEVER, "validation", "train")


def _cohorts(steps: Sequence[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(first step, last step, checkpoint) of each cohort whose steps lie in the stage's panel steps (lo, hi]."""
    out, prev = [], lo
    for c in steps:
        if c <= lo:
            continue
        a, b = prev + 1, min(c, hi)
        if a <= b:
            out.append((a, b, c))
        prev = c
        if c >= hi:
            break
    return out


def sample_order(
    stages: Sequence[Stage],
    steps: Sequence[int],
    *,
    k: int = 10,
    m: int = 10,
    n_controls: int = 1000,
    controls: str = "beyond",
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> SampledOrder:
    """Sample a panel: per cohort k batches x m instances, and ``n_controls`` never-trained instances per stage."""
    steps = sorted({int(s) for s in steps})
    if not steps or steps[0] < 0:
        raise MemtuiError("give the panel's checkpoint steps (>= 0).")
    if controls not in ("beyond", "held-out"):
        raise MemtuiError(f"controls must be 'beyond' or 'held-out', not '{controls}'.")
    if k < 1 or m < 1 or n_controls < 0:
        raise MemtuiError("batches per cohort and instances per batch must be >= 1, controls >= 0.")
    parts, counts, notes = [], {}, []
    for si, stage in enumerate(stages):
        rng = np.random.default_rng([seed, si])
        indices = stage.indices()
        # positions past N repeat the order's start (OLMo pads to the world size): those instances were trained
        n_pos = min(len(indices), stage.files.n_instances)
        n_steps = stage.steps_in_order(n_pos)
        cohorts = _cohorts(steps, stage.offset, stage.offset + n_steps)
        pos, treat = _treated_positions(rng, stage, cohorts, k, m)
        last_trained = min(max(steps), stage.offset + n_steps) - stage.offset  # the stage's last step in the panel
        beyond = controls == "beyond" and n_controls > 0
        cpos = _beyond_positions(stage, rng, n_controls, last_trained, n_pos) if beyond else pos[:0]
        # the order is read once, at the panel's positions only (an OLMo order is traced there, never built whole)
        inst = np.asarray(indices[np.concatenate([pos, cpos])] if len(pos) + len(cpos) else [], dtype=np.int64)
        parts.append(_read(stage, si, pos, treat, inst[: len(pos)], counts, "treated", progress))
        if beyond:
            never = np.full(len(cpos), NEVER)
            parts.append(_read(stage, si, cpos, never, inst[len(pos) :], counts, "controls", progress))
        elif n_controls:
            parts.append(_heldout_controls(stage, si, rng, n_controls, counts, progress))
        notes += [f"{stage.name}: {note}" for note in stage.notes]
    merged = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    if not (merged["treatment"] != NEVER).any():
        raise MemtuiError("no training instance falls into the panel's checkpoint steps; check --steps.")
    revisions = [_revision(stages, s) for s in steps]
    return SampledOrder(
        ids=merged["ids"],
        treatment=merged["treatment"],
        tokens=merged["tokens"],
        stage=merged["stage"].astype(np.int16),
        file=merged["file"].astype(np.int32),
        offset=merged["offset"],
        position=merged["position"],
        stage_names=[s.name for s in stages],
        files=[list(s.files.paths) + (list(s.heldout.paths) if s.heldout else []) for s in stages],
        steps=steps,
        revisions=revisions,
        counts=counts,
        notes=notes,
        source=_sources(stages, merged["stage"], merged["file"]),
    )


def _treated_positions(rng: np.random.Generator, stage, cohorts, k: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cohort, k of its steps and m rows of each step's batch: their positions in the stage's order and cohort."""
    pos, treat = [], []
    for a, b, c in cohorts:
        chosen = a + np.sort(rng.choice(b - a + 1, size=min(k, b - a + 1), replace=False))
        for s in chosen:
            rows = np.sort(rng.choice(stage.batch, size=min(m, stage.batch), replace=False))
            pos.append((s - stage.offset - 1) * stage.batch + rows)
            treat.append(np.full(len(rows), c))
    pos = np.concatenate(pos) if pos else np.zeros(0, dtype=np.int64)
    treat = np.concatenate(treat) if treat else np.zeros(0, dtype=np.int64)
    return pos, treat


def _beyond_positions(stage, rng, n_controls, last_trained, n_pos) -> np.ndarray:
    """Never-trained controls: positions of the order after the stage's last panel step."""
    if not stage.first_epoch:
        raise MemtuiError(
            f"{stage.name}: a later epoch has no never-trained instances in its order; use held-out "
            "controls (--controls held-out)."
        )
    lo = max(last_trained, 0) * stage.batch
    if lo >= n_pos:
        raise MemtuiError(
            f"{stage.name}: every instance of the order is trained by step {stage.offset + last_trained}; "
            "use held-out controls (--controls held-out with a held-out token set)."
        )
    return lo + np.sort(rng.choice(n_pos - lo, size=min(n_controls, n_pos - lo), replace=False))


def _heldout_controls(stage, si, rng, n_controls, counts, progress) -> dict:
    """Never-trained controls from the stage's held-out token set."""
    if stage.heldout is None:
        raise MemtuiError(f"{stage.name}: held-out controls need a held-out token set (--heldout FILES).")
    n_held = stage.heldout.n_instances
    pick = np.sort(rng.choice(n_held, size=min(n_controls, n_held), replace=False))
    return _read_heldout(stage, si, pick, counts, progress)


def _sources(stages: Sequence[Stage], stage: np.ndarray, file: np.ndarray) -> np.ndarray | None:
    """OLMo's ``data.datasets`` labels, per instance, where the config gives them."""
    if not any(s.files.labels for s in stages):
        return None
    labels = [list(s.files.labels) or [""] * len(s.files.paths) for s in stages]
    return np.array([labels[st][f] if f < len(labels[st]) else "" for st, f in zip(stage, file, strict=True)])


def _revision(stages: Sequence[Stage], step: int) -> str:
    for stage in reversed(stages):  # the latest stage that has begun by this step names it
        if step >= stage.offset and stage.revision is not None:
            return stage.revision(step - stage.offset)
    return f"step{step}"


def _filtered(stage: Stage, tokens: np.ndarray, counts: dict, key: str) -> np.ndarray:
    keep = np.ones(len(tokens), dtype=bool) if stage.instance_filter is None else stage.instance_filter.keep(tokens)
    counts[f"{stage.name}/{key}"] = counts.get(f"{stage.name}/{key}", 0) + int(keep.sum())
    counts[f"{stage.name}/{key}_filtered"] = counts.get(f"{stage.name}/{key}_filtered", 0) + int((~keep).sum())
    return keep


def _read(stage, si, pos, treat, inst, counts, key, progress) -> dict:
    """The instances ``inst`` at the order's positions ``pos``: their tokens, filtered, with their provenance."""
    if inst.size and inst.max() >= stage.files.n_instances:
        raise MemtuiError(
            f"{stage.name}: the global indices name instance {int(inst.max())}, but the token files hold "
            f"{stage.files.n_instances}; the indices belong to other data."
        )
    order = np.argsort(inst, kind="stable")  # read file by file, in file order
    tokens = np.empty((len(inst), stage.files.seq_len), dtype=np.int64)
    tokens[order] = stage.files.read(inst[order], _progress(progress, f"{stage.name} {key}"))
    keep = _filtered(stage, tokens, counts, key)
    f, local = stage.files.locate(inst)
    return {
        "ids": ((2 * si) << ID_SHIFT) | inst[keep],
        "treatment": np.asarray(treat, dtype=np.int64)[keep],
        "tokens": tokens[keep],
        "stage": np.full(int(keep.sum()), si),
        "file": f[keep],
        "offset": (local * stage.files.seq_len)[keep],
        "position": np.asarray(pos, dtype=np.int64)[keep],
    }


def _read_heldout(stage, si, pick, counts, progress) -> dict:
    files = stage.heldout
    tokens = files.read(pick, _progress(progress, f"{stage.name} held-out"))
    keep = _filtered(stage, tokens, counts, "controls")
    f, local = files.locate(pick)
    return {
        "ids": ((2 * si + 1) << ID_SHIFT) | pick[keep],
        "treatment": np.full(int(keep.sum()), NEVER, dtype=np.int64),
        "tokens": tokens[keep],
        "stage": np.full(int(keep.sum()), si),
        "file": f[keep] + len(stage.files.paths),
        "offset": (local * files.seq_len)[keep],
        "position": np.full(int(keep.sum()), -1, dtype=np.int64),
    }


def _progress(progress, label):
    if progress is None:
        return None
    return lambda done, total: progress(label, done, total)


def controls_kind(controls: str) -> str:
    """``build --controls`` in the sampler's words: "beyond", or "held-out" for "validation"."""
    if controls not in ("beyond", "validation"):
        raise MemtuiError(f"--controls must be beyond or validation, not '{controls}'.")
    return "held-out" if controls == "validation" else "beyond"


def sampled_instances(sampled: SampledOrder, *, order: str, source: str, attrs: dict | None, documents: bool):
    """A panel's instances from an OLMo / OLMo-core / Amber sample, each with its provenance (stage, file, offset,
    position, and with ``documents`` Dolma's per-document metadata where a .csv.gz lies beside a token file)."""
    files = [f for stage_files in sampled.files for f in stage_files]
    first_file = np.cumsum([0, *(len(f) for f in sampled.files)])[:-1]
    prov = {
        "position": sampled.position,
        "stage": sampled.stage,
        "file": first_file[sampled.stage] + sampled.file,
        "offset": sampled.offset,
        "stage_names": np.array(sampled.stage_names, dtype=object),
        "file_names": np.array(files, dtype=object),
    }
    if sampled.source is not None:
        prov["source"] = np.asarray(sampled.source).astype(str)
    if documents:
        from memtui.orders.dolma import document_of

        prov |= document_of(files, prov["file"], np.asarray(sampled.offset)) or {}
    counts = ", ".join(f"{key} {value}" for key, value in sampled.counts.items())
    base = {"source": source, "order": order, "order_notes": "; ".join([*sampled.notes, counts])[:4000],
            **(attrs or {})}  # fmt: skip
    return Instances(ids=sampled.ids, treatment=sampled.treatment, steps=sampled.steps, tokens=sampled.tokens,
                     lengths=np.full(len(sampled.ids), sampled.tokens.shape[1]), provenance=prov,
                     revisions=sampled.revisions, attrs=base)  # fmt: skip
