"""The workbench opened on hostile files (issue 7): nothing read from a panel or a progress record reaches the terminal
raw, is read as markup, or crashes the app.

Each case opens the app through Textual's pilot on a small panel, settles, visits the panes where the value shows,
and checks what was painted: no control character (ESC, BEL, bidi overrides) and markup shown as the literal text it
is. A metric named ``[@click=app.quit]q`` must read as those characters, not quit the app or become a link.
"""

from __future__ import annotations

import html
import json
import re

import h5py
import numpy as np
import pytest
from app_pilot import Inbox, run_async, settle
from textual.content import Content

from memtui.app import run_app
from memtui.app.extraction import ExtractionPane, progress_text
from memtui.app.main import MemtuiApp
from memtui.core.text import clean
from memtui.extract.launches import launch_record
from memtui.extract.units import WorkDir
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.synthetic import Simulation, simulate

SIM = Simulation(n_cohorts=3, per_cohort=8, n_never=24, n_checkpoints=5, seed=7)
SIZE = (110, 34)
# C0 (newline aside: the screen has lines), DEL, C1 and the bidi overrides: what clean() replaces
PAINTED_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

ESC_TITLE = "\x1b]0;pwned\x07"
ESC_CLEAR = "\x1b[2J\x1b[H"
BIDI = "\u202eevil\u202c"
MARKUP = ["[bold red]loud", "[@click=app.quit]q", "[$accent]x", "[link=https://evil.example]l", "[on red]x[/on red]"]


def _panel(path, *, attrs=None, rename=None, done=True):
    """A small simulated panel; ``rename`` gives the accuracy metric another name, ``done=False`` leaves it waiting
    for extraction."""
    data = simulate(SIM)
    values, signs = dict(data["values"]), dict(data["signs"])
    path = create_panel(path, ids=data["ids"], treatment=data["treatment"], steps=data["steps"],
                        metrics=list(values), values=values if done else None, signs=signs,
                        attrs=attrs)  # fmt: skip
    if rename is not None:  # memtui refuses to write such a name; another program may still have
        with h5py.File(path, "r+") as f:
            f["metrics"].move("accuracy", rename)
    return path


def screen_text(app) -> list[str]:
    """What is painted, line by line, read back from the screenshot (the same cells a terminal would get)."""
    svg = app.export_screenshot()
    assert "\x1b" not in svg and "&#27;" not in svg and "&#x1b;" not in svg.lower()
    lines: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg, re.S):
        lines.setdefault(float(y), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    return ["".join(t for _, t in sorted(row)) for _, row in sorted(lines.items())]


def assert_clean_screen(app, *expected: str) -> str:
    """No control character painted, and each of ``expected`` shown literally somewhere; returns the screen."""
    text = "\n".join(screen_text(app))
    assert not PAINTED_CONTROL.search(text), repr(PAINTED_CONTROL.findall(text))
    for literal in expected:
        assert literal in text, f"{literal!r} is not shown as written"
    return text


async def visit_every_pane(pilot, *expected: str) -> list[str]:
    """Each pane in turn, settled and checked; returns the screens."""
    screens = []
    for key in "1234":
        await pilot.press(key)
        await settle(pilot)
        screens.append(assert_clean_screen(pilot.app, *expected))
    return screens


# ---- panel attributes and the panel's name ---------------------------------------------------------------------

ATTRS = {
    "model-esc-title": {"model": ESC_TITLE},
    "model-esc-clear": {"model": "gpt" + ESC_CLEAR},
    "model-bidi": {"model": BIDI},
    "model-markup-click": {"model": "[@click=app.quit]q"},
    "model-markup-close": {"model": "[bold red]hi[/]"},
    "model-10k": {"model": "m" * 10_000},
    "command-and-source": {"command": ESC_TITLE + "[bold]x[/]", "source": ESC_CLEAR + "[$accent]", "model": "ok"},
}


@pytest.mark.parametrize("attrs", list(ATTRS.values()), ids=list(ATTRS))
@run_async
async def test_hostile_panel_attributes(tmp_path, attrs):
    path = _panel(tmp_path / "panel.h5", attrs=attrs)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await visit_every_pane(pilot, "panel.h5")
        model = app.query_one("#ex-model").value
        assert not PAINTED_CONTROL.search(model)  # a hostile model attribute is not offered as the model to run
        assert app.is_running and app.result is not None
    assert app.return_value is None  # nothing in an attribute quit the app


@pytest.mark.parametrize("name", ["\x1b]0;pwned\x07.h5", "[bold red]p[@click=app.quit].h5", "\u202eevil.h5"])
@run_async
async def test_hostile_panel_file_name(tmp_path, name):
    path = _panel(tmp_path / name)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await visit_every_pane(pilot, clean(name, 80))
    assert app.return_value is None


# ---- metric names ----------------------------------------------------------------------------------------------

METRICS = {
    "markup-style": "[bold red]loud",
    "markup-click": "[@click=app.quit]q",
    "markup-variable": "[$accent]x",
    "markup-link": "[link=evil.example]l",  # no "/": a metric name is an HDF5 dataset name
    "markup-unclosed": "[on red]x[",
    "esc-title": "m" + ESC_TITLE,
    "esc-clear": ESC_CLEAR + "m",
    "bidi": BIDI,
    "long": "w" * 2000,
}


@pytest.mark.parametrize("metric", list(METRICS.values()), ids=list(METRICS))
@run_async
async def test_hostile_metric_name(tmp_path, metric):
    path = _panel(tmp_path / "panel.h5", rename=metric)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("M")  # loglik -> the hostile metric, the last one (after the paper's four)
        await settle(pilot)
        assert app.settings.metric == metric and app.result is not None, app.message
        shown = clean(metric, 60)[:40]  # the title cuts long names; their start is there as written
        await visit_every_pane(pilot, shown)
        # the command palette reads titles as markup: the metric's entry must say exactly the name
        titles = [Content.from_markup(c.title).plain for c in app.get_system_commands(app.screen)]
        assert f"Metric: {clean(metric, 60)}" in titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Metric")
        await settle(pilot, ("estimate", "reload", "--textual-command-palette-gather-commands"))
        assert_clean_screen(app)
        await pilot.press("escape")
        await pilot.press("e")  # the export dialog's default file name comes from the metric
        await pilot.pause()
        default = app.screen.query_one("#export-path").value
        assert not PAINTED_CONTROL.search(default) and "/" not in default
        await pilot.press("escape")
        assert app.is_running
    assert app.return_value is None


# ---- progress files --------------------------------------------------------------------------------------------

PROGRESS = {
    "json-list": b"[1, 2, 3]",
    "state-number": b'{"state": 5}',
    "pid-string": b'{"state": "running", "pid": "x"}',
    "k-strings": b'{"state": "running", "k": "2", "K": "five", "checkpoint": "1000"}',
    "tokens-abc": b'{"state": "running", "k": 1, "K": 3, "tokens_per_s": "abc", "eta_s": "soon"}',
    "tokens-huge": b'{"state": "running", "k": 1, "K": 3, "tokens_per_s": 1e308, "eta_s": 1e308}',
    "tokens-nan": b'{"state": "running", "k": 1, "K": 3, "tokens_per_s": NaN, "eta_s": Infinity}',
    "huge-ints": b'{"state": "running", "k": 1' + b"0" * 400 + b', "K": 2' + b"0" * 400 + b', "pid": -1}',
    "instances-junk": b'{"state": "running", "k": 1, "K": 2, "instances_done": [1], "instances_total": {"a": 1}}',
    "fields-hostile": json.dumps(
        {
            "state": "[bold red]x[/]",
            "last_error": ESC_TITLE + "[@click=app.quit]q",
            "log": ESC_CLEAR + "[link=https://evil]",
            "model": BIDI,
            "warnings": ["[$accent]" + ESC_TITLE],
        }
    ).encode(),  # fmt: skip
    "binary": bytes(range(256)) * 8,
    "empty": b"",
    "null": b"null",
    "nested": b'{"state": {"state": {"state": []}}}',
}


def _write_progress(panel, content: bytes) -> None:
    """The same junk as a worker's progress record and as the launch record, the two files the pane's poller reads
    (through memtui.extract.jobs.read_progress)."""
    work = WorkDir(panel).ensure()
    (work.workers / "w0.json").write_bytes(content)
    launch_record(panel).write_bytes(content)


@pytest.mark.parametrize("content", list(PROGRESS.values()), ids=list(PROGRESS))
@run_async
async def test_junk_progress_file(tmp_path, content):
    path = _panel(tmp_path / "panel.h5", done=False)  # nothing extracted: the pane polls at once
    _write_progress(path, content)
    app = MemtuiApp(read_panel(path))
    inbox = Inbox()
    async with app.run_test(size=SIZE, message_hook=inbox) as pilot:
        status = ExtractionPane.Status
        await inbox.until(pilot, lambda: inbox.count(status) > 0, status, what="a poll of the progress file")
        assert app.active_pane == "extraction"
        text = assert_clean_screen(app)
        assert "[bold red]x[/]" in text or "job" in text or "No extraction job" in text
        await visit_every_pane(pilot)
        assert app.is_running
    assert app.return_value is None


JUNK_VALUES = [
    [1, 2],
    "running",
    42,
    {"state": None, "pid": None, "k": None, "K": None},
    {"state": "running", "pid": "x", "k": "1", "K": "3", "checkpoint": [1]},
    {"state": "running", "k": 2, "K": 3, "tokens_per_s": "abc", "eta_s": "x"},
    {"state": "running", "k": 2, "K": 3, "tokens_per_s": float("nan"), "eta_s": float("inf")},
    {"state": "running", "k": 2, "K": 3, "tokens_per_s": 1e308, "eta_s": 1e308},
    {"state": "running", "k": 10**400, "K": 10**401, "instances_done": 10**400, "instances_total": 3},
    {"state": "running", "k": -3, "K": 0.5, "instances_done": -1, "instances_total": 0},
    {"state": "done", "k": True, "K": 3, "instances_done": float("nan"), "instances_total": float("inf")},
    {"state": ["running"], "last_error": {"x": 1}, "log": 5, "warnings": "[@click=app.quit]" + ESC_TITLE},
]


@run_async
async def test_any_value_in_a_progress_record_is_shown_without_an_exception(tmp_path):
    """Whatever read_progress hands over (it checks types, but the pane does not rely on that)."""
    path = _panel(tmp_path / "panel.h5", done=False)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        pane = app.query_one(ExtractionPane)
        for value in JUNK_VALUES:
            assert not PAINTED_CONTROL.search(progress_text(value).replace("\n", " "))
            pane.post_message(ExtractionPane.Status(value, np.zeros(SIM.n_checkpoints, bool), True))
            await pilot.pause()
            assert isinstance(pane.running, bool)
            assert_clean_screen(app)
        assert app.is_running
    assert app.return_value is None


# ---- damaged panels at start -----------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbage", "hostile-name-garbage"])
def test_a_damaged_panel_is_one_clean_line_and_status_2(tmp_path, capsys, damage):
    path = _panel(tmp_path / "panel.h5")
    if damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 16)
    else:
        path = tmp_path / ("\x1b]0;pwned\x07[bold]" + ".h5")
        path.write_bytes(b"\x1b[2J not a panel \x1b]0;x\x07")
    assert run_app(path) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("memtui: ") and out.err.count("\n") == 1, out.err
    assert not PAINTED_CONTROL.search(out.err.rstrip("\n")), repr(out.err)
    assert "Traceback" not in out.err
