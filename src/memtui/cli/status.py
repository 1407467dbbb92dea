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
    from memtui.panel.hdf5 import read_done

    shown = None
    while True:
        progress = jobs.read_progress(args.panel)
        if args.json:
            print(json.dumps(progress, indent=1))
            return 0
        if progress is None:
            steps, done = read_done(args.panel)
            print(f"{args.panel}: {int(done.sum())}/{len(steps)} checkpoints extracted; no extraction has run on it "
                  "(start one with `memtui extract`).")  # fmt: skip
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
