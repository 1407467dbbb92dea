"""``--order neox``: a GPT-NeoX / Megatron order (index maps over a tokenised corpus): Pythia, the PolyPythias' seed
suites (``--preset polypythia``, ``--seeds``) and Hubble's inserted examples (``--preset hubble``,
``--perturbation-info``). ``k x m`` sequences per cohort drawn uniformly over the cohort's training positions;
never-trained controls past the last trained step ("beyond") or from ``--validation`` rows."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.arrays import pad_rows, stack_rows, validation_rows
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default, order_steps
from memtui.orders.goldfish import Goldfish, to_attrs
from memtui.orders.goldfish import parse as parse_goldfish
from memtui.panel.model import NEVER


@dataclass(frozen=True)
class Neox(OrderBase):
    name = "neox"
    title = "--order neox (GPT-NeoX / Megatron index maps: Pythia, PolyPythias, Hubble; Apertus with --goldfish)"
    description = (
        "--tokens PREFIX: the Megatron corpus (PREFIX.idx + PREFIX.bin); --batch-size: sequences per step; "
        "--seq-len: tokens per sequence (the maps' seq_len + 1, checked); --validation: never-trained rows (.npy) for "
        "--controls validation; --goldfish K,H: a run with the Goldfish loss (Apertus). Paths may be URLs (read by "
        "byte ranges)."
    )
    revisions = ("pythia", "polypythia", "hubble")
    shared = frozenset(
        {
            "tokens",
            "validation",
            "steps",
            "batch_size",
            "macro",
            "batches",
            "rows",
            "n_validation",
            "seq_len",
            "seed",
            "controls",
            "train_steps",
        }
    )

    tokens: str | None = None
    maps: str | None = None
    batch_size: int | None = None
    seq_len: int | None = None  # tokens per instance: the maps' seq_len + 1
    validation: Path | None = None
    seeds: tuple[str, ...] = ()  # other seeds' maps prefixes: a seed suite
    names: tuple[str, ...] = ()  # the panels' seed names (one per maps prefix)
    perturbation_info: Path | None = None
    examples: Path | None = None
    cache: Path | None = None
    steps: tuple[int, ...] | None = None  # the preset's checkpoints, where --steps is not given
    train_steps: int | None = None  # the preset's last step, where --train-steps is not given
    attrs: dict = field(default_factory=dict)
    goldfish: Goldfish | None = None  # the run's Goldfish loss mask (Apertus: --goldfish 50,50)

    def add_arguments(self, group) -> None:
        group.add_argument(
            "--index-maps",
            help="maps prefix (PREFIX_doc_idx.npy ... or -document_index.npy ...); "
            "with --preset polypythia the folder holding seed0/ ... seed9/",
        )
        group.add_argument(
            "--seeds",
            help="seed suite: more maps prefixes (comma list; --preset polypythia: seed "
            "numbers; datadecide: seed names or numbers), one panel per seed over the same instances",
        )
        group.add_argument(
            "--preset",
            choices=("polypythia", "hubble"),
            help="the suite's batch, lengths and checkpoints (polypythia: --seed N picks the seed's maps)",
        )
        group.add_argument(
            "--perturbation-info",
            type=Path,
            help="Hubble's *_perturbation_info.json: add every inserted example, with its duplicates "
            "and insertion steps",
        )
        group.add_argument(
            "--examples", type=Path, help="folder of tokenised perturbation datasets (seq_start insertions)"
        )
        group.add_argument(
            "--goldfish",
            metavar="K,H",
            help="neox: the run trained with the Goldfish loss (Apertus: 50,50; Megatron's --goldfish-k, "
            "--goldfish-h): the masked tokens are recorded and the panel also gets loglik_trained and "
            "accuracy_trained, scored over the trained tokens only",
        )
        group.add_argument(
            "--cache",
            type=Path,
            help="folder keeping the byte ranges read from remote files "
            "(resumable); olmo, olmo-core: the order's swap partners, 4 "
            "bytes an instance, for faster rebuilds (default: "
            "$MEMTUI_CACHE, else none)",
        )

    def check(self, args: argparse.Namespace) -> Neox:
        from memtui.orders.suites import HUBBLE, PYTHIA, polypythia_maps

        if not args.tokens:
            raise MemtuiError("--order neox needs --tokens PREFIX: the Megatron corpus (PREFIX.idx and PREFIX.bin).")
        if not args.index_maps:
            raise MemtuiError("--order neox needs --index-maps PREFIX (with --preset polypythia: the seeds' folder).")
        if args.perturbation_info is not None and args.preset not in (None, "hubble"):
            raise MemtuiError("--perturbation-info is Hubble's: use it with --preset hubble or no preset.")
        if args.preset == "hubble" and args.perturbation_info is None:
            raise MemtuiError("--preset hubble needs --perturbation-info FILE (the run's *_perturbation_info.json).")
        preset = {"polypythia": PYTHIA, "hubble": HUBBLE}.get(args.preset, {})
        batch = args.batch_size or preset.get("batch_size")
        if batch is None:
            raise MemtuiError("--order neox needs --batch-size (sequences per training step) or a --preset.")
        maps, seeds, names = args.index_maps, _list(args.seeds), None
        seed = or_default(args.seed, 0)
        if args.preset == "polypythia":
            numbers = [_seed_number(s) for s in ([seed] + seeds if seeds else [seed])]
            if len(set(numbers)) != len(numbers):
                raise MemtuiError("--seeds: each PolyPythia seed once, and not --seed's again.")
            prefixes = [polypythia_maps(args.index_maps, s) for s in numbers]
            maps, seeds, names = prefixes[0], prefixes[1:], [f"seed{s}" for s in numbers]
        steps, train_steps = _preset_steps(args, preset)
        return replace(
            self,
            tokens=args.tokens,
            maps=maps,
            batch_size=batch,
            seq_len=args.seq_len or preset.get("seq_len"),
            validation=args.validation,
            perturbation_info=args.perturbation_info,
            examples=args.examples,
            cache=args.cache,
            steps=steps,
            train_steps=train_steps,
            attrs={"preset": args.preset} if args.preset else {},
            goldfish=parse_goldfish(args.goldfish) if args.goldfish is not None else None,
        ).suite(seeds, names if seeds else None, or_default(args.controls, "beyond"))

    def suite(self, seeds: Sequence[str] | None, seed_names: Sequence[str] | None, controls: str) -> Neox:
        """The order with its seed suite's maps and panel names, refused where they do not fit together."""
        if controls not in ("beyond", "validation"):
            raise MemtuiError(f"--controls must be beyond or validation for --order neox, not '{controls}'.")
        if seeds and controls == "beyond":
            raise MemtuiError(
                "a seed suite needs --controls validation: a sequence beyond the home seed's last step is trained "
                "under the other seeds' orders."
            )
        all_maps = [self.maps, *(seeds or [])]
        names = [*seed_names] if seed_names else [_seed_name(p, i) for i, p in enumerate(all_maps)]
        if seeds and len(set(names)) != len(names):
            raise MemtuiError(f"seed names must differ: {', '.join(names)}.")
        return replace(self, seeds=tuple(seeds or ()), names=tuple(names) if seeds else ())

    def outputs(self, out: Path) -> list[Path]:
        out = Path(out)
        if not self.seeds:
            return [out]
        return [out.with_name(f"{out.stem}-{name}{out.suffix or '.h5'}") for name in self.names]

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        from memtui.orders.neox import IndexedTokens, IndexMaps, NeoxOrder, sample_panel_instances

        maps, cache, seed = self.maps, self.cache, spec.seed
        data = IndexedTokens(self.tokens, cache_dir=cache)
        seq = None if self.seq_len is None else self.seq_len - 1
        order = NeoxOrder(data, IndexMaps(maps, cache_dir=cache), self.batch_size, seq)
        steps = spec.steps if spec.steps is not None else self.steps
        train_steps = spec.train_steps if spec.train_steps is not None else self.train_steps
        step_list = order_steps(steps, or_default(spec.macro, 1000), order.n_sequences // order.batch_size, str(maps))
        beyond = spec.controls == "beyond"
        n_beyond = or_default(spec.n_controls, 1000) if beyond else 0
        inst = sample_panel_instances(
            order,
            steps=step_list,
            per_cohort=or_default(spec.k, 10) * or_default(spec.m, 10),
            n_controls=n_beyond,
            seed=seed,
            controls="beyond" if beyond else "none",
            train_steps=train_steps,
        )
        ids, treat, rows = inst.ids, inst.treatment, list(inst.tokens)
        prov = _provenance(inst)
        notes = [
            f"order {maps}: {order.n_sequences:,} sequences of {order.seq_len + 1} tokens, batch {self.batch_size}"
        ]
        if self.perturbation_info is not None:
            ids, treat, rows, prov, note = _with_insertions(
                order, self.perturbation_info, self.examples, step_list, ids, treat, rows, prov
            )
            notes.append(note)
        if not beyond:
            ids, treat, rows, prov, note = self._validation(order, spec, ids, treat, rows, prov)
            notes.append(note)
        matrix, lengths = stack_rows(rows)
        base = {
            "source": f"neox order {maps} over {self.tokens}",
            "order": "neox",
            "order_notes": "; ".join(notes),
            "batch_size": str(self.batch_size),
            **self.attrs,
        }
        if self.goldfish is not None:
            prov["goldfish_dropped"], base = _goldfish(self.goldfish, matrix, lengths, base)
        if not self.seeds:
            return [
                Instances(
                    ids=ids,
                    treatment=treat,
                    steps=step_list,
                    tokens=matrix,
                    lengths=lengths,
                    provenance=prov,
                    attrs=base,
                )
            ]
        others = [NeoxOrder(data, IndexMaps(p, cache_dir=cache), self.batch_size, order.seq_len) for p in self.seeds]
        return self._seed_suite(
            order, others, ids=ids, prov=prov, step_list=step_list, matrix=matrix, lengths=lengths, base=base
        )

    def _validation(self, order, spec: SamplingSpec, ids, treat, rows, prov):
        """The instances with ``--validation`` rows added as never-trained controls (ids after the order's)."""
        pick, val = validation_rows(self.validation, spec.n_controls, spec.seed)
        prov = {key: pad_rows(v, len(pick)) for key, v in prov.items()}
        note = f"controls: {len(pick)} validation rows of {self.validation}"
        # validation ids follow the order's positions
        return (
            np.r_[ids, order.n_sequences + pick],
            np.r_[treat, np.full(len(pick), NEVER)],
            rows + list(val),
            prov,
            note,
        )

    def _seed_suite(self, order, others, *, ids, prov, step_list, matrix, lengths, base) -> list[Instances]:
        """One panel per seed over the same instances, each with that seed's treatment steps; instances some seed
        trained only partly by the last checkpoint leave the suite."""
        from memtui.orders.neox import cohort, seed_steps

        names = self.names
        trained = prov["position"] >= 0
        # under every seed, the home seed included: when the instance's input tokens were first trained (any, all). In
        # a later epoch of the home order that is before the sequence's own step (its tokens were cut into other
        # sequences in an earlier epoch), so the home seed is measured as the others are
        first = np.full((len(ids), len(names)), -1, dtype=np.int64)
        full = first.copy()
        first[trained], full[trained] = seed_steps(order, prov["position"][trained], [order, *others])
        last = max(step_list)
        # an instance some of whose tokens a seed trained by the last checkpoint, but not all, is neither treated nor
        # a clean control under that seed: it leaves the whole suite (the suite needs the same instances in every
        # panel)
        partial = ((first >= 1) & (first <= last) & ((full < 1) | (full > last))).any(axis=1)
        keep = ~partial
        treatments = [np.where(trained, cohort(full[:, s], step_list), NEVER)[keep] for s in range(len(names))]
        prov = {key: v[keep] for key, v in prov.items()} | {"seed_steps": full[keep], "seed_first_steps": first[keep]}
        suite = _suite_mark(self.maps, ids[keep])
        out = []
        for s, name in enumerate(names):
            seed_attrs = {
                **base,
                "seed": name,
                "seeds": ",".join(names),
                "seed_suite": suite,
                "order_notes": base["order_notes"] + f"; {int(partial.sum())} instances partly trained "
                "by the last checkpoint under some seed left out",
            }
            out.append(
                Instances(
                    ids=ids[keep],
                    treatment=treatments[s],
                    steps=step_list,
                    tokens=matrix[keep],
                    lengths=lengths[keep],
                    provenance=prov,
                    attrs=seed_attrs,
                    provenance_attrs={
                        "seeds": ",".join(names),
                        "seed_maps": " ".join(map(str, [self.maps, *self.seeds])),
                    },
                )
            )
        return out


def _goldfish(goldfish: Goldfish, matrix: np.ndarray, lengths: np.ndarray, base: dict) -> tuple[np.ndarray, dict]:
    """Each row's targets the Goldfish mask drops (provenance ``goldfish_dropped``) and the panel's record of it: the
    mask (``goldfish_*``) and, in ``never_trained``, the share of targets never trained on. No instance is dropped or
    reclassified: every one keeps trained tokens; the trained-target metrics leave the masked ones out."""
    dropped = np.array([int(goldfish.dropped(matrix[r, 1:n]).sum()) if n >= 2 else 0 for r, n in enumerate(lengths)])
    targets = int(np.maximum(np.asarray(lengths) - 1, 0).sum())
    share = dropped.sum() / max(1, targets)
    never = (f"goldfish loss: {int(dropped.sum()):,} of the panel's {targets:,} targets ({100 * share:.2f} %) "
             "masked at data loading, never trained on (provenance goldfish_dropped); loglik_trained and "
             "accuracy_trained score the rest, for the controls too")  # fmt: skip
    before = base.get("never_trained")
    return dropped, {**base, **to_attrs(goldfish), "never_trained": f"{before}; {never}" if before else never}


def _provenance(inst) -> dict[str, np.ndarray]:
    """Where each sampled sequence lies: its position in the order, its step, and the document and token it starts
    at."""
    first_piece = np.r_[0, np.flatnonzero(np.diff(inst.pieces.instance)) + 1]
    return {
        "position": inst.ids,
        "step": inst.step,
        "document": inst.pieces.document[first_piece],  # the corpus document the sequence starts in
        "offset": inst.pieces.offset[first_piece],  # and the token it starts at
    }


def _preset_steps(args, preset: dict) -> tuple[tuple[int, ...] | None, int | None]:
    """The checkpoints and last step a preset knows, where --steps / --train-steps do not give them."""
    from memtui.orders.hubble import hubble_checkpoints

    steps, train_steps = None, args.train_steps
    if args.preset == "polypythia":
        train_steps = train_steps or preset["train_steps"]
        if args.steps is None:  # Pythia's checkpoints: 0, 1, 2, 4, ..., 512, then every 1000 steps
            steps = (0, *(2**i for i in range(10)), *range(1000, train_steps + 1, 1000))
    elif args.preset == "hubble" and args.steps is None:
        if train_steps is None:
            raise MemtuiError("--preset hubble: give --train-steps (the run's last step) or --steps.")
        steps = tuple(hubble_checkpoints(train_steps))
    return steps, train_steps


def _list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _seed_number(value) -> int:
    text = str(value).removeprefix("seed")
    if not text.isdigit():
        raise MemtuiError(f"--seeds with --preset polypythia takes seed numbers 0..9, not '{value}'.")
    return int(text)


def _seed_name(prefix: str, k: int) -> str:
    """``seed{N}`` from a GPT-NeoX map prefix (``..._{N}s``), else by position."""
    found = re.search(r"_(\d+)s$", str(prefix))
    return f"seed{found.group(1)}" if found else f"seed{k}"


def _suite_mark(maps, ids: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(str(maps).encode() + np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def _with_insertions(order, info, examples, step_list, ids, treat, rows, prov):
    """Hubble: every inserted example as an instance (treated at its first insertion, with its duplication count and
    every copy's step); sampled sequences at an insertion's position are replaced by it."""
    from memtui.orders.hubble import hubble_instances, read_perturbation_info

    records = read_perturbation_info(info)
    ins = hubble_instances(order, records, checkpoints=step_list, examples=examples)
    seen = ins.treatment != NEVER  # inserted after the last checkpoint: not a clean control (another distribution)
    copies = np.concatenate(ins.steps)
    clash = np.isin(ids, np.array([r.position for r in records], dtype=np.int64))  # sampled sequences holding a copy
    width = max(len(s) for s in ins.steps)
    steps_pad = np.full((len(ins.steps), width), -1, dtype=np.int64)
    for i, s in enumerate(ins.steps):
        steps_pad[i, : len(s)] = s
    keep_rows = [r for r, c in zip(rows, clash, strict=True) if not c]
    n_old = int((~clash).sum())
    new_prov = {key: pad_rows(v[~clash], int(seen.sum())) for key, v in prov.items()}
    new_prov["position"][n_old:] = ins.first_position[seen]
    new_prov["step"][n_old:] = order.step(ins.first_position[seen])
    new_prov["duplicates"] = np.r_[np.zeros(n_old, dtype=np.int64), ins.duplicates[seen]]
    new_prov["insertion_steps"] = np.r_[np.full((n_old, width), -1, dtype=np.int64), steps_pad[seen]]
    new_prov["source"] = np.r_[np.full(n_old, ""), np.array(ins.files, dtype=object)[seen]].astype(str)
    note = (
        f"{int(seen.sum())} inserted examples ({len(copies)} copies); {int((~seen).sum())} first inserted after "
        f"the last checkpoint left out; {int(clash.sum())} sampled sequences holding a copy replaced"
    )
    return (
        np.r_[ids[~clash], ins.first_position[seen]],
        np.r_[treat[~clash], ins.treatment[seen]],
        keep_rows + [t for t, s in zip(ins.tokens, seen, strict=True) if s],
        new_prov,
        note,
    )
