"""The metric registry (``memtui.panel.metrics``) is the one list: every view agrees with it, no other module spells
a list of metric names or a sign or label table, the docs' table is the registry's, and one rule picks the default
metric for the CLI and the workbench."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from memtui.app.prefetch import default_settings, metric_order
from memtui.extract import units
from memtui.panel import metrics as registry
from memtui.panel import model
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER, Panel

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "memtui"


def test_every_metric_is_complete():
    assert tuple(registry.REGISTRY) == registry.NAMES and registry.NAMES[0] == "loglik"
    for name, m in registry.REGISTRY.items():
        assert m.name == name and re.fullmatch(r"[a-z][a-z_]*", name)
        assert m.sign in (1, -1), name
        assert m.label.strip() and "\n" not in m.label and "|" not in m.label, name
        assert m.unit.strip() and "|" not in m.unit, name
        assert m.computed_by in registry.COMPUTED_BY, name
    assert {m.computed_by for m in registry.REGISTRY.values()} >= {"logits", "extractability"}


def test_the_derived_lists_are_the_registrys():
    assert tuple(n for n, m in registry.REGISTRY.items() if m.computed_by != "import") == registry.EXTRACTED
    assert set(registry.FROM_LOGITS) | set(registry.EXTRACTABILITY) | set(registry.GOLDFISH) == set(registry.EXTRACTED)
    assert not set(registry.FROM_LOGITS) & set(registry.EXTRACTABILITY)
    assert not (set(registry.FROM_LOGITS) | set(registry.EXTRACTABILITY)) & set(registry.GOLDFISH)
    # a panel without a loss mask gets every extracted metric but the trained-target ones
    assert tuple(m for m in registry.EXTRACTED if m not in registry.GOLDFISH) == registry.STANDARD
    # the views other modules import are the registry's, in its order
    assert model.METRICS == registry.NAMES
    assert {n: m.sign for n, m in registry.REGISTRY.items()} == model.METRIC_SIGN
    assert {n: m.label for n, m in registry.REGISTRY.items()} == model.METRIC_LABEL
    assert model.EXTRACTABLE_METRICS == registry.EXTRACTABILITY
    assert units.METRICS == registry.EXTRACTED
    assert units.panel_metrics(["bleu", *reversed(registry.NAMES)]) == registry.EXTRACTED


def test_a_name_the_registry_does_not_know_is_an_imported_metric():
    m = registry.get("bleu")
    assert (m.name, m.sign, m.label, m.computed_by) == ("bleu", 1, "bleu", "import") and not m.extracted
    assert registry.sign("rank") == -1 and registry.label("loglik") == "sequence log-likelihood"
    assert registry.ordered(["bleu", "rank", "zeta", "loglik"]) == ["loglik", "rank", "bleu", "zeta"]


# --------------------------------------------------------------------------------------- the one list, in the code


def _all_metric_names(elements) -> list[str]:
    """The names, where every element is a string constant naming a registry metric (else [])."""
    names = [e.value for e in elements if isinstance(e, ast.Constant) and e.value in registry.REGISTRY]
    return names if len(names) == len(elements) else []


def literal_metric_lists(tree: ast.AST) -> list[tuple[int, str]]:
    """Tuples, lists and sets of two or more registry names (nothing else: a file's columns such as ``("sup",
    "rank", "entropy")`` are no metric list), and dicts keyed by two or more of them whose values are plain constants
    (a sign or label table); dicts of computed values (``{"loglik": total(logp)}``) or of per-metric parameters (the
    simulation's) compute or describe by name and are left alone."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and len(_all_metric_names(node.elts)) >= 2:
            found.append((node.lineno, ", ".join(_all_metric_names(node.elts))))
        elif isinstance(node, ast.Dict) and None not in node.keys and len(_all_metric_names(node.keys)) >= 2:
            constants = all(isinstance(v, ast.Constant | ast.UnaryOp) for v in node.values)
            found += [(node.lineno, ", ".join(_all_metric_names(node.keys)))] if constants else []
    return found


def test_no_module_but_the_registry_spells_a_list_of_metric_names():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "panel" / "metrics.py":
            continue
        for line, names in literal_metric_lists(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(SRC)}:{line}: {names}")
    assert not offenders, "metric lists outside panel/metrics.py (read the registry instead):\n" + "\n".join(offenders)


def test_the_scan_finds_what_it_looks_for():
    """The scan above can fail: each form it looks for is found, and computing by name is not."""
    code = """
A = ("loglik", "accuracy")
B = ["rank", "entropy", "extractable"]
C = {"extractable", "extractable_len"}
D = {"loglik": 1, "rank": -1}
E = {"loglik": "sequence log-likelihood", "accuracy": "mean token accuracy"}
ok1 = {"loglik": total(x), "accuracy": total(y)}
ok2 = ("loglik", "bleu")
ok3 = ("sup", "rank", "entropy")
"""
    assert [line for line, _ in literal_metric_lists(ast.parse(code))] == [2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------------------ the docs' table


def test_the_docs_table_is_the_registrys():
    doc = (ROOT / "docs" / "panel-format.md").read_text()
    fix = "python -c 'from memtui.panel import metrics; print(metrics.docs_table())'"
    assert registry.docs_table() in doc, f"docs/panel-format.md: paste the registry's table, printed by {fix}"
    rows = re.findall(r"^\| `([a-z_]+)` \| (higher|lower) \|", doc.split("## Metrics", 1)[1], flags=re.M)
    assert [name for name, _ in rows] == list(registry.NAMES)
    assert all((better == "higher") == (registry.sign(name) > 0) for name, better in rows)


# --------------------------------------------------------------------------------------- the default metric rule


def _panel(values: dict[str, np.ndarray | None], done=(True, True, True)) -> Panel:
    n, t = 4, len(done)
    filled = np.arange(n * t, dtype=float).reshape(n, t)
    metrics = {name: (np.full((n, t), np.nan) if y is None else filled) for name, y in values.items()}
    return Panel(ids=np.arange(n), treatment=np.array([1, 1, NEVER, NEVER]), steps=np.arange(t),
                 done=np.array(done), metrics=metrics)  # fmt: skip


@pytest.mark.parametrize(
    ("values", "done", "expected"),
    [
        ({"accuracy": 1, "loglik": 1, "bleu": 1}, (1, 1, 1), "loglik"),  # loglik where it has values
        ({"bleu": 1, "loglik": None, "rank": 1}, (1, 1, 1), "rank"),  # else the first in the registry's order
        ({"zeta": 1, "loglik": None, "bleu": 1}, (1, 1, 1), "zeta"),  # ... then the panel's own order
        ({"bleu": None, "accuracy": None}, (1, 1, 1), "accuracy"),  # none has values: the first in that order
        ({"bleu": 1, "loglik": 1}, (0, 0, 0), "loglik"),  # nothing done yet: as if nothing had values
    ],
)
def test_one_rule_for_the_default_metric(values, done, expected):
    panel = _panel({k: (None if v is None else 1) for k, v in values.items()}, done=tuple(map(bool, done)))
    assert panel.default_metric == expected
    assert registry.default_metric(panel.metrics, panel._has_values) == expected
    # the workbench opens on the metric the CLI estimates, and cycles in the registry's order
    assert default_settings(panel).metric == expected
    assert metric_order(panel) == registry.ordered(panel.metrics)


def test_the_workbench_and_the_cli_agree_on_a_panel_whose_loglik_is_empty(tmp_path, cli):
    """Before the one rule, the workbench opened on an empty loglik that `memtui estimate` skipped."""
    rng = np.random.default_rng(1)
    path = create_panel(tmp_path / "p.h5", ids=range(30), treatment=np.repeat([1, 2, NEVER], 10), steps=range(4),
                        metrics=["loglik", "accuracy"], values={"accuracy": rng.normal(size=(30, 4))})  # fmt: skip
    panel = read_panel(path)
    assert panel.default_metric == default_settings(panel).metric == "accuracy"
    code, out, _ = cli("estimate", path, "-B", "0")
    assert code == 0 and out.startswith(f"{path}: accuracy (mean token accuracy)")
