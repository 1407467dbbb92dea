"""Waiting for the workbench under Textual's pilot without polling a clock.

A test waits on what the app does, never on how long it takes: for the estimate and reload workers to finish and the
messages they post to be handled (``settle``), or for a kind of message to arrive (``Inbox``, given to
``run_test(message_hook=...)``). ``HANG_S`` bounds every wait only so that a deadlock fails the test instead of
stalling the suite; nothing depends on it being reached or not.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter

from textual.message import Message
from textual.worker import WorkerState

HANG_S = 300.0
APP_GROUPS = ("estimate", "by", "reload", "summary-extras", "compare")  # the panes that compute in workers of their own


def run_async(test):
    """Run an ``async def`` test in a fresh event loop (no pytest-asyncio or anyio plugin needed);
    pytest still sees the original signature, so fixtures work."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return wrapper


async def settle(pilot, groups: tuple[str, ...] = APP_GROUPS) -> None:
    """Wait until no worker of ``groups`` is in flight, no estimate is pending, and what they posted is handled.

    A finished worker posts its result as a message, and handling it can start the next one (a reload starts an
    estimate), so this waits for workers and messages in turn until a round starts nothing new.
    """
    app = pilot.app
    for _ in range(1000):
        await pilot.pause()
        busy = [w for w in app.workers if w.group in groups and not w.is_finished]
        if not busy and app.computing is None:
            await pilot.pause()
            return
        started = [w for w in busy if w.state != WorkerState.PENDING]
        if started:
            await asyncio.wait_for(asyncio.gather(*(w.wait() for w in started), return_exceptions=True), HANG_S)
    raise AssertionError(f"the app kept starting work: computing {app.computing}, workers {list(app.workers)}")


class Inbox:
    """``run_test(message_hook=inbox)``: lets a test sleep until the app receives a message of some kind."""

    def __init__(self) -> None:
        self.seen: list[Message] = []
        self._waiters: list[tuple[tuple[type, ...], asyncio.Future]] = []

    def __call__(self, message: Message) -> None:
        self.seen.append(message)
        for kinds, future in self._waiters:
            if isinstance(message, kinds) and not future.done():
                future.set_result(message)

    def count(self, *kinds: type) -> int:
        return sum(isinstance(m, kinds) for m in self.seen)

    async def until(self, pilot, condition, *kinds: type, what: str = "condition") -> None:
        """Wait until ``condition()`` holds, checking it after the app settles and again each time a message of
        ``kinds`` (the ones that can make it true) has arrived and been handled."""
        loop = asyncio.get_running_loop()
        for _ in range(100_000):
            # registered before the check, so a message that lands during settle still wakes us
            future = loop.create_future()
            waiter = (kinds, future)
            self._waiters.append(waiter)
            try:
                await settle(pilot)
                if condition():
                    return
                try:
                    await asyncio.wait_for(future, HANG_S)
                except asyncio.TimeoutError:
                    raise AssertionError(
                        f"no {what}: nothing arrived for {HANG_S:.0f} s; workers {list(pilot.app.workers)}; "
                        f"messages {Counter(type(m).__name__ for m in self.seen).most_common(12)}"
                    ) from None
            finally:
                self._waiters.remove(waiter)
        raise AssertionError(f"no {what}")


async def idle_work_done(pilot, tries: int = 400) -> None:
    """Wait until the app's idle work (what it does ahead: panes restyled, dialogs built, themes parsed, restyles
    worked out) is done, polling as its timer does it."""
    for _ in range(tries):
        if pilot.app.idle_work_done():
            return
        await pilot.pause(0.05)
    raise AssertionError("the app's idle work was not done")
