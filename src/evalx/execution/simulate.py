"""Run a simulated-user conversation (a case with ``simulate:``): a user target talks to the agent until ``stop``.

``simulate: {target, instructions, max_turns, stop}``. The first user message
is the case's ``input`` when it has one, else the user target's first reply.
After each agent reply the user target is asked for the next user message,
seeing the conversation from its side: the agent's replies are ``user``
messages to it, its own earlier messages ``assistant`` (tool calls and tool
results are not shown to it). The ``instructions`` reach it per kind:

- python: ``fn(messages=..., instructions=...)`` when the function declares
  ``instructions``, else as a leading ``{role: system}`` message (a function
  without ``messages`` gets the agent's last reply, or the instructions to open);
- provider: as its system prompt (in place of its own ``system:``); when it
  opens the conversation its one message is :data:`OPENING`;
- engine: prefixed to its first message (the engine keeps the rest), which is
  the agent's first reply, or :data:`OPENING` when it opens.

It stops (``simulation.stopped_by``) when the agent's reply meets ``stop``
(``regex``: searched in the reply's text; ``tool``: the reply called that
tool), when the user target says it is done (a mapping with ``done: true``
from a Python function, or a reply that is the JSON ``{"done": true}``; always
honoured, whatever ``stop`` says), or after ``max_turns`` agent replies
(default :data:`DEFAULT_MAX_TURNS`). A user target's error ends the
conversation: the cell is ``error``, naming the turn and the simulated user.
The user's calls are not cells of their own: each turn records them as
``user: {latency_ms, usage, cost_usd}``, and their cost is
``simulation.user_cost_usd``, kept out of the cell's ``cost_usd`` (the agent's).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import traceback
from typing import TYPE_CHECKING, Any

from evalx.common.json_types import JSON, JSONObject, Message, as_object
from evalx.errors import TargetError, described, one_line
from evalx.execution.turns import Turn, TurnFailed, reply_messages, take_turn
from evalx.models import Case, Cell, Trajectory, Usage, safe_trajectory
from evalx.results.model import SimulationRecord, TurnRecord, TurnUser
from evalx.targets import RunContext, TargetSettings, close_all
from evalx.targets.settings import Overrides
from evalx.targets.spec import DefaultSettings

if TYPE_CHECKING:
    from collections.abc import Mapping

    from evalx.execution.executor import Executor

__all__ = ["DEFAULT_MAX_TURNS", "OPENING", "Simulation", "UserTargets"]

#: agent replies a simulation runs at most when ``max_turns`` is not given
DEFAULT_MAX_TURNS = 5
#: the one message a provider or engine user target gets when it opens the conversation
OPENING = "Begin the conversation: write your first message to the agent."


class _User:
    """A started user target and the limits it is called under."""

    def __init__(self, target: Any, settings: TargetSettings) -> None:
        self.target = target
        self.settings = settings
        self.semaphore = asyncio.Semaphore(settings.concurrency)  # its thread or connection pool is this large
        self.pacer = getattr(target, "pacer", None)


class UserTargets:
    """The run's user targets by id: each built and started on first use, all closed with the run."""

    def __init__(self, run: RunContext, specs: Mapping[str, JSONObject], defaults: DefaultSettings, overrides: Overrides | None) -> None:
        self.run, self.specs, self.defaults, self.overrides = run, specs, defaults, overrides
        self._started: dict[str, _User | str] = {}
        self._lock = asyncio.Lock()

    async def get(self, target_id: str) -> _User:
        """The started user target ``target_id``; TargetError when it is unknown or could not start."""
        async with self._lock:
            user = self._started.get(target_id)
            if user is None:
                user = self._started[target_id] = await self._start(target_id)
        if isinstance(user, str):
            raise TargetError(user)
        return user

    async def _start(self, target_id: str) -> _User | str:
        from evalx.targets import build_target, resolve_settings

        spec = self.specs.get(target_id)
        if spec is None:
            return f"unknown target {target_id!r}"
        try:
            settings = resolve_settings(spec, self.defaults, self.overrides)
            target = build_target(spec, settings)
            await target.start(self.run)
        except Exception as exc:  # the user target's own start (user code, a missing key): this cell's error, not the run's
            return f"could not start: {described(exc)}"
        if getattr(target, "converse", None) is None:
            return f"{target.type} targets cannot play the user"
        return _User(target, settings)

    async def aclose(self) -> None:
        await close_all(user.target for user in self._started.values() if isinstance(user, _User))
        self._started.clear()


class Simulation:
    """One simulated conversation: its settings, the user side of each turn and why it stopped."""

    def __init__(self, executor: Executor, cell: Cell) -> None:
        spec: JSONObject = cell.case.simulate or {}  # the case's simulate: as its dataset loader checked it
        self.executor, self.cell = executor, cell
        self.target_id = str(spec.get("target"))
        self.instructions = str(spec.get("instructions") or "")
        max_turns = spec.get("max_turns")
        self.max_turns = max_turns if isinstance(max_turns, int) and max_turns else DEFAULT_MAX_TURNS
        stop = as_object(spec.get("stop"))
        regex, tool = stop.get("regex"), stop.get("tool")
        self.regex = re.compile(regex) if isinstance(regex, str) else None
        self.stop_tool = tool if isinstance(tool, str) else None
        #: the user side of each agent turn, by 1-based turn (absent: the case's own input)
        self.user_side: dict[int, TurnUser] = {}
        self.user_usage = Usage()
        self.user_costs: list[float] = []
        self.stopped_by = "error"
        #: the user message of the turn in progress (for a turn that times out)
        self.pending: JSON = ""

    async def talk(self, converse: Any, run: RunContext, done: list[Turn], max_bytes: int | None = None) -> None:
        """Alternate the user target and the agent, appending each agent turn to ``done``; raise :class:`TurnFailed`.

        ``max_bytes`` (the agent's ``max_response_bytes``) bounds each message and the whole conversation, the
        user's messages included (:func:`take_turn`); the user's own replies are bounded by its own setting too.
        """

        case, cell = self.cell.case, self.cell
        users: UserTargets | None = getattr(self.executor, "users", None)
        who = f"the simulated user (target {self.target_id!r})"
        try:
            if users is None:
                raise TargetError("no user targets in this run")
            user = await users.get(self.target_id)
        except TargetError as exc:
            raise TurnFailed(1, f"turn 1: {who}: {exc}", None) from None
        user_case = Case(
            id=f"{case.id}.user",
            input=self.instructions,
            dataset=case.dataset,
            vars=case.vars,
            system=self.instructions,
            source=case.source,
        )
        user_cell = Cell(index=cell.index, target=self.target_id, dataset=cell.dataset, case=user_case, repeat=cell.repeat)
        history: list[Message] = []
        opening = case.input if case.input not in (None, "") else None
        mocked = case.tool_results or {}
        n = 0
        while True:
            n += 1
            if n == 1 and opening is not None:
                message = opening
            else:
                self.pending = ""
                reply = await self._ask(user, user_cell, run, history, n, who)
                if reply is None:
                    self.stopped_by = "user_done"
                    return
                message = reply
            self.pending = message
            history.append({"role": "user", "content": message})
            traj = await take_turn(converse, cell, run, history, n, message, done, max_bytes)
            history.extend(reply_messages(traj, mocked))
            met = self._met(traj)
            if met is not None:
                self.stopped_by = met
                return
            if n >= self.max_turns:
                self.stopped_by = "max_turns"
                return

    def _met(self, traj: Trajectory) -> str | None:
        """``regex`` or ``tool`` when the agent's reply meets ``stop``, else None."""
        if self.regex is not None and self.regex.search(traj.text or ""):
            return "regex"
        tool = self.stop_tool
        if tool is not None and any(c.name == tool for c in traj.tool_calls):
            return "tool"
        return None

    async def _ask(self, user: _User, user_cell: Cell, run: RunContext, history: list[Message], n: int, who: str) -> str | None:
        """The user target's next message (None: it is done); :class:`TurnFailed` when it fails."""
        target = user.target
        seen: list[Message] = [
            {"role": "assistant" if m["role"] == "user" else "user", "content": m["content"]}
            for m in history
            if m["role"] in ("user", "assistant")
        ]
        kwargs: dict[str, str] = {}
        if target.type == "python":
            kwargs["instructions"] = self.instructions  # python.py: as instructions= or a leading system message
        elif not seen:
            seen = [{"role": "user", "content": OPENING}]
        if target.type == "engine" and not any(m["role"] == "assistant" for m in seen):  # its first message: the instructions first
            seen[-1] = {"role": "user", "content": f"{self.instructions}\n\n{seen[-1]['content']}"}
        user_turn = sum(1 for m in seen if m["role"] == "assistant") + 1
        tb = None
        async with user.semaphore:
            if user.pacer is not None:
                await user.pacer()
            t0 = time.perf_counter()
            try:
                traj = await target.converse(user_cell, run, seen, user_turn, **kwargs)
            except TargetError as exc:
                traj = Trajectory(error=str(exc))
            except (asyncio.CancelledError, asyncio.TimeoutError):
                raise
            except BaseException as exc:  # the user target's own exception: this turn's error, with its traceback
                traj, tb = Trajectory(error=one_line(exc)), traceback.format_exc()
        latency = round((time.perf_counter() - t0) * 1000.0, 3)
        try:
            traj = safe_trajectory(traj, user.settings.max_response_bytes)
        except ValueError as exc:
            traj = Trajectory(error=f"returned output evalx cannot store: {exc}")
        usage = traj.to_dict()["usage"]
        self.user_usage.add(usage)
        if traj.cost_usd is not None:
            self.user_costs.append(traj.cost_usd)
        self.user_side[n] = {
            "latency_ms": traj.latency_ms if traj.latency_ms is not None else latency,
            "usage": usage,
            "cost_usd": traj.cost_usd,
        }
        if traj.error is not None:
            raise TurnFailed(n, f"turn {n}: {who} failed: {traj.error}", tb or traj.traceback)
        if _says_done(traj):
            return None
        if not (traj.text or "").strip():
            raise TurnFailed(n, f'turn {n}: {who} returned an empty message (return {{"done": true}} to end the conversation)', None)
        return traj.text

    def annotate(self, records: list[TurnRecord]) -> None:
        """Add each turn's user side (``user: {latency_ms, usage, cost_usd}``) to its record."""
        for n, record in enumerate(records, 1):
            if n in self.user_side:
                record["user"] = self.user_side[n]

    def summary(self, agent_turns: int) -> SimulationRecord:
        """The cell's ``simulation`` record: ``{target, turns, stopped_by, max_turns, user_usage, user_cost_usd}``."""
        return {
            "target": self.target_id,
            "turns": agent_turns,
            "stopped_by": self.stopped_by,
            "max_turns": self.max_turns,
            "user_usage": {"input_tokens": self.user_usage.input_tokens, "output_tokens": self.user_usage.output_tokens,
                           "cache_hit_tokens": self.user_usage.cache_hit_tokens},
            "user_cost_usd": round(sum(self.user_costs), 8) if self.user_costs else None,
        }  # fmt: skip


def _says_done(traj: Trajectory) -> bool:
    """Whether a user target's reply is ``{"done": true}``: a mapping from a Python function, or that JSON as text."""
    if isinstance(traj.raw, dict) and traj.raw.get("done") is True:
        return True
    text = (traj.text or "").strip()
    if text.startswith("{") and text.endswith("}"):
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return isinstance(value, dict) and value.get("done") is True
    return False
