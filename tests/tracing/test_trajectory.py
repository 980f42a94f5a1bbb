"""GenAI and OpenInference spans as a trajectory: tool calls, results, usage (no double counting), only when the target gave none."""

from __future__ import annotations

from typing import Any

from evalx.models import ToolCall, Trajectory, Usage
from evalx.tracing.spans import StoredSpan
from evalx.tracing.trajectory import apply_spans


def span(span_id: str, parent: str | None, start: int, attributes: dict[str, Any], status: str = "unset", message: str = "") -> StoredSpan:
    return {
        "name": f"s{span_id}",
        "trace_id": "a" * 32,
        "span_id": span_id,
        "parent_span_id": parent,
        "start_unix_nano": start,
        "end_unix_nano": start + 10,
        "duration_ms": 0.0,
        "status": status,  # type: ignore[typeddict-item]
        "status_message": message,
        "kind": "internal",
        "service": None,
        "attributes": attributes,
    }


SPANS = [
    # an instrumented framework's LLM span with an instrumented client's LLM span inside: counted once
    span("1", "cell", 1, {"openinference.span.kind": "LLM", "llm.token_count.prompt": 100, "llm.token_count.completion": 20}),
    span("2", "1", 2, {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20}),
    span("4", "cell", 4, {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": '{"id": 7}', "output.value": "found"}),
    span("3", "cell", 3, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}, "error", "timeout"),
    span("5", "cell", 5, {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 1}),
]


def test_tool_calls_and_usage_come_from_the_spans() -> None:
    traj = Trajectory(text="x")
    ordered = sorted(SPANS, key=lambda s: s["start_unix_nano"])
    assert apply_spans(traj, ordered) is True
    assert traj.tool_calls == [ToolCall("search", None, {"error": "timeout"}), ToolCall("lookup", {"id": 7}, "found")]
    assert (traj.usage.input_tokens, traj.usage.output_tokens) == (105, 21)


def test_what_the_target_reported_is_kept() -> None:
    traj = Trajectory(text="x", tool_calls=[ToolCall("own")], usage=Usage(3, 4))
    assert apply_spans(traj, SPANS) is False
    assert traj.tool_names == ["own"] and (traj.usage.input_tokens, traj.usage.output_tokens) == (3, 4)


def test_spans_without_conventions_change_nothing() -> None:
    traj = Trajectory(text="x")
    assert apply_spans(traj, [span("9", "cell", 1, {"http.route": "/x"})]) is False
    assert traj.tool_calls == [] and traj.usage.input_tokens == 0
