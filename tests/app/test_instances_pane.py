"""The Instances screens (app/instances.py), driven by Pilot: w on the heatmap's cursor cell lists its instances best
first; Enter opens one with its text, its path and, where the panel stores per-token scores, its tokens coloured by
the log-probability they gained. Snapshots at 80 x 24 and 120 x 40 (new files of this test's own)."""

from __future__ import annotations

import asyncio

import h5py
import numpy as np
import pytest
from app_pilot import run_async, settle

from memtui.app.instances import InstanceScreen, InstancesScreen
from memtui.app.main import MemtuiApp, key_sections
from memtui.app.plots import BandPlot
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.report.instances import shown

STEPS = [0, 10, 20, 30, 40, 50]
COHORTS = [10, 20, 30, 40]
PER_COHORT, N_NEVER = 6, 12
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hex",
    "jolly",
    "boxing",
    "frogs",
]


def _texts(n: int) -> list[bytes]:
    rng = np.random.default_rng(1)
    rows = [" ".join(rng.choice(WORDS, size=8)).encode() for _ in range(n)]
    rows[0] = b"\x1b[2J\x1b]0;pwned\x07 escape " + rows[0]  # decodes to ESC sequences: must never reach the terminal
    return rows


def make_panel(path, token_scores: bool = True):
    """A byte-token panel: each treated instance's loglik rises after its cohort's checkpoint (more for lower ids),
    and, with ``token_scores``, every instance's per-token log-probabilities in the documented layout."""
    rows = _texts(len(COHORTS) * PER_COHORT + N_NEVER)
    n, width, t = len(rows), max(map(len, rows)), len(STEPS)
    tokens = np.full((n, width), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = list(r)
    treatment = np.r_[np.repeat(COHORTS, PER_COHORT), np.full(N_NEVER, NEVER)]
    rng = np.random.default_rng(2)
    trained = (treatment[:, None] != NEVER) & (np.array(STEPS)[None, :] >= treatment[:, None])
    effect = 4.0 + 6.0 * (np.arange(n) % PER_COHORT == 0)  # one instance per cohort memorised most
    loglik = rng.normal(-80, 1.0, size=(n, 1)) + rng.normal(0, 0.3, size=(n, t)) + trained * effect[:, None]
    create_panel(
        path,
        ids=np.arange(n) + 100,
        treatment=treatment,
        steps=STEPS,
        metrics=["loglik"],
        values={"loglik": loglik},
        tokens=tokens,
        lengths=[len(r) for r in rows],
        attrs={"tokenizer": "bytes (token id = UTF-8 byte)"},
    )
    if token_scores:
        lp = rng.normal(-3.0, 0.4, size=(n, t, width - 1))
        half = np.arange(width - 1) >= (width - 1) // 2  # the second half of each text is what training taught
        lp += (trained[:, :, None] & half[None, None, :]) * 2.5
        with h5py.File(path, "r+") as f:
            group = f.create_group("instances/token_scores")
            group.create_dataset("ids", data=np.arange(n, dtype=np.int64) + 100)
            group.create_dataset("logp", data=lp.astype(np.float16), chunks=(1, t, width - 1), compression="gzip")
            group.create_dataset("done", data=np.ones(t, np.uint8))
    return path


@pytest.fixture
def panel_path(tmp_path):
    return make_panel(tmp_path / "panel.h5")


async def _instances(pilot, keys=("i", "l")) -> InstancesScreen:
    """From the settled profile: move the cursor with ``keys`` (c = g, then one checkpoint on), press w, and wait for
    the ranked instances."""
    await settle(pilot)
    await pilot.press(*keys, "w")
    screen = pilot.app.screen
    assert isinstance(screen, InstancesScreen)
    await _workers(pilot, "instances")
    return screen


async def _workers(pilot, group: str) -> None:
    for _ in range(1000):
        await pilot.pause()
        busy = [w for w in pilot.app.workers if w.group == group and not w.is_finished]
        if not busy:
            await pilot.pause()
            return
        await asyncio.gather(*(w.wait() for w in busy), return_exceptions=True)
    raise AssertionError(f"{group} never finished")


async def _open(pilot) -> InstanceScreen:
    await pilot.press("enter")
    screen = pilot.app.screen
    assert isinstance(screen, InstanceScreen)
    await _workers(pilot, "instance")
    await pilot.pause()
    return screen


def _background(style):
    return getattr(style, "background", None) or getattr(style, "bgcolor", None)


def _plain(widget) -> str:
    content = widget.render()
    return content.plain if hasattr(content, "plain") else str(content)


@run_async
async def test_w_lists_the_cursor_cells_instances_best_first_and_their_mean_is_the_cells_tau(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _instances(pilot)
        assert (screen.cohort, screen.checkpoint) == (10, 20)
        scores = [r.score for r in screen.rows]
        assert len(scores) == PER_COHORT and scores == sorted(scores, reverse=True)
        cells = app.result.cells
        tau = cells.filter((cells["cohort"] == 10) & (cells["checkpoint"] == 20))["estimate"][0]
        assert np.mean(scores) == pytest.approx(tau)
        head = _plain(screen.query_one("#instances-head"))
        assert "not a population estimate" in head and "6 scored" in head and "bytes" in head
        assert screen.query_one("DataTable").row_count == PER_COHORT
        await pilot.press("escape")
        assert not isinstance(app.screen, InstancesScreen)


@run_async
async def test_enter_opens_the_text_coloured_by_token_gains_and_the_path(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(120, 40)) as pilot:
        listing = await _instances(pilot)
        screen = await _open(pilot)
        row = listing.rows[0]
        assert screen.row is row and screen.gain is not None and len(screen.gain) == len(row.tokens)
        text = screen.query_one("#instance-text").render()
        assert text.plain == shown(bytes(row.tokens).decode())
        coloured = [s for s in text.spans if _background(s.style) is not None]
        assert len(coloured) >= len(row.tokens) // 2  # each scored token on a colour of the ramp
        second = screen.gain[len(row.tokens) // 2 + 1 :]
        assert np.nanmean(second) > 2.0 > np.nanmean(screen.gain[1 : len(row.tokens) // 2 - 1]) + 1
        assert "log p gained, step 0 → 10" in _plain(screen.query_one("#instance-legend"))
        plot = screen.query_one(BandPlot)
        assert f"instance {row.id}" in plot.drawn_title
        await pilot.press("escape")
        assert app.screen is listing


@run_async
async def test_escape_sequences_in_the_text_never_reach_the_screen(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(120, 40)) as pilot:
        listing = await _instances(pilot)
        first = next(k for k, r in enumerate(listing.rows) if r.id == 100)  # the instance whose text has ESC codes
        listing.query_one("DataTable").move_cursor(row=first)
        screen = await _open(pilot)
        plain = screen.query_one("#instance-text").render().plain
        assert "\x1b" not in plain and "\x07" not in plain and "?[2J?]0;pwned?" in plain
        table_text = listing.rows[first].text
        assert "\x1b" not in table_text


@run_async
async def test_without_per_token_scores_the_text_is_plain_and_the_legend_says_so(tmp_path):
    app = MemtuiApp(read_panel(make_panel(tmp_path / "plain.h5", token_scores=False)))
    async with app.run_test(size=(100, 30)) as pilot:
        await _instances(pilot)
        screen = await _open(pilot)
        assert screen.gain is None
        assert "No per-token scores" in _plain(screen.query_one("#instance-legend"))
        assert not [s for s in screen.query_one("#instance-text").render().spans if _background(s.style)]


@run_async
async def test_damaged_per_token_scores_leave_the_text_and_the_path(tmp_path):
    path = make_panel(tmp_path / "bad.h5")
    with h5py.File(path, "r+") as f:  # ids listed twice: refused by the reader
        del f["instances/token_scores/ids"]
        f["instances/token_scores/ids"] = np.full(len(f["instances/id"]), 100)
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=(100, 30)) as pilot:
        await _instances(pilot)
        screen = await _open(pilot)
        assert screen.gain is None
        assert "Per-token scores not shown" in _plain(screen.query_one("#instance-legend"))
        assert "instance" in screen.query_one(BandPlot).drawn_title


@run_async
async def test_a_panel_without_token_ids_lists_and_opens_its_instances(tmp_path):
    from memtui.panel.synthetic import Simulation, write_synthetic

    sim = Simulation(n_cohorts=3, per_cohort=5, n_never=10, n_checkpoints=5, seed=4)
    app = MemtuiApp(read_panel(write_synthetic(tmp_path / "sim.h5", sim)))
    async with app.run_test(size=(100, 30)) as pilot:
        listing = await _instances(pilot)
        assert len(listing.rows) == 5 and "no token ids" in _plain(listing.query_one("#instances-head"))
        screen = await _open(pilot)
        assert "no token ids" in screen.query_one("#instance-text").render().plain
        assert screen.query_one(BandPlot).drawn_title


@run_async
async def test_a_pre_treatment_cell_says_why_it_has_no_instances(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("i", "h", "w")  # c = g - 1: a placebo cell
        await pilot.pause()
        assert not isinstance(app.screen, InstancesScreen)
        assert any("pre-treatment" in n.message for n in app._notifications)


def test_the_keys_are_in_the_help_and_the_footer():
    from memtui.app.profile import ProfilePane

    assert any(b.key == "w" and b.action == "instances" and b.show for b in ProfilePane.BINDINGS)
    assert any(b.action == "open" for b in InstancesScreen.BINDINGS)
    assert any(b.action == "back" and b.show for b in InstanceScreen.BINDINGS)


@run_async
async def test_help_lists_the_instances_keys(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        sections = dict(key_sections(app))
        assert ("w", "The cursor cell's instances, ranked by their own score") in sections["Profile (heatmap)"]
        keys = dict(sections["Instances"])
        assert "enter" in keys and "escape, backspace" in keys


async def _to_instance(pilot) -> None:
    await _instances(pilot)
    await _open(pilot)
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_instance_snapshot(snap_compare, panel_path, size):
    assert snap_compare(MemtuiApp(read_panel(panel_path)), terminal_size=size, run_before=_to_instance)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_instances_list_snapshot(snap_compare, panel_path, size):
    assert snap_compare(MemtuiApp(read_panel(panel_path)), terminal_size=size, run_before=_instances)


@pytest.mark.parametrize(("sample", "in_footer"), [("tiny-gptneox", True), ("synthetic", False)])
@run_async
async def test_w_is_in_the_footer_at_80_columns_where_there_is_room_and_in_the_help_always(sample, in_footer):
    """A panel of texts (no known truth, one model) lists w in the footer, whole at 80 columns; a simulated panel's
    footer keeps its slot for t, and ? lists w there."""
    from textual.widgets._footer import FooterKey

    from memtui.panel.samples import sample_paths

    app = MemtuiApp(read_panel(sample_paths(sample)[0]))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.pause()
        keys = {k.key_display: k for k in app.screen.query(FooterKey)}
        assert ("w" in keys) == in_footer
        assert all(k.region.right <= 80 for k in keys.values()), [(d, k.region) for d, k in keys.items()]
        assert "q" in keys
        assert "w" in dict(dict(key_sections(app))["Profile (heatmap)"])
        await pilot.press("i", "l", "w")
        assert isinstance(app.screen, InstancesScreen)
