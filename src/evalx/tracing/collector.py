"""Spans sorted to their cell by trace id: bounded per cell, late ones counted, never attached to the wrong cell.

Each traced cell opens a :class:`CellSpans` under its own trace id before
its target runs and closes it once the call's spans are in (see
:meth:`Collector.settle`). A span is kept only by the cell whose trace id it
carries; one for a trace that was closed is *late* (counted), one for a trace
no cell of this run opened is *unknown* (counted). Everything runs on the
run's event loop: the receiver's handler and the in-process span processor
(through ``call_soon_threadsafe``) call :meth:`Collector.add` there.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from evalx.common.trace_context import CellSpan
from evalx.tracing.spans import MAX_SPANS_PER_CELL, StoredSpan, TraceRecord, TracingReport

__all__ = ["CellSpans", "Collector", "TraceCounts", "TracedTally"]

#: closed traces remembered to tell a late span from an unknown one
REMEMBERED = 100_000
#: the most bytes of spans one cell keeps (about, as JSON): more are counted as dropped
MAX_TRACE_BYTES = 8 * 1024 * 1024


def _size(span: StoredSpan) -> int:
    """About what ``span`` takes in a results line: its attributes as JSON, and the fixed fields."""
    attributes = span["attributes"]
    return 300 + len(span["name"]) + len(span["status_message"]) + (len(json.dumps(attributes, default=str)) if attributes else 0)


@dataclass
class CellSpans:
    """The spans received so far for one cell."""

    cell: CellSpan
    limit: int
    spans: list[StoredSpan] = field(default_factory=list)
    dropped: int = 0
    #: about how many bytes the kept spans take in the results line (:data:`MAX_TRACE_BYTES` at most)
    bytes: int = 0
    #: spans the in-process SDK started under this cell and has not handed over yet
    pending: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def settled(self) -> bool:
        """Every span received hangs off the cell's span or another received span, and the in-process SDK owes none."""
        if self.pending > 0:
            return False
        if not self.spans:
            return False
        known = {s["span_id"] for s in self.spans}
        known.add(self.cell.span_id)
        return all(s["parent_span_id"] in known for s in self.spans)


@dataclass
class TraceCounts:
    """The run's tally, for ``summary.json``."""

    received: int = 0
    late: int = 0
    unknown: int = 0
    dropped: int = 0


class Collector:
    """The open cells by trace id, and the counts of spans that belong to none of them."""

    def __init__(self, max_spans_per_cell: int = MAX_SPANS_PER_CELL) -> None:
        self.limit = max_spans_per_cell
        self.open: dict[str, CellSpans] = {}
        self.closed: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.counts = TraceCounts()

    def begin(self, cell: CellSpan) -> CellSpans:
        bucket = self.open[cell.trace_id] = CellSpans(cell, self.limit)
        return bucket

    def add(self, spans: Iterable[StoredSpan]) -> None:
        """Give each span to the open cell of its trace; count the late, unknown and dropped ones."""
        counts = self.counts
        touched: set[str] = set()
        for span in spans:
            counts.received += 1
            trace_id = span["trace_id"]
            bucket = self.open.get(trace_id)
            if bucket is None:
                if trace_id in self.closed:
                    counts.late += 1
                else:
                    counts.unknown += 1
                continue
            size = _size(span)
            if len(bucket.spans) < bucket.limit and bucket.bytes + size <= MAX_TRACE_BYTES:
                bucket.spans.append(span)
                bucket.bytes += size
            else:
                bucket.dropped += 1
                counts.dropped += 1
            touched.add(trace_id)
        for trace_id in touched:
            self.open[trace_id].changed.set()

    def started(self, trace_id: str, delta: int) -> None:
        """The in-process SDK started (+1) or ended (-1, with the span handed over by :meth:`add`) a span of this trace."""
        bucket = self.open.get(trace_id)
        if bucket is not None:
            bucket.pending += delta
            if delta < 0:
                bucket.changed.set()

    async def settle(self, bucket: CellSpans, wait_s: float, *, in_process: bool = False) -> None:
        """Wait until ``bucket`` is :meth:`~CellSpans.settled`, at most ``wait_s`` seconds.

        ``in_process`` (a Python target): the SDK said which spans it started, so the wait ends as soon as
        it owes none, also when it started none (a target that does not trace is not kept waiting).
        """
        await asyncio.sleep(0)  # the SDK's hand-overs queued from the target's thread run first
        end = time.monotonic() + wait_s
        while not (bucket.pending <= 0 if in_process else bucket.settled()):
            left = end - time.monotonic()
            if left <= 0:
                return
            bucket.changed.clear()
            try:
                await asyncio.wait_for(bucket.changed.wait(), left)
            except (TimeoutError, asyncio.TimeoutError):
                return

    def end(self, bucket: CellSpans) -> list[StoredSpan]:
        """Close the cell's trace: its spans in start order; any arriving later are late."""
        trace_id = bucket.cell.trace_id
        self.open.pop(trace_id, None)
        self.closed[trace_id] = None
        if len(self.closed) > REMEMBERED:
            self.closed.popitem(last=False)
        return sorted(bucket.spans, key=lambda s: (s["start_unix_nano"], s["end_unix_nano"]))


class TracedTally:
    """The run's ``summary.json`` ``tracing``, counted from the cells' results as they are recorded."""

    def __init__(self) -> None:
        self.report: TracingReport = {
            "cells_traced": 0,
            "spans": 0,
            "late_spans": 0,
            "dropped_spans": 0,
            "unknown_spans": 0,
            "trajectory_from_trace": 0,
        }

    def add(self, trace: TraceRecord) -> None:
        report = self.report
        if trace["spans"]:
            report["cells_traced"] += 1
            report["spans"] += len(trace["spans"])
        report["dropped_spans"] += trace["dropped"]
        if trace["source"] == "trace":
            report["trajectory_from_trace"] += 1

    def finish(self, counts: TraceCounts | None) -> None:
        """Add what only the receiver knows: the late and unknown spans."""
        if counts is not None:
            self.report["late_spans"] = counts.late
            self.report["unknown_spans"] = counts.unknown
