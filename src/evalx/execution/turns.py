"""One turn of a conversation: the target's reply to the history so far, kept as a :class:`Turn`, or :class:`TurnFailed`.

Shared by the scripted conversations (:mod:`evalx.execution.conversation`) and
the simulated users (:mod:`evalx.execution.simulate`).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Mapping
from typing import Any

from evalx.common.json_types import JSON, Message
from evalx.errors import EvalxError, TargetError, one_line
from evalx.models import Cell, Trajectory, safe_trajectory
from evalx.targets import RunContext

__all__ = ["Turn", "TurnFailed", "reply_messages", "take_turn"]


class Turn:
    """One turn as it ran: its user message, its reply (a trajectory) and how long the call took."""

    __slots__ = ("input", "latency_ms", "traj")

    def __init__(self, text: JSON, traj: Trajectory, latency_ms: float | None) -> None:
        self.input, self.traj, self.latency_ms = text, traj, latency_ms


class TurnFailed(EvalxError):
    """A turn's call failed: the conversation ends here (the failed turn is the last of ``done``)."""

    def __init__(self, turn: int, message: str, tb: str | None) -> None:
        super().__init__(message)
        self.turn, self.message, self.tb = turn, message, tb


async def take_turn(converse: Any, cell: Cell, run: RunContext, history: list[Message], n: int, text: JSON, done: list[Turn]) -> Trajectory:
    """Turn ``n``: the target's reply to ``history`` (ending with the user's ``text``), appended to ``done``.

    A target's error (or its own exception) ends the conversation: :class:`TurnFailed`
    naming the turn. The cell's timeout and the run's interrupt pass through.
    """
    t0 = time.perf_counter()
    tb = None
    try:
        traj = await converse(cell, run, history, n)
    except TargetError as exc:
        traj = Trajectory(error=str(exc))
    except (asyncio.CancelledError, asyncio.TimeoutError):
        raise  # the cell's timeout or the run's interrupt: the caller tells which
    except BaseException as exc:  # the target's own exception: this turn's error, with its traceback
        traj, tb = Trajectory(error=one_line(exc)), traceback.format_exc()
    try:
        traj = safe_trajectory(traj)
    except ValueError as exc:
        traj = Trajectory(error=f"{cell.target} returned output evalx cannot store: {exc}")
    if traj.latency_ms is None:
        traj.latency_ms = round((time.perf_counter() - t0) * 1000.0, 3)
    done.append(Turn(text, traj, traj.latency_ms))
    if traj.error is not None:
        raise TurnFailed(n, f"turn {n}: {traj.error}", tb or traj.traceback)
    return traj


def reply_messages(traj: Trajectory, mocked: Mapping[str, JSON]) -> list[Message]:
    """The assistant's reply as history: its text (and tool calls), then a ``tool`` message per call with a mocked result."""
    message: Message = {"role": "assistant", "content": traj.text}
    if not traj.tool_calls:
        return [message]
    message["tool_calls"] = [{"name": c.name, "args": c.args} for c in traj.tool_calls]
    out = [message]
    for i, call in enumerate(traj.tool_calls):
        if call.name in mocked:
            if call.result is None:
                call.result = mocked[call.name]
            out.append({"role": "tool", "name": call.name, "tool_call_index": i, "content": call.result})
    return out
