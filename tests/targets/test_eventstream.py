"""The AWS event-stream decoder (src/evalx/targets/transport/eventstream.py): framing, both CRCs, size bounds, and
agreement with botocore's own parser on the same bytes."""

from __future__ import annotations

import random
import struct
import time
import zlib

import pytest
from aws_eventstream import encode_message, event, exception

from evalx.errors import TargetProtocolError
from evalx.targets.transport.eventstream import EventStreamDecoder, EventStreamMessage

MIB = 1024 * 1024


def decode_all(data: bytes, pieces: int = 1, limit: int = MIB) -> tuple[list[tuple[dict[str, object], bytes]], bool]:
    decoder = EventStreamDecoder(limit, "http://bedrock.test/model/m/converse-stream")
    step = max(1, len(data) // pieces)
    out = []
    for i in range(0, len(data), step):
        out += [(m.headers, m.payload) for m in decoder.feed(data[i : i + step])]
    return out, decoder.pending


def test_messages_come_out_whole_however_the_bytes_are_cut() -> None:
    stream = event("messageStart", {"role": "assistant"}) + event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "héllo"}})
    stream += exception("throttlingException", "Too many requests")
    for pieces in (1, 3, 17, len(stream)):
        messages, pending = decode_all(stream, pieces)
        assert not pending
        assert [h[":event-type"] if ":event-type" in h else h[":exception-type"] for h, _ in messages] == [
            "messageStart",
            "contentBlockDelta",
            "throttlingException",
        ]
        assert messages[1][1] == b'{"contentBlockIndex": 0, "delta": {"text": "h\\u00e9llo"}}'
        assert messages[2][0][":message-type"] == "exception"
    # cut in the middle of a message: nothing yet, and pending says so
    messages, pending = decode_all(stream[:-5])
    assert len(messages) == 2 and pending


def test_typed_headers_are_read() -> None:
    headers = {":event-type": "x", "flag": True, "off": False, "n": -7, "raw": b"\x00\xff"}
    [(got, payload)], _ = decode_all(encode_message(headers, b"{}"))  # type: ignore[arg-type]
    assert got == headers and payload == b"{}"


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda m: m[:8] + bytes([m[8] ^ 1]) + m[9:], "the prelude CRC does not match"),
        (lambda m: m[:-1] + bytes([m[-1] ^ 1]), "the message CRC does not match"),
        (lambda m: m[:-6] + bytes([m[-6] ^ 0x20]) + m[-5:], "the message CRC does not match"),  # a payload byte
    ],
)
def test_a_corrupt_crc_is_a_protocol_error(damage: object, expected: str) -> None:
    good = event("messageStart", {"role": "assistant"})
    with pytest.raises(TargetProtocolError, match=f"malformed event-stream message #2 from http://bedrock.test/.*: {expected}"):
        decode_all(good + damage(good))  # type: ignore[operator]


def _framed(total: int, headers_length: int, rest: bytes = b"") -> bytes:
    prelude = struct.pack("!II", total, headers_length)
    return prelude + struct.pack("!I", zlib.crc32(prelude)) + rest


def test_lengths_are_checked_before_anything_is_buffered() -> None:
    with pytest.raises(TargetProtocolError, match=r"larger than max_response_bytes \(1,048,576 bytes\)"):
        decode_all(_framed(2**32 - 1, 0))  # a 4 GiB message announced: refused at its prelude
    with pytest.raises(TargetProtocolError, match="lengths that do not fit"):
        decode_all(_framed(10, 0))
    with pytest.raises(TargetProtocolError, match="lengths that do not fit"):
        decode_all(_framed(40, 30))


def test_headers_that_run_past_their_length_or_repeat_are_protocol_errors() -> None:
    def with_headers(raw: bytes) -> bytes:
        total = 16 + len(raw)
        prelude = struct.pack("!II", total, len(raw))
        message = prelude + struct.pack("!I", zlib.crc32(prelude)) + raw
        return message + struct.pack("!I", zlib.crc32(message))

    with pytest.raises(TargetProtocolError, match="its headers run past their length"):
        decode_all(with_headers(b"\x04name\x07\x00\x09abc"))  # a string of 9 bytes with 3 there
    with pytest.raises(TargetProtocolError, match="unknown value type 12"):
        decode_all(with_headers(b"\x04name\x0c"))
    with pytest.raises(TargetProtocolError, match="sent twice"):
        decode_all(with_headers(b"\x01a\x00\x01a\x01"))


def test_a_large_message_in_small_chunks_takes_linear_time() -> None:
    """botocore's buffer joins each chunk onto one bytes: quadratic. 8 MiB in 1 KiB chunks stays fast here."""
    big = encode_message({":event-type": "contentBlockDelta", ":message-type": "event"}, b"x" * (8 * MIB))
    decoder = EventStreamDecoder(16 * MIB)
    t0 = time.process_time()
    got = []
    for i in range(0, len(big), 1024):
        got += decoder.feed(big[i : i + 1024])
    assert len(got) == 1 and len(got[0].payload) == 8 * MIB
    assert time.process_time() - t0 < 5.0  # joining each chunk onto the buffer would copy ~32 GiB


def test_the_decoder_agrees_with_botocore() -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    rng = random.Random(32)
    stream = b""
    for i in range(50):
        headers: dict[str, object] = {":message-type": "event", ":event-type": f"e{i}", ":content-type": "application/json"}
        if rng.random() < 0.3:
            headers["flag"] = rng.random() < 0.5
        if rng.random() < 0.3:
            headers["n"] = rng.randint(-(2**31), 2**31 - 1)
        if rng.random() < 0.3:
            headers["raw"] = rng.randbytes(rng.randint(0, 40))
        stream += encode_message(headers, rng.randbytes(rng.randint(0, 3000)))  # type: ignore[arg-type]
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(stream)
    theirs = [(m.headers, m.payload) for m in buffer]
    ours, pending = decode_all(stream, pieces=37)
    assert not pending and len(ours) == 50 and ours == theirs


def test_stream_framing_is_checked_with_its_line(tmp_path: object) -> None:
    from pathlib import Path

    from evalx.errors import ConfigError
    from evalx.targets.definitions import load_definition

    path = Path(str(tmp_path)) / "p.yaml"
    stream = "stream:\n  framing: {}\n  params: {{}}\n  end: {{event: done}}\n  events: {{}}\n"
    path.write_text("request: {path: /x, body: '{}'}\nresponse: {text: response.t}\n" + stream.format("websocket"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"p\.yaml:4 stream\.framing"):
        load_definition(path)
    path.write_text("request: {path: /x, body: '{}'}\nresponse: {text: response.t}\n" + stream.format("aws-eventstream"), encoding="utf-8")
    d = load_definition(path)
    assert d.stream is not None and d.stream.framing == "aws-eventstream"


def test_bedrocks_stream_messages_through_the_assembler() -> None:
    """Events by :event-type; an exception classified by bedrock.yaml's errors: patterns; an error message; others skipped."""
    import json

    from evalx.errors import StreamErrorEvent
    from evalx.targets.definitions import find_provider
    from evalx.targets.provider_stream import StreamAssembler

    bedrock = find_provider("bedrock")

    def messages(*frames: bytes) -> list[EventStreamMessage]:
        return list(EventStreamDecoder(MIB).feed(b"".join(frames)))

    def assembler() -> StreamAssembler:
        return StreamAssembler(bedrock, time.perf_counter(), "http://bedrock.test")

    a = assembler()
    later = encode_message({":message-type": "future-kind"}, b"")
    stream = messages(
        event("messageStart", {"role": "assistant"}),
        later,
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
        event("messageStop", {"stopReason": "end_turn"}),
        event("metadata", {"usage": {"inputTokens": 3, "outputTokens": 1}}),
    )
    assert [a.feed_message(m) for m in stream] == [False, False, False, False, True]
    assert (a.text, a.stop_reason, a.input_tokens, a.output_tokens) == (["Hi"], "end_turn", 3, 1)

    throttled = messages(exception("throttlingException", "Too many tokens"))[0]
    with pytest.raises(StreamErrorEvent, match="after 0 events: throttlingException: Too many tokens") as caught:
        assembler().feed_message(throttled)
    assert caught.value.retryable  # rate_limited by its type, nothing answered yet
    invalid = messages(exception("validationException", "The model returned the following errors: bad input"))[0]
    with pytest.raises(StreamErrorEvent, match="validationException: The model returned") as caught:
        assembler().feed_message(invalid)
    assert not caught.value.retryable
    failure = encode_message({":message-type": "error", ":error-code": "InternalFailure", ":error-message": "boom"}, b"")
    with pytest.raises(StreamErrorEvent, match="InternalFailure: boom"):
        assembler().feed_message(messages(failure)[0])
    assert json.loads(stream[2].payload)["delta"] == {"text": "Hi"}
