"""`memtui status`: progress of the extraction of a panel: every worker, total and ETA."""

from __future__ import annotations

import json
import time
from pathlib import Path

SUMMARY = "progress of the extraction of a panel: every worker, total and ETA"


def add_arguments(p) -> None:
    p.add_argument("panel", type=Path, help="the panel file whose extraction to show")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the workers stop")
    p.add_argument("--json", action="store_true", help="print the raw progress record")


def run(args) -> int:
    from memtui.extract import jobs
    from memtui.extract.progress import describe, describe_worker

    shown = None
    while True:
        progress = jobs.read_progress(args.panel)
        if args.json:
            print(json.dumps(progress, indent=1))
            return 0
        if progress is None:
            print(f"{args.panel}: {no_extraction(args.panel)}")
            return 0
        line = f"{args.panel}: {describe(progress)}"
        workers = progress.get("workers") or []
        if not args.follow or progress.get("state") not in ("running", "queued"):
            print(line)
            for w in workers:
                print(f"  {describe_worker(w)}")
            print(f"  log {progress.get('log')}")
            for w in progress.get("warnings") or []:
                print(f"  warning: {w}")
            if progress.get("state") == "unreadable":
                print(f"  a worker record in {jobs.work_dir(args.panel)}/workers is not a progress record; a rerun of "
                      "`memtui extract` replaces it")  # fmt: skip
            if progress.get("state") in ("stale", "cancelled", "failed"):
                print(f"  rerun `memtui extract {args.panel} --model {progress.get('model') or 'MODEL'}` to resume")
            return 0 if progress.get("state") != "failed" else 1
        line += f" ({progress.get('n_running')} running)"
        if line != shown:  # a line only when something changed: totals only grow, so lines never repeat
            print(line, flush=True)
            shown = line
        time.sleep(FOLLOW_INTERVAL_S)


FOLLOW_INTERVAL_S = 2.0


def no_extraction(path: Path) -> str:
    """What a panel with no extraction record is, truthfully: how many checkpoints hold values, where they came from
    (a simulation, `memtui demo`'s own run, an imported table, `memtui build`) and whether `memtui extract` can
    still add any. Never "N/N extracted" beside "no extraction has run": a panel filled without `memtui extract`
    (a shipped sample) is complete, it was simply not extracted here."""
    from memtui.panel.hdf5 import read_panel
    from memtui.panel.samples import is_sample

    panel = read_panel(path)
    n, filled = panel.n_checkpoints, int(panel.done.sum())
    if filled == n:
        held = f"complete, all {n} checkpoints hold values"
    elif filled:
        held = f"{filled} of {n} checkpoints hold values"
    else:
        held = f"none of its {n} checkpoints holds values yet"
    attrs = panel.attrs
    if attrs.get("simulation"):
        origin = "a simulated panel (`memtui sample synthetic`; its values were drawn, not scored by a model)"
    elif attrs.get("demo_config") or attrs.get("suite"):
        origin = "made by `memtui demo`, which trained its model and scored the checkpoints itself"
    elif not panel.has_tokens:
        origin = f"imported from a table ({attrs.get('source') or '`memtui import`'}), with no token ids"
    else:
        origin = "built for extraction (`memtui build`)"
    shipped = "; a sample shipped with memtui" if is_sample(path) else ""
    if not panel.has_tokens:
        then = "no `memtui extract` has run on it, and none can: it stores no token ids"
    elif filled == n:
        then = "no `memtui extract` has run on it here (no extraction records beside it); nothing is left to extract"
    elif filled:
        then = (f"no extraction records beside it: `memtui extract {path} --model MODEL` scores the other "
                f"{n - filled}")  # fmt: skip
    else:
        then = f"no `memtui extract` has run on it yet: start one with `memtui extract {path} --model MODEL`"
    return f"{held}; {origin}{shipped}; {then}."
