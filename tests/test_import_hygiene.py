"""The house by layer, checked at run time (import-linter, in `make lint`, checks the static imports):
the modules that run before the heavy libraries are needed do not import them, and no two modules import each other
in a cycle."""

from __future__ import annotations

import subprocess
import sys

import pytest

LIGHT = {
    # every `memtui` start builds the parser: it loads no numerics, no UI, no GPU stack
    "memtui.cli.main": ("textual", "torch", "h5py", "polars", "scipy", "memtui.estimation.estimate"),
    # the estimation reads a Panel, never a file, and knows nothing of the app or of torch
    "memtui.estimation.estimate": ("textual", "torch", "h5py", "memtui.panel.hdf5"),
    "memtui.estimation.suite": ("textual", "torch", "transformers"),
    "memtui.estimation.correlations": ("textual", "torch", "transformers"),
    # the extraction job API the app polls
    "memtui.extract.jobs": ("textual", "torch", "transformers", "h5py"),
    "memtui.panel.model": ("h5py", "polars", "textual", "torch"),
}


@pytest.mark.parametrize("module", sorted(LIGHT))
def test_a_light_module_does_not_import_the_heavy_ones(module):
    code = f"import sys, {module}; print(','.join(m for m in {LIGHT[module]!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"{module} imports {out}"


def test_no_import_cycles():
    """No module imports, even inside a function, one that imports it back (directly or around a loop)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("memtui")
    cycles = [
        (a, b)
        for a in sorted(graph.modules)
        for b in graph.find_modules_directly_imported_by(a)
        if graph.chain_exists(importer=b, imported=a)
    ]
    assert cycles == []
