"""Checkpoint specs, sources (Hugging Face revisions or local folders), and weight hashes."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memtui.core.errors import MemtuiError
from memtui.orders.revisions import revision_name

if TYPE_CHECKING:  # torch is imported where it is used, so the job API stays light for the app
    import torch

STEP_DIR = re.compile(r"^(?:checkpoint|step)[-_]?(\d+)$")


def parse_checkpoints(spec: str | int | Sequence[int]) -> list[int] | None:
    """``START:STOP:STEP`` (stop inclusive), ``a,b,c``, a single step, or ``all`` (None: every pending step)."""
    if isinstance(spec, int):
        return [spec]
    if not isinstance(spec, str):
        return sorted({int(s) for s in spec})
    text = spec.strip().lower()
    if text in ("all", ""):
        return None
    steps: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if ":" in part:
                fields = part.split(":")
                if len(fields) not in (2, 3):
                    raise ValueError
                start, stop = int(fields[0]), int(fields[1])
                step = int(fields[2]) if len(fields) == 3 and fields[2] else 1
                if step <= 0 or stop < start:
                    raise ValueError
                steps.update(range(start, stop + 1, step))
            else:
                steps.add(int(part))
    except ValueError:
        raise MemtuiError(
            f"cannot read checkpoints '{spec}'; use START:STOP:STEP (inclusive, e.g. 0:95000:1000), "
            "a comma list (0,1000,2000) or all."
        ) from None
    if not steps or min(steps) < 0:
        raise MemtuiError(f"checkpoints '{spec}' name no valid (non-negative) step.")
    return sorted(steps)


@dataclass
class Source:
    """Where checkpoint ``step`` comes from: a Hugging Face repo revision or a local folder."""

    model: str
    local: dict[int, Path] | None = None  # step -> folder, for a folder of checkpoint folders
    revision_template: str = "step{step}"

    @classmethod
    def open(cls, model: str, revision_template: str = "step{step}") -> Source:
        path = Path(model).expanduser()
        if path.is_dir():
            path = path.resolve()  # one name for one folder: parts and the panel record it, and runs compare it
            found = {}
            for child in path.iterdir():
                m = STEP_DIR.match(child.name)
                if m and child.is_dir():
                    found[int(m.group(1))] = child
            if found:
                return cls(str(path), found, revision_template)
            if (path / "config.json").exists():
                raise MemtuiError(
                    f"{path} is a single checkpoint; pass the folder that holds the checkpoint folders "
                    "(step0/, step1000/, ...)."
                )
            raise MemtuiError(f"{path} holds no checkpoint folders named stepN/ (e.g. step1000/).")
        if model.startswith((".", "/", "~")) or model.count("/") > 1:
            raise MemtuiError(f"{model}: no such folder (and not a Hugging Face repo id like EleutherAI/pythia-160m).")
        return cls(model, None, revision_template)

    def available(self) -> list[int] | None:
        return sorted(self.local) if self.local is not None else None

    def revision(self, step: int) -> str:
        """What the panel records for the checkpoint: the folder, or ``repo@revision``."""
        if self.local is not None:
            return str(self.local[step])
        return f"{self.model}@{revision_name(self.revision_template, step)}"

    def load(self, step: int) -> torch.nn.Module:
        """The checkpoint as a CPU model in its stored dtype (honours HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE)."""
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        if self.local is not None:
            if step not in self.local:
                raise MemtuiError(f"{self.model}: no folder for step {step}.")
            where, kwargs = str(self.local[step]), {}
        else:
            where, kwargs = self.model, {"revision": revision_name(self.revision_template, step)}
            # huggingface_hub reads HF_HUB_OFFLINE once, at import: honour it as set now, without network retries
            if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
                kwargs["local_files_only"] = True
        try:
            model = AutoModelForCausalLM.from_pretrained(where, dtype="auto", **kwargs)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            offline = " (HF_HUB_OFFLINE is set: only cached revisions load)" if os.environ.get("HF_HUB_OFFLINE") else ""
            raise MemtuiError(f"cannot load checkpoint {self.revision(step)}{offline}: {first}") from None
        return model.eval()


def plan_steps(panel_steps: Sequence, done: Sequence, requested: list[int] | None, source: Source) -> list[int]:
    """Panel steps to extract now: requested (or all), not yet done, and available from the source."""
    steps = [int(s) for s in panel_steps]
    if requested is not None:
        unknown = sorted(set(requested) - set(steps))
        if unknown:
            shown = ", ".join(map(str, unknown[:5])) + (" ..." if len(unknown) > 5 else "")
            raise MemtuiError(
                f"checkpoint steps {shown} are not in the panel (it has {len(steps)} steps, "
                f"{steps[0]}..{steps[-1]}); see `memtui info PANEL`."
            )
        wanted = set(requested)
    else:
        wanted = set(steps)
        available = source.available()
        if available is not None:
            wanted &= set(available)
    pending = [s for s, d in zip(steps, done, strict=True) if s in wanted and not d]
    available = source.available()
    if available is not None:
        absent = [s for s in pending if s not in set(available)]
        if absent:
            raise MemtuiError(f"{source.model} has no checkpoint folder for steps {', '.join(map(str, absent[:5]))}.")
    return pending


def weights_hash(model: torch.nn.Module) -> str:
    """blake2b of every tensor of the state dict (names, shapes, dtypes and bytes), 32 hex digits."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().contiguous().cpu()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def model_description(model: torch.nn.Module) -> tuple[int, str]:
    """The parameter count (each shared tensor once, as the model cards count them) and a one-line config summary
    (architecture and shape, at most 256 bytes): what `memtui compare` orders models by and shows."""
    seen, count = set(), 0
    for t in model.parameters():
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            count += t.numel()
    cfg = getattr(model, "config", None)
    parts = [type(model).__name__]
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        value = getattr(cfg, key, None)
        if isinstance(value, int):
            parts.append(f"{key}={value}")
    return count, " ".join(parts)[:256]


@dataclass
class Loaded:
    step: int
    model: torch.nn.Module  # on CPU, stored dtype
    revision: str
    weights_hash: str
    parameters: int = 0
    config: str = ""
    shards: dict[str, str] = field(default_factory=dict)  # weight file -> sha256 (memtui.extract.shards)


def copy_weights(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    """Copy ``src``'s parameters and buffers into ``dst`` in place (converting dtype and device)."""
    target, source = dst.state_dict(), src.state_dict()
    missing = [k for k in target if k not in source]
    if missing:
        raise MemtuiError(
            f"checkpoint does not match the first checkpoint's architecture (missing {', '.join(missing[:3])}); "
            "all checkpoints of a run must share one architecture."
        )
    import torch

    with torch.no_grad():
        for name, t in target.items():
            s = source[name]
            if s.shape != t.shape:
                raise MemtuiError(
                    f"checkpoint tensor {name} has shape {tuple(s.shape)}, the model has {tuple(t.shape)}; "
                    "all checkpoints of a run must share one architecture."
                )
            t.copy_(s, non_blocking=False)
