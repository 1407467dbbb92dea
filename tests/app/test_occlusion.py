"""Frames drawn without the widgets hidden behind others (app/occlusion.py): on every pane and dialog, at two sizes and
in both themes, the occluding compositor puts together the frame Textual's compositor does, whole and in part, while
rendering fewer widgets."""

from __future__ import annotations

import pytest
from app_pilot import run_async, settle
from textual._compositor import Compositor
from textual.geometry import Region
from textual.strip import Strip

from memtui.app import open_app
from memtui.app.occlusion import OccludingCompositor
from memtui.panel.synthetic import Simulation, write_synthetic

SIM = dict(n_cohorts=6, per_cohort=12, n_never=60, n_checkpoints=8)


@pytest.fixture
def suite_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return [
        str(write_synthetic(tmp_path / f"model-{name}.h5", Simulation(**SIM, effect=effect, seed=seed)))
        for name, effect, seed in (("a", 0.5, 1), ("b", 2.0, 2))
    ]


def _frames(screen, crop: Region, lines) -> tuple[list[Strip], list[Strip], int]:
    """The frame (or the part of it in ``crop`` and ``lines``) as Textual's compositor and the occluding one put it
    together from the same layout, and how many widgets the occluding one left unrendered."""
    compositor = screen._compositor
    assert isinstance(compositor, OccludingCompositor)
    drawn = lambda y: y in lines  # noqa: E731
    textual = Compositor._render_chops(compositor, crop, drawn)
    skipped = compositor.skipped
    ours = compositor._render_chops(crop, drawn)
    join = lambda chops: [Strip.join(chop[cut] for cut in chop if chop[cut] is not None) for chop in chops]  # noqa: E731
    return join(textual), join(ours), compositor.skipped - skipped


def _same_frames(app, what: str) -> int:
    screen = app.screen
    width, height = app.size
    whole, whole_ours, skipped = _frames(screen, Region(0, 0, width, height), range(height))
    assert whole_ours == whole, what
    part = Region(width // 4, height // 3, width // 2, height // 4)  # a dirty region, as a partial update draws
    part_drawn, part_ours, _ = _frames(screen, part, range(part.y, part.bottom))
    assert part_ours == part_drawn, what
    assert any(strip.cell_length for strip in whole), what  # something was drawn
    return skipped


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@run_async
async def test_every_pane_and_dialog_is_the_frame_textual_draws(suite_paths, size):
    app = open_app(suite_paths)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await settle(pilot)
            for pane in "12345":
                await pilot.press(pane)
                await settle(pilot)
                skipped = _same_frames(app, f"{theme} pane {pane}")
                assert skipped >= 4, pane  # the screen, the tabbed content, its switcher, the pane: all covered
            await pilot.press("1")
            for key in ("o", "e", "question_mark", "ctrl+o", "ctrl+p"):
                await pilot.press(key)
                await settle(pilot)
                assert app.screen is not app.screen_stack[0], key
                _same_frames(app, f"{theme} {key}")
                await pilot.press("escape")
                await settle(pilot)


@run_async
async def test_a_widget_uncovered_later_is_drawn_with_what_changed_while_covered(suite_paths):
    """A container left unrendered keeps its lines marked to render: shown once its cover goes, it draws itself
    as it is then (here: restyled while covered)."""
    app = open_app(suite_paths)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        main = app.query_one("#profile-main")
        main.styles.background = "red"  # covered by the heatmap and the path plot: nothing of it shows
        await settle(pilot)
        before = app.screen._compositor.skipped
        _same_frames(app, "covered")
        assert app.screen._compositor.skipped > before
        for child in main.children:
            child.display = False  # uncovered
        await settle(pilot)
        _same_frames(app, "uncovered")
        lines = [strip for strip in app.screen._compositor.render_strips()]
        y = main.region.y
        assert any(
            segment.style is not None and segment.style.bgcolor is not None and segment.style.bgcolor.name == "#ff0000"
            for segment in lines[y]
        )
