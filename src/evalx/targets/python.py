"""Python-callable targets: ``module:function`` or ``path/file.py:function``.

Called as ``fn(input)``, plus ``case=`` (the case as a plain mapping) when the
function declares a parameter named ``case``, and ``system=`` (the case's system
prompt, rendered as for every target kind: :func:`evalx.targets.base.render_case_system`;
None without one) when it declares ``system``; ``case["system"]`` is that rendered text too. In a conversation (``turns:``)
each turn calls ``fn(messages=history)`` when the function declares a
``messages`` parameter (the history ``[{role, content}]`` so far, ending with
the turn's user message), else ``fn(the turn's input)``. Sync functions run in a
bounded thread pool (:class:`._threads.SyncRunner`: quick calls stay on one
thread), async ones are awaited on the loop. What a call prints through
``sys.stdout``/``sys.stderr`` is kept with its cell (:mod:`evalx.targets.printed`):
``output.printed``, or the traceback's last note for a call that raised.
A sync call that outlives its cell's timeout keeps its thread; the runner
lets another thread take the later cells (:meth:`SyncRunner.abandon`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any, TypedDict

from evalx.common import trace_context
from evalx.common.attachments import is_parts, python_parts
from evalx.common.json_types import JSON, JSONObject, Message
from evalx.common.templates import TemplateRenderError
from evalx.common.usercode import code_digest, resolve_callable
from evalx.errors import TargetError, TargetProtocolError
from evalx.models import Cell, Trajectory
from evalx.targets import printed
from evalx.targets.base import RunContext, template_context
from evalx.targets.settings import TargetSettings
from evalx.targets.spec import PythonTargetSpec, TargetSpec, record_of, written_entry
from evalx.targets.threads import Raised, SyncRunner


class PythonTarget:
    type = "python"

    def __init__(self, spec: TargetSpec | Mapping[str, object], settings: TargetSettings) -> None:
        self.entry = record_of(PythonTargetSpec, spec)
        self.id = self.entry.id
        self.spec = written_entry(spec)  # as written: the cache key is made from it
        self.settings = settings
        self._fn: Any = None
        self._is_async = False
        self._wants_case = False
        self._wants_messages = False
        self._wants_instructions = False
        self._wants_system = False
        self._pool: SyncRunner | None = None
        self._routed = False
        #: what the function runs (:func:`evalx.common.usercode.code_digest`), known once started
        self.code_identity: str | None = None

    async def start(self, run: RunContext) -> None:
        printed.install()  # before the import: a module's top-level print goes to stderr, not evalx's stdout
        self._routed = True
        self._fn = resolve_callable(self.entry.callable, run.config_dir)
        self.code_identity = code_digest(self._fn)  # in its cache key: changed code never replays an old answer
        target = inspect.unwrap(self._fn)
        self._is_async = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None))  # noqa: B004  (an instance with an async __call__)
        try:
            params = inspect.signature(self._fn).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self._wants_case = "case" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        self._wants_messages = "messages" in params
        self._wants_instructions = "instructions" in params
        self._wants_system = "system" in params
        if not self._is_async:
            # as many threads as the executor has workers for this target: a started call never queues
            self._pool = SyncRunner(self.settings.concurrency, name=f"evalx-{self.id}")

    async def converse(
        self, cell: Cell, run: RunContext, history: list[Message], turn: int, *, instructions: str | None = None
    ) -> Trajectory:
        """One turn of a conversation: ``fn(messages=history)`` when the function declares ``messages``, else ``fn(turn's input)``.

        ``case=`` is passed as for :meth:`invoke`; the history is a copy, the function may change it.
        ``instructions`` (a simulated user's, :mod:`evalx.execution.simulate`) go as ``instructions=``
        when the function declares it, else as a leading ``system`` message (or the input when there is no history).
        """
        messages = [m.copy() for m in history]
        if self._wants_messages:
            more: _TurnArguments = {"messages": messages}
            if instructions is not None:
                if self._wants_instructions:
                    more["instructions"] = instructions
                else:
                    messages.insert(0, {"role": "system", "content": instructions})
            return await self.invoke(cell, run, _call=((), more))
        return await self.invoke(cell, run, _call=((history[-1]["content"] if history else instructions,), {}))

    async def invoke(self, cell: Cell, run: RunContext, _call: tuple[tuple[JSON, ...], _TurnArguments] | None = None) -> Trajectory:
        kwargs: dict[str, Any] = {}
        if self._wants_case or self._wants_system:
            case = self._case(cell, run)
            if self._wants_case:
                kwargs["case"] = case
            if self._wants_system:
                kwargs["system"] = case.get("system")
        out = printed.Printed()  # what the call prints, kept with this cell
        fn, arg = self._fn, cell.case.input
        if is_parts(arg):  # images and documents: each part with its bytes (``data``), in the input and in case["input"]
            arg = python_parts(arg)
            if "case" in kwargs:
                kwargs["case"]["input"] = arg
        if _call is not None:  # a turn of a conversation (converse): its own arguments
            fn = _with_arguments(fn, *_call)
        cell_span = trace_context.CURRENT.get()  # a traced cell: its span is the OpenTelemetry context of the call
        if self._is_async:
            token = printed.SINK.set(out)  # tasks the callable starts inherit it
            undo = trace_context.activated(cell_span)
            try:
                value = await fn(arg, **kwargs)
            except asyncio.CancelledError as exc:  # the cell timed out (or the run stops): keep what it printed so far
                _printed_so_far(exc, out)
                raise
            except BaseException as exc:
                _printed_note(exc, out)
                raise
            finally:
                if undo is not None:
                    undo()
                printed.SINK.reset(token)
        else:
            assert self._pool is not None, "start() first"

            def call_in_thread() -> Any:
                token = printed.SINK.set(out)  # in the worker thread's own context
                undo = trace_context.activated(cell_span)
                try:
                    return fn(arg, **kwargs)
                finally:
                    if undo is not None:
                        undo()
                    printed.SINK.reset(token)

            call = self._pool.run(call_in_thread)
            try:
                value = await call
            except Raised as exc:
                _printed_note(exc.exc, out)
                raise exc.exc from None  # raised here, in the cell's own frame: the cell's error, like any other
            except asyncio.CancelledError as exc:  # the cell timed out (or the run stops): the thread may be stuck in the call
                note = self._pool.abandon(call)
                if note and hasattr(exc, "add_note"):
                    exc.add_note(note)  # the executor puts it in the cell's "timed out" error
                _printed_so_far(exc, out)
                raise
            except BaseException as exc:
                _printed_note(exc, out)
                raise
        traj = to_trajectory(value, self.entry.callable)
        if out.parts:
            traj.printed = out.text()
        return traj

    def _case(self, cell: Cell, run: RunContext) -> JSONObject:
        """The case as the callable gets it: a plain mapping whose ``system`` is rendered as for every target kind."""
        system = cell.case.system
        if not (isinstance(system, str) and "{" in system):
            return cell.case.to_dict()
        try:
            return template_context(cell, run, self.entry, self.spec)["case"]
        except TemplateRenderError as exc:
            raise TargetError(f"target {self.id!r}: {exc}") from None

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._routed:
            self._routed = False
            printed.uninstall()


class _TurnArguments(TypedDict, total=False):
    """The keyword arguments of a conversation's turn (:meth:`PythonTarget.converse`)."""

    messages: list[Message]
    instructions: str


def _with_arguments(fn: Any, args: tuple[JSON, ...], more: _TurnArguments) -> Any:
    """``fn`` called as ``fn(*args, **more, **kwargs)`` when :meth:`PythonTarget.invoke` calls it with ``(input, **kwargs)``."""

    def call(_input: Any, **kwargs: Any) -> Any:
        return fn(*args, **more, **kwargs)

    return call


def _printed_so_far(exc: BaseException, out: printed.Printed) -> None:
    """What a call that timed out had printed, on its cancel: the executor keeps it as the cell's ``output.printed``."""
    if out.parts:
        exc.evalx_printed = out.text()  # type: ignore[attr-defined]


def _printed_note(exc: BaseException, out: printed.Printed) -> None:
    """Keep what a failed call printed with its error: a note on the exception, so it ends up in the cell's traceback."""
    text = out.text()
    if text and hasattr(exc, "add_note"):
        try:
            exc.add_note("printed before the error:\n" + text)
        except Exception:  # an exception object that refuses notes: the printed text is lost, the error is not
            pass


def to_trajectory(value: Any, where: str) -> Trajectory:
    if isinstance(value, Trajectory):
        return value
    if isinstance(value, str):
        return Trajectory(text=value)
    if isinstance(value, Mapping):
        data = dict(value)
        unknown = set(data) - set(Trajectory.__dataclass_fields__)
        extra = {k: data.pop(k) for k in unknown}
        try:
            traj = Trajectory.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise TargetProtocolError(f"{where} returned a malformed trajectory: {exc}") from None
        if extra:
            traj.raw = extra
        return traj
    raise TargetProtocolError(f"{where} returned {type(value).__name__}; expected a string or a mapping of trajectory fields")
