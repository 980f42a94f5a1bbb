"""Run cells concurrently: per-target worker pools, per-cell timeouts.

Each target gets ``concurrency`` workers pulling from its own list of cells,
so memory stays flat whatever the number of cells, and a slow target never
starves a fast one. Every finished cell is scored, redacted and handed to
``on_result`` straight away (which appends it to ``results.jsonl``).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ._errors import TargetError
from ._models import RESULT_VERSION, Cell, Trajectory
from .assertions import AssertionContext, cell_status, evaluate_case
from .targets import RunContext, Target


@dataclass
class TargetPlan:
    target: Target
    cells: list[Cell]
    concurrency: int
    timeout_s: float


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
        on_result: Callable[[dict[str, Any]], None],
        judge: Any = None,
        judge_settings: dict[str, Any] | None = None,
    ) -> None:
        self.plans = plans
        self.run = run
        self.global_asserts = global_asserts
        self.on_result = on_result
        self.judge = judge
        self.judge_settings = judge_settings or {}
        self.stats = ExecutionStats()

    async def execute(self) -> ExecutionStats:
        workers: list[asyncio.Task[None]] = []
        for plan in self.plans:
            it = iter(plan.cells)
            n = max(1, min(plan.concurrency, len(plan.cells)))
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
        for cell in cells:
            result = await self.run_cell(plan, cell)
            self.on_result(result)

    async def run_cell(self, plan: TargetPlan, cell: Cell) -> dict[str, Any]:
        target = plan.target
        started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        t0 = time.perf_counter()
        try:
            traj = await asyncio.wait_for(target.invoke(cell, self.run), plan.timeout_s)
        except asyncio.TimeoutError:
            traj = Trajectory(error=f"timed out after {plan.timeout_s:g}s")
        except TargetError as exc:
            traj = Trajectory(error=str(exc))
        except Exception as exc:
            traj = Trajectory(error=_one_line(exc), traceback=traceback.format_exc())
        latency = (time.perf_counter() - t0) * 1000.0
        if traj.latency_ms is None:
            traj.latency_ms = round(latency, 3)

        asserts = [*self.global_asserts, *cell.case.asserts]
        if traj.error is None:
            ctx = AssertionContext(
                case=cell.case,
                output=traj,
                config_dir=self.run.config_dir,
                judge=self.judge,
                judge_settings=self.judge_settings,
                target=target.id,
            )
            assertions = await evaluate_case(asserts, ctx)
        else:
            assertions = []
        self.stats.cells_by_target[target.id] = self.stats.cells_by_target.get(target.id, 0) + 1
        status, score = cell_status(assertions, threshold=cell.case.threshold, target_error=traj.error)
        judge_cost = _judge_cost(assertions)
        output = traj.to_dict()
        tb = output.pop("traceback", None)
        cached = bool(output.pop("cached", False))
        result: dict[str, Any] = {
            "version": RESULT_VERSION,
            "run_id": self.run.run_id,
            "index": cell.index,
            "target": target.id,
            "dataset": cell.dataset,
            "case_id": cell.case.id,
            "repeat": cell.repeat,
            "category": cell.case.category,
            "difficulty": cell.case.difficulty,
            "tags": cell.case.tags,
            "case_source": cell.case.source,
            "input": cell.case.input,
            "expected": cell.case.expected,
            "status": status,
            "score": None if score is None else round(score, 6),
            "assertions": assertions,
            "output": output,
            "latency_ms": traj.latency_ms,
            "ttft_ms": traj.ttft_ms,
            "cost_usd": traj.cost_usd,
            "judge_cost_usd": judge_cost,
            "cached": cached,
            "error": traj.error,
            "traceback": tb,
            "started_at": started_at,
        }
        if self.run.redactor:
            result = self.run.redactor.obj(result)
        if result["error"] is not None:
            self.stats.errors_by_target.setdefault(target.id, []).append(result["error"])
        return result


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _judge_cost(assertions: list[dict[str, Any]]) -> float | None:
    costs = [a["details"].get("cost_usd") for a in assertions if a.get("details") and a["details"].get("cost_usd") is not None]
    return round(sum(costs), 8) if costs else None
