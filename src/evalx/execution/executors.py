"""Where a run's cells execute, behind one interface: ``local`` (this process's event loop) or ``ray`` (actors on a cluster).

The runner hands :func:`execute_cells` the plan and an :class:`ExecutionJob`
(what every executor is fed: the config, the run id, the resolved settings
overrides, where results go, the cost guard's gate); the run's
``executor:`` section and ``--executor`` choose an entry of
:data:`EXECUTORS`. An executor sends each finished cell to ``on_result`` in
whatever order cells finish (the results file and the summary take them as
they come) and returns the run's :class:`~evalx.execution.executor.ExecutionStats`.
Both kinds run a cell with the same code: a process that runs cells sets up
a :class:`~evalx.execution.runtime.CellRuntime`.

A new executor is a class with ``async execute(job) -> ExecutionStats``,
registered in :data:`EXECUTORS` and named in the config schema's
``executor.kind`` and ``--executor``'s choices (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from evalx.execution.executor import ExecutionStats, Executor, TargetPlan
from evalx.execution.interrupt import Interrupt, cancel_on_signals
from evalx.execution.runtime import CellRuntime, CellSetup, check_self_grading, run_context
from evalx.models import Cell
from evalx.results.model import CellResult
from evalx.targets import EndpointLimiters, build_target, resolve_settings
from evalx.targets.settings import Overrides

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.config.model import ExecutorSettings
    from evalx.execution.plan import Plan
    from evalx.judge import Judge
    from evalx.tracing.run import RunTracing

log = logging.getLogger(__name__)

__all__ = ["EXECUTORS", "CellExecutor", "ExecutionJob", "ExecutorChoice", "choose_executor", "execute_cells"]


@dataclass(frozen=True)
class ExecutorChoice:
    """Where cells run: ``local`` (this process) or ``ray`` at ``address`` (``auto``: a running cluster; ``local``: start one)."""

    kind: str = "local"
    address: str = "auto"
    batch_size: int | None = None
    #: ``auto`` sends the config's folder to the workers unless every node is this machine; ``upload``; ``shared``
    working_dir: str = "auto"


def choose_executor(section: ExecutorSettings, kind: str | None, address: str | None) -> ExecutorChoice:
    """The run's executor: the command line (``--executor``, ``--ray-address``) over the config's ``executor:`` over local."""
    return ExecutorChoice(
        kind=kind or section.kind or "local",
        address=address or section.address or "auto",
        batch_size=section.batch_size or None,
        working_dir=section.working_dir or "auto",
    )


@dataclass
class ExecutionJob:
    """What every executor is fed: one run's cells and where their results go."""

    config: Config
    plan: Plan
    run_id: str
    overrides: Overrides
    on_result: Callable[[CellResult], None]
    #: asked before each cell starts: None to run it, else why it is skipped (the cost guard)
    admit: Callable[[Cell], str | None] | None
    quiet: bool
    choice: ExecutorChoice
    #: asked before each cell starts: True to start no more (``--max-failures``)
    stop: Callable[[], bool] | None = None
    #: batch mode's progress line (submitted, in progress, done, ETA), for the terminal
    on_batch: Callable[[str], None] | None = None


class CellExecutor(Protocol):
    """Runs a job's cells and returns the run's statistics (interrupted or not)."""

    async def execute(self, job: ExecutionJob) -> ExecutionStats: ...


class LocalExecutor:
    """Every target's cells on this process's event loop: a worker pool per target (:class:`~evalx.execution.executor.Executor`)."""

    async def execute(self, job: ExecutionJob) -> ExecutionStats:
        config, plan = job.config, job.plan
        ctx = run_context(config, job.run_id)
        share = job.overrides.rate_limit_share if job.overrides is not None else None
        ctx.limiters = EndpointLimiters(share or 1)  # a shard's share of each provider's limits
        plans = []
        for spec, entry in zip(plan.targets, plan.target_specs):
            cells = plan.cells_for(spec.id)
            if not cells:
                continue
            settings = resolve_settings(spec, config.typed.defaults, job.overrides)  # once per target and run
            plans.append(TargetPlan(build_target(entry, settings), cells, settings))
        _check_open_files(plans)
        if any(p.settings.cache for p in plans):
            from evalx.targets.transport.cache import ResponseCache, cache_path

            ctx.cache = ResponseCache(cache_path(config.base_dir))
        tracing = await _start_tracing(config)
        try:
            runtime = await CellRuntime.start(
                ctx, plans, CellSetup.of(config, plan, job.overrides), on_result=job.on_result, on_batch=job.on_batch
            )
        except BaseException:
            if tracing is not None:
                await tracing.aclose()
            raise
        executor = runtime.executor
        if tracing is not None:
            tracing.adopt_sdk()  # after the targets started: a provider their modules set at import is kept
            executor.tracing = tracing
        executor.admit = job.admit  # the cost guard: asked before each cell starts
        executor.stop = job.stop  # --max-failures
        signals = Interrupt()
        try:
            check_self_grading(runtime.judge, config, plan, [p.target.id for p in plans])
            # a remote target (or judge) that is down: one line now, not one error per cell
            await preflight(executor, plans, runtime.judge if plan.graded_targets() else None)
            with cancel_on_signals() as signals, runtime.watch():
                stats = await executor.execute()
        except asyncio.CancelledError:
            stats = executor.stats
            stats.interrupted = True
        finally:
            await runtime.aclose()
            if tracing is not None:
                await tracing.aclose()
                executor.stats.trace_counts = tracing.counts
        if signals.interrupted:
            stats.interrupted = True
        return stats


async def _start_tracing(config: Config) -> RunTracing | None:
    """The run's receiver when ``tracing: {receive: true}`` (or ``--trace``); None otherwise."""
    settings = config.typed.tracing
    if not settings.receive:
        return None
    from evalx.tracing.run import RunTracing

    tracing = RunTracing(settings)
    await tracing.start()
    return tracing


class RayExecutor:
    """Each target's cells on a pool of Ray actors; plan, cost guard, results and reports stay on the driver."""

    async def execute(self, job: ExecutionJob) -> ExecutionStats:
        from evalx.execution.ray_executor import execute_on_ray

        batched = [t.id for t in job.plan.targets if resolve_settings(t, job.config.typed.defaults, job.overrides).batch is not None]
        if batched:
            log.warning(f"batch mode is not available with --executor ray: {', '.join(batched)} send normal calls")

        return await execute_on_ray(
            job.config,
            job.plan,
            job.choice,
            job.run_id,
            job.on_result,
            overrides=job.overrides,
            admit=job.admit,
            quiet=job.quiet,
            stop=job.stop,
        )


#: the executors by ``executor.kind`` / ``--executor``
EXECUTORS: dict[str, Callable[[], CellExecutor]] = {"local": LocalExecutor, "ray": RayExecutor}


async def execute_cells(
    config: Config,
    plan: Plan,
    *,
    run_id: str,
    overrides: Overrides,
    on_result: Callable[[CellResult], None],
    admit: Callable[[Cell], str | None] | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    quiet: bool = False,
    stop: Callable[[], bool] | None = None,
    on_batch: Callable[[str], None] | None = None,
) -> ExecutionStats:
    """Run ``plan``'s cells on the executor the request or the config chooses; ``stop()`` True: start no more cells."""
    choice = choose_executor(config.typed.executor, executor, ray_address)
    job = ExecutionJob(config, plan, run_id, overrides, on_result, admit, quiet, choice, stop, on_batch)
    return await EXECUTORS[choice.kind]().execute(job)


#: the most cells of a target looked up in the response cache to decide that all of them are there (and no connect is needed)
CACHE_SCAN = 10_000


async def preflight(executor: Executor, plans: list[TargetPlan], judge: Judge | None = None) -> None:
    """Raise :class:`~evalx.errors.TargetUnreachable` when a started remote target's host:port takes no TCP connection.

    Skipped for a target whose cells are all in the response cache (the first
    :data:`CACHE_SCAN` looked up), and with ``EVALX_NO_PREFLIGHT=1``. ``judge``
    (a run with model-graded cells): its target is checked at the same time; one
    that takes no connection is a warning, since its answers may be cached.
    """
    import dataclasses

    from evalx.errors import TargetUnreachable
    from evalx.targets.preflight import endpoint_of, preflight_disabled, unreachable

    if preflight_disabled():
        return
    endpoints = []
    for plan in plans:
        endpoint = endpoint_of(plan.target)
        if endpoint is not None and not await _all_cached(executor, plan):
            endpoints.append(endpoint)
    judged = endpoint_of(await judge.started_target()) if judge is not None else None
    if judged is not None:
        endpoints.append(dataclasses.replace(judged, kind="judge target"))
    lines = await unreachable(endpoints) if endpoints else []
    for line in lines:
        if line.startswith("judge target "):
            log.warning(f"{line}; the model-graded checks will error unless their answers are in the response cache")
    lines = [line for line in lines if not line.startswith("judge target ")]
    if lines:
        raise TargetUnreachable(lines)


async def _all_cached(executor: Executor, plan: TargetPlan) -> bool:
    cache = executor.run.cache
    if cache is None or not plan.settings.cache:
        return False
    for n, cell in enumerate(plan.cells):
        if n >= CACHE_SCAN:
            break
        if cell.case.turns is not None or cell.case.simulate is not None:
            return False  # a conversation's turns are cached turn by turn: it may well connect
        key = executor.cache_key(plan, cell)
        if not key or not await cache.contains(key):
            return False
    return True


def _check_open_files(plans: list[TargetPlan]) -> None:
    """Raise the open-files limit for the sockets the HTTP targets will hold at once, or warn before any cell runs."""
    from evalx.execution.fdlimit import ensure_open_files, needed_descriptors

    remote = [p for p in plans if p.target.type != "python"]
    if not remote:
        return
    in_flight = [min(p.settings.concurrency, len(p.cells)) for p in remote]
    ids = ", ".join(p.target.id for p in remote[:3]) + (", …" if len(remote) > 3 else "")
    what = f"up to {sum(in_flight)} requests at once ({ids})"
    warning = ensure_open_files(needed_descriptors(in_flight), what)
    if warning:
        log.warning(warning)
