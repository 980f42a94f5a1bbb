"""The Ray actor that runs one target's cells: the target built and started once, each cell through the local executor's code.

:class:`CellWorker` is what :mod:`evalx.execution.ray_executor` places on
the cluster (``ray.remote(CellWorker)``; this module never imports Ray, so
the package works without it). An actor builds its target once — a Python
target's module, and whatever model it loads, once per actor — and runs
the cells it is sent through :meth:`evalx.execution.executor.Executor.run_cell`,
the code a local run uses: cache lookup, rate limit, timeout, checks
(judge calls included) and the result record, redacted. Its ``concurrency``
workers pull cells from one queue, whatever batch they came in, so a batch
that is sent while another runs keeps the workers busy; a batch returns when
its last cell is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evalx.common.json_types import JSONObject
from evalx.common.redaction import Redactor
from evalx.errors import described, one_line
from evalx.execution.executor import YIELD_EVERY, Executor, TargetPlan
from evalx.execution.runtime import CellRuntime, CellSetup
from evalx.models import Cell
from evalx.results.model import CellResult, cell_result
from evalx.results.store import storable
from evalx.targets import EndpointLimiters, RunContext, TargetSettings, build_target


@dataclass
class WorkerJob:
    """What an actor needs to run one target's cells: sent once, when the actor is created."""

    run_id: str
    #: the target's entry, as written
    spec: JSONObject
    #: the target's settings for this actor: its share of the concurrency and of the rate limit
    settings: TargetSettings
    redactor: Redactor
    #: the config's ``vars:``
    vars: Mapping[str, object]
    #: the judge, the simulated users and the checks, as the driver has them (the entries' rate limits shared out)
    setup: CellSetup
    #: the config's folder on the driver; None when it was sent as the actor's ``working_dir``
    config_dir: str | None = None
    #: ``providers_dir:``: relative to the config's folder when inside it, else as the driver has it
    providers_dir: str | None = None
    #: the response cache file, used only by actors on the driver's node (None: no caching)
    cache_path: str | None = None
    driver_node: str | None = None
    #: the environment variables the targets read (sent here, not in ``runtime_env``, which Ray's dashboard shows)
    env: dict[str, str] = field(default_factory=dict)
    #: the processes sending to each provider endpoint (every actor of the run, times the shards):
    #: each actor's endpoint limiters take this share of the provider's limits
    endpoint_share: int = 1


class CellWorker:
    """One actor of a target's pool: :meth:`start` once, then :meth:`run` batches of cells, :meth:`close` at the end."""

    def __init__(self, job: WorkerJob) -> None:
        self.job = job
        self.executor: Executor | None = None
        self.plan: TargetPlan | None = None
        self.runtime: CellRuntime | None = None
        self._queue: asyncio.Queue[tuple[Cell, asyncio.Future[CellResult]]] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._stack = contextlib.ExitStack()

    async def start(self) -> tuple[str, str] | None:
        """Build and start the target, the judge client and the workers; ``(kind, message)`` when something could not start."""
        try:
            await self._start()
        except BaseException as exc:  # sent back as text: the driver raises it as the run's start-up failure
            from evalx.errors import ConfigError, EvalxError

            message = (str(exc) or type(exc).__name__) if isinstance(exc, EvalxError) else described(exc)  # user code's: never raises
            return ("config" if isinstance(exc, ConfigError) else "other", message)
        return None

    async def _start(self) -> None:
        from evalx.common.usercode import user_code_on_path
        from evalx.logs import printing

        job = self.job
        self._stack.enter_context(printing())  # evalx's lines on the actor's stderr, which Ray shows on the driver's
        os.environ.update(job.env)
        config_dir = Path(job.config_dir) if job.config_dir else Path.cwd()  # Ray unpacked the config's folder as the cwd
        self._stack.enter_context(user_code_on_path(config_dir))
        ctx = RunContext(run_id=job.run_id, config_dir=config_dir, redactor=job.redactor, vars=dict(job.vars))
        ctx.limiters = EndpointLimiters(job.endpoint_share)
        if job.providers_dir:
            ctx.providers_dir = (config_dir / job.providers_dir).resolve()
        if job.cache_path and job.settings.cache and _node_id() == job.driver_node:
            from evalx.targets.transport.cache import ResponseCache

            ctx.cache = ResponseCache(Path(job.cache_path))
        self.ctx = ctx
        target = build_target(job.spec, job.settings)
        if target.type != "python":
            from evalx.execution.fdlimit import ensure_open_files, needed_descriptors

            ensure_open_files(needed_descriptors([job.settings.concurrency]), f"target {target.id!r}")
        plan = TargetPlan(target, [], job.settings)
        self.runtime = runtime = await CellRuntime.start(ctx, [plan], job.setup, on_result=_unused, batching=False)
        self.plan, self.executor = plan, runtime.executor
        self._stack.enter_context(runtime.watch())  # an async target that never yields: its cell ends after its timeout
        self._queue = asyncio.Queue()
        self._workers = [asyncio.create_task(self._work()) for _ in range(max(1, job.settings.concurrency))]

    async def run(self, cells: list[Cell]) -> list[CellResult]:
        """The results of ``cells``, in their order, each run by the first free worker.

        Each result is made storable here (:func:`evalx.results.store.storable`, what the local run's writer does),
        so what crosses to the driver is plain data whatever a target returned; a cell whose run failed in evalx's
        own code is that cell's error, never its batch's.
        """
        assert self._queue is not None, "start() first"
        loop = asyncio.get_running_loop()
        futures = []
        for cell in cells:
            future: asyncio.Future[CellResult] = loop.create_future()
            self._queue.put_nowait((cell, future))
            futures.append(future)
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        results = []
        for cell, outcome in zip(cells, outcomes):
            # nothing may leave this method raised: an exception sinks the whole batch, and a SystemExit or
            # KeyboardInterrupt ends the actor's event loop thread, which leaves Ray waiting for this call for ever
            if isinstance(outcome, BaseException):
                outcome = self._failed(cell, outcome)
            try:
                results.append(storable(outcome))
            except BaseException as exc:  # a value whose repr raises past what storable catches: still only this cell
                results.append(storable(self._failed(cell, exc)))
        return results

    def _failed(self, cell: Cell, exc: BaseException) -> CellResult:
        """The error result of a cell whose run raised in evalx's own code (the target's failures are results already)."""
        job = self.job
        target = self.plan.target if self.plan is not None else None  # started: run() is only called after start()
        target_id = target.id if target is not None else str(job.spec.get("id"))
        target_type = target.type if target is not None else str(job.spec.get("type"))
        result = cell_result(
            job.run_id, cell.index, target_id, target_type, cell.case, cell.dataset, cell.repeat,
            "error", None, [], {}, error=f"evalx failed on this cell: {one_line(exc)}",
        )  # fmt: skip
        return job.redactor.obj(result) if job.redactor else result

    async def _work(self) -> None:
        assert self._queue is not None and self.executor is not None and self.plan is not None
        queue, executor, plan = self._queue, self.executor, self.plan
        turns = 0
        while True:
            cell, future = await queue.get()
            try:
                result = await executor.run_cell(plan, cell)
            except asyncio.CancelledError:
                if not future.done():
                    future.cancel()
                raise
            except BaseException as exc:  # run_cell turns a target's failures into results: this is evalx's own
                if not future.done():
                    future.set_exception(exc)
                continue
            if not future.done():
                future.set_result(result)
            turns += 1
            if turns >= YIELD_EVERY:  # as the local executor's workers do: let the loop turn now and then
                turns = 0
                await asyncio.sleep(0)

    async def ping(self) -> int:
        """The actor's process id (tests, and a cheap round trip for the benchmark)."""
        return os.getpid()

    async def close(self) -> None:
        """Stop the workers; close the target, the judge, the simulated users and the cache."""
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        try:
            if self.runtime is not None:
                await self.runtime.aclose()
            else:
                cache = getattr(getattr(self, "ctx", None), "cache", None)
                if cache is not None:  # the runtime never started: the cache it would have closed
                    await cache.aclose()
        finally:
            self._stack.close()


def _unused(result: CellResult) -> None:
    """The actor's executor hands results back from :meth:`CellWorker.run`, never through ``on_result``."""


def _node_id() -> str | None:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # not in a Ray worker (a test calling the actor class directly)
        return None
