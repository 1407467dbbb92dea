"""Checkpoint manifests: a run's list of checkpoints, read instead of a revision template, its gaps said up front.

Two formats, each read as the families publish them:

- **OLMo-core's checkpoint CSVs** (allenai/OLMo-core ``src/scripts/official/OLMo3/OLMo-3-1025-7B.csv``, commit
  ``0b95421d``; ``OLMo2/OLMo-2-0325-32B-stage2.csv``, commit ``83d423d8``): a header ``Stage,Step,Checkpoint
  Directory`` (OLMo 3: ``stage1_pretraining,1000,https://olmo-checkpoints.org/ai2-llm/Olmo-3-1025-7B/stage1/
  step1000/``, stages ``stage1_pretraining``, ``stage2_midtraining``, ``stage_3_longcontext``, each restarting its
  step count) or ``Ingredient,Step,Checkpoint Directory`` (OLMo 2 32B's stage 2: ingredients 1, 2, 3 and a last row
  ``soup,11921,…/soup/step11921-unsharded/``, the weight average of the ingredients). A column named ``Revision``
  (the hub's branch) and one named ``Average`` (the kind of weight average, empty for a trained checkpoint) may be
  added by hand; other columns are kept out. The checkpoint directory is what the row names when no revision is.
- **``revisions.txt``**: one revision per line (the hub's branch names, as ``huggingface_hub.list_repo_refs``
  gives them); blank lines and ``#`` comments are skipped; a line may add ``average`` or ``average=KIND`` after the
  name to mark a weight average. The step is read from the name: ``step{N}`` (Pythia, OLMo, DataDecide's
  ``step{N}-seed-default``), ``step-{N}`` (SmolLM2's ``step-125000``, the FineWeb ablations' ``step-001000-2BT``),
  ``ckpt_{N}`` (Amber); a name with none is refused naming its line.

A manifest selects one stage (``stage=``) where it lists several, since stages restart their step counts. What it
finds irregular — a step off the run's checkpoint interval, a step the interval expects but the list lacks, a name
that does not follow the others' pattern (OLMo 2's ``step…`` branches among ``stage1-step…`` ones) — is listed by
``irregularities`` for ``extract --dry-run`` and ``info``, never discovered by a worker mid-extraction.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.paths import input_file
from memtui.core.text import clean

# where a step sits in a revision name, in the order tried (the first match wins)
STEP_PATTERNS = (
    re.compile(r"(?:^|[-_/])step-?(\d+)(?=$|[-_/])"),
    re.compile(r"(?:^|[-_/])ckpt_(\d+)(?=$|[-_/])"),
)
_MAX_BYTES = 64 << 20  # a manifest lists thousands of checkpoints, never gigabytes: refuse before reading a disk
_MAX_ROWS = 1_000_000
_STEP_MAX = 2**53
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")
CSV_STEP, CSV_DIRECTORY = "Step", "Checkpoint Directory"
CSV_STAGE_COLUMNS = ("Stage", "Ingredient")
CSV_SOUP = "soup"  # OLMo 2 32B's stage-2 CSV names the ingredients' weight average so in its Ingredient column


@dataclass(frozen=True)
class Checkpoint:
    """One listed checkpoint: its step, the name extraction loads it by, its stage and, for a weight average, what
    kind (``soup``, ``ema``, ``average``; empty for a trained checkpoint)."""

    step: int
    revision: str
    stage: str = ""
    average: str = ""


@dataclass(frozen=True)
class Manifest:
    source: str
    checkpoints: tuple[Checkpoint, ...]
    stages: tuple[str, ...] = ()  # every stage the file lists, in its order
    notes: tuple[str, ...] = field(default_factory=tuple)  # what reading it had to say (a stage chosen, ...)

    @property
    def steps(self) -> list[int]:
        return sorted(c.step for c in self.checkpoints)

    def by_step(self) -> dict[int, Checkpoint]:
        return {c.step: c for c in self.checkpoints}

    def revision(self, step: int) -> str:
        found = self.by_step().get(int(step))
        if found is None:
            near = _nearest(self.steps, int(step))
            raise MemtuiError(
                f"{clean(self.source)} lists no checkpoint at step {int(step)} (nearest: {near}); choose listed steps "
                "(`memtui extract --dry-run` lists what is missing)."
            )
        return found.revision

    def averages(self) -> dict[int, str]:
        """step -> kind, for the checkpoints that are weight averages."""
        return {c.step: c.average for c in self.checkpoints if c.average}


def _nearest(steps: Sequence[int], step: int) -> str:
    if not steps:
        return "none"
    best = min(steps, key=lambda s: (abs(s - step), s))
    return str(best)


def step_in_name(name: str) -> int | None:
    """The training step a revision name carries (``step1000-tokens4B``, ``step-001000-2BT``, ``ckpt_042``)."""
    for pattern in STEP_PATTERNS:
        found = pattern.search(name)
        if found:
            return int(found.group(1))
    return None


def read_manifest(path: str | Path, *, stage: str | None = None) -> Manifest:
    """A CSV (OLMo-core's) or a ``revisions.txt``, told apart by the first line (a header naming ``Step``)."""
    path = input_file(path, "checkpoint manifest")
    size = path.stat().st_size
    if size > _MAX_BYTES:
        raise MemtuiError(f"{clean(path)}: {size:,} bytes is no checkpoint manifest (at most {_MAX_BYTES:,}).")
    raw = path.read_bytes()
    if b"\x00" in raw:
        raise MemtuiError(f"{clean(path)}: holds NUL bytes; a checkpoint manifest is text (CSV or one name a line).")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MemtuiError(f"{clean(path)}: not UTF-8 text; a checkpoint manifest is a CSV or a name a line.") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise MemtuiError(f"{clean(path)}: empty; list one revision a line, or give OLMo-core's checkpoint CSV.")
    header = [h.strip() for h in next(csv.reader([first]))]
    if CSV_STEP in header:
        return _from_csv(path, text, stage)
    if stage is not None:
        raise MemtuiError(f"{clean(path)}: a revisions list has no stages; drop the stage ({clean(stage, 60)}).")
    return _from_lines(path, text)


def _whole_step(text: str, where: str) -> int:
    value = text.strip()
    if not value.isdigit() or not value.isascii():
        raise MemtuiError(f"{where}: step '{clean(value, 40)}' is not a whole number of steps.")
    step = int(value)
    if step > _STEP_MAX:
        raise MemtuiError(f"{where}: step {clean(value, 40)} is beyond 2**53; no run has that many steps.")
    return step


def _kind(text: str, where: str) -> str:
    kind = text.strip()
    if kind and not _KIND.match(kind):
        raise MemtuiError(
            f"{where}: weight-average kind '{clean(kind, 40)}' must be a short name (letters, digits, - or _), "
            "e.g. ema, soup, average."
        )
    return kind.lower()


def _from_lines(path: Path, text: str) -> Manifest:
    found: list[Checkpoint] = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        where = f"{clean(path)} line {number}"
        name, *flags = body.split()
        average = ""
        for flag in flags:
            key, _, value = flag.partition("=")
            if key != "average":
                raise MemtuiError(
                    f"{where}: '{clean(flag, 40)}' after the revision; a line is a name, optionally followed by "
                    "average or average=KIND."
                )
            average = _kind(value, where) or "average"
        step = step_in_name(name)
        if step is None:
            raise MemtuiError(
                f"{where}: no step in '{clean(name, 80)}' (step{{N}}, step-{{N}} or ckpt_{{N}}); list branch names "
                "that carry their step, or use OLMo-core's CSV (a Step column)."
            )
        if step > _STEP_MAX:
            raise MemtuiError(f"{where}: step {step} is beyond 2**53; no run has that many steps.")
        found.append(Checkpoint(step, name, "", average))
        if len(found) > _MAX_ROWS:
            raise MemtuiError(f"{clean(path)}: more than {_MAX_ROWS:,} revisions; no run has that many checkpoints.")
    return Manifest(str(path), _unique(found, path), ())


def _from_csv(path: Path, text: str, stage: str | None) -> Manifest:
    rows = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(rows)]
    dupes = sorted(h for h, n in Counter(header).items() if n > 1)
    if dupes:
        raise MemtuiError(f"{clean(path)}: column {clean(dupes[0], 40)} appears twice in the header; keep one.")
    col = {name: i for i, name in enumerate(header)}
    if CSV_DIRECTORY not in col and "Revision" not in col:
        raise MemtuiError(
            f"{clean(path)}: a checkpoint CSV needs '{CSV_DIRECTORY}' or 'Revision' beside 'Step' "
            f"(it has {clean(', '.join(header), 120)})."
        )
    stage_col = next((c for c in CSV_STAGE_COLUMNS if c in col), None)
    found: list[Checkpoint] = []
    for number, row in enumerate(rows, 2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{clean(path)} line {number}"
        if len(row) != len(header):
            raise MemtuiError(f"{where}: {len(row)} fields for {len(header)} columns; every row needs each column.")
        cells = {name: row[i].strip() for name, i in col.items()}
        kind = _kind(cells.get("Average", ""), where)
        label = cells.get(stage_col, "") if stage_col else ""
        if stage_col == "Ingredient" and label.lower() == CSV_SOUP:
            kind = kind or CSV_SOUP
        revision = cells.get("Revision") or cells.get(CSV_DIRECTORY, "")
        if not revision:
            raise MemtuiError(f"{where}: no revision or checkpoint directory; fill it or drop the row.")
        found.append(Checkpoint(_whole_step(cells[CSV_STEP], where), revision, label, kind))
        if len(found) > _MAX_ROWS:
            raise MemtuiError(f"{clean(path)}: more than {_MAX_ROWS:,} rows; no run has that many checkpoints.")
    if not found:
        raise MemtuiError(f"{clean(path)}: a header and no checkpoints; it lists none.")
    stages = tuple(dict.fromkeys(c.stage for c in found))
    notes: tuple[str, ...] = ()
    if stage is not None:
        chosen = [c for c in found if c.stage == stage]
        if not chosen:
            raise MemtuiError(
                f"{clean(path)}: no stage '{clean(stage, 60)}'; it lists {clean(', '.join(stages), 200)}."
            )
        found, notes = chosen, (f"stage {stage} of {len(stages)} listed",)
    elif len(stages) > 1:
        raise MemtuiError(
            f"{clean(path)}: lists {len(stages)} stages ({clean(', '.join(stages), 200)}) that restart their step "
            "counts; name one (extract --manifest-stage STAGE)."
        )
    return Manifest(str(path), _unique(found, path), stages, notes)


def _unique(found: list[Checkpoint], path: Path) -> tuple[Checkpoint, ...]:
    seen: dict[int, Checkpoint] = {}
    for c in found:
        other = seen.get(c.step)
        if other is not None and other.revision != c.revision:
            raise MemtuiError(
                f"{clean(path)}: step {c.step} is listed twice ({clean(other.revision, 80)}, {clean(c.revision, 80)}); "
                "a step is one checkpoint: keep one (or select a stage)."
            )
        seen[c.step] = c
    if not seen:
        raise MemtuiError(f"{clean(path)}: lists no revision (only blank lines or comments).")
    return tuple(seen[s] for s in sorted(seen))


# -- what is irregular ------------------------------------------------------------------------------------------------


def interval(steps: Sequence[int]) -> int | None:
    """The run's checkpoint interval: the most common gap between listed steps (None below three steps)."""
    gaps = Counter(b - a for a, b in zip(steps, steps[1:], strict=False) if b > a)
    if len(steps) < 3 or not gaps:
        return None
    return max(gaps.items(), key=lambda kv: (kv[1], -kv[0]))[0]  # the most common; the finer on a tie


def _name_shape(name: str) -> str:
    """A name with its digits folded: ``stage1-step928646-tokens3896B`` -> ``stage#-step#-tokens#B``."""
    return re.sub(r"\d+", "#", name.rsplit("/", 1)[-1] or name)


def irregularities(manifest: Manifest, panel_steps: Sequence[int] | None = None, limit: int = 8) -> list[str]:
    """One line per kind of irregularity: steps off the interval, steps the interval expects and the list lacks, names
    shaped unlike the others, weight averages, and (with ``panel_steps``) the panel's steps the manifest lacks."""
    steps = manifest.steps
    lines = []
    every = interval(steps)
    if every:
        off = [s for s in steps if s % every]
        gaps = [s for a, b in zip(steps, steps[1:], strict=False) for s in range(a - a % every + every, b, every)]
        if off:
            lines.append(f"off the {every}-step interval: steps {_shown(off, limit)}")
        if gaps:
            lines.append(f"missing from the {every}-step interval: steps {_shown(gaps, limit)}")
    shapes = Counter(_name_shape(c.revision) for c in manifest.checkpoints)
    if len(shapes) > 1:
        usual = shapes.most_common(1)[0][0]
        odd = [c for c in manifest.checkpoints if _name_shape(c.revision) != usual]
        names = ", ".join(clean(c.revision.rsplit("/", 1)[-1] or c.revision, 60) for c in odd[:3])
        more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
        lines.append(f"named unlike the others ({clean(usual, 60)}): {names}{more}")
    averages = manifest.averages()
    if averages:
        shown = ", ".join(f"{s} ({k})" for s, k in list(averages.items())[:limit])
        lines.append(f"weight averages, not one model's training state: steps {shown}")
    if panel_steps is not None:
        have = set(steps)
        lacking = [int(s) for s in panel_steps if int(s) not in have]
        if lacking:
            lines.append(f"panel steps the manifest lacks (not extracted): {_shown(lacking, limit)}")
    return lines


def _shown(values: Sequence[int], limit: int) -> str:
    text = ", ".join(map(str, values[:limit]))
    return text + (f" … ({len(values)} in all)" if len(values) > limit else "")
