"""Tracing: OpenTelemetry both ways (docs/tracing.md).

``export.py`` sends a run's own spans (run, cell, target call, checks, judge
calls) to an OTLP/HTTP endpoint, built from the cell results as they are
recorded. Everything that needs the OpenTelemetry SDK imports it lazily:
``evalx-runner[otel]``.
"""

from __future__ import annotations

from evalx.tracing.export import EXPORT_INSTALL_HINT, Endpoint, RunExporter, find_endpoint, start_export

__all__ = ["EXPORT_INSTALL_HINT", "Endpoint", "RunExporter", "find_endpoint", "start_export"]
