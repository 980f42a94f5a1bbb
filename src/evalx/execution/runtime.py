"""What runs cells in one process: targets started, the judge, simulated users, the cache and the watchdog.

The local executor (:mod:`evalx.execution.executors`) and each Ray actor
(:mod:`evalx.execution.ray_actor`) set up the same things the same way:
:meth:`CellRuntime.start` starts the targets (releasing those it started if
one cannot start), makes the judge client, the
:class:`~evalx.execution.executor.Executor` and the simulated users'
targets; :meth:`CellRuntime.watch` is the watchdog over its cells in flight;
:meth:`CellRuntime.aclose` closes everything, the response cache last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalx.common import written
from evalx.common.json_types import JSONObject
from evalx.execution.executor import Executor, TargetPlan
from evalx.execution.watchdog import Watchdog
from evalx.results.model import CellResult
from evalx.targets import RunContext, close_all
from evalx.targets.settings import Overrides
from evalx.targets.spec import DefaultSettings

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.execution.plan import Plan
    from evalx.judge import Judge

log = logging.getLogger(__name__)

__all__ = ["CellRuntime", "CellSetup", "check_self_grading", "run_context"]


@dataclass(frozen=True)
class CellSetup:
    """What a process that runs cells is set up with: the same for the local executor and each Ray actor (sent to it)."""

    #: every target a judge or a simulated user may name, by id, as written (matrix variants too)
    entries: dict[str, JSONObject]
    defaults: DefaultSettings
    #: the run request's layer of every target's settings
    overrides: Overrides | None
    #: the ``judge:`` section, as written (the checks merge an assertion's own ``judge:`` over it)
    judge_settings: JSONObject
    #: the config's ``assert:``, as written
    global_asserts: list[JSONObject]

    @classmethod
    def of(cls, config: Config, plan: Plan, overrides: Overrides | None) -> CellSetup:
        entries = written.target_entries(config)
        entries.update(zip(plan.target_ids, plan.target_specs))  # matrix-expanded entries win
        return cls(entries, config.typed.defaults, overrides, written.judge_section(config), written.global_asserts(config))

    def judge(self, ctx: RunContext) -> Judge:
        """The run's judge client (lazy: it starts a judge target on first use)."""
        from evalx.judge import Judge

        return Judge(ctx, targets=self.entries, defaults=self.defaults, overrides=self.overrides, settings=self.judge_settings)


class CellRuntime:
    """Targets started, and the :class:`Executor` (with its judge and simulated users) that runs their cells."""

    def __init__(self, ctx: RunContext, plans: list[TargetPlan], executor: Executor, judge: Judge) -> None:
        self.ctx, self.plans, self.executor, self.judge = ctx, plans, executor, judge

    @classmethod
    async def start(
        cls,
        ctx: RunContext,
        plans: list[TargetPlan],
        setup: CellSetup,
        *,
        on_result: Callable[[CellResult], None],
        on_batch: Callable[[str], None] | None = None,
        batching: bool = True,
    ) -> CellRuntime:
        """Start every plan's target (a failure closes the ones started, and the cache, and is raised), then the rest."""
        from evalx.execution.simulate import UserTargets

        try:
            for plan in plans:
                await plan.target.start(ctx)
        except BaseException:  # e.g. a provider with no API key: release what the others opened
            await close_all(p.target for p in plans)
            if ctx.cache is not None:
                await ctx.cache.aclose()
                ctx.cache = None
            raise
        judge = setup.judge(ctx)
        executor = Executor(
            plans, ctx, global_asserts=setup.global_asserts, on_result=on_result, judge=judge, judge_settings=judge.settings
        )
        executor.users = UserTargets(ctx, setup.entries, setup.defaults, setup.overrides)  # started on first use
        for plan in plans:
            plan.pacer = getattr(plan.target, "pacer", None)
        if batching:  # not in a Ray actor: its cells come one by one from the driver, never all at once
            _batch_mode(ctx, plans, executor, judge, on_batch)
        return cls(ctx, plans, executor, judge)

    def watch(self) -> Watchdog:
        """The watchdog over this runtime's cells in flight (an async target that never yields ends after its timeout)."""
        return Watchdog(self.executor.live)

    async def aclose(self) -> None:
        """Close the targets, the judge, the simulated users and the response cache."""
        try:
            await close_all(p.target for p in self.plans)
            await self.judge.aclose()
            await self.executor.users.aclose()
        finally:
            cache = self.ctx.cache
            if cache is not None:
                await cache.aclose()
                if cache.problem:
                    log.warning(f"response cache not used: {cache.problem}")


def _batch_mode(ctx: RunContext, plans: list[TargetPlan], executor: Executor, judge: Judge, on_batch: Callable[[str], None] | None) -> None:
    """Give the targets in batch mode (and the judge's, when it starts) their batch queues, and the executor the round."""
    from evalx.targets.batch import BatchLedger, BatchRound

    batch_round = BatchRound(on_batch)
    ledger = BatchLedger(ctx.run_dir)
    for plan in plans:
        make = getattr(plan.target, "batch_queue", None)
        queue = make(f"target:{plan.target.id}", ledger, batch_round) if make is not None else None
        if queue is not None:
            plan.prefetch = plan.target.prefetch  # type: ignore[attr-defined]
            if queue.resumed:
                log.info(f"target {plan.target.id!r}: {queue.resumed} batch(es) sent before are polled again, not sent again")
    executor.batch_round = batch_round
    judge.batch = (ledger, batch_round)


def run_context(config: Config, run_id: str) -> RunContext:
    """The run's context as the driver has it: the config's folder, its redactor and vars, its providers folder."""
    from evalx.targets.definitions import providers_dir_of

    ctx = RunContext(run_id=run_id, config_dir=config.base_dir, redactor=config.redactor, vars=dict(config.typed.vars))
    ctx.providers_dir = providers_dir_of(config)
    ctx.run_dir = config.output_dir / run_id
    return ctx


def check_self_grading(judge: Judge, config: Config, plan: Plan, target_ids: list[str]) -> None:
    """Refuse (or warn of) a judge that grades its own target's answers, once, before any cell runs (the driver's, either executor)."""
    from evalx.judge import graded_target_ids

    judge.check_self_grading(graded_target_ids(plan.graded_targets(), config.typed.asserts, target_ids))
