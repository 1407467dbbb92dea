"""The background estimates the App owns: the whole panel's estimate for the current settings, and the split by
group's estimates for (settings, spec).

Each controller keeps what it has computed for the open panel, starts one worker thread at a time (a newer request
cancels the older one between bootstrap chunks), and turns the worker's messages (``app/messages.py``) into answers
for the App: which request they answer, whether it is still wanted. Drawing the answer (the panes, the busy bar) is
the App's; these never touch a widget.

A new panel (re-read, or another model of the suite) bumps ``generation``: answers computed on the old one arrive
tagged with the old number and are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from textual.worker import Worker, WorkerState, get_current_worker

from memtui.app.messages import ByProgress, ByReady, EstimateProgress, EstimateReady
from memtui.core.errors import MemtuiError
from memtui.estimation import cache

if TYPE_CHECKING:
    from textual.app import App

    from memtui.app.prefetch import Prefetch
    from memtui.estimation.estimate import EstimateResult
    from memtui.estimation.settings import Settings
    from memtui.estimation.subgroups import ByResult
    from memtui.panel.model import Panel

K = TypeVar("K")
R = TypeVar("R")
Progress = Callable[[float, str], None]


class _Cancelled(Exception):
    """Raised from the progress callback to stop an estimate nobody is waiting for any more."""


class _Background(Generic[K, R]):
    """One kind of background estimate keyed by ``K``: its results so far, the key being computed, its worker."""

    group = ""  # the workers' group (one running at a time)
    progress_message: type = EstimateProgress
    ready_message: type = EstimateReady
    bugs_are_errors = False  # a bug in the worker: posted as an answer (True), or left to Worker.StateChanged

    def __init__(self, app: App, on_computing: Callable[[], None] | None = None) -> None:
        self.app = app
        self.results: dict[K, R] = {}
        self.generation = 0
        self._computing: K | None = None
        self._on_computing = on_computing
        self.stage = ""  # the running one's last reported stage
        self.worker: Worker | None = None

    @property
    def computing(self) -> K | None:
        """The key the worker computes (None: nothing is being computed)."""
        return self._computing

    @computing.setter
    def computing(self, key: K | None) -> None:
        self._computing = key
        if self._on_computing is not None:
            self._on_computing()

    def forget(self) -> None:
        """Another panel: drop what was computed, and what is still being computed, for the old one."""
        self.generation += 1
        self.results.clear()
        self.computing = None

    def cancel(self) -> None:
        """The running estimate is no longer wanted: stop it (between bootstrap chunks)."""
        if self.computing is not None:
            self.app.workers.cancel_group(self.app, self.group)
            self.computing = None

    def progress(self, key: K, stage: str) -> bool:
        """A progress report for ``key``: whether it is the one being computed (then the App shows it)."""
        if key != self.computing:
            return False
        self.stage = stage
        return True

    def _start(self, key: K, compute: Callable[[Progress], R]) -> None:
        self.computing = key
        self.stage = "starting"
        work = partial(self._run, key, self.generation, compute)
        self.worker = self.app.run_worker(
            work, name=self.group, group=self.group, thread=True, exclusive=True, exit_on_error=False
        )

    def _run(self, key: K, generation: int, compute: Callable[[Progress], R]) -> None:
        """The worker thread: ``compute`` with a progress callback that posts each step and stops when cancelled."""
        worker = get_current_worker()
        post = self.app.post_message

        def progress(fraction: float, stage: str) -> None:
            if worker.is_cancelled:  # another request since: stop between bootstrap chunks
                raise _Cancelled
            post(self.progress_message(key, fraction, stage))

        try:
            post(self.ready_message(key, generation, compute(progress)))
        except _Cancelled:
            return
        except MemtuiError as exc:
            post(self.ready_message(key, generation, None, str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug in a split must not stop the app (bugs_are_errors)
            if not self.bugs_are_errors:
                raise
            post(self.ready_message(key, generation, None, f"{type(exc).__name__}: {exc}"))


class EstimateController(_Background["Settings", "EstimateResult"]):
    """The whole panel's estimate: from memory, the start-up prefetch or the disk cache at once (a few ms), else
    computed in a worker that answers with ``EstimateReady``. A bad panel is an answer (its one-line reason, kept
    like a result); a bug in estimation reaches ``failed`` through ``Worker.StateChanged``."""

    group = "estimate"
    progress_message = EstimateProgress
    ready_message = EstimateReady

    def __init__(self, app: App, prefetch: Prefetch | None = None, on_computing: Callable[[], None] | None = None):
        super().__init__(app, on_computing)
        self.errors: dict[Settings, str] = {}
        self._prefetch = prefetch

    def forget(self) -> None:
        self.errors.clear()
        super().forget()

    def request(self, panel: Panel, settings: Settings) -> tuple[EstimateResult | None, str] | None:
        """The estimate for ``settings`` as (result, message) when it is known or cached; None when a worker was
        started to compute it."""
        if settings in self.results:
            return self.results[settings], ""
        if settings in self.errors:
            return None, self.errors[settings]
        prefetch, self._prefetch = self._prefetch, None
        try:
            if prefetch is not None and prefetch.settings == settings and prefetch.panel is panel:
                hit = prefetch.get()
            else:
                hit = cache.load(panel, settings.validate())
        except MemtuiError as exc:
            return None, str(exc)
        except Exception:  # noqa: BLE001 - a damaged cache entry is a miss: computing afresh says what is wrong, if anything
            hit = None
        if hit is not None:
            self.results[settings] = hit
            return hit, ""
        self._start(settings, partial(cache.cached_estimate, panel, settings))
        return None

    def ready(self, event: EstimateReady, settings: Settings) -> bool:
        """Keep the worker's answer; whether it answers ``settings`` (the ones shown), which are then computed."""
        if event.generation != self.generation:  # computed on a panel re-read (or another model) since
            return False
        if event.result is None:
            self.errors[event.settings] = event.error
        else:
            self.results[event.settings] = event.result
        if event.settings != settings:
            return False
        self.computing = None
        return True

    def failed(self, event: Worker.StateChanged) -> str | None:
        """The one-line message for a bug in the running estimate (not a bad panel: those arrive as answers)."""
        if event.worker.group != self.group or event.state != WorkerState.ERROR or event.worker is not self.worker:
            return None
        self.computing = None
        return f"estimation failed: {type(event.worker.error).__name__}: {event.worker.error}"


class SplitController(_Background["tuple[Settings, str]", "ByResult"]):
    """The split by group's estimates for (settings, spec), computed in a worker that answers with ``ByReady``; only
    results are kept (a spec that fails is said once and the split goes back to the last good one)."""

    group = "by"
    progress_message = ByProgress
    ready_message = ByReady
    bugs_are_errors = True  # a bug in the split must not stop the app: it says so instead

    def request(self, panel: Panel, key: tuple[Settings, str]) -> tuple[ByResult | None, bool]:
        """The split's result when known (else None), and whether a worker was started for it now (not when one
        already computes it)."""
        if key in self.results:
            return self.results[key], False
        if self.computing == key:
            return None, False
        from memtui.estimation.subgroups import estimate_by  # the split's estimator loads when a split is asked for

        self._start(key, lambda progress: estimate_by(panel, key[0], key[1], progress=progress))
        return None, True

    def ready(self, event: ByReady) -> bool:
        """Keep the worker's answer; whether it answers the split being computed (which is then done)."""
        if event.generation != self.generation:
            return False
        if event.result is not None:
            self.results[event.key] = event.result
        if event.key != self.computing:
            return False
        self.computing = None
        return True
