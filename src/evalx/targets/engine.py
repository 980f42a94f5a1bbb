"""Engine targets: ``POST {url}/execute``, the agent's run streamed back as Server-Sent Events.

Request: header ``X-Engine-Key`` (from ``api_key``; omitted when empty) plus
``headers:``; a JSON body from the ``body:`` template, else the case input
(a mapping) or ``{"message": input}``, plus ``system`` (the case's system
prompt, rendered: :func:`evalx.targets.base.render_case_system`) when the
case has one (a ``body:`` template reads it as ``case.system``), always with a fresh ``task_id``
(``eval-{run_id}-{case_id}[-r{n}]``) so an agent's memory never bleeds
between cells.

Stream (the event type is the SSE ``event:`` field, or the data's ``type``
when the field is absent; data is JSON):

- ``text_delta {text}`` appends to the answer (the first one sets ``ttft_ms``);
- ``tool_call {tool | name, args?, id?}`` appends a call;
- ``tool_result {tool | name, result, id?}`` fills the matching call's result;
- ``usage {input_tokens, output_tokens, cache_hit_tokens, cost_usd?}`` adds up
  (a count or cost that is negative, not finite or not a number is a
  protocol error of the cell, naming the field: it would switch off the cost
  guard and ``max_tokens``);
- ``iteration`` / ``turn`` (and ``*_start``) events count agent turns;
- ``error {code, message}`` ends the cell as an error (the message may also
  be ``error: "..."`` or ``error: {message}``);
- the terminating event (``end_event``; by default any of ``done``, ``end``,
  ``complete``) ends the run — unless it carries an ``error`` or a
  ``status`` of ``error``/``failed``, which makes the cell an error; with
  ``end_event`` set, a stream that closes without it is an error, without it
  closing the stream ends the run too, as long as it answered (a text or a
  tool call: a stream that closes having answered nothing is an error).

``stop_reason`` (or ``finish_reason``) on the terminating or a ``usage``
event is kept as the cell's stop reason (``length`` / ``max_tokens``: the
answer was cut off).

Every event is kept in ``events`` (at most ``max_events`` and about 1 MB of
data; past that ``events_truncated`` is set).

Retries (``retries``, backoff from :mod:`evalx.targets.transport.http`): connection failures,
429, 5xx and a stream that closes before sending anything are retried. A
stream that already produced events is never replayed — the engine did work
(maybe tool calls with side effects) under that task id — with one
exception: an ``LLM_RATE_LIMITED`` error event that arrives before any text
is retried like a 429 (honouring its ``retry_after``), because the model had
not answered yet. The retry reuses the cell's task id.

Conversations (a case with ``turns:``, :meth:`EngineTarget.converse`): the
engine keeps the conversation on its side. Every turn is one ``POST
/execute`` with the same ``task_id`` for all turns of the cell (the
conversation id, :func:`conversation_id`: the cell's task id plus its cell
index, so two targets, datasets or repeats never share one) and a 1-based
``turn``; the body is built exactly as a single-turn body with the turn's
user message as the input (a mapping as it is, else ``{"message": text}``).
The history is not resent. Each turn's stream is read as a single-turn
answer (timeouts, idle timeout, ``max_events``, errors, retries, TTFT).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping

from evalx.common.attachments import engine_parts, is_parts, parts_text
from evalx.common.json_types import JSON, JSONObject, Message
from evalx.common.templates import TemplateRenderError, render_value
from evalx.errors import EngineRateLimited, TargetError, TargetProtocolError
from evalx.models import Cell, ToolCall, Trajectory, Usage, token_count, usd_amount
from evalx.results.figures import finite
from evalx.targets.base import RunContext, TemplateContext, task_id, template_context
from evalx.targets.definitions import Price
from evalx.targets.settings import TargetSettings
from evalx.targets.spec import EngineTargetSpec, TargetSpec, record_of, written_entry
from evalx.targets.transport.http import Backoff, HttpClient, shown_url
from evalx.targets.transport.sse import ServerSentEvent, SSEDecoder

DEFAULT_END_EVENTS = ("done", "end", "complete")
ITERATION_EVENTS = frozenset({"iteration", "turn", "iteration_start", "turn_start"})
DEFAULT_MAX_EVENTS = 1000
#: characters of event data kept per cell, on top of the event count cap
MAX_EVENT_CHARS = 1_000_000
#: error codes retried like an HTTP 429 (when no text has been streamed yet)
RATE_LIMIT_CODES = frozenset({"LLM_RATE_LIMITED", "RATE_LIMITED", "RATE_LIMIT_EXCEEDED", "TOO_MANY_REQUESTS"})
KEY_HEADER = "X-Engine-Key"


class EngineTarget:
    type = "engine"

    def __init__(self, spec: TargetSpec | Mapping[str, object], settings: TargetSettings) -> None:
        entry = record_of(EngineTargetSpec, spec)
        self.entry = entry
        self.id = entry.id
        self.spec = written_entry(spec)  # as written: the cache key and the templates' ``target`` are made from it
        self.settings = settings
        self.end_event: str | None = entry.end_event or None
        self.max_events = DEFAULT_MAX_EVENTS if entry.max_events is None else entry.max_events
        self.url = entry.url.rstrip("/") + "/execute"
        self.shown = shown_url(self.url)
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store", **(entry.headers or {})}
        if entry.api_key:
            headers[KEY_HEADER] = entry.api_key
        self.headers = headers
        self._client: HttpClient | None = None
        # per-token prices for engines that report usage but no cost_usd of their own
        pricing = entry.pricing
        self.price = None if pricing is None else Price.of(pricing)

    async def start(self, run: RunContext) -> None:
        s = self.settings
        run.redactor.add_url(self.url)  # user:password@ and ?key= never stored nor printed
        for name, value in (self.entry.headers or {}).items():  # secrets unless harmless (DESIGN "Secrets in headers")
            run.redactor.add_header(name, value)
        if self.entry.api_key:
            run.redactor.add(self.entry.api_key)
        self._client = HttpClient(
            concurrency=s.concurrency, retries=s.retries, backoff=Backoff(base_s=s.backoff_s), max_response_bytes=s.max_response_bytes
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def cache_key(self, cell: Cell, run: RunContext) -> str | None:
        """What decides the answer: target type, redacted spec, case, repeat, the body as sent and a digest of the headers.

        The redacted spec masks every non-harmless header's value, so without the digest a changed
        header (``X-Agent-Version: 2``) would be answered from the cache; the digest is of every
        header sent, the key among them, and is only ever part of the key's own hash (the cache
        stores no header). The body is the rendered one (config ``vars:`` and environment
        values change it), without its per-run ``task_id``.
        """
        from evalx.targets.transport.cache import make_key

        case = cell.case.to_dict()
        case.pop("source", None)
        try:
            body = self.body(cell, run)
        except TargetError:
            return None  # invoke() reports it
        if body.get("task_id") == task_id(run.run_id, cell):
            body = {k: v for k, v in body.items() if k != "task_id"}
        headers = hashlib.sha256(json.dumps(self.headers, sort_keys=True, default=str).encode("utf-8")).hexdigest()
        return make_key(self.type, run.redactor.obj(self.spec), case, cell.repeat, self.url, body, headers)

    def body(self, cell: Cell, run: RunContext) -> JSONObject:
        """The JSON body for one cell: the template, or the case input, plus ``task_id``."""
        tid = task_id(run.run_id, cell)
        body: JSONObject
        if self.entry.body is not None:
            body = self._render(self._context(cell, run))
        elif is_parts(cell.case.input):  # images and documents: the text as the message, every part (bytes in base64) as parts
            try:
                body = {"message": parts_text(cell.case.input), "parts": engine_parts(cell.case.input)}
            except LookupError as exc:
                raise TargetError(f"target {self.id!r}: {exc}") from None
            if cell.case.system:  # the case's system prompt, rendered as for every target kind
                body.setdefault("system", self._context(cell, run)["case"]["system"])
        else:
            if isinstance(cell.case.input, dict):
                body = dict(cell.case.input)
            else:
                body = {"message": "" if cell.case.input is None else str(cell.case.input)}
            if cell.case.system:  # the case's system prompt, rendered as for every target kind
                body.setdefault("system", self._context(cell, run)["case"]["system"])
        body.setdefault("task_id", tid)
        return body

    def _context(self, cell: Cell, run: RunContext) -> TemplateContext:
        try:
            return template_context(cell, run, self.entry, self.spec)
        except TemplateRenderError as exc:
            raise TargetError(str(exc)) from None

    def turn_body(self, cell: Cell, run: RunContext, message: JSON, turn: int) -> JSONObject:
        """The JSON body of one turn of a conversation: a single-turn body for ``message``, plus the conversation's ``task_id`` and ``turn``.

        A ``body:`` template sees the turn's message as ``case.input``, the
        conversation id as ``task_id`` and the turn number as ``turn``.
        """
        tid = conversation_id(run.run_id, cell)
        body: JSONObject
        if self.entry.body is not None:
            context = self._context(cell, run)
            context["case"]["input"] = message
            context["task_id"] = tid
            context["turn"] = turn
            body = self._render(context)
        elif isinstance(message, dict):
            body = dict(message)
        else:
            body = {"message": "" if message is None else str(message)}
        body.setdefault("task_id", tid)
        body["turn"] = turn
        return body

    def _render(self, context: TemplateContext) -> JSONObject:
        try:
            body = render_value(self.entry.body, context)
        except TemplateRenderError as exc:
            raise TargetError(f"body: {exc}") from None
        if not isinstance(body, dict):
            raise TargetError(f"body: the template must render to a mapping, not {type(body).__name__}")
        return body

    async def invoke(self, cell: Cell, run: RunContext) -> Trajectory:
        return await self._post(cell, run, None, 0)

    async def converse(self, cell: Cell, run: RunContext, history: list[Message], turn: int) -> Trajectory:
        """One turn of a conversation: POST the last user message of ``history`` under the conversation's ``task_id``.

        The engine keeps the conversation's state, so only the new message is
        sent (with ``turn``, 1-based); the stream is read as a single-turn answer.
        """
        if not history:
            raise TargetError(f"turn {turn}: no user message to send")
        return await self._post(cell, run, history[-1].get("content"), turn)

    async def _post(self, cell: Cell, run: RunContext, message: JSON, turn: int) -> Trajectory:
        """POST one request (a cell's, or turn ``turn`` of its conversation when ``turn`` > 0) and read its stream."""
        if self._client is None:
            raise RuntimeError("EngineTarget.invoke() before start()")
        client = self._client
        t0 = time.perf_counter()
        retried: list[str] = []
        try:
            body = self.turn_body(cell, run, message, turn) if turn else self.body(cell, run)

            async def attempt() -> Trajectory:
                try:
                    return await self._attempt(client, body, t0)
                except TargetError as exc:
                    if exc.retryable:
                        retried.append(str(exc))
                    raise

            traj = await client.retrying(attempt)  # retries stop before the cell's deadline
        except TargetError as exc:
            # the executor reports this line as is (and once per target when every cell
            # failed): no secret may ride along, whatever the server echoed back
            exc.args = (run.redactor.text(str(exc)),)
            raise
        traj.request = {"url": self.url, "body": body}
        if self.price is not None and traj.cost_usd is None:  # the engine's own cost_usd wins over pricing:
            usage = traj.usage
            if usage.input_tokens or usage.output_tokens:
                traj.cost_usd = self.price.cost(usage.input_tokens, usage.output_tokens, usage.cache_hit_tokens)
            else:
                traj.cost_note = "no usage in response"
        if retried:
            traj.raw = {**(traj.raw or {}), "attempts": len(retried) + 1, "retried_after": retried}
        return traj

    async def _attempt(self, client: HttpClient, body: JSONObject, t0: float) -> Trajectory:
        run = _Collector(t0, self.max_events)
        async with client.stream("POST", self.url, json=body, headers=self.headers, idle_timeout_s=self.settings.idle_timeout_s) as resp:
            await resp.raise_for_status(key_hint=f"api_key, sent as {KEY_HEADER}")
            ctype = resp.content_type
            if ctype and ctype != "text/event-stream" and ctype != "text/plain":
                raise TargetProtocolError(f"{self.shown} answered Content-Type {ctype}, not text/event-stream")
            decoder = SSEDecoder()
            try:
                async for line in resp.lines():
                    event = decoder.decode(line)
                    if event is not None and self._handle(event, run):
                        return run.trajectory()
            except TargetError as exc:
                # never replay a stream that already did work, except a rate limit before any text
                if run.n_events and not isinstance(exc, EngineRateLimited):
                    exc.retryable = False
                raise
            n = run.n_events
            after = f"after {n} event{'s' if n != 1 else ''}"
            if decoder.pending:
                raise TargetProtocolError(f"stream from {self.shown} closed in the middle of an event ({after})", retryable=n == 0)
            if self.end_event:
                raise TargetProtocolError(
                    f"stream from {self.shown} closed before its '{self.end_event}' event ({after})", retryable=n == 0
                )
            if n == 0:
                raise TargetProtocolError(f"stream from {self.shown} closed without sending any event", retryable=True)
            if not run.saw_text and not run.tool_calls:
                raise TargetProtocolError(
                    f"stream from {self.shown} closed without an answer: no text, no tool call and no end event ({after})"
                )
            return run.trajectory()

    def _is_end(self, kind: str) -> bool:
        return kind == self.end_event if self.end_event else kind in DEFAULT_END_EVENTS

    def _handle(self, event: ServerSentEvent, run: _Collector) -> bool:
        """Apply one event; True when it ends the run."""
        run.n_events += 1
        kind = event.event
        try:
            payload: JSON = json.loads(event.data) if event.data.strip() else {}
        except ValueError as exc:
            if kind == "message" and event.data.strip() == "[DONE]":  # OpenAI-style end marker
                run.store("done", event.data, event)
                return True
            if self._is_end(kind):  # an end marker needs no payload
                run.store(kind, event.data, event)
                return True
            if kind == "error":  # an error in plain text: its words are the message
                run.store(kind, event.data, event)
                raise TargetError(f"engine error: {_error_message({'message': event.data}) or 'no message'}") from None
            where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise TargetProtocolError(
                f"malformed JSON in the data of '{kind}' event #{run.n_events} from {self.shown}: {reason} ({where})"
            ) from None
        if kind == "message" and isinstance(payload, dict):
            typed = payload.get("type")
            if isinstance(typed, str):
                kind = typed
        run.store(kind, payload, event)
        data: JSONObject = payload if isinstance(payload, dict) else {"value": payload}

        if kind == "text_delta":
            text = payload if isinstance(payload, str) else data.get("text", data.get("delta", ""))
            run.add_text("" if text is None else str(text))
        elif kind == "tool_call":
            name = data.get("tool", data.get("name"))
            if not isinstance(name, str) or not name:
                raise TargetProtocolError(f"'tool_call' event #{run.n_events} from {self.shown} names no tool")
            args = data.get("args", data.get("arguments", data.get("input")))
            run.tool_calls.append(ToolCall(name=name, args=args))
            call_id = data.get("id", data.get("call_id"))
            if isinstance(call_id, (str, int)):
                run.call_ids[str(call_id)] = len(run.tool_calls) - 1
        elif kind == "tool_result":
            run.attach_result(data)
        elif kind == "usage":
            nested = data.get("usage")
            run.add_usage(nested if isinstance(nested, dict) else data, kind, self.shown)
        elif kind in ITERATION_EVENTS:
            run.iteration(data)
        elif kind == "error":
            code = str(data.get("code") or "ERROR")
            line = f"engine error {code}: {_error_message(data) or 'no message'}"
            if code.upper() in RATE_LIMIT_CODES or "RATE_LIMIT" in code.upper():
                retry_after = data.get("retry_after", data.get("retry_after_s"))
                wait = finite(retry_after)  # NaN or a negative wait would upset the backoff: ignored
                if wait is not None and wait < 0:
                    wait = None
                raise EngineRateLimited(line, retryable=not run.saw_text, retry_after=wait)
            raise TargetError(line)
        elif self._is_end(kind):
            failed = _failure(data)
            if failed is not None:
                raise TargetError(f"engine ended the run with an error ('{kind}' event): {failed}")
            run.finish(data, self.shown)
            return True
        return False


#: how long an engine's error message may be in the cell's error line
_MAX_MESSAGE = 500


def conversation_id(run_id: str, cell: Cell) -> str:
    """The ``task_id`` every turn of a cell's conversation is sent under: the cell's task id and its index.

    Stable within the cell (so the engine keeps one conversation), distinct
    across cells: two targets, datasets or repeats of a case never share one.
    """
    return f"{task_id(run_id, cell)}-c{cell.index}"


def _error_message(data: JSONObject) -> str:
    """The message of an error event or an error an end event carries: ``message``, ``error`` (text or ``{message}``), ``detail``, ``value``."""
    for key in ("message", "error", "detail", "value"):
        value = data.get(key)
        if isinstance(value, dict):
            value = value.get("message") or value.get("error") or json.dumps(value, ensure_ascii=False, default=str)
        if value is not None and value is not False and value != "":
            text = " ".join(str(value).split())
            return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"
    return ""


def _failure(data: JSONObject) -> str | None:
    """Why an end event says the run failed (an ``error``, a ``status`` of error/failed), else None."""
    error = data.get("error")
    status = data.get("status")
    if error not in (None, False, "", {}, []):
        return _error_message({"error": error}) or "an error"
    if isinstance(status, str) and status.lower() in ("error", "failed", "failure"):
        return _error_message(data) or f"status {status!r}"
    return None


class _Collector:
    """One attempt's trajectory, built event by event."""

    def __init__(self, t0: float, max_events: int) -> None:
        self.t0 = t0
        self.max_events = max_events
        self.text: list[str] = []
        self.saw_text = False
        self.ttft_ms: float | None = None
        self.tool_calls: list[ToolCall] = []
        self.call_ids: dict[str, int] = {}
        self.usage = Usage()
        self.saw_usage = False
        self.cost_usd: float | None = None
        self.stop_reason: str | None = None
        self.turns = 0
        self.turn_max: int | None = None
        self.iterations: int | None = None
        self.events: list[JSONObject] = []
        self.event_chars = 0
        self.truncated = False
        self.n_events = 0

    def _ms(self) -> float:
        return round((time.perf_counter() - self.t0) * 1000.0, 3)

    def store(self, kind: str, payload: JSON, event: ServerSentEvent) -> None:
        size = len(event.data)
        if len(self.events) >= self.max_events or self.event_chars + size > MAX_EVENT_CHARS:
            self.truncated = True
            return
        self.event_chars += size
        stored: JSONObject = {"type": kind, "data": payload, "t_ms": self._ms()}
        if event.id:
            stored["id"] = event.id
        self.events.append(stored)

    def add_text(self, text: str) -> None:
        if text and not self.saw_text:
            self.saw_text = True
            self.ttft_ms = self._ms()
        self.text.append(text)

    def attach_result(self, data: JSONObject) -> None:
        result = data.get("result", data.get("output", data.get("content")))
        call_id = data.get("id", data.get("call_id"))
        index = self.call_ids.get(str(call_id)) if isinstance(call_id, (str, int)) else None
        if index is None:
            name = data.get("tool", data.get("name"))
            candidates = [i for i, c in enumerate(self.tool_calls) if name is None or c.name == name]
            open_calls = [i for i in candidates if self.tool_calls[i].result is None]
            index = (open_calls or candidates)[-1] if (open_calls or candidates) else None
        if index is not None:
            self.tool_calls[index].result = result

    def add_usage(self, data: JSONObject, kind: str, where: str) -> None:
        """Add a usage event's counts and cost; a figure that is negative, not finite or not a number is a protocol error."""
        usage, get = self.usage, data.get
        n = get("input_tokens")
        if n is None:
            n = get("prompt_tokens")
        if n is not None:
            usage.input_tokens += n if type(n) is int and n >= 0 else _count(data, "input_tokens", kind, where)
        n = get("output_tokens")
        if n is None:
            n = get("completion_tokens")
        if n is not None:
            usage.output_tokens += n if type(n) is int and n >= 0 else _count(data, "output_tokens", kind, where)
        n = get("cache_hit_tokens")
        if n is None:
            n = get("cache_read_input_tokens")
            if n is None:
                n = get("cached_tokens")
        if n is not None:
            usage.cache_hit_tokens += n if type(n) is int and n >= 0 else _count(data, "cache_hit_tokens", kind, where)
        self.saw_usage = True
        cost = data.get("cost_usd")
        if cost is not None:
            try:
                self.cost_usd = (self.cost_usd or 0.0) + usd_amount(cost)
            except ValueError as exc:
                raise TargetProtocolError(f"'{kind}' event from {where}: cost_usd: {exc}") from None
        stop = data.get("stop_reason") or data.get("finish_reason")
        if stop and isinstance(stop, str):
            self.stop_reason = stop

    def iteration(self, data: JSONObject) -> None:
        self.turns += 1
        for key in ("iteration", "turn", "n"):
            value = data.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.turn_max = max(self.turn_max or 0, value)

    def finish(self, data: JSONObject, where: str) -> None:
        """The terminating event may carry totals the stream did not send on its own."""
        usage = data.get("usage")
        if not self.saw_usage and isinstance(usage, dict):
            self.add_usage(usage, "done", where)
        if not self.saw_text:
            final = data.get("text", data.get("output"))
            if isinstance(final, str) and final:
                self.add_text(final)
        iterations = data.get("iterations")
        if isinstance(iterations, int) and not isinstance(iterations, bool):
            self.iterations = iterations
        stop = data.get("stop_reason") or data.get("finish_reason")
        if stop and isinstance(stop, str):
            self.stop_reason = stop

    def trajectory(self) -> Trajectory:
        iterations = self.iterations
        if iterations is None and (self.turns or self.turn_max):
            iterations = max(self.turns, self.turn_max or 0)
        return Trajectory(
            text="".join(self.text),
            tool_calls=self.tool_calls,
            usage=self.usage,
            iterations=iterations,
            events=self.events,
            events_truncated=self.truncated,
            ttft_ms=self.ttft_ms,
            cost_usd=self.cost_usd,
            stop_reason=self.stop_reason,
        )


#: a usage event's counts: the trajectory's field, and the names engines send it under (first found wins)
_USAGE_KEYS = {
    "input_tokens": ("input_tokens", "prompt_tokens"),
    "output_tokens": ("output_tokens", "completion_tokens"),
    "cache_hit_tokens": ("cache_hit_tokens", "cache_read_input_tokens", "cached_tokens"),
}


def _count(data: JSONObject, field: str, kind: str, where: str) -> int:
    """A usage count that is not a plain int of 0 or more: as an int, or a protocol error naming the key it came under."""
    key = next(k for k in _USAGE_KEYS[field] if data.get(k) is not None)
    try:
        return token_count(data[key])
    except ValueError as exc:
        raise TargetProtocolError(f"'{kind}' event from {where}: {key}: {exc}") from None
