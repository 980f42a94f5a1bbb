"""Send a run's own spans to an OpenTelemetry backend (``tracing: {export: URL}``, ``--otlp-endpoint``, docs/tracing.md#export).

The spans are built from the cell results as the runner records them
(:meth:`RunExporter.cell`, called from the runner's ``on_result``), not by
instrumenting the executor: a run that does not export pays one ``is None``
test a cell. Each cell is the root of its own trace, tied to the run by
``session.id`` (the run id: Phoenix's Sessions view lists a run's cells
together) and by a link to the run's own span, a trace of its own that ends
with the run and carries its summary::

    evalx.run                         (its own trace: the run's figures)
    evalx.cell                        (one trace a cell; links to evalx.run)
    ├── chat MODEL | invoke_agent ID  the target call: latency_ms from the start
    │   └── (hook: the spans the receive side got for the cell, re-parented here)
    └── evalx.checks                  from the call's end to the result
        └── assert TYPE               one a verdict; a judge's call under it as chat JUDGE

Results ride as attributes: ``evalx.*`` (status, score, reasons, target, case
id, repeat, cost, latency), the OpenTelemetry GenAI names where one fits
(``gen_ai.request.model``, ``gen_ai.usage.*``, ``gen_ai.evaluation.*``) and
the OpenInference ones Phoenix reads (``openinference.span.kind``,
``input.value``, ``output.value``, ``llm.token_count.*``, ``session.id``).
Every string goes through the config's redactor. Checks do not record their
own timing: an assertion's span covers the checks' window.

Spans are the SDK's ``ReadableSpan`` records, made directly (the values are
clean already; the tracer's per-attribute checks were most of a cell's cost),
sent through a ``BatchSpanProcessor`` and the SDK's OTLP/HTTP exporter of
evalx's own, never through the global tracer provider a Python target may use. :meth:`RunExporter.finish` flushes them within
:data:`FLUSH_TIMEOUT_S`; an endpoint that fails stops the export (later
batches are dropped, not retried) and is one warning at the end, never a
failed run.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from evalx.common.redaction import shown_url

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from evalx.results.model import AssertionRecord, CellResult, RunSummary

__all__ = [
    "ENV_ENDPOINT",
    "ENV_TRACES_ENDPOINT",
    "EXPORT_INSTALL_HINT",
    "FLUSH_TIMEOUT_S",
    "Endpoint",
    "RunExporter",
    "TargetFacts",
    "find_endpoint",
    "start_export",
    "traces_url",
]

log = logging.getLogger(__name__)

#: the one line a run that should export, without the SDK, prints
EXPORT_INSTALL_HINT = "exporting spans needs the OpenTelemetry SDK: install evalx-runner[otel]"
#: the standard variables (the signal-specific one is the full URL; the general one a base that gets v1/traces)
ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: the longest the run waits at its end for its spans to be sent
FLUSH_TIMEOUT_S = 10.0
#: one export request's timeout unless OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT says less
REQUEST_TIMEOUT_S = 10.0
#: characters kept of a string attribute (input, output, reasons)
MAX_VALUE_CHARS = 8192
#: spans queued for the exporter before new ones are dropped (counted in the end warning)
MAX_QUEUE = 65536

FLAG = "--otlp-endpoint"
CONFIG_KEY = "tracing.export"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a run's spans go: the full traces URL, and which setting named it."""

    url: str
    #: ``--otlp-endpoint``, ``tracing.export``, or the environment variable
    source: str

    @property
    def explicit(self) -> bool:
        """Asked for by this run (a flag or the config), not inherited from the environment."""
        return self.source in (FLAG, CONFIG_KEY)


def traces_url(url: str) -> str:
    """``url`` with ``/v1/traces`` when it has no path (``http://host:4318`` → ``http://host:4318/v1/traces``)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urllib.parse.urlunsplit(parts)


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be an OTLP/HTTP endpoint, or None."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return "give an http:// or https:// URL (the OTLP/HTTP traces endpoint)"
    return None


def find_endpoint(flag: str | None, configured: str | None, env: Mapping[str, str]) -> Endpoint | None:
    """The run's export endpoint: ``--otlp-endpoint`` over ``tracing.export`` over the standard variables, or None.

    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used as written,
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is a base URL that gets ``v1/traces`` (as
    the OpenTelemetry specification says); ``OTEL_SDK_DISABLED=true`` turns
    the variables off. A bad URL in a variable is a warning and no export.
    """
    if flag:
        return Endpoint(traces_url(flag), FLAG)
    if configured:
        return Endpoint(traces_url(configured), CONFIG_KEY)
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    for name in (ENV_TRACES_ENDPOINT, ENV_ENDPOINT):
        value = env.get(name, "").strip()
        if not value:
            continue
        problem = check_url(value)
        if problem is not None:
            log.warning(f"{name}: {problem}; the run's spans are not exported")
            return None
        if name == ENV_ENDPOINT:
            value = value.rstrip("/") + "/v1/traces"
        return Endpoint(value, name)
    return None


def otel_sdk_missing() -> bool:
    """True when the OpenTelemetry SDK or its OTLP/HTTP exporter cannot be imported."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return True
    return False


@dataclass(frozen=True, slots=True)
class TargetFacts:
    """What a target-call span says about its target (from the run's target specs)."""

    type: str
    model: str | None = None
    provider: str | None = None


# ---------------------------------------------------------------- the SDK's own messages


class _Quiet(logging.Filter):
    """Keep the SDK's messages about evalx's own export out of the log; the first one is the end warning's reason.

    Only records logged while this thread is inside evalx's export (or queueing
    evalx's spans) are taken: a Python target's own exporter still logs as usual.
    """

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()
        self.first: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(self.local, "ours", False):
            return True
        if self.first is None:
            try:
                self.first = record.getMessage()
            except Exception:  # a record that cannot format: its template
                self.first = str(record.msg)
        return False


#: the loggers the SDK's exporter and batch processor write their problems to
_SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
)


# ---------------------------------------------------------------- attribute values


def _iso_ns(text: object) -> int | None:
    """An ISO 8601 time (a result's ``started_at``) in Unix nanoseconds."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class _Attrs:
    """Attribute values made safe: strings redacted and cut, None dropped, lists of one type."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self.redact = redact

    def text(self, value: object) -> str:
        text = self.redact(_as_text(value))
        return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"

    def put(self, out: dict[str, Any], key: str, value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = [self.text(v) for v in value]
        else:
            out[key] = self.text(value)


# ---------------------------------------------------------------- the exporter


class RunExporter:
    """One run's spans: :meth:`cell` for each recorded result, :meth:`finish` once at the end (flush, one warning)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        run_id: str,
        name: str | None,
        redact: Callable[[str], str],
        targets: Mapping[str, TargetFacts],
        started_ns: int | None = None,
    ) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        from evalx.version import __version__

        self.endpoint = endpoint
        self.run_id = run_id
        self.name = name
        self.targets = targets
        self.attrs = _Attrs(redact)
        self.quiet = _Quiet()
        for logger_name in _SDK_LOGGERS:
            logging.getLogger(logger_name).addFilter(self.quiet)
        self.created = 0
        self.finished = False
        # the SDK's span classes, made directly: the values are clean already, and the tracer's checks cost more than the rest
        self._ReadableSpan, self._Event, self._Link = ReadableSpan, Event, Link
        self._SpanContext, self._SAMPLED = SpanContext, TraceFlags(TraceFlags.SAMPLED)
        self._CLIENT, self._INTERNAL = SpanKind.CLIENT, SpanKind.INTERNAL
        self._OK, self._UNSET, self._Status, self._ERROR = Status(StatusCode.OK), Status(StatusCode.UNSET), Status, StatusCode.ERROR
        self.scope = InstrumentationScope("evalx", __version__)
        project = name or "evalx"
        # the environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) wins over evalx's defaults
        self.resource = Resource({"service.name": "evalx", "service.version": __version__, "openinference.project.name": project}).merge(
            OTELResourceDetector().detect()
        )
        # a processor and an exporter of evalx's own: never the global tracer provider a Python target may use
        self.sender = _Guarded(OTLPSpanExporter(endpoint=endpoint.url, timeout=_request_timeout()), self.quiet)
        self.processor = BatchSpanProcessor(
            cast("SpanExporter", self.sender), max_queue_size=MAX_QUEUE, schedule_delay_millis=1000, max_export_batch_size=512
        )
        self.started = started_ns or time.time_ns()
        self.run_trace, self.run_span_id = _new_trace_id(), _new_span_id()
        self.run_link = [Link(SpanContext(self.run_trace, self.run_span_id, False, self._SAMPLED))]

    def _emit(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent: int | None,
        start: int,
        end: int,
        attributes: dict[str, Any],
        *,
        error: str | None = None,
        ok: bool = False,
        events: Sequence[Any] = (),
        links: Sequence[Any] = (),
        client: bool = False,
        resource: Any = None,
    ) -> None:
        """One finished span to the batch processor (``resource``: another than evalx's own)."""
        context = self._SpanContext(trace_id, span_id, False, self._SAMPLED)
        status = self._Status(self._ERROR, error) if error is not None else self._OK if ok else self._UNSET
        span = self._ReadableSpan(
            name=name,
            context=context,
            parent=self._SpanContext(trace_id, parent, False, self._SAMPLED) if parent else None,
            resource=resource or self.resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=self._CLIENT if client else self._INTERNAL,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=self.scope,
        )
        self.processor.on_end(span)
        self.created += 1

    # ------------------------------------------------------------ a cell

    def cell(self, result: CellResult) -> None:
        """The spans of one recorded cell result (never raises: a span that cannot be made is not made)."""
        if self.finished:
            return
        self.quiet.local.ours = True
        try:
            self._cell(result)
        except Exception as exc:  # export must never break a run
            log.debug(f"tracing export: a cell's spans could not be made: {exc}")
        finally:
            self.quiet.local.ours = False

    def _cell(self, result: CellResult) -> None:
        put = self.attrs.put
        end = time.time_ns()
        start = _iso_ns(result.get("started_at")) or end
        start = min(start, end)
        status = result.get("status")
        target_id = str(result.get("target"))
        facts = self.targets.get(target_id) or TargetFacts(str(result.get("target_type") or "python"))
        cell_attrs: dict[str, Any] = {"openinference.span.kind": "CHAIN", "session.id": self.run_id, "evalx.run.id": self.run_id}
        for key, value in (
            ("evalx.target", target_id),
            ("evalx.target.type", facts.type),
            ("evalx.dataset", result.get("dataset")),
            ("evalx.case.id", result.get("case_id")),
            ("evalx.case.source", result.get("case_source")),
            ("evalx.case.category", result.get("category")),
            ("evalx.case.tags", result.get("tags") or None),
            ("evalx.repeat", result.get("repeat")),
            ("evalx.status", status),
            ("evalx.score", result.get("score")),
            ("evalx.latency_ms", result.get("latency_ms")),
            ("evalx.ttft_ms", result.get("ttft_ms")),
            ("evalx.cost_usd", result.get("cost_usd")),
            ("evalx.judge_cost_usd", result.get("judge_cost_usd")),
            ("evalx.cached", result.get("cached")),
            ("evalx.error", result.get("error")),
            ("evalx.skip_reason", result.get("skip_reason")),
            ("gen_ai.request.model", facts.model),
        ):
            put(cell_attrs, key, value)
        assertions = result.get("assertions") or []
        reasons = [_reason(a) for a in assertions if a.get("passed") is False or a.get("error")]
        if reasons:
            put(cell_attrs, "evalx.assertions.failed", reasons)
        put(cell_attrs, "input.value", result.get("input"))
        output = result.get("output") or {}
        put(cell_attrs, "output.value", output.get("text"))
        received = result.get("trace")  # the receive side's record (docs/tracing.md), after the merge
        # the cell keeps the trace and span ids its target's spans were given as their parent, else new ones
        trace_id, cell_id = _ids_of(received) or (_new_trace_id(), _new_span_id())
        latency = result.get("latency_ms")
        if latency is not None and result.get("started_at"):
            call_end = min(end, start + int(float(latency) * 1e6))
            self._target_call(result, facts, trace_id, cell_id, start, call_end, received)
            if assertions:
                self._checks(assertions, trace_id, cell_id, call_end, end)
        error = None
        if status in ("fail", "error"):
            error = self.attrs.text(result.get("error") or "; ".join(reasons) or status)
        self._emit("evalx.cell", trace_id, cell_id, None, start, end, cell_attrs, error=error, ok=status == "pass", links=self.run_link)

    def _target_call(
        self, result: CellResult, facts: TargetFacts, trace_id: int, cell_id: int, start: int, end: int, received: object
    ) -> None:
        put = self.attrs.put
        output = result.get("output") or {}
        usage: Mapping[str, Any] = output.get("usage") or {}
        attrs: dict[str, Any] = {}
        if facts.type == "provider":
            name = f"chat {facts.model}" if facts.model else "chat"
            attrs["gen_ai.operation.name"] = "chat"
            attrs["openinference.span.kind"] = "LLM"
            put(attrs, "gen_ai.request.model", facts.model)
            put(attrs, "gen_ai.provider.name", facts.provider)
            put(attrs, "llm.model_name", facts.model)
            put(attrs, "llm.provider", facts.provider)
        else:
            name = f"invoke_agent {result.get('target')}"
            attrs["gen_ai.operation.name"] = "invoke_agent"
            attrs["openinference.span.kind"] = "AGENT"
            put(attrs, "gen_ai.agent.name", result.get("target"))
        put(attrs, "evalx.target", result.get("target"))
        if usage:
            tokens_in, tokens_out = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
            attrs["gen_ai.usage.input_tokens"] = tokens_in
            attrs["gen_ai.usage.output_tokens"] = tokens_out
            attrs["llm.token_count.prompt"] = tokens_in
            attrs["llm.token_count.completion"] = tokens_out
            attrs["llm.token_count.total"] = tokens_in + tokens_out
        if output.get("stop_reason"):
            put(attrs, "gen_ai.response.finish_reasons", [str(output.get("stop_reason"))])
        calls = output.get("tool_calls") or []
        if calls:
            put(attrs, "evalx.tool_calls", [str(c.get("name")) for c in calls if isinstance(c, dict)])
        for key, value in (
            ("evalx.latency_ms", result.get("latency_ms")),
            ("evalx.ttft_ms", result.get("ttft_ms")),
            ("evalx.cost_usd", result.get("cost_usd")),
            ("evalx.cached", result.get("cached")),
            ("input.value", result.get("input")),
            ("output.value", output.get("text")),
        ):
            put(attrs, key, value)
        events = []
        for call in calls:
            if isinstance(call, dict):
                event: dict[str, Any] = {}
                put(event, "gen_ai.tool.name", call.get("name"))
                put(event, "gen_ai.tool.call.arguments", call.get("args"))
                events.append(self._Event("gen_ai.tool.call", event, end))
        error = self.attrs.text(result.get("error")) if result.get("error") else None
        span_id = _new_span_id()
        self._emit(name, trace_id, span_id, cell_id, start, end, attrs, error=error, events=events, client=True)
        # HOOK (receive side, docs/tracing.md): the spans the target itself sent for this cell, stored in
        # result["trace"]["spans"], are sent again here as children of this target-call span: those whose
        # parent is the cell's own span are re-parented to this one, the rest keep their parents.
        self._received(received, span_id, cell_id)

    def _checks(self, assertions: Sequence[AssertionRecord], trace_id: int, cell_id: int, start: int, end: int) -> None:
        put = self.attrs.put
        failed = [a for a in assertions if a.get("passed") is False or a.get("error")]
        attrs: dict[str, Any] = {"openinference.span.kind": "EVALUATOR", "evalx.assertions.count": len(assertions)}
        attrs["evalx.assertions.failed_count"] = len(failed)
        checks_id = _new_span_id()
        error = self.attrs.text("; ".join(_reason(a) for a in failed)) if failed else None
        self._emit("evalx.checks", trace_id, checks_id, cell_id, start, end, attrs, error=error)
        for record in assertions:
            kind = str(record.get("type"))
            passed = record.get("passed")
            label = "pass" if passed is True else "fail" if passed is False else "error" if record.get("error") else "inconclusive"
            a: dict[str, Any] = {"openinference.span.kind": "EVALUATOR", "gen_ai.evaluation.score.label": label}
            for key, value in (
                ("gen_ai.evaluation.name", record.get("name") or kind),
                ("gen_ai.evaluation.score.value", record.get("score")),
                ("gen_ai.evaluation.explanation", record.get("reason")),
                ("evalx.assertion.type", kind),
                ("evalx.assertion.name", record.get("name")),
                ("evalx.assertion.passed", passed),
                ("evalx.assertion.weight", record.get("weight")),
                ("evalx.assertion.negated", record.get("not")),
                ("evalx.assertion.error", record.get("error")),
                ("evalx.assertion.turn", record.get("turn")),
            ):
                put(a, key, value)
            span_id = _new_span_id()
            error = self.attrs.text(_reason(record)) if passed is False or record.get("error") else None
            self._emit(f"assert {kind}", trace_id, span_id, checks_id, start, end, a, error=error)
            details = record.get("details")
            if isinstance(details, dict) and details.get("judge") and details.get("calls"):
                self._judge_call(details, trace_id, span_id, start, end)

    def _judge_call(self, details: Mapping[str, Any], trace_id: int, parent: int, start: int, end: int) -> None:
        put = self.attrs.put
        judge = str(details.get("judge"))
        facts = self.targets.get(judge)
        model = facts.model if facts is not None else None
        tokens_in, tokens_out = int(details.get("input_tokens") or 0), int(details.get("output_tokens") or 0)
        attrs: dict[str, Any] = {
            "openinference.span.kind": "LLM",
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
            "llm.token_count.prompt": tokens_in,
            "llm.token_count.completion": tokens_out,
            "llm.token_count.total": tokens_in + tokens_out,
        }
        for key, value in (
            ("gen_ai.request.model", model),
            ("llm.model_name", model),
            ("gen_ai.provider.name", facts.provider if facts is not None else None),
            ("evalx.judge.target", judge),
            ("evalx.judge.calls", details.get("calls")),
            ("evalx.cost_usd", details.get("cost_usd")),
            ("evalx.cached", details.get("cached")),
        ):
            put(attrs, key, value)
        self._emit(f"chat {model or judge}", trace_id, _new_span_id(), parent, start, end, attrs, client=True)

    def _received(self, received: object, parent_span_id: int, cell_span_id: int) -> None:
        """The receive side's spans of a cell, as children of its target-call span (the hook)."""
        spans = received.get("spans") if isinstance(received, dict) else None
        if not isinstance(spans, list) or not spans:
            return
        from opentelemetry.sdk.resources import Resource

        for stored in spans:
            try:
                trace_id, span_id = int(stored["trace_id"], 16), int(stored["span_id"], 16)
                parent = int(stored["parent_span_id"], 16) if stored.get("parent_span_id") else cell_span_id
                if parent == cell_span_id:
                    parent = parent_span_id
                attrs: dict[str, Any] = {}
                for key, value in (stored.get("attributes") or {}).items():
                    self.attrs.put(attrs, str(key), value)
                start, end = int(stored["start_unix_nano"]), int(stored["end_unix_nano"])
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
            error = self.attrs.text(stored.get("status_message") or "error") if stored.get("status") == "error" else None
            name = self.attrs.text(stored.get("name") or "span")
            service = stored.get("service")  # the span keeps the service that sent it
            resource = Resource({"service.name": service}) if isinstance(service, str) and service else None
            self._emit(name, trace_id, span_id, parent, start, end, attrs, error=error, ok=stored.get("status") == "ok", resource=resource)

    # ------------------------------------------------------------ the end

    def finish(self, summary: RunSummary | None = None, *, status: str = "complete", exit_code: int | None = None) -> None:
        """End the run's span, send what is queued (at most :data:`FLUSH_TIMEOUT_S`), and say once if it did not arrive."""
        if self.finished:
            return
        self.finished = True
        self.quiet.local.ours = True
        try:
            attrs: dict[str, Any] = {"openinference.span.kind": "CHAIN", "session.id": self.run_id, "evalx.run.id": self.run_id}
            self.attrs.put(attrs, "evalx.run.name", self.name)
            attrs["evalx.run.status"] = status
            self.attrs.put(attrs, "evalx.run.exit_code", exit_code)
            if summary is not None:
                totals: Mapping[str, Any] = summary.get("totals") or {}
                figures = [(k, totals.get(k)) for k in ("cells", "pass", "fail", "error", "skipped", "pass_rate", "mean_score")]
                figures += [(k, summary.get(k)) for k in ("cost_usd", "judge_cost_usd", "duration_s")]
                for key, value in figures:
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        attrs[f"evalx.run.{key}"] = value
            error = f"{status}, exit {exit_code}" if status != "complete" or (exit_code or 0) != 0 else None
            end = max(time.time_ns(), self.started)
            self._emit("evalx.run", self.run_trace, self.run_span_id, None, self.started, end, attrs, error=error, ok=error is None)
            # the SDK's shutdown waits up to 30 s: it runs on a daemon thread the run waits for at most FLUSH_TIMEOUT_S
            flusher = threading.Thread(target=self.processor.shutdown, name="evalx-export-flush", daemon=True)
            flusher.start()
            flusher.join(FLUSH_TIMEOUT_S)
        except Exception as exc:
            log.debug(f"tracing export: the flush failed: {exc}")
        finally:
            self.quiet.local.ours = False
            for logger_name in _SDK_LOGGERS:
                logging.getLogger(logger_name).removeFilter(self.quiet)
        self._warn()

    def _warn(self) -> None:
        sender = self.sender
        where = shown_url(self.endpoint.url)
        if sender.failed:
            reason = (sender.reason or self.quiet.first or "the export failed").split(", retrying")[0].rstrip(".")
            reason = self.attrs.redact(reason)
            log.warning(f"tracing export: {where} did not take the run's spans ({reason}); {sender.dropped} spans not sent")
            return
        missing = self.created - sender.sent
        if missing > 0:
            log.warning(f"tracing export: {missing} of {self.created} spans were not sent to {where} within {FLUSH_TIMEOUT_S:g} s")

    @property
    def sent(self) -> int:
        return self.sender.sent


def _reason(record: Mapping[str, Any]) -> str:
    label = str(record.get("name") or record.get("type"))
    return f"{label}: {record.get('error') or record.get('reason') or ''}".rstrip(": ")


def _new_trace_id() -> int:
    return random.getrandbits(128) or 1  # W3C: never all zeros


def _new_span_id() -> int:
    return random.getrandbits(64) or 1


def _ids_of(received: object) -> tuple[int, int] | None:
    """The trace and span ids the receive side gave a cell (its ``trace`` record), or None."""
    if not isinstance(received, dict):
        return None
    try:
        return int(str(received["trace_id"]), 16), int(str(received["span_id"]), 16)
    except (KeyError, ValueError):
        return None


def _request_timeout() -> float:
    import os

    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        value = os.environ.get(name)
        if value:
            try:
                return min(REQUEST_TIMEOUT_S, float(value) / 1000.0)  # the variables are in milliseconds
            except ValueError:
                pass
    return REQUEST_TIMEOUT_S


class _Guarded:
    """The OTLP exporter behind a fuse: the first failed batch stops the export, later batches are dropped and counted."""

    def __init__(self, inner: Any, quiet: _Quiet) -> None:
        self.inner = inner
        self.quiet = quiet
        self.failed = False
        self.reason: str | None = None
        self.sent = 0
        self.dropped = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self.failed:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        self.quiet.local.ours = True
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            self.reason = f"{type(exc).__name__}: {exc}"
            result = SpanExportResult.FAILURE
        finally:
            self.quiet.local.ours = False
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed = True
            self.dropped += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def start_export(
    endpoint: Endpoint,
    *,
    run_id: str,
    name: str | None,
    redact: Callable[[str], str],
    targets: Mapping[str, TargetFacts],
    started_ns: int | None = None,
) -> RunExporter | None:
    """A :class:`RunExporter`, or None (with one warning) when the SDK is not installed."""
    if otel_sdk_missing():
        log.warning(EXPORT_INSTALL_HINT)
        return None
    return RunExporter(endpoint, run_id=run_id, name=name, redact=redact, targets=targets, started_ns=started_ns)
