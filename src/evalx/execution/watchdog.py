"""Ends a cell whose async target or check holds the event loop past its timeout plus a short grace (it never yields).

A cell's timeout is a timer on the event loop: an ``async`` target that
computes without ever awaiting keeps the loop from running it, so the cell,
and the run, would never end. :class:`Watchdog` is a thread that looks every
``period_s`` at the cells in flight: their :class:`~evalx.common.deadline.Deadline`
objects, the same ones the cell's call and checks run under (a ``python``
check that loops for ever is one). When one is past its deadline by more
than ``grace_s``, the loop is stuck; if the code running on the loop is that
cell's task, the watchdog raises :class:`~evalx.common.deadline.HeldTheLoop` (a
``TimeoutError``) in the loop's thread, at the target's next Python
bytecode. The executor reports it as that cell's timeout (or that check's
error), worded as any timeout (``timed out after Ns``), and the run goes on
(reports written).

Ctrl-C and SIGTERM reach a stuck loop the same way: the signal is noted
(a Python-level handler runs between the target's bytecodes) and, if the
loop has not moved on half a second later, the stuck cell's task is
cancelled from here, so the run stops as interrupted (partial reports,
exit 3) instead of waiting for the cell's timeout.

Limits: code that stays inside one C call (a huge regex, ``time.sleep``)
gets the exception when the call returns; a target that catches the
exception and loops on is stopped again every ``grace_s``.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import signal
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from evalx.common.deadline import Deadline, HeldTheLoop

log = logging.getLogger(__name__)

__all__ = ["GRACE_S", "TargetHeldTheLoop", "Watchdog"]

#: seconds past a cell's timeout before the watchdog steps in
GRACE_S = 2.0
#: seconds a Ctrl-C / SIGTERM may wait for a stuck loop before the watchdog steps in
SIGNAL_GRACE_S = 0.5


#: the exception the watchdog raises (its older name)
TargetHeldTheLoop = HeldTheLoop


class Watchdog:
    """A thread watching ``live``: the deadlines of the cells in flight (the executor's ``live``).

    Use as a context manager around the executor, on the loop's thread.
    """

    def __init__(self, live: Mapping[Deadline, None], *, grace_s: float = GRACE_S, period_s: float = 0.25) -> None:
        self.live = live
        self.grace_s = grace_s
        self.period_s = period_s
        self.stopped_cells = 0
        self._loop = asyncio.get_running_loop()
        self._thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="evalx-watchdog", daemon=True)
        self._signalled: tuple[float, asyncio.Task[Any] | None] | None = None  # a signal's time, and the task then running
        self._previous: dict[int, Any] = {}
        self._tick_posted: float | None = None  # when a callback was posted to the loop that has not run yet

    def __enter__(self) -> Watchdog:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(sig)
                if callable(previous):  # the loop's own handler (add_signal_handler) is kept: it still wakes the loop
                    self._previous[sig] = previous
                    signal.signal(sig, self._on_signal)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signalled = (self._loop.time(), asyncio.current_task(self._loop))
        self._previous[signum](signum, frame)

    def _interrupt_stuck(self) -> bool:
        """After a signal the loop did not get to: cancel the cell task it is stuck in. True if it did."""
        if self._signalled is None:
            return False
        when, task = self._signalled
        if self._loop.time() - when < SIGNAL_GRACE_S or task is None or asyncio.current_task(self._loop) is not task:
            return False
        if not any(deadline.task is task for deadline in self._live_deadlines()):
            return False
        self._signalled = None
        task.cancel()  # a cancel request of the run's: the executor sees an interrupt, not the target's CancelledError
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(asyncio.CancelledError))
        return True

    def _watch(self) -> None:
        last: tuple[Any, float] | None = None  # the task stopped last, and when: once per grace
        while not self._stop.wait(self.period_s):
            if self._interrupt_stuck():
                continue
            overdue = self._overdue_tasks()
            if not overdue or not self._loop_is_stuck():
                continue
            stuck = asyncio.current_task(self._loop)  # what the loop is running now
            if stuck is None or stuck not in overdue or self._stop.is_set():
                continue
            now = self._loop.time()
            if last is not None and last[0] is stuck and now - last[1] < self.grace_s:
                continue
            last = (stuck, now)
            self.stopped_cells += 1
            log.warning(
                f"an async target or a check held the event loop {self.grace_s:g}s past its cell's timeout (it never awaits): stopping that cell"
            )
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(HeldTheLoop))

    def _loop_is_stuck(self) -> bool:
        """True when a callback posted to the loop a period ago has not run: the code on it never awaits.

        So a cell that merely runs when its deadline is long past (a judge call that
        outlasted it, then a moment of scoring) is never stopped: only one that holds the loop.
        """
        posted = self._tick_posted
        if posted is None:
            self._tick_posted = time.monotonic()
            try:
                self._loop.call_soon_threadsafe(self._ticked)
            except RuntimeError:  # the loop is closed: nothing to stop
                self._tick_posted = None
            return False
        return time.monotonic() - posted >= self.period_s

    def _ticked(self) -> None:
        self._tick_posted = None

    def _live_deadlines(self) -> list[Deadline]:
        """The deadlines of the cells in flight (their call or their checks)."""
        try:
            return list(self.live)
        except RuntimeError:  # changed while copied: the loop is running, so not stuck
            return []

    def _overdue_tasks(self) -> list[Any]:
        """The tasks of cells past their deadline plus the grace (a loop that ran their timer would have ended them)."""
        overdue = time.monotonic() - self.grace_s
        return [deadline.task for deadline in self._live_deadlines() if deadline.when < overdue]
