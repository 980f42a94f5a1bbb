"""What every target implements, and what a run passes down to it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalx.common.redaction import Redactor
from evalx.models import Cell, Trajectory
from evalx.targets.settings import TargetSettings
from evalx.targets.transport.cache import ResponseCache


@dataclass
class RunContext:
    """Shared, read-only facts about the run a target takes part in."""

    run_id: str
    config_dir: Path
    redactor: Redactor = field(default_factory=Redactor)
    vars: dict[str, Any] = field(default_factory=dict)
    cache: ResponseCache | None = None  # when some target caches (``TargetSettings.cache``)
    providers_dir: Path | None = None  # the config's providers_dir:, resolved


class Target(Protocol):
    """A target, built from its spec and its resolved settings (:func:`evalx.targets.build_target`).

    A target may also have ``pacer``: None, or (set by ``start()``) an
    ``async () -> None`` a caller awaits before each ``invoke()`` — the wait
    for the target's rate limit. It is not the cell's time: the cell's
    timeout starts after it.
    """

    id: str
    type: str
    spec: dict[str, Any]
    settings: TargetSettings

    async def start(self, run: RunContext) -> None:
        """Create shared resources (one HTTP client per target, a thread pool...)."""

    async def invoke(self, cell: Cell, run: RunContext) -> Trajectory:
        """Turn one cell's case into a trajectory, or raise TargetError."""

    async def aclose(self) -> None:
        """Release what start() created."""


class ConversingTarget(Target, Protocol):
    """A target that can hold a scripted conversation (a case with ``turns:``, :mod:`evalx.execution.conversation`).

    ``converse`` is called once per turn, in order, with the history so far
    (``[{role, content}]``, ending with this turn's user message; an assistant
    message may carry ``tool_calls`` and be followed by ``{role: tool, name,
    content}`` messages for the mocked ``tool_results``) and the 1-based turn
    number. It returns that turn's reply or raises TargetError, as ``invoke``
    does. A target without it cannot run conversations: such a cell is an error
    that says so.
    """

    async def converse(self, cell: Cell, run: RunContext, history: list[dict[str, Any]], turn: int) -> Trajectory:
        """One turn's reply to ``history`` (whose last item is the turn's user message)."""


async def close_all(targets: Iterable[Target]) -> None:
    """Close every target; one that fails to close does not stop the others (closing must not mask a run's outcome)."""
    for target in targets:
        try:
            await target.aclose()
        except Exception:  # a target's own close (a user's plugin target, a server gone): never the run's outcome
            pass


def task_id(run_id: str, cell: Cell) -> str:
    """A fresh id per cell so an agent's memory never bleeds between cases."""
    tid = f"eval-{run_id}-{cell.case.id}"
    return f"{tid}-r{cell.repeat}" if cell.repeat else tid


#: the names a target's templates (``prompt:``, ``system:``, ``messages:``, ``params:``, an engine's ``body:``) see:
#: :func:`template_context`'s keys, and ``turn`` in an engine body of a conversation; ``evalx validate`` checks against these
TEMPLATE_NAMES = ("case", "vars", "target", "env", "repeat", "task_id", "run_id", "turn")
#: what a template's ``target`` leaves out of the target's spec
HIDDEN_TARGET_KEYS = ("api_key", "headers")


def template_context(cell: Cell, run: RunContext, spec: dict[str, Any]) -> dict[str, Any]:
    """What a target's templates see for ``cell`` (:data:`TEMPLATE_NAMES`)."""
    return {
        "case": cell.case.to_dict(),
        "vars": {**run.vars, **(spec.get("vars") or {}), **cell.case.vars},
        "target": {k: v for k, v in spec.items() if k not in HIDDEN_TARGET_KEYS},
        "env": _environ_snapshot(run),
        "repeat": cell.repeat,
        "task_id": task_id(run.run_id, cell),
        "run_id": run.run_id,
    }


def _environ_snapshot(run: RunContext) -> dict[str, str]:
    """``os.environ`` copied once per run, not once per cell (a per-cell hot spot).

    Sharing it between cells is safe: templates render in an immutable sandbox.
    """
    snapshot: dict[str, str] | None = run.__dict__.get("_environ")
    if snapshot is None:
        import os

        snapshot = run.__dict__["_environ"] = dict(os.environ)
    return snapshot
