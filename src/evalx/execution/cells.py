"""What a cell's result is made of, shared by the one-shot executor and the conversation driver (below both).

Its start stamp, its judge cost, its cache entry and what a cache hit gives
back, and whether a cancel was the cell's or the run's.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any, cast

from evalx.common.json_types import JSONObject
from evalx.models import Trajectory
from evalx.results.model import AssertionRecord, CellOutput, CellRateLimits
from evalx.targets import RunContext, Tally, Target

__all__ = ["cache_entry", "cancels", "from_cache", "judge_cost", "rate_limits", "started_at", "stored_output"]


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
started_at = _Stamp()


def cancels(task: asyncio.Task[Any] | None) -> int | None:
    """How many cancel requests ``task`` (the current one) has pending (``Task.cancelling``); None where Python cannot tell (3.10)."""
    counter = getattr(task, "cancelling", None)
    return counter() if counter is not None else None


def stored_output(traj: Trajectory) -> tuple[CellOutput, str | None, bool]:
    """The trajectory as ``results.jsonl`` stores a cell's (or a turn's) ``output``, and what is kept out of it: its traceback
    (the cell's own key) and whether it came from the cache."""
    output = traj.to_dict()
    tb = output.pop("traceback", None)
    cached = bool(output.pop("cached", False))
    return cast(CellOutput, output), tb, cached  # Trajectory.to_dict() writes CellOutput's keys


def cache_entry(traj: Trajectory, run: RunContext) -> JSONObject:
    """What the response cache stores of an answer: the trajectory without its traceback or cached flag, secrets masked."""
    stored = traj.to_dict()
    stored.pop("traceback", None)
    stored.pop("cached", None)
    return run.redactor.obj(stored) if run.redactor else stored


def from_cache(stored: JSONObject, target: Target) -> Trajectory:
    """A cached answer as a trajectory (``cached``), with what its target restores (today's prices)."""
    traj = Trajectory.from_dict(stored)
    traj.cached = True
    restore = getattr(target, "restore_cached", None)
    if restore is not None:
        restore(traj)
    return traj


def judge_cost(assertions: list[AssertionRecord]) -> float | None:
    """What the judge calls of a cell's checks cost, in all (None: no judge call said)."""
    costs = [d["cost_usd"] for a in assertions if (d := a.get("details")) and d.get("cost_usd") is not None]
    return round(sum(costs), 8) if costs else None


def rate_limits(counted: Tally | None) -> CellRateLimits | None:
    """The cell's ``rate_limits``: what its calls met at a provider's endpoint limiter, as ``counted`` (its
    :func:`~evalx.targets.tally`) says (None: they met none)."""
    if counted is None or not counted.used:
        return None
    return {"responses_429": counted.responses_429, "wait_s": round(counted.wait_s, 3), "concurrency": counted.concurrency}
