"""The suite findings report quotes the true profiles' (noise-corrected) correlation beside the raw r, and
docs/findings.md is what the current code renders from the shipped panels (benchmarks/findings_report.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from memtui.demo.findings import _corrected
from memtui.estimation.correlations import Correlations

ROOT = Path(__file__).resolve().parents[2]


def _corr(value: float, low: float, high: float, clipped: bool = False) -> Correlations:
    eye = np.eye(2)
    full = lambda v: np.where(eye == 1, 1.0, v)  # noqa: E731
    return Correlations(
        names=["a", "b"], metric="loglik", scope="post", pearson=full(0.5), spearman=full(0.5),
        pearson_low=full(0.4), pearson_high=full(0.6), spearman_low=full(0.4), spearman_high=full(0.6), n_cells=10,
        pearson_corrected=full(value), pearson_corrected_low=full(low), pearson_corrected_high=full(high),
        pearson_clipped=np.array([[False, clipped], [clipped, False]]),
    )  # fmt: skip


def test_a_determined_correlation_is_quoted_with_its_interval():
    assert _corrected(_corr(0.8, 0.6, 0.9), "a", "b") == ["0.80", "[0.60, 0.90]"]
    assert _corrected(_corr(1.0, 0.9, 1.0, clipped=True), "a", "b") == ["1.00 (clipped)", "[0.90, 1.00]"]


def test_a_value_without_an_interval_reads_not_determined():
    assert _corrected(_corr(0.95, np.nan, np.nan), "a", "b") == ["not determined (0.95)", "none"]
    assert _corrected(_corr(1.0, np.nan, np.nan, clipped=True), "a", "b") == ["not determined (1.00, clipped)", "none"]
    assert _corrected(_corr(np.nan, np.nan, np.nan), "a", "b") == ["n/a", "n/a"]


def test_docs_findings_is_the_current_render_of_the_shipped_suite(tmp_path):
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.findings_report import main
    finally:
        sys.path.remove(str(ROOT))
    out = tmp_path / "report.md"
    assert main(["--out", str(out), "--figures", str(tmp_path / "fig")]) == 0
    rendered = out.read_text(encoding="utf-8").splitlines()
    doc = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8").splitlines()
    made = [i for i, line in enumerate(doc) if line.startswith("Made by `memtui demo --suite`")]
    assert made == [4]
    end = doc.index("## Under the calibrated band: what changed")
    assert doc[:4] + doc[6 : end - 1] == rendered, "docs/findings.md is stale: rerun benchmarks/findings_report.py"
    assert "true profiles (corrected)" in "\n".join(rendered)
    assert "still quotes the raw r" not in (ROOT / "docs" / "estimation.md").read_text(encoding="utf-8")
