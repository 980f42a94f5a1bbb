"""Run cells concurrently: per-target worker pools, per-cell timeouts.

Each target gets ``concurrency`` workers (its resolved
:class:`~evalx.targets.TargetSettings`) pulling from its own list of cells,
so memory stays flat whatever the number of cells, and a slow target never
starves a fast one. The worker pool is the only queue a cell waits in: a
target's connection or thread pool is as large as its workers. A cell starts
when a worker takes it, its cache lookup missed and the target's rate limit
(``pacer``) let it go; its ``timeout_s`` and latency count from then: one
:class:`~evalx.common.deadline.Deadline` per cell, read by every layer the cell
goes through (the call, its checks, the watchdog). Every finished cell is
scored, redacted and handed to ``on_result`` straight away (which appends it
to ``results.jsonl``).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from evalx.assertions import AssertionContext, Grader, cell_status, evaluate_case
from evalx.assertions.evaluate import MIN_CHECK_TIME_S
from evalx.common import trace_context
from evalx.common.deadline import Deadline, HeldTheLoop, within
from evalx.common.json_types import JSONObject
from evalx.errors import TargetError, one_line
from evalx.execution import cells
from evalx.models import Cell, Trajectory, safe_trajectory
from evalx.results.model import AssertionRecord, CellResult, cell_result, not_run
from evalx.targets import RunContext, Target, TargetSettings, code_parts, tally
from evalx.targets.batch import BatchRound

if TYPE_CHECKING:
    from evalx.tracing.collector import TraceCounts
    from evalx.tracing.run import RunTracing
    from evalx.tracing.spans import StoredSpan, TraceRecord


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
    #: the target's ``pacer`` (rate limit), looked up once when its target starts (:class:`~evalx.execution.runtime.CellRuntime`)
    pacer: Callable[[], Awaitable[None]] | None = field(default=None, init=False)
    #: batch mode: the target's ``prefetch`` (its answer from a batch, waited for before the cell starts), else None
    prefetch: Callable[[Cell, RunContext], Awaitable[None]] | None = field(default=None, init=False)


#: characters of a cell's error kept for the end-of-run line (the whole error is in the cell's result)
ERROR_LINE = 500


@dataclass
class ExecutionStats:
    #: each errored cell's error, as the end-of-run line shows it (:meth:`add_error`)
    errors_by_target: dict[str, list[str]] = field(default_factory=dict)
    cells_by_target: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    #: a traced run: spans received, late, unknown and dropped (:class:`evalx.tracing.collector.TraceCounts`)
    trace_counts: TraceCounts | None = None

    def add_error(self, target: str, error: str) -> None:
        """Count a cell's error: one line of at most :data:`ERROR_LINE` characters (an error from user code or a server
        may hold up to ``max_response_bytes``; a run of many such cells must not hold them all, nor print one whole)."""
        if len(error) > ERROR_LINE or "\n" in error:
            line = " ".join(error[: ERROR_LINE * 2].split())
            error = line if len(line) <= ERROR_LINE and len(error) <= ERROR_LINE * 2 else line[:ERROR_LINE] + " …"
        self.errors_by_target.setdefault(target, []).append(error)


class Executor:
    def __init__(
        self,
        plans: list[TargetPlan],
        run: RunContext,
        *,
        global_asserts: list[JSONObject],
        on_result: Callable[[CellResult], None],
        judge: Grader | None = None,
        judge_settings: JSONObject | None = None,
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
        #: asked before each cell starts: True to start no more cells (``--max-failures``); those left have no result
        self.stop: Callable[[], bool] | None = None
        #: the targets that play simulated users (:class:`evalx.execution.simulate.UserTargets`), set by the runner
        self.users: Any = None
        #: the deadlines of the cells in flight, for the watchdog (:class:`evalx.execution.watchdog.Watchdog`)
        self.live: dict[Deadline, None] = {}
        #: batch mode: counts the workers, so queued requests go out once every worker waits on a batch (set by the runtime)
        self.batch_round: BatchRound | None = None
        #: a traced run (``tracing: {receive: true}``): each cell its own trace, its spans in its result
        self.tracing: RunTracing | None = None

    async def execute(self) -> ExecutionStats:
        workers: list[asyncio.Task[None]] = []
        for plan in self.plans:
            it = iter(plan.cells)
            # batch mode: every cell's request waits in a batch at once (bounded), not `concurrency` of them
            width = BATCH_IN_FLIGHT if plan.prefetch is not None else plan.settings.concurrency
            n = max(1, min(width, len(plan.cells)))
            for _ in range(n):
                workers.append(asyncio.create_task(self._work(plan, it) if self.batch_round is None else self._worker(plan, it)))
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            self.stats.interrupted = True
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        return self.stats

    async def _worker(self, plan: TargetPlan, cells: Any) -> None:
        """:meth:`_work` in a run with batch-mode targets: counted in the batch round (without any, a worker is its :meth:`_work`)."""
        batch_round = self.batch_round
        assert batch_round is not None
        batch_mode = plan.prefetch is not None
        batch_round.enter(batch_mode)
        try:
            return await self._work(plan, cells)
        finally:
            batch_round.leave(batch_mode)

    async def _work(self, plan: TargetPlan, cells: Any) -> None:
        turns = 0
        stop = self.stop
        task = asyncio.current_task()  # the worker's: it runs each of its cells
        while stop is None or not stop():
            cell = next(cells, None)
            if cell is None:
                return
            reason = self.admit(cell) if self.admit is not None else None
            if reason is not None:
                self.on_result(self.skipped_cell(plan, cell, reason))
                continue
            result = await self.run_cell(plan, cell, task)
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

    async def run_cell(self, plan: TargetPlan, cell: Cell, task: asyncio.Task[Any] | None = None) -> CellResult:
        """Run one cell (its rate-limit waits tallied into its ``rate_limits``) in ``task``: the current one (a worker's,
        looked up when not given). One coroutine a cell: the tally's block holds the whole of it."""
        if task is None:
            task = asyncio.current_task()
        with tally() as counted:
            # a conversation (scripted or simulated): its own driver (and its own cache lookups)
            if cell.case.turns is not None or cell.case.simulate is not None:
                from evalx.execution.conversation import run_conversation

                return await run_conversation(self, plan, cell)
            target = plan.target
            cache = self.run.cache
            cache_key = self.cache_key(plan, cell) if cache is not None else None
            hit = await cache.get(cache_key) if cache is not None and cache_key else None
            if hit is None and plan.prefetch is not None:
                await plan.prefetch(cell, self.run)  # batch mode: waiting for the batch is not the cell's time
            if hit is None and plan.pacer is not None:
                await plan.pacer()  # the target's rate limit: waiting for a turn is not the cell's time
            # the cell starts now: its timeout and latency count from here
            started_at = cells.started_at()
            t0 = time.perf_counter()
            deadline = Deadline(plan.settings.timeout_s, task=task)
            live = self.live
            live[deadline] = None  # the watchdog stops the cell if it holds the event loop past its deadline
            waited = counted.wait_s
            trace: TraceRecord | None = None
            spans: list[StoredSpan] | None = None
            try:
                if hit is not None:
                    traj = cells.from_cache(hit, target)
                    try:  # stored under another max_response_bytes, or a cache file edited: the same bound as a fresh answer
                        traj = safe_trajectory(traj, plan.settings.max_response_bytes)
                    except ValueError as exc:
                        traj = Trajectory(error=f"{target.id}'s cached answer cannot be used: {exc}")
                elif self.tracing is None:
                    traj = await self._call(target, cell, deadline, plan.settings.max_response_bytes)
                else:  # its own trace: its calls carry the cell's span as their parent
                    cell_span, bucket = self.tracing.begin()
                    token = trace_context.CURRENT.set(cell_span)
                    try:
                        traj = await self._call(target, cell, deadline, plan.settings.max_response_bytes)
                    except BaseException:  # the run is interrupted: the cell's trace is closed, its late spans counted
                        self.tracing.collector.end(bucket)
                        raise
                    finally:
                        trace_context.CURRENT.reset(token)
                latency = (time.perf_counter() - t0 - (counted.wait_s - waited)) * 1000.0  # a rate-limit wait is not latency
                if traj.latency_ms is None:
                    traj.latency_ms = round(latency, 3)
                if self.tracing is not None and hit is None:  # the wait for late spans is not the target's latency
                    trace = await self.tracing.finish(bucket, traj, target.type, getattr(target, "price", None))
                    spans = trace["spans"]
                if cache is not None and cache_key and hit is None and traj.error is None:  # errors are never cached
                    cache.put(cache_key, cells.cache_entry(traj, self.run))
                asserts = [*self.global_asserts, *cell.case.asserts]
                assertions: list[AssertionRecord] = []
                if traj.error is None:
                    # the checks count against the cell's time too (at least MIN_CHECK_TIME_S, if the call used it all)
                    deadline.at_least(MIN_CHECK_TIME_S)
                    ctx = self.assertion_context(cell, target, traj, plan.settings.max_response_bytes)
                    ctx.spans = spans
                    ctx.traced = self.tracing is not None
                    try:
                        assertions = await evaluate_case(asserts, ctx, deadline=deadline)
                    except HeldTheLoop:  # the watchdog stopped a check outside the part of it that reports its own errors
                        traj.error = deadline.message("the checks held the event loop")
            finally:
                del live[deadline]
            self.stats.cells_by_target[target.id] = self.stats.cells_by_target.get(target.id, 0) + 1
            status, score = cell_status(assertions, threshold=cell.case.threshold, target_error=traj.error)
            judge_cost = cells.judge_cost(assertions)
            output, tb, cached = cells.stored_output(traj)
            result = cell_result(
                self.run.run_id, cell.index, target.id, target.type, cell.case, cell.dataset, cell.repeat,
                status, score, assertions, output, traj.latency_ms, traj.ttft_ms, traj.cost_usd,
                judge_cost, cached, traj.error, tb, started_at, None, cells.rate_limits(counted),
            )  # fmt: skip
            if trace is not None:
                result["trace"] = trace
            if self.run.redactor:
                result = self.run.redactor.obj(result)
            if result["error"] is not None:
                self.stats.add_error(target.id, result["error"])
            return result

    async def _call(self, target: Target, cell: Cell, deadline: Deadline, max_bytes: int | None = None) -> Trajectory:
        """The target's answer for ``cell`` under its deadline; whatever goes wrong is the trajectory's error.

        An answer that would store more than ``max_bytes`` (``max_response_bytes``) is the cell's error.
        """
        task = deadline.task  # the worker's: its cell's timeout and cancels
        cancels = cells.cancels(task)  # this task's cancel requests before the call: more after it means a real cancel
        try:
            traj = await within(deadline, target.invoke(cell, self.run))
        except (TimeoutError, asyncio.TimeoutError) as exc:  # the deadline's timer, or the watchdog (TargetHeldTheLoop)
            # a note from the target on what became of the call (a sync call still running in its thread)
            notes = getattr(exc.__cause__, "__notes__", None) or []
            traj = Trajectory(error="; ".join([deadline.message(), *notes]))
            traj.printed = getattr(exc.__cause__, "evalx_printed", None)  # what a Python target printed before
        except TargetError as exc:
            traj = Trajectory(error=str(exc))
        except asyncio.CancelledError as exc:
            if cancels is None or cells.cancels(task) != cancels:
                raise  # the run is interrupted (Ctrl-C, SIGTERM): not this cell's doing
            # nobody cancelled this task: the target raised CancelledError itself (or let an inner task's escape)
            traj = Trajectory(
                error=f"{one_line(exc)} raised by the target (no cancel of the cell or the run)", traceback=traceback.format_exc()
            )
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit...: the target's, so the cell's error
            traj = Trajectory(error=one_line(exc), traceback=traceback.format_exc())
        try:  # a lone surrogate from outside, or output past max_response_bytes, stops here, before results, cache and reports
            return safe_trajectory(traj, max_bytes)
        except ValueError as exc:  # a value that contains itself: it could never be written
            return Trajectory(error=f"{target.id} returned output evalx cannot store: {exc}")

    def assertion_context(self, cell: Cell, target: Target, traj: Trajectory, max_bytes: int | None = None) -> AssertionContext:
        """What a cell's checks see: its case, this output (a reply, or a conversation as one), the judge, the target's tools."""
        return AssertionContext(
            case=cell.case,
            output=traj,
            config_dir=self.run.config_dir,
            judge=self.judge,
            judge_settings=self.judge_settings,
            target=target.id,
            tools=target.spec.get("tools"),
            max_bytes=max_bytes,
        )

    def cache_key(self, plan: TargetPlan, cell: Cell) -> str | None:
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
            return make_key(plan.target.type, spec, case, cell.repeat, *code_parts(plan.target))  # a Python target's code too
        except Exception:  # a key that cannot be made means "do not cache", never a failed cell
            return None


#: a batch-mode target's workers: its cells whose requests may wait in batches at once
BATCH_IN_FLIGHT = 100_000
#: cells a worker runs before it lets the event loop turn (when nothing it awaited made it wait meanwhile)
YIELD_EVERY = 64
