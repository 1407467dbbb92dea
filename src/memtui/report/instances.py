"""Ranked instances as rows a person reads: the individual scores (``estimation.instances``) with each instance's
covariates and its text, decoded offline with the panel's tokenizer (``extract.tokenizer``) and made safe to show.

The CLI (``memtui instances``) prints, writes and dumps these rows; the workbench's Instances pane lists them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from memtui.core.text import clean
from memtui.estimation.instances import InstanceScores
from memtui.panel.model import Panel

if TYPE_CHECKING:  # the decoder is handed in: the tokenizer module may import transformers, which report must not
    from memtui.extract.tokenizer import Decoder

DESCRIPTIVE = (
    "p_ctrl is descriptive, not a population estimate: the share of the never-trained instances whose own change "
    "over the same checkpoints, less their mean, is at least the instance's score (a ranking aid; nothing is "
    "corrected for ranking many instances at once)."
)


@dataclass(frozen=True)
class InstanceRow:
    rank: int
    id: int
    row: int  # the instance's row in the panel
    cohort: int
    checkpoint: int
    base: int
    score: float
    control_rank: int
    p_value: float
    covariates: dict[str, object] = field(default_factory=dict)
    tokens: tuple[int, ...] = ()  # the instance's token ids (its row up to its length); empty without tokens
    text: str = ""  # its decoded text, safe to show (``tokenizer.shown``): no control character
    group: str = ""  # its group of a split (``--by``), safe to show; "" without one
    n_controls: int = 0  # the never-trained instances its p_ctrl ranks it among (its group's, with a split)


def shown(text: str, limit: int | None = None) -> str:
    """Decoded text made safe to show: line breaks as ``↵``, tabs as spaces, every other control character (an ESC
    sequence in a training text) as ``?`` (``core.text.clean``)."""
    return clean(text.replace("\r\n", "↵").replace("\n", "↵").replace("\t", " "), limit)


def covariate_value(values: np.ndarray, row: int) -> object:
    """A covariate's value for one instance: a float (None where unknown) or safe text."""
    v = values[row]
    if values.dtype.kind == "f":
        return None if not math.isfinite(float(v)) else float(v)
    return clean(v, 80)


def rows(panel: Panel, scores: InstanceScores, decoder: Decoder | None, tokens=None) -> list[InstanceRow]:
    """One row per scored instance, best first. ``tokens``: (ids, lengths) of ``scores.rows`` (``read_tokens``), or
    None for a panel without token ids."""
    out = []
    for k in range(len(scores)):
        r = int(scores.rows[k])
        ids: tuple[int, ...] = ()
        text = ""
        if tokens is not None:
            ids = tuple(int(t) for t in tokens[0][k][: int(tokens[1][k])])
            text = shown(decoder.text(ids)) if decoder is not None else ""
        out.append(
            InstanceRow(
                rank=k + 1,
                id=int(scores.ids[k]),
                row=r,
                cohort=int(scores.cohort[k]),
                checkpoint=int(scores.checkpoint[k]),
                base=int(scores.base[k]),
                score=float(scores.score[k]),
                control_rank=int(scores.control_rank[k]),
                p_value=float(scores.p_value[k]),
                covariates={clean(n, 60): covariate_value(v, r) for n, v in panel.covariates.items()},
                tokens=ids,
                text=text,
                group=clean(scores.group[k], 80),
                n_controls=int(scores.controls[k]),
            )
        )
    return out


def read_rows(panel: Panel, scores: InstanceScores, decoder: Decoder | None) -> list[InstanceRow]:
    """:func:`rows` with the instances' token ids read from the panel file (where it stores them)."""
    tokens = None
    if panel.has_tokens and panel.path is not None and len(scores):
        from memtui.panel.hdf5 import read_tokens

        order = np.argsort(scores.rows)  # h5py reads rows in increasing order; put them back in rank order after
        ids, lengths = read_tokens(panel.path, scores.rows[order])
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        tokens = (ids[back], lengths[back])
    return rows(panel, scores, decoder, tokens)


def frame(found: list[InstanceRow], scores: InstanceScores) -> pl.DataFrame:
    """The rows as a table (``-o CSV``): one column per field and per covariate; the text decoded and made safe."""
    names = list(found[0].covariates) if found else []
    columns: dict[str, list] = {"group": [r.group for r in found]} if scores.by else {}  # first, as export --by
    columns |= {
        "rank": [r.rank for r in found],
        "id": [r.id for r in found],
        "metric": [scores.metric] * len(found),
        "cohort": [r.cohort for r in found],
        "base_step": [r.base for r in found],
        "checkpoint": [r.checkpoint for r in found],
        "score": [r.score for r in found],
        "control_rank": [r.control_rank for r in found],
        "n_controls": [r.n_controls for r in found],
        "p_ctrl": [r.p_value for r in found],
    }
    for name in names:
        columns[f"cov_{name}"] = [r.covariates[name] for r in found]
    columns["text"] = [r.text for r in found]
    return pl.DataFrame(columns, strict=False)


def as_json(found: list[InstanceRow], scores: InstanceScores, decoder: Decoder | None) -> dict:
    """The rows for ``--json``: with the token ids, the metric's sign and what the p-value is (and is not)."""
    return {
        "metric": scores.metric,
        "sign": scores.sign,
        "n_scored": len(scores),
        "n_controls": scores.n_controls,
        "tokenizer": decoder.description if decoder is not None else "no token ids in the panel",
        "p_ctrl": DESCRIPTIVE,
        "notes": list(scores.notes),
        **(_split_json(scores) if scores.by else {}),
        "instances": [
            {
                **({"group": r.group, "n_controls": r.n_controls} if scores.by else {}),
                "rank": r.rank,
                "id": r.id,
                "cohort": r.cohort,
                "base_step": r.base,
                "checkpoint": r.checkpoint,
                "score": r.score,
                "control_rank": r.control_rank,
                "p_ctrl": r.p_value,
                "covariates": r.covariates,
                "tokens": list(r.tokens),
                "text": r.text,
            }
            for r in found
        ],
    }


def _split_json(scores: InstanceScores) -> dict:
    """What ``--json`` says of a split: its spec and every group scored, with how many instances and controls."""
    return {
        "by": clean(scores.by, 200),
        "shared_controls": scores.shared_controls,
        "groups": [{"group": clean(g, 80), "n_scored": n, "n_controls": c} for g, n, c in scores.groups],
    }
