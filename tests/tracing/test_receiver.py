"""The OTLP/HTTP receiver and the collector: protobuf and JSON, gzip or not, bounds, late and unknown spans."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import aiohttp
import pytest

pytest.importorskip("opentelemetry.proto")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from evalx.common.trace_context import new_cell_span
from evalx.tracing.collector import Collector
from evalx.tracing.receiver import MAX_BODY_BYTES, Receiver


def _request(trace_id: str, parent: str, n: int = 1, name: str = "op") -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "svc"
    spans = rs.scope_spans.add()
    for i in range(n):
        span = spans.spans.add()
        span.name = f"{name}{i}"
        span.trace_id = bytes.fromhex(trace_id)
        span.span_id = (i + 1).to_bytes(8, "big")
        span.parent_span_id = bytes.fromhex(parent)
        span.start_time_unix_nano, span.end_time_unix_nano = 1_000_000_000, 1_250_000_000
        span.status.code = 2
        span.status.message = "boom"
        attr = span.attributes.add()
        attr.key, attr.value.int_value = "gen_ai.usage.input_tokens", 4
        arr = span.attributes.add()
        arr.key = "tags"
        arr.value.array_value.values.add().string_value = "a"
    return req


async def _post(url: str, body: bytes, content_type: str, encoding: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/traces", data=body, headers=headers) as r:
        return r.status, await r.read()


def _with_receiver(test: Any) -> Any:
    async def run() -> Any:
        collector = Collector(max_spans_per_cell=3)
        receiver = Receiver(collector)
        url = await receiver.start()
        try:
            return await test(collector, url)
        finally:
            await receiver.aclose()

    return asyncio.run(run())


def test_protobuf_json_and_gzip_bodies_reach_their_cell() -> None:
    async def test(collector: Collector, url: str) -> None:
        cell = new_cell_span()
        bucket = collector.begin(cell)
        body = _request(cell.trace_id, cell.span_id).SerializeToString()
        assert (await _post(url, body, "application/x-protobuf"))[0] == 200
        assert (await _post(url, gzip.compress(body), "application/x-protobuf", "gzip"))[0] == 200
        as_json = {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]},
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": cell.trace_id,  # OTLP/JSON: hex, not base64
                                    "spanId": "00000000000000aa",
                                    "parentSpanId": cell.span_id,
                                    "name": "from json",
                                    "startTimeUnixNano": "5",
                                    "endTimeUnixNano": "2000005",
                                    "attributes": [{"key": "k", "value": {"doubleValue": 1.5}}],
                                    "status": {"code": 1},
                                }
                            ]
                        }
                    ],
                }
            ]
        }
        status, reply = await _post(url, gzip.compress(json.dumps(as_json).encode()), "application/json", "gzip")
        assert status == 200 and json.loads(reply) == {}
        spans = collector.end(bucket)
        assert len(spans) == 3 and bucket.dropped == 0
        first = next(s for s in spans if s["name"] == "from json")
        assert first["span_id"] == "00000000000000aa" and first["parent_span_id"] == cell.span_id
        assert first["status"] == "ok" and first["duration_ms"] == 2.0 and first["attributes"] == {"k": 1.5}
        assert first["service"] == "js"
        op = next(s for s in spans if s["name"] == "op0")
        assert op["status"] == "error" and op["status_message"] == "boom"
        assert op["attributes"] == {"gen_ai.usage.input_tokens": 4, "tags": ["a"]} and op["duration_ms"] == 250.0

    _with_receiver(test)


def test_bounds_late_and_unknown_spans() -> None:
    async def test(collector: Collector, url: str) -> None:
        cell = new_cell_span()
        bucket = collector.begin(cell)
        await _post(url, _request(cell.trace_id, cell.span_id, n=5).SerializeToString(), "application/x-protobuf")
        assert len(bucket.spans) == 3 and bucket.dropped == 2  # max_spans_per_cell
        collector.end(bucket)
        await _post(url, _request(cell.trace_id, cell.span_id, n=2).SerializeToString(), "application/x-protobuf")
        other = new_cell_span()
        await _post(url, _request(other.trace_id, other.span_id).SerializeToString(), "application/x-protobuf")
        assert (collector.counts.late, collector.counts.unknown, collector.counts.dropped) == (2, 1, 2)
        assert len(bucket.spans) == 3  # a late span never joins the closed cell
        # what the receiver refuses
        assert (await _post(url, b"not protobuf at all", "application/x-protobuf"))[0] == 400
        assert (await _post(url, b"{}", "text/plain"))[0] == 415
        assert (await _post(url, b"x" * (MAX_BODY_BYTES + 1), "application/x-protobuf"))[0] == 413
        bomb = gzip.compress(b"\0" * (MAX_BODY_BYTES + 10))
        assert (await _post(url, bomb, "application/x-protobuf", "gzip"))[0] == 413

    _with_receiver(test)


def test_a_cell_waits_for_a_child_whose_parent_has_not_arrived() -> None:
    async def test(collector: Collector, url: str) -> None:
        cell = new_cell_span()
        bucket = collector.begin(cell)
        orphan = _request(cell.trace_id, "00000000000000ff")  # its parent, the service's top span, comes later
        await _post(url, orphan.SerializeToString(), "application/x-protobuf")
        assert not bucket.settled()
        waiting = asyncio.ensure_future(collector.settle(bucket, 60.0))
        await asyncio.sleep(0)
        top = _request(cell.trace_id, cell.span_id)
        top.resource_spans[0].scope_spans[0].spans[0].span_id = bytes.fromhex("00000000000000ff")
        await _post(url, top.SerializeToString(), "application/x-protobuf")
        await asyncio.wait_for(waiting, 30)  # settled as soon as the parent came, long before the 60 s
        assert bucket.settled() and len(collector.end(bucket)) == 2

    _with_receiver(test)
