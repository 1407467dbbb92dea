"""`memtui demo --suite`: the pipeline (training a family of sizes, one shared panel, extraction, the findings report
with SVG figures), not the findings themselves."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from memtui.demo.family import SuiteConfig, make_suite
from memtui.demo.train import DemoConfig, lr_at
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.report.svgplot import Series, grid, line_plot, nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


def neox_parameters(hidden: int, layers: int, vocab: int = 256) -> int:
    """GPT-NeoX with untied embeddings and a 4x MLP, counted by hand: embeddings in and out, final layer norm, and per
    layer two layer norms, fused qkv, the attention output, and the MLP (weights and biases)."""
    h = hidden
    per_layer = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h)
    return 2 * vocab * h + 2 * h + layers * per_layer


def test_pythia_schedule_shape():
    cfg = DemoConfig(steps=200, warmup=10, lr=1e-3, schedule="cosine", min_lr_ratio=0.1)
    lrs = np.array([lr_at(cfg, s) for s in range(1, 201)])
    assert np.allclose(lrs[:10], 1e-3 * np.arange(1, 11) / 10)  # linear warm-up to the peak
    assert lrs.max() == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4)  # cosine down to 10% of the peak
    assert (np.diff(lrs[9:]) < 0).all()
    halfway = 10 + 95  # half of the decay: the cosine's midpoint, (peak + floor) / 2
    assert lr_at(cfg, halfway) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))))
    constant = DemoConfig(warmup=16, lr=3e-3)  # the single demo: unchanged
    assert [lr_at(constant, s) for s in (1, 8, 16, 17, 320)] == pytest.approx([3e-3 / 16, 3e-3 / 2, 3e-3, 3e-3, 3e-3])


def test_suite_sizes_span_ten_times_and_names_follow_the_count():
    for cfg in (SuiteConfig(), SuiteConfig.small()):
        models = cfg.models()
        assert len(models) >= 3
        counts = [n for _, _, n in models]
        assert counts == sorted(counts) and counts[-1] >= 10 * counts[0]
        for name, c, n in models:
            assert n == neox_parameters(c.hidden, c.layers)
            assert name == f"neox-{n // 1000}k"
            assert c.schedule == "cosine" and c.min_lr_ratio == 0.1


def test_svg_figures_are_well_formed():
    x = np.arange(10.0)
    y = np.where(x == 4, np.nan, x**2)  # a missing point breaks the line (and the band): two runs per series
    svg = line_plot([Series("a & b", x, y, y - 1, y + 1), Series("c", x, -y, dashed=True)], title="t <1>")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert len(root.findall(f"{SVG}polyline")) == 4 and len(root.findall(f"{SVG}polygon")) == 2
    assert "a &amp; b" in svg
    m = np.array([[1.0, 0.5, np.nan], [0.5, 1.0, -0.2], [np.nan, -0.2, 1.0]])
    root = ET.fromstring(grid(m, ["x", "y", "z"], notes=[["n"] * 3] * 3))
    assert len(root.findall(f"{SVG}rect")) == 1 + 9
    ticks = nice_ticks(0.013, 0.87)
    assert ticks[0] <= 0.013 and ticks[-1] >= 0.87 and 4 <= len(ticks) <= 8


def test_small_suite_end_to_end(tmp_path, monkeypatch, cli):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    out = tmp_path / "suite"
    lines: list[str] = []
    cfg = SuiteConfig.small()
    report = make_suite(out, cfg, log=lines.append)
    models = cfg.models()
    names = [n for n, _, _ in models]

    panels = [read_panel(out / f"{n}.h5") for n in names]
    first = panels[0]
    tokens0, _ = read_tokens(first.path)
    for (name, _, count), panel in zip(models, panels, strict=True):
        # the same instances and checkpoints in every panel, each extracted at every checkpoint
        assert np.array_equal(panel.ids, first.ids) and np.array_equal(panel.treatment, first.treatment)
        assert np.array_equal(read_tokens(panel.path)[0], tokens0)
        assert panel.steps.tolist() == list(range(0, cfg.base.steps + 1, cfg.base.every))
        assert panel.done.all() and np.isfinite(panel.metrics["loglik"]).all()
        assert panel.attrs["model"] == name and panel.n_parameters == count
    assert panels[-1].n_parameters >= 10 * panels[0].n_parameters
    # different models, different scores (not one panel copied three times)
    assert not np.allclose(panels[0].metrics["loglik"][:, -1], panels[-1].metrics["loglik"][:, -1])
    assert not list(scratch.glob("memtui-demo-*")) and not list(out.glob("*.work"))

    text = report.read_text()
    for key in ("i", "ii", "iii"):
        verdict = re.search(rf"^- \*\*\({key}\) [^*]+: (held|partly|did not hold)\.\*\* (.+)$", text, re.M)
        assert verdict, f"claim ({key}) has no verdict line"
        assert re.search(r"[-+]?\d+\.\d+", verdict.group(2)), f"claim ({key}) states no number"
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"instantaneous.svg", "lr.svg", "persistent.svg", "correlations.svg"} <= set(figures)
    for name in figures:
        assert ET.parse(out / name).getroot().tag == f"{SVG}svg"
    assert any("(iii) Profiles correlate across sizes" in line for line in lines)

    code, _, err = cli("demo", "--suite", out, "--small")  # refused before anything starts
    assert code == 2 and "already holds" in err
