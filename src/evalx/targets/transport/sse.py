"""Server-Sent Events parsing, exactly as the WHATWG HTML standard's
"event stream interpretation" says (html.spec.whatwg.org, server-sent events).

Why not a library: ``httpx-sse`` (the well-kept choice) parses only httpx
responses, and its decoder lives in a private module (``httpx_sse._decoders``)
that may move in any release; it also dispatches an event for a lone
``retry:`` line, which the standard does not. This module is small, follows
the algorithm step by step and is tested case by case (tests/targets/test_sse.py).

- lines end in CRLF, LF or CR, and a line end may be split across chunks;
- a leading byte-order mark is ignored;
- ``:comment`` lines are ignored;
- ``field:value`` (one leading space of the value removed), or ``field``
  alone (empty value); fields ``event``, ``data``, ``id``, ``retry``, any
  other field is ignored;
- ``data`` lines are joined with ``\\n``; a blank line dispatches the event,
  unless no data was given (then nothing is dispatched);
- the event type defaults to ``message``; ``id`` persists across events;
- a partial event at end of stream is discarded (:attr:`SSEDecoder.pending`
  says whether one was cut off).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["LineDecoder", "SSEDecoder", "ServerSentEvent", "aiter_sse"]

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event."""

    event: str = "message"
    data: str = ""
    id: str = ""  # the last event id in force when this event was dispatched
    retry: int | None = None  # a reconnection time (ms) sent with this event, if any


class LineDecoder:
    """Split text chunks into lines on CRLF, LF or CR, across chunk boundaries.

    Unlike ``str.splitlines`` it never splits on other Unicode line breaks
    (``\\x0b``, ``\\u2028``...), which are ordinary characters in SSE and NDJSON.
    """

    __slots__ = ("_buffer", "_trailing_cr")

    def __init__(self) -> None:
        #: the unterminated line so far, in pieces: only new text is searched for line ends, so a
        #: line that never ends (a hostile stream) costs linear time, not a rescan per chunk
        self._buffer: list[str] = []
        self._trailing_cr = False

    def decode(self, text: str) -> list[str]:
        if not text:
            return []
        if self._trailing_cr:
            # the previous chunk ended in CR, which ended a line; a LF now is its CRLF's other half
            self._trailing_cr = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        parts = _LINE_END.split(text)
        tail = parts.pop()  # the unterminated tail ("" if text ended in a line end)
        if not parts:
            self._buffer.append(tail)
            return parts
        if self._buffer:
            parts[0] = "".join(self._buffer) + parts[0]
        self._buffer = [tail] if tail else []
        if text[-1] == "\r" and not tail:
            self._trailing_cr = True
        return parts

    def flush(self) -> list[str]:
        """The unterminated last line, if any (call at end of stream)."""
        tail, self._buffer, self._trailing_cr = "".join(self._buffer), [], False
        return [tail] if tail else []

    @property
    def pending(self) -> bool:
        return any(self._buffer)


class SSEDecoder:
    """Turn lines (or raw text chunks, with :meth:`feed`) into events."""

    __slots__ = ("_data", "_event", "_first", "_has_data", "_last_id", "_lines", "_retry", "retry_ms")

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self._last_id = ""
        self._retry: int | None = None
        self._first = True
        self._lines = LineDecoder()
        #: the last reconnection time the stream asked for, in milliseconds
        self.retry_ms: int | None = None

    def decode(self, line: str) -> ServerSentEvent | None:
        """Process one line (without its line end); return an event when one is dispatched."""
        if self._first:
            self._first = False
            if line.startswith("\ufeff"):
                line = line[1:]
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value and value.isascii() and value.isdigit():
            self._retry = self.retry_ms = int(value)
        return None

    def feed(self, text: str) -> list[ServerSentEvent]:
        """Process a chunk of decoded text; return the events it completed."""
        events = []
        for line in self._lines.decode(text):
            event = self.decode(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[ServerSentEvent]:
        """End of stream: a final line without a line end is processed, an undispatched event dropped."""
        for line in self._lines.flush():
            self.decode(line)
        return []

    @property
    def pending(self) -> bool:
        """True when the stream so far ends in the middle of an event (it would be discarded)."""
        return self._has_data or bool(self._event) or self._lines.pending

    def _dispatch(self) -> ServerSentEvent | None:
        retry, self._retry = self._retry, None
        if not self._has_data:
            self._event = ""
            return None
        event = ServerSentEvent(self._event or "message", "\n".join(self._data), self._last_id, retry)
        self._event, self._data, self._has_data = "", [], False
        return event


async def aiter_sse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """Events from an async iterable of lines (e.g. :meth:`evalx.targets.transport.http.StreamResponse.lines`)."""
    decoder = SSEDecoder()
    async for line in lines:
        event = decoder.decode(line)
        if event is not None:
            yield event
