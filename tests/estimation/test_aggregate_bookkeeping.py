"""The bookkeeping an estimate does once per group (and `estimate --by` once per group of groups), made cheaper
without changing a number: each event time's cells from one sort, the persistent rows' counts by reduceat, the
frames' constant columns in one select, an aggregate's law kept once formed. Each is checked against its plain
definition (what the code did before) on layouts that exercise every branch: uneven cohorts, instances folded into
a cohort, not-yet-treated controls whose set contains the cell's own group, both base periods."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memtui.engine import bands, did
from memtui.estimation.estimate import aggregate_members, estimate_parts, prepared
from memtui.estimation.results import result_frame
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel

SETTINGS = [
    Settings(draws=200),
    Settings(draws=200, band="classic", control_group="not_yet_treated"),
    Settings(draws=200, control_group="not_yet_treated", base_period="universal"),
    Settings(draws=0, family="all"),
]


def _panel(seed=3, t=9) -> Panel:
    """Cohorts of uneven size (some first trained between checkpoints: folded), a few never-treated instances."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) * 100
    starts = rng.choice(np.r_[steps[1:-1], steps[2:-1] - 50], 160)  # on a checkpoint, or between two
    treatment = np.concatenate([starts, np.full(50, NEVER)])
    n = len(treatment)
    on = (treatment[:, None] != NEVER) & (steps[None, :] >= treatment[:, None])
    y = rng.normal(0, 1, (n, 1)) + np.linspace(0, 2, t) + rng.normal(0, 1, (n, t)) + 0.5 * on
    return Panel(ids=np.arange(n), treatment=treatment, steps=steps, done=np.ones(t, bool), metrics={"loglik": y})


@pytest.mark.parametrize("settings", SETTINGS, ids=["calibrated", "classic-nyt", "universal-nyt", "no-draws"])
def test_event_members_and_persistent_counts_are_their_definitions(settings):
    panel = _panel()
    result, c = estimate_parts(panel, settings)
    lay = prepared(panel, settings.validate()).lay
    events, members, every = aggregate_members(lay)
    event = lay.steps[lay.cell_t] - lay.steps[lay.group_index[lay.cell_group]]
    assert np.array_equal(events, np.unique(event))
    for e, m in zip(events, members, strict=True):
        assert np.array_equal(m, np.flatnonzero(event == e))
    assert np.array_equal(every[-1], np.flatnonzero(~lay.cell_pre))
    persistent = result.persistent
    assert persistent["event_time"].to_list() == events.tolist()
    assert persistent["n_treated"].to_list() == [int(c.est.n_treated[m].sum()) for m in members]
    assert persistent["n_control"].to_list() == [int(c.est.n_control[m].max()) for m in members]
    assert persistent["n_folded"].to_list() == [int(c.folded[m].sum()) for m in members]
    assert persistent["small_group"].to_list() == [bool(c.small[m].any()) for m in members]
    assert sum(persistent["n_folded"]) > 0  # the panel does fold instances into cohorts


@pytest.mark.parametrize("settings", SETTINGS[:3], ids=["calibrated", "classic-nyt", "universal-nyt"])
def test_an_aggregate_law_is_formed_once_and_is_the_law_of_its_draws(settings):
    _, c = estimate_parts(_panel(seed=5), settings)
    events, _, _, draws, _, se = c.aggregates
    rows, mask = slice(0, len(events)), events >= 0
    law = c.aggregate_law(rows, mask)
    assert c.aggregate_law(rows, mask.copy()) is law  # kept: the subgroups' joint band asks again
    if c.band.name == "calibrated":
        fresh = bands.aggregate_laws(draws[rows], se[rows], c.drawn.cal.agg_correction[rows], [mask])[0]
    else:
        fresh = did.sup_t(draws[rows], se[rows], mask)
    assert np.array_equal(law, fresh, equal_nan=True)
    assert c.aggregate_law(rows, ~mask) is not law


def test_result_frame_columns_in_order_with_their_types_even_when_empty():
    settings = Settings(draws=1000)
    expected = {
        "metric": pl.String, "estimator": pl.String, "scope": pl.String, "cohort": pl.Int64,
        "checkpoint": pl.Int64, "event_time": pl.Int64, "estimate": pl.Float64, "std_error": pl.Float64,
        "analytic_se": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "band_low": pl.Float64,
        "band_high": pl.Float64, "crit": pl.Float64, "significant": pl.Boolean, "pre_treatment": pl.Boolean,
        "n_treated": pl.Int64, "n_control": pl.Int64, "n_folded": pl.Int64, "small_group": pl.Boolean,
        "alpha": pl.Float64, "draws": pl.Int32, "seed": pl.Int32, "band": pl.String,
    }  # fmt: skip
    for n in (3, 0):
        ints, floats, flags = np.arange(n), np.linspace(0.1, 0.3, n), np.arange(n) % 2 == 0
        frame = result_frame(
            settings, "profile", cohort=ints, checkpoint=ints, event_time=ints, att=floats, sign=-1, se=floats,
            ase=floats, crit=np.full(n, 2.0), n_treated=ints, n_control=ints, pre=flags, n_folded=ints, small=flags,
        )  # fmt: skip
        assert dict(frame.schema) == expected
        assert frame.height == n
        if n:
            assert frame["metric"].to_list() == ["loglik"] * n and frame["scope"].to_list() == ["profile"] * n
            assert frame["draws"].to_list() == [1000] * n and frame["band"].to_list() == ["calibrated"] * n
            assert np.array_equal(frame["estimate"].to_numpy(), -floats)
