"""A cell's one time limit: the deadline every layer reads, and the one wording of a timeout.

A cell's ``timeout_s`` counts from the moment it starts (after its cache
lookup and its rate-limit turn: waiting for a slot is not its time). The
executor makes one :class:`Deadline` for it and runs the cell under it with
:func:`within`, which publishes it (:func:`current`) for everything the cell
does: the HTTP layer bounds requests, streams and retries by it, the checks
and their regexes take their budget from it (:mod:`evalx.common.regexes`), template
renders stop at it, and the watchdog reads it to stop code that holds the
event loop past it (:mod:`evalx.execution.watchdog`). A judge call runs
under a deadline of its own (the judge target's ``timeout_s``).

Time a call spends waiting for its provider's rate limit (a slot, the pause
after a 429) is not its time either: :meth:`Deadline.paused` stops the clock
of the deadline, and of the deadlines it runs within (a judge call's inside
its cell's), for as long as the wait lasts.

Whichever layer notices that the time is up, the cell's error reads the same:
``timed out after 2s`` and, where it helps, what was running
(``timed out after 2s (no response from http://…)``): :meth:`Deadline.message`.
Times are ``time.monotonic()`` seconds, the clock of asyncio's event loop.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from evalx.errors import HeldTheLoop

__all__ = ["SLACK_S", "Deadline", "HeldTheLoop", "current", "within"]

T = TypeVar("T")

#: a timer of another layer that fires this close to the deadline (or after it) is the deadline's doing
SLACK_S = 0.05


class Deadline:
    """When a cell (or a judge call) must be done: ``when`` (``time.monotonic()``), its ``timeout_s``, the task running it."""

    __slots__ = ("_timer", "outer", "task", "timeout_s", "when")

    def __init__(self, timeout_s: float, *, start: float | None = None, task: asyncio.Task[Any] | None = None) -> None:
        self.timeout_s = timeout_s
        self.when = (time.monotonic() if start is None else start) + timeout_s
        #: the asyncio task running the cell (given by its maker, else set by :func:`within`): the watchdog stops it
        #: when it holds the loop
        self.task = task
        #: the deadline this one runs within (a judge call's: its cell's), set by :func:`within`
        self.outer: Deadline | None = None
        self._timer: Any = None  # the asyncio.Timeout that :func:`within` armed (Python 3.11+)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The time spent inside does not count: this deadline (and those it runs within) move on by as much.

        For waiting on a provider's rate limit; the timer is disarmed meanwhile, so the wait itself cannot time out.
        """
        chain: list[Deadline] = []
        node: Deadline | None = self
        while node is not None and node not in chain:
            chain.append(node)
            node = node.outer
        started = time.monotonic()
        saved = [d.when for d in chain]
        for d in chain:
            d.when = math.inf
            d._arm()
        try:
            yield
        finally:
            spent = time.monotonic() - started
            for d, when in zip(chain, saved):
                d.when = when + spent
                d._arm()

    def _arm(self) -> None:
        """Move the running timer (if any) to ``when``."""
        timer = self._timer
        if timer is not None and not timer.expired():
            timer.reschedule(None if math.isinf(self.when) else self.when)

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.when - time.monotonic()

    def passed(self) -> bool:
        """True once the deadline has come, or is within :data:`SLACK_S` (a timer firing now is the deadline's)."""
        return self.when - time.monotonic() <= SLACK_S

    def at_least(self, seconds: float) -> None:
        """Leave at least ``seconds`` from now (a cell's checks get a minimum even when its call used up its time)."""
        self.when = max(self.when, time.monotonic() + seconds)

    def message(self, what: str | None = None) -> str:
        """The one wording of a timeout: ``timed out after 2s``, with ``what`` was running in parentheses."""
        return f"timed out after {self.timeout_s:g}s ({what})" if what else f"timed out after {self.timeout_s:g}s"


_CURRENT: ContextVar[Deadline | None] = ContextVar("evalx_deadline", default=None)


#: ``current()``: the deadline of the cell (or judge call) this code runs for, if any (the ContextVar's own ``get``: the HTTP
#: layer asks for it on every request)
current: Callable[[], Deadline | None] = _CURRENT.get


if sys.version_info >= (3, 11):

    async def within(deadline: Deadline, aw: Awaitable[T]) -> T:
        """``await aw`` under ``deadline``: published to the layers below, cancelled when it comes (``TimeoutError``).

        ``asyncio.timeout_at`` in the caller's own task: no task per cell.
        """
        outer = _CURRENT.get()
        if outer is not deadline:
            deadline.outer = outer
        token = _CURRENT.set(deadline)
        if deadline.task is None:  # its maker knows its task (the executor's worker): not looked up again per cell
            deadline.task = asyncio.current_task()
        try:
            async with asyncio.timeout_at(deadline.when) as timer:
                deadline._timer = timer
                return await aw
        finally:
            deadline._timer = None
            _CURRENT.reset(token)

else:  # Python 3.10: no asyncio.timeout

    async def within(deadline: Deadline, aw: Awaitable[T]) -> T:
        async def run() -> T:
            deadline.task = asyncio.current_task()  # the call's own task: the one the watchdog must stop
            return await aw

        outer = _CURRENT.get()
        if outer is not deadline:
            deadline.outer = outer
        token = _CURRENT.set(deadline)  # the task copies the context with it
        task = asyncio.ensure_future(run())
        try:
            while True:  # a paused deadline moves: look again at least once a second
                left = deadline.left()
                if left <= 0:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    raise asyncio.TimeoutError
                done, _ = await asyncio.wait({task}, timeout=min(left, 1.0))
                if done:
                    return task.result()
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            deadline.task = asyncio.current_task()
            _CURRENT.reset(token)
