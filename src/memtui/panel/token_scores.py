"""Per-token scores (``instances/token_scores``): read for the instances the workbench shows.

The layout (docs/panel-format.md, "Per-token scores"), stored by ``memtui extract --token-scores`` for a chosen
subset of instances:

    instances/token_scores/ids        int64 (S,)              the panel ids of the S instances that have scores
    instances/token_scores/<metric>   float16 (S, T, L - 1)   per checkpoint (T, the panel's checkpoints in order)
                                                              and target position j = 1 .. L - 1 (L: the tokens'
                                                              row width): log p(token j | tokens before j); NaN where
                                                              not computed (checkpoint not done, past the row's end)

``logprob`` is the metric read here. A width of L (a value for position 0 too, which has no context) is read as is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.panel import hdf5
from memtui.panel.model import Panel

GROUP = "instances/token_scores"
LOGPROB = "logprob"


def read_token_scores(panel: Panel, ids: Sequence[int], metric: str = LOGPROB) -> dict[int, np.ndarray] | None:
    """Each of ``ids`` that has per-token scores: a (checkpoints, L) float32 array, entry [c, j] the score of token j
    at checkpoint c (column 0, the first token, NaN: nothing predicts it). None where the panel stores none."""
    if panel.path is None:
        return None
    path = Path(panel.path)
    return hdf5._read_live(path, lambda f: _read(f, path, panel, [int(i) for i in ids], metric))  # noqa: SLF001


def has_token_scores(path: str | os.PathLike, metric: str = LOGPROB) -> bool:
    """Whether the panel file stores per-token ``metric`` scores (cheap: no data read)."""
    path = Path(path)
    return bool(hdf5._read_live(path, lambda f: f"{GROUP}/{metric}" in f and f"{GROUP}/ids" in f))  # noqa: SLF001


def _read(f, path: Path, panel: Panel, ids: list[int], metric: str) -> dict[int, np.ndarray] | None:
    if f"{GROUP}/{metric}" not in f or f"{GROUP}/ids" not in f:
        return None
    stored = hdf5._dataset(f, path, f"{GROUP}/ids", "iu")  # noqa: SLF001
    if stored.ndim != 1 or len(np.unique(stored)) != len(stored):
        raise MemtuiError(f"{path}: '{GROUP}/ids' must list each instance once; rebuild the per-token scores.")
    scores = hdf5._dataset_handle(f, path, f"{GROUP}/{metric}", "f")  # noqa: SLF001
    width = _row_width(f, path)
    expected = (len(stored), panel.n_checkpoints)
    if scores.ndim != 3 or scores.shape[:2] != expected or scores.shape[2] not in (width - 1, width):
        raise MemtuiError(
            f"{path}: '{GROUP}/{metric}' has shape {scores.shape}, expected ({len(stored)}, {panel.n_checkpoints}, "
            f"{width - 1}); rebuild the per-token scores."
        )
    where = {int(v): k for k, v in enumerate(stored)}
    out = {}
    for i in ids:
        k = where.get(i)
        if k is None:
            continue
        row = np.asarray(scores[k], dtype=np.float32)
        if row.shape[1] == width - 1:  # targets 1 .. L-1: position 0 has no score
            row = np.concatenate([np.full((row.shape[0], 1), np.nan, np.float32), row], axis=1)
        out[i] = row
    return out


def _row_width(f, path: Path) -> int:
    if "instances/tokens" not in f:
        raise MemtuiError(f"{path}: per-token scores without the token ids (instances/tokens); rebuild the panel.")
    return int(hdf5._dataset_handle(f, path, "instances/tokens", "iu").shape[1])  # noqa: SLF001
