"""`extract --token-scores [N | IDS]`: which instances get per-token scores, what they cost, and their group.

The option's value: a count N (a seeded choice spread evenly across the cohorts and the never-trained instances), a
comma list of instance ids, or ``@FILE`` (ids separated by commas, spaces or new lines). The choice is made once, at
launch: the panel's token-score group (``memtui.panel.token_scores``) records it, every worker reads it from there,
and a rerun continues it (a rerun asking for another subset is refused). Nothing here imports torch.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.panel.model import Panel
from memtui.panel.token_scores import read_layout, width_of

SEED = 0  # the choice of N instances is the same on every run and every worker
_INT = re.compile(r"^-?\d+$")
USAGE = "give a count N, a comma list of instance ids (3,17,42) or @FILE of ids"


def parse(spec: str) -> int | list[int]:
    """The option's value as a count or a list of ids, checked without the panel (one-line refusals)."""
    text = str(spec).strip()
    if text.startswith("@"):
        return _ids(_read_file(text[1:]), f"the file {clean(text[1:], 120)}")
    if "," not in text:
        if not _INT.match(text):
            raise MemtuiError(f"--token-scores '{clean(text, 60)}' is neither a count nor instance ids; {USAGE}.")
        n = int(text)
        if n <= 0:
            raise MemtuiError(f"--token-scores {n}: the count must be at least 1; {USAGE}.")
        return n
    return _ids(text, "--token-scores")


def _read_file(name: str) -> str:
    path = Path(name)
    try:
        if not path.is_file():
            raise MemtuiError(f"--token-scores @{clean(name, 120)}: no such file; {USAGE}.")
        if path.stat().st_size > 64 << 20:
            raise MemtuiError(f"--token-scores @{clean(name, 120)} is larger than 64 MiB; it should list instance ids.")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise MemtuiError(f"--token-scores @{clean(name, 120)} cannot be read ({reason}).") from None


def _ids(text: str, where: str) -> list[int]:
    items = [t for t in re.split(r"[\s,]+", text.strip()) if t]
    bad = [t for t in items if not _INT.match(t)]
    if bad:
        raise MemtuiError(f"{where}: '{clean(bad[0], 40)}' is not an instance id (ids are whole numbers); {USAGE}.")
    if not items:
        raise MemtuiError(f"{where} lists no instance ids; {USAGE}.")
    ids = [int(t) for t in items]
    twice = sorted(v for v, count in Counter(ids).items() if count > 1)
    if twice:
        raise MemtuiError(f"{where} lists instance id {twice[0]} more than once; list each id once.")
    return ids


def choose(treatment: np.ndarray, lengths: np.ndarray | None, n: int, seed: int = SEED) -> np.ndarray:
    """``n`` rows spread evenly across the cohorts and the never-trained rows (round robin over the groups, each
    group's rows in a seeded random order); rows without a target (fewer than two tokens) only where the others run
    out. Sorted."""
    rng = np.random.default_rng(seed)
    scoreable = np.ones(len(treatment), bool) if lengths is None else np.asarray(lengths) >= 2
    queues, rest = [], []
    for group in np.unique(treatment):
        members = np.flatnonzero(treatment == group)
        members = members[rng.permutation(len(members))]
        queues.append(members[scoreable[members]])
        rest += members[~scoreable[members]].tolist()
    picked: list[int] = []
    for depth in range(max(map(len, queues))):
        picked += [int(q[depth]) for q in queues if depth < len(q)]
    picked = (picked + rest)[:n]
    return np.sort(np.array(picked, dtype=np.int64))


def resolve(spec: str, panel: Panel) -> np.ndarray:
    """The panel rows ``spec`` names (sorted), refused in one line where it does not fit the panel."""
    wanted = parse(spec)
    n = panel.n_instances
    if isinstance(wanted, int):
        if wanted > n:
            raise MemtuiError(f"--token-scores {wanted}: the panel has only {n} instances; give at most {n}.")
        return choose(panel.treatment, panel.lengths, wanted)
    row_of = {int(v): i for i, v in enumerate(panel.ids)}
    missing = [v for v in wanted if v not in row_of]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise MemtuiError(f"--token-scores: instance id {missing[0]}{more} is not in {panel.path}; see `memtui info`.")
    return np.sort(np.array([row_of[v] for v in wanted], dtype=np.int64))


def check(panel_path: Path, panel: Panel, spec: str | None) -> np.ndarray | None:
    """The rows a launch would store per-token scores for: ``spec``'s (refused where the panel already stores them
    for another subset), else the panel's own subset, else None."""
    layout = read_layout(panel_path)
    if spec is None:
        return None if layout is None else layout.rows
    rows = resolve(spec, panel)
    if layout is not None and not np.array_equal(layout.rows, rows):
        raise MemtuiError(
            f"{panel_path} already stores per-token scores for another {len(layout.rows)} instances; drop "
            "--token-scores to go on with those (a panel holds one subset), or extract into a copy made before them."
        )
    return rows


def pending(panel_path: Path, panel: Panel, rows: np.ndarray | None) -> np.ndarray:
    """Which checkpoints a run must still score: metrics not committed, or per-token scores asked for and missing."""
    if rows is None:
        return ~panel.done
    layout = read_layout(panel_path)
    token_done = layout.done if layout is not None else np.zeros(panel.n_checkpoints, bool)
    return ~(panel.done & token_done)


def estimate_bytes(panel: Panel, rows: np.ndarray, checkpoints: int) -> int:
    """float16 per target, before compression: instances x checkpoints x the longest row's targets."""
    lengths = panel.lengths if panel.lengths is not None else np.full(panel.n_instances, 2)
    return 2 * len(rows) * checkpoints * width_of(lengths, rows)


def estimate_line(panel: Panel, rows: np.ndarray, checkpoints: int) -> str:
    """The size estimate a launch prints before it starts (and ``--dry-run``'s plan)."""
    lengths = panel.lengths if panel.lengths is not None else np.full(panel.n_instances, 2)
    size = estimate_bytes(panel, rows, checkpoints)
    return (
        f"per-token scores for {len(rows)} instances x {checkpoints} checkpoint(s) x up to "
        f"{width_of(lengths, rows)} targets: about {fmt_bytes(size)} (float16 before compression; the panel grows "
        "by it as checkpoints are committed)"
    )


def fmt_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def ensure_group(panel_path: Path, spec: str | None, me=None) -> None:
    """Make the panel's token-score group for ``spec`` if it has none (holding the commit lease, so no commit runs
    while the file is replaced); a group already there must be for the same subset (:func:`check`)."""
    if spec is None:
        return
    from memtui.extract.commit import Lease
    from memtui.extract.units import Owner, WorkDir
    from memtui.panel.hdf5 import read_panel
    from memtui.panel.superblock import clear_writer_flags
    from memtui.panel.token_scores import create_group

    panel = read_panel(panel_path)
    rows = check(panel_path, panel, spec)
    if read_layout(panel_path) is not None:
        return
    lease = Lease(WorkDir(panel_path).ensure(), me or Owner.me())
    if not lease.acquire():
        raise MemtuiError(f"{panel_path}: an extraction is committing into it; rerun when it has finished.")
    try:
        if read_layout(panel_path) is None:  # made meanwhile by another worker of this launch: it is the same
            clear_writer_flags(panel_path)  # a committer killed mid-commit leaves HDF5's mark; the lease is ours
            create_group(panel_path, rows)
    finally:
        lease.release()


def free_space_needed(panel_path: Path, panel: Panel, spec: str | None) -> int:
    """Bytes the per-token scores of a launch may add to the panel (0 without them)."""
    rows = check(panel_path, panel, spec)
    if rows is None:
        return 0
    return estimate_bytes(panel, rows, int(pending(panel_path, panel, rows).sum()))


def check_space(panel_path: Path, panel: Panel, spec: str | None) -> None:
    """Refuse a launch whose per-token scores would not fit beside the panel (the panel grows by them)."""
    import shutil

    from memtui.extract.units import MIN_FREE_BYTES

    needed = free_space_needed(panel_path, panel, spec)
    if not needed:
        return
    try:
        free = shutil.disk_usage(panel_path.parent).free
    except OSError:
        return
    if free < needed + MIN_FREE_BYTES:
        raise MemtuiError(
            f"only {fmt_bytes(free)} are free on the filesystem of {panel_path}; its per-token scores need about "
            f"{fmt_bytes(needed)}: free some space, or ask for fewer instances with --token-scores."
        )


def launch_estimate(panel_path: Path, options) -> str | None:
    """The size line a launch prints before it starts (None without per-token scores): the requested checkpoints
    still to score, the subset's instances and targets."""
    from memtui.extract.checkpoints import parse_checkpoints
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(panel_path)
    rows = check(Path(panel_path), panel, options.token_scores)
    if rows is None:
        return None
    todo = pending(Path(panel_path), panel, rows)
    requested = parse_checkpoints(options.checkpoints)
    if requested is not None:
        todo &= np.isin(panel.steps, requested)
    return estimate_line(panel, rows, int(todo.sum()))
