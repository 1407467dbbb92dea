"""``--order nanoset``: nanotron's Nanoset (SmolLM2, SmolLM3, the FineWeb ablations) rebuilt from the run's config:
weighted blending, ``RandomState(seed)``'s shuffle, the same order every epoch, cut at steps x batch; an instance is
treated at its first exposure and its exposures are recorded (memtui.orders.nanoset)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default, order_steps
from memtui.orders.sampling import sampled_instances


@dataclass(frozen=True)
class Nanoset(OrderBase):
    name = "nanoset"
    revisions = ("smollm2", "smollm3-stage1")  # FineWeb ablations' step-001000-2BT: give the branches as --manifest
    title = "--order nanoset (nanotron's Nanoset: SmolLM2, SmolLM3, the FineWeb ablations)"
    description = (
        "--config: the run's nanotron YAML (data_stages, tokens, parallelism); --stage-name: which data stage when "
        "there are several; --data-root: read the dataset folders from this mirror. Repeats (epochs, over-weighted "
        "datasets) are treated at their first exposure; provenance records exposures."
    )
    shared = frozenset({"steps", "macro", "batches", "rows", "n_validation", "seed", "controls"})
    refusals = {
        "batch_size": "--order nanoset: the batch size comes from the config, drop --batch-size.",
        "validation": "--order nanoset: held-out controls are --heldout FILES (.ds token files), not --validation.",
        "seq_len": "--order nanoset: the sequence length comes from the config, drop --seq-len.",
    }

    config: Path | None = None
    stage_name: str | None = None
    data_root: str | None = None
    heldout: tuple[str, ...] | None = None

    def add_arguments(self, group) -> None:
        group.add_argument("--config", type=Path, help="nanoset: the run's nanotron config YAML")
        group.add_argument("--stage-name", help="nanoset: the data stage to read")
        group.add_argument("--data-root", help="read the config's dataset folders from this mirror instead")
        group.add_argument("--heldout", nargs="+", help="nanoset: never-trained .ds token files for held-out controls")

    def check(self, args: argparse.Namespace) -> Nanoset:
        if args.config is None:
            raise MemtuiError("--order nanoset needs --config (the run's nanotron config YAML).")
        return replace(self, config=args.config, stage_name=args.stage_name, data_root=args.data_root,
                       heldout=args.heldout)  # fmt: skip

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        import numpy as np

        from memtui.orders.nanoset import never_trained, read_run, sample_nanoset
        from memtui.orders.tokenfiles import TokenFiles

        run = read_run(self.config, stage_name=self.stage_name, data_root=self.data_root)
        step_list = order_steps(spec.steps, or_default(spec.macro, 1000), run.train_steps, "nanoset")
        if spec.controls == "validation" and not self.heldout:
            raise MemtuiError("--controls validation needs --heldout FILES (.ds token files never trained).")
        held = None
        if spec.controls == "validation":
            held = TokenFiles.open(list(self.heldout), run.files.dtype, run.files.seq_len)
        sampled, extra = sample_nanoset(run, step_list, k=or_default(spec.k, 10), m=or_default(spec.m, 10),
                                        n_controls=or_default(spec.n_controls, 1000), heldout=held,
                                        seed=spec.seed)  # fmt: skip
        attrs = {
            "batch_size": str(run.batch),
            "tokens_per_step": str(run.batch * (run.files.seq_len - 1)),
            "repeats": "treated at first exposure; provenance 'exposures' counts the run's exposures",
        }
        if never := never_trained(run.order):
            attrs["never_trained"] = never + ": in the data, never trained"
        inst = sampled_instances(sampled, order="nanoset", source=f"nanotron config {self.config}", attrs=attrs,
                                 documents=False)  # fmt: skip
        inst.provenance["exposures"] = np.asarray(extra["exposures"], dtype=np.int64)
        inst.provenance["sampled_position"] = np.asarray(extra["sampled_position"], dtype=np.int64)
        return [inst]
