"""An instance's text with each token coloured by the log-probability it gained across its treatment.

The gain of token j is log p(token j) at the checkpoint after the instance's treatment (its cohort's) less the one
before it, from the panel's per-token scores (``panel.token_scores``, docs/panel-format.md). Colours come from the
heatmap's diverging 256-colour ramps (``palette``: warm for a gain, cool for a loss, lighter with |gain| on a dark
theme), so they look the same in truecolor and over SSH in 256 colours. Every piece of text is made safe first
(``report.instances.shown``): a token that decodes to an ESC sequence shows as ``?``.
"""

from __future__ import annotations

import numpy as np
from rich.style import Style
from rich.text import Text

from memtui.app import palette
from memtui.report.instances import shown


def by_token(targets: np.ndarray) -> np.ndarray:
    """``read_token_scores``' (checkpoints, length - 1) targets (column j: the row's token j + 1) as (checkpoints,
    length), one column per token: the first token has no context, so no score (NaN)."""
    first = np.full((targets.shape[0], 1), np.nan, dtype=np.float32)
    return np.concatenate([first, targets.astype(np.float32)], axis=1)


def gains(scores: np.ndarray, after: int, before: int, length: int) -> np.ndarray:
    """Per token (the row's first ``length``), the log-probability gained from checkpoint column ``before`` to
    ``after`` of ``scores`` ((checkpoints, L): ``by_token``); NaN where either is unknown."""
    with np.errstate(invalid="ignore"):
        out = scores[after, :length].astype(np.float64) - scores[before, :length].astype(np.float64)
    return out


def scale_of(values: np.ndarray) -> float:
    """The colour scale's half-range in nats: a high quantile of |gain| (one outlier cannot wash out the rest)."""
    return palette.robust_scale(values, quantile=0.95)


def coloured(pieces: list[str], gain: np.ndarray | None, scheme: palette.Scheme, scale: float) -> Text:
    """The pieces joined, each on its gain's colour (none where it has no gain, or without per-token scores)."""
    text = Text()
    for k, piece in enumerate(pieces):
        safe = shown(piece)
        if gain is None or k >= len(gain) or not np.isfinite(gain[k]) or not safe:
            text.append(safe)
            continue
        colour = scheme.ramp[int(palette.levels(np.array([gain[k]]), scale)[0])]
        text.append(safe, Style(bgcolor=palette.cube(colour), color=palette.readable_on(colour)))
    return text


def legend(scheme: palette.Scheme, scale: float, before: int, after: int) -> Text:
    """One line: the ramp from a loss of ``scale`` nats to a gain of ``scale``, and what it shows."""
    text = Text(f"log p gained, step {before} → {after}: ")
    text.append(f"−{scale:.2g} ")
    for colour in scheme.ramp:
        text.append("  ", Style(bgcolor=palette.cube(colour)))
    text.append(f" +{scale:.2g} nats; uncoloured: no score")
    return text
