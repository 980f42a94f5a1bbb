"""A traced cell's spans as its trajectory: tool calls, their results and token usage, when the target reported none.

Two conventions are read:

- OpenTelemetry GenAI (``gen_ai.*``): a span with ``gen_ai.operation.name``
  ``execute_tool`` is a tool call (``gen_ai.tool.name``; arguments from
  ``gen_ai.tool.call.arguments``, result from ``gen_ai.tool.call.result``);
  one with ``chat``, ``text_completion``, ``generate_content`` or
  ``invoke_agent`` counts ``gen_ai.usage.input_tokens`` / ``output_tokens``.
- OpenInference (Phoenix): ``openinference.span.kind`` ``TOOL`` is a tool
  call (``tool.name``, ``input.value``, ``output.value``); ``LLM`` counts
  ``llm.token_count.prompt`` / ``completion``.

Tool calls come in span start order. A tool span with error status keeps its
status message as the result (``{"error": ...}``). Usage is summed over the
model spans that have no model span above them, so an instrumented client
inside an instrumented framework is not counted twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from evalx.common.json_types import JSON
from evalx.models import ToolCall, Trajectory
from evalx.tracing.spans import StoredSpan

__all__ = ["apply_spans", "is_model_span", "is_tool_span"]

_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "invoke_agent", "embeddings"})


def is_tool_span(span: StoredSpan) -> bool:
    a = span["attributes"]
    return a.get("gen_ai.operation.name") == "execute_tool" or a.get("openinference.span.kind") == "TOOL"


def is_model_span(span: StoredSpan) -> bool:
    a = span["attributes"]
    return a.get("gen_ai.operation.name") in _MODEL_OPERATIONS or a.get("openinference.span.kind") == "LLM"


def apply_spans(traj: Trajectory, spans: Sequence[StoredSpan]) -> bool:
    """Fill ``traj``'s empty tool calls and usage from ``spans``; True when anything came from them."""
    used = False
    if not traj.tool_calls:
        calls = [_tool_call(s) for s in spans if is_tool_span(s)]
        if calls:
            traj.tool_calls = calls
            used = True
    usage = traj.usage
    if not (usage.input_tokens or usage.output_tokens):
        by_id = {s["span_id"]: s for s in spans}
        got_in = got_out = 0
        for span in spans:
            if not is_model_span(span) or _under_model_span(span, by_id):
                continue
            a = span["attributes"]
            got_in += _count(a.get("gen_ai.usage.input_tokens", a.get("llm.token_count.prompt")))
            got_out += _count(a.get("gen_ai.usage.output_tokens", a.get("llm.token_count.completion")))
        if got_in or got_out:
            usage.input_tokens, usage.output_tokens = got_in, got_out
            used = True
    return used


def _under_model_span(span: StoredSpan, by_id: dict[str, StoredSpan]) -> bool:
    seen = 0
    parent = by_id.get(span["parent_span_id"] or "")
    while parent is not None and seen < 64:
        if is_model_span(parent):
            return True
        parent = by_id.get(parent["parent_span_id"] or "")
        seen += 1
    return False


def _count(value: JSON) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return 0
    return int(value)


def _tool_call(span: StoredSpan) -> ToolCall:
    a = span["attributes"]
    name = a.get("gen_ai.tool.name", a.get("tool.name"))
    if not isinstance(name, str) or not name:
        name = span["name"]
    args = _parsed(a.get("gen_ai.tool.call.arguments", a.get("input.value", a.get("tool.parameters"))))
    result = _parsed(a.get("gen_ai.tool.call.result", a.get("output.value")))
    if span["status"] == "error" and result is None:
        result = {"error": span["status_message"] or "error"}
    return ToolCall(name, args, result)


def _parsed(value: JSON) -> JSON:
    """A JSON text attribute (how both conventions carry arguments and results) as its value; anything else as is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            parsed: JSON = json.loads(value)
            return parsed
        except ValueError:
            return value
    return value
