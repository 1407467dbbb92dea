"""The extraction worker: claim a unit, score it, write its part, fold what is ready into the panel; repeat.

Any number of workers — on this machine (one per GPU, or ``--workers N``), in a SLURM job array, or one in the
foreground — run this same loop on one panel (see :mod:`memtui.extract.units` for the claim protocol and
:mod:`memtui.extract.commit` for the committer). Today's single worker is the N = 1 case. A worker stops when every
unit is finished, or at the next batch boundary after SIGTERM, SIGINT, the ``stop`` event or the panel's cancel
flag (``PANEL.work/cancel``); the unit in progress is abandoned and whoever runs next takes it up.

Each worker publishes its progress record to ``PANEL.work/workers/ID.json`` (``memtui.extract.progress``) and holds
``PANEL.work/workers/ID.lock`` for its life, which is how this host knows it still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import WriteError
from memtui.core.text import clean
from memtui.extract import progress as records
from memtui.extract.checkpoints import (
    Loaded,
    Source,
    copy_weights,
    model_description,
    parse_checkpoints,
    plan_steps,
    record_checkpoint_notes,
    weights_hash,
)
from memtui.extract.commit import commit_ready, describe_lease
from memtui.extract.integrity import clear_duplicate, record_duplicate
from memtui.extract.locking import FileLock, open_beside
from memtui.extract.options import ExtractOptions
from memtui.extract.progress import log_path
from memtui.extract.shards import ShardCheck, checkpoint_hashes, hashes_dir
from memtui.extract.units import (
    Owner,
    PartError,
    PartMismatch,
    Unit,
    WorkDir,
    cancel_flag,
    check_free_space,
    heartbeat_s,
    plan_units,
    stale_s,
    write_in_work,
)
from memtui.panel import metrics as registry
from memtui.panel import scoring
from memtui.panel.hdf5 import read_done as read_metrics_done
from memtui.panel.hdf5 import read_panel, read_scorings, read_tokens
from memtui.panel.token_scores import complete as read_done  # a checkpoint is done with its per-token scores too
from memtui.panel.token_scores import read_layout

__all__ = ["run", "main", "log_path", "check_tokens"]

SAMPLED = "sampled_logp"  # computed only for panels that have it (its top-k pass is not free)

if TYPE_CHECKING:
    import torch


class WorkerProgress:
    """What this worker publishes (``workers/ID.json``); the file is throttled, in-process listeners see all."""

    def __init__(self, work: WorkDir, me: Owner, on_update: Callable[[dict], None] | None, interval: float = 1.0):
        self.work = work
        self.path = work.worker_record(me)
        self.on_update = on_update
        self.interval = interval
        self._last = 0.0
        self._lock = threading.Lock()
        self.data = records.new_record(
            work.panel, host=me.host, slurm_job=me.slurm_job, slurm_task=me.slurm_task, unit=None, batch_size=None,
            device=None, dtype=None,
        )  # fmt: skip

    def publish(self, force: bool = False, **fields) -> None:
        with self._lock:
            self.data.update(fields)
            now = time.time()
            self.data["updated"] = now
            if self.on_update is not None:
                self.on_update(dict(self.data))
            if not force and now - self._last < self.interval:
                return
            self._last = now
            with contextlib.suppress(OSError):  # progress is informative; a full disk must not stop the scoring
                body = json.dumps(self.data, indent=1).encode()  # through the folder, never a link swapped in
                write_in_work(self.work.root, self.path.parent.name, self.path.name, body)


class Heartbeat:
    """Touches the claim of the unit being scored and refreshes the worker's record, from a thread, so a worker busy
    in one long batch on a GPU is never mistaken for a dead one. ``lost`` is set if the claim was taken over."""

    def __init__(self, work: WorkDir, me: Owner, progress: WorkerProgress):
        self.work, self.me, self.progress = work, me, progress
        self.unit: Unit | None = None
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="memtui-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(heartbeat_s()):
            unit = self.unit
            if unit is not None and not self.work.touch_claim(unit, self.me):
                self.lost.set()
            self.progress.publish(force=True)

    def hold(self, unit: Unit | None) -> None:
        self.unit = unit
        self.lost.clear()

    def close(self) -> None:
        self._stop.set()


class Loader:
    """Loads (and hashes) checkpoints in one background thread, so the next unit's weights arrive while this one is
    scored; which unit comes next is only known when it is claimed, so a guess that another worker took is dropped."""

    def __init__(self, source: Source, hash_cache: Path | None = None):
        self.source = source
        self.hash_cache = hash_cache  # where local weight files' sha256 are kept (memtui.extract.shards)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memtui-load")
        self._pending: dict[int, Future] = {}

    def _load(self, step: int) -> Loaded:
        model = self.source.load(step)
        loaded = Loaded(step, model, self.source.revision(step), weights_hash(model), *model_description(model))
        loaded.shards = checkpoint_hashes(self.source, step, self.hash_cache)  # after the load: a hub file is cached
        return loaded

    def prefetch(self, step: int | None) -> None:
        for other in [s for s in self._pending if s != step]:
            self._pending.pop(other).cancel()
        if step is not None and step not in self._pending:
            self._pending[step] = self._pool.submit(self._load, step)

    def get(self, step: int) -> Loaded:
        future = self._pending.pop(step, None) or self._pool.submit(self._load, step)
        return future.result()

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


def to_body_dtype(net: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Cast the parameters only: buffers such as rotary ``inv_freq`` stay in fp32, as ``from_pretrained`` keeps them
    (bf16 frequencies shift the rotary angle at position 2047 by up to ~0.4 rad)."""
    for param in net.parameters():
        param.data = param.data.to(dtype)
    return net


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
    options: ExtractOptions | None = None,
    *,
    on_update: Callable[[dict], None] | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    log: Callable[[str], None] = print,
    **fields,
) -> str:
    """Work on the panel until every pending unit is finished. Returns the final state: done or cancelled (or raises).

    ``fields`` make the options when none are given (``run(panel, model=..., batch_size=7)``). SIGTERM / SIGINT
    (when ``handle_signals``), ``stop`` or the panel's cancel flag end the run at the next batch boundary; the unit
    in progress is abandoned (no part is written) and a rerun resumes from it.
    """
    panel_path = Path(panel_path)
    options = (options or ExtractOptions(**fields)).validate()
    stop = stop or threading.Event()
    requested = parse_checkpoints(options.checkpoints)
    panel = read_panel(panel_path)  # refusals for a missing, foreign, cut or damaged panel first
    options.metrics_for(panel_path, panel)  # the metrics to fill, and --extractable against the panel's (k, l)
    n_instances = panel.n_instances
    check_free_space(panel_path.resolve(), n_instances)
    work = WorkDir(panel_path).ensure()
    me = Owner.me()
    previous = {}
    if handle_signals and threading.current_thread() is threading.main_thread():

        def _on_signal(signum, frame):
            if stop.is_set() and signum == signal.SIGINT:
                raise KeyboardInterrupt
            log(f"received {signal.Signals(signum).name}: abandoning the current unit, it resumes next run")
            stop.set()

        # SIGUSR2 is what SLURM sends before a time limit (--signal=USR2@90 in the job script): stop cleanly too
        for sig in (signal.SIGTERM, signal.SIGINT, *([signal.SIGUSR2] if hasattr(signal, "SIGUSR2") else [])):
            previous[sig] = signal.signal(sig, _on_signal)
    with FileLock(work.worker_lock(me)):
        progress = WorkerProgress(work, me, on_update)
        progress.publish(force=True, model=options.model)
        try:
            state = _work(_Context(panel_path, options, work, me, progress, stop, log), requested)
        except BaseException as exc:
            msg = str(exc) if isinstance(exc, MemtuiError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, Exception):  # ctrl-c, or submitit exiting a task it has just requeued
                progress.publish(force=True, state="cancelled", last_error="interrupted", unit=None)
                raise
            first = clean(msg.splitlines()[0] if msg else repr(exc), 300)
            progress.publish(force=True, state="failed", last_error=first, unit=None)
            if not isinstance(exc, MemtuiError):
                # the traceback is for a bug report: it goes to the log, the user sees one line that points there
                where = _append_to_log(panel_path, traceback.format_exc())
                raise MemtuiError(f"extraction failed: {first}" + (f" (details in {where})" if where else "")) from exc
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return state


class _Scorer:
    """The model on the device, loaded on the first unit and refreshed in place for the next; batches with OOM
    halving. Rows of a unit are scored longest first (an out-of-memory batch shows up at once), in the same order
    and batches a single worker uses for a whole checkpoint, so whole-checkpoint units are bitwise reproducible."""

    def __init__(self, options: ExtractOptions, tokens: np.ndarray, lengths: np.ndarray, panel_path, log, metrics, kl):
        from memtui.extract.scoring import resolve_device, resolve_dtype

        self.options, self.tokens, self.lengths, self.panel_path, self.log = options, tokens, lengths, panel_path, log
        self.metrics = metrics  # the panel's: a part carries exactly these
        self.kl = kl  # (k, l) when the panel has extractability metrics, else None
        self.goldfish = None  # the panel's token-level loss mask, when it has the trained-target metrics
        self.token_rows = np.empty(0, np.int64)  # the panel's per-token subset (sorted rows), if it has one
        self.width = 0
        self.dev = resolve_device(options.device)
        self.body_dtype = resolve_dtype(options.dtype, self.dev)
        n = len(lengths)
        bs = options.batch_size
        self.bs = auto_batch(self.dev, n, int(lengths.max())) if str(bs) == "auto" else int(bs)
        self.net = self.scorer = None
        self.delay = float(os.environ.get("MEMTUI_EXTRACT_BATCH_DELAY") or 0)  # test hook: slow batches down

    def way(self) -> str:
        """How this worker scores, in the words ``checkpoints/scoring`` records (memtui.panel.scoring)."""
        from memtui.extract.scoring import scoring_way

        return scoring_way(self.dev, self.body_dtype, self.options.batch_invariant)

    def load(self, loaded: Loaded) -> None:
        from memtui.extract.scoring import Scorer, check_head

        if self.net is None:
            self.net = to_body_dtype(loaded.model.to(self.dev), self.body_dtype)
            # --batch-invariant on/off switches the fixed-shape path (auto: on for CPU and CUDA)
            invariant = {"auto": None, "on": True, "off": False}[self.options.batch_invariant]
            sampling = (registry.SAMPLING_TOP_K, registry.SAMPLING_TEMPERATURE) if SAMPLED in self.metrics else None
            self.scorer = Scorer(self.net, self.dev, self.options.chunk, extractable=self.kl, invariant=invariant,
                                 sampling=sampling, goldfish=self.goldfish)  # fmt: skip
            check_head(self.net, self.scorer, self.scorer.vocab)
            check_tokens(self.tokens, self.lengths, self.scorer.vocab, self.panel_path)  # one vocabulary for all
        else:
            copy_weights(self.net, loaded.model)
            self.scorer.refresh_head()

    def _batch(self, order: np.ndarray, i: int) -> np.ndarray:
        """The next batch: ``bs`` rows of ``order`` from ``i``; for the batch-invariant scorer, rows of one length
        only, in whole micro-batches where ``bs`` allows (the auto batch always does), so that filler rows are needed
        only for a length's last micro-batch."""
        rows = order[i : i + self.bs]
        if not self.scorer.invariant:
            return rows
        from memtui.extract.scoring import micro_rows

        length = self.lengths[rows[0]]
        m = micro_rows(length)
        rows = rows[: np.argmax(np.r_[self.lengths[rows] != length, True])]  # order is longest first: a prefix
        return rows if len(rows) < m else rows[: len(rows) // m * m]

    def unit_token_rows(self, unit: Unit) -> np.ndarray:
        """The unit's rows of the per-token subset."""
        return self.token_rows[(self.token_rows >= unit.lo) & (self.token_rows < unit.hi)]

    def score(
        self, unit: Unit, should_stop: Callable[[], bool], on_batch, tokens_only: bool = False
    ) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        """The unit's metric columns and the per-token scores of its subset rows (rows x W, NaN-padded); with
        ``tokens_only`` (its metrics are committed) only the subset rows are scored, the columns left NaN."""
        import torch

        keep = self.unit_token_rows(unit)
        rows_all = keep if tokens_only else np.arange(unit.lo, unit.hi)
        order = rows_all[np.argsort(-self.lengths[rows_all], kind="stable")]
        cols = {m: np.full(unit.hi - unit.lo, np.nan) for m in self.metrics}
        per_token = np.full((len(keep), self.width), np.nan, np.float32)
        slot = {int(r): j for j, r in enumerate(keep)}
        i = 0
        while i < len(order):
            if should_stop():
                return None
            rows = self._batch(order, i)
            L = int(self.lengths[rows].max())
            try:
                batch, lens = self.tokens[rows, :L], self.lengths[rows]
                wanted = [j for j, r in enumerate(rows) if int(r) in slot]  # rows of the per-token subset
                out, kept = (
                    self.scorer.score_tokens(batch, lens, wanted) if wanted else (self.scorer.score(batch, lens), {})
                )
            except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
                if not _is_oom(exc) or self.bs == 1:
                    raise
                self.scorer.release()
                if self.dev.type == "cuda":
                    torch.cuda.empty_cache()
                self.bs = max(1, self.bs // 2)
                self.log(f"out of memory: batch size now {self.bs}")
                continue
            for name in self.metrics:
                cols[name][rows - unit.lo] = out[name]
            for j, values in kept.items():
                per_token[slot[int(rows[j])], : len(values)] = values
            if self.delay:
                time.sleep(self.delay)
            i += len(rows)
            on_batch(i, int(self.lengths[rows].sum()))
        return cols, per_token


@dataclass(frozen=True)
class _Context:
    """What every step of one worker's run needs: the panel, the options and how the run reports and stops."""

    panel_path: Path
    options: ExtractOptions
    work: WorkDir
    me: Owner
    progress: WorkerProgress
    stop: threading.Event
    log: Callable[[str], None]

    def should_stop(self) -> bool:
        """Read between batches: the stop event (signals, the app) or the panel's cancel flag (`memtui cancel`)."""
        return self.stop.is_set() or cancel_flag(self.panel_path).exists()


def _work(ctx: _Context, requested: list[int] | None) -> str:
    from memtui.extract.token_scores import ensure_group

    ensure_group(ctx.panel_path, ctx.options.token_scores, ctx.me)  # --token-scores given to this worker itself
    panel = read_panel(ctx.panel_path)
    source = Source.open(ctx.options.model, ctx.options.revision_template)
    record_checkpoint_notes(ctx.panel_path, source, panel.steps)  # a manifest's gaps and the weight averages, for info
    steps = plan_steps(panel.steps, read_done(ctx.panel_path)[1], requested, source)
    units = plan_units(steps, panel.steps, panel.n_instances, ctx.options.split)
    ctx.progress.publish(force=True, model=ctx.options.model, K=len(units), instances_total=panel.n_instances,
                         checkpoints_done=int(panel.done.sum()), checkpoints_total=panel.n_checkpoints)  # fmt: skip
    if not units:
        # the columns already scored are still checked for shards another checkpoint carries: marked, not undone
        ShardCheck(ctx.panel_path, panel.steps, panel.done, (), ctx.log).before_scoring(source)
        expect = lambda step: {"model": source.model, "revision": source.revision(step)}  # noqa: E731
        commit_ready(ctx.panel_path, ctx.work, ctx.me, ctx.log, expect=expect)
        ctx.log(f"{ctx.panel_path}: nothing to do, every requested checkpoint is already extracted")
        ctx.progress.publish(force=True, state="done", k=0, eta_s=0)
        return "done"
    return _Pass(ctx, panel, source, units).run()


class _Pass:
    """The loop over a panel's pending units: commit what is ready, claim a unit, score it, write its part; until no
    unit is left or the run is stopped. A claimed unit is released however its scoring ends, a failure included, so
    the next run (even from this process, whose pid still lives) takes it at once instead of after ``stale_s``."""

    def __init__(self, ctx: _Context, panel, source: Source, units: list[Unit]) -> None:
        self.ctx, self.source, self.units = ctx, source, units
        tokens, lengths = read_tokens(ctx.panel_path)
        lengths = lengths.astype(np.int64)
        self.metrics, kl = ctx.options.metrics_for(ctx.panel_path, panel)
        self.scorer = _Scorer(ctx.options, tokens, lengths, ctx.panel_path, ctx.log, self.metrics, kl)
        if set(self.metrics) & set(registry.GOLDFISH):
            from memtui.orders.goldfish import from_attrs

            self.scorer.goldfish = from_attrs(panel.attrs, ctx.panel_path)
        self.layout = read_layout(ctx.panel_path)  # the per-token subset, if the panel asks for one
        if self.layout is not None:
            self.scorer.token_rows, self.scorer.width = self.layout.rows, self.layout.width
        self.unit_tokens = {u.name: int(lengths[u.lo : u.hi].sum()) for u in units}
        self.known_hashes = {
            h: int(s) for h, s, d in zip(panel.weight_hashes, panel.steps, panel.done, strict=False) if h and d
        }
        self.refused: set[int] = set()  # steps whose weights are another step's: never recorded, left undone
        # steps carrying another checkpoint's shard: refused before anything is scored where their files are known
        run_steps = {u.step for u in units}
        warn = ctx.progress.data["warnings"].append
        self.shards = ShardCheck(ctx.panel_path, panel.steps, panel.done, run_steps, ctx.log, warn)
        self.refused |= self.shards.before_scoring(source)
        self.n_instances = panel.n_instances
        self.done_units, self.done_tokens, self.t_start = 0, 0, time.time()
        self._discard_foreign_parts()

    def expect(self, step: int) -> dict:
        """The model and revision this run scores ``step`` with: every part of a column must carry the same."""
        return {"model": self.source.model, "revision": self.source.revision(step)}

    def _discard_foreign_parts(self) -> None:
        """Parts left by an earlier run with another model or revision (cancelled, then rerun with --model B) would
        fill half a column with that model's values: they are discarded now, one line each, and scored again; parts
        that cannot be read are set aside."""
        ctx = self.ctx
        for unit in self.units:
            if not ctx.work.has_part(unit):
                continue
            try:
                ctx.work.read_part(unit, self.metrics, self.expect(unit.step))
            except PartMismatch as exc:
                ctx.work.drop(unit)
                ctx.log(f"discarded part {unit.name}: {exc}; it is scored again")
            except PartError as exc:
                where = ctx.work.set_aside(unit)
                ctx.log(f"part {exc}; {f'set aside as {where}' if where else 'deleted'}, its unit is scored again")

    def run(self) -> str:
        ctx, scorer = self.ctx, self.scorer
        ctx.progress.publish(force=True, device=str(scorer.dev), dtype=str(scorer.body_dtype).replace("torch.", ""))
        dtype = str(scorer.body_dtype).replace("torch.", "")
        ctx.log(f"worker {ctx.me.id}: {len(self.units)} unit(s) of {ctx.options.model} for {ctx.panel_path} on "
                f"device {scorer.dev} ({dtype}), {self.n_instances} instances")  # fmt: skip
        if warning := scoring.resume_warning(*read_scorings(ctx.panel_path), scorer.way()):
            ctx.log(warning)
            ctx.progress.data["warnings"].append(warning.removeprefix("warning: "))  # `memtui status` shows it
        self.loader = Loader(self.source, hashes_dir(ctx.panel_path))
        self.heartbeat = Heartbeat(ctx.work, ctx.me, ctx.progress)
        waiting = False
        try:
            while not ctx.should_stop():
                ctx.work.check()
                pending = self._pending()
                if not pending:
                    if not self._wait_for_committer():
                        break
                    continue
                unit = next((u for u in pending if ctx.work.try_claim(u, ctx.me)), None)
                if unit is None:  # every pending unit is held by a live worker: wait, and take over any that dies
                    if not waiting:  # once per wait, so a log read hours later says why this worker sat idle
                        ctx.log(f"worker {ctx.me.id}: waiting, the {len(pending)} unit(s) left are claimed by other "
                                "live workers; it takes over any whose worker stops")  # fmt: skip
                    waiting = True
                    ctx.progress.publish(unit=None, state="running", checkpoint=None)
                    ctx.stop.wait(min(2.0, heartbeat_s()))
                    continue
                waiting = False
                if not self._unit(unit, pending):
                    break
            committed = self._commit()
        finally:
            self.heartbeat.close()
            self.loader.close()
        return self._finish(committed)

    def _commit(self) -> int:
        ctx = self.ctx
        return commit_ready(ctx.panel_path, ctx.work, ctx.me, ctx.log, expect=self.expect)

    def _wait_for_committer(self) -> bool:
        """Every unit is scored; if some are not in the panel yet, another committer holds the lease: wait while it
        folds (True: look again). A lease that nobody can honour — its holder dead, a live unrelated pid, empty, from
        the future — is taken over by the next look, so waiting ends; a lease that stays held with no progress for
        twice the stale limit is reported as it is (a one-line error naming the holder), never as "done"."""
        ctx = self.ctx
        _, done = read_done(ctx.panel_path)
        uncommitted = sorted({u.step for u in self.units if not done[u.index] and u.step not in self.refused})
        if not uncommitted:
            self._waiting_since = None
            return False
        progress_mark = int(done.sum())
        if getattr(self, "_waiting_since", None) is None or progress_mark != self._progress_mark:
            if getattr(self, "_waiting_since", None) is None:
                ctx.log(f"worker {ctx.me.id}: {len(uncommitted)} checkpoint(s) scored, waiting for the committer: "
                        f"{describe_lease(ctx.work, ctx.me) or 'the lease is free now'}")  # fmt: skip
            self._waiting_since, self._progress_mark = time.monotonic(), progress_mark
        elif time.monotonic() - self._waiting_since > 2 * stale_s():
            raise MemtuiError(
                f"{len(uncommitted)} checkpoint(s) are scored but not committed, and nobody committed anything for "
                f"{2 * stale_s():,.0f} s: {describe_lease(ctx.work, ctx.me) or 'no lease is held'}; the parts are "
                f"kept in {ctx.work.parts}: rerun to commit them."
            )
        ctx.progress.publish(unit=None, state="running", checkpoint=None)
        ctx.stop.wait(min(2.0, heartbeat_s()))
        return True

    def _pending(self) -> list[Unit]:
        """Units with neither a committed column nor a written part, after committing what is ready."""
        ctx = self.ctx
        self._commit()
        _, done = read_done(ctx.panel_path)
        return [u for u in self.units if not done[u.index] and not ctx.work.has_part(u) and u.step not in self.refused]

    def _unit(self, unit: Unit, pending: list[Unit]) -> bool:
        """Score the claimed ``unit`` and write its part; False when the run is to end (it was stopped)."""
        ctx = self.ctx
        self.heartbeat.hold(unit)
        try:
            after = [
                u for u in pending if u is not unit and u.step != unit.step and not ctx.work.claimed_by_live(u, ctx.me)
            ]
            loaded = self.loader.get(unit.step)
            self.loader.prefetch(after[0].step if after else None)
            if self._refuse_duplicate(loaded) or not self.shards.admit(loaded.step, loaded.revision, loaded.shards):
                self.refused |= {loaded.step, *self.shards.refused}
                del loaded.model
                return True
            self.scorer.load(loaded)
            ctx.progress.publish(force=True, unit=unit.name, checkpoint=unit.step, k=self.done_units + 1,
                                 instances_done=0, batch_size=self.scorer.bs)  # fmt: skip
            lost = self.heartbeat.lost
            tokens_only = bool(read_metrics_done(ctx.panel_path)[1][unit.index])  # rescored for its per-token scores
            got = self.scorer.score(unit, lambda: ctx.should_stop() or lost.is_set(), self._on_batch(unit, pending),
                                    tokens_only=tokens_only and self.layout is not None)  # fmt: skip
            del loaded.model
            if got is None:
                taken = lost.is_set() and not ctx.should_stop()
                if taken:
                    ctx.log(f"unit {unit.name} was taken over by another worker (this one looked stale); moving on")
                return taken
            cols, per_token = got
            self._write(unit, cols, loaded, per_token, tokens_only)
            self.known_hashes.setdefault(loaded.weights_hash, unit.step)  # its part is written: it will be recorded
            clear_duplicate(ctx.panel_path, unit.step)
        finally:
            ctx.work.release(unit, ctx.me)
            self.heartbeat.hold(None)
        self.done_units += 1
        shown = self.metrics[0]  # loglik, where the panel has it
        mean = f"mean {shown} {np.nanmean(cols[shown]):.2f}" if not tokens_only else "per-token scores only"
        ctx.log(f"[{self.done_units}] {unit.name} done ({self._rate():,.0f} tokens/s); {mean}")
        return True

    def _refuse_duplicate(self, loaded: Loaded) -> bool:
        """True when ``loaded``'s weights are those of another step already recorded in the panel (or written by
        this worker): the step is not scored, its column stays undone, one line goes to the log and a record to
        ``PANEL.work/duplicates/`` for `memtui info` (EleutherAI/pythia#205, #206: published branches that are
        another's checkpoint)."""
        other = self.known_hashes.get(loaded.weights_hash)
        if other is None or other == loaded.step:
            return False
        if loaded.step not in self.refused:
            self.refused.add(loaded.step)
            note = (f"step {loaded.step} ({loaded.revision}) not recorded: its weights equal step {other}'s "
                    f"(weights hash {loaded.weights_hash}); its column is left undone")  # fmt: skip
            self.ctx.log(note)
            self.ctx.progress.data["warnings"].append(note)
            record_duplicate(self.ctx.panel_path, loaded.step, other, loaded.revision, loaded.weights_hash)
        return True

    def _on_batch(self, unit: Unit, pending: list[Unit]) -> Callable[[int, int], None]:
        left_after = sum(self.unit_tokens[u.name] for u in pending if u is not unit)

        def on_batch(i: int, tokens_in_batch: int) -> None:
            self.done_tokens += tokens_in_batch
            rate = self._rate()
            left = left_after + self.unit_tokens[unit.name]
            self.ctx.progress.publish(instances_done=unit.lo + i, tokens_per_s=rate, eta_s=left / rate,
                                      batch_size=self.scorer.bs)  # fmt: skip

        return on_batch

    def _rate(self) -> float:
        return self.done_tokens / max(time.time() - self.t_start, 1e-9)

    def _write(self, unit: Unit, cols: dict[str, np.ndarray], loaded: Loaded, per_token, tokens_only: bool) -> None:
        scorer = self.scorer
        meta = {"revision": loaded.revision, "weights_hash": loaded.weights_hash, "model": self.source.model,
                "parameters": loaded.parameters, "config": loaded.config, "worker": self.ctx.me.id,
                "tokens_only": tokens_only,
                "average": self.source.averages([unit.step]).get(unit.step, ""),
                "scoring": scorer.way()}  # fmt: skip
        tokens = (scorer.unit_token_rows(unit), per_token) if self.layout is not None else None
        self.ctx.work.check()  # never write through a folder swapped for a link mid-run
        try:
            self.ctx.work.write_part(unit, cols, meta, tokens)
        except WriteError as exc:
            raise MemtuiError(self.ctx.work.why_unwritable(str(exc).rstrip("."))) from None

    def _finish(self, committed) -> str:
        ctx = self.ctx
        _, done = read_done(ctx.panel_path)
        ctx.progress.publish(force=True, unit=None, checkpoints_done=int(done.sum()))
        if ctx.should_stop():
            ctx.progress.publish(force=True, state="cancelled", last_error=None, eta_s=None)
            ctx.log("cancelled; rerun the same command to resume from the first unfinished unit")
            return "cancelled"
        missing = sorted({u.step for u in self.units if not done[u.index] and u.step not in self.refused})
        if missing:  # the loop only ends with every unit committed, unless stopped: never call this "done"
            raise MemtuiError(
                f"{len(missing)} checkpoint(s) are not committed: "
                f"{describe_lease(ctx.work, ctx.me) or 'no lease is held'}; rerun to finish them."
            )
        ctx.progress.publish(force=True, state="done", eta_s=0)
        refused = f"; {len(self.refused)} duplicate step(s) left undone" if self.refused else ""
        ctx.log(f"done: {self.done_units} unit(s) in {time.time() - self.t_start:,.0f} s{refused}")
        return "done"


def main(argv: list[str] | None = None, handle_signals: bool = True) -> int:
    """Entry point of a detached worker (``python -m memtui.extract.worker PANEL ...``); inside a submitit task,
    ``handle_signals=False`` leaves SIGUSR2/SIGTERM to submitit, which requeues the task."""
    p = argparse.ArgumentParser(prog="memtui-extract-worker")
    p.add_argument("panel")
    ExtractOptions.add_worker_arguments(p)
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        with contextlib.suppress(OSError):  # the log is stdout on a file that may be full: the run goes on
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}", flush=True)

    try:
        state = run(args.panel, ExtractOptions.from_args(args), log=log, handle_signals=handle_signals)
    except MemtuiError as exc:
        log(f"memtui: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0 if state == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
