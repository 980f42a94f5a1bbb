"""AWS event-stream messages (application/vnd.amazon.eventstream) built for fake servers: real framing, real CRC32s.

Written from AWS's "Event stream encoding" description, independently of the decoder under test
(src/evalx/targets/transport/eventstream.py); tests/targets/test_eventstream.py also checks these bytes with botocore's parser.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

HeaderValue = bool | int | bytes | str


def encode_message(headers: dict[str, HeaderValue], payload: bytes) -> bytes:
    """One message, its CRCs computed (string, bytes, bool and int32 headers)."""
    parts = []
    for name, value in headers.items():
        key = name.encode("utf-8")
        head = bytes([len(key)]) + key
        if isinstance(value, bool):
            parts.append(head + bytes([0 if value else 1]))
        elif isinstance(value, int):
            parts.append(head + bytes([4]) + struct.pack("!i", value))
        else:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            parts.append(head + bytes([7 if isinstance(value, str) else 6]) + struct.pack("!H", len(raw)) + raw)
    header_bytes = b"".join(parts)
    total = 16 + len(header_bytes) + len(payload)
    prelude = struct.pack("!II", total, len(header_bytes))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + header_bytes + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(event_type: str, payload: Any) -> bytes:
    """A Bedrock event message: ``:event-type``, JSON content, the payload as JSON."""
    headers: dict[str, HeaderValue] = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, json.dumps(payload).encode())


def exception(exception_type: str, message: str) -> bytes:
    """A modelled exception, as a stream sends it mid-way: ``:message-type: exception``, ``{"message": ...}``."""
    headers: dict[str, HeaderValue] = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())
