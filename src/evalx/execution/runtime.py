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
from collections.abc import Callable, Mapping
from typing import Any

from evalx.execution.executor import Executor, TargetPlan
from evalx.execution.watchdog import Watchdog
from evalx.results.model import CellResult
from evalx.targets import RunContext, close_all
from evalx.targets.settings import Overrides

log = logging.getLogger(__name__)

__all__ = ["CellRuntime", "run_context"]


class CellRuntime:
    """Targets started, and the :class:`Executor` (with its judge and simulated users) that runs their cells."""

    def __init__(self, ctx: RunContext, plans: list[TargetPlan], executor: Executor, judge: Any) -> None:
        self.ctx, self.plans, self.executor, self.judge = ctx, plans, executor, judge

    @classmethod
    async def start(
        cls,
        ctx: RunContext,
        plans: list[TargetPlan],
        *,
        specs: dict[str, dict[str, Any]],
        defaults: Mapping[str, Any],
        overrides: Overrides | None,
        judge_settings: dict[str, Any],
        global_asserts: list[dict[str, Any]],
        on_result: Callable[[CellResult], None],
    ) -> CellRuntime:
        """Start every plan's target (a failure closes the ones started, and the cache, and is raised), then the rest."""
        from evalx.execution.simulate import UserTargets
        from evalx.judge import Judge

        try:
            for plan in plans:
                await plan.target.start(ctx)
        except BaseException:  # e.g. a provider with no API key: release what the others opened
            await close_all(p.target for p in plans)
            if ctx.cache is not None:
                await ctx.cache.aclose()
                ctx.cache = None
            raise
        judge = Judge(ctx, targets=specs, defaults=defaults, overrides=overrides, settings=judge_settings)
        executor = Executor(plans, ctx, global_asserts=global_asserts, on_result=on_result, judge=judge, judge_settings=judge.settings)
        executor.users = UserTargets(ctx, specs, defaults, overrides)  # started on first use
        for plan in plans:
            plan.pacer = getattr(plan.target, "pacer", None)
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


def run_context(config: Any, run_id: str) -> RunContext:
    """The run's context as the driver has it: the config's folder, its redactor and vars, its providers folder."""
    from evalx.targets.definitions import providers_dir_of

    ctx = RunContext(run_id=run_id, config_dir=config.base_dir, redactor=config.redactor, vars=config.vars)
    ctx.providers_dir = providers_dir_of(config)
    return ctx
