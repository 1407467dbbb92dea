"""`memtui calibrate` reports every band of the registry (engine.band_registry.BANDS), one row each: a band it can run
is measured on the same null panels as the others; a band that refuses the settings, or a simulated panel, is
reported as not calibrated with its reason, never left out (issue 29). A band that joins the registry joins the
table: here a stand-in band is registered for the test's duration."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.engine.band_calibrated import CALIBRATED
from memtui.engine.band_registry import BANDS
from memtui.estimation import calibration as cb
from memtui.estimation.settings import Settings
from memtui.panel.model import NEVER, Panel


def null_panel() -> Panel:
    rng = np.random.default_rng(0)
    treatment = np.concatenate([np.repeat(np.arange(1, 4), 20), np.full(60, NEVER)])
    y = rng.normal(0, 60, (len(treatment), 1)) + rng.normal(0, 8, (len(treatment), 5))
    return Panel(ids=np.arange(len(treatment)), treatment=treatment, steps=np.arange(5), done=np.ones(5, bool),
                 metrics={"loglik": y}, signs={"loglik": 1})  # fmt: skip


@dataclass
class _Refusing:
    """The calibrated band under another name, refusing never-treated controls (as a band that needs what the
    settings do not give would)."""

    name: str = "refusing"

    def __getattr__(self, attr):
        return getattr(CALIBRATED, attr)

    def refusal(self, settings):
        return "the refusing band needs not-yet-treated controls; use --control-group not_yet_treated."


@dataclass
class _Failing:
    """A band whose bootstrap refuses every layout (what a simulated panel cannot give it)."""

    name: str = "failing"

    def __getattr__(self, attr):
        return getattr(CALIBRATED, attr)

    def refusal(self, settings):
        return None

    def from_draws(self, boot):
        return None

    def bootstrap(self, *args, **kwargs):
        raise MemtuiError("the failing band needs each instance's training batch, which a null panel has not.")


@dataclass
class _Renamed:
    """The calibrated band under another name: a third band calibrate can run."""

    name: str = "renamed"

    def __getattr__(self, attr):
        return getattr(CALIBRATED, attr)


@pytest.fixture
def extra_bands(monkeypatch):
    for band in (_Renamed(), _Refusing(), _Failing()):
        monkeypatch.setitem(BANDS, band.name, band)
    monkeypatch.setattr(cb, "BAND_NAMES", tuple(BANDS))


def test_every_registered_band_is_a_row_measured_or_said_why_not(extra_bands):
    panel = null_panel()
    got = cb.calibrate(panel, Settings(draws=100), panels=6)
    assert got.bands == tuple(BANDS) and got.bands[-3:] == ("renamed", "refusing", "failing")
    assert {"calibrated", "classic"} <= set(got.bands)
    assert set(got.hits) == set(BANDS) - {"refusing", "failing"}
    assert "not-yet-treated" in got.skipped["refusing"] and "training batch" in got.skipped["failing"]
    # the same null panels and the same draws: a renamed band counts exactly what the band it copies counts
    assert got.hits["renamed"] == got.hits["calibrated"] and got.crit["renamed"] == got.crit["calibrated"]
    assert got.verdict("refusing").startswith("refusing band: not calibrated: the refusing band needs")
    assert got.level("failing").startswith("not calibrated (") and not got.over("failing", "post")
    back = cb.from_dict(json.loads(json.dumps(got.as_dict())))
    assert back.skipped == got.skipped and back.hits == got.hits and back.bands == got.bands


def test_a_record_without_a_registered_band_is_a_cache_miss(extra_bands, monkeypatch):
    panel = null_panel()
    record = cb.calibrate(panel, Settings(draws=100), panels=3).as_dict()
    del record["family_wise_error"]["renamed"]  # written before the band joined the registry
    with pytest.raises(ValueError):
        cb.from_dict(record)


def test_the_command_prints_one_row_per_band(extra_bands, cli, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sample = Path(__file__).parents[2] / "sample_panels" / "synthetic.h5"
    code, out, err = cli("calibrate", sample, "--panels", "3", "-B", "100")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    for band in BANDS:
        assert band in rows, out
    assert "not calibrated: the refusing band needs" in rows["refusing"]
    assert "not calibrated: the failing band needs" in rows["failing"]
    assert "±" in rows["renamed"] and "±" in rows["classic"]
    code, out, err = cli("calibrate", sample, "--panels", "3", "-B", "100", "--json")
    d = json.loads(out)
    assert set(d["family_wise_error"]) == set(BANDS) - {"refusing", "failing"}
    assert set(d["not_calibrated"]) == {"refusing", "failing"} and set(d["verdict"]) == set(BANDS)
