"""A bounded thread pool for sync Python callables that keeps quick calls on one thread.

``loop.run_in_executor`` with a ``ThreadPoolExecutor`` of ``concurrency``
threads wakes a different thread for every call and the event loop for every
result; for a callable that answers in microseconds those hand-offs (and the
threads fighting over the GIL) were most of evalx's per-cell cost
(bench/RESULTS.md: 20,000 instant cells, 1.75 s of run phase against 0.7 s
calling inline).

:class:`SyncRunner` gives the same guarantees — at most ``max_workers``
calls at once, each in a worker thread, never on the loop — but wakes
threads lazily: a call goes to a running thread's queue when one is active,
and another thread is woken only when work has waited :data:`RAMP_S`
without being picked up (a blocking callable) — so slow callables still run
``max_workers`` at a time, a millisecond later at most. Results are handed
back to the loop in batches: one loop wake-up for every result that is ready.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["RAMP_S", "Raised", "SyncRunner"]

#: how long queued work may wait for a busy thread before another thread is woken
RAMP_S = 0.001


class Raised(Exception):
    """A call ended in a ``BaseException`` that is not an ``Exception`` (``sys.exit()``, ``GeneratorExit``...).

    Set on the call's future in its place: a ``GeneratorExit`` thrown into the
    awaiting coroutine would close it, and ``SystemExit`` or ``KeyboardInterrupt``
    would stop the event loop. Whoever awaits the call re-raises :attr:`exc` there.
    """

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.exc = exc


class SyncRunner:
    def __init__(self, max_workers: int, *, name: str = "evalx") -> None:
        self.max_workers = max(1, max_workers)
        self.name = name
        self._lock = threading.Lock()
        self._work: collections.deque[tuple[asyncio.Future[Any], Callable[[], Any]]] = collections.deque()
        self._idle: list[threading.Lock] = []  # parked threads' wake-up locks, most recent last
        self._threads: list[threading.Thread] = []
        self._running = 0  # threads not parked
        self._done: list[tuple[asyncio.Future[Any], bool, Any]] = []
        self._drain_scheduled = False
        self._ramp_scheduled = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn()`` in a worker thread; the future has its result (or exception)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the runner is closed")
            self._work.append((future, fn))
            if self._running == 0:
                self._wake_one()
            elif not self._ramp_scheduled and self._running < self.max_workers:
                self._ramp_scheduled = True
                loop.call_later(RAMP_S, self._ramp)
        return future

    def _ramp(self) -> None:
        """Work still waiting after RAMP_S: the running threads are busy (or blocked), wake another."""
        with self._lock:
            self._ramp_scheduled = False
            if self._closed or not self._work:
                return
            if self._running < self.max_workers:
                self._wake_one()
            if self._work and self._running < self.max_workers and self._loop is not None:
                self._ramp_scheduled = True
                self._loop.call_later(RAMP_S, self._ramp)

    def _wake_one(self) -> None:
        # with self._lock held
        self._running += 1
        if self._idle:
            self._idle.pop().release()
            return
        waker = threading.Lock()
        waker.acquire()
        thread = threading.Thread(target=self._worker, args=(waker,), name=f"{self.name}-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _worker(self, waker: threading.Lock) -> None:
        while True:
            with self._lock:
                if self._closed:
                    self._running -= 1
                    return
                if not self._work:
                    self._running -= 1
                    self._idle.append(waker)
                    item = None
                else:
                    item = self._work.popleft()
            if item is None:
                waker.acquire()  # parked until _wake_one (or close) releases it
                continue
            future, fn = item
            if future.cancelled():  # its cell timed out or was cancelled while it waited
                continue
            try:
                outcome: tuple[asyncio.Future[Any], bool, Any] = (future, True, fn())
            except Exception as exc:
                outcome = (future, False, exc)
            except BaseException as exc:  # SystemExit, GeneratorExit...: never thrown into the awaiting coroutine as such
                outcome = (future, False, Raised(exc))
            self._post(outcome)

    def _post(self, outcome: tuple[asyncio.Future[Any], bool, Any]) -> None:
        with self._lock:
            self._done.append(outcome)
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: nobody waits for these results any more
                pass

    def _drain(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._drain_scheduled = False
        for future, ok, value in done:
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def close(self) -> None:
        """Cancel queued calls and let the threads go (a call still running finishes on its own)."""
        with self._lock:
            self._closed = True
            queued, self._work = list(self._work), collections.deque()
            idle, self._idle = self._idle, []
        for waker in idle:
            waker.release()
        for future, _ in queued:
            future.cancel()
