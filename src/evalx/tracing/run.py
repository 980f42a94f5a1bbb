"""A traced run: its receiver, its collector and the in-process hand-over, and what each cell does with them.

:meth:`RunTracing.start` (the local executor, before the cells) starts the
receiver and, once the targets started, :meth:`RunTracing.adopt_sdk` routes
a Python target's SDK spans in. For each cell the executor calls
:meth:`RunTracing.begin` before the call (a new trace; its span is the
current context) and :meth:`RunTracing.finish` after it: wait for the spans
(``flush_ms`` at most), close the trace, fill the trajectory from the spans
when the target reported none, and return the cell's ``trace`` record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from evalx.common.trace_context import CellSpan, new_cell_span
from evalx.models import Trajectory
from evalx.tracing.collector import CellSpans, Collector, TraceCounts
from evalx.tracing.receiver import Receiver
from evalx.tracing.spans import MAX_SPANS_PER_CELL, TraceRecord
from evalx.tracing.spec import DEFAULT_FLUSH_MS, TracingSettings
from evalx.tracing.trajectory import apply_spans

log = logging.getLogger(__name__)

__all__ = ["RunTracing"]


class RunTracing:
    """The run's receiver and collector; ``endpoint`` is the receiver's base URL."""

    def __init__(self, settings: TracingSettings) -> None:
        self.settings = settings
        self.collector = Collector(settings.max_spans_per_cell or MAX_SPANS_PER_CELL)
        self.flush_s = (DEFAULT_FLUSH_MS if settings.flush_ms is None else settings.flush_ms) / 1000.0
        self.receiver = Receiver(self.collector, settings.port or 0)
        self.endpoint = ""
        self._undo_sdk: Callable[[], None] | None = None

    async def start(self) -> str:
        self.endpoint = await self.receiver.start()
        log.info(
            f"tracing: receiving OTLP/HTTP spans at {self.endpoint}/v1/traces "
            f"(a separate service: OTEL_EXPORTER_OTLP_ENDPOINT={self.endpoint})"
        )
        return self.endpoint

    def adopt_sdk(self) -> None:
        """Hand a Python target's SDK spans to the collector (after the targets started: their own provider is kept)."""
        from evalx.tracing.inprocess import install

        self._undo_sdk = install(self.collector, asyncio.get_running_loop())

    def begin(self) -> tuple[CellSpan, CellSpans]:
        cell = new_cell_span()
        return cell, self.collector.begin(cell)

    async def finish(self, bucket: CellSpans, traj: Trajectory, target_type: str, price: Any = None) -> TraceRecord:
        """Wait for the cell's spans, close its trace, and take tool calls and usage from them when the target gave none.

        ``price`` (an engine's ``pricing:``) prices usage that came from the spans, as it would the engine's own.
        """
        if target_type == "python":
            await self.collector.settle(bucket, self.flush_s, in_process=True)
        elif target_type == "engine" or bucket.spans:  # a separate service: its exporter batches
            await self.collector.settle(bucket, self.flush_s)
        spans = self.collector.end(bucket)
        used = apply_spans(traj, spans) if spans and traj.error is None else False
        usage = traj.usage
        if used and price is not None and traj.cost_usd is None and (usage.input_tokens or usage.output_tokens):
            traj.cost_usd = price.cost(usage.input_tokens, usage.output_tokens, usage.cache_hit_tokens)
            traj.cost_note = None
        return {
            "trace_id": bucket.cell.trace_id,
            "span_id": bucket.cell.span_id,
            "spans": spans,
            "dropped": bucket.dropped,
            "source": "trace" if used else "target",
        }

    @property
    def counts(self) -> TraceCounts:
        return self.collector.counts

    async def aclose(self) -> None:
        if self._undo_sdk is not None:
            self._undo_sdk()
            self._undo_sdk = None
        await self.receiver.aclose()
