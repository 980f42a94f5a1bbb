"""Ends a cell whose async target or check holds the event loop past its timeout plus a short grace (it never yields).

A cell's timeout is a timer on the event loop: an ``async`` target that
computes without ever awaiting keeps the loop from running it, so the cell,
and the run, would never end. :class:`Watchdog` is a thread that looks every
``period_s`` at the cells in flight (the executor's per-target deadlines,
and its cells whose checks are running, whose deadline is what was left of
the cell's ``timeout_s``: a ``python`` check that loops for ever is one):
when one is past its deadline by more than ``grace_s`` and its timer has not
fired, the loop is stuck; if the code running on the loop is that cell's
task, the watchdog raises :class:`TargetHeldTheLoop` (a ``TimeoutError``)
in the loop's thread, at the target's next Python bytecode. The executor
reports it as that cell's timeout (or that check's error) and the run goes
on (reports written).

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
import signal
import sys
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

__all__ = ["GRACE_S", "TargetHeldTheLoop", "Watchdog"]

#: seconds past a cell's timeout before the watchdog steps in
GRACE_S = 2.0
#: seconds a Ctrl-C / SIGTERM may wait for a stuck loop before the watchdog steps in
SIGNAL_GRACE_S = 0.5


class TargetHeldTheLoop(TimeoutError):
    """Raised inside an async target that held the event loop past its cell's timeout plus the grace."""


class Watchdog:
    """A thread watching ``plans`` (objects with a ``deadlines`` attribute, set once the executor starts).

    Use as a context manager around the executor, on the loop's thread.
    """

    def __init__(self, plans: Iterable[Any], *, grace_s: float = GRACE_S, period_s: float = 0.25) -> None:
        self.plans = list(plans)
        self.grace_s = grace_s
        self.period_s = period_s
        self.stopped_cells = 0
        self._loop = asyncio.get_running_loop()
        self._thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="evalx-watchdog", daemon=True)
        self._signalled: tuple[float, asyncio.Task[Any] | None] | None = None  # a signal's time, and the task then running
        self._previous: dict[int, Any] = {}

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
        if not any(entry.task is task for entry in self._live_entries()):
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
            if not overdue:
                continue
            stuck = asyncio.current_task(self._loop)  # what the loop is running now
            if stuck is None or stuck not in overdue or self._stop.is_set():
                continue
            now = self._loop.time()
            if last is not None and last[0] is stuck and now - last[1] < self.grace_s:
                continue
            last = (stuck, now)
            self.stopped_cells += 1
            print(
                f"evalx: warning: an async target or a check held the event loop {self.grace_s:g}s past its cell's timeout "
                "(it never awaits): stopping that cell",
                file=sys.stderr,
            )
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(TargetHeldTheLoop))

    def _live_entries(self) -> list[Any]:
        """The cells in flight: the executor's deadline entries (``when``, ``task``, ``expired``), calls and checks."""
        entries: list[Any] = []
        for plan in self.plans:
            for live in (getattr(getattr(plan, "deadlines", None), "_live", None), getattr(plan, "scoring", None)):
                if live:
                    try:
                        entries += list(live)
                    except RuntimeError:  # changed while copied: the loop is running, so not stuck
                        pass
        return entries

    def _overdue_tasks(self) -> list[Any]:
        """The tasks of cells past their deadline plus the grace whose timer never fired."""
        overdue = self._loop.time() - self.grace_s
        return [entry.task for entry in self._live_entries() if not entry.expired and entry.when < overdue]
