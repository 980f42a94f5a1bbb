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

On Linux, once a target's calls have been quick (:data:`QUICK_CALLS` in a
row under :data:`QUICK_S`, none ever over :data:`SLOW_S`), the event loop's
thread and the workers are held to the CPU the loop's thread runs on: each
hand-off then stays on one core instead of waking a thread on another, which
on a 2-core VM was ~20 us of a ~60 us instant cell. The first slow call gives
every CPU back, for good (a target that blocks or computes gets the cores it
can use), and :meth:`close` always does.

A call whose cell gave up on it (timed out, cancelled) cannot be stopped —
Python has no way to kill a thread — so its thread stays busy until the
callable returns. :meth:`SyncRunner.abandon` counts such a thread as
*stuck* and lets one more thread run in its place, up to
:data:`MAX_STUCK` at a time: a hung call fails its own cell, never the
cells after it. A stuck thread that finishes gives its place back.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from evalx.errors import EvalxError

__all__ = ["MAX_STUCK", "RAMP_S", "Raised", "SyncRunner"]

#: how long queued work may wait for a busy thread before another thread is woken
RAMP_S = 0.001
#: how many threads stuck in an abandoned call a runner replaces (beyond its max_workers) at a time
MAX_STUCK = 8
#: calls quicker than this, QUICK_CALLS of them in a row, and none slower than SLOW_S yet: the event loop's thread
#: and the workers share one CPU (Linux), so each hand-off does not wake a thread on another core (~20 us a call)
QUICK_S = 0.0005
QUICK_CALLS = 64
SLOW_S = 0.005
_PIN = hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity") and hasattr(threading, "get_native_id")


def _cpu_of(tid: int) -> int:
    """The CPU thread ``tid`` last ran on (Linux: field 39 of its /proc stat), or -1."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


class Raised(EvalxError):
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
        #: calls being run, and the thread running each; abandoned ones -> whether a thread was added for them
        self._in_flight: dict[asyncio.Future[Any], str] = {}
        self._stuck: dict[asyncio.Future[Any], bool] = {}
        self._limit = self.max_workers  # threads that may run at once: max_workers + the stuck ones replaced
        # sharing a CPU with the loop's thread while every call is quick (see QUICK_S)
        self._loop_tid = 0
        self._quick = 0  # quick calls in a row
        self._slow = False  # a call took SLOW_S or more: the threads keep every CPU from then on
        self._home: int | None = None  # the CPU shared, while it is
        self._all_cpus: set[int] | None = None

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn()`` in a worker thread; the future has its result (or exception)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._loop_tid = threading.get_native_id() if _PIN else 0
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the runner is closed")
            self._work.append((future, fn))
            if self._running == 0:
                self._wake_one()
            elif not self._ramp_scheduled and self._running < self._limit:
                self._ramp_scheduled = True
                loop.call_later(RAMP_S, self._ramp)
        return future

    def _ramp(self) -> None:
        """Work still waiting after RAMP_S: the running threads are busy (or blocked), wake another."""
        with self._lock:
            self._ramp_scheduled = False
            if self._closed or not self._work:
                return
            if self._running < self._limit:
                self._wake_one()
            if self._work and self._running < self._limit and self._loop is not None:
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
        name = f"{self.name}-{len(self._threads)}"
        thread = threading.Thread(target=self._worker, args=(waker, name), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _worker(self, waker: threading.Lock, name: str) -> None:
        pinned: int | None = None  # the CPU this thread is held to (None: every CPU it may use)
        while True:
            with self._lock:
                if self._closed:
                    self._running -= 1
                    return
                if not self._work or self._running > self._limit:  # (more threads than the limit: a stuck one came back)
                    self._running -= 1
                    self._idle.append(waker)
                    item = None
                else:
                    item = self._work.popleft()
                    self._in_flight[item[0]] = name
            if item is None:
                waker.acquire()  # parked until _wake_one (or close) releases it
                continue
            future, fn = item
            if future.cancelled():  # its cell timed out or was cancelled while it waited
                with self._lock:
                    del self._in_flight[future]
                continue
            if pinned != self._home:
                pinned = self._settle(pinned)
            started = time.perf_counter()
            try:
                outcome: tuple[asyncio.Future[Any], bool, Any] = (future, True, fn())
            except Exception as exc:  # the user's call failed: its awaiting cell raises it
                outcome = (future, False, exc)
            except BaseException as exc:  # SystemExit, GeneratorExit...: never thrown into the awaiting coroutine as such
                outcome = (future, False, Raised(exc))
            took = time.perf_counter() - started
            if took < QUICK_S:
                self._quick += 1
                if self._quick >= QUICK_CALLS and self._home is None and not self._slow:
                    pinned = self._share_cpu()
            else:
                self._quick = 0
                if took >= SLOW_S and not self._slow:
                    self._slow = True
                    self._stop_sharing()
                    pinned = None
            self._post(outcome)

    def _share_cpu(self) -> int | None:
        """Hold the loop's thread and this one to one CPU (the others follow at their next call); the CPU, or None."""
        if not _PIN or not self._loop_tid:
            return None
        with self._lock:
            if self._home is not None or self._slow or self._closed:
                return self._home
            try:
                allowed = os.sched_getaffinity(0)
                if len(allowed) < 2:
                    return None
                cpu = _cpu_of(self._loop_tid)
                if cpu not in allowed:
                    cpu = min(allowed)
                os.sched_setaffinity(self._loop_tid, {cpu})
                os.sched_setaffinity(0, {cpu})
            except OSError:  # not allowed here (a container's policy...): the hand-offs just cost more
                self._slow = True
                return None
            self._all_cpus, self._home = allowed, cpu
            return cpu

    def _stop_sharing(self) -> None:
        """A slow call: the loop's thread and this one may use every CPU again (the others follow at their next call)."""
        with self._lock:
            self._home = None
            if self._all_cpus is not None:
                for tid in (self._loop_tid, 0):
                    try:
                        os.sched_setaffinity(tid, self._all_cpus)
                    except OSError:
                        pass

    def _settle(self, pinned: int | None) -> int | None:
        """This thread's CPUs as the runner now wants them: the shared one, or every one."""
        home, cpus = self._home, self._all_cpus
        try:
            if home is not None:
                os.sched_setaffinity(0, {home})
            elif cpus is not None:
                os.sched_setaffinity(0, cpus)
        except OSError:
            return pinned
        return home

    def _post(self, outcome: tuple[asyncio.Future[Any], bool, Any]) -> None:
        with self._lock:
            future = outcome[0]
            del self._in_flight[future]
            if self._stuck and future in self._stuck and self._stuck.pop(future):
                self._limit -= 1  # the stuck thread is back: the one added in its place is no longer needed
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

    def abandon(self, future: asyncio.Future[Any]) -> str:
        """The caller gave up on ``future`` (its cell timed out or was cancelled): what became of the call, in words.

        A call still running keeps its thread until it returns; that thread is
        counted as stuck and another one may run in its place (up to
        :data:`MAX_STUCK` replaced at once), so the calls queued after it go on.
        """
        with self._lock:
            name = self._in_flight.get(future)
            if name is None:  # never started: it stays in the queue, cancelled, and is dropped from it
                if self._stuck:
                    return f"the call never started: {len(self._stuck)} thread(s) are stuck in earlier calls that timed out"
                return ""
            if future in self._stuck:
                return ""
            replaced = sum(self._stuck.values())
            grant = replaced < MAX_STUCK
            self._stuck[future] = grant
            if not grant:
                return (
                    f"the call is still running in thread {name}, which Python cannot stop; "
                    f"{MAX_STUCK} stuck threads are already replaced, so later calls wait for a free thread"
                )
            self._limit += 1
            if self._work and not self._closed and self._running < self._limit:
                self._wake_one()
            return (
                f"the call is still running in thread {name}, which Python cannot stop; "
                f"later calls run on another thread ({replaced + 1} of at most {MAX_STUCK} stuck threads replaced)"
            )

    def close(self) -> None:
        """Cancel queued calls and let the threads go (a call still running finishes on its own)."""
        if self._home is not None:
            self._stop_sharing()  # the loop's thread gets every CPU back
        with self._lock:
            self._closed = True
            queued, self._work = list(self._work), collections.deque()
            idle, self._idle = self._idle, []
        for waker in idle:
            waker.release()
        for future, _ in queued:
            future.cancel()
