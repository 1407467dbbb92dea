"""The shipped sample ``tiny-gptneox-tokens``: the small demo's model with per-token scores for every instance.

It is `memtui demo --small`'s training and panel (``DemoConfig.small()``: a 2 x 64 GPT-NeoX, 96 steps, 13
checkpoints, 352 instances of 65 byte tokens) extracted with ``--token-scores`` for all 352 instances, so the Instance
screen colours every text it opens. `memtui sample tiny-gptneox-tokens OUT` makes it on CPU (about a minute on idle
cores); the shipped file was made so:

    memtui sample tiny-gptneox-tokens sample_panels/tiny-gptneox-tokens.h5 --force

Training on CPU repeats on one machine; another BLAS may change the last bits of the weights, and so of the metrics
(tests/demo/test_token_sample.py checks the shipped file's own invariants, and a fresh run's shape).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

NAME = "tiny-gptneox-tokens"
SUMMARY = "the small demo model trained here on CPU, extracted with per-token scores for every instance (~1 min)"


def make_token_sample(out: str | Path, *, overwrite: bool = False, log: Callable[[str], None] = print) -> Path:
    """Train the small demo model, build its panel and extract it with per-token scores for every instance."""
    from memtui.demo.train import DemoConfig, make_demo  # torch and h5py: not at `memtui --help`

    return make_demo(out, DemoConfig.small(), overwrite=overwrite, log=log, token_scores="all")
