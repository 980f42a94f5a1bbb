"""providers/openai-responses.yaml against a fake POST /v1/responses written from OpenAI's API reference.

Checks the request (path, bearer key, `instructions`, `input`, flat function tools) and reads the documented answers
through a real `evalx run`: output items (reasoning skipped), function calls, usage with cached tokens, the
incomplete reasons, the typed stream events, and the error classes (401 fatal, 429 retried, quota fatal, 5xx retried).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_server import Answer, ContractServer, run_cell

KEY = "sk-responses-test-41c9e2"
TOOL = "tools: [{name: get_weather, description: Current weather, parameters: {type: object, properties: {city: {type: string}}}}]"


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, server: ContractServer) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")


def response(output: list[dict[str, object]], *, status: str = "completed", reason: str | None = None) -> dict[str, object]:
    return {
        "id": "resp_67ccd2bed1ec8190",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "usage": {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": 12},
            "output_tokens": 87,
            "output_tokens_details": {"reasoning_tokens": 64},
            "total_tokens": 123,
        },
    }


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking about France"}]}


def message(text: str) -> dict[str, object]:
    return {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def test_text_skips_reasoning_and_reads_usage(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=response([REASONING, message("The capital of France"), message(" is Paris.")])))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1", 'system: "Answer briefly."\nparams: {max_output_tokens: 200}')
    assert code == 0, output
    [req] = server.requests
    assert (req["method"], req["path"]) == ("POST", "/v1/responses")
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    assert req["body"] == {
        "model": "gpt-4.1",
        "instructions": "Answer briefly.",
        "max_output_tokens": 200,
        "input": [{"role": "user", "content": "What is the capital of France?"}],
    }
    out = cell["output"]
    assert out["text"] == "The capital of France is Paris."
    assert out["usage"] == {"input_tokens": 36, "output_tokens": 87, "cache_hit_tokens": 12}
    assert cell["stop_reason"] == "completed"
    # priced from the definition: (36-12) input, 12 cached, 87 output
    assert cell["cost_usd"] == pytest.approx((24 * 2.00 + 12 * 0.50 + 87 * 8.00) / 1e6)


def test_function_calls_and_flat_tools(server: ContractServer, tmp_path: Path) -> None:
    call = {
        "type": "function_call",
        "id": "fc_12345xyz",
        "call_id": "call_12345xyz",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    }
    server.script(Answer(body=response([REASONING, call])))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1", TOOL)
    assert code == 0, output
    assert server.requests[0]["body"]["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": False,
        }
    ]
    assert cell["output"]["text"] == ""
    assert [(c["name"], c["args"]) for c in cell["output"]["tool_calls"]] == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize(("reason", "truncated"), [("max_output_tokens", True), ("content_filter", False)])
def test_incomplete_reasons_are_the_stop_reason(server: ContractServer, tmp_path: Path, reason: str, truncated: bool) -> None:
    server.script(Answer(body=response([message("The capital")], status="incomplete", reason=reason)))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1")
    assert cell["stop_reason"] == reason
    assert cell["output"]["text"] == "The capital"
    assert bool(cell.get("truncated")) is truncated


def test_stream_events(server: ContractServer, tmp_path: Path) -> None:
    done = response(
        [message("Paris."), {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": '{"city":"Paris"}'}]
    )
    item = {"type": "function_call", "id": "fc_9", "call_id": "call_9", "name": "get_weather", "arguments": ""}
    events = [
        ("response.created", {"type": "response.created", "response": {**done, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": REASONING}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 1, "item": message("")}),
        (
            "response.output_text.delta",
            {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Par"},
        ),
        (
            "response.output_text.delta",
            {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "is."},
        ),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 2, "item": item}),
        (
            "response.function_call_arguments.delta",
            {"type": "response.function_call_arguments.delta", "item_id": "fc_9", "output_index": 2, "delta": '{"city":'},
        ),
        (
            "response.function_call_arguments.delta",
            {"type": "response.function_call_arguments.delta", "item_id": "fc_9", "output_index": 2, "delta": '"Paris"}'},
        ),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1", f"stream: true\n{TOOL}")
    assert code == 0, output
    assert server.requests[0]["body"]["stream"] is True
    out = cell["output"]
    assert out["text"] == "Paris."
    assert [(c["name"], c["args"]) for c in out["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert out["usage"] == {"input_tokens": 36, "output_tokens": 87, "cache_hit_tokens": 12}
    assert cell["stop_reason"] == "completed" and cell["ttft_ms"] is not None


def test_an_incomplete_stream_ends_with_its_reason(server: ContractServer, tmp_path: Path) -> None:
    cut = response([message("The capital")], status="incomplete", reason="max_output_tokens")
    events = [
        (
            "response.output_text.delta",
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "The capital"},
        ),
        ("response.incomplete", {"type": "response.incomplete", "response": cut}),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1", "stream: true")
    assert cell["status"] != "error", cell["error"]
    assert cell["output"]["text"] == "The capital"
    assert cell["stop_reason"] == "max_output_tokens" and cell["truncated"]
    assert cell["output"]["usage"]["output_tokens"] == 87


def test_stream_error_event_is_the_cells_error(server: ContractServer, tmp_path: Path) -> None:
    events = [("error", {"type": "error", "code": "server_error", "message": "The server had an error", "param": None})]
    server.script(Answer(events=events), Answer(events=events), Answer(events=events))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1", "stream: true")
    assert cell["status"] == "error" and "The server had an error" in cell["error"]


def error(message: str, type_: str, code: str | None) -> dict[str, object]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def test_401_is_fatal(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(401, error("Incorrect API key provided: sk-wrong.", "invalid_request_error", "invalid_api_key")))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1")
    assert cell["status"] == "error" and "401" in cell["error"] and "OPENAI_API_KEY" in cell["error"]
    assert len(server.requests) == 1


def test_429_and_5xx_are_retried(server: ContractServer, tmp_path: Path) -> None:
    server.script(
        Answer(429, error("Rate limit reached for gpt-4.1", "requests", "rate_limit_exceeded"), {"Retry-After": "0"}),
        Answer(500, error("The server had an error while processing your request.", "server_error", None)),
        Answer(body=response([message("Paris.")])),
    )
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1")
    assert code == 0, output
    assert cell["output"]["text"] == "Paris." and len(server.requests) == 3


def test_quota_429_is_fatal(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(429, error("You exceeded your current quota.", "insufficient_quota", "insufficient_quota")))
    code, output, cell = run_cell(tmp_path, "openai-responses", "gpt-4.1")
    assert cell["status"] == "error" and "exceeded your current quota" in cell["error"]
    assert len(server.requests) == 1
