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

    __slots__ = ("_alarm", "outer", "task", "timeout_s", "when")

    def __init__(self, timeout_s: float, *, start: float | None = None, task: asyncio.Task[Any] | None = None) -> None:
        self.timeout_s = timeout_s
        self.when = (time.monotonic() if start is None else start) + timeout_s
        #: the asyncio task running the cell (given by its maker, else set by :func:`within`): the watchdog stops it
        #: when it holds the loop
        self.task = task
        #: the deadline this one runs within (a judge call's: its cell's), set by :func:`within`
        self.outer: Deadline | None = None
        self._alarm: Any = None  # the :class:`_Alarm` of the :func:`within` block it is open in (Python 3.11+)

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
        """Have the running timer (if any) fire by ``when``."""
        alarm = self._alarm
        if alarm is not None and alarm.fired is None:
            alarm.arm()

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

    class _Alarm:
        """The one event-loop timer of the deadlines a task runs under (:func:`within`), as ``asyncio.timeout_at`` would
        have it for each, made once per task.

        A worker runs its cells one after another, each under its own deadline: a timer armed and cancelled per cell
        cost ~40,000 instructions of an instant provider cell (2 % of it: the loop's timer heap compares its handles in
        Python). This one is armed at most once per deadline that comes *earlier* than the time it is set for; when it
        fires, it looks at the deadlines open then: one that has come cancels the task (the outermost, as the
        outermost ``asyncio.Timeout`` would own it), else it is set again for the earliest of them (a later cell's, a
        paused one's). Its cancel is the task's, and :func:`within` turns it into ``TimeoutError`` as
        ``asyncio.Timeout`` does: only when no other cancel request came meanwhile.
        """

        __slots__ = ("_at", "_handle", "_loop", "fired", "open", "task")

        def __init__(self, task: asyncio.Task[Any]) -> None:
            self.task = task
            self._loop = task.get_loop()
            self._handle: asyncio.TimerHandle | None = None
            self._at = math.inf  # when the handle fires
            #: the deadlines of the task's open within() blocks, outermost first
            self.open: list[Deadline] = []
            #: the deadline that came and cancelled the task (until its block ends)
            self.fired: Deadline | None = None

        def arm(self) -> None:
            """Fire by the earliest open deadline: a timer set for earlier stays (it looks again when it fires)."""
            opened = self.open
            when = opened[0].when if len(opened) == 1 else min((d.when for d in opened), default=math.inf)
            if when < self._at:
                if self._handle is not None:
                    self._handle.cancel()
                self._handle = self._loop.call_at(when, self._ring)
                self._at = when

        def _ring(self) -> None:
            self._handle, self._at = None, math.inf
            now = self._loop.time()
            for deadline in self.open:  # the outermost that has come owns the timeout
                if deadline.when <= now:
                    self.fired = deadline
                    self.task.cancel()
                    return
            self.arm()

        def drop(self) -> None:
            """The task is done: its timer goes."""
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None

    #: each task's alarm, while it runs
    _ALARMS: dict[asyncio.Task[Any], _Alarm] = {}

    def _alarm_of(task: asyncio.Task[Any]) -> _Alarm:
        alarm = _ALARMS.get(task)
        if alarm is None:
            alarm = _ALARMS[task] = _Alarm(task)
            task.add_done_callback(_forget)
        return alarm

    def _forget(task: asyncio.Task[Any]) -> None:
        alarm = _ALARMS.pop(task, None)
        if alarm is not None:
            alarm.drop()

    async def within(deadline: Deadline, aw: Awaitable[T]) -> T:
        """``await aw`` under ``deadline``: published to the layers below, cancelled when it comes (``TimeoutError``).

        In the caller's own task (no task per cell), timed by the task's :class:`_Alarm` (no timer per cell).
        """
        task = deadline.task
        if task is None:  # its maker knows its task (the executor's worker): not looked up again per cell
            task = deadline.task = asyncio.current_task()
            if task is None:
                raise RuntimeError("within() needs a task")
        outer = _CURRENT.get()
        if outer is not deadline:
            deadline.outer = outer
        token = _CURRENT.set(deadline)
        alarm = _ALARMS.get(task) or _alarm_of(task)
        cancelling = task.cancelling()
        alarm.open.append(deadline)
        deadline._alarm = alarm
        try:
            alarm.arm()
            return await aw
        except asyncio.CancelledError as exc:
            if alarm.fired is deadline:
                alarm.fired = None
                # no other cancel request came meanwhile: the deadline's doing (as asyncio.Timeout tells them apart)
                if task.uncancel() <= cancelling and type(exc) is asyncio.CancelledError:
                    raise TimeoutError from exc
            raise
        finally:
            if alarm.fired is deadline:  # it came, and the call ended anyway (it swallowed the cancel)
                alarm.fired = None
                task.uncancel()
            alarm.open.remove(deadline)
            deadline._alarm = None
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
