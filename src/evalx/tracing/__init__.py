"""Tracing: receive the OpenTelemetry spans a cell's target emits, and grade them (docs/tracing.md).

``spans.py`` (the stored span, decoded from OTLP or the SDK), ``collector.py``
(spans sorted to their cell by trace id, bounded; late ones counted),
``receiver.py`` (the OTLP/HTTP receiver on 127.0.0.1), ``inprocess.py`` (a
Python target's SDK spans handed over directly), ``trajectory.py`` (GenAI
and OpenInference spans as tool calls and usage). The ``trace_*`` assertions
live in :mod:`evalx.assertions.traces`. Everything that needs the
``opentelemetry-proto`` package imports it lazily: ``evalx-runner[otel]``.
"""

from __future__ import annotations

from evalx.tracing.spans import MAX_SPANS_PER_CELL, StoredSpan, TraceRecord

__all__ = ["INSTALL_HINT", "MAX_SPANS_PER_CELL", "StoredSpan", "TraceRecord", "otel_missing"]

#: the one line a run with tracing and without the extra prints
INSTALL_HINT = "tracing needs the OpenTelemetry packages: install evalx-runner[otel]"


def otel_missing() -> str | None:
    """:data:`INSTALL_HINT` when ``opentelemetry-proto`` cannot be imported, else None."""
    try:
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None
