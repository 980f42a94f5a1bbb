"""The SSE parser follows the WHATWG event-stream algorithm, case by case."""

from __future__ import annotations

import asyncio

import pytest

from evalx.targets.transport.sse import LineDecoder, ServerSentEvent, SSEDecoder, aiter_sse


def parse(*chunks: str) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [e for chunk in chunks for e in decoder.feed(chunk)]
    decoder.close()
    return events


def test_event_and_data() -> None:
    assert parse('event: text_delta\ndata: {"text": "hi"}\n\n') == [ServerSentEvent("text_delta", '{"text": "hi"}')]


def test_default_type_is_message() -> None:
    assert parse("data: x\n\n") == [ServerSentEvent("message", "x")]


def test_multiline_data_joined_with_newline() -> None:
    assert parse("data: a\ndata: b\ndata:\ndata: c\n\n")[0].data == "a\nb\n\nc"


def test_comments_ignored() -> None:
    assert parse(": hello\n\n:\ndata: x\n: mid\n\n") == [ServerSentEvent("message", "x")]


def test_only_one_leading_space_stripped() -> None:
    assert parse("data:  two\n\n")[0].data == " two"
    assert parse("data:none\n\n")[0].data == "none"


def test_field_without_colon_has_empty_value() -> None:
    # "data" alone appends an empty line; the event is still dispatched with data ""
    assert parse("data\n\n") == [ServerSentEvent("message", "")]


def test_unknown_fields_ignored() -> None:
    assert parse("foo: bar\ndata: x\n\n") == [ServerSentEvent("message", "x")]


def test_id_persists_and_nul_id_ignored() -> None:
    events = parse("id: 1\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\nid\ndata: d\n\n")
    assert [e.id for e in events] == ["1", "1", "1", ""]


def test_retry_field() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("retry: 3000\n\n") == []  # no data: nothing dispatched
    assert decoder.retry_ms == 3000
    events = decoder.feed("retry: 10\ndata: x\n\nretry: 1.5\ndata: y\n\n")
    assert [e.retry for e in events] == [10, None]  # a non-integer retry is ignored
    assert decoder.retry_ms == 10


def test_event_without_data_not_dispatched() -> None:
    assert parse("event: ping\n\ndata: x\n\n") == [ServerSentEvent("message", "x")]


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_line_ends(eol: str) -> None:
    text = f"event: a{eol}data: 1{eol}data: 2{eol}{eol}data: 3{eol}{eol}"
    assert parse(text) == [ServerSentEvent("a", "1\n2"), ServerSentEvent("message", "3")]


def test_mixed_line_ends() -> None:
    assert parse("data: 1\r\ndata: 2\rdata: 3\n\r\n") == [ServerSentEvent("message", "1\n2\n3")]


def test_split_across_chunks_at_every_position() -> None:
    text = 'event: tool_call\r\nid: 9\r\ndata: {"tool":\r\ndata: "x"}\r\n\r\n: c\r\ndata: z\r\r'
    expected = parse(text)
    assert expected == [ServerSentEvent("tool_call", '{"tool":\n"x"}', "9"), ServerSentEvent("message", "z", "9")]
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert parse(text[:i], text[i:j], text[j:]) == expected, (i, j)


def test_cr_then_lf_in_next_chunk_is_one_line_end() -> None:
    assert parse("data: a\r", "\ndata: b\r", "\n\r", "\n") == [ServerSentEvent("message", "a\nb")]


def test_bom_ignored_once() -> None:
    assert parse("\ufeffdata: x\n\n\ufeffdata: y\n\n")[0] == ServerSentEvent("message", "x")
    # a second BOM is an ordinary character, making an unknown field name
    assert len(parse("\ufeffdata: x\n\n\ufeffdata: y\n\n")) == 1


def test_incomplete_event_at_end_is_discarded_and_pending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed("data: done\n\ndata: cut") == [ServerSentEvent("message", "done")]
    assert decoder.pending
    assert decoder.close() == []
    complete = SSEDecoder()
    complete.feed("data: x\n\n: trailing comment\n")
    assert not complete.pending


def test_line_decoder_keeps_other_unicode_breaks() -> None:
    decoder = LineDecoder()
    assert decoder.decode("a\u2028b\x0bc\nd") == ["a\u2028b\x0bc"]
    assert decoder.flush() == ["d"]


def test_aiter_sse() -> None:
    async def lines():  # type: ignore[no-untyped-def]
        for line in ["event: a", "data: 1", "", "data: 2", ""]:
            yield line

    async def collect() -> list[ServerSentEvent]:
        return [e async for e in aiter_sse(lines())]

    assert asyncio.run(collect()) == [ServerSentEvent("a", "1"), ServerSentEvent("message", "2")]
