"""A tiny GPT-NeoX and a panel for it, shared by the extraction tests: real models, real checkpoints, seconds on CPU."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER

VOCAB = 101
STEPS = [0, 10, 20, 30, 40]


def tiny_model(
    seed: int = 0, vocab: int = VOCAB, hidden: int = 32, positions: int = 64, sharpen: float = 1.0
) -> GPTNeoXForCausalLM:
    """A randomly initialised 2-layer GPT-NeoX; ``sharpen`` scales the output embedding so that predictions are
    confident (ranks and entropies then vary across tokens, as in a trained model)."""
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=positions,
    )
    model = GPTNeoXForCausalLM(cfg).eval()
    if sharpen != 1.0:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(sharpen)
    return model


def save_checkpoints(root: Path, steps=STEPS, copies: dict[int, int] | None = None) -> Path:
    """Checkpoint folders step0 ... step40, each its own weights; ``copies`` {step: other} saves ``step`` with
    ``other``'s weights (the hub has such duplicates, EleutherAI/pythia#205), which extract refuses to record."""
    copies = copies or {}
    for step in steps:
        tiny_model(seed=copies.get(step, step)).save_pretrained(root / f"step{step}")
    (root / "notes").mkdir(exist_ok=True)  # other folders are ignored
    return root


def make_panel(path: Path, n_train: int = 24, n_val: int = 16, length: int = 24, tokens=None) -> Path:
    rng = np.random.default_rng(0)
    n = n_train + n_val
    if tokens is None:
        tokens = rng.integers(0, VOCAB, size=(n, length))
    lengths = np.full(n, length)
    lengths[::5] = rng.integers(2, length, size=len(lengths[::5]))  # some shorter instances
    tokens[np.arange(length)[None, :] >= lengths[:, None]] = -1
    treatment = np.r_[np.repeat([10, 20, 30, 40], n_train // 4), np.full(n_val, NEVER)]
    return create_panel(path, ids=np.arange(n), treatment=treatment, steps=STEPS, tokens=tokens, lengths=lengths)


def wait_until(cond, timeout: float = 240.0, every: float = 0.1, what: str = ""):
    """Poll detached workers or SLURM tasks, which report only through their files; cond()'s first truthy value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what or cond}")
