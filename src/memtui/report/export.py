"""CSV export of estimates, shared by `memtui export` and the workbench."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write
from memtui.estimation.estimate import EstimateResult
from memtui.estimation.results import persistent_cells
from memtui.estimation.settings import DEFAULT_BAND

if TYPE_CHECKING:
    from memtui.estimation.subgroups import ByResult

# what is estimated, the estimate and its inference, then the data behind it (docs/estimation.md, "Result columns")
COLUMNS = [
    "metric", "estimator", "scope", "cohort", "checkpoint", "event_time", "estimate", "std_error", "analytic_se",
    "ci_low", "ci_high", "band_low", "band_high", "significant", "pre_treatment", "n_treated", "n_control",
    "n_folded", "small_group", "alpha", "draws", "seed", "band",
]  # fmt: skip


def band_name(settings) -> str:
    """What the ``band`` column says made the significance: the simultaneous band, or ``pointwise`` without bootstrap
    draws (-B 0: each cell's own interval marks it, whatever band the settings name)."""
    return settings.band if settings.draws else "pointwise"


def significance(settings) -> str:
    """The significance of an export in words, for the message that reports it (`memtui export`, the workbench)."""
    if not settings.draws:
        return "pointwise, each estimate's own interval (no bootstrap draws, so no simultaneous band)"
    return f"the {settings.band} simultaneous band"


def export_frame(result: EstimateResult, scope: str = "profile", significant_only: bool = True) -> pl.DataFrame:
    """The scope's rows in the export's columns; ``persistent`` is c > g (``persistent_cells``), as everywhere. The
    ``band`` column names what marked the rows significant (``band_name``)."""
    rows = persistent_cells(result) if scope == "persistent" else result.scope(scope)
    frame = rows.select(COLUMNS).with_columns(pl.lit(band_name(result.settings)).alias("band"))
    return frame.filter(pl.col("significant")) if significant_only else frame


def export_by_frame(by: ByResult, scope: str = "profile", significant_only: bool = True) -> pl.DataFrame:
    """Every group's rows (``export_frame``) under a first column ``group``; profile and persistent rows carry the
    joint band (simultaneous over every group: ``ByResult.joint``), the other scopes each group's own."""
    frames = []
    for name in by.names:
        res = by.groups[name]
        if scope in ("profile", "persistent") and by.settings.draws:
            joint = by.joint(name, scope)
            res = replace(res, cells=joint) if scope == "profile" else replace(res, persistent=joint)
        frames.append(export_frame(res, scope, significant_only).select(pl.lit(name).alias("group"), *COLUMNS))
    return pl.concat(frames)


def default_name(result: EstimateResult, panel_path: Path, scope: str = "profile") -> str:
    """``PANEL-METRIC-ESTIMATOR-SCOPE-aALPHA-dDRAWS.csv`` (``-BAND`` before ``.csv`` under a band other than the
    default): two exports with different settings never share a name. The panel's name and the metric come from a
    file: no control characters or path separators from either."""
    s = result.settings
    stem = "".join(ch if ch.isprintable() and ch not in "/\\" else "_" for ch in f"{Path(panel_path).stem}-{s.metric}")
    band = "" if s.band == DEFAULT_BAND else f"-{s.band}"  # the default band's name is left out
    return f"{stem[:120]}-{s.estimator}-{scope}-a{s.alpha:g}-d{s.draws}{band}.csv"


def export_csv(
    result: EstimateResult | pl.DataFrame, path: str | Path, scope: str = "profile", significant_only: bool = True
) -> int:
    """Write the scope's estimates to ``path`` (beside it, then renamed: a failure leaves an existing file as it was);
    returns the number of rows written. ``result`` may be a frame made already (``export_by_frame``)."""
    frame = export_frame(result, scope, significant_only) if isinstance(result, EstimateResult) else result
    path = Path(path).expanduser()
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder; give a file name such as {path / 'estimates.csv'}.")
    if not path.parent.exists():
        raise MemtuiError(f"cannot write {path}: folder {path.parent} does not exist.")
    try:
        atomic_write(path, frame.write_csv)
    except MemtuiError:
        raise
    except OSError as exc:  # an atomic_write that does not yet turn these into one line
        raise MemtuiError(f"cannot write {path}: {exc.strerror or exc}; an existing file is unchanged.") from None
    return frame.height
