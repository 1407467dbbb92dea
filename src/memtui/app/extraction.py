"""Extraction pane: launch a detached extraction worker into this panel, watch what it publishes, cancel it.

The worker is a separate process (``memtui.extract.jobs.launch``), so quitting the app leaves it running and
reopening the panel finds it again through ``read_progress``. A background thread polls that progress and the
panel's ``done`` flags; when a checkpoint completes, the app re-reads the panel and re-estimates.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from types import ModuleType

import numpy as np
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Input, Label, ProgressBar, Static
from textual.worker import get_current_worker

from memtui.app.dialogs import Choice
from memtui.app.restyle import RestyleSelfOnFocus
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.panel.model import Panel

POLL_S = 0.5
START_DELAY_S = 0.5
RUNNING = ("running",)  # the job states that mean workers are at it (progress.STATES)


def load_jobs() -> ModuleType | None:
    """The extraction job API (imported when the pane first needs it, not at the app's start; it never imports torch
    or transformers, which an import-linter contract holds), or None where it cannot be imported."""
    try:
        from memtui.extract import jobs
    except ImportError:
        return None
    return jobs


def read_done(path: Path) -> np.ndarray | None:
    """The panel's per-checkpoint done flags, read while a writer may hold the file (SWMR); None if unreadable."""
    from memtui.panel.hdf5 import read_done as read_flags

    try:
        return read_flags(path)[1]
    except MemtuiError:
        return None


# The progress file is written by another process and may hold anything (a damaged file, another program's JSON):
# every field is read through these, and a value of the wrong kind is treated as absent.


def _number(value) -> float | None:
    """A finite, non-negative number, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer past float range
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _count(value) -> int | None:
    """A whole number a progress record can sensibly hold (a step, a pid, a count), or None."""
    number = _number(value)
    return int(number) if number is not None and number < 1e15 and number == int(number) else None


def _record(progress) -> dict | None:
    """The record as a dict (None: no job); anything else is reported as unreadable rather than trusted."""
    if progress is None or isinstance(progress, dict):
        return progress
    return {"state": "unreadable", "last_error": f"the progress file holds a {type(progress).__name__}, not a record"}


def duration(seconds) -> str:
    seconds = _number(seconds)
    if seconds is None or seconds >= 1e8:  # past three years an ETA says nothing
        return "—"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def is_running(progress) -> bool:
    return isinstance(progress, dict) and progress.get("state") in RUNNING


def checkpoint_line(progress: dict, steps=None) -> str:
    """The checkpoint being extracted, numbered as everywhere else in memtui: its place among the panel's
    checkpoints ("checkpoint 24 of 41", like "23/41 ckpts" in the title); the job's own count only follows."""
    k, total = _count(progress.get("k")), _count(progress.get("K"))
    step = _count(progress.get("checkpoint"))
    job = f"this job's {k} of {total}" if k is not None and total else ""
    if step is not None and steps is not None and len(steps):
        where = np.flatnonzero(np.asarray(steps) == step)
        if where.size:
            line = f"checkpoint {int(where[0]) + 1} of {len(steps)} (step {step})"
            return f"{line} · {job}" if job else line
    if job:
        return f"job checkpoint {k} of {total}" + (f" (step {step})" if step is not None else "")
    return ""


def job_indicator(progress, done) -> str:
    """The top bar's line while a job runs, on every pane: ``extracting 23/41 · ETA 12m``; empty otherwise."""
    progress = _record(progress)
    if not is_running(progress):
        return ""
    done = np.asarray(done, dtype=bool) if done is not None else np.zeros(0, dtype=bool)
    eta = progress.get("eta_s")
    text = f"extracting {int(done.sum())}/{done.size}"
    return text + (f" · ETA {duration(eta)}" if _number(eta) is not None else "")


def progress_text(progress, steps=None) -> str:
    """What the worker last published, in words (also what the tests read). Takes whatever the progress file held;
    every string in it is cleaned, since it comes from a file. ``steps``: the panel's checkpoints, for numbering."""
    progress = _record(progress)
    if not progress:
        return "No extraction job has run on this panel."
    state = clean(progress.get("state", "?"), 40)
    pid = _count(progress.get("pid"))
    lines = [f"job {state}" + (f" · pid {pid}" if pid else "")]
    if isinstance(progress.get("model"), str) and progress["model"]:
        lines.append(f"model: {clean(progress['model'], 200)}")
    where = checkpoint_line(progress, steps)
    if where:
        lines.append(where)
    done, n = _count(progress.get("instances_done")), _count(progress.get("instances_total"))
    if done is not None and n:
        lines.append(f"instances {done} / {n} in this checkpoint")
    tps = _number(progress.get("tokens_per_s"))
    if tps and is_running(progress):  # a dead or cancelled job's last rate and ETA say nothing any more
        rate = f"{tps:,.0f}" if tps < 1e12 else f"{tps:.3g}"
        lines.append(f"{rate} tokens/s · ETA {duration(progress.get('eta_s'))}")
    if progress.get("last_error"):
        lines.append(f"last error: {clean(progress['last_error'], 300)}")
    warnings = progress.get("warnings")
    if isinstance(warnings, (list, tuple)) and warnings:
        lines.append(f"warnings ({len(warnings)}): {clean(warnings[-1], 300)}")
    elif isinstance(warnings, str) and warnings:
        lines.append(f"warnings: {clean(warnings, 300)}")
    workers = progress.get("workers")
    if isinstance(workers, list) and workers:
        from memtui.extract.progress import describe_worker, parse

        lines.append(f"workers ({len(workers)}):")
        lines += [f"  {clean(describe_worker(parse(w)), 200)}" for w in workers[:32]]
        if len(workers) > 32:
            lines.append(f"  … and {len(workers) - 32} more (memtui status)")
    if progress.get("log"):
        lines.append(f"log: {clean(progress['log'], 300)}")
    return "\n".join(lines)


class ExtractionPane(RestyleSelfOnFocus, VerticalScroll):
    """The launch form, the running job's progress, and cancel."""

    BINDINGS = [
        # out of the footer: the buttons say them ("Launch (ctrl+r)"), and the footer keeps the main keys at 80 columns
        Binding(
            "ctrl+r",
            "launch",
            "Launch",
            priority=True,
            show=False,
            tooltip="Launch extraction with the form's settings",
        ),
        Binding(
            "ctrl+t",
            "cancel_job",
            "Cancel job",
            priority=True,
            show=False,
            tooltip="Cancel the running job (asks first)",
        ),  # fmt: skip
        Binding("escape", "leave_form", "Leave form", show=False),
    ]

    class Status(Message):
        """Posted from the poller when the job's progress or the panel's completed checkpoints change."""

        def __init__(self, progress: dict | None, done: np.ndarray | None, available: bool) -> None:
            super().__init__()
            self.progress = progress
            self.done = done
            self.available = available

    class CheckpointsChanged(Message):
        """More (or fewer) checkpoints are complete in the panel file than in the app's copy."""

    def __init__(self, panel: Panel, **kwargs) -> None:
        super().__init__(**kwargs)
        self.panel = panel
        self.progress: dict | None = None
        self.available = True
        self._recheck = False  # set from the app: the poller reports the current state again, changed or not

    def compose(self) -> ComposeResult:
        # markup off: the panel's name, attributes and the progress file's fields are shown as written
        yield Static("", id="extract-panel", markup=False)
        with Vertical(id="extract-form"):
            model = self.panel.attrs.get("model", "")
            model = model if isinstance(model, str) and model and " " not in model else ""  # a hub id or folder
            model = clean(model) if model == clean(model) else ""  # one with control characters is not a name
            yield _field("model / folder", Input(model, placeholder="hub id or local checkpoint folder", id="ex-model"))
            yield _field("checkpoints", Input("all", placeholder="all, 0:95000:1000 or 0,1000,2000", id="ex-ckpt"))
            devices = [(d, d) for d in ("auto", "cpu", "cuda", "mps")]
            yield _field("device", Choice(devices, "auto", id="ex-device"))
            dtypes = [(d, d) for d in ("auto", "float32", "bfloat16", "float16")]
            yield _field("dtype", Choice(dtypes, "auto", id="ex-dtype"))
            yield _field("batch size", Input("auto", placeholder="auto or a number", id="ex-batch"))
            modes = [("this machine", "local"), ("this machine's GPUs", "gpus"), ("SLURM array", "slurm")]
            yield _field("workers on", Choice(modes, "local", id="ex-mode"))
            yield _field("workers", Input("1", placeholder="how many (SLURM: array tasks)", id="ex-workers"),
                         classes="mode-local mode-slurm")  # fmt: skip
            yield _field("GPUs", Input("all", placeholder="all or 0,1,2,3", id="ex-gpus"), classes="mode-gpus")
            yield _field("partition", Input("", placeholder="SLURM partition", id="ex-partition"), classes="mode-slurm")
            yield _field("time limit", Input("4:00:00", placeholder="per task, HH:MM:SS", id="ex-time"),
                         classes="mode-slurm")  # fmt: skip
            yield _field("account", Input("", placeholder="optional", id="ex-account"), classes="mode-slurm")
            yield _field("GPUs per task", Input("1", id="ex-gpt"), classes="mode-slurm")
            yield _field("sbatch extra", Input("", placeholder="e.g. --qos=high", id="ex-extra"), classes="mode-slurm")
            with Horizontal(classes="buttons"):
                yield Button("Launch (ctrl+r)", variant="primary", id="ex-launch")
                yield Button("Cancel job (ctrl+t)", variant="error", id="ex-cancel")
            yield Static("", id="ex-error", classes="error", markup=False)
        yield ProgressBar(total=1, show_eta=False, id="ex-bar")
        yield Static(progress_text(None), id="ex-status", markup=False)

    def on_mount(self) -> None:
        hidden_panes = getattr(self.app, "hidden_panes", None)
        if hidden_panes is not None:  # the rows of the modes not chosen are left out of a theme change's restyle
            hidden_panes.watch_rows(self.query_one("#extract-form"))
        self.describe_panel(self.panel)
        self._show_mode("local")
        # Importing the job API and polling cost a little CPU: let the first profile paint before they start,
        # unless there is nothing to paint yet.
        if self.panel.done.any():
            self.set_timer(START_DELAY_S, lambda: self._poll(self.panel.path))
        else:
            self._poll(self.panel.path)

    def describe_panel(self, panel: Panel) -> None:
        """Show ``panel``: a re-read copy of the same file, or another model of a suite (then its job is followed)."""
        moved = panel.path != self.panel.path
        self.panel = panel
        if moved:
            self.progress = None
            self._poll(panel.path)  # exclusive: the previous model's poller stops
        n, t = int(panel.done.sum()), panel.n_checkpoints
        text = f"{clean(panel.path.name, 80) if panel.path else 'panel'}: {n}/{t} checkpoints extracted"
        if not panel.has_tokens:
            text += (
                " · this panel stores no token ids, so it cannot be extracted into "
                "(build one with token ids to extract a model)"
            )
        self.query_one("#extract-panel", Static).update(text)
        self._update_buttons()

    def launch_blocker(self) -> str:
        """Why Launch cannot work now, in words; empty when it can."""
        if not self.available:
            return "Extraction is not available in this install."
        if not self.panel.has_tokens:
            return "This panel stores no token ids, so nothing can be extracted into it."
        if self.running:
            return "A job is already running on this panel; cancel it (ctrl+t) to start another."
        return ""

    def _update_buttons(self) -> None:
        launch = self.query_one("#ex-launch", Button)
        blocker = self.launch_blocker()
        launch.disabled = bool(blocker)
        launch.tooltip = blocker or None
        self.query_one("#ex-cancel", Button).disabled = not self.running

    # ---- polling ------------------------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="extract-poll", exit_on_error=False)
    def _poll(self, path: Path) -> None:
        """Publish progress and done flags whenever they change; exits when the app cancels its workers."""
        worker = get_current_worker()
        jobs = load_jobs()
        if jobs is None:
            self.post_message(self.Status(None, None, False))
            return
        last = object()
        while not worker.is_cancelled:
            try:
                progress = jobs.read_progress(path)
            except Exception as exc:  # noqa: BLE001 - keep polling; say what went wrong in the pane
                progress = {"state": "unreadable", "last_error": str(exc) or type(exc).__name__}
            done = read_done(path)
            key = (repr(progress), None if done is None else done.tobytes())
            if key != last or self._recheck:
                last, self._recheck = key, False
                self.post_message(self.Status(progress, done, True))
            for _ in range(int(POLL_S / 0.05)):
                if worker.is_cancelled:
                    return
                time.sleep(0.05)

    def recheck(self) -> None:
        """Have the next poll report the panel's done flags even if unchanged (after a reload that failed)."""
        self._recheck = True

    def on_extraction_pane_status(self, event: Status) -> None:
        self.available = event.available
        if not event.available:
            self.query_one("#ex-status", Static).update("Extraction is not available in this install.")
            self._update_buttons()
            return
        self.show_progress(event.progress)
        if event.done is not None and not np.array_equal(event.done, self.panel.done):
            self.post_message(self.CheckpointsChanged())

    def show_progress(self, progress) -> None:
        progress = _record(progress)
        self.progress = progress
        self.query_one("#ex-status", Static).update(progress_text(progress, self.panel.steps))
        self._update_buttons()
        bar = self.query_one("#ex-bar", ProgressBar)
        record = progress or {}
        k, total = _count(record.get("k")), _count(record.get("K"))
        bar.display = bool(total)
        if total:
            done, n = _count(record.get("instances_done")) or 0, _count(record.get("instances_total")) or 0
            within = min(done / n, 1.0) if n else 0.0
            finished = record.get("state") == "done"
            bar.update(total=total, progress=total if finished else min(total, max(0, (k or 1) - 1) + within))

    @property
    def running(self) -> bool:
        return is_running(self.progress)

    @on(Choice.Changed, "#ex-mode")
    def _mode_changed(self, event: Choice.Changed) -> None:
        self._show_mode(event.choice.value)

    def _show_mode(self, mode: str) -> None:
        """Only the fields of the chosen way of running show (the form stays short at 80 x 24)."""
        for cls in ("mode-local", "mode-gpus", "mode-slurm"):
            for field in self.query(f".{cls}"):
                field.display = f"mode-{mode}" in field.classes
        hidden_panes = getattr(self.app, "hidden_panes", None)
        if hidden_panes is not None:
            hidden_panes.restyle_shown()  # a row left out of a restyle while hidden: styled before it is drawn

    # ---- actions ------------------------------------------------------------------------------------------------

    def error(self, text: str) -> None:
        self.query_one("#ex-error", Static).update(text)

    @on(Button.Pressed, "#ex-launch")
    def action_launch(self) -> None:
        blocker = self.launch_blocker()
        if blocker:  # ctrl+r and the palette reach here even while the button is disabled
            self.error(blocker)
            return
        model = self.query_one("#ex-model", Input).value.strip()
        if not model:
            self.error("Give a model: a Hugging Face hub id or a local folder of checkpoints.")
            return
        try:
            options = self._options(model)
        except MemtuiError as exc:
            self.error(clean(exc))
            return
        self.error("launching…")
        self._launch(self.panel.path, options)

    def _options(self, model: str):
        """The form as ExtractOptions, parsed and validated by the same code as `memtui extract`'s arguments."""
        from argparse import Namespace

        from memtui.extract.options import ExtractOptions

        def text(widget_id: str) -> str:
            return self.query_one(widget_id, Input).value.strip()

        def whole(widget_id: str, what: str) -> int:
            try:
                return int(text(widget_id))
            except ValueError:
                raise MemtuiError(f"{what} must be a whole number, not '{clean(text(widget_id), 40)}'.") from None

        batch = text("#ex-batch") or "auto"
        if batch != "auto" and not batch.isdigit():
            raise MemtuiError(f"batch size must be auto or a whole number, not '{clean(batch, 40)}'.")
        mode = self.query_one("#ex-mode", Choice).value
        args = Namespace(
            model=model,
            checkpoints=text("#ex-ckpt") or "all",
            device=self.query_one("#ex-device", Choice).value,
            dtype=self.query_one("#ex-dtype", Choice).value,
            batch_size=batch,
            chunk=None,
            revision_template="step{step}",
            split=1,
            workers=whole("#ex-workers", "workers") if mode in ("local", "slurm") else None,
            gpus=(text("#ex-gpus") or "all") if mode == "gpus" else None,
            slurm=mode == "slurm",
            partition=text("#ex-partition") or None,
            time=text("#ex-time") or "4:00:00",
            account=text("#ex-account") or None,
            gpus_per_task=whole("#ex-gpt", "GPUs per task") if mode == "slurm" else 1,
            cpus_per_task=None,
            mem=None,
            slurm_extra=text("#ex-extra"),
        )
        return ExtractOptions.from_args(args).validate()

    @work(thread=True, group="extract-launch", exit_on_error=False)
    def _launch(self, path: Path, options) -> None:
        jobs = load_jobs()
        try:
            if options.slurm is not None:
                from memtui.extract import slurm
                from memtui.panel.hdf5 import read_panel

                panel, options = jobs.prepare(path, options)
                job = slurm.submit(panel, options, read_panel(panel).steps)
                said = f"submitted SLURM job array {job} ({options.workers} tasks); it runs if you quit."
                self.app.call_from_thread(self.error, said)
                return
            pid = jobs.launch(path, options)
        except MemtuiError as exc:
            self.app.call_from_thread(self.error, clean(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bug in launching must not leave the form saying "launching…"
            self.app.call_from_thread(self.error, clean(f"launch failed: {type(exc).__name__}: {exc}"))
            return
        pids = list(pid) if isinstance(pid, (list, tuple)) else [pid]  # one pid per local worker
        if len(pids) == 1:
            said = f"launched worker pid {pids[0]}; it keeps running if you quit."
        else:
            said = f"launched {len(pids)} workers (pids {', '.join(map(str, pids))}); they keep running if you quit."
        self.app.call_from_thread(self.error, said)

    @on(Button.Pressed, "#ex-cancel")
    def action_cancel_job(self) -> None:
        """Asks first: cancelling throws away the checkpoint in progress on every worker."""
        if not self.available:
            return
        if not self.running:
            self.error("no running job to cancel.")
            return
        from memtui.app.dialogs import ConfirmDialog

        def answer(yes: bool | None) -> None:
            if yes:
                self._cancel(self.panel.path)

        question = "Cancel the running extraction? Every worker stops; the checkpoint in progress is lost."
        self.app.push_screen(ConfirmDialog(question, yes="Cancel job"), answer)

    @work(thread=True, group="extract-launch", exit_on_error=False)
    def _cancel(self, path: Path) -> None:
        jobs = load_jobs()
        try:
            sent = jobs.cancel(path)
        except MemtuiError as exc:
            self.app.call_from_thread(self.error, clean(exc))
            return
        except Exception as exc:  # noqa: BLE001 - as in _launch
            self.app.call_from_thread(self.error, clean(f"cancel failed: {type(exc).__name__}: {exc}"))
            return
        self.app.call_from_thread(self.error, "cancel requested." if sent else "no running job to cancel.")

    def action_leave_form(self) -> None:
        """Give the focus back to the pane (never to Launch, which may be disabled and then cannot take it): the
        app's keys work again, and Tab goes back into the form."""
        self.focus()


def _field(label: str, widget, classes: str = "") -> Horizontal:
    return Horizontal(Label(label, classes="field-label"), widget, classes=f"field {classes}".strip())
