"""Tracing: OpenTelemetry both ways (docs/tracing.md).

Receive: ``spans.py`` (the stored span, decoded from OTLP or the SDK),
``collector.py`` (spans sorted to their cell by trace id, bounded; late ones
counted), ``receiver.py`` (the OTLP/HTTP receiver on 127.0.0.1),
``inprocess.py`` (a Python target's SDK spans handed over directly),
``trajectory.py`` (GenAI and OpenInference spans as tool calls and usage); the
``trace_*`` assertions live in :mod:`evalx.assertions.traces`. Export:
``export.py`` sends a run's own spans (run, cell, target call, checks, judge
calls) to an OTLP/HTTP endpoint, built from the cell results as they are
recorded. Everything that needs the OpenTelemetry packages imports them
lazily: ``evalx-runner[otel]``.
"""

from __future__ import annotations

from evalx.tracing.export import EXPORT_INSTALL_HINT, Endpoint, RunExporter, find_endpoint, start_export
from evalx.tracing.spans import MAX_SPANS_PER_CELL, StoredSpan, TraceRecord

__all__ = [
    "EXPORT_INSTALL_HINT",
    "INSTALL_HINT",
    "MAX_SPANS_PER_CELL",
    "Endpoint",
    "RunExporter",
    "StoredSpan",
    "TraceRecord",
    "find_endpoint",
    "otel_missing",
    "start_export",
]

#: the one line a run with tracing and without the extra prints
INSTALL_HINT = "tracing needs the OpenTelemetry packages: install evalx-runner[otel]"


def otel_missing() -> str | None:
    """:data:`INSTALL_HINT` when ``opentelemetry-proto`` cannot be imported, else None."""
    try:
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None
