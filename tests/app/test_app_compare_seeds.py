"""The Compare pane on a seed suite: the pooled estimate across seeds (estimation.seeds) beside the seeds' spread,
each figure the library's; a suite of models shows none, and a refusal is one line in its place."""

from __future__ import annotations

from pathlib import Path

from app_pilot import run_async, settle
from textual.app import App

from memtui.app.compare import ComparePane
from memtui.app.fmt import num
from memtui.estimation.seeds import estimate_pooled
from memtui.estimation.settings import Settings
from memtui.estimation.suite_load import load_suite
from memtui.panel.hdf5 import create_panel
from memtui.panel.synthetic_seeds import SeedSimulation, simulate_seeds

SIM = SeedSimulation(n_seeds=3, n_cohorts=5, per_cohort=15, n_never=40, n_checkpoints=7)
GROUPS = ("compare",)


def write_seeds(folder: Path, mark: bool = True) -> list[Path]:
    paths = []
    for k, p in enumerate(simulate_seeds(SIM)):
        path = folder / f"suite-seed{k}.h5"
        attrs = dict(p.attrs) if mark else {"model": f"model{k}"}
        create_panel(path, ids=p.ids, treatment=p.treatment, steps=p.steps, values=p.metrics, signs=p.signs,
                     attrs=attrs)  # fmt: skip
        paths.append(path)
    return paths


class Host(App):
    computing = None

    def __init__(self, suite) -> None:
        super().__init__()
        self.suite = suite

    def compose(self):
        yield ComparePane(self.suite, id="compare")


async def _text(suite, settings: Settings) -> str:
    app = Host(suite)
    async with app.run_test(size=(140, 60)) as pilot:
        pane = app.query_one(ComparePane)
        pane.show_settings(settings)
        await settle(pilot, GROUPS)
        return str(pane.query_one("#compare-text").render())


@run_async
async def test_a_seed_suite_shows_the_pooled_estimate_and_the_seeds_spread(tmp_path):
    suite = load_suite(write_seeds(tmp_path))
    settings = Settings(draws=200, seed=4)
    text = await _text(suite, settings)
    pooled = estimate_pooled(suite.panels, settings, suite.names)
    assert "Pooled across 3 seeds" in text
    overall = pooled.summaries["overall"]
    line = next(row for row in text.splitlines() if row.strip().startswith("overall:"))
    assert num(overall.estimate, signed=True) in line and num(overall.std_error, 2) in line
    assert f"{num(overall.min, signed=True)} … {num(overall.max, signed=True)}" in line
    assert f"sd {num(overall.sd, 2)}" in line
    agree = next(row for row in text.splitlines() if "Do the seeds agree" in row)
    assert f"overall {'differ' if pooled.agreement['overall'].rejected else 'agree'}" in agree
    assert f"p={pooled.agreement['profile'].p_value:.3f}" in agree


@run_async
async def test_a_suite_of_models_shows_no_pooled_estimate_and_a_refusal_is_one_line(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "seeds").mkdir()
    models = load_suite(write_seeds(tmp_path / "models", mark=False))
    assert "Pooled" not in await _text(models, Settings(draws=100))
    seeds = load_suite(write_seeds(tmp_path / "seeds"))
    text = await _text(seeds, Settings(draws=0))  # the suite is shown without draws; the pooled estimate needs them
    refusal = [row for row in text.splitlines() if row.startswith("Pooled across seeds:")]
    assert len(refusal) == 1 and "bootstrap draws" in refusal[0]
    assert "1 seed0" in text  # the rest of the pane is there
