"""Estimates cached next to the panel (``PANEL.memtui-cache/``), keyed by the data they came from and the settings,
so re-opening a panel or switching back to a metric is instant. Falls back to ~/.cache/memtui when the panel's folder
is read-only. A cache entry is two files written atomically; the JSON one is written last and marks it complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import polars as pl

from memtui import __version__
from memtui.estimate import SCOPES, EstimateResult, Progress, Settings, estimate
from memtui.files import atomic_write
from memtui.panel import Panel


def cache_key(panel: Panel, settings: Settings) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps({"settings": settings.key(), "version": __version__}, sort_keys=True).encode())
    if settings.metric not in panel.metrics or not panel.done.any():
        panel.values(settings.metric)  # raises the one-line "no metric" / "no values yet" error
    # the whole matrix with the done flags: no masked copy (a tenth of a second at the paper's size)
    for arr in (panel.treatment, panel.steps, panel.done, panel.metrics[settings.metric]):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def cache_dir(panel: Panel) -> Path:
    path = Path(panel.path).resolve()
    local = path.with_name(path.name + ".memtui-cache")
    if os.access(path.parent, os.W_OK):
        return local
    digest = hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "memtui" / digest


def load(panel: Panel, settings: Settings) -> EstimateResult | None:
    if panel.path is None:
        return None
    base = cache_dir(panel) / cache_key(panel, settings)
    try:
        meta = json.loads(base.with_suffix(".json").read_text())
        frames = pl.read_parquet(base.with_suffix(".parquet"))
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    parts = {s: frames.filter(pl.col("scope") == s) for s in SCOPES}
    return EstimateResult(
        settings=settings,
        cells=parts["profile"],
        instantaneous=parts["instantaneous"],
        persistent=parts["persistent"],
        residual=parts["residual"],
        overall=meta["overall"],
        pretrend=meta["pretrend"],
        crit=meta["crit"],
        cohorts=np.array(meta["cohorts"], dtype=np.int64),
        checkpoints=np.array(meta["checkpoints"], dtype=np.int64),
        notes=meta["notes"],
    )


def store(panel: Panel, result: EstimateResult) -> None:
    if panel.path is None:
        return
    folder = cache_dir(panel)
    base = folder / cache_key(panel, result.settings)
    meta = {
        "overall": result.overall,
        "pretrend": result.pretrend,
        "crit": result.crit,
        "cohorts": result.cohorts.tolist(),
        "checkpoints": result.checkpoints.tolist(),
        "notes": result.notes,
        "settings": result.settings.key(),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        frames = pl.concat([result.scope(s) for s in SCOPES], how="vertical_relaxed")
        atomic_write(base.with_suffix(".parquet"), frames.write_parquet)
        atomic_write(base.with_suffix(".json"), lambda p: p.write_text(json.dumps(meta, default=float)))
    except OSError:
        pass  # a cache that cannot be written only costs time


def cached_estimate(panel: Panel, settings: Settings, progress: Progress | None = None) -> EstimateResult:
    """The estimate for these settings, from the cache when the panel's data have not changed since."""
    settings = settings.validate()
    hit = load(panel, settings)
    if hit is not None:
        return hit
    result = estimate(panel, settings, progress)
    store(panel, result)
    return result
