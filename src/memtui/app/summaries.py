"""Summaries pane: instantaneous, persistent and residual memorisation with their bands, and the overall average
and pre-trend check in words."""

from __future__ import annotations

import math

import numpy as np
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from memtui.app.fmt import num, short_step
from memtui.app.plots import BandPlot
from memtui.estimate import EstimateResult
from memtui.panel import METRIC_LABEL
from memtui.text import clean


def overall_text(result: EstimateResult) -> str:
    o = result.overall
    level = f"{100 * (1 - result.settings.alpha):g}%"
    verdict = "significant" if o.get("significant") else "not significant"
    return (
        f"Overall: average memorisation over the {o.get('n_cells', '?')} post-treatment cells is "
        f"{num(o['estimate'], signed=True)} (SE {num(o['std_error'])}; {level} CI {num(o['ci_low'], signed=True)} "
        f"to {num(o['ci_high'], signed=True)}), {verdict}."
    )


def pretrend_text(result: EstimateResult) -> str:
    p = result.pretrend
    if not p.get("n_cells"):
        return "Pre-trend check: no pre-treatment (c < g) cells in this panel, so parallel trends cannot be checked."
    if p.get("p_value") is None or not math.isfinite(p["p_value"]):
        return "Pre-trend check: needs the bootstrap; set draws > 0 in the settings (o)."
    level = f"{100 * (1 - result.settings.alpha):g}%"
    verdict = (
        "no evidence against parallel trends."
        if p["n_significant"] == 0 and p["p_value"] >= result.settings.alpha
        else "evidence of pre-trends: read the profile with care."
    )
    return (
        f"Pre-trend check: {p['n_significant']} of {p['n_cells']} pre-treatment (placebo) cells differ from zero "
        f"at the simultaneous {level} level (sup-t {num(p['sup_t'], 3)}, p = {num(p['p_value'], 2)}); {verdict}"
    )


class SummariesPane(VerticalScroll, can_focus=True):
    """Three band plots stacked in a scrolling column, the words on top."""

    def compose(self) -> ComposeResult:
        yield Static("", id="summary-text", markup=False)  # metric names and notes are shown as written
        yield BandPlot(id="plot-instantaneous", classes="summary-plot")
        yield BandPlot(id="plot-persistent", classes="summary-plot")
        yield BandPlot(id="plot-residual", classes="summary-plot")

    def show(self, result: EstimateResult | None, message: str = "") -> None:
        text = self.query_one("#summary-text", Static)
        plots = list(self.query(BandPlot))
        if result is None:
            text.update(message or "No estimate yet.")
            for plot in plots:
                plot.display = False
            return
        for plot in plots:
            plot.display = True
        metric = clean(result.settings.metric, 60)
        lines = [
            f"Memorisation τ in {clean(METRIC_LABEL.get(result.settings.metric, metric), 60)} ({metric}, "
            f"{result.settings.estimator}); positive = the model does better on what it trained on.",
            overall_text(result),
            pretrend_text(result),
            *(f"⚠ Note: {clean(note)}" for note in result.notes),
        ]
        if message:
            lines.insert(0, message)
        text.update("\n".join(lines))

        inst = result.instantaneous.sort("cohort")
        self.query_one("#plot-instantaneous", BandPlot).show(
            inst["cohort"].to_numpy(),
            *_series(inst),
            title="Instantaneous memorisation τ(g, g) by cohort g",
        )
        pers = result.persistent.sort("event_time")
        self.query_one("#plot-persistent", BandPlot).show(
            pers["event_time"].to_numpy(),
            *_series(pers),
            title="Persistent memorisation by c − g (left of the line: pre-treatment placebo)",
            marks=(0,),
        )
        res = result.residual.sort("cohort")
        final = final_checkpoint(result)
        self.query_one("#plot-residual", BandPlot).show(
            res["cohort"].to_numpy(),
            *_series(res),
            title=f"Residual memorisation τ(g, {short_step(final)}) by cohort g at the final checkpoint",
        )


def final_checkpoint(result: EstimateResult) -> int:
    """The completed checkpoint residual memorisation is read at: the last one at or before the chosen step."""
    steps = result.checkpoints
    if result.settings.final_step is None:
        return int(steps[-1])
    return int(steps[max(0, int(np.searchsorted(steps, result.settings.final_step, side="right")) - 1)])


def _series(frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(frame[c].cast(float).to_numpy() for c in ("estimate", "band_low", "band_high"))
