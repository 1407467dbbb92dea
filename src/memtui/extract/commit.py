"""Folding finished parts into the panel: one committer at a time, whoever it is, surviving the committer's death.

Workers never open the panel for writing while they score. After writing a part, a worker tries to become the
committer by creating ``PANEL.work/commit.lease`` with O_EXCL (a lease like a claim: owner inside, touched while
folding, taken over when stale or when its owner is a dead process on this host). The committer folds every
checkpoint whose parts cover all its instances, with the panel's own protocol (columns, flush, done flag, flush),
deletes those parts, releases the lease, and looks again: a part written while the lease was held is then folded
either by this committer's second look or by its writer's own attempt, which comes after the release. Folding is
idempotent: a checkpoint already done is only cleaned up, so a committer killed at any point leaves work that the
next one finishes. HDF5's one-writer rule holds because only the lease holder opens the panel for writing.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.extract.units import Owner, Unit, WorkDir, panel_metrics, parse_unit_name, stale_s
from memtui.panel.hdf5 import PanelWriter, read_done
from memtui.panel.superblock import clear_writer_flags


class Lease:
    """The committer's lease: ``PANEL.work/commit.lease``."""

    def __init__(self, work: WorkDir, me: Owner):
        self.path = work.root / "commit.lease"
        self.me = me

    def acquire(self) -> bool:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                if not self._take_over_if_stale():
                    return False
                continue
            try:
                os.write(fd, self.me.to_json().encode())
            finally:
                os.close(fd)
            return True
        return False

    def _holder(self) -> Owner | None:
        try:
            return Owner.from_json(self.path.read_text()[:4096])
        except (OSError, UnicodeDecodeError):
            return None

    def _take_over_if_stale(self) -> bool:
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return True
        holder = self._holder()
        if not ((holder is not None and holder.is_gone(self.me)) or age > stale_s()):
            return False
        tomb = self.path.with_name(f"commit.lease.gone.{self.me.token}")
        try:
            os.rename(self.path, tomb)
        except FileNotFoundError:
            return True
        with contextlib.suppress(OSError):
            tomb.unlink()
        return True

    def still_ours(self) -> bool:
        """Refresh the lease; False if another committer took it (we were too slow: stop writing at once)."""
        holder = self._holder()
        if holder is None or holder.token != self.me.token:
            return False
        with contextlib.suppress(OSError):
            os.utime(self.path)
        return True

    def release(self) -> None:
        if self.still_ours():
            with contextlib.suppress(OSError):
                self.path.unlink()


def finished_steps(work: WorkDir, panel_steps: np.ndarray, n: int) -> dict[int, list[Unit]]:
    """Steps whose parts cover every instance row, with those parts (for one split; the finest complete one)."""
    by_step: dict[int, dict[int, list[Unit]]] = defaultdict(lambda: defaultdict(list))
    for path in work.part_files():
        unit = parse_unit_name(path.name, panel_steps)
        if unit is not None:
            by_step[unit.step][unit.split].append(unit)
    out = {}
    for step, splits in by_step.items():
        for split, units in sorted(splits.items()):
            units = sorted(units, key=lambda u: u.lo)
            contiguous = all(a.hi == b.lo for a, b in zip(units, units[1:], strict=False))
            covered = units[0].lo == 0 and units[-1].hi == n and contiguous
            if covered and len(units) == split:
                out[step] = units
                break
    return out


def commit_ready(panel: Path, work: WorkDir, me: Owner, log: Callable[[str], None] = print) -> int:
    """Fold whatever is ready, if no other committer is at it; the number of checkpoints committed."""
    committed = 0
    for _ in range(1000):  # each round folds at least one checkpoint or ends
        lease = Lease(work, me)
        if not lease.acquire():
            return committed
        try:
            folded = _fold(panel, work, lease, log)
        finally:
            lease.release()
        committed += folded
        if not folded:
            return committed
    return committed


def _fold(panel: Path, work: WorkDir, lease: Lease, log: Callable[[str], None]) -> int:
    steps, done = read_done(panel)
    n = _n_instances(panel)
    ready = finished_steps(work, steps, n)
    for step in [s for s in ready if done[np.flatnonzero(steps == s)[0]]]:  # committed before a crash: clean up
        for unit in ready.pop(step):
            work.drop(unit)
    if not ready:
        return 0
    clear_writer_flags(panel)  # the lease makes us the only writer; a killed committer may have left HDF5's mark
    folded = 0
    with PanelWriter(panel) as writer:
        # exactly the panel's metrics: a part may carry more (written for a panel with extractability), never fewer
        metrics = panel_metrics(writer.panel.metrics)
        for step in sorted(ready):
            if not lease.still_ours():
                log("lost the commit lease to another committer; stopping")
                break
            units = ready[step]
            cols = {m: np.full(n, np.nan) for m in metrics}
            meta = {}
            for unit in units:
                try:
                    part, meta = work.read_part(unit, metrics)
                except (OSError, ValueError, KeyError, MemtuiError) as exc:
                    log(f"part {unit.name} is unreadable ({exc}); it will be scored again")
                    work.drop(unit)
                    break
                for m in metrics:
                    cols[m][unit.lo : unit.hi] = part[m]
            else:
                writer.write_checkpoint(
                    units[0].index,
                    cols,
                    revision=meta.get("revision"),
                    weights_hash=meta.get("weights_hash", ""),
                    model=meta.get("model", ""),
                    parameters=int(meta.get("parameters", 0)),
                    config=meta.get("config", ""),
                )
                for unit in units:
                    work.drop(unit)
                folded += 1
                log(f"committed step {step} ({len(units)} part{'s' if len(units) > 1 else ''})")
    return folded


def _n_instances(panel: Path) -> int:
    from memtui.panel.hdf5 import read_shape

    return read_shape(panel)[0]
