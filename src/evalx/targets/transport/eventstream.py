"""AWS event-stream framing (``application/vnd.amazon.eventstream``), decoded: what Bedrock's ConverseStream answers in.

Each message is: a prelude (total length and headers length, big-endian uint32 each) and
its CRC32; the headers; the payload; the CRC32 of everything before it. Both CRCs are
checked, the lengths are checked against each other and against ``max_message_bytes``
before anything is buffered, and a header is name (uint8 length), type (uint8), value
(typed: booleans, int8/16/32/64, byte arrays and strings with a uint16 length,
timestamps, UUIDs). Messages carry ``:message-type`` ``event`` (``:event-type`` names
it), ``exception`` (``:exception-type``) or ``error`` (``:error-code``,
``:error-message``) (AWS's "Event stream encoding" pages, e.g. Transcribe's and Lex's).

Why not botocore's ``botocore.eventstream.EventStreamBuffer`` (botocore is already the
``[aws]`` extra): it joins every chunk onto one ``bytes`` (``self._data += data``), so a
large message arriving in small chunks costs quadratic time; a malformed header raises
``KeyError``/``struct.error``/``UnicodeDecodeError`` rather than its own error; and
the framing would need the ``[aws]`` extra even for a server that is not signed with
SigV4 (a gateway with a bearer key). This decoder is small, linear, and tested against
botocore's on the same bytes (tests/targets/test_eventstream.py).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from evalx.errors import TargetProtocolError

__all__ = ["EventStreamDecoder", "EventStreamMessage", "HeaderValue"]

#: total length, headers length, prelude CRC
_PRELUDE = 12
#: the prelude and the message CRC
_OVERHEAD = 16

HeaderValue = bool | int | bytes | str

#: header value type -> (struct format, size) for the fixed-size ones
_FIXED: dict[int, tuple[str, int]] = {2: ("!b", 1), 3: ("!h", 2), 4: ("!i", 4), 5: ("!q", 8), 8: ("!q", 8)}


@dataclass(frozen=True)
class EventStreamMessage:
    """One decoded message: its headers (``:message-type``, ``:event-type``...) and its payload bytes."""

    headers: dict[str, HeaderValue]
    payload: bytes

    def header(self, name: str) -> str:
        """A string header's value, ``""`` when it is absent or not a string."""
        value = self.headers.get(name)
        return value if isinstance(value, str) else ""

    @property
    def message_type(self) -> str:
        return self.header(":message-type") or "event"


class EventStreamDecoder:
    """Bytes in (as they arrive), whole messages out; a malformed message raises :class:`TargetProtocolError`."""

    __slots__ = ("_buffer", "_count", "_max", "_shown")

    def __init__(self, max_message_bytes: int, shown: str = "the server") -> None:
        self._buffer = bytearray()
        self._max = max_message_bytes
        self._shown = shown
        self._count = 0

    def feed(self, chunk: bytes) -> list[EventStreamMessage]:
        """The messages ``chunk`` completes (none while a message is still arriving)."""
        buffer = self._buffer
        buffer += chunk
        out: list[EventStreamMessage] = []
        start = 0
        while len(buffer) - start >= _PRELUDE:
            total, headers_length, prelude_crc = struct.unpack_from("!III", buffer, start)
            self._check_prelude(buffer, start, total, headers_length, prelude_crc)
            if len(buffer) - start < total:
                break  # the rest is still on its way: nothing copied until it is all here
            out.append(self._message(memoryview(buffer)[start : start + total], headers_length))
            start += total
        if start:
            del buffer[:start]
        return out

    @property
    def pending(self) -> bool:
        """Whether the bytes so far end in the middle of a message."""
        return bool(self._buffer)

    # -- one message -------------------------------------------------------------

    def _fail(self, why: str) -> TargetProtocolError:
        return TargetProtocolError(f"malformed event-stream message #{self._count + 1} from {self._shown}: {why}")

    def _check_prelude(self, buffer: bytearray, start: int, total: int, headers_length: int, crc: int) -> None:
        computed = zlib.crc32(memoryview(buffer)[start : start + 8])
        if computed != crc:
            raise self._fail(f"the prelude CRC does not match (sent 0x{crc:08x}, computed 0x{computed:08x})")
        if total < _OVERHEAD or headers_length > total - _OVERHEAD:
            raise self._fail(f"lengths that do not fit (total {total}, headers {headers_length})")
        if total > self._max:
            raise self._fail(f"{total:,} bytes, larger than max_response_bytes ({self._max:,} bytes)")

    def _message(self, data: memoryview, headers_length: int) -> EventStreamMessage:
        (sent,) = struct.unpack_from("!I", data, len(data) - 4)
        computed = zlib.crc32(data[:-4])
        if computed != sent:
            raise self._fail(f"the message CRC does not match (sent 0x{sent:08x}, computed 0x{computed:08x})")
        headers = self._headers(data[_PRELUDE : _PRELUDE + headers_length])
        self._count += 1
        return EventStreamMessage(headers, bytes(data[_PRELUDE + headers_length : -4]))

    def _headers(self, data: memoryview) -> dict[str, HeaderValue]:
        headers: dict[str, HeaderValue] = {}
        i, end = 0, len(data)
        try:
            while i < end:
                n = data[i]
                name = bytes(data[i + 1 : i + 1 + n]).decode("utf-8")
                i += 1 + n
                kind = data[i]
                i += 1
                value: HeaderValue
                if kind in (0, 1):
                    value = kind == 0
                elif kind in _FIXED:
                    fmt, size = _FIXED[kind]
                    (value,) = struct.unpack_from(fmt, data, i)
                    i += size
                elif kind in (6, 7):
                    (length,) = struct.unpack_from("!H", data, i)
                    raw = bytes(data[i + 2 : i + 2 + length])
                    if len(raw) != length:
                        raise IndexError
                    value = raw.decode("utf-8") if kind == 7 else raw
                    i += 2 + length
                elif kind == 9:
                    value = bytes(data[i : i + 16])
                    if len(value) != 16:
                        raise IndexError
                    i += 16
                else:
                    raise self._fail(f"header {name!r} has an unknown value type {kind}")
                if name in headers:
                    raise self._fail(f"header {name!r} is sent twice")
                headers[name] = value
        except (IndexError, struct.error):
            raise self._fail("its headers run past their length") from None
        except UnicodeDecodeError:
            raise self._fail("a header is not UTF-8") from None
        return headers
