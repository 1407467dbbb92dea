"""The Extraction form and the keys: Tab reaches the form's first field, what is typed into a field stays there (never
an app key), and esc always leaves the form, so the app's keys work again. At 80 x 24 and 120 x 40."""

from __future__ import annotations

import numpy as np
import pytest
from app_pilot import run_async, settle
from textual.widgets import Input, Tabs

from memtui.app.extraction import ExtractionPane
from memtui.app.main import MainScreen, MemtuiApp
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, write_synthetic

SIZES = [(80, 24), (120, 40)]
# every key the main screen binds, as a path would hold them: digits switch panes, q quits, o and , open the
# settings, m/M the metric, d the estimator, e export, n/N the model, r reload, ? the key list
TYPED = "/data/q1234 5,o?mMdenNr"


def _awaiting(tmp_path):
    """A panel with token ids and nothing extracted: the app opens on the Extraction pane, Launch enabled."""
    return create_panel(tmp_path / "empty.h5", ids=range(6), treatment=[1000, 1000, 2000, 2000, NEVER, NEVER],
                        steps=[0, 1000, 2000], tokens=np.zeros((6, 8), dtype=np.int64))  # fmt: skip


def _no_tokens(tmp_path):
    """An extracted panel without token ids: on its Extraction pane Launch is disabled."""
    sim = Simulation(n_cohorts=4, per_cohort=8, n_never=30, n_checkpoints=6, seed=2)
    return write_synthetic(tmp_path / "done.h5", sim)


async def _type(pilot, text: str) -> None:
    for ch in text:
        await pilot.press({"?": "question_mark", ",": "comma", " ": "space", "/": "slash"}.get(ch, ch))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("which", ["awaiting-extraction", "launch-disabled"])
@run_async
async def test_tab_reaches_the_first_field_and_typed_keys_stay_in_it(tmp_path, which, size):
    path = _awaiting(tmp_path) if which == "awaiting-extraction" else _no_tokens(tmp_path)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        if which == "launch-disabled":
            await pilot.press("4")
        pane = app.query_one(ExtractionPane)
        assert app.active_pane == "extraction"
        assert pane.query_one("#ex-launch").disabled == (which == "launch-disabled")
        settings = app.settings

        await pilot.press("tab")
        assert app.focused is pane.query_one("#ex-model", Input), app.focused
        field = app.focused
        field.value = ""
        await _type(pilot, TYPED)
        assert field.value == TYPED  # every character went into the field ...
        # ... and none of them ran an app key: same pane, no dialog, same settings, still running
        assert isinstance(app.screen, MainScreen) and app.active_pane == "extraction"
        assert app.settings == settings and app.return_value is None and app.focused is field

        # a round of Tab stays in the pane's form: never the tab bar, where letters are keys again
        seen = []
        for _ in range(12):
            await pilot.press("tab")
            seen.append(app.focused)
        assert not any(isinstance(w, Tabs) for w in seen), seen
        assert all(w is pane or pane in w.ancestors for w in seen), seen

        # esc leaves the form whether or not Launch can take the focus, and the keys work again
        field.focus()
        await pilot.press("escape")
        assert app.focused is pane
        await pilot.press("2")
        assert app.active_pane == "summaries"
        await pilot.press("4", "q")
        await pilot.pause()
    assert app.return_value == 0


# ---- keys that had nothing to do said nothing ------------------------------------------------------------------


def _notes(app) -> list[str]:
    return [n.message for n in app._notifications]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@run_async
async def test_r_says_what_the_re_read_found_and_5_n_say_why_they_do_nothing(tmp_path, size):
    app = MemtuiApp(read_panel(_no_tokens(tmp_path)))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        shown = app.result
        assert shown is not None and not _notes(app)
        await pilot.press("r")
        await settle(pilot)
        assert any("nothing changed" in n and "6/6 checkpoints" in n for n in _notes(app)), _notes(app)
        assert app.result is shown  # an unchanged file keeps the estimate on screen: nothing is estimated anew

        for key in ("5", "n", "N"):
            before = _notes(app)
            await pilot.press(key)
            await pilot.pause()
            said = _notes(app)
            # one notice says why; it replaces the last notice of its kind rather than stacking over the heatmap
            assert len(said) <= len(before) + 1, (key, before, said)
            assert "suite" in said[-1] and "memtui A.h5 B.h5" in said[-1], (key, said)
            assert app.active_pane == "profile" and app.result is shown
        # the keys that say why are not listed as keys of their own
        from memtui.app.main import key_sections

        everywhere = dict(key_sections(app))["Everywhere"]
        listed = [k for k, _ in everywhere]
        assert len(listed) == len(set(listed)) and "5, n, N" not in listed, listed


@run_async
async def test_r_on_a_changed_file_says_so_and_estimates_anew(tmp_path):
    import h5py

    path = _no_tokens(tmp_path)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=SIZES[0]) as pilot:
        await settle(pilot)
        shown = app.result
        with h5py.File(path, "r+") as f:  # a value changes under the app (another tool rewrote the panel)
            name = next(iter(f["metrics"]))
            f["metrics"][name][0, -1] += 1.0
        await pilot.press("r")
        await settle(pilot)
        assert any("data changed" in n for n in _notes(app)), _notes(app)
        assert app.result is not shown
