"""KeyBar (app/keybar.py) draws the line Textual's Footer(compact=True) draws, from the same bindings, as one widget.

The proof of the look is cell for cell against Textual's own Footer in the same app (both themes, cut at a narrow
width, a key hovered, a disabled key, a group, the palette key docked right); the app's SVG snapshots are the proof
on the workbench's own screens. The rest: the keys follow the focus, clicks press keys (not gaps, not disabled ones),
text from bindings is text, the cut at 80 columns."""

from __future__ import annotations

import io

import pytest
from app_pilot import run_async, settle
from rich.console import Console
from rich.segment import Segment
from textual import events
from textual.app import App
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Footer, Static

from memtui.app.keybar import KeyBar
from memtui.app.main import MemtuiApp
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

MOVE = Binding.Group("Move")
NAV = Binding.Group("Nav", compact=True)


class Pane(Widget, can_focus=True):
    DEFAULT_CSS = "Pane { height: 1; }"


class Left(Pane):
    BINDINGS = [Binding("l", "left_thing", "Left only", tooltip="the [b]left[/b] pane's key")]


class Right(Pane):
    BINDINGS = [Binding("r", "right_thing", "Right only")]


class Dialog(ModalScreen):
    BINDINGS = [Binding("escape", "dismiss", "Close")]

    def compose(self):
        yield Static("dialog")
        yield KeyBar()


class Keys(App):
    """Bindings of every kind the Footer draws: a description with markup in it, a disabled key, two groups (one
    compact), a key bound twice to one action, the command palette's key (shown in the flow and docked right)."""

    AUTO_FOCUS = None  # the app's keys alone until a test focuses a pane

    BINDINGS = [
        Binding("a", "alpha", "Alpha [b]x[/b]", tooltip="tip [i]a[/i]"),
        Binding("b", "beta", "Beta"),
        Binding("c", "off", "Off"),
        Binding("left", "go_left", "Left", group=MOVE),
        Binding("right", "go_right", "Right", group=MOVE),
        Binding("up", "go_up", "Up", group=NAV),
        Binding("down", "go_down", "Down", group=NAV),
        # its tooltip makes its key in the flow equal to the docked one: hovering one must not light the other
        Binding("ctrl+p", "command_palette", "palette", tooltip="palette"),
        Binding("z,y", "zed", "Zed long description"),
        Binding("h", "hidden", "Hidden", show=False),
    ]

    def __init__(self, bar, **kwargs) -> None:
        super().__init__(**kwargs)
        self.bar = bar
        self.ran: list[str] = []

    def compose(self):
        with Vertical():
            yield Left()
            yield Right()
        yield self.bar()

    def check_action(self, action, parameters):
        return None if action == "off" else True  # None: shown, disabled (dimmed)

    def action_alpha(self) -> None:
        self.ran.append("alpha")

    def action_off(self) -> None:
        self.ran.append("off")

    def action_zed(self) -> None:
        self.ran.append("zed")

    def action_left_thing(self) -> None:
        self.ran.append("left")


def cells(app, y: int) -> list[tuple]:
    """Row ``y`` of the screen as the snapshots record it, one entry per cell: its character and what its style
    draws (not the style's meta, the offsets Textual gives text for selecting, which nothing draws)."""
    console = Console(
        width=app.size.width,
        height=app.size.height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    segments = list(Segment.filter_control(console._record_buffer))
    line = list(Segment.split_and_crop_lines(segments, length=app.size.width))[y]
    out = []
    for text, style, _ in line:
        fields = (style.color, style.bgcolor, style._attributes, style._set_attributes, style._link)
        out.extend((char, fields) for char in text)
    return out


def bar_text(app) -> str:
    return "".join(char for char, _ in cells(app, app.size.height - 1))


async def drawn(bar, size, theme, hover=None) -> tuple[list[tuple], str]:
    app = Keys(bar)
    async with app.run_test(size=size) as pilot:
        app.theme = theme
        await pilot.pause()
        await pilot.pause()
        if hover is not None:
            await pilot.hover(offset=(hover, size[1] - 1))
            await pilot.pause()
            await pilot.pause()
        return cells(app, size[1] - 1), app.export_screenshot(simplify=True)


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("width", [120, 60, 40])
@pytest.mark.parametrize("hover", [None, 1, -3])
@run_async
async def test_the_bar_draws_the_compact_footers_line_cell_for_cell(theme, width, hover):
    """Both themes; every key whole (120), the flow running under the docked palette key (60: its margin cell shows
    the flow beneath, as the Footer's did), cut mid-key (40); no key hovered, the first, the docked palette key."""
    at = None if hover is None else hover % width
    footer, footer_svg = await drawn(lambda: Footer(compact=True), (width, 6), theme, at)
    bar, bar_svg = await drawn(KeyBar, (width, 6), theme, at)
    assert [c for c, _ in bar] == [c for c, _ in footer]
    assert bar == footer
    if width != 60:  # at 60 Rich's stale hash on the Footer's styles splits one run of text in two in the SVG
        assert bar_svg == footer_svg


@run_async
async def test_text_from_bindings_is_text_never_markup():
    app = Keys(KeyBar)
    async with app.run_test(size=(120, 6)) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert "a Alpha [b]x[/b] b Beta" in bar_text(app)
        bar = app.query_one(KeyBar)
        await pilot.hover(KeyBar, offset=(1, 0))
        await pilot.pause()
        assert bar.tooltip is not None and bar.tooltip.plain == "tip [i]a[/i]"  # the tooltip as written
        await pilot.hover(KeyBar, offset=(119, 0))  # past the last key: no key, no tooltip
        await pilot.pause()
        assert bar.tooltip is None


@run_async
async def test_a_disabled_binding_is_dimmed_and_its_click_runs_nothing():
    app = Keys(KeyBar)
    async with app.run_test(size=(120, 6)) as pilot:
        await pilot.pause()
        await pilot.pause()
        bar = app.query_one(KeyBar)
        [off] = [k for k in bar.keys if k.action == "off"]
        assert not off.enabled and all(k.enabled for k in bar.keys if k is not off)
        # drawn dim (Textual's dim filter then blends its colour towards the background)
        drawn = bar.render_line(0)
        text = drawn.text
        start = text.index("c Off")
        dims = {x: bool(s.style and s.style.dim) for x, s in _cells_of(drawn)}
        assert all(dims[x] for x in range(start, start + len("c Off")))
        assert not any(dims[x] for x in range(text.index("b Beta"), text.index("b Beta") + len("b Beta")))
        await pilot.click(KeyBar, offset=(start, 0))
        await pilot.pause()
        assert app.ran == []


def _cells_of(strip):
    x = 0
    for segment in strip:
        for _ in segment.text:
            yield x, segment
            x += 1


@run_async
async def test_a_click_on_a_key_presses_it_and_a_click_between_keys_does_nothing():
    app = Keys(KeyBar)
    async with app.run_test(size=(120, 6)) as pilot:
        await pilot.pause()
        await pilot.pause()
        text = bar_text(app)
        await pilot.click(KeyBar, offset=(text.index("Alpha"), 0))  # the description is part of the key
        await pilot.pause()
        assert app.ran == ["alpha"]
        gap = text.index("b Beta") - 1  # the margin between two keys
        assert text[gap] == " "
        await pilot.click(KeyBar, offset=(gap, 0))
        await pilot.click(KeyBar, offset=(119, 0))  # past the keys
        await pilot.pause()
        assert app.ran == ["alpha"]
        await pilot.click(KeyBar, offset=(text.index("z Zed"), 0))  # an action bound to two keys: the first shown
        await pilot.pause()
        assert app.ran == ["alpha", "zed"]
        assert "y" not in [k.key for k in app.query_one(KeyBar).keys] and "Hidden" not in text


@run_async
async def test_the_keys_follow_the_focus_and_the_screen():
    app = Keys(KeyBar)
    async with app.run_test(size=(120, 6)) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        app.query_one(Left).focus()
        await pilot.pause()
        await pilot.pause()
        assert [k.key for k in bar.keys][:2] == ["l", "a"]  # the focused widget's keys first, then the app's
        app.query_one(Right).focus()
        await pilot.pause()
        await pilot.pause()
        assert "Right only" in bar_text(app) and "Left only" not in bar_text(app)
        assert not bar.children  # redrawn, not recomposed: no widget mounted for a key
        app.push_screen(Dialog())
        await pilot.pause()
        await pilot.pause()
        dialog_bar = app.screen.query_one(KeyBar)
        assert [k.key_display for k in dialog_bar.keys] == ["esc"]  # a modal screen's own keys only
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.query_one(KeyBar) is bar


@run_async
async def test_the_line_is_cut_at_the_bar_width_and_a_cut_key_still_clicks():
    app = Keys(KeyBar)
    async with app.run_test(size=(30, 6)) as pilot:
        await pilot.pause()
        await pilot.pause()
        bar = app.query_one(KeyBar)
        # "a Alpha [b]x[/b] b Beta ..." at 30 columns, the palette key docked right: a whole, b under the palette
        assert [k.key for k in bar.visible_keys()] == ["a", "ctrl+p"]
        assert len(bar_text(app)) == 30
        await pilot.click(KeyBar, offset=(0, 0))
        await pilot.pause()
        assert app.ran == ["alpha"]
        # the wheel scrolls the flow sideways, as the Footer's did (by the app's sideways sensitivity), and back
        bar.post_message(events.MouseScrollDown(bar, 1, 0, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert bar_text(app).startswith("pha [b]x[/b] b Bet▏^p palette")
        await pilot.click(KeyBar, offset=(0, 0))  # a's description, scrolled to the left edge: a still
        await pilot.pause()
        assert app.ran == ["alpha", "alpha"]
        bar.post_message(events.MouseScrollUp(bar, 1, 0, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert bar_text(app).startswith("a Alpha")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@run_async
async def test_the_workbench_keys_at_80_columns_and_on_another_pane(tmp_path, size):
    panel = read_panel(write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=4, per_cohort=6, n_never=20, seed=2)))
    app = MemtuiApp(panel)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        bar = app.screen.query_one(KeyBar)
        assert bar.region.height == 1 and bar.region.y == size[1] - 1
        shown = [k.key_display for k in bar.visible_keys()]
        for key in ("m", "d", "o", "e", "?", "q"):
            assert key in shown, shown
        before = list(bar.keys)
        await pilot.press("3")
        await settle(pilot)
        await pilot.pause()
        assert bar.keys != before and "s" in [k.key for k in bar.keys]  # the Estimates pane's own keys
        assert app.screen.query_one(KeyBar) is bar
