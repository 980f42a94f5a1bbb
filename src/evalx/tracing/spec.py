"""``tracing:`` as a typed record: receive the spans a run's targets emit, export the run's own (docs/tracing.md)."""

# No `from __future__ import annotations`: evalx.common.typeschema reads these annotations at run time.

from dataclasses import dataclass
from typing import Annotated

from evalx.common.typeschema import PositiveInt, Schema

__all__ = ["DEFAULT_FLUSH_MS", "TracingSettings"]

#: how long a cell waits for its spans after its call by default: SDK exporters batch
DEFAULT_FLUSH_MS = 1500


@dataclass(frozen=True, kw_only=True, slots=True)
class TracingSettings:
    """``tracing:``: an OTLP/HTTP receiver on 127.0.0.1 for the run (each cell the root of its own trace), and export."""

    receive: Annotated[bool, Schema(description="Start the receiver and store each cell's spans in its results line (--trace).")] = False
    port: Annotated[
        int | None,
        Schema(description="The receiver's port on 127.0.0.1 (default: a free one, printed at the start).", minimum=1, maximum=65535),
    ] = None
    flush_ms: Annotated[
        int | None,
        Schema(
            description="How long a cell waits after its call for spans from a separate service (default 1500); "
            "spans arriving later are counted as late.",
            minimum=0,
        ),
    ] = None
    max_spans_per_cell: Annotated[
        PositiveInt | None, Schema(description="Spans kept per cell (default 1000, and about 8 MB); more are counted as dropped.")
    ] = None
    export: Annotated[
        str | None,
        Schema(
            description="Send the run's own spans (run, cell, target call, checks, judge calls) to this OTLP/HTTP traces URL "
            "(one without a path gets /v1/traces; --otlp-endpoint overrides; docs/tracing.md#export).",
            pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+",
        ),
    ] = None
