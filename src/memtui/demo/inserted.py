"""`memtui demo --inserted`: ground truth inserted on purpose. A *standard* and a *perturbed* tiny GPT-NeoX, trained
from the same initialisation on the same rows in the same order, except that the perturbed run sees **canaries**:
random token sequences inserted at known steps with known doses (copies) and timings, as Hubble's perturbed models
(Wei et al. 2025: duplication levels; timing variants that insert early, in the middle or late in training).

Canaries. Every canary is ``seq_len`` tokens drawn independently from the corpus's own byte frequencies: the
corpus's tokens, in sequences unlike any sentence of it (Hubble's perturbation data is distinct from its corpus),
whose only route into the model is being trained on. (Drawn uniformly from 36 letters and digits instead, as
Carlini et al.'s random-digit canaries, they were barely memorised by these models: the full run gained at most 14
nats at 16 copies, on top of the ~240 nats that learning what canaries look like gave every canary; so not that.)

A canary of dose d has d copies, evenly spread over ``window`` steps whose first macro-batch holds its first copy;
every canary of one (dose, timing) group shares that macro-batch, so each group is one cohort of the panel. A copy
*replaces* an ordinary row of its step's batch (a position drawn at random), so batch shapes, step counts and the rest
of the data order are the standard run's. Never-inserted canaries of the same distribution are the panel's controls.

The panel (:func:`canary_panel`) holds the canaries (treated at the first checkpoint after their first copy; dose and
timing as covariates, copies and steps as Hubble's provenance) and the controls; it is scored once by the perturbed
model's checkpoints (what memtui estimates from) and once by the standard model's (the direct counterfactual: the
same canaries, under the model that never saw them). :mod:`memtui.demo.inserted_report` compares the two.

Both runs use :func:`memtui.demo.train.train` and extraction as `demo --suite` does (one process and one torch thread
each, side by side), so until the first copy the two runs are the same computation and their checkpoints are equal
bit for bit.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import h5py
import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.demo.family import suite_base
from memtui.demo.train import DemoConfig, corpus_rows
from memtui.demo.workdir import check_keep, work_folder
from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import create_panel, text_attr
from memtui.panel.model import NEVER

MODELS = ("perturbed", "standard")  # the panels' names: OUT_DIR/perturbed.h5 and OUT_DIR/standard.h5
# Hubble's timing variants, as the fraction of training at which a timing's first cohort starts
TIMINGS = (("early", 0.05), ("middle", 0.375), ("late", 0.7))
MAX_SHARE = 0.5  # at most this share of any step's batch is canaries: the rest is the corpus


@dataclass
class InsertedConfig:
    """Training settings shared by both runs (``base``) and the insertion design."""

    base: DemoConfig = field(default_factory=lambda: suite_base(DemoConfig(batch=32, steps=256, n_validation=64)))
    doses: tuple[int, ...] = (1, 2, 4, 8, 16)
    timings: tuple[tuple[str, float], ...] = TIMINGS
    per_group: int = 8  # canaries per (dose, timing) group: one cohort (16 measured: weaker memorisation, see docs)
    n_controls: int = 256  # never-inserted canaries
    window: int = 16  # steps over which a canary's copies are spread (two macro-batches: half at the cohort's own)
    spacing: int = 2  # macro-batches between two cohorts of one timing (so copy windows do not overlap)
    draws: int = 1000
    parallel: int = 2  # the two runs side by side, one process and one torch thread each

    @classmethod
    def small(cls) -> InsertedConfig:
        """The CI version (under a minute of CPU): a 132k-parameter model, two doses and two timings."""
        base = suite_base(DemoConfig(hidden=64, layers=2, heads=4, intermediate=256, batch=32, steps=80, every=8,
                                     n_validation=64))  # fmt: skip
        return cls(base=base, doses=(1, 16), timings=(("early", 0.1), ("late", 0.5)), per_group=16, n_controls=64,
                   draws=200)  # fmt: skip


@dataclass
class Plan:
    """The canaries and where their copies go. Rows 0..n_treated-1 of ``tokens`` are inserted, the rest controls."""

    tokens: np.ndarray  # (canaries, seq_len) token ids
    dose: np.ndarray  # copies inserted (0 for controls)
    timing: np.ndarray  # "early" / "middle" / "late" ("never" for controls)
    copy_steps: list[np.ndarray]  # each canary's copy steps (training steps, 1-based), empty for controls
    positions: list[np.ndarray]  # each canary's copy rows in the training order (row r is trained at r // batch + 1)
    treatment: np.ndarray  # the first checkpoint that has trained on the canary; NEVER for controls

    @property
    def inserted(self) -> np.ndarray:
        return self.dose > 0

    @property
    def first_step(self) -> int:
        """The first training step that sees a canary: before it the two runs are the same."""
        return int(min(s.min() for s in self.copy_steps if len(s)))


def cohort_starts(cfg: InsertedConfig) -> dict[tuple[str, int], int]:
    """(timing, dose) -> the first step of the macro-batch that holds the group's first copies. Within a timing the
    doses take their macro-batches in a seeded random order, so dose and training step are not confounded."""
    base = cfg.base
    n_macro = base.steps // base.every
    rng = np.random.default_rng(base.seed + 7)
    starts = {}
    for name, fraction in cfg.timings:
        first = max(1, round(fraction * n_macro))
        for j, dose in enumerate(rng.permutation(np.asarray(cfg.doses))):
            macro = first + j * cfg.spacing
            if (macro + 1) * base.every + cfg.window - base.every > base.steps:
                raise MemtuiError(f"the {name} cohorts do not fit into {base.steps} steps; train longer or give fewer "
                                  "doses.")  # fmt: skip
            starts[(name, int(dose))] = macro * base.every + 1
    return starts


def copy_steps(start: int, dose: int, phase: int, window: int) -> np.ndarray:
    """A canary's copy steps: ``dose`` copies evenly spaced over ``window`` steps from ``start``, shifted by
    ``phase`` (wrapping inside the window) so the canaries of one group do not all share one step."""
    offsets = (phase + (np.arange(dose) * window) // dose) % window
    return np.sort(start + offsets)


def plan_insertions(cfg: InsertedConfig, unigram: np.ndarray) -> Plan:
    """Draw the canaries (inserted groups, then the controls) from the token frequencies ``unigram`` and place every
    copy."""
    base = cfg.base
    rng = np.random.default_rng(base.seed + 11)
    starts = cohort_starts(cfg)
    n_treated = len(starts) * cfg.per_group
    tokens = rng.choice(len(unigram), size=(n_treated + cfg.n_controls, base.seq_len), p=unigram).astype(np.int64)
    dose, timing, steps = [], [], []
    half = max(1, min(base.every, cfg.window))
    for (name, d), start in starts.items():
        for i in range(cfg.per_group):
            dose.append(d)
            timing.append(name)
            # the first copy always falls in the group's first macro-batch (a phase below the macro-batch's length)
            steps.append(copy_steps(start, d, i % half, cfg.window))
    dose += [0] * cfg.n_controls
    timing += ["never"] * cfg.n_controls
    steps += [np.zeros(0, dtype=np.int64)] * cfg.n_controls
    positions = _place_copies(steps, base.batch, rng)
    first = np.array([s.min() if len(s) else -1 for s in steps])
    treatment = np.where(first > 0, -(-first // base.every) * base.every, NEVER)
    return Plan(tokens, np.array(dose), np.array(timing, dtype=object), steps, positions, treatment)


def _place_copies(steps: list[np.ndarray], batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A row of its step's batch for every copy, distinct within the step, drawn at random."""
    by_step: dict[int, list[tuple[int, int]]] = {}
    for c, s in enumerate(steps):
        for k, step in enumerate(s.tolist()):
            by_step.setdefault(step, []).append((c, k))
    positions = [np.zeros(len(s), dtype=np.int64) for s in steps]
    for step, copies in sorted(by_step.items()):
        if len(copies) > MAX_SHARE * batch:
            raise MemtuiError(f"step {step} would hold {len(copies)} canary copies in a batch of {batch}; give fewer "
                              "canaries per group, a longer window or a larger batch.")  # fmt: skip
        slots = rng.permutation(batch)[: len(copies)]
        for (c, k), slot in zip(copies, slots, strict=True):
            positions[c][k] = (step - 1) * batch + slot
    return positions


def unigram(rows: np.ndarray, vocab: int = 256) -> np.ndarray:
    """The corpus's token frequencies (what a canary's tokens are drawn from)."""
    counts = np.bincount(rows.ravel().astype(np.int64), minlength=vocab).astype(float)
    return counts / counts.sum()


def perturb(rows: np.ndarray, plan: Plan) -> np.ndarray:
    """The perturbed run's rows: the standard rows with every copy written over its row."""
    out = rows.copy()
    for c in np.flatnonzero(plan.inserted):
        out[plan.positions[c]] = plan.tokens[c].astype(out.dtype)
    return out


def canary_panel(path: Path, cfg: InsertedConfig, plan: Plan, steps: list[int]) -> Path:
    """The panel of the canaries and the controls (no scores yet), with dose and timing as covariates."""
    n = len(plan.dose)
    width = max(1, int(plan.dose.max()))
    ins_steps = np.full((n, width), -1, dtype=np.int64)
    for i, s in enumerate(plan.copy_steps):
        ins_steps[i, : len(s)] = s
    position = np.array([p.min() if len(p) else -1 for p in plan.positions], dtype=np.int64)
    create_panel(
        path, ids=np.arange(n), treatment=plan.treatment, steps=steps, tokens=plan.tokens,
        lengths=np.full(n, plan.tokens.shape[1]), overwrite=True,
        attrs={"tokenizer": "bytes (token id = UTF-8 byte)", "demo_config": json.dumps(asdict(cfg.base)),
               "inserted_config": json.dumps(_config_json(cfg)), "suite": json.dumps(list(MODELS)),
               "source": "memtui demo --inserted: random canaries, inserted into the perturbed run only"},
        provenance={"position": position, "step": np.where(position >= 0, position // cfg.base.batch + 1, -1),
                    "duplicates": plan.dose.astype(np.int64), "insertion_steps": ins_steps},
    )  # fmt: skip
    write_covariates(path, {"dose": plan.dose.astype(float), "timing": plan.timing.astype(str)})
    return path


def _config_json(cfg: InsertedConfig) -> dict:
    d = asdict(cfg)
    d.pop("base")
    return d


def panel_path(out_dir: Path, name: str) -> Path:
    return Path(out_dir) / f"{name}.h5"


def check_out_dir(out_dir: Path, overwrite: bool) -> None:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise MemtuiError(f"{out_dir} is a file; --inserted needs a folder: choose another path.")
    taken = [p.name for p in [*(panel_path(out_dir, n) for n in MODELS), out_dir / "report.md"] if p.exists()]
    if taken and not overwrite:
        raise MemtuiError(f"{out_dir} already holds {', '.join(taken)}; pass --force to overwrite or choose another.")
    if not out_dir.parent.is_dir():
        raise MemtuiError(f"cannot write {out_dir}: {out_dir.parent} is not an existing folder.")


def make_inserted(
    out_dir: str | Path,
    cfg: InsertedConfig | None = None,
    *,
    workdir: str | Path | None = None,
    keep: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Train the pair, build and extract both panels, write the report. Returns the path of ``report.md``."""
    cfg = cfg or InsertedConfig()
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    check_keep(workdir)  # before the output folder is made: a refusal leaves nothing behind
    out_dir.mkdir(exist_ok=True)
    work = work_folder(workdir)
    t0 = time.time()
    try:
        _prepare(cfg, work, out_dir, log)
        timings = _train_and_extract(cfg, work, out_dir, keep, log)
        log(f"both models extracted after {time.time() - t0:.0f} s; estimating and writing the report")
        from memtui.demo.inserted_report import write_report

        t1 = time.time()
        report = write_report(out_dir, draws=cfg.draws, timings=timings, log=log)
        log(f"report written in {time.time() - t1:.0f} s; the whole run took {time.time() - t0:.0f} s")
    finally:
        if not keep and workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


def _prepare(cfg: InsertedConfig, work: Path, out_dir: Path, log: Callable[[str], None]) -> Plan:
    """The two runs' rows (work/standard/train.bin, work/perturbed/train.bin) and the two unscored panels."""
    base = cfg.base
    rows, _ = corpus_rows(base)
    plan = plan_insertions(cfg, unigram(rows))
    for name, data in (("standard", rows), ("perturbed", perturb(rows, plan))):
        (work / name).mkdir(exist_ok=True)
        data.astype(np.uint16).tofile(work / name / "train.bin")
    steps = [0, *range(base.every, base.steps + 1, base.every)]
    common = canary_panel(work / "panel.h5", cfg, plan, steps)
    for name in MODELS:
        atomic_write(panel_path(out_dir, name), lambda tmp: shutil.copyfile(common, tmp))
    copies = int(plan.dose.sum())
    log(f"{int(plan.inserted.sum())} canaries in {len(set(plan.treatment[plan.inserted].tolist()))} cohorts (doses "
        f"{', '.join(map(str, cfg.doses))}; timings {', '.join(t for t, _ in cfg.timings)}), {copies} copies "
        f"replacing {copies} of {len(rows)} rows ({copies / len(rows):.1%}); {cfg.n_controls} never-inserted "
        f"controls; first copy at step {plan.first_step}")  # fmt: skip
    return plan


def _train_and_extract(cfg: InsertedConfig, work: Path, out_dir: Path, keep: bool, log) -> dict[str, dict]:
    """Both runs side by side (:func:`memtui.demo.family.model_job`: train, save, extract), then name the panels."""
    from memtui.demo.family import _run_jobs

    cfg_json = json.dumps(asdict(cfg.base))
    jobs = [(n, cfg_json, str(work / n), str(panel_path(out_dir, n)), keep) for n in MODELS]
    log(f"training and extracting the {' and '.join(MODELS)} runs, {cfg.parallel} at a time")
    timings = {r["name"]: r for r in _run_jobs(jobs, cfg.parallel, log)}
    for name in MODELS:
        with h5py.File(panel_path(out_dir, name), "r+", libver="latest") as f:  # still this job's own new file
            f.attrs["model_description"] = text_attr(
                f"{name}: memtui demo --inserted, GPT-NeoX {cfg.base.layers}x{cfg.base.hidden}, "
                + ("canaries inserted" if name == "perturbed" else "no canary (the counterfactual)")
            )
    return timings
