"""Workbench speed on panels of the paper's shapes, driven through Textual's test pilot (headless).

    python benchmarks/app.py                        # both shapes; first run computes and caches the estimates
    python benchmarks/app.py --shape first-epoch --repeats 5 --workdir /tmp/memtui-bench

Measured:

- new process: ``python -c`` that imports the app, reads the panel and runs it, until the first paint (wall clock)

then each from a fresh App in this process (imports done once beforehand):

- open: read the panel, build the App, start it, until the heatmap has painted the profile (estimates cached on disk)
- switch (disk): ``m`` pressed until the new metric's profile is painted, its estimate read from the disk cache
- switch (memory): ``m`` back to a metric already seen in this session (in-memory dict)
- key latency while computing: ``j`` sent during an uncached estimate (a new seed), until the moved cursor is painted
- every key (``--keys``): each of the app's keys (panes, metric, estimator, significance, plot, scope, sort, the
  dialogs opened and closed), from the press until the app is idle and every animation has finished, with the tab
  underline animation on and off (the ``Animations`` palette command)
- dialogs (``--dialogs``): ``o`` and ``e`` to the first frame, with the heap frozen once the first estimate shows (as
  the app does) against the baseline of an unfrozen heap, runs interleaved

Headless means no terminal I/O: a real terminal adds the time to write the changed lines (small at 120 x 40).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from textual import events

from memtui.app import open_app
from memtui.app.heatmap import Heatmap
from memtui.app.main import MemtuiApp
from memtui.estimation.cache import cached_estimate
from memtui.estimation.estimate import ESTIMATORS
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel
from memtui.panel.synthetic import Simulation, write_synthetic

SHAPES = {
    "keys": Simulation(n_cohorts=40, per_cohort=50, n_never=500, n_checkpoints=41),  # the --keys default
    "first-epoch": Simulation(n_cohorts=95, per_cohort=100, n_never=2000, n_checkpoints=96),  # 11,500 x 96
    "full": Simulation(n_cohorts=143, per_cohort=100, n_never=2000, n_checkpoints=144),  # 16,300 x 144
}
METRICS = ("loglik", "accuracy", "rank")
SIZE = (120, 40)


async def _until(condition, timeout: float = 120.0) -> float:
    """Spin the event loop until ``condition()``; returns the time it became true."""
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(0.0005)
    return time.perf_counter()


async def _open_once(path: Path) -> dict:
    t0 = time.perf_counter()
    app = open_app(path)
    out = {}
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.query_one(Heatmap)
        await _until(lambda: heatmap.painted_at is not None)
        out["open"] = heatmap.painted_at - t0
        # steady state: let the extraction poller start (it imports torch) before timing key presses
        await pilot.pause(1.5)
        for kind in ("disk", "disk", "memory", "memory"):
            before = app.settings.metric
            t1 = time.perf_counter()
            await pilot.press("m" if kind == "disk" else "M")
            await _until(lambda b=before: app.result is not None and app.result.settings.metric != b)
            await _until(lambda: heatmap.painted_at is not None)
            out.setdefault(f"switch ({kind})", []).append(heatmap.painted_at - t1)
        out["keys"] = await _key_latencies(heatmap, app, 30)
    return out


async def _key_latencies(heatmap: Heatmap, app: MemtuiApp, n: int, while_computing: bool = False) -> list[float]:
    """Cursor moves (``j``, and ``l`` so the view scrolls sideways too), each until the moved cursor is painted."""
    latencies = []
    for i in range(n):
        if while_computing and app.computing is None:
            break
        key = "l" if i % 3 == 2 else "j"
        target = (
            (heatmap.row + (key == "j")) % heatmap.shape[0],
            min(heatmap.column + (key == "l"), heatmap.shape[1] - 1),
        )
        if target[0] == 0:
            key = "g"
        heatmap.painted_at = None
        t = time.perf_counter()
        _send_key(app, key)
        await _until(lambda r=target[0]: heatmap.row == r and heatmap.painted_at is not None)
        latencies.append(heatmap.painted_at - t)
        await asyncio.sleep(0.02)
    return latencies


async def _keys_while_computing(path: Path, seed: int) -> dict:
    app = MemtuiApp(read_panel(path))
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.query_one(Heatmap)
        await _until(lambda: heatmap.painted_at is not None)
        await pilot.pause(1.5)
        app.change_settings(seed=seed)  # not cached: computed in the worker thread
        assert app.computing is not None
        latencies = await _key_latencies(heatmap, app, 100, while_computing=True)
        await _until(lambda: app.computing is None, timeout=600)
    return {"keys": latencies}


_COLD = """
import asyncio, sys
from memtui.app import open_app

async def go():
    app = open_app(sys.argv[1])  # what `memtui PANEL` does before app.run()
    async with app.run_test(size=(120, 40)):
        heatmap = app.query_one("Heatmap")
        while heatmap.painted_at is None:
            await asyncio.sleep(0.0005)
        print("painted", flush=True)

asyncio.run(go())
"""


def _cold_open(path: Path) -> float:
    """`memtui PANEL` as a user runs it: a new Python process, imports included, until the first paint."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _COLD, str(path)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - t0
    proc.wait()
    if line.strip() != "painted":
        raise RuntimeError("the cold-start child did not paint")
    return elapsed


# (key, pane it is pressed on); a dialog key is followed by the key that closes it, timed separately
EVERY_KEY = [
    ("2", None), ("3", None), ("4", None), ("1", None), ("m", "profile"), ("M", "profile"), ("d", "profile"),
    ("d", "profile"), ("d", "profile"), ("s", "profile"), ("i", "profile"), ("p", "profile"), ("p", "profile"),
    ("j", "profile"), ("t", "estimates"), ("greater_than_sign", "estimates"), ("s", "estimates"),
    ("o", None), ("escape", None), ("e", None), ("escape", None), ("question_mark", None), ("escape", None),
]  # fmt: skip


async def _every_key(path: Path, animations: bool) -> dict[str, list[float]]:
    """Seconds from each key press until the app is idle with no animation left, estimates cached (the first
    ``d`` may compute the difference estimator once: cached on disk beforehand)."""
    app = MemtuiApp(read_panel(path))
    app.animation_level = "full" if animations else "none"
    out: dict[str, list[float]] = {}
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.query_one(Heatmap)
        await _until(lambda: heatmap.painted_at is not None)
        await pilot.pause(1.5)
        for key, pane in EVERY_KEY:
            if pane is not None and app.active_pane != pane:
                await pilot.press({"profile": "1", "estimates": "3"}[pane])
                await pilot.wait_for_scheduled_animations()
                await pilot.pause()
            t = time.perf_counter()
            await pilot.press(key)
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()
            await _until(lambda: app.computing is None)
            label = key if pane is None else f"{key} ({pane})"
            out.setdefault(label, []).append(time.perf_counter() - t)
    return out


async def _every_key_painted(
    path: Path, keys: list[tuple[str, str | None]] = EVERY_KEY, freeze: bool = True
) -> dict[str, list[float]]:
    """Seconds from each key reaching the app until the first frame drawn after the key's action ran: what a user
    sees answer (the pilot's own idle waits, which ``_every_key`` includes, left out). Frames are caught where
    Textual hands a rendered update to the driver (``App._display``), actions where every binding runs one
    (``App.run_action``); animations off, estimates cached."""
    app = MemtuiApp(read_panel(path))
    app.animation_level = "none"
    if not freeze:  # the baseline: the garbage collector walks the whole heap, as before the app froze it
        app._freeze_heap = lambda: None  # noqa: SLF001
    frames: list[float] = []
    acted: list[float] = []
    display, run_action = app._display, app.run_action  # noqa: SLF001 - the one place every frame passes

    def record(screen, renderable) -> None:
        frames.append(time.perf_counter())
        display(screen, renderable)

    async def action(*args, **kwargs):
        result = await run_action(*args, **kwargs)
        acted.append(time.perf_counter())
        return result

    app._display, app.run_action = record, action  # noqa: SLF001
    out: dict[str, list[float]] = {}
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.query_one(Heatmap)
        await _until(lambda: heatmap.painted_at is not None)
        await pilot.pause(1.5)
        for key, pane in keys:
            if pane is not None and app.active_pane != pane:
                await pilot.press({"profile": "1", "estimates": "3"}[pane])
                await pilot.pause(0.3)
            acted.clear()
            t = time.perf_counter()
            _send_key(app, key)
            label = key if pane is None else f"{key} ({pane})"
            try:
                await _until(lambda: bool(acted), timeout=5)
                await _until(lambda: frames[-1] > acted[0], timeout=2)
            except TimeoutError:  # nothing on screen changed (a key whose action had nothing to do)
                print(f"    {label}: no new frame", flush=True)
                continue
            first = next(f for f in frames if f > acted[0])
            out.setdefault(label, []).append(first - t)
            await pilot.pause(0.3)
            await _until(lambda: app.computing is None)
    return out


def _print_every_key(path: Path, repeats: int) -> None:
    runs = [asyncio.run(_every_key_painted(path)) for _ in range(repeats)]
    merged: dict[str, list[float]] = {}
    for run in runs:
        for label, values in run.items():
            merged.setdefault(label, []).extend(values)
    print(f"  every key, first frame after the key, animations off (median of {repeats} runs):")
    print("    " + "  ".join(f"{label} {statistics.median(v) * 1000:.0f}" for label, v in merged.items()) + " ms")
    print(f"    slowest: {max(statistics.median(v) for v in merged.values()) * 1000:.0f} ms")
    for animations in (True, False):
        runs = [asyncio.run(_every_key(path, animations)) for _ in range(repeats)]  # pilot-timed (upper bounds)
        print(f"  every key, animations {'on' if animations else 'off'} (max over {repeats} runs):")
        merged: dict[str, list[float]] = {}
        for run in runs:
            for label, values in run.items():
                merged.setdefault(label, []).extend(values)
        worst = max(max(v) for v in merged.values())
        print("    " + "  ".join(f"{label} {max(v) * 1000:.0f}" for label, v in merged.items()) + " ms")
        print(f"    slowest: {worst * 1000:.0f} ms")


def _print_dialogs(path: Path, repeats: int) -> None:
    """The dialogs' keys, first frame after the key, with the heap frozen (as the app runs) and without (the
    baseline), runs interleaved in this process."""
    keys = [("o", None), ("escape", None), ("e", None), ("escape", None)]
    merged: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    for _ in range(repeats):
        for freeze in (False, True):
            for label, values in asyncio.run(_every_key_painted(path, keys, freeze)).items():
                merged[freeze].setdefault(label, []).extend(values)
    print(f"  dialog keys, first frame after the key, median / max of {repeats} runs each, interleaved:")
    for label in ("o", "e"):
        (base, new) = (merged[f][label] for f in (False, True))
        print(f"    {label}: heap frozen {statistics.median(new) * 1000:.0f} / {max(new) * 1000:.0f} ms, not frozen "
              f"{statistics.median(base) * 1000:.0f} / {max(base) * 1000:.0f} ms "
              f"(median ratio {statistics.median(base) / statistics.median(new):.2f}x)")  # fmt: skip


def _send_key(app: MemtuiApp, key: str) -> None:
    """What ``Pilot.press`` does minus its wait for the whole process to go idle, which a computing worker thread
    never lets happen (the pilot would then add up to 2 s per key that a user never sees)."""
    event = events.Key(key, key)
    event.set_sender(app)
    app._driver.send_message(event)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="keep panels and caches here (default: a temporary folder)")
    parser.add_argument("--keys", action="store_true", help="only the every-key latencies (a 40-cohort panel)")
    parser.add_argument("--dialogs", action="store_true", help="only the dialog keys, heap frozen or not (40 cohorts)")
    args = parser.parse_args(argv)
    shapes = ["first-epoch", "full"] if args.shape == "both" else [args.shape]
    if (args.keys or args.dialogs) and args.shape == "both":
        shapes = ["keys"]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="memtui-app-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"panels and caches in {workdir}; terminal {SIZE[0]}x{SIZE[1]}, headless pilot")
    for shape in shapes:
        sim = SHAPES[shape]
        path = workdir / f"{shape}.h5"
        if not path.exists():
            write_synthetic(path, sim)
        panel = read_panel(path)
        n, t = panel.n_instances, panel.n_checkpoints
        t0 = time.perf_counter()
        for metric in METRICS:
            cached_estimate(panel, Settings(metric=metric))
        for estimator in ESTIMATORS:
            cached_estimate(panel, Settings(estimator=estimator))
        print(f"\n{shape}: {n:,} instances x {t} checkpoints, {sim.n_cohorts} cohorts "
              f"(estimates cached: {time.perf_counter() - t0:.1f} s)")  # fmt: skip
        if args.dialogs:
            _print_dialogs(path, args.repeats)
            continue
        if args.keys:
            _print_every_key(path, args.repeats)
            continue
        colds = [_cold_open(path) for _ in range(args.repeats)]
        print(f"  new process to first painted profile:    median {statistics.median(colds):.3f} s, "
              f"max {max(colds):.3f} s over {len(colds)} (Python start-up and imports included)")  # fmt: skip
        runs = [asyncio.run(_open_once(path)) for _ in range(args.repeats)]
        opens = [r["open"] for r in runs]
        print(f"  open to first painted profile (cached):  median {statistics.median(opens):.3f} s, "
              f"max {max(opens):.3f} s over {len(opens)}")  # fmt: skip
        for kind in ("disk", "memory"):
            values = [v for r in runs for v in r[f"switch ({kind})"]]
            print(f"  metric switch, estimate from {kind:<6}:   median {statistics.median(values):.3f} s, "
                  f"max {max(values):.3f} s over {len(values)}")  # fmt: skip
        idle = [v for r in runs for v in r["keys"]]
        print(f"  key latency (cursor move, idle):         median {statistics.median(idle) * 1000:.0f} ms, "
              f"max {max(idle) * 1000:.0f} ms over {len(idle)} presses")  # fmt: skip
        keys = asyncio.run(_keys_while_computing(path, seed=int(time.time()) % 100000 + 1))
        lat = keys["keys"]
        print(f"  key latency while an estimate computes:  median {statistics.median(lat) * 1000:.0f} ms, "
              f"max {max(lat) * 1000:.0f} ms over {len(lat)} presses")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
