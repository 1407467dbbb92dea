"""``--memmap FILE``: a Pythia-layout token file (rows of ``seq_len`` uint16 tokens in training order,
``batch_size`` rows per step), sampled like Lesci et al.: per macro-batch of ``macro`` steps, ``k`` batches x ``m``
rows (seeded), plus never-trained validation rows from a token-id file."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.arrays import check_token_range, open_memmap, sampled_validation
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default
from memtui.panel.model import NEVER, PAD


@dataclass(frozen=True)
class Memmap(OrderBase):
    name = "memmap"
    title = "--order memmap (the default with --memmap FILE: Pythia's pre-shuffled token file)"
    description = (
        "--validation: never-trained token rows (.npy) [required]; --batch-size: rows per step [1024]; --seq-len: "
        "tokens per row [2049]; --macro: steps per macro-batch = checkpoint interval [1000]; -k batches x -m rows "
        "per macro-batch; --n-validation: validation rows to draw [all]."
    )
    revisions = ("pythia",)
    shared = frozenset(
        {"validation", "steps", "batch_size", "macro", "batches", "rows", "n_validation", "seq_len", "seed"}
    )
    selected_by = "memmap"  # --memmap without --order

    memmap: Path | None = None
    validation: Path | None = None
    batch_size: int = 1024
    seq_len: int = 2049

    def add_arguments(self, group) -> None:
        group.add_argument("--memmap", type=Path, help="Pythia-layout token file (.bin uint16 or .npy)")

    def check(self, args: argparse.Namespace) -> Memmap:
        if not args.memmap:
            raise MemtuiError("--order memmap needs --memmap FILE (Pythia-layout token file).")
        if not args.validation:
            raise MemtuiError("--memmap needs --validation: never-trained token rows (.npy) for the control group.")
        return replace(
            self,
            memmap=args.memmap,
            validation=args.validation,
            batch_size=or_default(args.batch_size, 1024),
            seq_len=or_default(args.seq_len, 2049),
        )

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        """Sampled training rows (treatment per macro-batch) and never-trained validation rows."""
        memmap, validation, batch_size = self.memmap, self.validation, self.batch_size
        macro, k, m, seed = or_default(spec.macro, 1000), or_default(spec.k, 10), or_default(spec.m, 10), spec.seed
        data = open_memmap(memmap, self.seq_len)
        n_rows, length = data.shape
        covered = (n_rows // batch_size) // macro * macro  # last checkpoint whose macro-batch is complete in the file
        if spec.steps is None:
            if covered == 0:
                raise MemtuiError(
                    f"{memmap}: {n_rows} rows do not fill one macro-batch of {macro} x {batch_size} rows."
                )
            step_list = list(range(0, covered + 1, macro))
        else:
            step_list = list(spec.steps)
        rows = sample_memmap_rows(
            n_rows, batch_size=batch_size, macro=macro, k=k, m=m, max_step=max(step_list), seed=seed
        )
        from memtui.panel.importing import pythia_treatment_step

        treat = pythia_treatment_step(rows, batch_size, macro)  # the rows are in training order
        keep = np.isin(treat, step_list)
        rows, treat = rows[keep], treat[keep]
        if len(rows) == 0:
            raise MemtuiError("no training rows fall into the panel's checkpoint steps; check --steps and --macro.")
        val, pick = sampled_validation(validation, spec.n_controls, seed)
        width = max(length, val.shape[1])
        tokens = np.full((len(rows) + len(val), width), PAD, dtype=np.int64)
        tokens[: len(rows), :length] = np.asarray(data[rows])
        check_token_range(tokens[: len(rows)], np.full(len(rows), length), memmap)
        tokens[len(rows) :, : val.shape[1]] = val
        source = (
            f"memmap {memmap} (batch {batch_size}, macro-batch {macro} steps, {k}x{m} per macro-batch, "
            f"seed {seed}); validation {validation}"
        )
        return [
            Instances(
                ids=np.r_[rows, n_rows + pick],  # validation ids follow the memmap's rows
                treatment=np.r_[treat, np.full(len(val), NEVER)],
                steps=step_list,
                tokens=tokens,
                lengths=np.r_[np.full(len(rows), length), np.full(len(val), val.shape[1])],
                source_index=np.r_[rows, pick],
                attrs={"source": source},
                checked=False,
            )
        ]


def sample_memmap_rows(
    n_rows: int, *, batch_size: int, macro: int, k: int, m: int, max_step: int, seed: int = 0
) -> np.ndarray:
    """Row indices: for every macro-batch whose treatment step is <= max_step, k batches x m rows, seeded."""
    rng = np.random.default_rng(seed)
    n_batches = n_rows // batch_size
    rows = []
    for j in range(n_batches // macro + 1):
        if (j + 1) * macro > max_step:
            break
        batches = np.arange(j * macro, min((j + 1) * macro, n_batches))
        if len(batches) == 0:
            break
        chosen = rng.choice(batches, size=min(k, len(batches)), replace=False)
        for b in np.sort(chosen):
            within = rng.choice(batch_size, size=min(m, batch_size), replace=False)
            rows.extend(b * batch_size + np.sort(within))
    return np.asarray(rows, dtype=np.int64)
