"""Built-in assertion types (importing this module registers them)."""

from __future__ import annotations

from evalx.assertions import deterministic, model_graded, text_metrics, tool_results, tools, traces, trajectory  # noqa: F401
