"""The OTLP/HTTP receiver a traced run starts on 127.0.0.1: ``POST /v1/traces``, protobuf or JSON, gzip or not.

Bodies are decoded with the ``opentelemetry-proto`` package and the spans
handed to the run's :class:`~evalx.tracing.collector.Collector`. It is
bounded: a body over :data:`MAX_BODY_BYTES` (compressed or not) is refused
with 413, and each cell keeps at most ``max_spans_per_cell`` spans. It
answers as the OTLP spec says: an empty ``ExportTraceServiceResponse`` in
the request's encoding, 400 for a body it cannot read, 415 for another
content type.
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any

from aiohttp import web

from evalx.tracing.collector import Collector
from evalx.tracing.spans import from_otlp_json, from_request

log = logging.getLogger(__name__)

__all__ = ["MAX_BODY_BYTES", "Receiver"]

#: the largest request body read, before and after gzip
MAX_BODY_BYTES = 16 * 1024 * 1024


class Receiver:
    """An aiohttp server on 127.0.0.1 feeding ``collector``; :attr:`endpoint` is its base URL once started."""

    def __init__(self, collector: Collector, port: int = 0) -> None:
        self.collector = collector
        self.port = port
        self.endpoint = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/traces", self._traces)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else self.port
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        kind = (request.content_type or "").lower()
        is_json = kind == "application/json"
        if not is_json and kind not in ("application/x-protobuf", "application/protobuf"):
            return web.Response(status=415, text="send application/x-protobuf or application/json")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text=f"a body of at most {MAX_BODY_BYTES} bytes")
        encoding = request.headers.get("Content-Encoding", "").lower()
        # aiohttp inflates a gzip body itself (bounded by client_max_size); one it left compressed is inflated here
        if encoding == "gzip" and body[:2] == b"\x1f\x8b":
            try:
                body = _gunzip(body)
            except ValueError as exc:
                return web.Response(status=413 if "bytes" in str(exc) else 400, text=str(exc))
        elif encoding not in ("", "identity", "gzip"):
            return web.Response(status=415, text=f"Content-Encoding {encoding} is not read: send gzip or none")
        try:
            message = _decode(body, is_json)
        except Exception as exc:  # protobuf's DecodeError, json's ValueError, ParseError: the sender's fault
            log.debug("tracing: unreadable OTLP body: %s", exc)
            return web.Response(status=400, text="the body is not an OTLP ExportTraceServiceRequest")
        self.collector.add(from_request(message))
        reply = ExportTraceServiceResponse()
        if is_json:
            return web.Response(body=b"{}", content_type="application/json")
        return web.Response(body=reply.SerializeToString(), content_type="application/x-protobuf")


def _gunzip(body: bytes) -> bytes:
    """A gzip body, decompressed to at most :data:`MAX_BODY_BYTES` (a small bomb stops there)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise ValueError(f"the body is not gzip: {exc}") from None
    if len(out) > MAX_BODY_BYTES or inflater.unconsumed_tail:
        raise ValueError(f"the body inflates past {MAX_BODY_BYTES} bytes")
    return out


def _decode(body: bytes, is_json: bool) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    if is_json:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return from_otlp_json(data)
    message = ExportTraceServiceRequest()
    message.ParseFromString(body)
    return message
