"""Checkpoints that are one another: a published revision can be bit-identical to another, whole or in one shard.

86 of pythia-2.8b's 154 branches equal ``main`` (EleutherAI/pythia#205); pythia-12b's step50000 and step58000 carry
the final model's first shard (#206). Scoring such a revision fills a column with another checkpoint's values under
the wrong step, so ``extract`` refuses to record it (the column stays undone, a record in ``PANEL.work/duplicates/``
that ``memtui info`` shows) and ``fetch`` names, from the hub's LFS sha256 of each weight file, every revision whose
files equal another's.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from memtui.extract.units import work_dir, write_in_work


def duplicates_dir(panel: str | os.PathLike) -> Path:
    return work_dir(panel) / "duplicates"


def record_duplicate(panel: str | os.PathLike, step: int, same_as: int, revision: str, weights_hash: str) -> None:
    """Remember that ``step``'s weights are ``same_as``'s (one small file per step: workers never write the same)."""
    folder = duplicates_dir(panel)
    body = json.dumps({"step": int(step), "same_as": int(same_as), "revision": revision, "weights_hash": weights_hash})
    # informative only (the log has the same line): a full disk or a planted link must not stop the extraction
    with contextlib.suppress(OSError):  # through the work folder itself: never through a link swapped in for it
        write_in_work(folder.parent, folder.name, f"{int(step)}.json", body.encode())


def clear_duplicate(panel: str | os.PathLike, step: int) -> None:
    """``step`` was scored after all (its revision was fixed on the hub): its old record no longer holds."""
    with contextlib.suppress(OSError):
        (duplicates_dir(panel) / f"{int(step)}.json").unlink()


def read_duplicates(panel: str | os.PathLike) -> list[tuple[int, int]]:
    """(step, same_as) for every step refused as a copy of another, by step; unreadable records are skipped."""
    found = []
    folder = duplicates_dir(panel)
    if not folder.is_dir() or folder.is_symlink():
        return []
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
            found.append((int(record["step"]), int(record["same_as"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found)


def same_files(hashes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per revision whose weight files equal another revision's: all of them (the same checkpoint) or
    single shards. ``hashes``: revision -> weight file name -> sha256 (the hub's LFS oid), in the order to report;
    a revision is compared with every other, and named against the first that holds the same file."""
    owner: dict[str, tuple[str, str]] = {}  # sha256 -> (revision, file) that first holds it
    whole: dict[frozenset, str] = {}  # the set of a revision's weight hashes -> the first revision with it
    for revision, files in hashes.items():
        for name, sha in sorted(files.items()):
            owner.setdefault(sha, (revision, name))
        if files:
            whole.setdefault(frozenset(files.values()), revision)
    lines = []
    for revision, files in hashes.items():
        if not files:
            continue
        twin = whole[frozenset(files.values())]
        if twin != revision:
            lines.append(f"duplicate weights: {revision} = {twin} (every weight file)")
            continue
        shared = [(name, *owner[sha]) for name, sha in sorted(files.items()) if owner[sha][0] != revision]
        if shared:
            pairs = ", ".join(f"{revision}/{name} = {other}/{other_name}" for name, other, other_name in shared)
            lines.append(f"duplicate shard{'s' if len(shared) > 1 else ''}: {pairs}")
    return lines
