"""``--order amber``: LLM360 Amber's chunks (a folder of ``train_{k}.jsonl``, or a URL laid out as the hub dataset);
chunk k is trained before ``ckpt_k``, so a cohort is a run of chunks and ``--steps`` are chunk numbers."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default, order_steps
from memtui.orders.sampling import controls_kind, sampled_instances


@dataclass(frozen=True)
class Amber(OrderBase):
    name = "amber"
    title = "--order amber (LLM360 Amber: chunk k trained before ckpt_k; --steps = chunk numbers)"
    revisions = ("amber",)
    shared = frozenset({"steps", "batches", "rows", "n_validation", "seq_len", "seed", "controls"})
    refusals = {
        "batch_size": "--order amber: the batch size comes from the config, drop --batch-size.",
        "validation": "--order amber: held-out controls are --heldout FILES, not --validation.",
    }

    chunks: str | None = None
    heldout: list[str] | None = None
    seq_len: int = 2049

    def add_arguments(self, group) -> None:
        group.add_argument(
            "--chunks", help="folder of train_{k}.jsonl (or its parent), or a URL laid out as the hub dataset"
        )
        group.add_argument(
            "--heldout", nargs="+", help="never-trained files for --controls validation (amber: valid/*.jsonl)"
        )

    def check(self, args: argparse.Namespace) -> Amber:
        if not args.chunks:
            raise MemtuiError("--order amber needs --chunks DIR (the folder of train_{k}.jsonl) or a URL.")
        return replace(self, chunks=args.chunks, heldout=args.heldout, seq_len=or_default(args.seq_len, 2049))

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        from memtui.orders.amber import N_CHUNKS, remote_chunks, sample_amber
        from memtui.orders.tokenfiles import is_url

        if spec.steps is None:
            raise MemtuiError("--order amber: give the panel's checkpoints (--steps, chunk numbers 0..359).")
        step_list = order_steps(spec.steps, 1, None, "amber")
        found = remote_chunks(self.chunks, range(N_CHUNKS)) if is_url(self.chunks) else self.chunks
        sampled = sample_amber(
            found,
            step_list,
            k=spec.k,
            m=spec.m,
            n_controls=or_default(spec.n_controls, 1000),
            controls=controls_kind(spec.controls),
            heldout=self.heldout,
            seed=spec.seed,
            seq_len=self.seq_len,
        )
        return [
            sampled_instances(sampled, order="amber", source=f"Amber chunks {self.chunks}", attrs=None, documents=False)
        ]
