"""Run a plan's cells on Ray actors (``evalx run --executor ray``): one actor pool per target; the driver keeps the rest.

The driver (this process) keeps what a local run keeps: the plan, resume,
the cost guard, results.jsonl (through the runner's ``on_result``), the
summary, gates and reports. Only cells travel: each target gets a pool of
:class:`~evalx.execution.ray_actor.CellWorker` actors (``ray: {actors,
concurrency, num_cpus, num_gpus}`` on the target), each of which builds
and starts the target once and runs the cells it is sent with the local
executor's per-cell code, checks and judge calls included, so a cell's
result is the one a local run writes.

Batches: every actor has two batches in flight (its workers never wait for
the driver); a batch's size is ``executor.batch_size`` or, by default, the
actor's concurrency at first and then enough cells for about half a second
of work (at most 512), never more than a fair share of what is left. A
batch's results come back, and are written, when its last cell is done.

Limits across the cluster: the driver admits every cell (the cost guard),
so the budget holds as in a local run, give or take the cells in flight
(at most two batches per actor). A target's ``rate_limit`` is shared out:
each of its N actors paces at rpm/N (the judge's and other named targets':
rpm divided by all the actors of the run) — exact while every actor is
busy, conservative when some are idle.

A dead actor (its process crashed, its node was lost, ``ray.kill``): the
cells of its batches in flight run again on another actor when the target
has no side effects (a provider, or python with ``idempotent: true``);
otherwise each becomes an ``error`` "worker lost", which ``--resume``
runs again. A dead actor is replaced (up to the pool's size in a run).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from evalx.common.ansi import strip_ansi
from evalx.common.json_types import JSONObject, as_object
from evalx.common.reading import CONFIG, PROVIDER, read_text
from evalx.errors import ConfigError, EvalxError
from evalx.execution.executor import ExecutionStats
from evalx.execution.interrupt import Interrupt, cancel_on_signals
from evalx.execution.ray_actor import CellWorker, WorkerJob
from evalx.execution.runtime import CellSetup
from evalx.models import Cell
from evalx.results.model import CellResult, cell_result, not_run
from evalx.targets import TargetSettings, resolve_settings
from evalx.targets.settings import Overrides
from evalx.targets.spec import ProviderTargetSpec, PythonTargetSpec, RaySettings, TargetSpec

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.execution.executors import ExecutorChoice
    from evalx.execution.plan import Plan

log = logging.getLogger(__name__)

#: what ``--executor ray`` says when Ray is not installed
RAY_MISSING = "--executor ray needs Ray, an optional extra: pip install 'evalx-runner[ray]'"
#: how a cell lost with its actor begins its error (``--resume`` runs such cells again)
WORKER_LOST = "worker lost"
#: batches in flight per actor
DEPTH = 2
#: the largest batch the default sizing sends, and the work (seconds) it aims a batch at
MAX_BATCH = 512
BATCH_SECONDS = 0.5
#: what the config's folder never sends to a cluster (the runs, the cache, environments, VCS and tool caches)
EXCLUDES = [
    ".git/",
    ".evalx/",
    ".venv/",
    "venv/",
    "__pycache__/",
    "*.pyc",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    "node_modules/",
]
#: start-up and run phases of the last Ray run in this process, in seconds (the benchmark reads it)
LAST_TIMINGS: dict[str, float] = {}


def import_ray() -> Any:
    """The ``ray`` module, or an error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise EvalxError(RAY_MISSING) from None
    return ray


def connect(ray: Any, address: str, upload: Callable[[], RuntimeEnv], mode: str = "auto") -> tuple[bool, bool]:
    """Connect to the cluster at ``address``: (this call started a local instance, the config's folder was sent as the working_dir).

    Ray sends a local folder to its workers only as a job's ``runtime_env``
    (given to ``ray.init``): ``upload()`` makes it, asked for when the config's
    folder must travel (``mode`` upload, or auto with a node on another
    machine). When this process is connected already (the Python API, a
    test), that connection is used as it is.
    """
    import logging

    # the lines actors print reach this process's stderr with Ray's "(CellWorker pid=N)" prefix: uncoloured, so the
    # terminal-safe stderr shows it as it reads (it lets only evalx's own colours through; Ray's cyan became "\x1b[36m")
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    if ray.is_initialized():
        return False, bool((ray.get_runtime_context().runtime_env or {}).get("working_dir"))
    if address == "local":
        env = upload() if mode == "upload" else None
        ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING, runtime_env=env)  # never someone's cluster
        return True, env is not None
    target = address if address != "auto" else os.environ.get("RAY_ADDRESS", "")
    unreachable = _unreachable(target) if target and target not in ("auto", "local") else None
    if unreachable:  # Ray would retry for minutes, printing its own warnings, before it says anything
        raise EvalxError(f"cannot connect to the Ray cluster at {target}: {unreachable}")
    try:
        ray.init(address=address, logging_level=logging.WARNING)
        if mode == "upload" or (mode == "auto" and not _all_nodes_here(ray)):
            ray.shutdown()  # again, as a job that carries the folder
            ray.init(address=address, logging_level=logging.WARNING, runtime_env=upload())
            return False, True
    except Exception as exc:  # whatever ray.init raised, it could not connect: one line that names the cause
        found = address if address != "auto" else _address_in(str(exc))  # auto: the address Ray tried, if it says
        refused = _refused_token(ray, found) if found else None
        if refused:
            raise EvalxError(f"cannot connect to the Ray cluster at {found}: {refused}") from None
        if address == "auto" and isinstance(exc, ConnectionError):
            raise EvalxError(
                "no running Ray cluster found (--ray-address auto): start one (`ray start --head`), "
                "or pass --ray-address local to start a local Ray instance"
            ) from None
        raise EvalxError(f"cannot connect to the Ray cluster at {address}: {ray_error_text(exc)}") from None
    return False, False


#: how long the head's port may take to accept a connection before the address is called unreachable
PROBE_S = 5.0


def _unreachable(address: str) -> str | None:
    """Why nothing at ``HOST:PORT`` can be a Ray head (the host does not resolve, nothing listens, no answer); None
    when something accepts a connection there, or for an address that is not ``HOST:PORT`` (``ray://``: Ray says)."""
    import socket

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if "://" in address or not host or not port.isdigit():
        return None
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        return f"the host {host!r} cannot be resolved ({reason}): check --ray-address (or RAY_ADDRESS)"
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except ConnectionRefusedError:
        return f"nothing listens on port {port} there (connection refused): start the head (`ray start --head --port={port}`) or check the port"
    except TimeoutError:
        return f"no answer on port {port} within {PROBE_S:g}s (a firewall, or not the head's address)"
    except OSError as exc:
        return f"the head's port cannot be reached ({exc.strerror or exc})"
    return None


def _address_in(text: str) -> str | None:
    """The ``HOST:PORT`` a Ray error says it tried to reach (``Failed to connect to Ray cluster at 10.0.0.2:6379``)."""
    match = re.search(r"\bat (\[?[\w.:-]+\]?:\d+)", text)
    return match.group(1) if match else None


#: where docs/scale-out.md says how to pass a cluster's token
TOKEN_HELP = "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the cluster's token> (or RAY_AUTH_TOKEN_PATH=<a file holding it>)"


def _refused_token(ray: Any, address: str) -> str | None:
    """Why a head that answers refused this process, when the reason is its token authentication; None otherwise.

    Ray's ``ConnectionError`` does not say (only its log does): a GCS client made here asks the head once, and only
    when something listens at ``address`` (a client to nowhere waits for 40 s).
    """
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return None
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
    except OSError:
        return None
    try:
        ray._raylet.GcsClient(address=address)
    except Exception as exc:  # (only an authentication refusal is told; the rest is Ray's own message)
        if type(exc).__name__ != "AuthenticationError" and "InvalidAuthToken" not in str(exc):
            return None
    else:
        return None
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":  # Ray sends a token only in token mode, whatever is set
        return f"the cluster requires token authentication and the token is missing: {TOKEN_HELP}"
    return "the cluster refused the authentication token: check that RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) holds its token"


def ray_error_text(exc: BaseException) -> str:
    """A Ray error as one line of plain text: the exception raised inside the worker when Ray kept it, never
    Ray's coloured ``ray::Actor.method()`` banner."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return f"{type(cause).__name__}: {_first_line(cause)}"
    lines = [line.strip() for line in strip_ansi(str(exc)).splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(("ray::", "Traceback", "File ", "^"))]
    return (meaningful[-1] if meaningful else lines[-1] if lines else type(exc).__name__)[:500]


@dataclass
class _Actor:
    handle: Any
    dead: bool = False
    replaced: bool = False


@dataclass
class _Pool:
    """One target's actors and the cells still to send them."""

    target_id: str
    target_type: str
    idempotent: bool
    job: WorkerJob
    options: ActorOptions
    cells: Iterator[Cell]
    total: int
    concurrency: int
    size: int
    batch_size: int | None = None
    actors: list[_Actor] = field(default_factory=list)
    retry: collections.deque[Cell] = field(default_factory=collections.deque)
    taken: int = 0
    in_flight: int = 0
    replacements: int = 0
    starting: int = 0
    mean_cell_s: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def next_batch_size(self) -> int:
        if self.batch_size:
            return self.batch_size
        live = max(1, sum(not a.dead for a in self.actors))
        left = self.total - self.taken + len(self.retry)
        fair = max(1, math.ceil(left / (live * DEPTH)))  # the last batches are shared out, not left to one actor
        if self.mean_cell_s is None:
            wanted = self.concurrency
        else:
            wanted = round(self.concurrency * BATCH_SECONDS / max(self.mean_cell_s, 1e-5))
        return max(1, min(wanted, MAX_BATCH, fair))


class RayRun:
    """One run's cells on Ray: pools started, batches sent and collected, dead actors handled."""

    def __init__(
        self,
        config: Config,
        plan: Plan,
        choice: ExecutorChoice,
        run_id: str,
        on_result: Callable[[CellResult], None],
        *,
        overrides: Overrides | None,
        admit: Callable[[Cell], str | None] | None,
        quiet: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.config, self.plan, self.choice, self.run_id = config, plan, choice, run_id
        self.on_result, self.overrides, self.admit, self.quiet = on_result, overrides, admit, quiet
        self.stop = stop  # --max-failures: start no new cell once it says so
        self.stats = ExecutionStats()
        self.pools: list[_Pool] = []
        self.ray: Any = None
        self.lanes: set[asyncio.Task[None]] = set()
        self.uploaded = False

    async def execute(self) -> ExecutionStats:
        self.ray = ray = import_ray()
        started_ray, self.uploaded = connect(ray, self.choice.address, self._working_dir, self.choice.working_dir)
        t0 = time.monotonic()
        signals = Interrupt()
        try:
            with cancel_on_signals() as signals:
                await self._run_pools(t0)
        except asyncio.CancelledError:
            self.stats.interrupted = True
        finally:
            for task in self.lanes:
                task.cancel()
            await asyncio.gather(*self.lanes, return_exceptions=True)
            await self._close_pools(graceful=not self.stats.interrupted)
            if started_ray:
                ray.shutdown()
        if signals.interrupted:
            self.stats.interrupted = True
        return self.stats

    async def _run_pools(self, t0: float) -> None:
        """Start the pools and send their cells until every lane is done."""
        await self._check_self_grading()
        self._make_pools()
        await self._start_pools()
        t1 = time.monotonic()
        if not self.quiet:
            actors = sum(len(p.actors) for p in self.pools)
            log.info(f"ray: {actors} actor(s) for {len(self.pools)} target(s) ready in {t1 - t0:.1f}s")
        for pool in self.pools:
            for actor in pool.actors:
                self._spawn_lanes(pool, actor)
        while self.lanes:
            await asyncio.gather(*list(self.lanes))
        LAST_TIMINGS.update(startup_s=t1 - t0, run_s=time.monotonic() - t1)

    # -- set-up --------------------------------------------------------------

    async def _check_self_grading(self) -> None:
        """The judge's bias check, once, on the driver (as a local run does it); its judge client is never started here."""
        from evalx.execution.runtime import check_self_grading, run_context

        config, plan = self.config, self.plan
        judge = CellSetup.of(config, plan, self.overrides).judge(run_context(config, self.run_id))
        try:
            check_self_grading(judge, config, plan, [t for t in plan.target_ids if len(plan.cells_for(t))])
        finally:
            await judge.aclose()

    def _make_pools(self) -> None:
        ray, config = self.ray, self.config
        used: list[tuple[TargetSpec, JSONObject, Any, TargetSettings]] = []
        for spec, entry in zip(self.plan.targets, self.plan.target_specs):
            cells = self.plan.cells_for(spec.id)
            if len(cells):
                used.append((spec, entry, cells, resolve_settings(spec, config.typed.defaults, self.overrides)))
        sized = [pool_shape(spec, settings, len(cells)) for spec, _, cells, settings in used if spec.ray and spec.ray.actors]
        fixed = sum(shape.actors * shape.num_cpus for shape in sized)  # the CPUs of the pools whose size is given
        share = free_cpu_shares(ray, [spec for spec, *_ in used], fixed)
        shapes = [(spec, entry, cells, settings, pool_shape(spec, settings, len(cells), share)) for spec, entry, cells, settings in used]
        if not shapes:
            return
        _check_resources(ray, [(spec.id, shape) for spec, _, _, _, shape in shapes])
        if not self.quiet:
            for spec, _, cells, settings, shape in shapes:
                log.info(f"ray: target {spec.id!r}: {pool_sentence(spec, settings, len(cells), shape, share)}")
        total_actors = sum(shape.actors for *_, shape in shapes)
        setup = CellSetup.of(config, self.plan, self.overrides)
        setup = dataclasses.replace(setup, entries={i: _share_rate(entry, total_actors) for i, entry in setup.entries.items()})
        config_dir = None if self.uploaded else str(config.base_dir.resolve())  # uploaded: the actor's cwd is Ray's copy
        from evalx.targets.definitions import providers_dir_of

        providers = providers_dir_of(config)
        providers_dir = None
        if providers is not None:
            providers_dir = (
                os.path.relpath(providers, config.base_dir.resolve())
                if providers.is_relative_to(config.base_dir.resolve())
                else str(providers)
            )
        cache_file = None
        if any(settings.cache for _, _, _, settings, _ in shapes):
            from evalx.targets.transport.cache import cache_path

            cache_file = str(cache_path(config.base_dir))
        driver_node = str(ray.get_runtime_context().get_node_id())
        env = _needed_env(config, self.plan.targets)
        for spec, entry, cells, settings, shape in shapes:
            rpm = settings.rate_limit_rpm
            mine = dataclasses.replace(settings, concurrency=shape.concurrency, rate_limit_rpm=rpm / shape.actors if rpm else None)
            job = WorkerJob(
                run_id=self.run_id, spec=entry, settings=mine, redactor=config.redactor, vars=config.typed.vars,
                setup=setup, config_dir=config_dir, providers_dir=providers_dir,
                cache_path=cache_file, driver_node=driver_node, env=env,
                endpoint_share=total_actors * ((self.overrides.rate_limit_share or 1) if self.overrides else 1),
            )  # fmt: skip
            options: ActorOptions = {"num_cpus": shape.num_cpus, "num_gpus": shape.num_gpus, "max_restarts": 0}
            idempotent = isinstance(spec, ProviderTargetSpec) or (isinstance(spec, PythonTargetSpec) and spec.idempotent is True)
            pool = _Pool(spec.id, spec.type, idempotent, job, options, iter(cells), len(cells), shape.concurrency, shape.actors)
            pool.batch_size = self.choice.batch_size
            self.pools.append(pool)

    def _working_dir(self) -> RuntimeEnv:
        """The job's ``runtime_env`` that sends the config's folder to every worker, without runs, caches and environments."""
        base = self.config.base_dir.resolve()
        excludes = list(EXCLUDES)
        out = self.config.output_dir
        if out.is_relative_to(base):
            excludes.append("/" + out.relative_to(base).as_posix() + "/")
        return {"working_dir": str(base), "excludes": excludes}

    async def _start_pools(self) -> None:
        starts = []
        for pool in self.pools:
            for _ in range(pool.size):
                starts.append(self._new_actor(pool))
        try:
            await asyncio.gather(*starts)
        except BaseException:
            await self._close_pools(graceful=False)
            raise

    async def _new_actor(self, pool: _Pool) -> _Actor:
        ray = self.ray
        remote = _remote_class(ray)
        try:
            handle = remote.options(**pool.options).remote(pool.job)
            failure = await handle.start.remote()
        except ray.exceptions.RayActorError as exc:
            raise EvalxError(f"target {pool.target_id!r}: its Ray actor died while starting: {_first_line(exc)}") from None
        except (OSError, ValueError, RuntimeError) as exc:  # e.g. the config's folder is too large to send
            raise EvalxError(f"target {pool.target_id!r}: cannot start a Ray actor: {_first_line(exc)}") from None
        actor = _Actor(handle)
        pool.actors.append(actor)
        if failure is not None:
            kind, message = failure
            raise ConfigError(message) if kind == "config" else EvalxError(message)
        return actor

    def _spawn_lanes(self, pool: _Pool, actor: _Actor) -> None:
        for _ in range(DEPTH):
            task = asyncio.create_task(self._lane(pool, actor))
            self.lanes.add(task)
            task.add_done_callback(self.lanes.discard)

    # -- the run -------------------------------------------------------------

    def _take(self, pool: _Pool, n: int) -> list[Cell]:
        """Up to ``n`` cells for one batch: cells to run again first (admitted already), then new ones the guard admits."""
        batch: list[Cell] = []
        while pool.retry and len(batch) < n:
            batch.append(pool.retry.popleft())
        admit, stop = self.admit, self.stop
        while len(batch) < n and (stop is None or not stop()):
            cell = next(pool.cells, None)
            if cell is None:
                break
            pool.taken += 1
            reason = admit(cell) if admit is not None else None
            if reason is not None:
                self.on_result(self._skipped(pool, cell, reason))
                continue
            batch.append(cell)
        return batch

    async def _lane(self, pool: _Pool, actor: _Actor) -> None:
        ray = self.ray
        while not actor.dead:
            cells = self._take(pool, pool.next_batch_size())
            if not cells:
                if pool.in_flight == 0:
                    return
                pool.changed.clear()
                await pool.changed.wait()  # cells may come back from a dead actor
                continue
            pool.in_flight += 1
            t0 = time.monotonic()
            try:
                results = await actor.handle.run.remote(cells)
            except (ray.exceptions.RayActorError, getattr(ray.exceptions, "ActorUnavailableError", ray.exceptions.RayActorError)) as exc:
                actor.dead = True
                await self._lost(pool, actor, cells, exc)
                return
            except ray.exceptions.RayTaskError as exc:  # the batch itself failed (cells fail one by one in the actor)
                results = [self._error(pool, cell, f"the Ray worker failed: {ray_error_text(exc)}") for cell in cells]
            finally:
                pool.in_flight -= 1
                pool.changed.set()
            elapsed = time.monotonic() - t0
            per_cell = elapsed * pool.concurrency / max(1, len(cells)) / DEPTH
            pool.mean_cell_s = per_cell if pool.mean_cell_s is None else 0.7 * pool.mean_cell_s + 0.3 * per_cell
            for result in results:
                self._deliver(result)

    def _deliver(self, result: CellResult) -> None:
        target = result["target"]
        self.stats.cells_by_target[target] = self.stats.cells_by_target.get(target, 0) + 1
        if result["error"] is not None:
            self.stats.add_error(target, result["error"])
        self.on_result(result)

    async def _lost(self, pool: _Pool, actor: _Actor, cells: list[Cell], exc: BaseException) -> None:
        """The cells of a dead actor's batch: run again elsewhere (idempotent target), else errors; the actor replaced once."""
        why = f"{WORKER_LOST}: the Ray actor running this cell died ({_first_line(exc)})"
        if pool.idempotent:
            pool.retry.extendleft(reversed(cells))
        else:
            for cell in cells:
                self._deliver(self._error(pool, cell, f"{why}; `evalx run --resume` runs it again"))
        pool.changed.set()
        if not actor.replaced and pool.replacements < pool.size:
            actor.replaced = True
            pool.replacements += 1
            pool.starting += 1
            try:
                replacement = await self._new_actor(pool)
            except EvalxError as failure:
                log.warning(f"target {pool.target_id!r}: no actor to replace a dead one: {failure}")
            else:
                self._spawn_lanes(pool, replacement)
            finally:
                pool.starting -= 1
        if not pool.starting and not any(not a.dead for a in pool.actors):  # nobody left to run the rest
            for cell in [*pool.retry, *pool.cells]:
                self._deliver(self._error(pool, cell, f"{why}; no actor is left for target {pool.target_id!r}"))
            pool.retry.clear()

    def _skipped(self, pool: _Pool, cell: Cell, reason: str) -> CellResult:
        result = cell_result(
            self.run_id, cell.index, pool.target_id, pool.target_type, cell.case, cell.dataset, cell.repeat,
            "skipped", None, [not_run(reason)], {}, skip_reason=reason,
        )  # fmt: skip
        redactor = self.config.redactor
        return redactor.obj(result) if redactor else result

    def _error(self, pool: _Pool, cell: Cell, message: str) -> CellResult:
        result = cell_result(
            self.run_id, cell.index, pool.target_id, pool.target_type, cell.case, cell.dataset, cell.repeat,
            "error", None, [], {}, error=message,
        )  # fmt: skip
        redactor = self.config.redactor
        return redactor.obj(result) if redactor else result

    async def _close_pools(self, *, graceful: bool) -> None:
        ray = self.ray
        actors = [a for pool in self.pools for a in pool.actors if not a.dead]
        if graceful and actors:
            try:
                await asyncio.wait_for(asyncio.gather(*(a.handle.close.remote() for a in actors), return_exceptions=True), 30)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        for pool in self.pools:
            for actor in pool.actors:
                try:
                    ray.kill(actor.handle, no_restart=True)
                except Exception:  # already gone
                    pass
            pool.actors.clear()


async def execute_on_ray(
    config: Any,
    plan: Any,
    choice: ExecutorChoice,
    run_id: str,
    on_result: Callable[[CellResult], None],
    *,
    overrides: Overrides | None,
    admit: Callable[[Cell], str | None] | None = None,
    quiet: bool = False,
    stop: Callable[[], bool] | None = None,
) -> ExecutionStats:
    """Run ``plan``'s cells on Ray as ``choice`` says, each result to ``on_result`` as its batch returns."""
    run = RayRun(config, plan, choice, run_id, on_result, overrides=overrides, admit=admit, quiet=quiet, stop=stop)
    return await run.execute()


class ActorOptions(TypedDict):
    """The options a target's actors are made with (``.options(...)``)."""

    num_cpus: float
    num_gpus: float
    max_restarts: int


class RuntimeEnv(TypedDict):
    """The job's ``runtime_env`` that sends the config's folder to the workers."""

    working_dir: str
    excludes: list[str]


@dataclass(frozen=True)
class PoolShape:
    """A target's pool: ``actors`` actors, ``concurrency`` cells in flight in each, the resources each holds."""

    actors: int
    concurrency: int
    num_cpus: float
    num_gpus: float


def pool_shape(spec: TargetSpec, settings: TargetSettings, cells: int, free_cpus: float | None = None) -> PoolShape:
    """A target's ``ray:`` settings with their defaults: the target's concurrency shared out; 1 CPU (python) or none.

    ``actors`` defaults to 1, except for a Python target given ``free_cpus`` (its share of what the cluster has free):
    then as many actors as those CPUs hold (``free_cpus`` ÷ ``num_cpus``), at most the target's ``concurrency`` and
    its cells, so a target that computes uses the cluster, not one CPU of it (issue 31).
    """
    given = spec.ray or RaySettings()
    cpus = given.num_cpus
    num_cpus = float(cpus) if cpus is not None else (1.0 if spec.type == "python" else 0.0)  # the others wait on the network
    if given.actors:
        wanted = given.actors
    elif spec.type == "python" and free_cpus is not None:
        fits = math.floor(free_cpus / num_cpus + 1e-9) if num_cpus > 0 else settings.concurrency
        wanted = min(fits, settings.concurrency)
    else:
        wanted = 1
    actors = max(1, min(wanted, cells))
    concurrency = given.concurrency or max(1, math.ceil(settings.concurrency / actors))
    return PoolShape(actors, concurrency, num_cpus, float(given.num_gpus or 0))


def pool_sentence(spec: TargetSpec, settings: TargetSettings, cells: int, shape: PoolShape, free_cpus: float) -> str:
    """How a target's pool was sized, for the run's first lines."""
    size = f"{shape.actors} actor(s) x {shape.concurrency} cell(s) in flight, {shape.num_cpus:g} CPU each"
    if spec.ray and spec.ray.actors:
        return f"{size} (ray.actors)"
    if spec.type != "python":
        return f"{size} (ray.actors sets more)"
    bounds = f"{free_cpus:g} free CPU(s)" + (f" / num_cpus {shape.num_cpus:g}" if shape.num_cpus else "")
    return (
        f"{size} (what the cluster can run: {bounds}, at most concurrency {settings.concurrency} and {cells} cell(s); ray.actors sets it)"
    )


def free_cpu_shares(ray: Any, specs: list[TargetSpec], fixed: float) -> float:
    """Each default-sized Python pool's share of the cluster's free CPUs: free now, less ``fixed`` (the CPUs the pools
    with ``ray.actors`` hold), divided among the Python targets without ``ray.actors``."""
    sized = [s for s in specs if s.type == "python" and not (s.ray and s.ray.actors)]
    free = float(ray.available_resources().get("CPU", 0)) - fixed
    return max(0.0, free) / max(1, len(sized))


def is_worker_lost(result: CellResult) -> bool:
    """A cell written as lost with its Ray actor: ``--resume`` runs it again."""
    error = result.get("error")
    return result.get("status") == "error" and isinstance(error, str) and error.startswith(WORKER_LOST + ":")


def _check_resources(ray: Any, shapes: list[tuple[str, PoolShape]]) -> None:
    """Fail up front when the pools ask for more CPUs or GPUs than the whole cluster has (the actors would wait for ever)."""
    have = ray.cluster_resources()
    for key, attr in (("CPU", "num_cpus"), ("GPU", "num_gpus")):
        need = sum(shape.actors * getattr(shape, attr) for _, shape in shapes)
        if need > float(have.get(key, 0)) + 1e-9:
            detail = ", ".join(f"{tid}: {shape.actors} x {getattr(shape, attr):g}" for tid, shape in shapes if getattr(shape, attr))
            raise EvalxError(
                f"the Ray actors need {need:g} {key}s ({detail}) and the cluster has {float(have.get(key, 0)):g}: "
                f"lower the targets' ray.actors or ray.{attr}"
            )


def _share_rate(entry: JSONObject, n: int) -> JSONObject:
    """A target's entry (as written) with its ``rate_limit.rpm`` divided among ``n`` actors (a copy; ``entry`` itself when it has none)."""
    rate = as_object(entry.get("rate_limit"))
    rpm = rate.get("rpm")
    if n <= 1 or not isinstance(rpm, (int, float)) or not rpm:
        return entry
    return {**entry, "rate_limit": {**rate, "rpm": float(rpm) / n}}


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def _needed_env(config: Config, specs: list[TargetSpec]) -> dict[str, str]:
    """The environment the targets read, and only that: the config's ``${VAR}``s, its ``secrets:``, provider key variables, EVALX_*."""
    names: set[str] = set()
    try:
        names.update(_VAR.findall(read_text(Path(config.path), CONFIG)))
    except OSError:
        pass
    names.update(config.typed.secrets)
    from evalx.targets.definitions import find_provider, providers_dir_of

    for spec in [*config.typed.targets, *specs]:
        if not isinstance(spec, ProviderTargetSpec):
            continue
        try:
            definition = find_provider(spec.provider, providers_dir_of(config))
        except Exception:  # the target's own start reports it
            continue
        names.update(definition.auth_envs)
        for layer in definition.layers or (definition.loaded,):  # the file and what it extends:
            try:
                names.update(_VAR.findall(read_text(Path(layer.file), PROVIDER)))
            except (OSError, AttributeError, TypeError):
                pass
    names.update(n for n in os.environ if n.startswith("EVALX_"))
    return {n: os.environ[n] for n in sorted(names) if n in os.environ}


def _all_nodes_here(ray: Any) -> bool:
    """True when every live node of the cluster is this machine (a local instance, or a cluster simulated on it)."""
    here = ray.util.get_node_ip_address()
    return all(n.get("NodeManagerAddress") == here for n in ray.nodes() if n.get("Alive"))


_REMOTE: dict[int, Any] = {}


def _remote_class(ray: Any) -> Any:
    """``ray.remote(CellWorker)``, made once per process."""
    remote = _REMOTE.get(id(ray))
    if remote is None:
        remote = _REMOTE[id(ray)] = ray.remote(CellWorker)
    return remote


def _first_line(exc: BaseException) -> str:
    text = strip_ansi(str(exc)).strip().splitlines()
    return text[0] if text else type(exc).__name__
