"""The words of the Summaries pane, as plain functions of an estimate (testable without an app).

The means mirror what `memtui estimate` prints, so the pane and the command line never disagree; the estimators
block puts the causal estimate beside the two naive ones (``memtui.estimation.compare.compare``)."""

from __future__ import annotations

import math
import re
import textwrap

import numpy as np
import polars as pl

from memtui.app.fmt import num, nums, short_step
from memtui.estimation.compare import Comparison
from memtui.estimation.estimate import EstimateResult
from memtui.estimation.results import persistent_cells

ESTIMATOR_LABEL = {
    "did": "did (causal, difference-in-differences)",
    "difference": "difference (trained − never-trained at c)",
    "extractable": "extractable (level at c, counterfactual 0)",
}
_LABEL_WIDTH = max(map(len, ESTIMATOR_LABEL.values())) + 2


def _mean(frame: pl.DataFrame) -> float:
    values = frame["estimate"].cast(pl.Float64).to_numpy() if frame.height else np.array([])
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")


def post_persistent(result: EstimateResult) -> pl.DataFrame:
    """Persistent memorisation after the step it was trained at (c > g): what is kept, not learnt."""
    return persistent_cells(result)


def scope_means(result: EstimateResult) -> dict[str, float]:
    return {
        "instantaneous": _mean(result.instantaneous),
        "persistent": _mean(post_persistent(result)),
        "residual": _mean(result.residual),
    }


def _significant(frame: pl.DataFrame) -> int:
    return int(frame["significant"].fill_null(False).sum()) if frame.height else 0


def means_lines(result: EstimateResult, final_step: int) -> list[str]:
    """Instantaneous, persistent and residual memorisation in one line each, as `memtui estimate` prints them."""
    inst, res, pers = result.instantaneous, result.residual, post_persistent(result)
    lines = []
    if inst.height:
        lines.append(
            f"Instantaneous (c = g): mean {num(_mean(inst), signed=True)} over {inst.height} cohorts, "
            f"{_significant(inst)} significant."
        )
    if pers.height:
        first, last = pers.row(0, named=True), pers.row(pers.height - 1, named=True)
        lines.append(
            f"Persistent (c > g): mean {num(_mean(pers), signed=True)} over {pers.height} event times; "
            f"{num(first['estimate'], signed=True)} at c − g = {short_step(first['event_time'])}, "
            f"{num(last['estimate'], signed=True)} at {short_step(last['event_time'])}; "
            f"{_significant(pers)} significant."
        )
    if res.height:
        lines.append(
            f"Residual (at {short_step(final_step)}): mean {num(_mean(res), signed=True)} over {res.height} cohorts, "
            f"{_significant(res)} significant."
        )
    return lines


def mde_line(mde: float, result: EstimateResult, power: float = 0.8) -> str:
    """The panel's minimum detectable instantaneous effect under its own band (``memtui plan`` explains it)."""
    if not math.isfinite(mde):
        return "Minimum detectable effect: needs standard errors for the instantaneous cells."
    inst = _mean(result.instantaneous)
    ratio = ""
    if mde > 0 and math.isfinite(inst):  # signed: a negative mean is not "0.1x that" of a positive effect
        ratio = f" (the mean instantaneous estimate, {num(inst, signed=True)}, is {num(inst / mde, 2)}× that)"
    return (
        f"Minimum detectable effect: {num(mde)} per cohort at c = g with {power:.0%} power under this band{ratio}; "
        "`memtui plan` sizes a study."
    )


def estimators_lines(comparison: Comparison) -> list[str]:
    """The three estimators' means side by side, and the ease term: how much of the naive estimate is not memory."""
    names = [n for n in ("did", "difference", "extractable") if n in comparison.results]
    header = f"{'Estimators side by side (means)':<{_LABEL_WIDTH + 2}}{'instant.':>10}{'persist.':>10}{'residual':>10}"
    lines = [header]
    for name in names:
        m = scope_means(comparison.results[name])
        # one number of decimals along the row (an estimator's three means are of one magnitude; the rows are not)
        row = nums([m[k] for k in ("instantaneous", "persistent", "residual")], 4, signed=True)
        lines.append(f"  {ESTIMATOR_LABEL[name]:<{_LABEL_WIDTH}}" + "".join(f"{v:>10}" for v in row))
    ease = comparison.cells.filter(~pl.col("pre_treatment") & pl.col("ease_estimate").is_not_null())
    if ease.height:
        values = ease["ease_estimate"].cast(pl.Float64).to_numpy()
        sig = int(ease["ease_significant"].fill_null(False).sum())
        lines.append(
            f"  ease = extractable − did: mean {num(float(np.nanmean(values)), 3, signed=True)} over {ease.height} "
            f"cells, {sig} significant — the part of the naive estimate that is the strings being easy, not memory."
        )
    return lines


def calibration_line(result: EstimateResult, measured=None) -> str:
    """Whether the estimate's band holds its level at this design: ``measured`` (a cached `memtui calibrate` of these
    settings, ``estimation.calibration.Calibration``) where there is one, else the nearest design of the calibration
    study (``estimation.evidence``), computed from the result alone (instant: no simulation, no file)."""
    from memtui.engine.band_registry import BANDS, DEFAULT_BAND
    from memtui.estimation.evidence import MISCALIBRATED_BELOW, nearest

    band = getattr(result, "band", "") or getattr(result.settings, "band", DEFAULT_BAND)
    other = next(b for b in BANDS if b != band)  # the band this one is compared with (the registry has two)
    if not result.settings.draws:
        return "Calibration: pointwise bands (no bootstrap): no simultaneous band to calibrate."
    if measured is not None:
        p, se = measured.rate(band, "post")
        q, _ = measured.rate(other, "post")
        verdict = measured.level(band)  # "no verdict (...)" from too few null panels
        return (
            f"Calibration (`memtui calibrate`, {measured.panels} null panels of this design): the {band} band "
            f"{verdict}, {num(100 * p, 2)} ± {num(100 * se, 2)} % family-wise error (post; nominal "
            f"{100 * result.settings.alpha:g} %); {other} band {num(100 * q, 2)} %."
        )
    sizes = result.instantaneous["n_treated"].cast(pl.Float64).to_numpy() if result.instantaneous.height else []
    if not len(sizes):
        return "Calibration: no cohort with an instantaneous cell; `memtui calibrate PANEL` measures this design."
    post_cells = int((~result.cells["pre_treatment"]).sum())
    smallest = int(np.min(sizes))
    m = nearest(float(np.median(sizes)), post_cells)
    if not hasattr(m, band):  # a band the calibration study did not simulate (the permutation band: exact by design)
        return f"Calibration: the {band} band is not in the calibration study; {BANDS[band].summary}."
    p, q = m.rate(band)[0], m.rate(other)[0]
    known = (
        f"cohorts of {smallest} instances: the {band} band is known to over-reject with cohorts under "
        f"{MISCALIBRATED_BELOW[band]}"
        if smallest < MISCALIBRATED_BELOW[band]
        else f"no known excess for the {band} band at cohorts of {smallest}+"
    )
    return (
        f"Calibration: {known} (nearest simulated design {m.label}: {band} {100 * p:.0f} %, {other} {100 * q:.0f} % "
        f"family-wise error, nominal 5 %); `memtui calibrate PANEL` measures this panel's own design."
    )


NOTES_POINTER = " · all notes: Summaries (2)"
# detail a note can lose and still say what is wrong: the list of cohorts, then parentheses ("(column small_group)")
_SHORTER = (re.compile(r",? step \(n\): [^;]*"), re.compile(r" \([^()]*\)"))


def note_lines(notes: list[str], width: int, rows: int) -> list[str]:
    """The first of an estimate's notes as at most ``rows`` lines of ``width`` cells, broken between words, always
    ending in where they all are (the Summaries pane): the whole note where it fits, else without its details (the
    cohorts listed, parenthesised asides), else cut at a word with an ellipsis — never cut mid-word by the edge."""
    if not notes:
        return []
    more = f" (+{len(notes) - 1} more)" if len(notes) > 1 else ""
    width, rows = max(width, 20), max(rows, 1)
    note = notes[0]
    shorter = [note]
    for pattern in _SHORTER:
        shorter.append(pattern.sub("", shorter[-1]))

    def wrapped(text: str) -> list[str]:
        return textwrap.wrap(f"⚠ {text}{more}{NOTES_POINTER}", width, subsequent_indent="  ", break_on_hyphens=False)

    for text in shorter:
        if len(lines := wrapped(text)) <= rows:
            return lines
    words = shorter[-1].split()
    while words:  # fewest words cut: drop them from the end until the rest and the pointer fit
        words.pop()
        if len(lines := wrapped(" ".join(words).rstrip(",;:") + "…")) <= rows:
            return lines
    return textwrap.wrap(f"⚠{more}{NOTES_POINTER}", width)[:rows]
