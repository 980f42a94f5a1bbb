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
from evalx.models import Cell, Trajectory, json_size, safe_trajectory, stored_size, too_large
from evalx.targets import RunContext

__all__ = ["PREVIEW_CHARS", "Turn", "TurnFailed", "preview", "reply_messages", "take_turn"]


class Turn:
    """One turn as it ran: its user message, its reply (a trajectory), how long the call took and what it stores (bytes)."""

    __slots__ = ("input", "latency_ms", "size", "traj")

    def __init__(self, text: JSON, traj: Trajectory, latency_ms: float | None, size: int = 0) -> None:
        self.input, self.traj, self.latency_ms, self.size = text, traj, latency_ms, size


#: how much of a user message past ``max_response_bytes`` its turn keeps (characters), to show what it was
PREVIEW_CHARS = 200


class TurnFailed(EvalxError):
    """A turn's call failed: the conversation ends here (the failed turn is the last of ``done``)."""

    def __init__(self, turn: int, message: str, tb: str | None) -> None:
        super().__init__(message)
        self.turn, self.message, self.tb = turn, message, tb


async def take_turn(
    converse: Any,
    cell: Cell,
    run: RunContext,
    history: list[Message],
    n: int,
    text: JSON,
    done: list[Turn],
    max_bytes: int | None = None,
) -> Trajectory:
    """Turn ``n``: the target's reply to ``history`` (ending with the user's ``text``), appended to ``done``.

    A target's error (or its own exception) ends the conversation: :class:`TurnFailed`
    naming the turn. So does a reply, or the conversation so far (every turn's
    user message and reply), past ``max_bytes`` (the target's ``max_response_bytes``):
    a user message that would take the conversation past it is not sent.
    The cell's timeout and the run's interrupt pass through.
    """
    held = sum(turn.size for turn in done)
    asked = json_size(text)
    if max_bytes is not None and held + asked > max_bytes:
        message = too_large(held + asked, max_bytes, "the user message would take the conversation to") + "; it was not sent"
        done.append(Turn(preview(text, asked), Trajectory(error=message), 0.0, PREVIEW_CHARS))
        raise TurnFailed(n, f"turn {n}: {message}", None)
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
        traj = safe_trajectory(traj, max_bytes)
    except ValueError as exc:
        traj = Trajectory(error=f"{cell.target} returned output evalx cannot store: {exc}")
    size = asked + stored_size(traj)
    if max_bytes is not None and traj.error is None and held + size > max_bytes:
        traj = Trajectory(error=too_large(held + size, max_bytes, "the reply takes the conversation to"), latency_ms=traj.latency_ms)
        size = asked
    if traj.latency_ms is None:
        traj.latency_ms = round((time.perf_counter() - t0) * 1000.0, 3)
    done.append(Turn(text, traj, traj.latency_ms, size))
    if traj.error is not None:
        raise TurnFailed(n, f"turn {n}: {traj.error}", tb or traj.traceback)
    return traj


def preview(value: Any, size: int) -> str:
    """A user message too large to keep, as its first :data:`PREVIEW_CHARS` characters and its size."""
    head = value if isinstance(value, str) else repr(value)
    return f"{head[:PREVIEW_CHARS]} … ({size:,} bytes, not kept: past max_response_bytes)"


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
