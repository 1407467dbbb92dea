"""``--order levanter`` (Marin's runs, any Levanter run): the order computed from the seed, no index files: a
permutation (linear or Feistel, keyed through PCG64) or era shuffling of each cache, blended by a block mixture; an
instance is treated at its first exposure and its exposures are recorded (memtui.orders.levanter)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.base import Instances, OrderBase, SamplingSpec, or_default, order_steps
from memtui.orders.sampling import sampled_instances


def _sources(caches: list[str], weights: list[str] | None):
    from memtui.orders.levanter import Source

    names, paths = [], []
    for item in caches:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise MemtuiError(
                f"--caches takes NAME=DIR (the config's dataset name and its cache), not '{clean(item, 80)}'."
            )
        if not name.isprintable() or len(name) > 200:  # Levanter's names hold '/', '-', '.': kept, as labels
            raise MemtuiError(
                f"--caches: '{clean(name, 60)}' is not a dataset name (printable, at most 200 characters)."
            )
        if name in names:
            raise MemtuiError(f"--caches names '{clean(name, 60)}' twice.")
        names.append(name)
        paths.append(path)
    given: dict[str, float] = {}
    for item in weights or []:
        name, sep, value = item.partition("=")
        try:
            w = float(value) if sep else math.nan
        except ValueError:
            w = math.nan
        if not math.isfinite(w) or w < 0:
            raise MemtuiError(f"--weights takes NAME=W with W a number >= 0, not '{clean(item, 80)}'.")
        if name not in names:
            raise MemtuiError(f"--weights names '{clean(name, 60)}', which no --caches entry names.")
        given[name] = w
    if weights is not None and not any(given.values()):
        raise MemtuiError("--weights: at least one dataset needs a positive weight.")
    return [Source(n, p, given.get(n, 0.0) if weights is not None else 1.0) for n, p in zip(names, paths, strict=True)]


def _schedules(args: argparse.Namespace, names: list[str], single: bool):
    """Refuse the schedules' malformed or clashing forms before anything is read; the batch schedule, or None."""
    from memtui.orders.levanter_schedule import parse_batch_schedule, parse_train_weights

    if args.train_weights is not None:
        if args.weights is not None or single:
            raise MemtuiError("--train-weights gives a mixture's weights: drop --weights and --single-dataset.")
        parse_train_weights(args.train_weights, names)
    if args.batch_schedule is None:
        return None
    if args.batch_size is not None:
        raise MemtuiError("--batch-schedule gives every step's batch size: drop --batch-size.")
    return parse_batch_schedule(args.batch_schedule)


def _shuffle(value: str | None) -> bool | int:
    if value is None or value.lower() == "true":
        return True
    if value.lower() == "false":
        return False
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise MemtuiError(f"--shuffle takes true, false or an era length (a whole number > 0), not '{clean(value, 40)}'.")


def _seed(value: int | None, what: str) -> int | None:
    if value is not None and not 0 <= value < 2**31:
        raise MemtuiError(f"{what} must be a whole number from 0 to 2**31 - 1 (a jax seed), not {value}.")
    return value


@dataclass(frozen=True)
class Levanter(OrderBase):
    name = "levanter"
    title = "--order levanter (Levanter's data order: Marin's runs; computed from the seed, no index files)"
    description = (
        "--caches NAME=DIR …: each dataset's cache (its train/ folder holding input_ids/), in the config's order; "
        "--weights NAME=W …: the mixture's train_weights (absent: equal); --train-weights YAML: train_weights as "
        "Levanter's config gives them, weight stages included ('[[0, {web: 0.7, code: 0.3}], [1000, {web: 0.2, "
        "code: 0.8}]]', each stage's step a training step); --single-dataset: a single-dataset config "
        "(not a mixture); --trainer-seed [0] / --data-seed; --shuffle true|false|ERA [true]; --permutation-type "
        "linear|feistel [linear, Levanter's default; Marin's newer configs say feistel]; --mixture-block-size "
        "[2048]; --jax-prng partitionable|legacy [partitionable, as Levanter's trainer sets it]; --numpy-semantics "
        "2|1 [2]; --seq-len: the model's context [4096]; --batch-size [1024]; --batch-schedule YAML: "
        "train_batch_size as a schedule ('[{start: 0, value: 256}, {start: 1000, value: 512}]'); --train-steps: "
        "the run's last step."
    )
    shared = frozenset({"steps", "macro", "batches", "rows", "n_validation", "seed", "train_steps", "batch_size",
                        "seq_len", "controls"})  # fmt: skip
    refusals = {
        "validation": "--order levanter: controls come from the order after the panel's last step; drop --validation.",
    }

    caches: tuple[str, ...] | None = None
    weights: tuple[str, ...] | None = None
    train_weights: str | None = None  # the YAML text, parsed again where the order is built
    batch_schedule: str | None = None
    single: bool = False
    trainer_seed: int = 0
    data_seed: int | None = None
    shuffle: bool | int = True
    permutation: str = "linear"
    block_size: int = 2048
    prng: str = "partitionable"
    numpy_major: int = 2
    seq_len: int = 4096
    batch: int = 1024

    def add_arguments(self, group) -> None:
        group.add_argument("--caches", nargs="+", help="levanter: NAME=DIR per dataset, in the config's order")
        group.add_argument("--weights", nargs="+", help="levanter: NAME=W, the mixture's train_weights")
        group.add_argument("--train-weights", help="levanter: train_weights as YAML, weight stages included")
        group.add_argument("--batch-schedule", help="levanter: train_batch_size as a YAML schedule")
        group.add_argument("--single-dataset", action="store_true", default=None,
                           help="levanter: a single-dataset config, not a mixture")  # fmt: skip
        group.add_argument("--trainer-seed", type=int, help="levanter: trainer.seed [0]")
        group.add_argument("--data-seed", type=int, help="levanter: data_seed, when the config sets one")
        group.add_argument("--shuffle", help="levanter: true, false or an era length [true]")
        group.add_argument("--permutation-type", choices=["linear", "feistel"], help="levanter: [linear]")
        group.add_argument("--mixture-block-size", type=int, help="levanter: mixture_block_size [2048]")
        group.add_argument(
            "--jax-prng",
            choices=["partitionable", "legacy"],
            help="levanter: jax_threefry_partitionable on (Levanter's trainer default) or off [partitionable]",
        )
        group.add_argument(
            "--numpy-semantics",
            type=int,
            choices=[1, 2],
            help="levanter: the NumPy major version the run used (the linear permutation's arithmetic) [2]",
        )

    def check(self, args: argparse.Namespace) -> Levanter:
        if not args.caches:
            raise MemtuiError("--order levanter needs --caches NAME=DIR (each dataset's cache, in the config's order).")
        sources = _sources(args.caches, args.weights)  # refuse malformed entries before anything is read
        single = bool(args.single_dataset)
        schedule = _schedules(args, [s.name for s in sources], single)
        if single and (args.weights or len(args.caches) != 1 or args.mixture_block_size is not None):
            raise MemtuiError("--single-dataset reads one cache and takes no --weights or --mixture-block-size.")
        block = or_default(args.mixture_block_size, 2048)
        if not 1 <= block < 2**16:
            raise MemtuiError(f"--mixture-block-size must be 1 to 65535 (Levanter's limit), not {block}.")
        shuffle, kind = _shuffle(args.shuffle), or_default(args.permutation_type, "linear")
        if shuffle is False and (args.permutation_type or args.numpy_semantics):
            raise MemtuiError("--shuffle false permutes nothing: drop --permutation-type and --numpy-semantics.")
        if kind == "feistel" and args.numpy_semantics:
            raise MemtuiError("--numpy-semantics changes only the linear permutation's arithmetic; Feistel's is exact.")
        if args.controls == "validation":
            raise MemtuiError("--order levanter: controls come from the order after the panel (--controls beyond).")
        seq_len, batch = or_default(args.seq_len, 4096), or_default(args.batch_size, 1024)
        if seq_len < 1 or batch < 1:
            raise MemtuiError("--seq-len and --batch-size must be at least 1.")
        return replace(
            self, caches=tuple(args.caches), weights=None if args.weights is None else tuple(args.weights),
            single=single, trainer_seed=_seed(or_default(args.trainer_seed, 0), "--trainer-seed"),
            data_seed=_seed(args.data_seed, "--data-seed"), shuffle=shuffle, permutation=kind, block_size=block,
            prng=or_default(args.jax_prng, "partitionable"), numpy_major=or_default(args.numpy_semantics, 2),
            seq_len=seq_len, batch=batch if schedule is None else int(schedule.values[0]),
            train_weights=args.train_weights, batch_schedule=args.batch_schedule,
        )  # fmt: skip

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        import numpy as np

        from memtui.orders.levanter import LevanterConfig, open_run, sample_levanter
        from memtui.orders.levanter_schedule import parse_batch_schedule, parse_train_weights

        names = [c.partition("=")[0] for c in self.caches]
        config = LevanterConfig(
            sources=_sources(list(self.caches), None if self.weights is None else list(self.weights)),
            seq_len=self.seq_len, batch=self.batch, seed=self.trainer_seed, data_seed=self.data_seed,
            shuffle=self.shuffle, permutation=self.permutation, block_size=self.block_size, mixture=not self.single,
            prng=self.prng, numpy_major=self.numpy_major,
            weight_stages=None if self.train_weights is None else parse_train_weights(self.train_weights, names),
            batch_schedule=None if self.batch_schedule is None else parse_batch_schedule(self.batch_schedule),
        )  # fmt: skip
        run = open_run(config, spec.train_steps)
        step_list = order_steps(spec.steps, or_default(spec.macro, 1000), run.train_steps, "levanter")
        sampled, extra = sample_levanter(run, step_list, k=or_default(spec.k, 10), m=or_default(spec.m, 10),
                                         n_controls=or_default(spec.n_controls, 1000), seed=spec.seed)  # fmt: skip
        attrs = {
            "batch_size": str(run.batch) if run.schedule is None else run.schedule.describe(),
            "tokens_per_step": str(run.batch * self.seq_len) if run.schedule is None else "varies (batch_size)",
            "repeats": "treated at first exposure; provenance 'exposures' counts the run's exposures",
            "levanter": (
                f"seed {self.trainer_seed if self.data_seed is None else f'data_seed {self.data_seed}'}, shuffle "
                f"{self.shuffle}, {self.permutation}, jax PRNG {self.prng}, NumPy {self.numpy_major}"
                + ("" if self.single else f", mixture block {self.block_size}")
            ),
        }
        if never := run.order.never_in_order():
            attrs["never_trained"] = f"{never} rows past the run's last step: in the data, never trained"
        inst = sampled_instances(sampled, order="levanter", source=f"Levanter caches {', '.join(self.caches)}"[:2000],
                                 attrs=attrs, documents=False)  # fmt: skip
        inst.provenance["exposures"] = np.asarray(extra["exposures"], dtype=np.int64)
        inst.provenance["sampled_position"] = np.asarray(extra["sampled_position"], dtype=np.int64)
        return [inst]
