"""The extraction loop: score every pending checkpoint on the panel's instances, one committed column at a time.

Run in the foreground (``memtui extract --foreground``) or as the detached worker started by
:func:`memtui.extract.jobs.launch` (``python -m memtui.extract.worker``). Progress is published to
``PANEL.progress.json`` (atomically replaced), which any process may read at any time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memtui.errors import MemtuiError
from memtui.panel import PanelWriter, read_panel, read_tokens
from memtui.superblock import clear_writer_flags
from memtui.text import clean

from . import progress as records
from .checkpoints import Prefetcher, Source, copy_weights, parse_checkpoints
from .jobs import check_free_space
from .locking import PanelLock, open_beside
from .progress import log_path, progress_path

__all__ = ["run", "main", "progress_path", "log_path", "check_tokens"]

if TYPE_CHECKING:
    import torch

METRICS = ("loglik", "accuracy", "rank", "entropy")


class Progress:
    """What the worker publishes; ``publish`` is throttled unless forced."""

    def __init__(self, panel: Path, on_update: Callable[[dict], None] | None = None, interval: float = 1.0):
        self.panel = panel
        self.on_update = on_update
        self.interval = interval
        self._last = 0.0
        self.data = records.new_record(panel, batch_size=None, device=None, dtype=None)

    def publish(self, force: bool = False, **fields) -> None:
        self.data.update(fields)
        now = time.time()
        if self.on_update is not None:  # in-process listeners see every update; the file is throttled
            self.on_update(dict(self.data, updated=now))
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self.data["updated"] = now
        with contextlib.suppress(OSError):  # progress is informative; never let it stop the run (e.g. a full disk)
            records.publish(self.panel, self.data)


def to_body_dtype(net: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Cast the parameters only: buffers such as rotary ``inv_freq`` stay in fp32, as ``from_pretrained`` keeps them
    (bf16 frequencies shift the rotary angle at position 2047 by up to ~0.4 rad)."""
    for param in net.parameters():
        param.data = param.data.to(dtype)
    return net


def plan_steps(panel_steps: np.ndarray, done: np.ndarray, requested: list[int] | None, source: Source) -> list[int]:
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


def check_tokens(tokens: np.ndarray, lengths: np.ndarray, vocab: int, panel_path) -> None:
    """Every token id inside its row's length must be in [0, vocab): refused before any checkpoint is scored (an
    embedding lookup with a bad id would fail mid-run, or on some devices read garbage)."""
    inside = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
    ids = tokens[inside]
    if not ids.size:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        bad = int(((ids < 0) | (ids >= vocab)).sum())
        raise MemtuiError(
            f"{panel_path}: {bad} token ids lie outside the model's vocabulary [0, {vocab}) (smallest {low}, largest "
            f"{high}); the panel was built from another tokenizer's ids: rebuild it with this model's tokens."
        )


def _append_to_log(panel_path: Path, text: str) -> Path | None:
    """Append ``text`` to the panel's extraction log (never through a link); the log's path, or None if unwritable."""
    path = log_path(panel_path)
    try:
        fd = open_beside(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except MemtuiError:
        return None
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    except OSError:
        return None
    finally:
        os.close(fd)
    return path


def auto_batch(device, n: int, length: int) -> int:
    """Starting batch size: ~8k tokens per batch on CPU; on GPU ~256k tokens, halved on out-of-memory."""
    tokens = 8192 if device.type == "cpu" else 1 << 18
    return int(max(1, min(n, tokens // max(1, length))))


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def run(
    panel_path: str | os.PathLike,
    *,
    model: str,
    checkpoints: str = "all",
    device: str = "auto",
    dtype: str = "auto",
    batch_size: str | int = "auto",
    chunk: int | None = None,
    revision_template: str = "step{step}",
    on_update: Callable[[dict], None] | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    log: Callable[[str], None] = print,
) -> str:
    """Extract every pending checkpoint into the panel. Returns the final state: done, cancelled (or raises).

    SIGTERM / SIGINT (when ``handle_signals``) or ``stop`` end the run at the next batch boundary; the checkpoint in
    progress is abandoned (its column is not written) and a rerun resumes from it.
    """
    panel_path = Path(panel_path)
    stop = stop or threading.Event()
    requested = parse_checkpoints(checkpoints)
    read_panel(panel_path)  # the one-line refusals for a missing, foreign, cut or damaged panel come first
    check_free_space(panel_path.resolve())
    with PanelLock(panel_path):
        progress = Progress(panel_path, on_update)
        previous = {}
        if handle_signals and threading.current_thread() is threading.main_thread():

            def _on_signal(signum, frame):
                if stop.is_set() and signum == signal.SIGINT:
                    raise KeyboardInterrupt
                log(f"received {signal.Signals(signum).name}: abandoning the current checkpoint, it resumes next run")
                stop.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, _on_signal)
        try:
            state = _run(
                panel_path, model, requested, device, dtype, batch_size, chunk, revision_template, progress, stop, log
            )
        except BaseException as exc:
            msg = str(exc) if isinstance(exc, MemtuiError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, KeyboardInterrupt):
                progress.publish(force=True, state="cancelled", last_error="interrupted")
                raise
            first = clean(msg.splitlines()[0] if msg else repr(exc), 300)
            progress.publish(force=True, state="failed", last_error=first)
            if not isinstance(exc, MemtuiError):
                # the traceback is for a bug report: it goes to the log, the user sees one line that points there
                where = _append_to_log(panel_path, traceback.format_exc())
                raise MemtuiError(f"extraction failed: {first}" + (f" (details in {where})" if where else "")) from exc
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return state


def _run(panel_path, model_name, requested, device, dtype, batch_size, chunk, revision_template, progress, stop, log):
    import torch

    from .scoring import Scorer, check_head, resolve_device, resolve_dtype

    if clear_writer_flags(panel_path):
        log(f"{panel_path}: cleared the write mark left by a killed writer; resuming")
    panel = read_panel(panel_path)
    tokens, lengths = read_tokens(panel_path)
    lengths = lengths.astype(np.int64)
    source = Source.open(model_name, revision_template)
    steps = plan_steps(panel.steps, panel.done, requested, source)
    dev = resolve_device(device)
    body_dtype = resolve_dtype(dtype, dev)
    n = panel.n_instances
    step_index = {int(s): i for i, s in enumerate(panel.steps)}
    known_hashes = {h: int(s) for h, s, d in zip(panel.weight_hashes, panel.steps, panel.done, strict=False) if h and d}
    order = np.argsort(-lengths, kind="stable")  # longest first: an out-of-memory batch shows up at once
    tokens_per_ckpt = int(lengths.sum())
    progress.publish(
        force=True,
        model=model_name,
        K=len(steps),
        instances_total=n,
        device=str(dev),
        dtype=str(body_dtype).replace("torch.", ""),
        checkpoints_done=int(panel.done.sum()),
        checkpoints_total=panel.n_checkpoints,
    )
    if not steps:
        log(f"{panel_path}: nothing to do, every requested checkpoint is already extracted")
        progress.publish(force=True, state="done", k=0, eta_s=0)
        return "done"
    log(
        f"extracting {len(steps)} checkpoint(s) of {model_name} into {panel_path} on {dev} ({body_dtype}), "
        f"{n} instances, {tokens_per_ckpt} tokens per checkpoint"
    )

    bs = auto_batch(dev, n, int(lengths.max())) if str(batch_size) == "auto" else int(batch_size)
    if bs <= 0:
        raise MemtuiError(f"batch size must be positive or auto, got {batch_size}.")
    net = scorer = None
    done_tokens, t_start = 0, time.time()
    delay = float(os.environ.get("MEMTUI_EXTRACT_BATCH_DELAY") or 0)  # test hook: slow batches down
    prefetch = Prefetcher(source, steps)
    try:
        with PanelWriter(panel_path) as writer:
            for k, loaded in enumerate(prefetch, start=1):
                if stop.is_set():
                    break
                step = loaded.step
                if net is None:
                    net = to_body_dtype(loaded.model.to(dev), body_dtype)
                    scorer = Scorer(net, dev, chunk)
                    check_head(net, scorer, scorer.vocab)
                    check_tokens(tokens, lengths, scorer.vocab, panel_path)  # every checkpoint shares the vocabulary
                else:
                    copy_weights(net, loaded.model)
                    scorer.refresh_head()
                del loaded.model
                if loaded.weights_hash in known_hashes and known_hashes[loaded.weights_hash] != step:
                    warning = (
                        f"step {step} has the same weights as step {known_hashes[loaded.weights_hash]} "
                        f"({loaded.revision}); both are scored, but they are one checkpoint"
                    )
                    log("warning: " + warning)
                    progress.data["warnings"].append(warning)
                known_hashes.setdefault(loaded.weights_hash, step)
                cols = {m: np.full(n, np.nan) for m in METRICS}
                i = 0
                progress.publish(force=True, checkpoint=step, k=k, instances_done=0, batch_size=bs)
                while i < n:
                    if stop.is_set():
                        break
                    rows = order[i : i + bs]
                    L = int(lengths[rows].max())
                    try:
                        out = scorer.score(tokens[rows, :L], lengths[rows])
                    except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
                        if not _is_oom(exc) or bs == 1:
                            raise
                        scorer.release()
                        if dev.type == "cuda":
                            torch.cuda.empty_cache()
                        bs = max(1, bs // 2)
                        log(f"out of memory: batch size now {bs}")
                        continue
                    for name in METRICS:
                        cols[name][rows] = out[name]
                    if delay:
                        time.sleep(delay)
                    i += len(rows)
                    done_tokens += int(lengths[rows].sum())
                    rate = done_tokens / max(time.time() - t_start, 1e-9)
                    remaining = (len(steps) - k) * tokens_per_ckpt + int(lengths[order[i:]].sum())
                    progress.publish(instances_done=i, tokens_per_s=rate, eta_s=remaining / rate, batch_size=bs)
                if stop.is_set():
                    break
                writer.write_checkpoint(
                    step_index[step], cols, revision=loaded.revision, weights_hash=loaded.weights_hash, model=model_name
                )
                progress.data["checkpoints_done"] = int(writer.panel.done.sum())
                rate = done_tokens / max(time.time() - t_start, 1e-9)
                log(
                    f"[{k}/{len(steps)}] step {step} done ({rate:,.0f} tokens/s); "
                    f"mean loglik {np.nanmean(cols['loglik']):.2f}"
                )
                progress.publish(force=True, eta_s=(len(steps) - k) * tokens_per_ckpt / rate if rate else None)
    finally:
        prefetch.close()
    if stop.is_set():
        progress.publish(force=True, state="cancelled", last_error=None)
        log("cancelled; rerun the same command to resume from the first unfinished checkpoint")
        return "cancelled"
    progress.publish(force=True, state="done", eta_s=0)
    log(f"done: {len(steps)} checkpoint(s) in {time.time() - t_start:,.0f} s")
    return "done"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the detached worker (``python -m memtui.extract.worker PANEL ...``)."""
    p = argparse.ArgumentParser(prog="memtui-extract-worker")
    p.add_argument("panel")
    p.add_argument("--model", required=True)
    p.add_argument("--checkpoints", default="all")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--batch-size", default="auto")
    p.add_argument("--chunk", type=int, default=None)
    p.add_argument("--revision-template", default="step{step}")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        with contextlib.suppress(OSError):  # the log is stdout on a file that may be full: the run goes on
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}", flush=True)

    try:
        state = run(
            args.panel,
            model=args.model,
            checkpoints=args.checkpoints,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
            chunk=args.chunk,
            revision_template=args.revision_template,
            log=log,
        )
    except MemtuiError as exc:
        log(f"memtui: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0 if state == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
