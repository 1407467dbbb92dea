"""DataDecide (AI2, 2025): 25 corpora x 14 sizes x 3 seeds trained with OLMo's trainer, as seed suites over the OLMo
order (``memtui build --order datadecide``).

What the suite's own sources say (allenai/DataDecide, quoted in docs/suites.md):

- models ``allenai/DataDecide-{recipe}-{size}``, sizes 4M, 6M, 8M, 10M, 14M, 16M, 20M, 60M, 90M, 150M, 300M, 530M,
  750M, 1B (README and ``release/repo_names.txt``);
- each checkpoint a branch ``step{N}-seed-{name}`` (``release/upload_checkpoints.py``, commit ``baee26e1``), the
  seeds ``SEED_MAPPING = {6198: "default", 14: "small aux 2", 15: "small aux 3", 4: "large aux 2", 5: "large aux
  3"}`` with spaces as hyphens; every size has the first three, 1B all five (``get_checkpoints`` asserts 3 or 5
  checkpoint sets, 5 only for 1B);
- checkpoints every 1,250 steps (2,500 for 1B) and the run's last step, off that grid (``checkpoints/
  weka_paths.jsonl``, commit ``76405dfb``: 60M ``step0 … step28750, step29042``; 1B ``step0, step2500 …
  step69369``), as OLMo's ladder saves them (allenai/OLMo ``scripts/ladder.py``: ``save_interval = {"1B": 2500,
  "7B": 1000}.get(args.model, 1250)``).

**The order under each seed.** OLMo's trainer shuffles the data with ``data.seed``, else the run's ``seed``
(memtui's :func:`memtui.orders.olmo.olmo_stage` reads it so). The ladder configs set no ``data.seed``, so a DataDecide
seed is also its data order's seed: the same token files, shuffled by ``PCG64(seed + epoch)``. An instance is one
fixed-length window of the token files under every seed (its global instance number is its id); under seed s it sits
at the position the seed's shuffle gives it, trained at step ``position // B + 1``. Which ladder script ran DataDecide
was not found (the stored ``scripts/ladder.py`` versions write ``seed=6198`` into every config while naming runs by
seed): where a config does set ``data.seed``, every seed has that one order, and the suite's panels share their
treatments (the seeds then differ by initialisation only; the build says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.revisions import DATADECIDE_SEED_NAMES, DATADECIDE_SEEDS

SIZES = ("4M", "6M", "8M", "10M", "14M", "16M", "20M", "60M", "90M", "150M", "300M", "530M", "750M", "1B")
SMALL_SEEDS = ("default", "small-aux-2", "small-aux-3")  # every size
LARGE_SEEDS = ("large-aux-2", "large-aux-3")  # 1B only
_NUMBERS = {name: number for number, name in DATADECIDE_SEEDS.items()}
NEVER = -1


def checkpoint_interval(size: str) -> int:
    """Steps between DataDecide's saved checkpoints at ``size`` (the ladder's save interval)."""
    if size not in SIZES:
        raise MemtuiError(f"DataDecide has sizes {', '.join(SIZES)}, not '{size}'.")
    return 2500 if size == "1B" else 1250


def parse_seeds(text: str) -> list[tuple[str, int]]:
    """``default,small-aux-2`` or ``6198,14`` as (name, seed) pairs, in the order given (the first is the home seed,
    whose cohorts the panel samples)."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        if part in _NUMBERS:
            pair = (part, _NUMBERS[part])
        elif part.isdigit() and int(part) in DATADECIDE_SEEDS:
            pair = (DATADECIDE_SEEDS[int(part)], int(part))
        else:
            raise MemtuiError(
                f"--seeds: DataDecide's seeds are {', '.join(DATADECIDE_SEED_NAMES)} "
                f"({', '.join(map(str, DATADECIDE_SEEDS))}), not '{part[:40]}'."
            )
        if pair in out:
            raise MemtuiError(f"--seeds names seed {pair[0]} twice; give each once.")
        out.append(pair)
    if not out:
        raise MemtuiError("--seeds names no seed; give e.g. default,small-aux-2,small-aux-3.")
    return out


def positions_under(order, ids: np.ndarray) -> np.ndarray:
    """The position of each instance number in ``ids`` in ``order`` (a whole permutation, e.g. a ShuffledOrder made
    an array); -1 where the order does not hold it (a tail it drops)."""
    full = np.asarray(order)
    ids = np.asarray(ids, dtype=np.int64)
    out = np.full(len(ids), -1, dtype=np.int64)
    if not len(ids):
        return out
    hit = np.flatnonzero(np.isin(full, ids, kind="table"))  # a table of the ids' range: one pass over the order
    values = full[hit].astype(np.int64)
    sorter = np.argsort(values, kind="stable")
    at = np.searchsorted(values, ids, sorter=sorter)
    at = np.minimum(at, max(len(values) - 1, 0))
    found = len(values) > 0
    if found:
        match = values[sorter[at]] == ids
        out[match] = hit[sorter[at]][match]
    return out


def treatment_under(
    positions: np.ndarray, batch: int, offset: int, steps: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(training step, treatment) of each position: step ``offset + position // batch + 1``, treated at the first
    panel checkpoint at or after it; NEVER for a position no panel checkpoint has trained (or -1: not in the order)."""
    positions = np.asarray(positions, dtype=np.int64)
    step = np.where(positions >= 0, offset + positions // batch + 1, NEVER)
    checkpoints = np.asarray(sorted(int(s) for s in steps), dtype=np.int64)
    k = np.searchsorted(checkpoints, step, "left")
    inside = (step >= 1) & (k < len(checkpoints))
    treat = np.where(inside, checkpoints[np.minimum(k, len(checkpoints) - 1)], NEVER)
    return step, treat


def parse_size_configs(text: str) -> list[tuple[str, Path]]:
    """``4M=c4m.yaml,60M=c60m.yaml`` as (size, config) pairs, each size DataDecide's and named once."""
    out: list[tuple[str, Path]] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        size, sep, config = part.partition("=")
        size = size.strip()
        if not sep or not config.strip():
            raise MemtuiError(f"--size-configs: '{part[:60]}' is not SIZE=CONFIG (e.g. 60M=configs/60m.yaml).")
        checkpoint_interval(size)  # refuses a size DataDecide does not have
        if any(size == s for s, _ in out):
            raise MemtuiError(f"--size-configs names size {size} twice; give each once.")
        out.append((size, Path(config.strip())))
    if not out:
        raise MemtuiError("--size-configs names no size; give e.g. 4M=c4m.yaml,60M=c60m.yaml.")
    return out


def duration_steps(config: str | Path) -> int | None:
    """The run's last step from an OLMo config's ``max_duration``, as OLMo's ``Trainer.max_steps`` reads it (allenai/
    OLMo ``olmo/train.py``): an int is steps; ``"{N}T"`` is N tokens, ``N // tokens per step`` steps; ``"{N}"`` steps
    (both parsed through float: ``1e11T``); ``"{E}ep"`` (epochs) gives None here (the order's length decides)."""
    from memtui.orders.olmo import _read_yaml

    cfg = _read_yaml(Path(config))
    duration = cfg.get("max_duration")
    batch, model = cfg.get("global_train_batch_size"), cfg.get("model")
    seq = model.get("max_sequence_length") if isinstance(model, dict) else None
    if isinstance(duration, bool) or duration is None:
        return None
    if isinstance(duration, int):
        return duration if duration > 0 else None
    text = str(duration).strip()
    tokens = text.endswith("T")
    try:
        value = int(float(text[:-1] if tokens else text))
    except (ValueError, OverflowError):
        return None
    if not tokens:
        return value if value > 0 else None
    if not (isinstance(batch, int) and isinstance(seq, int) and batch > 0 and seq > 0):
        return None
    return value // (batch * seq) or None
