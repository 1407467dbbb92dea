"""`memtui demo`: train a tiny GPT-NeoX from scratch on CPU, one pass, and make a real panel from its checkpoints.

Corpus. Every sentence describes one character of the Unicode 3.2 database (``unicodedata.ucd_3_2_0``, frozen and
shipped with every Python 3; Unicode never changes a character's name or these properties once assigned), e.g.
"U+00E0 is latin small letter a with grave, a lowercase letter written left to right; it decomposes into latin
small letter a and combining grave accent." So the corpus is English text that is identical on every machine and
Python version, needs no download and no shipped data. Sentences are ordered by a keyed hash (stable everywhere),
packed into rows of ``seq_len`` bytes; a byte-level tokenizer (token = byte, vocabulary 256) turns text into ids.

Training. One pass over the rows in order, ``batch`` rows per step (so row r is trained at step r // batch + 1), a
constant high learning rate after a short warm-up (what makes a ~1M-parameter model's step-g update visibly raise
the log-likelihood of batch g), and a ``from_pretrained`` checkpoint every ``every`` steps. The rows are written as a
Pythia-layout memmap, the panel is built from it like any other (per macro-batch of ``every`` steps, k batches x m
rows; never-trained validation rows), and extracted from the checkpoint folders.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

from memtui.core.files import refuse_existing
from memtui.demo.workdir import work_folder
from memtui.panel.hdf5 import text_attr

VOCAB = 256

_CATEGORY = {
    "Lu": "an uppercase letter",
    "Ll": "a lowercase letter",
    "Lt": "a titlecase letter",
    "Lm": "a modifier letter",
    "Lo": "a letter",
    "Mn": "a nonspacing mark",
    "Mc": "a spacing mark",
    "Me": "an enclosing mark",
    "Nd": "a decimal digit",
    "Nl": "a letter number",
    "No": "a number",
    "Pc": "a connector punctuation mark",
    "Pd": "a dash",
    "Ps": "an opening bracket",
    "Pe": "a closing bracket",
    "Pi": "an opening quotation mark",
    "Pf": "a closing quotation mark",
    "Po": "a punctuation mark",
    "Sm": "a mathematical symbol",
    "Sc": "a currency symbol",
    "Sk": "a modifier symbol",
    "So": "a symbol",
    "Zs": "a space",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Cc": "a control character",
    "Cf": "a format character",
}
_DIRECTION = {
    "L": "written left to right",
    "R": "written right to left",
    "AL": "written right to left in Arabic script",
    "EN": "read as a European number",
    "AN": "read as an Arabic number",
    "ES": "a number separator",
    "ET": "a number terminator",
    "CS": "a common number separator",
    "NSM": "taking the direction of its base",
    "WS": "white space",
    "ON": "neutral in direction",
    "B": "a paragraph break",
    "S": "a segment break",
    "BN": "ignored for direction",
    "LRE": "an embedding control",
    "RLE": "an embedding control",
    "LRO": "an override control",
    "RLO": "an override control",
    "PDF": "a formatting pop",
}


def encode(text: str) -> np.ndarray:
    """Byte-level tokenizer: token id = UTF-8 byte."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def decode(ids) -> str:
    return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


def _sentence(cp: int, db) -> str | None:
    c = chr(cp)
    name = db.name(c, None)
    if name is None or name.startswith(("CJK UNIFIED", "HANGUL SYLLABLE", "CJK COMPATIBILITY IDEOGRAPH")):
        return None
    cat = _CATEGORY.get(db.category(c))
    if cat is None:
        return None
    text = f"U+{cp:04X} is {name.lower()}, {cat}"
    direction = _DIRECTION.get(db.bidirectional(c))
    if direction and db.bidirectional(c) not in ("ON",):
        text += f" {direction}" if direction.startswith("written") else f", {direction}"
    if db.mirrored(c):
        text += ", mirrored in right-to-left text"
    dec = db.decomposition(c)
    if dec:
        tag = ""
        parts = dec.split()
        if parts[0].startswith("<"):
            tag, parts = parts[0].strip("<>"), parts[1:]
        names = [db.name(chr(int(p, 16)), None) for p in parts]
        if all(names):
            how = "decomposes into" if not tag else f"is a {tag} form of"
            text += f"; it {how} {' and '.join(n.lower() for n in names)}"
    value = db.numeric(c, None)
    if value is not None:
        text += f"; its value is {int(value) if float(value).is_integer() else round(value, 4)}"
    return text + ".\n"


def corpus_text(seed: int = 0) -> str:
    """The whole corpus: one sentence per character of Unicode 3.2, in a keyed-hash order."""
    db = unicodedata.ucd_3_2_0
    sentences = [s for cp in range(0x30000) if (s := _sentence(cp, db))]
    key = f"memtui-demo-{seed}".encode()
    sentences.sort(key=lambda s: hashlib.blake2b(s.encode(), key=key, digest_size=8).digest())
    return "".join(sentences)


@dataclass
class DemoConfig:
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    intermediate: int = 512
    seq_len: int = 65  # tokens per row: 64 predicted
    batch: int = 16  # rows per training step
    steps: int = 320  # training steps (one pass over steps * batch rows)
    every: int = 8  # checkpoint (and macro-batch) every this many steps
    k: int = 4  # batches sampled per macro-batch
    m: int = 12  # rows sampled per batch (48 per cohort: with a dozen the bootstrap bands run narrow)
    n_validation: int = 512
    lr: float = 3e-3
    warmup: int = 16
    seed: int = 0
    # "constant" (after the warm-up: what the single demo uses) or "cosine": Pythia's shape, linear warm-up then
    # cosine decay to ``min_lr_ratio`` of the peak at the last step
    schedule: str = "constant"
    min_lr_ratio: float = 0.1

    @classmethod
    def small(cls) -> DemoConfig:
        """A < 1 minute version for tests."""
        return cls(hidden=64, layers=2, heads=4, intermediate=256, steps=96, every=8, k=2, m=8, n_validation=160)


def lr_at(cfg: DemoConfig, step: int) -> float:
    """The learning rate of training step ``step`` (1-based: the update that makes checkpoint ``step``)."""
    warm = min(1.0, step / max(1, cfg.warmup))
    if cfg.schedule == "constant" or step <= cfg.warmup:
        return cfg.lr * warm
    if cfg.schedule != "cosine":
        raise ValueError(f"unknown schedule {cfg.schedule!r}")
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_model(cfg: DemoConfig):
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(cfg.seed)
    conf = GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate,
        max_position_embeddings=max(256, cfg.seq_len),
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    return GPTNeoXForCausalLM(conf)


def corpus_rows(cfg: DemoConfig) -> tuple[np.ndarray, np.ndarray]:
    """(training rows in order, validation rows): consecutive seq_len-token rows of the corpus."""
    ids = encode(corpus_text(cfg.seed))
    n_rows = len(ids) // cfg.seq_len
    rows = ids[: n_rows * cfg.seq_len].reshape(n_rows, cfg.seq_len)
    n_train = cfg.steps * cfg.batch
    if n_train + cfg.n_validation > n_rows:
        raise ValueError(f"the corpus has {n_rows} rows, fewer than {n_train} + {cfg.n_validation} asked for")
    return rows[:n_train], rows[n_rows - cfg.n_validation :]


def train(
    cfg: DemoConfig,
    rows: np.ndarray,
    out_dir: Path,
    log: Callable[[str], None] = print,
    fed: Callable[[int, np.ndarray], None] | None = None,
) -> list[int]:
    """One pass over ``rows`` in order; saves ``out_dir/stepN`` every ``cfg.every`` steps (and step 0). ``fed(step,
    batch)`` is told each batch as the loop feeds it (``demo --seeds`` checks its panels' treatments against it)."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = make_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"training a {n_params / 1e6:.2f}M-parameter GPT-NeoX for {cfg.steps} steps of {cfg.batch} x {cfg.seq_len}")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(cfg, s + 1) / cfg.lr)  # s updates done so far
    saved = [0]
    model.save_pretrained(out_dir / "step0")
    data = torch.as_tensor(rows.astype(np.int64))
    t0 = time.time()
    model.train()
    for step in range(1, cfg.steps + 1):
        x = data[(step - 1) * cfg.batch : step * cfg.batch]
        if fed is not None:
            fed(step, x.numpy().copy())
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % cfg.every == 0:
            model.save_pretrained(out_dir / f"step{step}")
            saved.append(step)
        if step % max(1, cfg.steps // 8) == 0:
            log(f"  step {step}/{cfg.steps}: loss {loss.item():.3f} ({time.time() - t0:.0f} s)")
    return saved


def make_demo(
    out: str | Path,
    cfg: DemoConfig | None = None,
    *,
    workdir: str | Path | None = None,
    keep: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
    token_scores: str | None = None,
) -> Path:
    """Train, save checkpoints, build the panel and extract it. Returns the panel path. ``token_scores``: extract's
    ``--token-scores`` value (per-token scores for that subset), or ``"all"`` for every instance of the panel."""
    import torch

    from memtui.extract.worker import run

    cfg = cfg or DemoConfig()
    out = Path(out)
    refuse_existing(out, overwrite)
    work = work_folder(workdir)
    t0 = time.time()
    try:
        train_rows, val_rows = corpus_rows(cfg)
        train_rows.astype(np.uint16).tofile(work / "train.bin")  # Pythia layout: uint16 rows in training order
        np.save(work / "validation.npy", val_rows.astype(np.uint16))
        saved = train(cfg, train_rows, work / "checkpoints", log)
        description = (
            f"memtui demo: GPT-NeoX {cfg.layers}x{cfg.hidden} trained from scratch for {cfg.steps} steps "
            f"({cfg.batch} x {cfg.seq_len} byte tokens) on Unicode 3.2 character descriptions"
        )
        _build_demo_panel(out, work, cfg, saved, overwrite)
        if token_scores == "all":
            from memtui.panel.hdf5 import read_panel

            token_scores = str(read_panel(out).n_instances)
        threads = torch.get_num_threads()
        log(f"extracting {len(saved)} checkpoints on {threads} CPU thread(s)")
        run(
            out,
            model=str(work / "checkpoints"),
            checkpoints="all",
            device="cpu",
            dtype="float32",
            handle_signals=False,
            log=log,
            token_scores=token_scores,
        )
        _label_demo_panel(out, description, work)
        log(f"made {out} in {time.time() - t0:.0f} s")
    finally:
        if not keep and workdir is None:
            shutil.rmtree(work, ignore_errors=True)
        from memtui.extract.units import work_dir

        shutil.rmtree(work_dir(out), ignore_errors=True)  # the demo's own run is over: no claims, parts or records
    return out


def _build_demo_panel(out: Path, work: Path, cfg: DemoConfig, saved, overwrite: bool) -> None:
    """The demo's panel over the training rows and validation rows written in ``work``, at the saved checkpoints."""
    from memtui.extract.build import build_from_memmap

    build_from_memmap(
        out,
        work / "train.bin",
        work / "validation.npy",
        steps=saved,
        batch_size=cfg.batch,
        macro=cfg.every,
        k=cfg.k,
        m=cfg.m,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        overwrite=overwrite,
        attrs={"demo_config": json.dumps(asdict(cfg)), "tokenizer": "bytes (token id = UTF-8 byte)"},
    )


def _label_demo_panel(out: Path, description: str, work: Path) -> None:
    """Record the demo model on the new panel and drop the temporary work folder from its source and revisions."""
    with h5py.File(out, "r+", libver="latest") as f:  # still the demo's own new file: no one else has it
        f.attrs["model"] = text_attr(description)
        source = f.attrs.get("source", b"")
        source = source.decode() if isinstance(source, bytes) else str(source)
        f.attrs["source"] = text_attr(source.replace(str(work), "<demo workdir>"))
    with h5py.File(out, "r+", libver="latest") as f:  # checkpoint folders were temporary: keep their names
        rev = f["checkpoints/revision"]
        rev[:] = np.array([Path(r.decode()).name.encode() for r in rev[()]], dtype="S256")
