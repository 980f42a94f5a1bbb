"""A tiny OTLP/HTTP collector on 127.0.0.1 for the tests: ``POST /v1/traces`` (protobuf, gzip or not), decoded with opentelemetry-proto."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start: int
    end: int
    status: int
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def value_of(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, which)


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs}


class OTLPCollector(ThreadedAioServer):
    """Keeps every span received, and each request's headers; ``status`` answers every request with that code instead."""

    thread_name = "test-otlp-collector"

    def __init__(self, status: int = 200) -> None:
        super().__init__()
        self.status = status
        self.spans: list[Span] = []
        self.headers: list[dict[str, str]] = []
        self.requests = 0
        self.lock = threading.Lock()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/traces", self._traces)

    async def _traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse

        body = await request.read()
        with self.lock:
            self.requests += 1
            self.headers.append(dict(request.headers))
        if self.status != 200:
            return web.Response(status=self.status, text="unavailable")
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        got = []
        for resource_spans in message.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    got.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            start=s.start_time_unix_nano,
                            end=s.end_time_unix_nano,
                            status=s.status.code,
                            status_message=s.status.message,
                            attributes=attributes(s.attributes),
                            resource=resource,
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            events=[(e.name, attributes(e.attributes)) for e in s.events],
                        )
                    )
        with self.lock:
            self.spans.extend(got)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")
