"""OpenTelemetry trace exports read for ``evalx capture``: spans grouped into traces, each trace what its case needs.

Three shapes of export are read, as one JSON document or one a line (JSONL):

- OTLP/JSON (``resourceSpans``): a collector's ``file`` exporter writes one
  ``ExportTraceServiceRequest`` a line; ids in hex (the OTLP/JSON rule) or
  base64 (protobuf's own JSON mapping), ``camelCase`` or ``snake_case`` keys,
  and Jaeger's ``/api/v3`` answer (``{"result": {"resourceSpans": ...}}``);
- Phoenix's spans (``{"data": [{"context": {"trace_id", "span_id"}, "parent_id",
  "span_kind", "attributes", ...}]}`` from ``/v1/projects/NAME/spans``, or a
  list of them, or its spans dataframe as records with ``context.trace_id``
  and ``attributes.*`` columns);
- Jaeger's JSON (``{"data": [{"traceID", "spans": [{"spanID",
  "operationName", "references", "tags", ...}]}]}``).

A trace becomes what :mod:`evalx.datasets.capture` writes a case from: the
user's input and the system prompt of its first model call, its final answer
(the root's ``output.value``, else the last model call's reply), its tool
calls in order (``execute_tool`` spans of the GenAI conventions and
OpenInference ``TOOL`` spans; else the tool calls the model asked for), the
tokens its model calls used, and the first span with an error status.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from evalx.common.json_types import JSON

__all__ = ["CapturedSpan", "TraceFacts", "looks_like_otel", "read_otel", "trace_facts"]


@dataclass(slots=True)
class CapturedSpan:
    """One span of an export: the fields capture reads (the receive side's stored span has the same names)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_unix_nano: int
    status: str  # unset, ok, error
    status_message: str
    attributes: dict[str, JSON] = field(default_factory=dict)


@dataclass(slots=True)
class TraceFacts:
    """What one trace says, for its case."""

    trace_id: str
    user_message: str | None = None
    system: str | None = None
    final_answer: str | None = None
    tool_calls: list[str] = field(default_factory=list)
    tool_args: list[JSON] = field(default_factory=list)
    tokens_used: int = 0
    failure_reason: str | None = None


# ---------------------------------------------------------------- shapes


def looks_like_otel(data: object) -> bool:
    """Whether a JSON document is one of the exports this module reads."""
    if isinstance(data, list):
        return bool(data) and all(isinstance(d, dict) for d in data) and any(_phoenix_record(d) for d in data)
    if not isinstance(data, dict):
        return False
    if "resourceSpans" in data or "resource_spans" in data:
        return True
    if isinstance(data.get("result"), dict):
        return looks_like_otel(data["result"])
    rows = data.get("data")
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        first = rows[0]
        return ("traceID" in first and "spans" in first) or _phoenix_record(first) or "trace_id" in first
    return _phoenix_record(data)


def _phoenix_record(d: Mapping[str, Any]) -> bool:
    return (isinstance(d.get("context"), dict) and "span_id" in d["context"]) or "context.span_id" in d


def read_otel(documents: Iterable[object]) -> list[CapturedSpan]:
    """Every span of the documents, in the order read (a JSONL file: one document a line)."""
    spans: list[CapturedSpan] = []
    for doc in documents:
        spans.extend(_spans_of(doc))
    return spans


def _spans_of(doc: object) -> Iterator[CapturedSpan]:
    if isinstance(doc, list):
        for item in doc:
            if isinstance(item, dict):
                yield from _spans_of(item)
        return
    if not isinstance(doc, dict):
        return
    if isinstance(doc.get("result"), dict):
        yield from _spans_of(doc["result"])
        return
    resources = doc.get("resourceSpans", doc.get("resource_spans"))
    if isinstance(resources, list):
        yield from _otlp(resources)
        return
    rows = doc.get("data")
    if isinstance(rows, list):
        for row in rows:
            if isinstance(row, dict) and "spans" in row and "traceID" in row:
                yield from _jaeger(row)
            elif isinstance(row, dict):
                yield from _spans_of(row)
        return
    if _phoenix_record(doc):
        yield _phoenix(doc)
    elif "trace_id" in doc and "span_id" in doc:  # Phoenix's OTLP-shaped spans (/spans/otlpv1), one by one
        yield _otlp_span(doc)


def _get(d: Mapping[str, Any], camel: str, snake: str) -> Any:
    return d.get(camel, d.get(snake))


def _hex_id(value: object) -> str:
    """A trace or span id as hex, from hex (OTLP/JSON) or base64 (protobuf's JSON mapping)."""
    if not isinstance(value, str) or not value:
        return ""
    text = value.strip()
    if len(text) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except (binascii.Error, ValueError):
        return text.lower()


def _int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, str)):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


def _any_value(value: object) -> JSON:
    """An OTLP ``AnyValue`` (either spelling) as a JSON value."""
    if not isinstance(value, dict):
        return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value"), ("doubleValue", "double_value")):
        if camel in value or snake in value:
            got = _get(value, camel, snake)
            return got if isinstance(got, (str, int, float, bool)) else str(got)
    if "intValue" in value or "int_value" in value:
        return _int(_get(value, "intValue", "int_value"))
    if "arrayValue" in value or "array_value" in value:
        inner = _get(value, "arrayValue", "array_value") or {}
        return [_any_value(v) for v in inner.get("values") or []]
    if "kvlistValue" in value or "kvlist_value" in value:
        inner = _get(value, "kvlistValue", "kvlist_value") or {}
        return {str(kv.get("key")): _any_value(kv.get("value")) for kv in inner.get("values") or [] if isinstance(kv, dict)}
    if "bytesValue" in value or "bytes_value" in value:
        return str(_get(value, "bytesValue", "bytes_value"))
    return None


_STATUS = {0: "unset", 1: "ok", 2: "error", "STATUS_CODE_UNSET": "unset", "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}


def _otlp(resources: list[Any]) -> Iterator[CapturedSpan]:
    for resource in resources:
        if not isinstance(resource, dict):
            continue
        scopes = _get(resource, "scopeSpans", "scope_spans") or resource.get("instrumentationLibrarySpans") or []
        for scope in scopes:
            if isinstance(scope, dict):
                for span in scope.get("spans") or []:
                    if isinstance(span, dict):
                        yield _otlp_span(span)


def _otlp_span(span: Mapping[str, Any]) -> CapturedSpan:
    raw_status = span.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    attributes = {str(kv.get("key")): _any_value(kv.get("value")) for kv in span.get("attributes") or [] if isinstance(kv, dict)}
    return CapturedSpan(
        name=str(span.get("name") or ""),
        trace_id=_hex_id(_get(span, "traceId", "trace_id")),
        span_id=_hex_id(_get(span, "spanId", "span_id")),
        parent_span_id=_hex_id(_get(span, "parentSpanId", "parent_span_id")) or None,
        start_unix_nano=_int(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
        status=_STATUS.get(status.get("code", 0), "unset"),
        status_message=str(status.get("message") or ""),
        attributes=attributes,
    )


def _flatten(prefix: str, value: object, out: dict[str, JSON]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value  # type: ignore[assignment]


def _iso_ns(value: object) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value:
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
        except ValueError:
            return 0
    return 0


def _phoenix(record: Mapping[str, Any]) -> CapturedSpan:
    attributes: dict[str, JSON] = {}
    if isinstance(record.get("attributes"), dict):
        _flatten("", record["attributes"], attributes)
    for key, value in record.items():  # the spans dataframe's columns: attributes.input.value...
        if key.startswith("attributes.") and value is not None:
            _flatten(key[len("attributes.") :], value, attributes)
    kind = record.get("span_kind")
    if isinstance(kind, str) and kind and "openinference.span.kind" not in attributes:
        attributes["openinference.span.kind"] = kind
    raw_context = record.get("context")
    context: Mapping[str, Any] = raw_context if isinstance(raw_context, dict) else {}
    code = str(record.get("status_code") or "UNSET").lower()
    return CapturedSpan(
        name=str(record.get("name") or ""),
        trace_id=_hex_id(context.get("trace_id", record.get("context.trace_id"))),
        span_id=_hex_id(context.get("span_id", record.get("context.span_id"))),
        parent_span_id=_hex_id(record.get("parent_id")) or None,
        start_unix_nano=_iso_ns(record.get("start_time")),
        status=code if code in ("ok", "error") else "unset",
        status_message=str(record.get("status_message") or ""),
        attributes=attributes,
    )


def _jaeger(trace: Mapping[str, Any]) -> Iterator[CapturedSpan]:
    for span in trace.get("spans") or []:
        if not isinstance(span, dict):
            continue
        tags: dict[str, JSON] = {str(t.get("key")): t.get("value") for t in span.get("tags") or [] if isinstance(t, dict)}
        parent = next(
            (r.get("spanID") for r in span.get("references") or [] if isinstance(r, dict) and r.get("refType") == "CHILD_OF"), None
        )
        error = tags.get("otel.status_code") == "ERROR" or tags.get("error") in (True, "true")
        yield CapturedSpan(
            name=str(span.get("operationName") or ""),
            trace_id=_hex_id(span.get("traceID") or trace.get("traceID")),
            span_id=_hex_id(span.get("spanID")),
            parent_span_id=_hex_id(parent) or None,
            start_unix_nano=_int(span.get("startTime")) * 1000,  # microseconds
            status="error" if error else "ok" if tags.get("otel.status_code") == "OK" else "unset",
            status_message=str(tags.get("otel.status_description") or ""),
            attributes=tags,
        )


# ---------------------------------------------------------------- what a trace says


def trace_facts(spans: list[CapturedSpan]) -> list[TraceFacts]:
    """One :class:`TraceFacts` a trace, in the order the traces first appear."""
    groups: dict[str, list[CapturedSpan]] = {}
    for span in spans:
        if span.trace_id:
            groups.setdefault(span.trace_id, []).append(span)
    return [_facts(trace_id, group) for trace_id, group in groups.items()]


def _kind(span: CapturedSpan) -> str:
    return str(span.attributes.get("openinference.span.kind") or "").upper()


def _is_model_call(span: CapturedSpan) -> bool:
    operation = span.attributes.get("gen_ai.operation.name")
    return _kind(span) == "LLM" or operation in ("chat", "text_completion", "generate_content")


def _is_tool(span: CapturedSpan) -> bool:
    return _kind(span) == "TOOL" or span.attributes.get("gen_ai.operation.name") == "execute_tool"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _json(value: object) -> object:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@dataclass(slots=True)
class _Message:
    role: str
    text: str | None
    tool_calls: list[tuple[str, JSON]]


def _messages(attrs: Mapping[str, JSON], direction: str) -> list[_Message]:
    """A model call's input or output messages, from OpenInference, GenAI or OpenLLMetry attributes."""
    found = _openinference_messages(attrs, f"llm.{direction}_messages")
    if found:
        return found
    found = _genai_messages(attrs.get(f"gen_ai.{direction}.messages"))
    if found:
        return found
    legacy = "gen_ai.prompt" if direction == "input" else "gen_ai.completion"
    return _openinference_messages(attrs, legacy, inner="")


def _openinference_messages(attrs: Mapping[str, JSON], prefix: str, inner: str = "message.") -> list[_Message]:
    out: list[_Message] = []
    i = 0
    while f"{prefix}.{i}.{inner}role" in attrs or f"{prefix}.{i}.{inner}content" in attrs:
        base = f"{prefix}.{i}.{inner}"
        text = _text(attrs.get(f"{base}content"))
        if text is None:
            parts = [
                str(attrs[f"{base}contents.{j}.message_content.text"])
                for j in range(64)
                if isinstance(attrs.get(f"{base}contents.{j}.message_content.text"), str)
            ]
            text = "".join(parts) or None
        calls: list[tuple[str, JSON]] = []
        k = 0
        while f"{base}tool_calls.{k}.tool_call.function.name" in attrs:
            name = str(attrs[f"{base}tool_calls.{k}.tool_call.function.name"])
            calls.append((name, _json(attrs.get(f"{base}tool_calls.{k}.tool_call.function.arguments")) or {}))  # type: ignore[arg-type]
            k += 1
        out.append(_Message(str(attrs.get(f"{base}role") or ""), text, calls))
        i += 1
    return out


def _genai_messages(value: object) -> list[_Message]:
    messages = _json(value)
    if not isinstance(messages, list):
        return []
    out: list[_Message] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        texts: list[str] = []
        calls: list[tuple[str, JSON]] = []
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("content"), str):
                texts.append(part["content"])
            elif part.get("type") == "tool_call" and part.get("name"):
                calls.append((str(part["name"]), _json(part.get("arguments")) or {}))  # type: ignore[arg-type]
        if isinstance(message.get("content"), str):
            texts.append(message["content"])
        out.append(_Message(str(message.get("role") or ""), "".join(texts) or None, calls))
    return out


def _plain_io(span: CapturedSpan, key: str) -> str | None:
    """``input.value`` / ``output.value`` when it is plain text, not a JSON request or response."""
    value = _text(span.attributes.get(f"{key}.value"))
    if value is None or "json" in str(span.attributes.get(f"{key}.mime_type") or "").lower():
        return None
    return value


def _facts(trace_id: str, spans: list[CapturedSpan]) -> TraceFacts:
    spans = sorted(spans, key=lambda s: s.start_unix_nano)
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in ids]
    root = roots[0] if roots else spans[0]
    calls = [s for s in spans if _is_model_call(s)]
    facts = TraceFacts(trace_id)

    facts.user_message = _plain_io(root, "input")
    for call in calls[:1]:
        inputs = _messages(call.attributes, "input")
        users = [m.text for m in inputs if m.role == "user" and m.text]
        systems = [m.text for m in inputs if m.role in ("system", "developer") and m.text]
        facts.user_message = facts.user_message or (users[-1] if users else None)
        facts.system = systems[0] if systems else _text(call.attributes.get("gen_ai.system_instructions"))
    if facts.user_message is None:
        facts.user_message = _text(root.attributes.get("input.value"))

    facts.final_answer = _plain_io(root, "output")
    if facts.final_answer is None:
        for call in reversed(calls):
            replies = [m.text for m in _messages(call.attributes, "output") if m.text]
            if replies:
                facts.final_answer = replies[-1]
                break
    if facts.final_answer is None:
        facts.final_answer = _text(root.attributes.get("output.value"))

    tools = [s for s in spans if _is_tool(s)]
    if tools:
        for span in tools:
            attrs = span.attributes
            name = attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or span.name.removeprefix("execute_tool ").strip()
            facts.tool_calls.append(str(name))
            args = attrs.get("gen_ai.tool.call.arguments", attrs.get("input.value"))
            facts.tool_args.append(_json(args) if args is not None else {})  # type: ignore[arg-type]
    else:  # the tools the model asked for, when the app did not trace their execution
        for call in calls:
            for message in _messages(call.attributes, "output"):
                for name, args in message.tool_calls:
                    facts.tool_calls.append(name)
                    facts.tool_args.append(args)

    for call in calls:
        attrs = call.attributes
        tokens = _int(attrs.get("gen_ai.usage.input_tokens")) + _int(attrs.get("gen_ai.usage.output_tokens"))
        if not tokens:
            tokens = _int(attrs.get("llm.token_count.prompt")) + _int(attrs.get("llm.token_count.completion"))
            tokens = tokens or _int(attrs.get("llm.token_count.total"))
        facts.tokens_used += tokens

    errors = [s for s in spans if s.status == "error"]
    if errors:
        first = root if root.status == "error" else errors[0]
        facts.failure_reason = f"span {first.name!r} failed" + (f": {first.status_message}" if first.status_message else "")
    return facts
