"""Extraction pane: launch a detached extraction worker into this panel, watch what it publishes, cancel it.

The worker is a separate process (``memtui.extract.jobs.launch``), so quitting the app leaves it running and
reopening the panel finds it again through ``read_progress``. A background thread polls that progress and the
panel's ``done`` flags; when a checkpoint completes, the app re-reads the panel and re-estimates.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from types import ModuleType

import h5py
import numpy as np
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Input, Label, ProgressBar, Static
from textual.worker import get_current_worker

from memtui.app.dialogs import Choice
from memtui.errors import MemtuiError
from memtui.panel import Panel

POLL_S = 0.5
START_DELAY_S = 0.5
RUNNING = ("running", "starting")


def load_jobs() -> ModuleType | None:
    """The extraction job API, or None where this install has none (imported lazily: it pulls in torch)."""
    try:
        return importlib.import_module("memtui.extract.jobs")
    except ImportError:
        return None


def read_done(path: Path) -> np.ndarray | None:
    """The panel's per-checkpoint done flags, read while a writer may hold the file (SWMR)."""
    try:
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            return f["checkpoints/done"][()].astype(bool)
    except (OSError, KeyError, ValueError):
        return None


def duration(seconds) -> str:
    if seconds is None or not np.isfinite(seconds):
        return "—"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def progress_text(progress: dict | None) -> str:
    """What the worker last published, in words (also what the tests read)."""
    if not progress:
        return "No extraction job has run on this panel."
    state = progress.get("state", "?")
    lines = [f"job {state}" + (f" · pid {progress['pid']}" if progress.get("pid") else "")]
    k, total = progress.get("k"), progress.get("K")
    if k is not None and total:
        step = progress.get("checkpoint")
        lines.append(f"checkpoint {k} of {total}" + (f" (step {step})" if step is not None else ""))
    done, n = progress.get("instances_done"), progress.get("instances_total")
    if done is not None and n:
        lines.append(f"instances {done} / {n} in this checkpoint")
    tps = progress.get("tokens_per_s")
    if tps:
        lines.append(f"{tps:,.0f} tokens/s · ETA {duration(progress.get('eta_s'))}")
    if progress.get("last_error"):
        lines.append(f"last error: {progress['last_error']}")
    if progress.get("log"):
        lines.append(f"log: {progress['log']}")
    return "\n".join(lines)


class ExtractionPane(VerticalScroll):
    """The launch form, the running job's progress, and cancel."""

    BINDINGS = [
        Binding("ctrl+r", "launch", "Launch extraction", priority=True),
        Binding("ctrl+t", "cancel_job", "Cancel job", priority=True),
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

    def compose(self) -> ComposeResult:
        yield Static("", id="extract-panel")
        with Vertical(id="extract-form"):
            model = self.panel.attrs.get("model", "")
            model = model if model and " " not in model else ""  # a hub id or folder, not a description
            yield _field("model / folder", Input(model, placeholder="hub id or local checkpoint folder", id="ex-model"))
            yield _field("checkpoints", Input("all", placeholder="all, 0:95000:1000 or 0,1000,2000", id="ex-ckpt"))
            devices = [(d, d) for d in ("auto", "cpu", "cuda", "mps")]
            yield _field("device", Choice(devices, "auto", id="ex-device"))
            dtypes = [(d, d) for d in ("auto", "float32", "bfloat16", "float16")]
            yield _field("dtype", Choice(dtypes, "auto", id="ex-dtype"))
            yield _field("batch size", Input("auto", placeholder="auto or a number", id="ex-batch"))
            with Horizontal(classes="buttons"):
                yield Button("Launch (ctrl+r)", variant="primary", id="ex-launch")
                yield Button("Cancel job (ctrl+t)", variant="error", id="ex-cancel")
            yield Static("", id="ex-error", classes="error")
        yield ProgressBar(total=1, show_eta=False, id="ex-bar")
        yield Static(progress_text(None), id="ex-status")

    def on_mount(self) -> None:
        self.describe_panel(self.panel)
        # Importing the job API and polling cost a little CPU: let the first profile paint before they start,
        # unless there is nothing to paint yet.
        if self.panel.done.any():
            self.set_timer(START_DELAY_S, lambda: self._poll(self.panel.path))
        else:
            self._poll(self.panel.path)

    def describe_panel(self, panel: Panel) -> None:
        self.panel = panel
        n, t = int(panel.done.sum()), panel.n_checkpoints
        text = f"{panel.path.name if panel.path else 'panel'}: {n} of {t} checkpoints extracted"
        if not panel.has_tokens:
            text += (
                " · this panel stores no token ids, so it cannot be extracted into "
                "(build one with token ids to extract a model)"
            )
        self.query_one("#extract-panel", Static).update(text)

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
            if key != last:
                last = key
                self.post_message(self.Status(progress, done, True))
            for _ in range(int(POLL_S / 0.05)):
                if worker.is_cancelled:
                    return
                time.sleep(0.05)

    def on_extraction_pane_status(self, event: Status) -> None:
        self.available = event.available
        if not event.available:
            self.query_one("#ex-status", Static).update("Extraction is not available in this install.")
            return
        self.show_progress(event.progress)
        if event.done is not None and not np.array_equal(event.done, self.panel.done):
            self.post_message(self.CheckpointsChanged())

    def show_progress(self, progress: dict | None) -> None:
        self.progress = progress
        self.query_one("#ex-status", Static).update(progress_text(progress))
        bar = self.query_one("#ex-bar", ProgressBar)
        k, total = (progress or {}).get("k"), (progress or {}).get("K")
        bar.display = bool(total)
        if total:
            done, n = (progress or {}).get("instances_done") or 0, (progress or {}).get("instances_total") or 0
            within = done / n if n else 0.0
            finished = (progress or {}).get("state") == "done"
            bar.update(total=total, progress=total if finished else max(0, (k or 1) - 1) + within)

    @property
    def running(self) -> bool:
        return bool(self.progress and self.progress.get("state") in RUNNING)

    # ---- actions ------------------------------------------------------------------------------------------------

    def error(self, text: str) -> None:
        self.query_one("#ex-error", Static).update(text)

    @on(Button.Pressed, "#ex-launch")
    def action_launch(self) -> None:
        if not self.available:
            self.error("Extraction is not available in this install.")
            return
        model = self.query_one("#ex-model", Input).value.strip()
        if not model:
            self.error("Give a model: a Hugging Face hub id or a local folder of checkpoints.")
            return
        batch = self.query_one("#ex-batch", Input).value.strip() or "auto"
        if batch != "auto":
            try:
                batch = int(batch)
            except ValueError:
                self.error(f"batch size must be auto or a whole number, not '{batch}'.")
                return
        options = {
            "model": model,
            "checkpoints": self.query_one("#ex-ckpt", Input).value.strip() or "all",
            "device": self.query_one("#ex-device", Choice).value,
            "dtype": self.query_one("#ex-dtype", Choice).value,
            "batch_size": batch,
        }
        self.error("launching…")
        self._launch(self.panel.path, options)

    @work(thread=True, group="extract-launch", exit_on_error=False)
    def _launch(self, path: Path, options: dict) -> None:
        jobs = load_jobs()
        try:
            pid = jobs.launch(path, **options)
        except MemtuiError as exc:
            self.app.call_from_thread(self.error, str(exc))
            return
        self.app.call_from_thread(self.error, f"launched worker pid {pid}; it keeps running if you quit.")

    @on(Button.Pressed, "#ex-cancel")
    def action_cancel_job(self) -> None:
        if not self.available:
            return
        self._cancel(self.panel.path)

    @work(thread=True, group="extract-launch", exit_on_error=False)
    def _cancel(self, path: Path) -> None:
        jobs = load_jobs()
        try:
            sent = jobs.cancel(path)
        except MemtuiError as exc:
            self.app.call_from_thread(self.error, str(exc))
            return
        self.app.call_from_thread(self.error, "cancel requested." if sent else "no running job to cancel.")

    def action_leave_form(self) -> None:
        self.query_one("#ex-launch", Button).focus()


def _field(label: str, widget) -> Horizontal:
    return Horizontal(Label(label, classes="field-label"), widget, classes="field")
