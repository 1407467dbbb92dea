"""Issue 33 §5.7 (text cut at 80 columns): the suite's title, the export dialog's path, and notices with paths, at
80 x 24 and 120 x 40 through Textual's pilot. Every test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_pilot import run_async, settle
from rich.cells import cell_len
from textual.widgets._toast import Toast

from memtui.app import open_app
from memtui.app.dialogs import ExportDialog, WriteField
from memtui.app.main import MemtuiApp
from memtui.app.notices import fit_paths, shorten_path
from memtui.app.title import short_names
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SIZES = [(80, 24), (120, 40)]
SIM = dict(n_cohorts=4, per_cohort=10, n_never=40, n_checkpoints=6)


def _suite_files(folder: Path, prefix: str) -> list[Path]:
    return [
        write_synthetic(folder / f"{prefix}{size}.h5", Simulation(**SIM, effect=e, seed=i + 1))
        for i, (size, e) in enumerate(zip(("41k", "132k", "384k", "858k"), (1.0, 2.0, 3.0, 4.0), strict=True))
    ]


# ---- the suite's title -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["suite-neox-", "a-memorisation-study-of-the-pythia-deduplicated-suite-neox-"])
@pytest.mark.parametrize("size", SIZES)
@run_async
async def test_the_suite_title_fits_and_keeps_the_model_and_the_checkpoints(tmp_path, size, prefix):
    """At 80 columns `suite-neox-858k.h5 (4/4) │ … │ 41/41 ckpts` was cut at the right edge (the count went); each
    model's title now fits its bar whole, names the model by what tells it apart and keeps the count."""
    app = open_app(_suite_files(tmp_path, prefix))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for i in range(4):
            if i:
                await pilot.press("n")
                await settle(pilot)
            tail = app.panel.path.stem.rsplit("-", 1)[1]  # the suite's order is by name here (no parameter counts)
            bar = app.query_one("#title")
            drawn = str(bar.render())
            assert cell_len(drawn) <= bar.content_region.width, (size, drawn)
            assert tail in drawn and f"({i + 1}/4)" in drawn and "6/6" in drawn and "loglik" in drawn, drawn


def test_short_names_drop_only_what_every_name_shares():
    assert short_names(["suite-neox-41k.h5", "suite-neox-858k.h5"]) == ["…-41k", "…-858k"]
    assert short_names(["a.h5", "b.h5"]) == ["a.h5", "b.h5"]  # nothing shared: as they are
    assert short_names(["run.h5", "run-2.h5"]) == ["run.h5", "run-2.h5"]  # one is the other's start: as they are


# ---- the export dialog's path ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
@run_async
async def test_the_export_path_shows_its_start(tmp_path, size):
    """A default path wider than its field showed its end (Input's cursor at the end): one cell wider lost the first
    letter, a longer one the panel's name. It shows its start, still selected whole (typing replaces it)."""
    panel = read_panel(write_synthetic(tmp_path / f"Model-{'m' * 90}.h5", Simulation(**SIM)))
    app = MemtuiApp(panel, Settings(draws=50))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        field = app.screen.query_one("#export-path", WriteField)
        assert field.value.startswith("Model-") and field.render_line(0).text.strip().startswith("Model-mmm")
        room = field.content_region.width
        for extra in (1, 2, 40):  # one cell wider than the field (the first letter went), two, far wider
            field.value = "A" + "b" * (room + extra - 1)
            field.blur()
            await pilot.pause()
            field.focus()
            await pilot.pause()
            assert field.render_line(0).text.strip().startswith("Abbb"), (size, extra, field.render_line(0).text)
            assert field.selection == (len(field.value), 0)  # all selected, the cursor at the start
        await pilot.press("z")  # typing replaces the whole path, as before
        assert field.value == "z" and isinstance(app.screen, ExportDialog)


# ---- notices -----------------------------------------------------------------------------------------------------


def _toasts(app) -> list[Toast]:
    return list(app.screen.query(Toast))


@pytest.mark.parametrize("size", SIZES)
@run_async
async def test_a_notice_shortens_a_long_path_from_its_start_and_replaces_the_last_of_its_kind(tmp_path, size):
    """`Wrote … rows to /a/long/path.csv` broke the path mid-word over three lines, and three exports stacked three
    notices over the heatmap. The path is shortened to one line of the toast from its start (`…/`), and a notice of
    the same kind replaces the last one."""
    deep = tmp_path / "a-folder-with-a-long-name" / "another-folder-with-a-long-name" / "results-of-the-study"
    deep.mkdir(parents=True)
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "p.h5", Simulation(**SIM))), Settings(draws=50))
    async with app.run_test(size=size, notifications=True) as pilot:
        await settle(pilot)
        for i in range(3):
            await pilot.press("e")
            await pilot.pause()
            out = deep / f"the-estimates-of-this-panel-{i}.csv"
            app.screen.query_one("#export-path", WriteField).value = str(out)
            await pilot.press("enter")
            await pilot.pause()
            assert out.exists()
        await pilot.pause(0.2)
        toasts = _toasts(app)
        exported = [n for n in app._notifications if n.title == "Exported"]
        assert len(exported) == 1 and len(toasts) == 1, [n.message for n in app._notifications]
        message = exported[0].message
        assert "the-estimates-of-this-panel-2.csv" in message and "…/" in message, message
        room = toasts[0].content_region.width
        assert all(cell_len(word) <= room for word in message.split()), (room, message)  # no word broken


def test_shorten_path_keeps_the_file_and_the_folders_nearest_it():
    assert shorten_path("/home/u/runs/exp1/out.csv", 18) == "…/exp1/out.csv"
    assert shorten_path("/a/b.csv", 40) == "/a/b.csv"
    long = "/x/" + "n" * 60 + ".csv"
    short = shorten_path(long, 30)
    assert cell_len(short) <= 30 and short.startswith("…/nnn") and short.endswith(".csv")
    said = fit_paths(f"Wrote 3 rows to {long}.", 30)
    assert said.startswith("Wrote 3 rows to …/") and said.endswith(".csv.")  # the sentence's stop stays outside
