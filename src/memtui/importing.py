"""Build a panel from a long-format table (CSV or parquet): one row per (unit, time) with metric columns.

Works for language-model statistics computed elsewhere (e.g. Pythia ``seq_idx, step, <metrics>``, with the treatment
step derived from ``seq_idx``) and for ordinary economics panels (unit, year, first-treated year, outcome).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from memtui.errors import MemtuiError
from memtui.panel import METRIC_SIGN, NEVER, create_panel


@dataclass(frozen=True)
class ImportSpec:
    unit: str = "seq_idx"
    time: str = "step"
    treatment: str | None = None  # column with the treatment step; None with from_seq_idx
    metrics: tuple[str, ...] = ()  # default: every other numeric column
    never_values: tuple[float, ...] = ()  # treatment values meaning "never treated" (null and negative always do)
    from_seq_idx: bool = False  # derive the treatment step from the unit (a Pythia training-order index)
    batch_size: int = 1024
    macro_steps: int = 1000
    lower_is_better: tuple[str, ...] = ()


def pythia_treatment_step(seq_idx: np.ndarray, batch_size: int = 1024, macro_steps: int = 1000) -> np.ndarray:
    """First checkpoint that has trained on the sequence at ``seq_idx`` of the training order.

    Row r is in batch r // batch_size; checkpoints are saved every ``macro_steps`` steps, so the first checkpoint that
    has seen it is the end of its macro-batch: (r // (batch_size * macro_steps) + 1) * macro_steps. Negative or missing
    indices (validation data) are never treated.
    """
    seq = np.asarray(seq_idx, dtype=float)
    out = np.full(seq.shape, NEVER, dtype=np.int64)
    ok = np.isfinite(seq) & (seq >= 0)
    out[ok] = (seq[ok].astype(np.int64) // (batch_size * macro_steps) + 1) * macro_steps
    return out


def read_table(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    if not path.exists():
        raise MemtuiError(f"{path}: no such file.")
    try:
        if path.suffix in (".parquet", ".pq"):
            return pl.read_parquet(path)
        return pl.read_csv(path, infer_schema_length=10000)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MemtuiError(f"{path}: cannot read the table ({first}); expected CSV or parquet.") from None


def import_table(table: pl.DataFrame, out: str | Path, spec: ImportSpec, *, overwrite: bool = False, attrs=None):
    for col in [spec.unit, spec.time] + ([spec.treatment] if spec.treatment else []):
        if col not in table.columns:
            raise MemtuiError(f"the table has no column '{col}' (columns: {', '.join(table.columns)}); see --help.")
    if spec.treatment is None and not spec.from_seq_idx:
        raise MemtuiError("say where treatment steps come from: --treatment COLUMN or --from-seq-idx.")
    skip = {spec.unit, spec.time, spec.treatment}
    metrics = list(spec.metrics) or [c for c in table.columns if c not in skip and table[c].dtype.is_numeric()]
    missing = [m for m in metrics if m not in table.columns]
    if missing:
        raise MemtuiError(f"no metric column {', '.join(missing)} in the table.")
    if not metrics:
        raise MemtuiError("the table has no numeric metric column; name them with --metrics.")
    if table.select(pl.struct(spec.unit, spec.time).is_duplicated().any()).item():
        raise MemtuiError(f"some ({spec.unit}, {spec.time}) pairs appear more than once; one row per unit and time.")

    try:
        times = table[spec.time].cast(pl.Int64, strict=True)
    except pl.exceptions.PolarsError:
        raise MemtuiError(f"column '{spec.time}' must hold integer checkpoint steps or periods.") from None
    steps = np.unique(times.to_numpy())
    units, unit_codes = np.unique(table[spec.unit].to_numpy(), return_inverse=True)
    try:
        ids = units.astype(np.int64)
    except (TypeError, ValueError):
        ids = np.arange(len(units))  # non-numeric unit names: ids are their sorted order

    if spec.from_seq_idx:
        treatment = pythia_treatment_step(ids, spec.batch_size, spec.macro_steps)
    else:
        g = table[spec.treatment].cast(pl.Float64, strict=False).to_numpy()
        per_unit = np.full(len(units), np.nan)
        per_unit[unit_codes] = g
        same = (g == per_unit[unit_codes]) | (np.isnan(g) & np.isnan(per_unit[unit_codes]))
        if not same.all():
            raise MemtuiError(
                f"treatment column '{spec.treatment}' changes over time for some units; it must be fixed."
            )
        never = ~np.isfinite(per_unit) | (per_unit < 0) | np.isin(per_unit, spec.never_values)
        treatment = np.where(never, NEVER, np.nan_to_num(per_unit)).astype(np.int64)

    col = np.searchsorted(steps, times.to_numpy())
    values = {}
    for m in metrics:
        arr = np.full((len(units), len(steps)), np.nan)
        arr[unit_codes, col] = table[m].cast(pl.Float64, strict=False).to_numpy()
        values[m] = arr
    signs = {m: (-1 if m in spec.lower_is_better else METRIC_SIGN.get(m, 1)) for m in metrics}
    return create_panel(
        out,
        ids=ids,
        treatment=treatment,
        steps=steps,
        values=values,
        source_index=ids if spec.from_seq_idx else None,
        signs=signs,
        attrs=attrs,
        overwrite=overwrite,
    )
