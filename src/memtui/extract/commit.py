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
import hashlib
import json
import os
import stat
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.extract.locking import create_held, lock_state
from memtui.extract.units import (
    UNREADABLE_GRACE_S,
    Owner,
    PartError,
    PartMismatch,
    Unit,
    WorkDir,
    age_s,
    panel_metrics,
    parse_unit_name,
    stale_s,
)
from memtui.panel import scoring
from memtui.panel.hdf5 import PanelWriter, read_done
from memtui.panel.superblock import clear_writer_flags
from memtui.panel.token_scores import Layout, read_layout, write_column

Expect = Callable[[int], dict]  # step -> {"model": ..., "revision": ...} this run scores it with


@dataclass(frozen=True)
class Seen:
    """One observation of the lease file: which file it is (device, inode and a digest of its content, so that a new
    lease on a reused inode is another lease), when it was last touched, its holder (None: empty or garbled), and
    whether a process holds its flock (None: the filesystem has no flock, or the file is not a regular file)."""

    key: str
    mtime: float
    holder: Owner | None
    held: bool | None = None


class Lease:
    """The committer's lease: ``PANEL.work/commit.lease``.

    It is created whole (:func:`create_held`: a full disk never leaves an empty lease) and is taken over only by
    compare-and-swap: a taker that judged the lease it observed stale must first create that lease's own takeover
    marker (``commit.lease.takeover.KEY``, created with ``link``, which only one creator wins), so of any number of
    racing takers exactly one proceeds, and it removes the lease only after checking that the file there is still
    the one observed (only the marker's holder may remove it). The holder releases its lease through the same
    marker, so a release never removes a successor's lease either. An empty or garbled lease is no lease.

    Which lease is stale: the lease and every marker are created with an exclusive flock already on them, held by
    their creator until it lets go (the kernel drops it when the process dies, however it dies). A locked file's
    holder lives, whatever its pid or host say, so it is never taken over — before, a live committer that held no
    worker lock (``memtui covariates``) or whose lock /proc/locks named differently, or a marker's holder slower
    than the stale limit, was judged gone, and two committers wrote at once. Only where the filesystem has no flock
    (some Lustre mounts; NFSv4 shares flock between hosts) does the holder's pid and heartbeat decide, as before:
    creation by ``link`` stays the one primitive correctness rests on, flock only tells the living from the dead.
    """

    def __init__(self, work: WorkDir, me: Owner):
        self.work = work
        self.path = work.root / "commit.lease"
        self.me = me
        self._mine: Seen | None = None
        self._fd: int | None = None  # the lease file, flocked while it is ours

    def acquire(self) -> bool:
        for _ in range(3):
            fd = create_held(self.path, self._content(), self.me.token)
            if fd is not None:
                self._fd = fd
                self._mine = self.observe()
                if self._mine is not None and self._mine.holder is not None:
                    return True
                self._let_go()
                return False
            seen = self.observe()
            if seen is None:
                continue  # released between our try and our look: try again
            if not self.is_stale(seen) or not self._remove(seen):
                return False
        return False

    def _content(self) -> bytes:
        """What a new lease holds: its owner, and a nonce of this taking. Without the nonce, an owner that released
        its lease and took it again at once wrote the same bytes, often on the inode just freed: a taker that had
        judged the first lease gone then found "the same" lease there, and removed the live second one."""
        return json.dumps({**json.loads(self.me.to_json()), "lease": uuid.uuid4().hex}).encode()

    def observe(self) -> Seen | None:
        """The lease there now, or None."""
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                return None
            except OSError:  # a link or something odd planted there: judge it by lstat, it has no holder
                try:
                    st = os.stat(self.path, follow_symlinks=False)
                except FileNotFoundError:
                    return None
                return Seen(f"{st.st_dev}:{st.st_ino}:odd", st.st_mtime, None)
            seen = _seen(fd, self.path)
            if seen is not None:
                return seen
        return None  # released and taken again under our eyes each time: nothing stale to judge

    def is_stale(self, seen: Seen) -> bool:
        if seen.held:  # the kernel says its creator still holds it: a live committer, never taken over
            return False
        age = age_s(seen.mtime)
        if seen.holder is None:  # empty or garbled (a full disk, a crash of an older memtui): nobody's lease
            return age > min(stale_s(), UNREADABLE_GRACE_S)
        return seen.holder.is_gone(self.me, self.work) or age > stale_s()

    def _marker(self, seen: Seen) -> Path:
        digest = hashlib.blake2b(seen.key.encode(), digest_size=8).hexdigest()
        return self.path.with_name(f"commit.lease.takeover.{digest}")

    def _hold_marker(self, seen: Seen) -> tuple[Path, int] | None:
        """Create the takeover marker of the lease ``seen`` (one winner), flocked; a marker left by a taker that died
        before finishing (no process holds it, or, without flock, it is older than the stale limit) is removed and
        the creation tried again. A marker whose taker lives is never removed: only it may move the lease."""
        marker = self._marker(seen)
        for _ in range(2):
            fd = create_held(marker, self.me.to_json().encode(), self.me.token)
            if fd is not None:
                return marker, fd
            try:
                other = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                continue
            except OSError:
                return None
            # ``other`` stays open until the marker is judged and moved: its inode cannot be freed and reused by
            # a new taker's marker meanwhile, so the identity checks below tell the two apart
            try:
                held, st = lock_state(other), os.fstat(other)
                if _identity(marker) != (st.st_dev, st.st_ino):
                    continue  # its taker finished and let go while we looked: unlocked says nothing, look again
                if held or (held is None and age_s(st.st_mtime) <= stale_s()):
                    return None
                tomb = marker.with_name(f"{marker.name}.gone.{self.me.token}")
                with contextlib.suppress(OSError):
                    os.rename(marker, tomb)
                    if _identity(tomb) == (st.st_dev, st.st_ino):
                        os.unlink(tomb)
                    else:  # a new taker's marker replaced the abandoned one meanwhile: give it back (link: never
                        os.link(tomb, marker, follow_symlinks=False)  # over a third's), and leave this lease to it
                        os.unlink(tomb)
                        return None
            finally:
                os.close(other)
        return None

    def _remove(self, seen: Seen) -> bool:
        """Remove exactly the lease ``seen``, never another (compare-and-swap); True if the name is free now."""
        held = self._hold_marker(seen)
        if held is None:
            return False  # another taker (or its holder's release) is at it
        marker, marker_fd = held
        try:
            now = self.observe()
            if now is None:
                return True
            if now.key != seen.key:
                return False  # a new lease replaced the one we judged: it is not ours to take
            tomb = self.path.with_name(f"commit.lease.gone.{self.me.token}")
            os.rename(self.path, tomb)  # still the lease observed: only the marker's holder may move it
            with contextlib.suppress(OSError):
                os.unlink(tomb)
            return True
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(marker)
            os.close(marker_fd)

    def still_ours(self) -> bool:
        """Refresh the lease; False if another committer took it (we were too slow: stop writing at once)."""
        now = self.observe()
        mine = self._mine
        if mine is None or now is None or now.key != mine.key or self._marker(mine).exists():
            return False
        with contextlib.suppress(OSError):  # through our descriptor: never the mtime of a file put there since
            os.utime(self._fd if self._fd is not None else self.path)
        return True

    def release(self) -> None:
        try:
            if self._mine is not None and self.still_ours():
                self._remove(self._mine)
        finally:
            self._mine = None
            self._let_go()

    def _let_go(self) -> None:
        """Close the lease file, which drops its flock (after it is gone from its name: nobody sees it unlocked)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _seen(fd: int, path: Path) -> Seen | None:
    """The observation of the lease file open at ``fd`` (closed here); None if ``path`` no longer names that file
    once its lock is tested. A holder lets go of its lock only after its lease is gone from the name, so a lease
    removed while we looked reads unlocked although its holder lives: taken for a dead holder's, a taker went on to
    remove whatever lease was there by then."""
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        data = f.read(4096) if regular else b""
        held = lock_state(fd) if regular else None
        if _identity(path) != (st.st_dev, st.st_ino):  # while fd is open the inode cannot be another file's
            return None
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    try:
        holder = Owner.from_json(data.decode())
    except UnicodeDecodeError:
        holder = None
    return Seen(f"{st.st_dev}:{st.st_ino}:{digest}", st.st_mtime, holder, held)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def describe_lease(work: WorkDir, me: Owner) -> str:
    """Who holds the commit lease, in words, for the log and status ("" where there is none)."""
    lease = Lease(work, me)
    seen = lease.observe()
    if seen is None:
        return ""
    age = age_s(seen.mtime)
    touched = "a timestamp in the future" if age == float("inf") else f"touched {age:,.0f} s ago"
    if seen.holder is None:
        return f"{lease.path} is empty or garbled ({touched}; a full disk?): it is no lease and is taken over"
    holder = seen.holder
    if lease.is_stale(seen):
        return f"{lease.path} names {holder.host} pid {holder.pid}, which is gone ({touched}): it is taken over"
    where = "this host" if holder.host == me.host else f"host {holder.host}"
    return f"the commit lease is held by {where} pid {holder.pid} ({touched})"


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


def commit_ready(
    panel: Path, work: WorkDir, me: Owner, log: Callable[[str], None] = print, expect: Expect | None = None
) -> int:
    """Fold whatever is ready, if no other committer is at it; the number of checkpoints committed. ``expect(step)``
    gives the model and revision this run scores the step with: a part scored by another is discarded (a column never
    mixes two models), as are the parts of a step that disagree on their weights."""
    committed = 0
    for _ in range(1000):  # each round folds at least one checkpoint or ends
        lease = Lease(work, me)
        if not lease.acquire():
            return committed
        try:
            folded = _fold(panel, work, lease, log, expect)
        finally:
            lease.release()
        committed += folded
        if not folded:
            return committed
    return committed


def _fold(panel: Path, work: WorkDir, lease: Lease, log: Callable[[str], None], expect: Expect | None) -> int:
    steps, done = read_done(panel)
    layout = read_layout(panel)  # per-token scores: a checkpoint is complete with them too
    complete = done if layout is None else done & layout.done
    n = _n_instances(panel)
    ready = finished_steps(work, steps, n)
    for step in [s for s in ready if complete[np.flatnonzero(steps == s)[0]]]:  # committed before a crash: clean up
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
            index = units[0].index
            tokens = layout if layout is not None and not layout.done[index] else None
            got = _read_step(work, step, units, metrics, n, expect(step) if expect else None, log, tokens)
            if got is not None and not done[index] and got[1].get("tokens_only") is True:
                log(f"the parts of step {step} carry per-token scores only, but its metrics are not committed; they "
                    "are scored again")  # fmt: skip
                got = _discard(work, units)
            if got is not None:
                cols, meta, per_token = got
                if per_token is not None:  # first: a kill before the metrics' done flag rescores both
                    write_column(writer._f, index, per_token)
                if not done[index]:
                    _write_metrics(writer, index, cols, meta)
                for unit in units:
                    work.drop(unit)
                folded += 1
                log(f"committed step {step} ({len(units)} part{'s' if len(units) > 1 else ''})")
    return folded


def _write_metrics(writer: PanelWriter, index: int, cols: dict[str, np.ndarray], meta: dict) -> None:
    writer.write_checkpoint(
        index,
        cols,
        revision=meta.get("revision"),
        weights_hash=meta.get("weights_hash", ""),
        model=meta.get("model", ""),
        parameters=int(meta.get("parameters", 0)),
        config=meta.get("config", ""),
        average=meta.get("average", ""),  # the weight-average mark, kept in the panel (parts of older runs: none)
        scoring=meta.get("scoring", ""),  # device, dtype and scorer path (likewise)
    )


def _discard(work: WorkDir, units: list[Unit]) -> None:
    for unit in units:
        work.drop(unit)


def _read_step(
    work: WorkDir,
    step: int,
    units: list[Unit],
    metrics,
    n: int,
    expected: dict | None,
    log: Callable[[str], None],
    tokens: Layout | None = None,
) -> tuple[dict[str, np.ndarray], dict, np.ndarray | None] | None:
    """The step's columns from its parts, their meta and, with the panel's per-token ``tokens`` layout, the step's
    per-token scores (subset rows x W); None when a part had to go (its unit is scored again): unreadable or
    ill-typed parts are set aside (named, one line each), another model's parts (or parts without the per-token
    scores the panel asks for) are discarded, and parts that disagree on the weights they were scored with are all
    discarded."""
    cols = {m: np.full(n, np.nan) for m in metrics}
    per_token = None if tokens is None else np.full((len(tokens.rows), tokens.width), np.nan, np.float32)
    metas, complete = [], True
    for unit in units:
        try:
            part, meta = work.read_part(unit, metrics, expected)
            if tokens is not None:
                inside = (tokens.rows >= unit.lo) & (tokens.rows < unit.hi)
                per_token[inside] = work.read_part_tokens(unit, tokens.rows[inside], tokens.width)
        except PartMismatch as exc:
            log(f"discarded part {unit.name}: {exc}; it is scored again")
            work.drop(unit)
            complete = False
            continue
        except PartError as exc:
            where = work.set_aside(unit)
            log(f"part {exc}; {f'set aside as {where}' if where else 'deleted'}, its unit is scored again")
            complete = False
            continue
        metas.append(meta)
        for m in metrics:
            cols[m][unit.lo : unit.hi] = part[m]
    if not complete:
        return None
    identities = {(m.get("model"), m.get("revision"), m.get("weights_hash")) for m in metas}
    if len(identities) > 1:
        log(f"the {len(units)} parts of step {step} were scored with different weights; all are discarded and "
            "scored again")  # fmt: skip
        return _discard(work, units)
    # a part scored for its per-token scores alone (its step's metrics were committed) has no metric columns
    tokens_only = any(m.get("tokens_only") is True for m in metas)
    # parts scored in different ways (another dtype, device or scorer path) are kept, and the column says so
    ways = scoring.combine([m.get("scoring", "") for m in metas])
    return cols, {**metas[0], "tokens_only": tokens_only, "scoring": ways}, per_token


def _n_instances(panel: Path) -> int:
    from memtui.panel.hdf5 import read_shape

    return read_shape(panel)[0]
