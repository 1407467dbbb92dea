"""The sample panels shipped with memtui, so `memtui` has something to open after a plain `pip install`.

They live in the checkout's top-level ``sample_panels/`` folder; building a wheel copies them into the package as
``memtui/sample_panels/`` (setup.py), so an installed memtui finds them there and a source checkout finds the folder.

- ``synthetic``: a simulated panel with a known true memorisation profile (`memtui sample synthetic`);
- ``tiny-gptneox``: a real tiny GPT-NeoX's profile, made on CPU by `memtui demo`;
- ``tiny-gptneox-tokens``: a smaller real GPT-NeoX (`memtui demo --small`'s) with per-token scores for every
  instance, made by `memtui sample tiny-gptneox-tokens` (the Instance screen colours its texts);
- ``suite-neox-41k`` ... ``suite-neox-858k``: a real suite, four sizes on the same instances, made by
  `memtui demo --suite` (docs/findings.md is its report); ``memtui --sample suite`` opens the four together.

Open one with ``memtui --sample NAME``; ``memtui`` alone opens ``synthetic``.
"""

from __future__ import annotations

import os
from pathlib import Path

from memtui.core.errors import MemtuiError

SAMPLES = {
    "synthetic": "a simulated panel with a known true profile",
    "tiny-gptneox": "a real tiny GPT-NeoX trained and extracted on CPU by `memtui demo`",
    "tiny-gptneox-tokens": "a smaller real GPT-NeoX with per-token scores, made by `memtui sample tiny-gptneox-tokens`",
    **{
        f"suite-neox-{size}": f"the {size}-parameter model of the suite made by `memtui demo --suite`"
        for size in ("41k", "132k", "384k", "858k")
    },
}
SUITE = [name for name in SAMPLES if name.startswith("suite-")]  # smallest first
SUITE_NAME = "suite"  # `memtui --sample suite`: every model of the shipped suite at once
DEFAULT = "synthetic"


def sample_paths(name: str) -> list[Path]:
    """The files of sample ``name``: one, or the whole shipped suite for ``suite``."""
    return [sample_path(n) for n in SUITE] if name == SUITE_NAME else [sample_path(name)]


def sample_dir() -> Path:
    """The folder of the shipped samples: the package's copy (a wheel), else the source checkout's folder."""
    package = Path(__file__).resolve().parents[1]  # src/memtui (checkout) or site-packages/memtui (installed)
    installed = package / "sample_panels"
    if installed.is_dir():
        return installed
    return package.parents[1] / "sample_panels"


def sample_path(name: str = DEFAULT) -> Path:
    """Where the shipped sample ``name`` is."""
    if name not in SAMPLES:
        raise MemtuiError(f"no sample '{name}'; the shipped samples are {', '.join(SAMPLES)}.")
    return sample_dir() / f"{name}.h5"


def is_sample(path: str | os.PathLike) -> bool:
    """Whether ``path`` is one of the shipped sample files (they are read-only data: nothing is written beside them)."""
    try:
        return Path(path).resolve().parent == sample_dir().resolve()
    except OSError:
        return False


def default_panel() -> Path:
    """The panel the workbench opens when none is named."""
    return sample_path(DEFAULT)
