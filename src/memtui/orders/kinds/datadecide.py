"""``--order datadecide``: a DataDecide run's OLMo config (one size, one corpus) under several of its seeds, one panel
per seed over the same instances (``OUT-default.h5``, ``OUT-small-aux-2.h5``, ...), so that ``memtui compare
OUT-*.h5 --pooled`` pools them; ``extract --revisions datadecide`` then names each panel's checkpoints
``step{N}-seed-{name}`` (:mod:`memtui.orders.datadecide`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances, SamplingSpec, or_default
from memtui.orders.kinds.olmo import Olmo


@dataclass(frozen=True)
class DataDecide(Olmo):
    name = "datadecide"
    title = "--order datadecide (AI2's DataDecide: --order olmo's options, with --seeds NAMES)"
    description = (
        "the OLMo order of one DataDecide run (--config: its training YAML) under each of --seeds (default, "
        "small-aux-2, small-aux-3; 1B also large-aux-2, large-aux-3; or 6198,14,15,4,5): one panel OUT-NAME.h5 per "
        "seed over the same instances, each with that seed's treatments; held-out controls (--controls validation "
        "--heldout FILES) for two seeds or more. Extract with --revisions datadecide."
    )
    revisions = ("datadecide",)
    source = "DataDecide OLMo config"
    seed_pairs: tuple[tuple[str, int], ...] = (("default", 6198),)
    sizes: tuple[tuple[str, Path], ...] = ()  # a seed x size grid: (size, its config), one suite per size

    def add_arguments(self, group) -> None:
        super().add_arguments(group)
        group.add_argument(
            "--seeds",
            help="seed suite: more maps prefixes (comma list; --preset polypythia: seed "
            "numbers; datadecide: seed names or numbers), one panel per seed over the same instances",
        )  # neox declares it first (shown once); datadecide reads seed names or numbers
        group.add_argument(
            "--size-configs",
            metavar="SIZE=CONFIG,...",
            help="datadecide: a seed x size grid in one build, each size's training YAML (4M=c4m.yaml,1B=c1b.yaml); "
            "one suite per size, OUT-SIZE-SEED.h5, checkpoints every 1250 steps (1B: 2500) up to the config's "
            "max_duration unless --steps / --macro / --train-steps say otherwise",
        )

    def check(self, args: argparse.Namespace):
        from memtui.orders.datadecide import parse_seeds, parse_size_configs

        sizes = ()
        if args.size_configs is not None:
            if args.config is not None:
                raise MemtuiError("--size-configs gives each size's config; drop --config.")
            sizes = tuple(parse_size_configs(args.size_configs))
            args = argparse.Namespace(**{**vars(args), "config": sizes[0][1]})
        order = super().check(args)
        pairs = tuple(parse_seeds(args.seeds if args.seeds is not None else "default"))
        if len(pairs) > 1 and or_default(args.controls, "beyond") == "beyond":
            raise MemtuiError(
                "--order datadecide --seeds: a seed suite needs never-trained controls under every seed: "
                "--controls validation --heldout FILES ('beyond' one seed's last step is trained under another's)."
            )
        return replace(order, seed_pairs=pairs, sizes=sizes)

    def _options(self, args) -> dict:
        return {}

    def outputs(self, out: Path) -> list[Path]:
        out = Path(out)
        grid = [f"{size}-" for size, _ in self.sizes] or [""]
        return [
            out.with_name(f"{out.stem}-{g}{name}{out.suffix or '.h5'}") for g in grid for name, _ in self.seed_pairs
        ]

    def _order_seeds(self) -> tuple[list[int], int, str]:
        """The data order's seed under each of the suite's seeds, the epoch OLMo adds to it (``olmo_stage``'s rule),
        and a note when the seeds share one order (the config sets data.seed)."""
        from memtui.orders.olmo import _read_yaml

        cfg = _read_yaml(Path(self.config))
        data = cfg.get("data")
        epoch = 0 if cfg.get("restore_dataloader") is False else cfg.get("epoch") or 0
        fixed = data.get("seed") if isinstance(data, dict) else None
        if fixed is not None:
            note = f"data.seed {fixed} is set: every seed has that one data order (they differ by initialisation only)"
            return [fixed] * len(self.seed_pairs), epoch, note
        return [number for _, number in self.seed_pairs], epoch, ""

    def _stage(self, seed: int | None = None):
        from memtui.orders.olmo import olmo_stage

        return olmo_stage(
            self.config,
            data_root=self.data_root,
            name=self.stage_name,
            offset=self.step_offset,
            heldout=self.heldout,
            revision_prefix="",
            cache=self._shuffle_cache(),
            seed=seed if seed is not None else self._order_seeds()[0][0],
        )

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        if self.sizes:
            return self._grid(spec)
        home = super().sample(spec)[0]  # the home seed's panel: its cohorts, controls and provenance
        seeds, epoch, note = self._order_seeds()
        stage = self._stage(seeds[0])
        return suite_panels(home, self.seed_pairs, [s + epoch for s in seeds], stage, self.step_offset, note)

    def _grid(self, spec: SamplingSpec) -> list[Instances]:
        """Each size's suite, its checkpoints on the size's save interval up to its run's last step by default."""
        from memtui.orders.datadecide import checkpoint_interval, duration_steps

        out = []
        for size, config in self.sizes:
            order = replace(self, config=config, sizes=())
            sized = replace(
                spec,
                macro=or_default(spec.macro, checkpoint_interval(size)),
                train_steps=or_default(spec.train_steps, duration_steps(config)),
            )
            for inst in order.sample(sized):
                inst.attrs = {**inst.attrs, "datadecide_size": size}
                out.append(inst)
        return out


def suite_panels(home: Instances, pairs, shuffles, stage, offset: int, note: str) -> list[Instances]:
    """One panel per seed: the home panel's instances, each seed's treatment from where its shuffle puts them."""
    from memtui.orders.datadecide import NEVER, positions_under, treatment_under
    from memtui.orders.globalindices import ShuffledOrder

    position = np.asarray(home.provenance["position"], dtype=np.int64)
    trained = position >= 0  # held-out controls: never trained under any seed
    numbers = np.asarray(home.ids, dtype=np.int64)[trained]  # a trained instance's id is its instance number
    n = stage.files.n_instances
    steps = np.full((len(home.ids), len(pairs)), NEVER, dtype=np.int64)
    treatments = []
    for s, shuffle in enumerate(shuffles):  # PCG64(seed + epoch), as olmo_stage shuffles (the home one is sampled)
        pos = positions_under(ShuffledOrder(n, int(shuffle)), numbers) if s else position[trained]
        step, treat = treatment_under(pos, stage.batch, offset, home.steps)
        steps[trained, s] = step
        full = np.full(len(home.ids), NEVER, dtype=np.int64)
        full[trained] = treat
        treatments.append(full)
    names = [name for name, _ in pairs]
    mark = f"datadecide {home.attrs.get('source', '')} seeds {','.join(names)} n={len(home.ids)}"
    notes = home.attrs.get("order_notes", "") + (f"; {note}" if note else "")
    out = []
    for (name, number), treat in zip(pairs, treatments, strict=True):
        attrs = {**home.attrs, "order": "datadecide", "order_notes": notes, "seed": name, "datadecide_seed": name,
                 "datadecide_seed_number": str(number), "seeds": ",".join(names)}  # fmt: skip
        if len(pairs) > 1:
            attrs["seed_suite"] = mark
        prov = {**home.provenance, "seed_steps": steps}
        revisions = [f"step{int(c) - offset}-seed-{name}" for c in home.steps]  # what --revisions datadecide names
        out.append(replace(home, treatment=treat, attrs=attrs, provenance=prov, revisions=revisions,
                           provenance_attrs={"seeds": ",".join(names)}))  # fmt: skip
    return out
