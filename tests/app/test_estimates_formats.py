"""The Estimates table's column formats from one polars pass (``column_formats``) are the per-column ones
(``_spec``, ``_width``), on an estimate's rows and on the frames that trip a column statistic (NaN, inf, nulls, an
empty frame, text, booleans)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memtui.app.estimates import _spec, _width, column_formats, table_frame
from memtui.estimation.estimate import SCOPES, estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic
from memtui.report.export import export_frame


def _per_column(frame: pl.DataFrame):
    specs = [_spec(frame, c) for c in frame.columns]
    return specs, [_width(frame, c, s) for c, s in zip(frame.columns, specs, strict=True)]


EDGES = [
    pl.DataFrame(
        {
            "x": [1.5, np.nan, -3e5, np.inf],
            "n": [1, 2, 3, None],
            "t": ["x", "yyyy", None, "z"],
            "b": [True, False, None, True],
            "nan": [np.nan] * 4,
            "null": pl.Series([None] * 4, dtype=pl.Float64),
            "big": [1e-9, 2e12, -np.inf, 0.0],
        }
    ),  # fmt: skip
    pl.DataFrame({"x": pl.Series([], dtype=pl.Float64), "t": pl.Series([], dtype=pl.String)}),
    pl.DataFrame(),
]


@pytest.mark.parametrize("frame", EDGES, ids=["mixed", "empty-columns", "no-columns"])
def test_column_formats_equal_the_per_column_ones(frame):
    assert column_formats(frame) == _per_column(frame)


def test_column_formats_of_an_estimates_rows(tmp_path):
    panel = read_panel(write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=5, per_cohort=10, n_never=40,
                                                                      n_checkpoints=7, seed=3)))  # fmt: skip
    result = estimate(panel, Settings(metric="loglik", draws=50))
    for scope in SCOPES:
        frame = table_frame(export_frame(result, scope, False))
        assert frame.width > 5 and any(frame.schema[c].is_float() for c in frame.columns)
        assert column_formats(frame) == _per_column(frame), scope


def test_a_line_drawn_from_the_columns_on_screen_is_the_whole_line_cropped(tmp_path):
    """``_split`` draws only the scrolling columns on screen: the same cells as every column drawn and cropped, at
    each horizontal scroll and width."""
    from rich.style import Style
    from textual.strip import Strip

    from memtui.app.estimates import EstimatesTable

    panel = read_panel(write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=4, per_cohort=8, n_never=30,
                                                                      n_checkpoints=6, seed=2)))  # fmt: skip
    frame = table_frame(export_frame(estimate(panel, Settings(metric="loglik", draws=20)), "profile", False))
    table = EstimatesTable()
    table._source = frame
    table._specs, table._widths = column_formats(frame)
    table._columns = list(frame.columns)
    table._right = [frame.schema[c].is_numeric() for c in frame.columns]
    table._fixed = 2
    table._fixed_width = sum(w + 2 for w in table._widths[:2])
    table._offsets = []
    for i in range(len(table._widths)):
        table._offsets.append(0 if i in (0, 2) else table._offsets[-1] + table._widths[i - 1] + 2)
    texts = [f"v{i}" * 3 for i in range(len(table._columns))]
    styles = [Style(color="red" if i % 2 else "blue") for i in range(len(texts) + 1)]
    total = table._offsets[-1] + table._widths[-1] + 2
    for width in (table._fixed_width + 1, 40, 80, 200):
        for sx in range(0, total + 3):
            n = len(table._columns)
            rest = table._line(texts, styles, range(2, n)).crop(sx, sx + max(0, width - table._fixed_width))
            whole = Strip.join([table._line(texts, styles, range(2)), rest])
            line = table._split(texts, styles, sx, width)
            assert line.text == whole.text and list(line) == list(whole), (width, sx)
