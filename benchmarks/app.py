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
from memtui.cache import cached_estimate
from memtui.estimate import Settings
from memtui.panel import read_panel
from memtui.synthetic import Simulation, write_synthetic

SHAPES = {
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
    args = parser.parse_args(argv)
    shapes = list(SHAPES) if args.shape == "both" else [args.shape]
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
        print(f"\n{shape}: {n:,} instances x {t} checkpoints, {sim.n_cohorts} cohorts "
              f"(estimates cached: {time.perf_counter() - t0:.1f} s)")  # fmt: skip
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
