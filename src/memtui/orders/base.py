"""The seam every data order plugs into: what `memtui build` asks of an order, and what an order hands back.

An order (a module in ``memtui.orders.kinds``, one line in ``memtui.orders.registry``) declares its command-line
options in its own argparse group, checks them (``check`` refuses what does not fit and returns the order configured
by them), names the panels it writes (``outputs``: one, or one per seed of a suite) and samples them
(``sample(spec)``: one ``Instances`` per panel). The build command and ``memtui.extract.build`` do the rest: the
``--order`` choices, refusing an option given to an order that does not take it, the file checks, the writing.

``SamplingSpec`` holds the sampling every order shares (Lesci et al.'s design: per cohort ``k`` batches x ``m``
instances, never-trained controls, a seed); an order honours the parts it names in ``shared`` and the build refuses
the others when given.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from memtui.core.errors import MemtuiError


@dataclass(frozen=True)
class SamplingSpec:
    """The sampling arguments every order shares (what ``build_from_*`` each took separately before).

    ``steps``: the panel's checkpoints, sorted (None: the order's default, e.g. every ``macro`` steps); ``macro``:
    steps per cohort when ``steps`` is None (None: the order's default); ``k`` x ``m``: batches per cohort x instances
    per batch; ``n_controls``: never-trained controls to draw (None: the order's default); ``controls``: "beyond" the
    last trained step or "validation" (a held-out set); ``train_steps``: the model's last training step (None: the
    last checkpoint); ``seed``: of every draw."""

    steps: Sequence[int] | None = None
    macro: int | None = None
    k: int = 10
    m: int = 10
    n_controls: int | None = None
    controls: str = "beyond"
    train_steps: int | None = None
    seed: int = 0


@dataclass
class Instances:
    """One panel's instances as an order sampled them, ready to be written (``memtui.extract.build``).

    ``checked``: the order wants the common checks (token ids in range, both treated instances and controls) made
    before writing; an order that made its own leaves it False."""

    ids: np.ndarray
    treatment: np.ndarray
    steps: Sequence[int]
    tokens: np.ndarray
    lengths: np.ndarray
    attrs: dict[str, str]
    source_index: np.ndarray | None = None
    provenance: dict[str, np.ndarray] = field(default_factory=dict)
    provenance_attrs: dict[str, str] | None = None
    revisions: Sequence[str] | None = None
    checked: bool = True


@runtime_checkable
class Order(Protocol):
    """A data order `memtui build` can sample a panel from (see the module's docstring)."""

    name: str  # the --order choice
    title: str  # its option group's title in `build --help`
    description: str | None  # the group's text
    revisions: tuple[str, ...]  # the revision presets (memtui.orders.revisions.PRESETS) naming its checkpoints
    shared: frozenset[str]  # the build's common options (argparse dests) it honours
    refusals: Mapping[str, str]  # common options it does not take, with the one-line reason (else a generic line)
    selected_by: str | None  # an option of its own that picks it when --order is not given (--memmap: memmap)

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        """Declare its own options (an option another order declared already is skipped: see OptionGroup)."""

    def check(self, args: argparse.Namespace) -> Order:
        """Refuse options that do not fit together (one line each); the order configured by them."""

    def outputs(self, out: Path) -> list[Path]:
        """The panel files it will write for OUT (a seed suite writes several)."""

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        """The instances of each panel, in ``outputs``' order."""


class OrderBase:
    """Defaults an order may keep: one panel, no common options refused with a reason of its own."""

    description: str | None = None
    revisions: tuple[str, ...] = ()
    shared: frozenset[str] = frozenset()
    refusals: Mapping[str, str] = {}
    selected_by: str | None = None

    def outputs(self, out: Path) -> list[Path]:
        return [Path(out)]


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the user gave option ``dest``: the build's options default to None (or False for flags), so that an
    option given to an order that does not take it is refused, not silently ignored."""
    value = getattr(args, dest, None)
    return value is not None and value is not False


def or_default(value, default):
    return default if value is None else value


def order_steps(steps: Sequence[int] | None, macro: int, last: int | None, what: str) -> list[int]:
    """The panel's checkpoint steps: ``--steps`` as given, else every ``macro`` steps up to ``last``."""
    if steps is not None:
        return sorted({int(s) for s in steps})
    if last is None or last < macro:
        raise MemtuiError(f"{what}: give the panel's checkpoint steps (--steps).")
    return list(range(0, last + 1, macro))
