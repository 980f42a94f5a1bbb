"""The span as evalx stores it in a cell's ``results.jsonl`` line, made from OTLP protobuf/JSON or an SDK span.

A :class:`StoredSpan` keeps the span's name, ids, timing, status, kind,
service and every attribute (values bounded: :data:`MAX_ATTRIBUTES` per span,
strings cut at :data:`MAX_VALUE_CHARS`). A cell's spans are its
:class:`TraceRecord` (``result["trace"]``): at most ``max_spans_per_cell``,
the rest counted in ``dropped``. This shape is what exporters and ``evalx
capture`` build on (docs/tracing.md#the-stored-spans).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from evalx.common.json_types import JSON, JSONObject

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_SPANS_PER_CELL",
    "MAX_VALUE_CHARS",
    "StoredSpan",
    "TraceRecord",
    "TracingReport",
    "from_otlp_json",
    "from_request",
]

#: spans kept per cell unless ``tracing.max_spans_per_cell`` says otherwise
MAX_SPANS_PER_CELL = 1000
#: attributes kept per span (the rest dropped, counted in ``attributes_dropped``)
MAX_ATTRIBUTES = 128
#: characters kept of a string attribute value
MAX_VALUE_CHARS = 8192

SpanStatus = Literal["unset", "ok", "error"]
_STATUS: dict[int, SpanStatus] = {0: "unset", 1: "ok", 2: "error"}
_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


class StoredSpan(TypedDict):
    """One span as received."""

    name: str
    trace_id: str
    """32 hex digits: the cell's trace."""
    span_id: str
    """16 hex digits."""
    parent_span_id: str | None
    """16 hex digits: the cell's own span for a top-level span of the target, None for a root."""
    start_unix_nano: int
    end_unix_nano: int
    duration_ms: float
    status: SpanStatus
    status_message: str
    kind: str
    """internal, server, client, producer, consumer or unspecified."""
    service: str | None
    """The resource's ``service.name``."""
    attributes: JSONObject
    """Every attribute (up to MAX_ATTRIBUTES), values as JSON: strings, numbers, booleans, lists, objects."""


class TraceRecord(TypedDict):
    """A traced cell's ``trace`` in its results line."""

    trace_id: str
    span_id: str
    """The cell's own span: the parent of the target's top-level spans."""
    spans: list[StoredSpan]
    """In start order, at most ``max_spans_per_cell``."""
    dropped: int
    """Spans past ``max_spans_per_cell`` that were not kept."""
    source: Literal["target", "trace"]
    """Where the cell's tool calls and usage came from: the target's own answer, or these spans."""


def value_of(any_value: Any) -> JSON:
    """An OTLP ``AnyValue`` message as a JSON value (bytes as hex)."""
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return _cut(any_value.string_value)
    if which == "array_value":
        return [value_of(v) for v in any_value.array_value.values[:MAX_ATTRIBUTES]]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in any_value.kvlist_value.values[:MAX_ATTRIBUTES]}
    if which == "bytes_value":
        return _cut(any_value.bytes_value.hex())
    value: JSON = getattr(any_value, which)
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def plain(value: object) -> JSON:
    """An SDK attribute value (str, bool, int, float or a sequence of them) as a JSON value, bounded."""
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return None if value != value or value in (float("inf"), float("-inf")) else value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value[:MAX_ATTRIBUTES]]
    if isinstance(value, bytes):
        return _cut(value.hex())
    return _cut(str(value))


def from_request(request: Any) -> Iterable[StoredSpan]:
    """The spans of an ``ExportTraceServiceRequest`` message."""
    for resource_spans in request.resource_spans:
        service = None
        for kv in resource_spans.resource.attributes:
            if kv.key == "service.name":
                service = kv.value.string_value or None
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes: JSONObject = {}
                for kv in span.attributes[:MAX_ATTRIBUTES]:
                    attributes[kv.key] = value_of(kv.value)
                start, end = int(span.start_time_unix_nano), int(span.end_time_unix_nano)
                yield {
                    "name": _cut(span.name),
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None,
                    "start_unix_nano": start,
                    "end_unix_nano": end,
                    "duration_ms": round(max(0, end - start) / 1e6, 3),
                    "status": _STATUS.get(span.status.code, "unset"),
                    "status_message": _cut(span.status.message),
                    "kind": _KINDS.get(span.kind, "unspecified"),
                    "service": service,
                    "attributes": attributes,
                }


def from_sdk(span: Any) -> StoredSpan:
    """A finished ``opentelemetry.sdk.trace.ReadableSpan`` as a stored span (the in-process path, no encoding)."""
    ctx = span.context
    parent = span.parent
    start, end = int(span.start_time or 0), int(span.end_time or 0)
    attributes: JSONObject = {}
    for i, (key, value) in enumerate((span.attributes or {}).items()):
        if i >= MAX_ATTRIBUTES:
            break
        attributes[str(key)] = plain(value)
    service = span.resource.attributes.get("service.name") if span.resource is not None else None
    return {
        "name": _cut(span.name),
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent is not None else None,
        "start_unix_nano": start,
        "end_unix_nano": end,
        "duration_ms": round(max(0, end - start) / 1e6, 3),
        "status": _STATUS.get(int(span.status.status_code.value), "unset"),
        "status_message": _cut(span.status.description or ""),
        "kind": _KINDS.get(int(span.kind.value) + 1, "unspecified"),
        "service": service if isinstance(service, str) else None,
        "attributes": attributes,
    }


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def from_otlp_json(data: Mapping[str, Any]) -> Any:
    """An ``ExportTraceServiceRequest`` from OTLP/JSON, whose ids are hex (protobuf's JSON mapping reads base64)."""
    from google.protobuf import json_format  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    fixed = dict(data)
    fixed["resourceSpans"] = [_fix_resource(r) for r in data.get("resourceSpans") or [] if isinstance(r, Mapping)]
    return json_format.ParseDict(fixed, ExportTraceServiceRequest(), ignore_unknown_fields=True)


def _fix_resource(resource: Mapping[str, Any]) -> JSONObject:
    out = dict(resource)
    scopes = []
    for scope in resource.get("scopeSpans") or []:
        if isinstance(scope, Mapping):
            scope = dict(scope)
            scope["spans"] = [_fix_ids(s) for s in scope.get("spans") or [] if isinstance(s, Mapping)]
            scopes.append(scope)
    out["scopeSpans"] = scopes
    return out


def _fix_ids(span: Mapping[str, Any]) -> JSONObject:
    out = dict(span)
    for key in _ID_KEYS:
        value = out.get(key)
        if isinstance(value, str) and value:
            try:
                out[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                pass  # not hex: left for protobuf to read (or refuse) as base64
    out["links"] = [_fix_ids(link) for link in out.get("links") or [] if isinstance(link, Mapping)]
    return out


class TracingReport(TypedDict):
    """``summary.json``'s ``tracing``: what the run's receiver got."""

    cells_traced: int
    """Cells with at least one span."""
    spans: int
    """Spans stored in the cells' results."""
    late_spans: int
    """Spans of a cell's trace that arrived after the cell ended (after ``tracing.flush_ms``): counted, never stored."""
    dropped_spans: int
    """Spans past ``tracing.max_spans_per_cell``."""
    unknown_spans: int
    """Spans of a trace no cell of the run started (another process sending to the receiver)."""
    trajectory_from_trace: int
    """Cells whose tool calls or usage came from their spans (``trace.source: trace``)."""
