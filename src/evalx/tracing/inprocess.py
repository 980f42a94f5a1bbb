"""A Python target's OpenTelemetry SDK spans, handed to the run's collector directly (no exporter, no encoding).

When tracing is on and ``opentelemetry-sdk`` is importable, :func:`install`
(called after the targets started, so a target module that set up its own
``TracerProvider`` at import is seen) does two things:

- the cell's span becomes the current OpenTelemetry context while a Python
  target runs (:data:`evalx.common.trace_context.ACTIVATE`), so the spans the
  user's code starts are children of the cell's span, in the cell's trace;
- a :class:`CellSpanProcessor` is added to the global SDK ``TracerProvider``
  — the user's own when their code set one (their exporters keep working), a
  new one set as the global provider when none was set. It hands over only
  spans of a cell's trace, on the run's event loop, and counts those started
  and not yet ended so the cell waits for exactly them.

A provider set by user code *after* this (lazily, on the first call) is
refused by the OpenTelemetry API ("Overriding of current TracerProvider is
not allowed"): set it at import time (docs/tracing.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from evalx.common import trace_context
from evalx.common.trace_context import CellSpan
from evalx.tracing.collector import Collector
from evalx.tracing.spans import from_sdk

log = logging.getLogger(__name__)

__all__ = ["install"]


def install(collector: Collector, loop: asyncio.AbstractEventLoop) -> Callable[[], None] | None:
    """Route the in-process SDK's cell spans to ``collector``; the undo, or None without the SDK."""
    try:
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    except ImportError:
        return None

    class CellSpanProcessor(SpanProcessor):
        """Hands each ended span of an open cell's trace to the collector, on the loop."""

        def __init__(self) -> None:
            self.active = True

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            if not self.active:
                return
            trace_id = format(span.context.trace_id, "032x")
            if trace_id in collector.open:
                _soon(collector.started, trace_id, 1)

        def on_end(self, span: Any) -> None:
            if not self.active:
                return
            trace_id = format(span.context.trace_id, "032x")
            if trace_id in collector.open or trace_id in collector.closed:
                stored = from_sdk(span)
                _soon(_hand_over, stored)

        def shutdown(self) -> None:
            self.active = False

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    def _hand_over(stored: Any) -> None:
        collector.add([stored])
        collector.started(stored["trace_id"], -1)

    def _soon(fn: Callable[..., None], *args: Any) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed: the run is over, the span is not any cell's any more
            pass

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        log.debug("tracing: no OpenTelemetry TracerProvider was set; evalx set one")
    processor = CellSpanProcessor()
    provider.add_span_processor(processor)

    def activate(cell: CellSpan) -> Callable[[], None]:
        parent = trace.NonRecordingSpan(
            trace.SpanContext(int(cell.trace_id, 16), int(cell.span_id, 16), is_remote=True, trace_flags=trace.TraceFlags(1))
        )
        token = otel_context.attach(trace.set_span_in_context(parent))
        return lambda: otel_context.detach(token)

    trace_context.ACTIVATE[:] = [activate]

    def undo() -> None:
        processor.active = False
        trace_context.ACTIVATE.clear()

    return undo
