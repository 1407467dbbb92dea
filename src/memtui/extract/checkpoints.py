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
from memtui.orders.revisions import manifest_of, revision_name, weight_average
from memtui.panel import scoring

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
        """The steps there is a checkpoint for, where that is known without the hub: a folder's, or a manifest's
        (``extract --manifest``); None for a hub template (any step may exist)."""
        if self.local is not None:
            return sorted(self.local)
        manifest = manifest_of(self.revision_template)
        return manifest.steps if manifest is not None else None

    def averages(self, steps) -> dict[int, str]:
        """step -> kind of weight average (ema, soup, ...) for the ``steps`` whose checkpoint is one: as the manifest
        flags it, else as the family's revision names say (:func:`memtui.orders.revisions.weight_average`)."""
        manifest = manifest_of(self.revision_template)
        flagged = manifest.averages() if manifest is not None else {}
        out = {}
        for step in steps:
            kind = flagged.get(int(step)) or self._named_average(int(step))
            if kind:
                out[int(step)] = kind
        return out

    def _named_average(self, step: int) -> str:
        if self.local is not None:
            return weight_average(self.local[step].name, self.model) if step in self.local else ""
        try:
            return weight_average(self.revision(step))
        except MemtuiError:
            return ""  # a step the manifest lacks: listed as missing elsewhere

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
    _refuse_directories(source, pending)
    available = source.available()
    if available is not None:
        absent = [s for s in pending if s not in set(available)]
        if absent:
            what = "checkpoint folder" if source.local is not None else "checkpoint in the manifest"
            raise MemtuiError(
                f"{source.model} has no {what} for steps {', '.join(map(str, absent[:5]))}; leave them out of "
                "--checkpoints (`memtui extract --dry-run` lists what is missing)."
            )
    return pending


def _refuse_directories(source: Source, steps) -> None:
    """A checkpoint CSV without a Revision column names OLMo-core checkpoint directories (``https://olmo-checkpoints
    .org/…/step1000/``), which ``from_pretrained`` cannot load: refused at launch, not by each worker."""
    manifest = manifest_of(source.revision_template) if source.local is None else None
    if manifest is None:
        return
    listed = manifest.by_step()
    urls = [s for s in steps if s in listed and "://" in listed[s].revision]
    if urls:
        raise MemtuiError(
            f"{manifest.source} names checkpoint directories ({listed[urls[0]].revision[:80]}), not hub revisions "
            "from_pretrained can load; add a Revision column with the hub's branch names, or list them in a "
            "revisions.txt."
        )


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


# -- what a run's checkpoints are: irregular, missing, weight averages ------------------------------------------------

_NOTES_FILE = "checkpoints.json"  # in PANEL.work: what the last run's checkpoint list said about the panel's steps


def checkpoint_lines(source: Source, panel_steps) -> list[str]:
    """One line per irregularity of the run's checkpoint list against the panel's steps (a manifest's gaps, off-grid
    and oddly named steps, the steps it lacks), and the weight averages among the panel's checkpoints: what
    ``extract --dry-run`` and ``info`` list, so that no worker discovers them mid-extraction."""
    from memtui.orders.manifests import irregularities

    steps = [int(s) for s in panel_steps]
    manifest = manifest_of(source.revision_template)
    lines = irregularities(manifest, steps) if manifest is not None else []
    lines = [line for line in lines if not line.startswith("weight averages")]  # said below, for the panel's steps
    averages = source.averages(s for s in steps if source.available() is None or s in set(source.available()))
    if averages:
        shown = ", ".join(f"{s} ({k})" for s, k in sorted(averages.items())[:8])
        lines.append(f"weight averages (not one model's training state): steps {shown}")
    return lines


def record_checkpoint_notes(panel: str | os.PathLike, source: Source, panel_steps) -> None:
    """Keep what :func:`checkpoint_lines` says, and the weight averages by step, in ``PANEL.work/checkpoints.json``
    for ``info`` and the workbench (informative: a full disk must not stop an extraction)."""
    import contextlib
    import json

    from memtui.extract.units import work_dir, write_in_work

    steps = [int(s) for s in panel_steps]
    manifest = manifest_of(source.revision_template)
    body = {
        "manifest": manifest.source if manifest is not None else None,
        "lines": checkpoint_lines(source, steps),
        "averages": {str(s): k for s, k in source.averages(s for s in steps if _listed(source, s)).items()},
    }
    with contextlib.suppress(OSError):
        write_in_work(work_dir(panel), None, _NOTES_FILE, json.dumps(body).encode())


def _listed(source: Source, step: int) -> bool:
    available = source.available()
    return available is None or step in set(available)


def read_checkpoint_notes(panel: str | os.PathLike) -> dict:
    """What the last extraction recorded about the panel's checkpoints (empty when none, or unreadable)."""
    import json

    from memtui.extract.units import work_dir

    path = work_dir(panel) / _NOTES_FILE
    try:
        if path.is_symlink() or path.stat().st_size > 1 << 20:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    lines = [str(x) for x in data.get("lines", []) if isinstance(x, str)] if isinstance(data.get("lines"), list) else []
    raw = data.get("averages") if isinstance(data.get("averages"), dict) else {}
    averages = {int(k): str(v) for k, v in raw.items() if str(k).isdigit() and isinstance(v, str) and v}
    return {"lines": lines, "averages": averages}


def panel_averages(panel) -> dict[int, str]:
    """step -> kind for the panel's checkpoints that are weight averages: the mark each scored checkpoint's commit
    stored in the panel (``checkpoints/average``, which travels with the file), and for panels made before it, or
    columns committed without it, each scored checkpoint's recorded revision (the family's naming) and what the last
    extraction recorded beside the panel (a manifest's flags)."""
    out = {}
    for step, revision, done in zip(panel.steps, panel.revisions, panel.done, strict=False):
        kind = weight_average(str(revision)) if done else ""
        if kind:
            out[int(step)] = kind
    path = getattr(panel, "path", None)
    if path:
        out.update({s: k for s, k in read_checkpoint_notes(path).get("averages", {}).items() if s in set(panel.steps)})
    stored = getattr(panel, "averages", None) or []
    out.update(
        {int(s): k.strip() for s, k, done in zip(panel.steps, stored, panel.done, strict=False) if done and k.strip()}
    )
    return out


def checkpoint_info_rows(panel) -> list[tuple[str, str]]:
    """``info``'s rows: the weight averages among the panel's checkpoints, and what the last extraction's checkpoint
    list said (irregular and missing steps)."""
    from memtui.core.text import clean

    rows = []
    averages = panel_averages(panel)
    if averages:
        shown = ", ".join(f"step{s} ({clean(k, 20)})" for s, k in sorted(averages.items())[:8])
        rows.append(("weight average", f"{shown}: memorisation of an average is not one model's"))
    notes = read_checkpoint_notes(panel.path) if getattr(panel, "path", None) else {}
    rows += [("checkpoint list", clean(line, 300)) for line in notes.get("lines", []) if "weight averages" not in line]
    scorings = getattr(panel, "scorings", [])
    if ways := scoring.counts(scorings, panel.done):
        shown = "; ".join(
            f"{clean(s, scoring.SCORING_BYTES)} ({n} checkpoint{'s' * (n != 1)})" for s, n in ways.most_common(4)
        )
        mixed = scoring.mixed_note(scorings, panel.done) is not None
        rows.append(("scored with", shown + (": mixed, which adds noise to the estimates" if mixed else "")))
    return rows
