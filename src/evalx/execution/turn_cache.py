"""The response cache for conversations: each turn of a stateless target keyed on the conversation so far, an engine's whole.

A provider or Python target answers from what it is sent, so each turn is
cached on its own: the key covers the target (a provider's own request key:
provider, model, URLs, definition, headers digest, the rendered body with the
history as its messages; a Python target's type and spec, secrets masked, and
the case without its ``turns``), the history sent for the turn (every earlier
user message, reply and mocked tool result) and the repeat. A rerun replays
the unchanged early turns without a call and asks again from the first
changed turn. An engine keeps the conversation's state on its side, so
replaying part of it would desync it: its conversation is cached whole (every
turn's reply under one key over the whole scripted case: inputs,
``tool_results``, the engine's spec and body), and only when caching is on for
it (``cache: true``; off by default for engines). Errors are never stored.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from evalx.common.json_types import JSONObject, Message
from evalx.models import Cell, Trajectory, safe_trajectory
from evalx.targets import RunContext, code_parts
from evalx.targets.transport.cache import ResponseCache, make_key

if TYPE_CHECKING:
    from evalx.execution.executor import Executor, TargetPlan

__all__ = ["per_turn", "replay_whole", "store_whole", "whole_key"]

#: target types that keep a conversation's state on their side: cached whole, never turn by turn
STATEFUL = frozenset({"engine"})


def per_turn(executor: Executor, plan: TargetPlan, converse: Any) -> Any:
    """``converse`` looking each turn up in the cache first (and storing a good answer), or ``converse`` itself when no cache applies."""
    cache = executor.run.cache
    if cache is None or not plan.settings.cache or plan.target.type in STATEFUL:
        return converse

    async def cached_converse(cell: Cell, run: RunContext, history: list[Message], turn: int) -> Trajectory:
        key = _turn_key(executor, plan, cell, run, history)
        if key is not None:
            hit = await cache.get(key)
            if hit is not None:
                return _replayed(hit, plan)
        t0 = time.perf_counter()
        traj: Trajectory = await converse(cell, run, history, turn)
        if key is not None and isinstance(traj, Trajectory) and traj.error is None:
            if traj.latency_ms is None:
                traj.latency_ms = round((time.perf_counter() - t0) * 1000.0, 3)
            try:
                traj = safe_trajectory(traj, plan.settings.max_response_bytes)
            except ValueError:
                return traj  # the driver reports it; nothing stored
            _put(cache, key, traj, run)
        return traj

    return cached_converse


def whole_key(executor: Executor, plan: TargetPlan, cell: Cell) -> str | None:
    """The key of a stateful target's whole conversation, when caching is on for it (else None)."""
    if executor.run.cache is None or not plan.settings.cache or plan.target.type not in STATEFUL:
        return None
    if not cell.case.turns:  # only a scripted conversation is known whole before it runs
        return None
    key = executor.cache_key(plan, cell)  # the engine's single-cell key: spec, body, headers, the case with its turns, repeat
    return make_key("conversation", key) if key is not None else None


async def replay_whole(executor: Executor, plan: TargetPlan, key: str, n_turns: int) -> list[Trajectory] | None:
    """Every turn's reply of a cached conversation (``cached: true``), or None on a miss."""
    cache = executor.run.cache
    if cache is None:
        return None
    hit = await cache.get(key)
    turns = hit.get("turns") if hit is not None else None
    if not isinstance(turns, list) or len(turns) != n_turns or not all(isinstance(t, dict) for t in turns):
        return None
    return [_replayed(t, plan) for t in turns]


def store_whole(executor: Executor, key: str, trajs: list[Trajectory]) -> None:
    """Store a conversation that ran to its end without an error, every turn's reply under ``key``."""
    cache, run = executor.run.cache, executor.run
    if cache is None or any(t.error is not None for t in trajs):
        return
    from evalx.execution.cells import cache_entry

    cache.put(key, {"turns": [cache_entry(t, run) for t in trajs]})


def _turn_key(executor: Executor, plan: TargetPlan, cell: Cell, run: RunContext, history: list[Message]) -> str | None:
    target = plan.target
    try:
        own = getattr(target, "cache_key", None)
        if own is not None:  # a provider: its request, rendered with the history as its messages
            key = own(cell, run, history)
            return make_key("turn", key) if key is not None else None
        case = cell.case.to_dict()
        case.pop("source", None)
        case.pop("turns", None)  # later turns must not change an earlier turn's key
        spec = run.redactor.obj(target.spec) if run.redactor else target.spec  # secrets masked: never part of a key
        return make_key("turn", target.type, spec, case, history, cell.repeat, *code_parts(target))
    except Exception:  # a key that cannot be made means "do not cache", never a failed turn
        return None


def _put(cache: ResponseCache, key: str, traj: Trajectory, run: RunContext) -> None:
    from evalx.execution.cells import cache_entry

    cache.put(key, cache_entry(traj, run))


def _replayed(stored: JSONObject, plan: TargetPlan) -> Trajectory:
    from evalx.execution.cells import from_cache

    return from_cache(stored, plan.target)
