"""``evalx capture`` on OpenTelemetry exports: spans written by the real SDK, serialized as OTLP/JSON, become cases that validate and run.

The export is made the way a collector's file exporter makes one: the SDK's
spans encoded as an ``ExportTraceServiceRequest`` by the OTLP exporter's own
encoder, one JSON document a line (protobuf's JSON mapping: base64 ids,
camelCase keys); the hex-id OTLP/JSON spelling, Phoenix's span list and
Jaeger's JSON are read too.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from evalx.cli import main

pytest.importorskip("opentelemetry.sdk.trace", reason="the SDK writes the export")

AGENT = """
def agent(question):
    if "order" in question:
        return {"text": "Your order 1234 ships tomorrow.",
                "tool_calls": [{"name": "lookup_order", "args": {"order": "1234"}}, {"name": "send_email", "args": {}}],
                "usage": {"input_tokens": 60, "output_tokens": 12}}
    return {"text": "Done.", "tool_calls": [], "usage": {"input_tokens": 10, "output_tokens": 2}}
"""


def sdk_export() -> tuple[list[str], dict[str, str]]:
    """Three traces made with the OpenTelemetry SDK, as JSON lines; and each trace's id by what it is."""
    from google.protobuf import json_format
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "support-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    ids = {}

    # a GenAI-conventions agent that went well: two model calls, two tool executions
    with tracer.start_as_current_span(
        "invoke_agent support",
        attributes={"openinference.span.kind": "AGENT", "input.value": "Where is my order 1234?", "input.mime_type": "text/plain"},
    ) as root:
        ids["golden"] = format(root.get_span_context().trace_id, "032x")
        messages = [
            {"role": "system", "parts": [{"type": "text", "content": "You are a support agent."}]},
            {"role": "user", "parts": [{"type": "text", "content": "Where is my order 1234?"}]},
        ]
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages)}
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=attrs) as chat:
            chat.set_attribute("gen_ai.usage.input_tokens", 50)
            chat.set_attribute("gen_ai.usage.output_tokens", 10)
        for tool, args in (("lookup_order", '{"order": "1234"}'), ("send_email", "{}")):
            tool_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.arguments": args}
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes=tool_attrs):
                pass
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes={"gen_ai.operation.name": "chat"}) as chat:
            chat.set_attribute("gen_ai.usage.input_tokens", 60)
            chat.set_attribute("gen_ai.usage.output_tokens", 12)
        root.set_attribute("output.value", "Your order 1234 ships tomorrow.")

    # an OpenInference model call that failed: a regression case
    with tracer.start_as_current_span(
        "ChatCompletion",
        attributes={
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Cancel my subscription",
            "llm.token_count.prompt": 7,
            "llm.token_count.completion": 0,
        },
    ) as failed:
        ids["failed"] = format(failed.get_span_context().trace_id, "032x")
        failed.set_status(trace.Status(trace.StatusCode.ERROR, "rate limited"))

    # an OpenInference model call that asked for a tool (its execution is not traced)
    with tracer.start_as_current_span(
        "ChatCompletion",
        attributes={
            "openinference.span.kind": "LLM",
            "input.value": '{"messages": []}',
            "input.mime_type": "application/json",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Refund order 77",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Refunded.",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "refund",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"order": 77}',
        },
    ) as asked:
        ids["asked"] = format(asked.get_span_context().trace_id, "032x")

    spans = list(memory.get_finished_spans())
    # a collector writes what arrives, a batch a line: here each span its own request, out of order
    lines = [json_format.MessageToJson(encode_spans([span]), indent=None) for span in reversed(spans)]
    return lines, ids


def capture(*args: str) -> Any:
    return CliRunner().invoke(main, ["capture", *args])


def test_an_sdk_export_becomes_cases_that_validate_and_run(tmp_path: Path) -> None:
    lines, ids = sdk_export()
    export = tmp_path / "traces.jsonl"
    export.write_text("\n".join(lines) + "\n")
    result = capture(str(export), "-o", str(tmp_path / "cases"))
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (tmp_path / "cases").iterdir())
    assert files == sorted([f"prod-trace-{ids['golden']}.yaml", f"prod-regression-{ids['failed']}.yaml", f"prod-trace-{ids['asked']}.yaml"])

    golden = yaml.safe_load((tmp_path / "cases" / f"prod-trace-{ids['golden']}.yaml").read_text())
    assert golden["input"] == "Where is my order 1234?"
    assert golden["system"] == "You are a support agent."
    assert golden["expected"] == "Your order 1234 ships tomorrow."
    assert {
        "type": "trajectory_match",
        "tools": ["lookup_order", "send_email"],
        "mode": "in_order",
        "name": "the production trajectory",
    } in golden["assert"]
    assert {"type": "max_tokens", "value": int(132 * 1.5), "count": "total"} in golden["assert"]
    assert golden["metadata"]["tool_calls"] == [{"name": "lookup_order", "args": {"order": "1234"}}, {"name": "send_email", "args": {}}]

    failed = yaml.safe_load((tmp_path / "cases" / f"prod-regression-{ids['failed']}.yaml").read_text())
    assert failed["input"] == "Cancel my subscription"
    assert "rate limited" in failed["metadata"]["failure_reason"] and {"type": "completed"} in failed["assert"]

    asked = yaml.safe_load((tmp_path / "cases" / f"prod-trace-{ids['asked']}.yaml").read_text())
    assert asked["input"] == "Refund order 77" and asked["expected"] == "Refunded."  # the JSON request body is not the input
    assert asked["metadata"]["tool_calls"] == [{"name": "refund", "args": {"order": 77}}]

    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: captured
            targets:
              - {id: app, type: python, callable: "agent.py:agent"}
            datasets:
              - {id: prod, path: cases}
            """
        )
    )
    validate = CliRunner().invoke(main, ["validate", "-c", str(tmp_path / "evalconfig.yaml")])
    assert validate.exit_code == 0, validate.output
    ran = CliRunner().invoke(main, ["run", "-c", str(tmp_path / "evalconfig.yaml"), "--json"])
    assert ran.exit_code in (0, 1), ran.output
    cells = {}
    run_dir = next((tmp_path / "runs").iterdir())
    from evalx.results.store import read_results

    for cell in read_results(run_dir / "results.jsonl"):
        cells[cell["case_id"]] = cell
    assert cells[f"prod-trace-{ids['golden']}"]["status"] == "pass"  # the same trajectory, within the budget
    assert cells[f"prod-trace-{ids['asked']}"]["status"] == "fail"  # it never calls refund
    assert len(cells) == 3

    again = capture(str(export), "-o", str(tmp_path / "cases"))  # the batch rules: nothing overwritten without --force
    assert again.exit_code != 0 and "already exist" in again.output


def test_the_hex_otlp_json_phoenix_and_jaeger_shapes(tmp_path: Path) -> None:
    trace_id, root_id, tool_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "eee19b7ec3c1b173"
    otlp = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": root_id,
                                "name": "agent",
                                "startTimeUnixNano": "1000",
                                "attributes": [
                                    {"key": "input.value", "value": {"stringValue": "hello"}},
                                    {"key": "output.value", "value": {"stringValue": "hi there"}},
                                ],
                            },
                            {
                                "traceId": trace_id,
                                "spanId": tool_id,
                                "parentSpanId": root_id,
                                "name": "execute_tool greet",
                                "startTimeUnixNano": "2000",
                                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}],
                            },
                        ]
                    }
                ],
            }
        ]
    }
    phoenix = {
        "data": [
            {
                "name": "agent",
                "context": {"trace_id": "a" * 32, "span_id": "b" * 16},
                "span_kind": "AGENT",
                "parent_id": None,
                "start_time": "2026-01-01T12:00:00+00:00",
                "status_code": "OK",
                "attributes": {"input.value": "question", "output.value": "answer"},
            },
            {
                "name": "lookup",
                "context": {"trace_id": "a" * 32, "span_id": "c" * 16},
                "span_kind": "TOOL",
                "parent_id": "b" * 16,
                "start_time": "2026-01-01T12:00:01+00:00",
                "status_code": "OK",
                "attributes": {"tool.name": "lookup", "input.value": '{"q": 1}'},
            },
        ],
        "next_cursor": None,
    }
    jaeger = {
        "data": [
            {
                "traceID": "d" * 32,
                "spans": [
                    {
                        "traceID": "d" * 32,
                        "spanID": "e" * 16,
                        "operationName": "agent",
                        "references": [],
                        "startTime": 10,
                        "tags": [
                            {"key": "input.value", "type": "string", "value": "broken"},
                            {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                            {"key": "otel.status_description", "type": "string", "value": "boom"},
                        ],
                    }
                ],
            }
        ]
    }
    for name, doc in (("otlp.json", otlp), ("phoenix.json", phoenix), ("jaeger.json", jaeger)):
        (tmp_path / name).write_text(json.dumps(doc))
    result = capture(str(tmp_path / "otlp.json"), str(tmp_path / "phoenix.json"), str(tmp_path / "jaeger.json"), "-o", str(tmp_path / "c"))
    assert result.exit_code == 0, result.output
    one = yaml.safe_load((tmp_path / "c" / f"prod-trace-{trace_id}.yaml").read_text())
    assert one["input"] == "hello" and one["expected"] == "hi there" and one["metadata"]["tool_calls"][0]["name"] == "greet"
    two = yaml.safe_load((tmp_path / "c" / f"prod-trace-{'a' * 32}.yaml").read_text())
    assert two["input"] == "question" and two["metadata"]["tool_calls"] == [{"name": "lookup", "args": {"q": 1}}]
    three = yaml.safe_load((tmp_path / "c" / f"prod-regression-{'d' * 32}.yaml").read_text())
    assert three["input"] == "broken" and "boom" in three["metadata"]["failure_reason"]


def test_the_example_capture_then_run(tmp_path: Path) -> None:
    """examples/tracing/export: its collector export becomes a case the example's bot passes (as its README-comment says)."""
    import shutil

    root = Path(__file__).resolve().parents[2] / "examples"
    shutil.copytree(root / "tracing", tmp_path / "examples" / "tracing")
    shutil.copy(root / "agents.py", tmp_path / "examples" / "agents.py")
    example = tmp_path / "examples" / "tracing" / "export"
    assert capture(str(example / "traces.jsonl"), "--out", str(example / "captured")).exit_code == 0
    config = example / "evalconfig.yaml"
    config.write_text(config.read_text() + "  - {id: production, path: captured}\n")
    ran = CliRunner().invoke(main, ["run", "-c", str(config), "-q"])
    assert ran.exit_code == 0, ran.output
    assert "3 pass" in ran.output
