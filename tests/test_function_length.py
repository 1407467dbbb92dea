"""No function in src/memtui longer than MAX_LINES without a reason written down here (the house rule: small
functions with one job, docs/architecture.md).

A function's length is its ``def`` line (decorators excluded) through its last line, docstring and signature
included, as ``ast`` reports them. A new long function fails this test: split it into named steps, or add it to
ALLOWED with the reason it is better whole.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "memtui"
MAX_LINES = 60

# "path/relative/to/src/memtui.py:Qualified.name": why it stays whole (a real sentence, checked below).
ALLOWED: dict[str, str] = {
    "engine/bands.py:studentized_bootstrap": (
        "The calibrated band's hot path: the studentise callback works in place on bootstrap_shared's temporaries and "
        "shares per-layout constants and result buffers with the function that builds them."
    ),
    "orders/neox.py:NeoxOrder.exposure": (
        "A single vectorised pass from documents to their training steps whose intermediate arrays (occurrences, "
        "owning samples, token ranges) each feed the next line; named pieces would only pass a dozen arrays around."
    ),
    "panel/hdf5.py:create_panel": (
        "The public writer's signature has eighteen keyword options and a docstring that documents them; the body is "
        "already a short sequence of named validation steps and group writers."
    ),
    "orders/olmo.py:olmo_core_stage": (
        "A linear reader of an OLMo-core config: each field is checked with its own one-line error in the order the "
        "file nests them, then one Stage is returned."
    ),
    "orders/olmo.py:olmo_stage": (
        "A linear reader of an OLMo 1/2 training config: each field is checked with its own error, then one Stage is "
        "returned."
    ),
    "orders/hubble.py:hubble_instances": (
        "A check of every insertion record against the order's maps followed by their grouping by example tokens; "
        "both loops share the records' positions and samples and it is barely over the limit."
    ),
    "estimation/correlations.py:correlations": (
        "Barely over the limit: argument checks, the cells every model shares, and the point and interval estimates, "
        "with the interval kernels already in their own functions."
    ),
    "cli/compare.py:_suite_lines": (
        "A linear text writer of the compare command's suite table, one block of lines per section in output order."
    ),
    "estimation/crosscheck.py:estimate_with_differences": (
        "Ten of its lines are lazy imports (results imports this module); the rest is the per-cell columns that one "
        "small closure turns into the profile, instantaneous and residual frames."
    ),
}


def _functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def function_lengths(src: Path = SRC) -> dict[str, int]:
    """Every function and method under ``src`` as "path:qualified.name" -> its length in lines."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        for name, node in _functions(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            out[f"{rel}:{name}"] = node.end_lineno - node.lineno + 1
    return out


def test_no_long_function_without_a_reason():
    long = {name: n for name, n in function_lengths().items() if n > MAX_LINES and name not in ALLOWED}
    assert not long, (
        f"functions over {MAX_LINES} lines: {long}; split them into named steps or add each to ALLOWED in "
        "tests/test_function_length.py with the reason it is better whole"
    )


def test_allow_list_is_current():
    """An entry whose function was split, renamed or removed goes, so the list never hides a new long function."""
    lengths = function_lengths()
    stale = {name: lengths.get(name) for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES}
    assert not stale, f"ALLOWED entries no longer over {MAX_LINES} lines (or gone): {stale}; remove them"


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_each_reason_is_a_sentence(name):
    reason = ALLOWED[name]
    assert len(reason.split()) >= 8 and reason[0].isupper() and reason.rstrip().endswith("."), (
        f"the reason for {name} must be a real sentence saying why it is better whole: {reason!r}"
    )


def test_the_walk_finds_nested_and_method_lengths(tmp_path):
    """The checker itself: methods and nested functions are named by their qualified names and measured whole."""
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg" / "m.py").write_text(
        f"class A:\n    def short(self):\n        return 1\n\n\ndef outer():\n    def inner():\n        pass\n{body}\n"
    )
    lengths = function_lengths(tmp_path)
    assert lengths["pkg/m.py:A.short"] == 2
    assert lengths["pkg/m.py:outer.inner"] == 2
    assert lengths["pkg/m.py:outer"] == MAX_LINES + 3
