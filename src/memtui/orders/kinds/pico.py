"""``--order pico`` (``pico-lm/pico-decoder-*``): the pretokenized Dolma read in order, row i trained at step
⌊i / 1024⌋ + 1, a checkpoint every 1000 steps (memtui.orders.pico)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default, order_steps
from memtui.orders.sampling import controls_kind, sampled_instances

CHECKPOINTS = (
    "hub branch pico-decoder-{size}-1 of pico-lm/pico-decoder-{size}: one commit per checkpoint, titled "
    "'Saving HF Model -- Step N' (extract --revisions pico resolves them from the hub's commit list)"
)


@dataclass(frozen=True)
class Pico(OrderBase):
    name = "pico"
    revisions = ("pico",)  # extract --revisions pico: each step's commit of the model's branch
    title = "--order pico (Pico's pico-decoder suite: the pretokenized Dolma in order, 1024 rows a step)"
    description = (
        "--dolma: the dataset pico-lm/pretokenized-dolma (a folder holding data/train-*-of-10000.parquet, or an "
        "fsspec URL such as hf://datasets/pico-lm/pretokenized-dolma); --batch-size: rows per step [1024]; --macro: "
        "steps between checkpoints [1000]; --train-steps: the run's last step [200000, the model cards']."
    )
    shared = frozenset(
        {"steps", "macro", "batches", "rows", "n_validation", "seed", "controls", "train_steps", "batch_size"}
    )
    refusals = {
        "validation": "--order pico: held-out controls are --heldout FILES (parquet with input_ids), not --validation.",
        "seq_len": "--order pico: the rows are 2049 token ids; drop --seq-len.",
    }

    dolma: str | None = None
    heldout: tuple[str, ...] | None = None
    batch_size: int = 1024

    def add_arguments(self, group) -> None:
        group.add_argument("--dolma", help="pico: the pretokenized Dolma (folder with data/*.parquet, or a URL)")
        group.add_argument(
            "--heldout", nargs="+", help="never-trained files for --controls validation (pico: parquet, input_ids)"
        )

    def check(self, args: argparse.Namespace) -> Pico:
        if not args.dolma:
            raise MemtuiError("--order pico needs --dolma DIR (the pretokenized Dolma's folder) or a URL.")
        batch = or_default(args.batch_size, 1024)
        if batch < 1:
            raise MemtuiError(f"--batch-size must be at least 1, not {batch}.")
        return replace(self, dolma=args.dolma, heldout=args.heldout, batch_size=batch)

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        from memtui.orders.pico import CHECKPOINT_EVERY, TRAIN_STEPS, pico_stage
        from memtui.orders.sampling import sample_order

        train = or_default(spec.train_steps, TRAIN_STEPS)
        stage = pico_stage(self.dolma, batch=self.batch_size, heldout=self.heldout, last_step=train)
        last = stage.steps_in_order(stage.files.n_instances)
        step_list = order_steps(spec.steps, or_default(spec.macro, CHECKPOINT_EVERY), last, "pico")
        if spec.controls == "validation" and stage.heldout is None:
            raise MemtuiError("--controls validation needs --heldout FILES (parquet files of input_ids rows).")
        sampled = sample_order(
            [stage],
            step_list,
            k=or_default(spec.k, 10),
            m=or_default(spec.m, 10),
            n_controls=or_default(spec.n_controls, 1000),
            controls=controls_kind(spec.controls),
            seed=spec.seed,
        )
        attrs = {
            "batch_size": str(self.batch_size),
            "tokens_per_step": str(self.batch_size * (stage.files.seq_len - 1)),
            "checkpoints": CHECKPOINTS,
        }
        source = f"Pico pretokenized Dolma {self.dolma}"
        return [sampled_instances(sampled, order="pico", source=source, attrs=attrs, documents=False)]
