"""Summaries pane: instantaneous, persistent and residual memorisation with their bands; their means, the overall
average, the pre-trend check and the panel's minimum detectable effect in words; and the three estimators side by
side. The last two are computed by a thread of the pane's own (the power maths imports scipy, the comparison runs
the other two estimators), so the pane paints at once and fills them in."""

from __future__ import annotations

import math

import numpy as np
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from memtui.app.by_view import by_lines, size_label
from memtui.app.fmt import minus_signs, num, nums, short_step
from memtui.app.legend import legend
from memtui.app.plots import BandPlot, Series, plot_colours
from memtui.app.restyle import RestyleSelfOnFocus
from memtui.app.summary_lines import calibration_line, estimators_lines, mde_line, means_lines
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.compare import Comparison
from memtui.estimation.estimate import EstimateResult
from memtui.estimation.subgroups import ByResult
from memtui.panel.model import METRIC_LABEL


def overall_text(result: EstimateResult) -> str:
    o = result.overall
    level = f"{100 * (1 - result.settings.alpha):g}%"
    verdict = "significant" if o.significant else "not significant"
    estimate, low, high = nums((o.estimate, o.ci_low, o.ci_high), signed=True)  # one precision for the three
    return (
        f"Overall: average memorisation over the {o.n_cells} post-treatment cells is {estimate} "
        f"(SE {num(o.std_error)}; {level} CI {low} to {high}), {verdict}."
    )


def pretrend_text(result: EstimateResult) -> str:
    p = result.pretrend
    if not p.n_cells:
        return "Pre-trend check: no pre-treatment (c < g) cells in this panel, so parallel trends cannot be checked."
    if not result.settings.draws:
        return "Pre-trend check: needs the bootstrap; set draws > 0 in the settings (o)."
    if not math.isfinite(p.p_value):
        return (
            f"Pre-trend check: none of the {p.n_cells} pre-treatment (placebo) cells has sampling variation (the "
            "metric changes alike for every instance there), so there is nothing to test."
        )
    level = f"{100 * (1 - result.settings.alpha):g}%"
    verdict = (
        "no evidence against parallel trends."
        if p.n_significant == 0 and p.p_value >= result.settings.alpha
        else "evidence of pre-trends: read the profile with care."
    )
    return (
        f"Pre-trend check: {p.n_significant} of {p.n_cells} pre-treatment (placebo) cells "
        f"{'differs' if p.n_significant == 1 else 'differ'} from zero "
        f"at the simultaneous {level} level (sup-t {num(p.sup_t, 3)}, p = {num(p.p_value, 2)}); {verdict}"
    )


class _Cancelled(Exception):
    pass


class SummariesPane(RestyleSelfOnFocus, VerticalScroll, can_focus=True):
    """Three band plots stacked in a scrolling column, the words on top."""

    class Extras(Message):
        """The minimum detectable effect and the estimators' comparison for the estimate ``result``."""

        def __init__(self, result: EstimateResult, mde: float, comparison: Comparison | None, error: str) -> None:
            super().__init__()
            self.result, self.mde, self.comparison, self.error = result, mde, comparison, error
            self.calibration = None  # a cached `memtui calibrate` of these settings, read in the worker

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._result: EstimateResult | None = None
        self._extras: dict[int, SummariesPane.Extras] = {}  # by id of the result they belong to
        self.split: ByResult | None = None  # the groups' estimates while the views are split by group
        self._plots_due = 0  # which show() the plots scheduled after the first paint belong to

    def compose(self) -> ComposeResult:
        yield Static("", id="summary-text", markup=False)  # metric names and notes are shown as written
        yield Static("", id="summary-extras", markup=False)
        yield Static("", id="summary-by-legend", markup=False)  # the groups' colours in the plots, when split
        yield BandPlot(id="plot-instantaneous", classes="summary-plot")
        yield BandPlot(id="plot-persistent", classes="summary-plot")
        yield BandPlot(id="plot-residual", classes="summary-plot")

    def show(self, result: EstimateResult | None, message: str = "") -> None:
        text = self.query_one("#summary-text", Static)
        plots = list(self.query(BandPlot))
        self._result = result
        self._plots_due += 1  # what an earlier show() scheduled is out of date
        if result is None:
            text.update(message or "No estimate yet.")
            self.query_one("#summary-extras", Static).update("")
            for plot in plots:
                plot.display = False
            return
        for plot in plots:
            plot.display = True
        metric = clean(result.settings.metric, 60)
        final = final_checkpoint(result)
        lines = [
            f"Memorisation τ in {clean(METRIC_LABEL.get(result.settings.metric, metric), 60)} ({metric}, "
            f"{result.settings.estimator}); positive = the model does better on what it trained on.",
            *means_lines(result, final),
            overall_text(result),
            pretrend_text(result),
            calibration_line(result),
            *(f"⚠ Note: {clean(note)}" for note in result.notes),
            *covariates_lines(getattr(self.app, "panel", None)),
        ]
        if self.split is not None:  # the groups right after what the whole panel's estimate is
            lines[1:1] = [*by_lines(self.split, final), "", "The whole panel (every instance):"]
        lines = [minus_signs(line) for line in lines]  # group names, sentences and ranges from below: one minus
        if message:
            lines.insert(0, message)
        text.update("\n".join(lines))
        if id(result) in self._extras:
            self._show_extras(self._extras[id(result)])
        else:
            self.query_one("#summary-extras", Static).update(
                "Minimum detectable effect and the estimators side by side: computing…"
            )
            self._compute_extras(getattr(self.app, "panel", None), result)

        self._show_legend()
        # the words paint first, the plots right after that frame: building three plotext plots is ~4/5 of what
        # `2` did before its first paint (§5.11). Blank until then, never the previous estimate's lines
        for plot in plots:
            plot.hold()
        self._plots_due += 1
        self.call_after_refresh(self._show_plots, self._plots_due, result, final)

    def _show_plots(self, due: int, result: EstimateResult, final: int) -> None:
        if due != self._plots_due or result is not self._result:  # a newer show() came first: its call draws
            return
        if self.split is not None:
            self._show_group_plots(self.split, final)
            return
        # which line is which: the plots cannot carry a legend without covering the data. Each title in wordings
        # from the fullest down: the plot draws the widest that fits its width
        band = f"{1 - result.settings.alpha:.0%} band"
        key, short = f" · coloured: estimate, grey: {band}", f" · grey: {band}"
        inst = result.instantaneous.sort("cohort")
        self.query_one("#plot-instantaneous", BandPlot).show(
            inst["cohort"].to_numpy(),
            *_series(inst),
            title=_titles("Instantaneous memorisation τ(g, g) by cohort g", "Instantaneous τ(g, g) by cohort g",
                          "Instantaneous τ(g, g)", key, short),
        )  # fmt: skip
        pers = result.persistent.sort("event_time")
        self.query_one("#plot-persistent", BandPlot).show(
            pers["event_time"].to_numpy(),
            *_series(pers),
            title=_titles("Persistent memorisation by c − g (left of the line: placebo)",
                          "Persistent by c − g (left: placebo)", "Persistent by c − g", key, short),
            marks=(0,),
        )  # fmt: skip
        res = result.residual.sort("cohort")
        at = short_step(final)
        self.query_one("#plot-residual", BandPlot).show(
            res["cohort"].to_numpy(),
            *_series(res),
            title=_titles(f"Residual memorisation τ(g, {at}) by cohort g", f"Residual τ(g, {at}) by cohort g",
                          f"Residual τ(g, {at})", key, short),
        )  # fmt: skip

    def on_resize(self) -> None:
        self._show_legend()

    def _show_legend(self) -> None:
        """With a split, each group's colour and size on a line above the plots (never drawn over the data)."""
        line = self.query_one("#summary-by-legend", Static)
        line.display = self.split is not None and self._result is not None
        if line.display:
            colours = plot_colours(self.app.theme_variables, self.app.current_theme.dark).models
            width = self.scrollable_content_region.width - 2
            names = [size_label(self.split, name) for name in self.split.names]
            line.update(legend(names, colours, width if width > 10 else 10_000))

    def _show_group_plots(self, by: ByResult, final: int) -> None:
        """The three plots with one line per group (its own band, dotted, in its colour)."""

        def series(scope: str, x: str) -> list[Series]:
            out = []
            for i, name in enumerate(by.names):
                frame = getattr(by.groups[name], scope).sort(x)
                out.append(Series(frame[x].to_numpy(), *_series(frame), colour=i))
            return out

        at = short_step(final)
        plots = (
            ("instantaneous", "cohort", ("Instantaneous memorisation τ(g, g) by cohort g, per group",
                                         "Instantaneous τ(g, g) by cohort g", "Instantaneous τ(g, g)"), ()),
            ("persistent", "event_time", ("Persistent memorisation by c − g, per group (left of the line: placebo)",
                                          "Persistent by c − g, per group", "Persistent by c − g"), (0,)),
            ("residual", "cohort", (f"Residual memorisation τ(g, {at}) by cohort g, per group",
                                    f"Residual τ(g, {at}) by cohort g", f"Residual τ(g, {at})"), ()),
        )  # fmt: skip
        for scope, x, titles, marks in plots:
            self.query_one(f"#plot-{scope}", BandPlot).show_series(
                series(scope, x), title=titles, marks=marks, band_marker="dot"
            )

    # described: Textual otherwise describes a worker by its arguments' reprs, the result's arrays printed on the key
    @work(thread=True, exclusive=True, group="summary-extras", exit_on_error=False, description="summary extras")
    def _compute_extras(self, panel, result: EstimateResult) -> None:
        from memtui.estimation import cache
        from memtui.estimation.compare import compare
        from memtui.estimation.plan import minimum_detectable_effect

        worker = get_current_worker()

        def progress(fraction: float, stage: str) -> None:
            if worker.is_cancelled:  # a newer estimate is shown: stop between bootstrap chunks
                raise _Cancelled

        mde, comparison, error = float("nan"), None, ""
        try:
            mde = minimum_detectable_effect(panel, result.settings, result=result)
            if panel is not None:
                comparison = compare(panel, result.settings, progress, estimate_fn=cache.cached_estimate)
        except _Cancelled:
            return
        except MemtuiError as exc:
            error = str(exc)
        extras = self.Extras(result, mde, comparison, error)
        if panel is not None:  # hashing the metric's matrix: in this thread, never on a key
            from contextlib import suppress

            from memtui.estimation.calibration import load_cached

            with suppress(MemtuiError):  # a metric the panel lost since: no calibration line, nothing more
                extras.calibration = load_cached(panel, result.settings)
        self.post_message(extras)

    @on(Extras)
    def _extras_ready(self, event: Extras) -> None:
        self._extras = {id(event.result): event}  # only the latest: results are large
        if event.result is self._result:
            self._show_extras(event)

    def _show_extras(self, extras: Extras) -> None:
        lines = [mde_line(extras.mde, extras.result)]
        if extras.calibration is not None:
            lines.append(calibration_line(extras.result, extras.calibration))
        if extras.comparison is not None:
            lines += ["", *estimators_lines(extras.comparison)]
        if extras.error:
            lines.append(f"Estimators side by side: {clean(extras.error)}")
        self.query_one("#summary-extras", Static).update("\n".join(lines))


def covariates_lines(panel) -> list[str]:
    """The panel's covariates (name, kind, missing, range or levels), as `memtui info` lists them."""
    if panel is None or not panel.covariates:
        return []
    from memtui.panel.covariates import covariate_lines

    rows = covariate_lines(panel.covariates)
    return ["Covariates (b or the settings split the views by one):", *(f"  {line}" for line in rows)]


def final_checkpoint(result: EstimateResult) -> int:
    """The completed checkpoint residual memorisation is read at: the last one at or before the chosen step."""
    steps = result.checkpoints
    if result.settings.final_step is None:
        return int(steps[-1])
    return int(steps[max(0, int(np.searchsorted(steps, result.settings.final_step, side="right")) - 1)])


def _titles(full: str, medium: str, short: str, key: str, short_key: str) -> tuple[str, ...]:
    """A plot's title from the fullest wording to the shortest: with the key to its lines, then without."""
    return (full + key, medium + key, medium + short_key, medium, short + short_key, short)


def _series(frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(frame[c].cast(float).to_numpy() for c in ("estimate", "band_low", "band_high"))
