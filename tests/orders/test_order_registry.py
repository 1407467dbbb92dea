"""The data-order seam (memtui.orders.base, memtui.orders.registry): the registry alone drives `memtui build`'s
--order choices, its option groups, which options an order takes (the others refused in one line, naming the orders
they belong to) and the dispatch; an order registered here, and nowhere else, builds a panel end to end."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

import numpy as np
import pytest

from memtui.cli.main import build_parser
from memtui.core.errors import MemtuiError
from memtui.orders.base import Instances, Order, OrderBase, SamplingSpec
from memtui.orders.registry import ORDERS
from memtui.orders.revisions import PRESETS
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER


def _build_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return sub.choices["build"]


def _option(parser, dest):
    return next(a for a in parser._actions if a.dest == dest)  # noqa: SLF001


def _value(action) -> list[str]:
    """A value the option's type accepts (the refusal must come from the order, not from argparse)."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    return ["3"] if action.type is int else ["x"]


def test_every_order_is_an_order_and_its_revisions_are_known_presets():
    for name, order in ORDERS.items():
        assert isinstance(order, Order) and order.name == name
        assert set(order.revisions) <= set(PRESETS), (name, order.revisions)
        assert order.shared <= {a.dest for a in _build_parser()._actions}  # noqa: SLF001


def test_the_registry_gives_the_order_choices_and_groups():
    parser = _build_parser()
    assert tuple(_option(parser, "order").choices) == tuple(ORDERS)
    titles = [g.title for g in parser._action_groups]  # noqa: SLF001
    assert all(order.title in titles for order in ORDERS.values())
    text = parser.format_help()
    assert "{memmap,table,neox,olmo,olmo-core,datadecide,amber,pico,nanoset,levanter}" in text
    assert "--order amber (LLM360 Amber" in text


def _owners() -> dict[str, set[str]]:
    from memtui.cli.build import _declare

    owners, _ = _declare(argparse.ArgumentParser(add_help=False))
    return owners


def test_every_option_an_order_does_not_take_is_refused_in_one_line(tmp_path, cli):
    """Each (order, foreign option) pair: exit 2, one line naming the option and the orders it belongs to (or the
    order's own reason), nothing written. Today's pairs and any a new order brings are covered alike."""
    parser, owners, checked = _build_parser(), _owners(), 0
    for name, order in ORDERS.items():
        for dest, names in owners.items():
            if name in names:
                continue
            action = _option(parser, dest)
            code, out, err = cli(
                "build", tmp_path / "p.h5", "--order", name, action.option_strings[-1], *_value(action)
            )
            assert code == 2 and err.count("\n") == 1, (name, dest, err)
            if dest in order.refusals:
                assert order.refusals[dest] in err
            else:
                assert "belongs to --order" in err and f"not {name}." in err, err
                assert all(n in err for n in names), err
            checked += 1
    assert checked > 40 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--order", "neox", "--memmap", "m.bin"], "--memmap belongs to --order memmap, not neox."),
        (
            ["--order", "amber", "--cache", "c"],
            "--cache belongs to --order neox, olmo, olmo-core or datadecide, not amber.",
        ),
        (["--order", "olmo", "--epoch", "2"], "--epoch belongs to --order olmo-core, not olmo."),
        (["--order", "olmo-core", "--global-indices", "g"], "--global-indices belongs to --order olmo, not olmo-core."),
        (
            ["--memmap", "m.bin", "--controls", "validation"],
            "--controls belongs to --order neox, olmo, olmo-core, datadecide, amber, pico, nanoset or levanter",
        ),
        (["--memmap", "m.bin", "--tokens", "t.npz"], "--tokens belongs to --order table or neox, not memmap."),
        (
            ["--tokens", "t.npz", "-k", "3"],
            "-k/--batches belongs to --order memmap, neox, olmo, olmo-core, datadecide, amber, pico, nanoset "
            "or levanter",
        ),
        (["--order", "amber", "--train-steps", "9"], "--train-steps belongs to --order"),
        (
            ["--order", "olmo", "--seq-len", "9"],
            "--seq-len belongs to --order memmap, neox, amber or levanter, not olmo.",
        ),
        ([], "give either --memmap (with --validation) or --tokens, or --order FAMILY."),
    ],
)
def test_foreign_options_name_their_orders(tmp_path, cli, args, expect):
    code, _, err = cli("build", tmp_path / "p.h5", *args)
    assert code == 2 and expect in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


# -- a toy order, registered here only ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toy(OrderBase):
    """Cohorts of ``--toy-rows`` random sequences per checkpoint step, and as many never-trained controls."""

    name = "toy"
    title = "--order toy (a test's order)"
    description = "--toy-rows N: instances per cohort."
    revisions = ("pythia",)
    shared = frozenset({"steps", "seed", "seq_len"})

    rows: int = 0
    seq_len: int = 8

    def add_arguments(self, group) -> None:
        group.add_argument("--toy-rows", type=int, help="instances per cohort")

    def check(self, args: argparse.Namespace) -> Toy:
        if not args.toy_rows or args.toy_rows < 1:
            raise MemtuiError("--order toy needs --toy-rows N >= 1.")
        return replace(self, rows=args.toy_rows, seq_len=args.seq_len or 8)

    def sample(self, spec: SamplingSpec) -> list[Instances]:
        steps = list(spec.steps or [0, 1, 2])
        rng = np.random.default_rng(spec.seed)
        treatment = np.r_[np.repeat(steps[1:], self.rows), np.full(self.rows, NEVER)]
        tokens = rng.integers(0, 100, size=(len(treatment), self.seq_len))
        return [Instances(ids=np.arange(len(treatment)), treatment=treatment, steps=steps, tokens=tokens,
                          lengths=np.full(len(treatment), self.seq_len), attrs={"order": "toy"})]  # fmt: skip


def test_a_new_order_is_one_registry_line(tmp_path, cli, monkeypatch):
    monkeypatch.setitem(ORDERS, "toy", Toy())
    text = _build_parser().format_help()
    assert "--order toy (a test's order)" in text and "--toy-rows" in text and ",toy}" in text
    out = tmp_path / "toy.h5"
    code, text, err = cli("build", out, "--order", "toy", "--toy-rows", 3, "--steps", "0,2,4", "--seed", 5)
    assert code == 0, err
    assert f"built {out}: 9 instances (6 treated, 3 validation), 3 checkpoints 0..4" in text
    panel = read_panel(out)
    tokens, lengths = read_tokens(out)
    assert panel.attrs["order"] == "toy" and panel.steps.tolist() == [0, 2, 4]
    np.testing.assert_array_equal(panel.treatment, np.r_[[2, 2, 2, 4, 4, 4], [NEVER] * 3])
    np.testing.assert_array_equal(tokens, np.random.default_rng(5).integers(0, 100, size=(9, 8)))
    # its options are its own: refused elsewhere, and others' refused for it
    for args, expect in (
        (["--order", "neox", "--toy-rows", 2], "--toy-rows belongs to --order toy, not neox."),
        (["--order", "toy", "--toy-rows", 2, "-m", 4], "-m/--rows belongs to --order memmap, neox, olmo"),
        (["--order", "toy"], "--order toy needs --toy-rows N >= 1."),
        (["--order", "toy", "--toy-rows", 2], "exists"),
    ):
        code, _, err = cli("build", out, *args)
        assert code == 2 and expect in err and err.count("\n") == 1, err
