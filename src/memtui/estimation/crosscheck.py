"""The same estimate through the `differences` library (the paper's own pipeline): slow, for cross-checks.

Differences' simultaneous band covers all cells (pre and post) and its event-time aggregation all event times, so
with this engine every summary reuses those bands; the pre-trend test counts significant placebo cells only.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pandas as pd

from memtui.core.errors import MemtuiError
from memtui.engine.layout import build_layout
from memtui.panel.model import NEVER, Panel


def _flat(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame.columns = [col[-1] if col[-1] else col[0] for col in frame.columns]
    return frame.rename(columns={"lower": "band_lower", "upper": "band_upper"})


def long_frame(panel: Panel, metric: str, control_group: str, *, with_layout: bool = False):
    """The panel as differences wants it: (unit, time) MultiIndex, never-treated cohorts as NaN; and the layout's
    notes (or, ``with_layout``, the layout itself)."""
    y = panel.values(metric)
    steps = panel.done_steps
    lay = build_layout(y, panel.treatment, steps, never=NEVER, control_group=control_group)
    cohort_step = np.where(lay.group_index < len(steps), steps[np.minimum(lay.group_index, len(steps) - 1)], np.nan)
    n, t = lay.n_units, len(steps)
    cohort = np.repeat(cohort_step, lay.group_n)  # units treated after the window are controls (NaN) here
    frame = pd.DataFrame(
        {
            "unit": np.repeat(np.arange(n), t),
            "time": np.tile(steps, n),
            "y": lay.y[:, :t].ravel(),
            "cohort": np.repeat(cohort, t),
        }
    ).set_index(["unit", "time"])
    return frame, (lay if with_layout else lay.notes)


def estimate_with_differences(panel: Panel, settings, progress=None):
    from differences import ATTgt

    from memtui.engine.did import point_estimates
    from memtui.engine.memory import check_memory
    from memtui.estimation.results import (
        EstimateResult,
        Pretrend,
        final_index,
        group_notes,
        result_frame,
        z_value,
    )

    if settings.estimator != "did":
        raise MemtuiError("the differences engine implements difference-in-differences only; use --engine memtui.")
    report = progress or (lambda fraction, message: None)
    report(0.0, "differences")
    frame, lay = long_frame(panel, settings.metric, settings.control_group, with_layout=True)
    notes = list(lay.notes) + group_notes(lay, point_estimates(lay))
    if settings.draws:  # differences holds at least what memtui does
        check_memory(settings.draws, lay, settings.band)  # the classic band: engine differences has no other
    cells, event, simple = _fit_differences(ATTgt, frame, settings, report)
    sign = panel.sign(settings.metric)
    z = z_value(settings.alpha)
    cohort, time = cells["cohort"].to_numpy().astype(np.int64), cells["time"].to_numpy().astype(np.int64)
    se = cells["std_error"].to_numpy()
    crit = (cells["band_upper"] - cells["ATT"]).to_numpy() / se if settings.draws else np.full(len(se), z)
    crit = np.full(len(se), np.nanmedian(crit))
    pre = time < cohort
    n_treated, n_never, n_folded, small = _group_sizes(frame, lay, len(panel.done_steps), cohort)

    def frame_of(scope, mask, c=None):
        return result_frame(
            settings,
            scope,
            cohort=cohort[mask],
            checkpoint=time[mask],
            event_time=time[mask] - cohort[mask],
            att=cells["ATT"].to_numpy()[mask],
            sign=sign,
            se=se[mask],
            ase=np.full(mask.sum(), np.nan),
            crit=crit[mask],
            n_treated=n_treated[mask],
            n_control=np.full(mask.sum(), n_never),
            pre=pre[mask],
            n_folded=n_folded[mask],
            small=small[mask],
        )

    profile = frame_of("profile", np.ones(len(se), bool))
    final = panel.done_steps[final_index(panel.done_steps, settings.final_step)]
    persistent = _persistent_frame(settings, event, sign, z, n_never, time - cohort, n_folded, small)
    overall = _overall(simple.iloc[0], sign, z, pre, small)
    pre_sig = int(profile.filter(profile["pre_treatment"])["significant"].sum())
    report(1.0, "done")
    return EstimateResult(
        settings=settings,
        cells=profile,
        instantaneous=frame_of("instantaneous", time == cohort),
        persistent=persistent,
        residual=frame_of("residual", (time == final) & ~pre),
        overall=overall,
        pretrend=Pretrend(n_cells=int(pre.sum()), n_significant=pre_sig, crit=float(crit[0]) if len(crit) else np.nan),
        crit=float(crit[0]) if len(crit) else np.nan,
        cohorts=np.unique(cohort),
        checkpoints=panel.done_steps,
        notes=[*notes, "engine differences: one simultaneous band over all cells"],
    )


def _group_sizes(frame: pd.DataFrame, lay, n_steps: int, cohort: np.ndarray):
    """Per cell: treated instances in its cohort, never-treated controls, instances folded into its cohort, and
    whether either group is small."""
    from memtui.estimation.results import SMALL_GROUP

    n_by_cohort = frame.groupby("cohort", dropna=False).size() // n_steps
    n_never = int(frame["cohort"].isna().sum() // n_steps)
    folded_of = {
        int(lay.steps[k]): int(f) for k, f in zip(lay.group_index, lay.group_folded, strict=True) if k < len(lay.steps)
    }
    n_folded = np.array([folded_of.get(c, 0) for c in cohort], dtype=np.int64)
    n_treated = n_by_cohort.reindex(cohort).to_numpy()
    small = (n_treated < SMALL_GROUP) | (n_never < SMALL_GROUP)
    return n_treated, n_never, n_folded, small


def _fit_differences(ATTgt, frame: pd.DataFrame, settings, report):
    """Differences' cell estimates, event-time and simple aggregations (its bootstrap seeded from ours), quietly."""
    seed = settings.seed + 1  # differences treats random_state=0 as "unseeded"
    boot = {"boot_iterations": settings.draws, "random_state": seed, "alpha": settings.alpha}
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):  # silence its tqdm bars
        warnings.simplefilter("ignore")
        att = ATTgt(data=frame, cohort_column="cohort", base_period=settings.base_period)
        att.fit("y", est_method="reg", control_group=settings.control_group, progress_bar=False, **boot)
        report(0.7, "differences")
        cells = _flat(att.results()).reset_index()
        att.aggregate("event", **boot)
        event = _flat(att.results("event")).reset_index()
        att.aggregate("simple", **boot)
        simple = _flat(att.results("simple"))
    if settings.base_period == "universal":  # drop the reference cells (c = g - 1), zero by construction
        cells = cells[cells["base_period"] != cells["time"]]
    return cells, event, simple


def _persistent_frame(settings, event: pd.DataFrame, sign: int, z: float, n_never: int, cell_e, n_folded, small):
    """The event-time (persistent) summary from differences' event aggregation; ``cell_e`` is each cell's c - g."""
    from memtui.estimation.results import result_frame

    e = event["relative_period"].to_numpy().astype(np.int64)
    e_se = event["std_error"].to_numpy()
    e_crit = ((event["band_upper"] - event["ATT"]).to_numpy() / e_se) if settings.draws else np.full(len(e), z)
    return result_frame(
        settings,
        "persistent",
        cohort=[None] * len(e),
        checkpoint=[None] * len(e),
        event_time=e,
        att=event["ATT"].to_numpy(),
        sign=sign,
        se=e_se,
        ase=np.full(len(e), np.nan),
        crit=e_crit,
        n_treated=np.zeros(len(e), dtype=np.int64),
        n_control=np.full(len(e), n_never),
        pre=e < 0,
        n_folded=[int(n_folded[cell_e == k].sum()) for k in e],
        small=[bool(small[cell_e == k].any()) for k in e],
    )


def _overall(o: pd.Series, sign: int, z: float, pre: np.ndarray, small: np.ndarray):
    """The overall effect from differences' simple aggregation, with a pointwise normal interval."""
    from memtui.estimation.results import Overall

    o_tau = float(sign * o["ATT"])
    return Overall(
        estimate=o_tau,
        std_error=float(o["std_error"]),
        ci_low=o_tau - z * float(o["std_error"]),
        ci_high=o_tau + z * float(o["std_error"]),
        significant=bool(abs(o_tau) > z * float(o["std_error"])),
        n_cells=int((~pre).sum()),
        small_group=bool(small[~pre].any()),
    )
