"""What every target implements, and what a run passes down to it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

from evalx.common.json_types import JSONObject, Message
from evalx.common.redaction import Redactor
from evalx.common.templates import render
from evalx.models import Cell, Trajectory
from evalx.targets.settings import TargetSettings
from evalx.targets.spec import TargetSpec
from evalx.targets.transport.cache import ResponseCache
from evalx.targets.transport.pacing import EndpointLimiters


def code_parts(target: object) -> tuple[str, ...]:
    """What every generic cache key of ``target`` ends with: a Python target's code digest (``code_identity``), so an
    answer, a conversation's turn or a judge's verdict is never replayed for changed code; nothing for the other kinds."""
    code = getattr(target, "code_identity", None)
    return (code,) if isinstance(code, str) else ()


@dataclass
class RunContext:
    """Shared, read-only facts about the run a target takes part in."""

    run_id: str
    config_dir: Path
    redactor: Redactor = field(default_factory=Redactor)
    vars: Mapping[str, object] = field(default_factory=dict)  # the config's ``vars:``
    cache: ResponseCache | None = None  # when some target caches (``TargetSettings.cache``)
    providers_dir: Path | None = None  # the config's providers_dir:, resolved
    #: one limiter per provider endpoint and credential, shared by the targets, the judge and simulated users
    limiters: EndpointLimiters = field(default_factory=EndpointLimiters)
    run_dir: Path | None = None  # the run's folder (batch mode keeps its batches.json there)


class Target(Protocol):
    """A target, built from its spec and its resolved settings (:func:`evalx.targets.build_target`).

    A target may also have ``pacer``: None, or (set by ``start()``) an
    ``async () -> None`` a caller awaits before each ``invoke()`` — the wait
    for the target's rate limit. It is not the cell's time: the cell's
    timeout starts after it.
    """

    id: str
    type: str
    settings: TargetSettings

    @property
    def spec(self) -> Mapping[str, Any]:
        """The ``targets:`` entry as written (:func:`evalx.targets.spec.written_entry`): generic cache keys are made from it.

        ``Any``: the executor still reads its ``tools`` from here (typed: :attr:`entry`), until it moves to the record.
        """

    @property
    def entry(self) -> TargetSpec:
        """The same entry as its typed record."""

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

    async def converse(self, cell: Cell, run: RunContext, history: list[Message], turn: int) -> Trajectory:
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


class TemplateContext(TypedDict):
    """What a target's templates (``prompt``, ``system``, ``messages``, ``params``, an engine's ``body``) see."""

    #: the case as a plain mapping (:meth:`evalx.models.Case.to_dict`)
    case: JSONObject
    #: the config's ``vars:``, under the target's, under the case's
    vars: Mapping[str, object]
    #: the target's entry as written, without its ``api_key`` and ``headers``
    target: Mapping[str, object]
    env: Mapping[str, str]
    repeat: int
    task_id: str
    run_id: str
    #: an engine conversation's 1-based turn
    turn: NotRequired[int]


def template_context(cell: Cell, run: RunContext, entry: TargetSpec, written: Mapping[str, object]) -> TemplateContext:
    """The template context of ``cell`` for the target whose record is ``entry`` and whose entry as written is ``written``.

    Its ``case["system"]`` is the case's system prompt rendered (:func:`render_case_system`): every target kind
    sees the same text. Raises :class:`evalx.errors.TemplateRenderError` when that render fails.
    """
    context: TemplateContext = {
        "case": cell.case.to_dict(),
        "vars": {**run.vars, **(entry.vars or {}), **cell.case.vars},
        "target": {k: v for k, v in written.items() if k not in HIDDEN_TARGET_KEYS},
        "env": _environ_snapshot(run),
        "repeat": cell.repeat,
        "task_id": task_id(run.run_id, cell),
        "run_id": run.run_id,
    }
    render_case_system(context)
    return context


def render_case_system(context: TemplateContext) -> None:
    """Render ``context["case"]["system"]`` in place: **the one rendering of a case's system prompt**, for every target kind.

    A case's system (its own ``system:``, a dataset's ``defaults: {system | system_file}``, a leading system
    message) is a template like a target's ``system:``: ``{{ vars.x }}`` and ``{% include %}`` render with the
    cell's context, so a provider's request, an engine's body (``case.system``) and a Python callable
    (``system=`` and ``case["system"]``) all get the same text.
    """
    case = context["case"]
    system = case.get("system")
    if isinstance(system, str) and "{" in system:
        case["system"] = render(system, context, field="system")


def system_prompt(context: TemplateContext, own: str | None) -> str | None:
    """The system prompt a cell is sent: the case's own (rendered by :func:`template_context`), else the target's ``system:`` rendered."""
    system = context["case"].get("system")
    if isinstance(system, str) and system:
        return system
    if own:
        return render(own, context, field="system")
    return None


def _environ_snapshot(run: RunContext) -> dict[str, str]:
    """``os.environ`` copied once per run, not once per cell (a per-cell hot spot).

    Sharing it between cells is safe: templates render in an immutable sandbox.
    """
    snapshot: dict[str, str] | None = run.__dict__.get("_environ")
    if snapshot is None:
        import os

        snapshot = run.__dict__["_environ"] = dict(os.environ)
    return snapshot
