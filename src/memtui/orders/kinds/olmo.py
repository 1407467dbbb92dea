"""``--order olmo`` (an OLMo 1/2 training YAML) and ``--order olmo-core`` (the ``config.json`` an OLMo-core run
wrote): the order is rebuilt from the config's seed, batch and token files, one stage per panel (a stage-2 config
with ``--stage-name`` and ``--step-offset``); instances OLMo's repetition filter masks are dropped and counted."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default, order_steps
from memtui.orders.sampling import controls_kind, sampled_instances

_SHARED = frozenset({"steps", "macro", "batches", "rows", "n_validation", "seed", "controls", "train_steps"})


def _refusals(name: str) -> dict[str, str]:
    return {
        "batch_size": f"--order {name}: the batch size comes from the config, drop --batch-size.",
        "validation": f"--order {name}: held-out controls are --heldout FILES, not --validation.",
    }


@dataclass(frozen=True)
class _Stage(OrderBase):
    """What OLMo and OLMo-core share: a config read into one stage, sampled and written with its provenance."""

    shared = _SHARED
    revisions = ("olmo1", "olmo2-stage1", *(f"olmo2-stage2-ingredient{k}" for k in (1, 2, 3)))

    config: Path | None = None
    data_root: str | None = None
    heldout: tuple[str, ...] | None = None
    stage_name: str | None = None
    step_offset: int = 0
    cache: Path | None = None
    options: dict = field(default_factory=dict)  # the family's own reader options

    def add_arguments(self, group) -> None:
        group.add_argument(
            "--config",
            type=Path,
            help="olmo: the training YAML; olmo-core: the run's config.json; nanoset: nanotron's YAML",
        )
        if self.name == "olmo":
            group.add_argument("--global-indices", type=Path, help="olmo: the run's global_indices.npy (else rebuilt)")
        group.add_argument("--data-root", help="read the config's token files from this mirror instead")
        if self.name == "olmo-core":
            group.add_argument(
                "--data-paths", type=Path, help="olmo-core: the run's data_paths.txt when the config lists none"
            )
            group.add_argument("--epoch", type=int, help="olmo-core: the epoch the panel's steps are in [default: 1]")
        group.add_argument(
            "--heldout",
            nargs="+",
            help="never-trained files for --controls validation (olmo: token files; amber: valid/*.jsonl; pico: "
            "parquet files of input_ids rows)",
        )
        group.add_argument(
            "--stage-name", help="the stage's name (stage1, stage2-ingredient1, ...), recorded per instance"
        )
        group.add_argument("--step-offset", type=int, help="panel steps before this stage's step 1 [default: 0]")
        group.add_argument(
            "--cache",
            type=Path,
            help="folder keeping the order's swap partners, 4 bytes an "
            "instance, for faster rebuilds (default: $MEMTUI_CACHE, else "
            "none)",
        )

    def check(self, args: argparse.Namespace):
        if args.config is None:
            raise MemtuiError(f"--order {self.name} needs --config (the run's training config).")
        return replace(
            self,
            config=args.config,
            data_root=args.data_root,
            heldout=args.heldout,
            stage_name=args.stage_name,
            step_offset=or_default(args.step_offset, 0),
            cache=args.cache,
            options=self._options(args),
        )

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        stage = self._stage()
        if spec.train_steps is not None:
            stage.last_step = int(spec.train_steps) - stage.offset
        last = stage.offset + stage.steps_in_order(stage.files.n_instances)
        step_list = order_steps(spec.steps, or_default(spec.macro, 1000), last, stage.name)
        if spec.controls == "validation" and stage.heldout is None:
            raise MemtuiError(
                "--controls validation needs --heldout FILES (never-trained token files of the same kind)."
            )
        from memtui.orders.sampling import sample_order

        sampled = sample_order(
            [stage],
            step_list,
            k=or_default(spec.k, 10),
            m=or_default(spec.m, 10),
            n_controls=or_default(spec.n_controls, 1000),
            controls=controls_kind(spec.controls),
            seed=spec.seed,
        )
        extra = {
            "tokens_per_step": str(stage.batch * stage.files.seq_len),
            "batch_size": str(stage.batch),
            "step_offset": str(int(self.step_offset)),
            **stage.attrs,  # what the order never trained, its shuffle strategy
        }  # what extraction's revision presets read
        return [
            sampled_instances(
                sampled, order=self.name, source=f"{self.source} {self.config}", attrs=extra, documents=True
            )
        ]

    def _shuffle_cache(self):
        """Where an OLMo order's swap partners are kept: ``cache``, else ``$MEMTUI_CACHE/shuffles`` where the user
        set it, else nowhere. Kept only when asked: 4 bytes an instance (1.2 GB for 3e8 instances) would otherwise
        land in the user's cache folder unannounced, to save seconds (a first build of 3e8 takes 8-16 s, a cached one
        2-4 s)."""
        from memtui.orders.globalindices import default_cache

        if self.cache is not None:
            return self.cache
        return default_cache() if os.environ.get("MEMTUI_CACHE", "").strip() else None


@dataclass(frozen=True)
class Olmo(_Stage):
    name = "olmo"
    title = "--order olmo / olmo-core (AI2's OLMo 1, 2 and 3)"
    description = (
        "the order is rebuilt from the config's seed, batch and token files; instances OLMo's repetition filter "
        "masks are dropped and counted. One stage per panel: a stage-2 config with --stage-name and --step-offset."
    )
    refusals = _refusals("olmo")
    source = "OLMo config"

    def _options(self, args) -> dict:
        return {"global_indices": args.global_indices}

    def _stage(self):
        from memtui.orders.olmo import olmo_stage

        name = self.stage_name
        prefix = f"{name}-" if name and name.startswith("stage") else ""
        return olmo_stage(
            self.config,
            global_indices=self.options.get("global_indices"),
            data_root=self.data_root,
            name=name,
            offset=self.step_offset,
            heldout=self.heldout,
            revision_prefix=prefix,
            cache=self._shuffle_cache(),
        )


@dataclass(frozen=True)
class OlmoCore(_Stage):
    name = "olmo-core"
    title = "--order olmo-core (its options are --order olmo's, with --data-paths and --epoch)"
    refusals = _refusals("olmo-core")
    source = "OLMo-core config"

    def _options(self, args) -> dict:
        return {"data_paths": args.data_paths, "epoch": or_default(args.epoch, 1)}

    def _stage(self):
        from memtui.orders.olmo import olmo_core_stage

        return olmo_core_stage(
            self.config,
            data_root=self.data_root,
            data_paths=self.options.get("data_paths"),
            epoch=self.options.get("epoch", 1),
            name=self.stage_name,
            offset=self.step_offset,
            heldout=self.heldout,
            cache=self._shuffle_cache(),
        )
