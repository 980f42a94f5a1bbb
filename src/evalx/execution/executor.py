"""Run cells concurrently: per-target worker pools, per-cell timeouts.

Each target gets ``concurrency`` workers (its resolved
:class:`~evalx.targets.TargetSettings`) pulling from its own list of cells,
so memory stays flat whatever the number of cells, and a slow target never
starves a fast one. The worker pool is the only queue a cell waits in: a
target's connection or thread pool is as large as its workers. A cell starts
when a worker takes it, its cache lookup missed and the target's rate limit
(``pacer``) let it go; its ``timeout_s`` and latency count from then. Every
finished cell is scored, redacted and handed to ``on_result`` straight away
(which appends it to ``results.jsonl``).
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar, cast

from evalx.assertions import AssertionContext, Grader, cell_status, evaluate_case
from evalx.assertions.evaluate import MIN_CHECK_TIME_S
from evalx.errors import TargetError
from evalx.models import Cell, Trajectory, safe_trajectory
from evalx.results.model import AssertionRecord, CellOutput, CellResult, cell_result, not_run
from evalx.targets import RunContext, Target, TargetSettings
from evalx.targets.transport.http import CALL_DEADLINE

T = TypeVar("T")


class Cells(Protocol):
    """A target's cells: counted, and read once in order (a list, or a plan's :class:`~evalx.execution.plan.TargetCells`)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Cell]: ...


@dataclass
class TargetPlan:
    """One target's cells and the settings they run under (resolved once per run)."""

    target: Target
    cells: Cells
    settings: TargetSettings
    #: the target's ``pacer`` (rate limit), looked up once when the run starts
    pacer: Callable[[], Awaitable[None]] | None = field(default=None, init=False)
    #: the timeouts of the target's cells in flight (:class:`_Deadlines`), made when the run starts
    deadlines: Any = field(default=None, init=False, repr=False)
    #: the cells whose checks are running (:class:`_Scoring` entries), for the watchdog
    scoring: dict[Any, None] = field(default_factory=dict, init=False, repr=False)


@dataclass
class ExecutionStats:
    errors_by_target: dict[str, list[str]] = field(default_factory=dict)
    cells_by_target: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False


class Executor:
    def __init__(
        self,
        plans: list[TargetPlan],
        run: RunContext,
        *,
        global_asserts: list[dict[str, Any]],
        on_result: Callable[[CellResult], None],
        judge: Grader | None = None,
        judge_settings: dict[str, Any] | None = None,
    ) -> None:
        self.plans = plans
        self.run = run
        self.global_asserts = global_asserts
        self.on_result = on_result
        self.judge = judge
        self.judge_settings = judge_settings or {}
        self.stats = ExecutionStats()
        #: asked before each cell starts: None to run it, else why it is skipped (the cost guard)
        self.admit: Callable[[Cell], str | None] | None = None
        #: the targets that play simulated users (:class:`evalx.execution.simulate.UserTargets`), set by the runner
        self.users: Any = None

    async def execute(self) -> ExecutionStats:
        workers: list[asyncio.Task[None]] = []
        for plan in self.plans:
            plan.pacer = getattr(plan.target, "pacer", None)
            plan.deadlines = _Deadlines(plan.settings.timeout_s) if _Deadlines is not None else None
            it = iter(plan.cells)
            n = max(1, min(plan.settings.concurrency, len(plan.cells)))
            for _ in range(n):
                workers.append(asyncio.create_task(self._worker(plan, it)))
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            self.stats.interrupted = True
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        return self.stats

    async def _worker(self, plan: TargetPlan, cells: Any) -> None:
        turns = 0
        for cell in cells:
            reason = self.admit(cell) if self.admit is not None else None
            if reason is not None:
                self.on_result(self.skipped_cell(plan, cell, reason))
                continue
            result = await self.run_cell(plan, cell)
            self.on_result(result)
            turns += 1
            if turns >= YIELD_EVERY:  # a target that answers without ever waiting would hold the loop for the whole run:
                turns = 0  # the other workers, the results file's writes and signals get a turn now and then
                await asyncio.sleep(0)

    def skipped_cell(self, plan: TargetPlan, cell: Cell, reason: str) -> CellResult:
        """The result of a cell that was not run, so nothing goes silently missing."""
        target = plan.target
        result = cell_result(
            self.run.run_id, cell.index, target.id, target.type, cell.case, cell.dataset, cell.repeat,
            "skipped", None, [not_run(reason)], {}, skip_reason=reason,
        )  # fmt: skip
        return self.run.redactor.obj(result) if self.run.redactor else result

    async def run_cell(self, plan: TargetPlan, cell: Cell) -> CellResult:
        # a conversation (scripted or simulated): its own driver (and its own cache lookups)
        if cell.case.turns is not None or cell.case.simulate is not None:
            from evalx.execution.conversation import run_conversation

            return await run_conversation(self, plan, cell)
        target = plan.target
        cache = self.run.cache
        cache_key = self._cache_key(plan, cell) if cache is not None else None
        hit = await cache.get(cache_key) if cache is not None and cache_key else None
        if hit is None and plan.pacer is not None:
            await plan.pacer()  # the target's rate limit: waiting for a turn is not the cell's time
        # the cell starts now: its timeout and latency count from here
        started_at = _started_at()
        t0 = time.perf_counter()
        task = asyncio.current_task()  # the worker's: its cell's timeout, cancels and watchdog entry
        if hit is not None:
            traj = _from_cache(hit, target)
        else:
            timeout_s = plan.settings.timeout_s
            cancels = _cancels(task)  # this task's cancel requests before the call: more after it means a real cancel
            try:
                if plan.deadlines is not None and task is not None:
                    traj = await plan.deadlines.run(target.invoke(cell, self.run), task)
                else:
                    traj = await _within(target.invoke(cell, self.run), timeout_s)
            except asyncio.TimeoutError as exc:
                # a note from the target on what became of the call (a sync call still running in its thread)
                notes = getattr(exc.__cause__, "__notes__", None) or []
                traj = Trajectory(error="; ".join([f"timed out after {timeout_s:g}s", *notes]))
                traj.printed = getattr(exc.__cause__, "evalx_printed", None)  # what a Python target printed before
            except TargetError as exc:
                traj = Trajectory(error=str(exc))
            except asyncio.CancelledError as exc:
                if cancels is None or _cancels(task) != cancels:
                    raise  # the run is interrupted (Ctrl-C, SIGTERM): not this cell's doing
                # nobody cancelled this task: the target raised CancelledError itself (or let an inner task's escape)
                traj = Trajectory(
                    error=f"{_one_line(exc)} raised by the target (no cancel of the cell or the run)", traceback=traceback.format_exc()
                )
            except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit...: the target's, so the cell's error
                traj = Trajectory(error=_one_line(exc), traceback=traceback.format_exc())
            try:  # a lone surrogate from outside stops here, before results, cache and reports
                traj = safe_trajectory(traj)
            except ValueError as exc:  # a value that contains itself: it could never be written
                traj = Trajectory(error=f"{target.id} returned output evalx cannot store: {exc}")
        latency = (time.perf_counter() - t0) * 1000.0
        if traj.latency_ms is None:
            traj.latency_ms = round(latency, 3)
        if cache is not None and cache_key and hit is None and traj.error is None:  # errors are never cached
            cache.put(cache_key, cache_entry(traj, self.run))

        asserts = [*self.global_asserts, *cell.case.asserts]
        if traj.error is None:
            ctx = self.assertion_context(cell, target, traj)
            # the checks count against the cell's time too (at least MIN_CHECK_TIME_S, if the call used it all)
            time_left = max(plan.settings.timeout_s - (time.perf_counter() - t0), MIN_CHECK_TIME_S)
            entry = _Scoring(time_left, task)  # the watchdog stops a check that holds the loop past it, and answers signals
            plan.scoring[entry] = None
            try:
                assertions = await evaluate_case(asserts, ctx, time_left=time_left)
            finally:
                del plan.scoring[entry]
        else:
            assertions = []
        self.stats.cells_by_target[target.id] = self.stats.cells_by_target.get(target.id, 0) + 1
        status, score = cell_status(assertions, threshold=cell.case.threshold, target_error=traj.error)
        judge_cost = _judge_cost(assertions)
        output = traj.to_dict()
        tb = output.pop("traceback", None)
        cached = bool(output.pop("cached", False))
        result = cell_result(
            self.run.run_id, cell.index, target.id, target.type, cell.case, cell.dataset, cell.repeat,
            status, score, assertions, cast(CellOutput, output), traj.latency_ms, traj.ttft_ms, traj.cost_usd,
            judge_cost, cached, traj.error, tb, started_at,
        )  # fmt: skip
        if self.run.redactor:
            result = self.run.redactor.obj(result)
        if result["error"] is not None:
            self.stats.errors_by_target.setdefault(target.id, []).append(result["error"])
        return result

    def assertion_context(self, cell: Cell, target: Target, traj: Trajectory) -> AssertionContext:
        """What a cell's checks see: its case, this output (a reply, or a conversation as one), the judge, the target's tools."""
        return AssertionContext(
            case=cell.case,
            output=traj,
            config_dir=self.run.config_dir,
            judge=self.judge,
            judge_settings=self.judge_settings,
            target=target.id,
            tools=target.spec.get("tools"),
        )

    def _cache_key(self, plan: TargetPlan, cell: Cell) -> str | None:
        """The cell's cache key when caching applies: the target's own ``cache_key``, else a generic one."""
        if self.run.cache is None or not plan.settings.cache:
            return None
        own = getattr(plan.target, "cache_key", None)
        try:
            if own is not None:
                return own(cell, self.run)  # type: ignore[no-any-return]
            from evalx.targets.transport.cache import make_key

            case = cell.case.to_dict()
            case.pop("source", None)
            spec = self.run.redactor.obj(plan.target.spec)  # secrets masked: never part of a key
            return make_key(plan.target.type, spec, case, cell.repeat)
        except Exception:  # a key that cannot be made means "do not cache", never a failed cell
            return None


if sys.version_info >= (3, 11):

    async def _within(aw: Awaitable[T], timeout_s: float) -> T:
        """``aw`` with a deadline: ``asyncio.timeout`` in the worker's own task, no task per cell.

        ``asyncio.wait_for`` wraps every cell in a new task; that was a measurable part of
        evalx's per-cell cost (bench/RESULTS.md). The deadline is published to the HTTP
        layer (``CALL_DEADLINE``) for the length of the call, so a request bounded no sooner
        than the cell skips its own timer: one timer per cell, not two.
        """
        when = asyncio.get_running_loop().time() + timeout_s
        token = CALL_DEADLINE.set(when)
        try:
            async with asyncio.timeout_at(when):
                return await aw
        finally:
            CALL_DEADLINE.reset(token)

    class _Deadline:
        """One cell in flight: its deadline (``loop.time()``), its task and that task's cancel count when it started."""

        __slots__ = ("cancelling", "expired", "task", "when")

        def __init__(self, when: float, task: asyncio.Task[Any]) -> None:
            self.when, self.task, self.cancelling, self.expired = when, task, task.cancelling(), False

    class _Deadlines:
        """``asyncio.timeout`` for every cell of one target, with one loop timer between them instead of one per cell.

        A timer per cell (``call_at`` going in, ``cancel`` coming out) was ~4 µs of each cell
        (bench/RESULTS.md). A target's cells share one timeout, so the cells in flight
        (at most its concurrency) end in the order they started: one timer set for the
        earliest deadline is enough; when it fires, the cells past their deadline are
        cancelled in the order they started (their own timers' order) and the timer is set
        for the next deadline. A cell cancelled so ends in ``TimeoutError`` exactly as under
        ``asyncio.timeout``: the task's cancel count tells this cancel from another one.
        The deadline is published to the HTTP layer (``CALL_DEADLINE``) for the call, as
        :func:`_within` does.
        """

        __slots__ = ("_handle", "_live", "timeout_s")

        def __init__(self, timeout_s: float) -> None:
            self.timeout_s = timeout_s
            self._live: dict[_Deadline, None] = {}  # cells in flight, in the order they started
            self._handle: asyncio.TimerHandle | None = None

        async def run(self, aw: Awaitable[T], task: asyncio.Task[Any] | None = None) -> T:
            """``await aw`` in ``task`` (the current task; None: looked up), cancelled past the timeout."""
            loop = asyncio.get_running_loop()
            if task is None:
                task = asyncio.current_task()
                assert task is not None
            entry = _Deadline(loop.time() + self.timeout_s, task)
            live = self._live
            live[entry] = None
            if self._handle is None:
                self._handle = loop.call_at(entry.when, self._expire)
            token = CALL_DEADLINE.set(entry.when)
            try:
                result = await aw
            except BaseException as exc:
                # asyncio.timeout's __aexit__: a cancel of ours (and no other since) becomes TimeoutError
                if entry.expired and task.uncancel() <= entry.cancelling and type(exc) is asyncio.CancelledError:
                    raise TimeoutError from exc
                raise
            finally:
                CALL_DEADLINE.reset(token)
                del live[entry]
                if not live and self._handle is not None:
                    self._handle.cancel()
                    self._handle = None
            if entry.expired:
                task.uncancel()
            return result

        def _expire(self) -> None:
            self._handle = None
            loop = asyncio.get_running_loop()
            ready = loop.time() + _CLOCK_RESOLUTION  # what the loop itself counts as due now
            earliest: float | None = None
            for entry in self._live:
                if entry.expired:
                    continue
                if entry.when < ready:
                    entry.expired = True
                    entry.task.cancel()
                elif earliest is None or entry.when < earliest:
                    earliest = entry.when
            if earliest is not None:
                self._handle = loop.call_at(earliest, self._expire)

    _CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution

else:  # Python 3.10: no asyncio.timeout

    async def _within(aw: Awaitable[T], timeout_s: float) -> T:
        return await asyncio.wait_for(aw, timeout_s)

    _Deadlines = None  # type: ignore[assignment,misc]


class _Scoring:
    """A cell whose checks are running, as the watchdog sees cells in flight: a deadline (``loop.time()``) and a task."""

    __slots__ = ("expired", "task", "when")

    def __init__(self, time_left: float, task: asyncio.Task[Any] | None) -> None:
        self.when = asyncio.get_running_loop().time() + time_left
        self.task = task
        self.expired = False  # no timer cancels checks: a judge call may take longer than the cell's timeout


#: cells a worker runs before it lets the event loop turn (when nothing it awaited made it wait meanwhile)
YIELD_EVERY = 64


class _Stamp:
    """``datetime.now(timezone.utc).isoformat(timespec="milliseconds")``, the date and time up to the second made once a second."""

    __slots__ = ("prefix", "second")

    def __init__(self) -> None:
        self.second, self.prefix = -1, ""

    def __call__(self) -> str:
        us = round(time.time() * 1_000_000)
        second, us = divmod(us, 1_000_000)
        if second != self.second:
            self.second, self.prefix = second, datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{self.prefix}{us // 1000:03d}+00:00"


#: a cell's ``started_at``
_started_at = _Stamp()


def _cancels(task: asyncio.Task[Any] | None) -> int | None:
    """How many cancel requests ``task`` (the current one) has pending (``Task.cancelling``); None where Python cannot tell (3.10)."""
    counter = getattr(task, "cancelling", None)
    return counter() if counter is not None else None


def cache_entry(traj: Trajectory, run: RunContext) -> dict[str, Any]:
    """What the response cache stores of an answer: the trajectory without its traceback or cached flag, secrets masked."""
    stored = traj.to_dict()
    stored.pop("traceback", None)
    stored.pop("cached", None)
    return run.redactor.obj(stored) if run.redactor else stored


def _from_cache(stored: dict[str, Any], target: Target) -> Trajectory:
    traj = Trajectory.from_dict(stored)
    traj.cached = True
    restore = getattr(target, "restore_cached", None)
    if restore is not None:
        restore(traj)
    return traj


def _one_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip().splitlines()
    except Exception:  # an exception whose __str__ raises: its type says enough
        text = []
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _judge_cost(assertions: list[AssertionRecord]) -> float | None:
    costs = [d["cost_usd"] for a in assertions if (d := a.get("details")) and d.get("cost_usd") is not None]
    return round(sum(costs), 8) if costs else None
