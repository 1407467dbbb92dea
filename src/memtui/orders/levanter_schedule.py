"""Levanter's batch-size schedule and mixture weight stages, as its config states them (memtui.orders.levanter).

Transcribed from github.com/stanford-crfm/levanter at commit 9263f81e8b453241332c2c0b2d2001bfb2d2241c:

- ``src/levanter/trainer.py``: ``train_batch_size: int | IntSchedule``, an ``IntSchedule`` a list of
  ``ScheduleStep(start, value)`` (YAML ``[{start: 0, value: 64}, {start: 64, value: 128}]``, as
  ``config/gpt2_small_fast_batch_schedule.yaml``); ``batch_schedule = BatchSchedule(train_batch_size)``.
- ``src/levanter/schedule.py`` ``BatchSchedule``: segment i runs steps ``[start_i, start_{i+1})`` at ``value_i``
  sequences a step, its data offset the sum of the earlier segments' ``(until − start)·value``; 0-based step s reads
  global indices ``[global_data_offset_by_step(s), … + batch_size_at_step(s))`` (``data/loader.py``), the last
  segment held for ever. ``find_step_containing_offset`` inverts it (here vectorised: :meth:`BatchSchedule.step_of`).
  Levanter checks nothing of the list; memtui refuses what would make the offsets run backwards or a segment apply to
  no step (a first start other than 0, starts that do not increase).
- ``src/levanter/data/text.py`` ``LMMixtureDatasetConfig.train_weights: Dict[str, float] | List[Tuple[int,
  Dict[str, float]]]`` (YAML ``[[0, {owt: 0.5, tulu: 0.5}], [1000, {owt: 0.2, tulu: 0.8}]]``,
  ``docs/guides/Training-Data-Guide.md``), each stage's keys a subset of the configs'; ``train_set`` turns each stage's
  *step* into a sequence index with ``rescale_mixture_schedule_for_batch_schedule`` (``data/mixture.py``:
  ``global_data_offset_by_step``; a negative step only last, as −1, which ``MixtureDataset`` then rejects), and
  ``MixtureDataset`` asserts the first stage starts at 0 and every later one at a multiple of ``mixture_block_size``
  after the one before; ``_normalize_weights`` refuses a stage whose weights sum to 0 or hold a negative weight.
"""

from __future__ import annotations

import math

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean

MAX_START = 2**36  # steps: far beyond any run, and offsets stay within int64 below MAX_BATCH
MAX_BATCH = 2**24  # sequences a step
_MAX_TEXT = 100_000


def read_yaml_value(text: str, option: str):
    """A YAML value given on the command line, as Levanter's config (draccus, YAML) reads it."""
    import yaml

    if len(text) > _MAX_TEXT:
        raise MemtuiError(f"{option}: more than {_MAX_TEXT:,} characters; give the schedule itself.")
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise MemtuiError(f"{option}: not YAML: {clean(str(exc).splitlines()[0] if str(exc) else exc, 120)}") from None


def _shown(value) -> str:
    """A value for a message: a scalar as written, a list or mapping by its kind (str() of a YAML alias bomb would
    expand it)."""
    if value is None or isinstance(value, bool | int | float | str):
        return clean(value, 40)
    return f"a {'list' if isinstance(value, list) else 'mapping' if isinstance(value, dict) else 'value'}"


def _whole(value, option: str, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise MemtuiError(f"{option}: {what} must be a whole number from {lo} to {hi}, not {_shown(value)}.")
    return value


class BatchSchedule:
    """Levanter's ``BatchSchedule``: step (0-based) <-> global data offset, over segments (start, batch size)."""

    def __init__(self, segments: list[tuple[int, int]]):
        if not segments or segments[0][0] != 0:
            raise MemtuiError("a batch schedule starts at step 0.")
        self.starts = np.array([s for s, _ in segments], dtype=np.int64)
        self.values = np.array([v for _, v in segments], dtype=np.int64)
        if (np.diff(self.starts) <= 0).any() or (self.values < 1).any():
            raise MemtuiError("a batch schedule's starts must increase and its batch sizes be at least 1.")
        lengths = np.diff(self.starts) * self.values[:-1]
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    @classmethod
    def constant(cls, batch: int) -> BatchSchedule:
        return cls([(0, batch)])

    @property
    def constant_batch(self) -> int | None:
        return int(self.values[0]) if len(self.values) == 1 else None

    def _segment(self, steps: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, steps, side="right") - 1

    def offset(self, steps) -> np.ndarray:
        """``global_data_offset_by_step``: the first global index read at each (0-based) step."""
        steps = np.asarray(steps, dtype=np.int64)
        seg = self._segment(steps)
        return self.offsets[seg] + (steps - self.starts[seg]) * self.values[seg]

    def batch_at(self, steps) -> np.ndarray:
        """``batch_size_at_step``."""
        return self.values[self._segment(np.asarray(steps, dtype=np.int64))]

    def step_of(self, positions) -> np.ndarray:
        """``find_step_containing_offset``: the 0-based step that reads each global index (>= 0)."""
        positions = np.asarray(positions, dtype=np.int64)
        seg = np.searchsorted(self.offsets, positions, side="right") - 1
        return self.starts[seg] + (positions - self.offsets[seg]) // self.values[seg]

    def steps_within(self, n: int) -> int:
        """How many whole steps ``n`` global indices fill (the steps a dataset of n rows runs)."""
        return int(self.step_of(np.array([n]))[0])  # the step holding index n is the first not filled

    def describe(self) -> str:
        return ", ".join(
            f"{v} from step {s + 1}" for s, v in zip(self.starts.tolist(), self.values.tolist(), strict=True)
        )


def parse_batch_schedule(text: str, option: str = "--batch-schedule") -> BatchSchedule:
    """``train_batch_size`` as a schedule: a YAML list of ``{start: STEP, value: BATCH}`` (Levanter's
    ``ScheduleStep``), the first at step 0, the starts increasing."""
    value = read_yaml_value(text, option)
    if not isinstance(value, list) or not value:
        raise MemtuiError(f"{option} takes a YAML list of {{start: STEP, value: BATCH}}, as Levanter's config.")
    segments = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"start", "value"}:
            raise MemtuiError(f"{option}: each entry is {{start: STEP, value: BATCH}}, not {_shown(item)}.")
        start = _whole(item["start"], option, "start", 0, MAX_START)
        segments.append((start, _whole(item["value"], option, "value (a batch size)", 1, MAX_BATCH)))
    if segments[0][0] != 0:
        raise MemtuiError(f"{option}: the first entry starts at step 0, not {segments[0][0]}.")
    for (a, _), (b, _) in zip(segments, segments[1:], strict=False):
        if b <= a:
            raise MemtuiError(
                f"{option}: starts must increase (step {b} after step {a}); an entry whose start is not after the "
                "one before applies to no step: drop it."
            )
    return BatchSchedule(segments)


def _stage_weights(raw, option: str, names: list[str]) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise MemtuiError(f"{option}: a stage's weights are a mapping {{NAME: W, …}}, not {_shown(raw)}.")
    out: dict[str, float] = {}
    for name, w in raw.items():
        if name not in names:
            raise MemtuiError(f"{option} names '{clean(name, 60)}', which no --caches entry names.")
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
            raise MemtuiError(f"{option}: the weight of '{clean(name, 60)}' must be a number >= 0, not {_shown(w)}.")
        out[name] = float(w)
    if not sum(out.values()) > 0:
        raise MemtuiError(f"{option}: a stage's weights sum to 0 (Levanter refuses it); give a positive weight.")
    return out


def parse_train_weights(text: str, names: list[str], option: str = "--train-weights") -> list[tuple[int, dict]]:
    """``train_weights``: a YAML mapping ``{NAME: W}`` (one stage) or a list of ``[STEP, {NAME: W, …}]`` stages,
    the steps increasing from 0. Each stage's weights in its own order (Levanter sums them in that order)."""
    value = read_yaml_value(text, option)
    if isinstance(value, dict):
        return [(0, _stage_weights(value, option, names))]
    if not isinstance(value, list) or not value:
        raise MemtuiError(f"{option} takes {{NAME: W, …}} or a YAML list of [STEP, {{NAME: W, …}}], as Levanter's.")
    stages = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            raise MemtuiError(f"{option}: each stage is [STEP, {{NAME: W, …}}], not {_shown(item)}.")
        step = _whole(item[0], option, "a stage's step", 0, MAX_START)
        stages.append((step, _stage_weights(item[1], option, names)))
    if stages[0][0] != 0:
        raise MemtuiError(f"{option}: the first stage starts at step 0 (Levanter asserts it), not {stages[0][0]}.")
    for (a, _), (b, _) in zip(stages, stages[1:], strict=False):
        if b <= a:
            raise MemtuiError(
                f"{option}: stages must be sorted by step, each after the one before (step {b} after {a})."
            )
    return stages


def stage_offsets(stages: list[tuple[int, dict]], schedule: BatchSchedule, block_size: int) -> list[int]:
    """``rescale_mixture_schedule_for_batch_schedule``: each stage's step as a sequence index, checked as
    ``MixtureDataset`` asserts (a multiple of the block size, after the stage before)."""
    out = [int(x) for x in schedule.offset(np.array([s for s, _ in stages], dtype=np.int64)).tolist()]
    for (step, _), start in zip(stages[1:], out[1:], strict=True):
        if start % block_size:
            raise MemtuiError(
                f"--train-weights: the stage at step {step} starts at sequence {start}, not a multiple of the mixture "
                f"block ({block_size}); Levanter refuses it (MixtureDataset asserts it)."
            )
    return out
