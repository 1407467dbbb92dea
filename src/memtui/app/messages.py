"""What the app's workers tell the UI thread, as small dataclass messages (toolong's messages.py).

Each answer carries the request it answers (the settings, the split's key, the panel's generation), so a handler
drops one that arrives after the request changed. Progress messages replace each other in the queue
(``can_replace``): a burst of bootstrap chunks reported while the UI thread is busy costs one redraw, not one each,
so the workers report every step and nothing rate-limits them by hand.

Widgets' own events stay nested in the widget (``EstimatesTable.Open``, ``ExtractionPane.Status``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from textual.message import Message

if TYPE_CHECKING:
    from memtui.estimation.estimate import EstimateResult
    from memtui.estimation.settings import Settings
    from memtui.estimation.subgroups import ByResult
    from memtui.panel.model import Panel

H = TypeVar("H", bound=Callable[..., None])


def while_running(handler: H) -> H:
    """Drop a worker's answer (or a timer's tick) handled after the app began to shut down. A message queued before
    shutdown is still dispatched while Textual removes the screens' widgets, so a handler that looks up a pane met
    NoMatches there (seen in CI as two failed tests, and by a user quitting mid-estimate); Textual clears
    ``is_running`` before it removes anything."""

    @functools.wraps(handler)
    def guarded(self, *args, **kwargs) -> None:
        if self.is_running:
            handler(self, *args, **kwargs)

    return guarded  # type: ignore[return-value]


@dataclass
class EstimateProgress(Message):
    """How far the estimate for ``settings`` has got: ``fraction`` of it done, at ``stage``."""

    settings: Settings
    fraction: float
    stage: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EstimateProgress) and message.settings == self.settings


@dataclass
class EstimateReady(Message):
    """The estimate worker's outcome for ``settings`` on the panel of ``generation``: the result, or the one-line
    reason there is none."""

    settings: Settings
    generation: int
    result: EstimateResult | None
    error: str = ""


@dataclass
class ByProgress(Message):
    """How far the split's estimates for ``key`` (settings, spec) have got."""

    key: tuple[Settings, str]
    fraction: float
    stage: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ByProgress) and message.key == self.key


@dataclass
class ByReady(Message):
    """The split worker's outcome for ``key`` (settings, spec): the groups' estimates, or the one-line reason."""

    key: tuple[Settings, str]
    generation: int
    result: ByResult | None
    error: str = ""


@dataclass
class PanelReloaded(Message):
    """The panel file re-read: the new copy (None: ``error`` says why), and whether its data equal the old copy's."""

    panel: Panel | None
    error: str = ""
    unchanged: bool = False
