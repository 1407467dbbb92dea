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
from memtui.app.keybar import KeyBar
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


def make_panel(path, token_scores: bool = True, covariates: dict | None = None):
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
        covariates=covariates,
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
    from memtui.panel.samples import sample_paths

    app = MemtuiApp(read_panel(sample_paths(sample)[0]))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.pause()
        bar = app.screen.query_one(KeyBar)
        keys = {k.key_display: k for k in bar.keys}
        assert ("w" in keys) == in_footer
        assert bar.visible_keys() == bar.keys, [k.key_display for k in bar.visible_keys()]  # each whole on screen
        assert "q" in keys
        assert "w" in dict(dict(key_sections(app))["Profile (heatmap)"])
        await pilot.press("i", "l", "w")
        assert isinstance(app.screen, InstancesScreen)


# ---- the shipped sample with per-token scores -------------------------------------------------------------------


@run_async
async def test_the_shipped_sample_with_per_token_scores_colours_every_text_it_opens():
    """`--sample tiny-gptneox-tokens`: every instance has per-token scores, so the first one listed is coloured, each
    token by what it gained from the checkpoint before its cohort's to its cohort's, as the file stores them."""
    from memtui.app import token_colours
    from memtui.panel.samples import sample_path
    from memtui.panel.token_scores import read_token_scores

    panel = read_panel(sample_path("tiny-gptneox-tokens"))
    app = MemtuiApp(panel)
    async with app.run_test(size=(120, 40)) as pilot:
        listing = await _instances(pilot)
        assert listing.rows and "bytes" in _plain(listing.query_one("#instances-head"))
        screen = await _open(pilot)
        row = listing.rows[0]
        stored = token_colours.by_token(read_token_scores(panel, [row.id])[row.id])
        steps = list(panel.steps)
        want = stored[steps.index(row.cohort)] - stored[steps.index(row.base)]
        assert np.allclose(screen.gain, want[: len(row.tokens)], equal_nan=True)
        assert np.isfinite(screen.gain[1:]).all() and np.isnan(screen.gain[0])  # the first token has no context
        spans = [s for s in screen.query_one("#instance-text").render().spans if _background(s.style) is not None]
        assert len(spans) == len(row.tokens) - 1
        assert f"log p gained, step {row.base} → {row.cohort}" in _plain(screen.query_one("#instance-legend"))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_sample_instance_snapshot(snap_compare, size):
    from memtui.panel.samples import sample_path

    app = MemtuiApp(read_panel(sample_path("tiny-gptneox-tokens")))
    assert snap_compare(app, terminal_size=size, run_before=_to_instance)


# ---- b and v: the list of one group -------------------------------------------------------------------------------

KINDS = np.array(["prose", "verse"])


@pytest.fixture
def split_path(tmp_path):
    n = len(COHORTS) * PER_COHORT + N_NEVER
    return make_panel(tmp_path / "split.h5", covariates={"kind": KINDS[(np.arange(n) // 2) % 2]})


def _group_tau(panel, group: str, cohort: int, checkpoint: int) -> float:
    """The group's DiD for the cell by hand: its cohort's mean change from the step before g to c, less its own
    never-trained instances' mean change."""
    y, steps = panel.metrics["loglik"], list(panel.steps)
    mine = np.asarray(panel.covariates["kind"]) == group
    c, base = steps.index(checkpoint), steps.index(cohort) - 1
    treated, never = mine & (panel.treatment == cohort), mine & (panel.treatment == NEVER)
    return float((y[treated, c] - y[treated, base]).mean() - (y[never, c] - y[never, base]).mean())


@run_async
async def test_b_lists_one_group_scored_against_its_own_controls_and_v_the_next(split_path):
    panel = read_panel(split_path)
    app = MemtuiApp(panel)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _instances(pilot)
        whole = [r.id for r in screen.rows]
        assert len(whole) == PER_COHORT and "all instances" in _plain(screen.query_one("#instances-head"))
        await pilot.press("b")
        await _workers(pilot, "instances")
        assert (screen.by, screen.group) == ("kind", "kind=prose")
        kinds = dict(zip(panel.ids.tolist(), np.asarray(panel.covariates["kind"]).tolist(), strict=True))
        assert screen.rows and {kinds[r.id] for r in screen.rows} == {"prose"}
        assert np.mean([r.score for r in screen.rows]) == pytest.approx(_group_tau(panel, "prose", 10, 20))
        assert screen.rows[0].p_value >= 1 / (1 + N_NEVER // 2)  # ranked among the group's 6 controls, not all 12
        head = _plain(screen.query_one("#instances-head"))
        assert "group kind=prose of kind" in head and "the group's never-trained" in head
        await pilot.press("v")
        await _workers(pilot, "instances")
        assert screen.group == "kind=verse" and {kinds[r.id] for r in screen.rows} == {"verse"}
        assert np.mean([r.score for r in screen.rows]) == pytest.approx(_group_tau(panel, "verse", 10, 20))
        inside = await _open(pilot)  # the path's band: the group's own never-trained instances
        assert (inside.by, inside.group) == ("kind", "kind=verse")
        assert "group kind=verse, against its own never-trained" in _plain(inside.query_one("#instance-head"))
        await pilot.press("escape")
        await pilot.press("V")
        await _workers(pilot, "instances")
        assert screen.group == "kind=prose"
        await pilot.press("b")  # the next spec: none, the whole cell again
        await _workers(pilot, "instances")
        assert (screen.by, screen.group) == ("", "") and sorted(r.id for r in screen.rows) == sorted(whole)


@run_async
async def test_w_on_a_split_heatmap_lists_the_group_it_shows(split_path):
    app = MemtuiApp(read_panel(split_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("b", "v")  # the app's split by kind, its second group on the heatmap
        await settle(pilot)
        screen = await _instances(pilot)
        assert (screen.by, screen.group) == ("kind", "kind=verse")
        cells = app.by_result.groups["kind=verse"].cells
        tau = cells.filter((cells["cohort"] == 10) & (cells["checkpoint"] == 20))["estimate"][0]
        assert np.mean([r.score for r in screen.rows]) == pytest.approx(tau)


@run_async
async def test_b_and_v_without_covariates_or_a_split_say_how(panel_path):
    app = MemtuiApp(read_panel(panel_path))
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await _instances(pilot)
        await pilot.press("v")
        await pilot.pause()
        assert any("No split: b splits the list" in n.message for n in app._notifications)
        await pilot.press("b")
        await pilot.pause()
        assert any("no covariate to split by" in n.message for n in app._notifications)
        assert (screen.by, screen.group) == ("", "") and len(screen.rows) == PER_COHORT


@run_async
async def test_a_group_without_never_trained_instances_says_so_and_lists_nothing(tmp_path):
    n = len(COHORTS) * PER_COHORT + N_NEVER
    kind = np.where(np.arange(n) < len(COHORTS) * PER_COHORT, "trained-only", "mixed")
    kind[:2] = "mixed"
    app = MemtuiApp(read_panel(make_panel(tmp_path / "lop.h5", covariates={"kind": kind})))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _instances(pilot)
        await pilot.press("b", "v")  # kind=mixed first (sorted), then kind=trained-only: no controls of its own
        await _workers(pilot, "instances")
        assert screen.group == "kind=trained-only" and screen.rows == []
        assert "no never-trained instance of group kind=trained-only" in _plain(screen.query_one("#instances-head"))
        assert screen.query_one("DataTable").row_count == 0
        await pilot.press("enter")  # nothing to open
        assert app.screen is screen


@run_async
async def test_keys_pressed_faster_than_the_scoring_show_the_last_group_chosen(split_path):
    app = MemtuiApp(read_panel(split_path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _instances(pilot)
        await pilot.press("b", "v", "v", "v")  # kind=prose, verse, prose, verse: lists may arrive for each
        await _workers(pilot, "instances")
        kinds = dict(zip(screen.panel.ids.tolist(), np.asarray(screen.panel.covariates["kind"]).tolist(), strict=True))
        assert screen.group == "kind=verse" and {kinds[r.id] for r in screen.rows} == {"verse"}
        assert "group kind=verse of kind" in _plain(screen.query_one("#instances-head"))
