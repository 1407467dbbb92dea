"""The options of an extraction, in one place: defined, parsed, validated and rendered back into arguments here.

`memtui extract` (the CLI), the detached worker (``python -m memtui.extract.worker``), the launcher (local workers,
one per GPU, or a SLURM array) and the app all go through :class:`ExtractOptions`, so an option is added once.
Nothing here imports torch: the app and the job API stay light.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field, replace

from memtui.core.errors import MemtuiError
from memtui.extract.checkpoints import parse_checkpoints
from memtui.orders.revisions import COMMITS, MANIFEST, PRESETS, manifest_template, pico_template, preset_template

# SLURM's --time formats (src/common/parse_time.c, time_str2secs): minutes, minutes:seconds, hours:minutes:seconds,
# days-hours, days-hours:minutes, days-hours:minutes:seconds. Fields are not range-checked (0:90:00 is 90 minutes);
# seconds round up to the next minute.
_SLURM_TIME = re.compile(r"^(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
                         r"|(?P<h>\d+):(?P<hm>\d+):(?P<hs>\d+)|(?P<m>\d+)(?::(?P<ms>\d+))?)$")  # fmt: skip
_SLURM_MAX_SECONDS = 2**31 - 1  # SLURM holds the limit in a C int


def slurm_minutes(text: str) -> int:
    """A SLURM time limit as SLURM reads it, in minutes: ``1-2`` is 1560 (a day and two hours), ``1-2:30`` 1590,
    ``90`` 90, ``5:30`` 6 (seconds round up), ``1:00:00`` 60. Anything else (``1:2:3:4``, ``1h``, ``-5``, a
    limit of zero, which SLURM reads as none) is refused with one line."""
    value = str(text).strip()
    match = _SLURM_TIME.match(value)
    usage = "use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 240, 4:00:00 or 1-12)"
    if match is None:
        raise MemtuiError(f"--time '{text}' is not a SLURM time; {usage}.")
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "d" in g:
        seconds = g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    elif "h" in g:
        seconds = g["h"] * 3600 + g["hm"] * 60 + g["hs"]
    else:
        seconds = g["m"] * 60 + g.get("ms", 0)
    if seconds <= 0:
        raise MemtuiError(f"--time '{text}' must be positive (SLURM reads a limit of zero as no limit); {usage}.")
    if seconds > _SLURM_MAX_SECONDS:
        raise MemtuiError(f"--time '{text}' is more than SLURM can hold ({_SLURM_MAX_SECONDS // 86400} days).")
    return (seconds + 59) // 60


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how a SLURM job array runs; each array task is one worker."""

    partition: str | None = None
    time: str = "4:00:00"  # the task's wall-clock limit, SLURM's D-HH:MM:SS / HH:MM:SS / minutes
    account: str | None = None
    gpus_per_task: int | None = None  # None: 1, or 0 with --device cpu
    cpus_per_task: int | None = None
    mem: str | None = None  # e.g. 64G
    extra: tuple[str, ...] = ()  # further sbatch options, e.g. ("--qos=high",)

    def minutes(self) -> int:
        """The time limit in whole minutes, read exactly as SLURM reads ``--time`` (what submitit takes)."""
        return slurm_minutes(self.time)

    def gpus_for(self, device: str) -> int:
        """GPUs per task: as given, else none for ``--device cpu`` (a CPU cluster refuses any gres) and 1 otherwise."""
        if self.gpus_per_task is not None:
            return self.gpus_per_task
        return 0 if device == "cpu" else 1

    def extra_parameters(self) -> dict[str, str | bool]:
        """``--qos=high --exclusive`` as submitit's ``slurm_additional_parameters`` ({"qos": "high", ...})."""
        out: dict[str, str | bool] = {}
        for item in self.extra:
            if not item.startswith("--"):
                raise MemtuiError(f"--slurm-extra takes long sbatch options like --qos=high, not '{item}'.")
            key, sep, value = item[2:].partition("=")
            if not key:
                raise MemtuiError(f"--slurm-extra: cannot read '{item}'.")
            out[key.replace("-", "_")] = value if sep else True
        return out


@dataclass(frozen=True)
class ExtractOptions:
    model: str
    checkpoints: str = "all"
    device: str = "auto"
    dtype: str = "auto"
    batch_size: str = "auto"
    chunk: int | None = None
    # the fixed-shape scorer whose scores do not depend on the batch (docs/extraction.md, "Batch invariance"):
    # "auto" = on for CPU and CUDA (measured bitwise invariant on both), off for MPS (not measured), "on", "off"
    batch_invariant: str = "auto"
    revision_template: str = "step{step}"
    split: int = 1  # instance ranges per checkpoint: > 1 when there are more workers than pending checkpoints
    extractable: str | None = None  # "K,L" that must agree with the panel's (k, l); None: the panel's
    # per-token scores for a subset: a count, a comma list of ids or @FILE (extract/token_scores.py); None: the
    # panel's subset if it has one, else none. The launch records the subset in the panel and passes None on.
    token_scores: str | None = None
    workers: int = 1
    gpus: tuple[int, ...] | None = None  # local GPUs to pin one worker each to; None: no pinning
    slurm: SlurmOptions | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "batch_size", str(self.batch_size))  # "auto" or a count given as int or text

    # --- validation -----------------------------------------------------------------------------------------------

    def validate(self) -> ExtractOptions:
        if not self.model:
            raise MemtuiError("--model is required: a Hugging Face repo id or a folder of checkpoint folders (stepN/).")
        parse_checkpoints(self.checkpoints)
        if str(self.batch_size) != "auto" and (not str(self.batch_size).isdigit() or int(self.batch_size) <= 0):
            raise MemtuiError(f"batch size must be a positive integer or auto, got {self.batch_size}.")
        if self.chunk is not None and self.chunk <= 0:
            raise MemtuiError(f"--chunk must be positive, got {self.chunk}.")
        if self.batch_invariant not in ("auto", "on", "off"):
            raise MemtuiError(f"--batch-invariant must be auto, on or off, got {self.batch_invariant}.")
        if not 1 <= self.split <= 4096:
            raise MemtuiError(f"--split must be between 1 and 4096, got {self.split}.")
        if not 1 <= self.workers <= 4096:
            raise MemtuiError(f"--workers must be between 1 and 4096, got {self.workers}.")
        template = self.revision_template
        if not template.startswith((MANIFEST, COMMITS)) and "{step}" not in template and "{step-" not in template:
            raise MemtuiError(
                f"--revision-template must contain {{step}} (or {{step-N}}: steps within a stage starting after N), "
                f"got '{self.revision_template}'."
            )
        if self.gpus is not None and self.slurm is not None:
            raise MemtuiError("--gpus pins workers to this machine's GPUs; with --slurm use --gpus-per-task.")
        if self.gpus is not None and self.device not in ("auto", "cuda"):
            raise MemtuiError(f"--gpus runs each worker on its own GPU; --device {self.device} contradicts it.")
        if self.extractable is not None:
            self.extractable_kl()
        if self.token_scores is not None:
            from memtui.extract.token_scores import parse

            parse(self.token_scores)
        if self.slurm is not None:
            self.slurm.minutes()
            self.slurm.extra_parameters()
            gpus = self.slurm.gpus_per_task
            if gpus is not None and gpus < 0:
                raise MemtuiError(f"--gpus-per-task must be 0 or more, got {gpus}.")
            if gpus and self.device == "cpu":
                raise MemtuiError(f"--device cpu runs on no GPU; --gpus-per-task {gpus} contradicts it (drop one).")
        return self

    def extractable_kl(self) -> tuple[int, int] | None:
        """``--extractable K,L`` as (k, l), or None when not given."""
        if self.extractable is None:
            return None
        parts = str(self.extractable).replace(" ", "").split(",")
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() and int(p) >= 1 for p in parts):
            raise MemtuiError(
                f"--extractable takes K,L: prefix and suffix lengths in tokens, both >= 1 (e.g. 32,32), "
                f"not '{self.extractable}'."
            )
        return int(parts[0]), int(parts[1])

    def metrics_for(self, panel_path, panel) -> tuple[tuple[str, ...], tuple[int, int] | None]:
        """The metrics to extract into this panel (those extraction computes that it has: a panel made before
        extractability gets its four) and the (k, l) of its extractability metrics, which ``--extractable`` must agree
        with when given. One-line refusals; a launcher can call it before any worker starts."""
        from memtui.extract.units import METRICS, panel_metrics
        from memtui.panel.hdf5 import read_extractable
        from memtui.panel.metrics import EXTRACTABILITY

        metrics = panel_metrics(panel.metrics)
        if not metrics:
            raise MemtuiError(
                f"{panel_path}: the panel has none of the metrics extraction computes ({', '.join(METRICS)}); "
                "build a panel for extraction with `memtui build`."
            )
        kl = read_extractable(panel_path) if set(metrics) & set(EXTRACTABILITY) else None
        if "sampled_logp" in metrics:
            from memtui.extract.scheme import check

            check(panel_path)  # the scheme it records must be the one computed here (a resume mixes none)
        wanted = self.extractable_kl()
        if wanted is not None and kl is None:
            raise MemtuiError(
                f"{panel_path} has no extractability metrics (it was made before them): drop --extractable to "
                "extract its metrics, or build a new panel."
            )
        if wanted is not None and wanted != kl:
            raise MemtuiError(
                f"--extractable {wanted[0]},{wanted[1]} disagrees with {panel_path}, whose extractability is defined "
                f"with k={kl[0]}, l={kl[1]} (recorded when it was built): drop the option or give {kl[0]},{kl[1]}."
            )
        return metrics, kl

    def check_local_device(self) -> None:
        """For workers on this machine: ``--gpus`` indices among the visible GPUs, ``--device cuda[:N]`` or ``mps``
        available, the device name one torch knows. torch is imported only where the driver and the environment
        cannot tell alone (it takes seconds)."""
        if self.gpus is not None:
            count = _visible_gpu_count()
            absent = [g for g in self.gpus if g >= count]
            if absent:
                raise MemtuiError(
                    f"--gpus {','.join(map(str, self.gpus))}: this machine shows {count} CUDA GPU(s), so GPU "
                    f"{absent[0]} does not exist here; use --workers N --device cpu, or --slurm for a cluster."
                )
            return
        device = self.device
        if device in ("auto", "cpu", ""):
            return
        if device.startswith("cuda") and cuda_devices_without_torch() == 0:
            raise MemtuiError(f"--device {device}: CUDA is not available on this machine; use --device cpu.")
        import torch

        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError):
            raise MemtuiError(f"unknown device '{device}'; use auto, cpu, cuda, cuda:N or mps.") from None
        if dev.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if not count or (dev.index is not None and dev.index >= count):
                raise MemtuiError(f"--device {device}: this machine shows {count} CUDA GPU(s); use --device cpu.")
        elif dev.type == "mps":
            if not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
                raise MemtuiError(f"--device {device}: Apple MPS is not available here; use --device cpu.")
        elif dev.type != "cpu":
            raise MemtuiError(f"unknown device '{device}'; use auto, cpu, cuda, cuda:N or mps.")

    @property
    def n_workers(self) -> int:
        return len(self.gpus) if self.gpus is not None else self.workers

    # --- arguments ------------------------------------------------------------------------------------------------

    @staticmethod
    def add_worker_arguments(p: argparse.ArgumentParser) -> None:
        """What one worker needs (the CLI and the worker module share these)."""
        p.add_argument(
            "--model", help="Hugging Face repo id (revisions stepN) or a folder of checkpoint folders stepN/"
        )
        p.add_argument("--checkpoints", default="all",
                       help="START:STOP:STEP (inclusive), a comma list, or all (default: all pending)")  # fmt: skip
        p.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N, mps [auto]")
        p.add_argument("--dtype", default="auto", help="model body dtype: auto (bf16 on GPU, fp32 on CPU), float32, …")
        p.add_argument("--batch-size", default="auto", help="instances per batch, or auto (halves on out-of-memory)")
        p.add_argument("--chunk", type=int, default=None, help="target positions per output-head chunk [auto]")
        p.add_argument("--batch-invariant", default="auto", choices=("auto", "on", "off"),
                       help="scores bitwise independent of the batch (fixed shapes per row length): auto = on for "
                            "CPU and CUDA, off for MPS [auto]")  # fmt: skip
        p.add_argument("--revision-template", default="step{step}", help="Hugging Face revision of a step [step{step}]")
        p.add_argument("--revisions", default=None, choices=sorted(PRESETS), metavar="FAMILY",
                       help="the family's hub revision names instead of a template: "
                            f"{', '.join(PRESETS)} (OLMo: tokens per step, first step from the panel)")  # fmt: skip
        p.add_argument("--manifest", default=None, metavar="FILE",
                       help="the run's checkpoint list instead of a template: OLMo-core's checkpoint CSV or a "
                            "revisions.txt (a revision a line); steps it lacks are listed, not extracted")  # fmt: skip
        p.add_argument("--manifest-stage", default=None, metavar="STAGE",
                       help="the stage of a --manifest CSV that lists several (stage1_pretraining, ...)")  # fmt: skip
        p.add_argument("--split", type=int, default=1,
                       help="instance ranges per checkpoint, when workers outnumber checkpoints [1]")  # fmt: skip
        p.add_argument("--extractable", default=None, metavar="K,L",
                       help="(k, l)-extractability: must agree with the panel's k and l [the panel's; 32,32 when "
                            "it was built]")  # fmt: skip
        p.add_argument("--token-scores", default=None, metavar="N|IDS",
                       help="also store each target token's log-probability (float16) for N instances chosen across "
                            "the cohorts and never-trained rows, or for the instance ids listed (3,17,42 or @FILE); "
                            "the size is estimated before launch [none]")  # fmt: skip

    @staticmethod
    def add_launch_arguments(p: argparse.ArgumentParser) -> None:
        """How many workers, and where (the CLI only)."""
        g = p.add_argument_group("workers")
        g.add_argument("--workers", type=int, default=None, help="number of workers (default 1; with --slurm, tasks)")
        g.add_argument("--gpus", default=None, help="one worker per GPU of this machine: all, or a list like 0,1,2,3")
        s = p.add_argument_group("SLURM (a job array, one worker per task, submitted with submitit)")
        s.add_argument("--slurm", action="store_true", help="submit the workers as a SLURM job array")
        s.add_argument("--partition", help="SLURM partition")
        s.add_argument("--time", default=None, help="time limit per task [4:00:00]")
        s.add_argument("--account", help="SLURM account")
        s.add_argument("--gpus-per-task", type=int, default=None, help="GPUs per task [1; none with --device cpu]")
        s.add_argument("--cpus-per-task", type=int, default=None, help="CPUs per task")
        s.add_argument("--mem", default=None, help="memory per task, e.g. 64G")
        s.add_argument("--slurm-extra", default=None, help='further sbatch options, e.g. "--qos=high --exclusive"')
        p.add_argument("--dry-run", action="store_true",
                       help="check everything and print the plan (workers, units, devices, what would be "
                            "written where; with --slurm, the job script for sbatch); start and write "
                            "nothing")  # fmt: skip

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, visible_gpus=None) -> ExtractOptions:
        slurm = None
        if getattr(args, "slurm", False):
            slurm = SlurmOptions(
                partition=args.partition,
                time=args.time if args.time is not None else SlurmOptions.time,
                account=args.account,
                gpus_per_task=args.gpus_per_task,
                cpus_per_task=args.cpus_per_task,
                mem=args.mem,
                extra=tuple(shlex.split(args.slurm_extra or "")),
            )
        gpus = _parse_gpus(getattr(args, "gpus", None), visible_gpus)
        workers = getattr(args, "workers", None)
        return cls(
            model=args.model or "",
            checkpoints=args.checkpoints,
            device=args.device,
            dtype=args.dtype,
            batch_size=str(args.batch_size),
            chunk=args.chunk,
            batch_invariant=getattr(args, "batch_invariant", "auto"),
            revision_template=_revision_template(args),
            split=args.split,
            extractable=getattr(args, "extractable", None),
            token_scores=getattr(args, "token_scores", None),
            workers=workers if workers is not None else 1,
            gpus=gpus,
            slurm=slurm,
        )

    def worker_argv(self, *, device: str | None = None) -> list[str]:
        """The arguments that make a worker process run with these options (``device`` pins one worker)."""
        argv = ["--model", self.model, "--checkpoints", str(self.checkpoints), "--device", device or self.device,
                "--dtype", self.dtype, "--batch-size", str(self.batch_size),
                "--revision-template", self.revision_template, "--split", str(self.split)]  # fmt: skip
        if self.chunk:
            argv += ["--chunk", str(self.chunk)]
        if self.batch_invariant != "auto":
            argv += ["--batch-invariant", self.batch_invariant]
        if self.extractable is not None:
            argv += ["--extractable", str(self.extractable)]
        if self.token_scores is not None:
            argv += ["--token-scores", str(self.token_scores)]
        return argv

    def with_model(self, model: str) -> ExtractOptions:
        return replace(self, model=model)

    def record(self) -> dict:
        """For the log and the launch record."""
        return asdict(self)


def _revision_template(args: argparse.Namespace) -> str:
    """``--revisions FAMILY`` as a template (the OLMo presets read the tokens per step the panel records), else
    ``--revision-template``; both at once is refused."""
    preset = getattr(args, "revisions", None)
    manifest, stage = getattr(args, "manifest", None), getattr(args, "manifest_stage", None)
    if manifest is not None:
        if preset is not None or args.revision_template != "step{step}":
            raise MemtuiError("--manifest names every checkpoint; drop --revisions / --revision-template.")
        return manifest_template(manifest, stage)
    if stage is not None:
        raise MemtuiError("--manifest-stage picks a stage of a --manifest CSV; give --manifest too.")
    if preset is None:
        return args.revision_template
    if args.revision_template != "step{step}":
        raise MemtuiError("give either --revisions or --revision-template, not both.")
    if preset == "pico":  # a commit per checkpoint: the model's branch names them
        return pico_template(args.model or "")
    tokens = offset = seed = None
    if ("*T}" in PRESETS[preset] or "{seed}" in PRESETS[preset]) and getattr(args, "panel", None) is not None:
        from memtui.panel.hdf5 import read_panel

        attrs = read_panel(args.panel).attrs
        tokens, offset = (int(v) if v.isdigit() else None for v in (attrs.get(k, "") for k in _STAGE_ATTRS))
        seed = attrs.get("datadecide_seed")
    return preset_template(preset, tokens, offset, seed)


_STAGE_ATTRS = ("tokens_per_step", "step_offset")  # what an OLMo build records for the revision presets


def _parse_gpus(spec: str | None, visible) -> tuple[int, ...] | None:
    if spec is None:
        return None
    text = spec.strip().lower()
    if text == "all":
        count = _visible_gpu_count() if visible is None else visible
        if not count:
            raise MemtuiError("--gpus all: this machine shows no CUDA GPU; use --workers N --device cpu instead.")
        return tuple(range(count))
    try:
        gpus = tuple(int(g) for g in text.split(",") if g.strip())
    except ValueError:
        raise MemtuiError(f"--gpus takes all or a comma list of GPU indices like 0,1,2,3, not '{spec}'.") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise MemtuiError(f"--gpus '{spec}' must list distinct GPU indices >= 0.")
    return gpus


def _visible_gpu_count() -> int:
    """CUDA devices this process may use, without importing torch where the environment or the driver says."""
    known = cuda_devices_without_torch()
    if known is not None:
        return known
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def cuda_devices_without_torch() -> int | None:
    """How many CUDA devices a worker started now would see, where that is certain without importing torch (slow):
    none when CUDA_VISIBLE_DEVICES hides them all or, on Linux, when there is no NVIDIA driver (and no ROCm); the
    listed ones otherwise. None: only torch can tell."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if not sys.platform.startswith("linux") or os.path.exists("/dev/kfd"):  # ROCm's torch.cuda: ask torch
        return None
    try:
        driver = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        driver = 0
    if not driver:
        return 0
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])
    return driver
