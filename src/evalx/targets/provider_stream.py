"""A provider's streamed answer put together: events read as the definition's ``stream:`` section says.

A definition (``providers/NAME.yaml``) declares, still without Python, how its API
streams (see :data:`evalx.targets.definitions.PROVIDER_SCHEMA`, ``stream:``)::

    stream:
      params: {stream: true, stream_options: {include_usage: true}}   # added to the request
      end: {data: "[DONE]"}              # or {event: message_stop}
      events:                            # by event type: SSE `event:`, else the data's `type`, else `message`
        message:
          text: event.choices[0].delta.content
          tool_calls: {items: event.choices[0].delta.tool_calls, index: item.index, id: item.id,
                       name: item.function.name, args: item.function.arguments}
          usage: {input_tokens: event.usage.prompt_tokens, output_tokens: event.usage.completion_tokens}
          stop_reason: event.choices[0].finish_reason

:class:`StreamAssembler` takes the events one by one: text pieces are joined (the
first non-empty one, or the first tool-call piece, sets ``ttft_ms``), tool-call
pieces are grouped by index into whole calls whose argument fragments are joined
and parsed as JSON at the end (a malformed one is a protocol error naming the
tool), the last usage count and stop reason sent win (servers send running
totals). An ``error`` event, or an event whose data carries an error (as a
whole-body answer would: ``{"error": ...}``, ``type: error``), is the cell's
error with the server's message. Events of a type the section does not list
(``ping``) are skipped. Only targets that stream use this module: a
non-streamed answer never pays for it.

``stream.framing`` says how the events come on the wire: ``sse`` (the default,
Server-Sent Events, :class:`SSEFraming`) or ``aws-eventstream`` (AWS's binary
event-stream messages, :class:`AwsEventStreamFraming`: what Bedrock's
ConverseStream answers in). An event-stream message of type ``event`` is an
event of its ``:event-type`` with its JSON payload as data; one of type
``exception`` (``:exception-type``) or ``error`` (``:error-code``) is the cell's
error, classified by the definition's ``errors:`` body patterns over
``TYPE: PAYLOAD`` (so ``throttlingException`` can be marked rate-limited).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalx.common.json_types import JSON, JSONObject
from evalx.errors import DefinitionError, StreamErrorEvent, TargetProtocolError
from evalx.models import ToolCall, token_count
from evalx.targets.definitions import ExpressionScope, ProviderDefinition, Reader, StreamSpec
from evalx.targets.transport.eventstream import EventStreamDecoder, EventStreamMessage
from evalx.targets.transport.http import StreamResponse
from evalx.targets.transport.sse import ServerSentEvent, SSEDecoder

__all__ = ["AwsEventStreamFraming", "SSEFraming", "StreamAssembler", "StreamErrorEvent", "carries_error", "framing_for"]

#: characters of a server's error message (or of malformed arguments) quoted in a cell's error
_QUOTE = 200


def carries_error(body: JSONObject) -> bool:
    """Whether a 2xx JSON body (or a stream event's data) is an error: an ``error`` that is set, ``type: error``, ``object: error``."""
    error = body.get("error")
    return (
        (error is not None and error is not False and error != "" and error != {})
        or body.get("type") == "error"
        or body.get("object") == "error"
    )


@dataclass(slots=True)
class _Handler:
    """The readers of one event type's entry (None: the entry does not read that)."""

    text: Reader | None
    items: Reader | None
    index: Reader | None
    call_id: Reader | None
    name: Reader | None
    args: Reader | None
    input_tokens: Reader | None
    output_tokens: Reader | None
    cached_tokens: Reader | None
    stop_reason: Reader | None
    error: Reader | None
    has_calls: bool


@dataclass(slots=True)
class _Call:
    """One tool call being put together from its pieces."""

    index: object
    id: object = None
    name: str = ""
    parts: list[str] = field(default_factory=list)
    whole: object = None  # arguments sent as an object rather than JSON text


class StreamAssembler:
    """One attempt's streamed answer, event by event; :meth:`feed` says when the stream ended."""

    def __init__(self, definition: ProviderDefinition, t0: float, shown: str, safe: Callable[[str], str] | None = None) -> None:
        spec = definition.stream
        assert spec is not None, "a definition with a stream: section"
        self.definition = definition
        self.spec: StreamSpec = spec
        self.t0 = t0
        self.shown = shown
        self._safe: Callable[[str], str] = safe if safe is not None else (lambda text: text)
        self._handlers: dict[str, _Handler | None] = {}
        self._ends: Reader = definition.reader(("stream", "end", "when"))
        self.text: list[str] = []
        self.ttft_ms: float | None = None
        self.calls: dict[object, _Call] = {}
        self._last_call: object = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.stop_reason: object = None
        self.n_events = 0

    # -- events ----------------------------------------------------------------

    def feed(self, event: ServerSentEvent) -> bool:
        """Apply one event; True when it is the stream's end marker. Raises the cell's error for an error event."""
        self.n_events += 1
        spec = self.spec
        data = event.data
        kind = event.event
        if spec.end_data is not None and data.strip() == spec.end_data:
            return True
        payload: JSON = None
        if data.strip():
            try:
                payload = json.loads(data)
            except ValueError as exc:
                if kind == "error":  # an error in plain text: its words are the message
                    raise self._error(_one_line(data), data) from None
                if kind == spec.end_event:
                    return True
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise TargetProtocolError(
                    f"malformed JSON in the data of '{kind}' event #{self.n_events} from {self.shown}: {reason}"
                ) from None
        if kind == "message" and type(payload) is dict:
            typed = payload.get("type")
            if isinstance(typed, str) and (typed in spec.events or typed == spec.end_event or typed == "error"):
                kind = typed
        handler = self._handlers.get(kind, _MISSING)
        if handler is _MISSING:
            handler = self._handlers[kind] = self._make_handler(kind)
        if kind == "error" or (type(payload) is dict and carries_error(payload)):
            raise self._error(self._error_message(payload, handler), data)
        if handler is not None and type(payload) is dict:
            self._apply(handler, payload)
        if spec.end_when is not None and type(payload) is dict and self._ends({"event": payload}):
            return True
        return kind == spec.end_event

    def feed_message(self, message: EventStreamMessage) -> bool:
        """Apply one AWS event-stream message (:meth:`feed` for an event); an exception or error message raises the cell's error."""
        kind = message.message_type
        if kind == "event":
            return self.feed(ServerSentEvent(message.header(":event-type") or "message", message.payload.decode("utf-8", "replace")))
        self.n_events += 1
        if kind not in ("exception", "error"):
            return False  # a message type of a later protocol: skipped, as an unknown event is
        data = message.payload.decode("utf-8", "replace")
        if kind == "error":
            name, text = message.header(":error-code") or "error", message.header(":error-message") or data
        else:
            name = message.header(":exception-type") or "exception"
            try:
                payload: JSON = json.loads(data) if data.strip() else None
            except ValueError:
                payload = data
            handler = self._handlers.get(name, _MISSING)
            if handler is _MISSING:
                handler = self._handlers[name] = self._make_handler(name)
            text = self._error_message(payload, handler)
        raise self._error(f"{name}: {_one_line(text)}", f"{name}: {data}")

    def _apply(self, h: _Handler, payload: JSONObject) -> None:
        scope: ExpressionScope = {"event": payload}
        if h.text is not None:
            piece = h.text(scope)
            if piece is not None and piece != "":
                if not isinstance(piece, str):
                    piece = json.dumps(piece, ensure_ascii=False) if isinstance(piece, (dict, list)) else str(piece)
                if self.ttft_ms is None:
                    self.ttft_ms = self._ms()
                self.text.append(piece)
        if h.has_calls:
            self._tool_deltas(h, scope)
        if h.input_tokens is not None:
            n = self._count(h.input_tokens, scope, "input_tokens")
            if n is not None:
                self.input_tokens = n
        if h.output_tokens is not None:
            n = self._count(h.output_tokens, scope, "output_tokens")
            if n is not None:
                self.output_tokens = n
        if h.cached_tokens is not None:
            n = self._count(h.cached_tokens, scope, "cached_tokens")
            if n is not None:
                self.cached_tokens = n
        if h.stop_reason is not None:
            stop = h.stop_reason(scope)
            if stop is not None and stop != "":
                self.stop_reason = stop

    def _tool_deltas(self, h: _Handler, scope: ExpressionScope) -> None:
        if h.items is not None:
            items = h.items(scope)
            if items is None:
                return
            if not isinstance(items, list):
                raise DefinitionError(f"{self._where('tool_calls', 'items')}: expected a list, got {type(items).__name__}")
        else:
            items = [scope.get("event")]
        for item in items:
            item_scope: ExpressionScope = {**scope, "item": item}
            name = h.name(item_scope) if h.name is not None else None
            call_id = h.call_id(item_scope) if h.call_id is not None else None
            args = h.args(item_scope) if h.args is not None else None
            if not name and call_id is None and (args is None or args == ""):
                continue  # nothing of a call in it (a text block's start, an empty piece)
            index = h.index(item_scope) if h.index is not None else None
            if index is None:  # no index: a piece with a name starts a call, others add to the last one
                index = len(self.calls) if name or self._last_call is None else self._last_call
            elif not isinstance(index, (int, str)):
                index = json.dumps(index, sort_keys=True, default=str)
            call = self.calls.get(index)
            if call is None:
                call = self.calls[index] = _Call(index)
            self._last_call = index
            if name and not call.name:
                call.name = str(name)
            if call_id is not None and call.id is None:
                call.id = call_id
            if isinstance(args, str):
                call.parts.append(args)
            elif args is not None:
                call.whole = args
            if self.ttft_ms is None:
                self.ttft_ms = self._ms()

    # -- the answer --------------------------------------------------------------

    def tool_calls(self) -> tuple[list[ToolCall], list[object]]:
        """The whole calls and their ids; arguments that are not JSON are a protocol error naming the tool."""
        calls: list[ToolCall] = []
        ids: list[object] = []
        for n, call in enumerate(self.calls.values()):
            if not call.name:
                raise TargetProtocolError(f"tool call #{n + 1} (index {call.index}) streamed from {self.shown} has no name")
            text = "".join(call.parts)
            if text.strip():
                try:
                    args: object = json.loads(text)
                except ValueError as exc:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                    raise TargetProtocolError(
                        f"the arguments of tool call {call.name!r} streamed from {self.shown} are not valid JSON ({reason}): "
                        f"{self._safe(_one_line(text))}"
                    ) from None
            else:
                args = call.whole if call.whole is not None else {}
            calls.append(ToolCall(name=call.name, args=args))
            ids.append(call.id)
        return calls, ids

    @property
    def saw_usage(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None or self.cached_tokens is not None

    def closed_early(self, pending: bool, why: str = "") -> TargetProtocolError:
        """The error for a stream that closed before its end marker (retryable only when nothing came)."""
        n = self.n_events
        middle = " in the middle of an event" if pending else ""
        because = f" ({why})" if why else ""
        return TargetProtocolError(
            f"stream from {self.shown} closed{middle} before its end ({self.spec.end_shown}) after {n} event{'s' if n != 1 else ''}{because}",
            retryable=n == 0,
        )

    # -- helpers -----------------------------------------------------------------

    def _ms(self) -> float:
        return round((time.perf_counter() - self.t0) * 1000.0, 3)

    def _where(self, *path: str) -> str:
        return self.definition.where("stream", "events", *path)

    def _count(self, read: Reader, scope: ExpressionScope, key: str) -> int | None:
        value = read(scope)
        if value is None:
            return None
        if type(value) is int and value >= 0:
            return value
        try:
            return token_count(value)
        except ValueError as exc:
            raise DefinitionError(f"{self.definition.file} stream usage.{key}: {exc}") from None

    def _make_handler(self, kind: str) -> _Handler | None:
        entry = self.spec.events.get(kind)
        if entry is None:
            return None
        d = self.definition
        base = ("stream", "events", kind)

        def read(*path: str) -> Reader | None:
            node: object = entry
            for part in path:
                node = node.get(part) if isinstance(node, dict) else None
            return d.reader((*base, *path)) if isinstance(node, str) else None

        calls = entry.get("tool_calls")
        return _Handler(
            text=read("text"),
            items=read("tool_calls", "items"),
            index=read("tool_calls", "index"),
            call_id=read("tool_calls", "id"),
            name=read("tool_calls", "name"),
            args=read("tool_calls", "args"),
            input_tokens=read("usage", "input_tokens"),
            output_tokens=read("usage", "output_tokens"),
            cached_tokens=read("usage", "cached_tokens"),
            stop_reason=read("stop_reason"),
            error=read("error"),
            has_calls=isinstance(calls, dict) and bool(calls),
        )

    def _error_message(self, payload: JSON, handler: _Handler | None) -> str:
        """The server's message in an error event: the entry's ``error``, else the definition's ``errors.message``, else the data."""
        d = self.definition
        value: object = None
        try:
            if handler is not None and handler.error is not None:
                value = handler.error({"event": payload})
            if value is None and d.error_message:
                value = d.evaluate(("errors", "message"), {"response": payload, "status": 200})
        except DefinitionError:
            value = None
        if value is None or value == "":
            value = payload
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        return _one_line(text) or "no message"

    def _error(self, message: str, data: str) -> StreamErrorEvent:
        """An error event: the cell's error, retried only when the definition's error classes say so (by the
        event's data) and nothing was answered yet."""
        kind = self.definition.classify(200, data)
        answered = self.ttft_ms is not None
        return StreamErrorEvent(
            f"stream from {self.shown} sent an error after {self.n_events - 1} events: {self._safe(message)}",
            retryable=kind != "fatal" and not answered,
        )


_MISSING: Any = object()


class SSEFraming:
    """``stream.framing: sse``: Server-Sent Events, line by line."""

    accept: str | None = "text/event-stream"

    def __init__(self) -> None:
        self._decoder = SSEDecoder()

    async def read(self, resp: StreamResponse, assembler: StreamAssembler) -> bool:
        """Feed the stream's events to ``assembler``: True at the end marker, False when the stream closed first."""
        decoder = self._decoder
        async for line in resp.lines():
            event = decoder.decode(line)
            if event is not None and assembler.feed(event):
                return True
        return False

    @property
    def pending(self) -> bool:
        return self._decoder.pending


class AwsEventStreamFraming:
    """``stream.framing: aws-eventstream``: AWS event-stream messages, each at most ``max_response_bytes``."""

    #: no Accept of its own: AWS's SDKs send none for ConverseStream (the answer's type is the operation's)
    accept: str | None = None

    def __init__(self, shown: str) -> None:
        self._shown = shown
        self._decoder: EventStreamDecoder | None = None

    async def read(self, resp: StreamResponse, assembler: StreamAssembler) -> bool:
        """Feed the stream's messages to ``assembler``: True at the end marker, False when the stream closed first."""
        decoder = self._decoder = EventStreamDecoder(resp.max_bytes, self._shown)
        async for chunk in resp.chunks():  # the whole stream is bounded by max_response_bytes there
            for message in decoder.feed(chunk):
                if assembler.feed_message(message):
                    return True
        return False

    @property
    def pending(self) -> bool:
        return self._decoder is not None and self._decoder.pending


def framing_for(spec: StreamSpec, shown: str) -> SSEFraming | AwsEventStreamFraming:
    """The reader of one streamed answer, as the definition's ``stream.framing`` says."""
    return AwsEventStreamFraming(shown) if spec.framing == "aws-eventstream" else SSEFraming()


def _one_line(text: str, limit: int = _QUOTE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
