"""A separate agent service for the tracing tests: an engine (``POST /execute``, SSE) that reports nothing but OTel spans.

Run as ``python traced_engine.py PORT``. Its spans go through the real
OpenTelemetry SDK and OTLP/HTTP (protobuf) exporter to
``OTEL_EXPORTER_OTLP_ENDPOINT`` — evalx's receiver — in the trace of the
``traceparent`` header evalx sent. Its stream carries the answer's text only:
the tool calls and token usage are in the spans. The body's ``message``
picks the tools: each word ``tool:NAME`` is one ``execute_tool`` span, and
``fail:NAME`` one with error status.
"""

from __future__ import annotations

import json
import sys

from aiohttp import web
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

provider = TracerProvider(resource=Resource.create({"service.name": "traced-engine"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=50))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("traced-engine")


async def execute(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    message = str(body.get("message", ""))
    parent = propagate.extract(dict(request.headers))
    with tracer.start_as_current_span("agent run", context=parent, kind=trace.SpanKind.SERVER):
        with tracer.start_as_current_span("chat fake-model") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "fake-model")
            chat.set_attribute("gen_ai.usage.input_tokens", 30)
            chat.set_attribute("gen_ai.usage.output_tokens", 7)
        for word in message.split():
            kind, _, name = word.partition(":")
            if kind not in ("tool", "fail"):
                continue
            with tracer.start_as_current_span(f"execute_tool {name}") as span:
                span.set_attribute("gen_ai.operation.name", "execute_tool")
                span.set_attribute("gen_ai.tool.name", name)
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"message": message}))
                if kind == "fail":
                    span.set_status(Status(StatusCode.ERROR, f"{name} is down"))
                else:
                    span.set_attribute("gen_ai.tool.call.result", json.dumps({"ok": name}))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'event: text_delta\ndata: {"text": "done"}\n\n')
    await resp.write(b"event: done\ndata: {}\n\n")
    await resp.write_eof()
    return resp


async def traceparents(request: web.Request) -> web.Response:
    return web.json_response(SEEN)


SEEN: list[str] = []


@web.middleware
async def remember(request: web.Request, handler):  # type: ignore[no-untyped-def]
    if request.path == "/execute":
        SEEN.append(request.headers.get("traceparent", ""))
    return await handler(request)


def main() -> None:
    app = web.Application(middlewares=[remember])
    app.router.add_post("/execute", execute)
    app.router.add_get("/traceparents", traceparents)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, handle_signals=True)


if __name__ == "__main__":
    main()
