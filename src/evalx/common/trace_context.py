"""The cell's trace context: which trace a cell's calls belong to, and whether this run receives traces.

Tracing (``tracing: {receive: true}``, docs/tracing.md) makes each cell the
root of its own trace. :data:`CURRENT` holds the cell's :class:`CellSpan`
while its target runs: the HTTP client adds its W3C ``traceparent`` header to
every request, and a Python target runs under it as the OpenTelemetry context
(:data:`ACTIVATE`, installed by :mod:`evalx.tracing.inprocess` when the SDK is
there). Nothing here imports OpenTelemetry: with tracing off a request pays
one context-variable read.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["ACTIVATE", "CURRENT", "RECEIVING", "CellSpan", "activated", "new_cell_span"]


@dataclass(frozen=True, slots=True)
class CellSpan:
    """A cell's own trace id (32 hex digits) and the id of its root span (16 hex digits), the parent of what it calls."""

    trace_id: str
    span_id: str

    def traceparent(self) -> str:
        """The W3C ``traceparent`` header value: version 00, sampled."""
        return f"00-{self.trace_id}-{self.span_id}-01"


def new_cell_span() -> CellSpan:
    """A new trace for a cell: random ids, never all zeros (which W3C forbids)."""
    trace_id = secrets.token_hex(16)
    span_id = secrets.token_hex(8)
    if trace_id == "0" * 32 or span_id == "0" * 16:  # 2^-64 odds; the spec makes such ids invalid
        return new_cell_span()
    return CellSpan(trace_id, span_id)


#: the cell whose target is running in this context, None outside a traced cell
CURRENT: ContextVar[CellSpan | None] = ContextVar("evalx_cell_span", default=None)

#: whether the run being loaded receives traces (the ``trace_*`` assertions are a validate error without it)
RECEIVING: ContextVar[bool] = ContextVar("evalx_receiving_traces", default=False)

#: set by :mod:`evalx.tracing.inprocess` when the OpenTelemetry SDK is present: makes a cell's span the
#: current OpenTelemetry context and returns what undoes it
ACTIVATE: list[Callable[[CellSpan], Callable[[], None]]] = []


def activated(span: CellSpan | None) -> Callable[[], None] | None:
    """Make ``span`` the current OpenTelemetry context in this thread or task; the undo, or None when there is nothing to do."""
    if span is None or not ACTIVATE:
        return None
    return ACTIVATE[0](span)
