"""providers/cohere.yaml against a fake https://api.cohere.com/v2/chat written from Cohere's v2 chat reference.

Checks the request (path, bearer key, system turn, function tools) and reads the documented answers through a real
`evalx run`: text parts, tool calls, usage from `tokens` (else `billed_units`), finish_reason (MAX_TOKENS truncated),
the typed stream events and the error classes (401 fatal, 429 and 503 retried).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_server import Answer, ContractServer, run_cell

KEY = "cohere-test-key-77e0d2"
MODEL = "command-a-03-2025"


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, server: ContractServer) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    monkeypatch.setenv("COHERE_API_KEY", KEY)
    monkeypatch.setenv("COHERE_BASE_URL", server.url)


USAGE = {"billed_units": {"input_tokens": 5, "output_tokens": 9}, "tokens": {"input_tokens": 71, "output_tokens": 9}}


def chat(message: dict[str, object], finish_reason: str = "COMPLETE", usage: dict[str, object] = USAGE) -> dict[str, object]:
    return {
        "id": "c14c80c3-18eb-4519-9460-6c92edd8cfb4",
        "finish_reason": finish_reason,
        "message": {"role": "assistant", **message},
        "usage": usage,
    }


def test_text_usage_and_request_shape(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=chat({"content": [{"type": "text", "text": "The capital is "}, {"type": "text", "text": "Paris."}]})))
    code, output, cell = run_cell(tmp_path, "cohere", MODEL, 'system: "Answer briefly."\nparams: {max_tokens: 100}')
    assert code == 0, output
    [req] = server.requests
    assert (req["method"], req["path"]) == ("POST", "/v2/chat")
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    assert req["body"] == {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 100,
    }
    assert cell["output"]["text"] == "The capital is Paris."
    # the tokens the model saw, not the billed units
    assert cell["output"]["usage"]["input_tokens"] == 71 and cell["output"]["usage"]["output_tokens"] == 9
    assert cell["stop_reason"] == "COMPLETE"
    assert cell["cost_usd"] == pytest.approx((71 * 2.50 + 9 * 10.00) / 1e6)


def test_billed_units_when_no_tokens(server: ContractServer, tmp_path: Path) -> None:
    server.script(
        Answer(
            body=chat(
                {"content": [{"type": "text", "text": "Paris"}]}, "MAX_TOKENS", {"billed_units": {"input_tokens": 5, "output_tokens": 2}}
            )
        )
    )
    code, output, cell = run_cell(tmp_path, "cohere", MODEL)
    assert cell["output"]["usage"]["input_tokens"] == 5 and cell["output"]["usage"]["output_tokens"] == 2
    assert cell["stop_reason"] == "MAX_TOKENS" and cell["truncated"]


def test_tool_calls(server: ContractServer, tmp_path: Path) -> None:
    call = {"id": "get_weather_1byjy32y4hvq", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    server.script(Answer(body=chat({"tool_plan": "I will look up the weather in Paris.", "tool_calls": [call]}, "TOOL_CALL")))
    code, output, cell = run_cell(
        tmp_path, "cohere", MODEL, "tools: [{name: get_weather, description: Weather, parameters: {type: object}}]"
    )
    assert code == 0, output
    tools = server.requests[0]["body"]["tools"]
    assert tools == [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}}]
    assert cell["output"]["text"] == ""
    assert [(c["name"], c["args"]) for c in cell["output"]["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert cell["stop_reason"] == "TOOL_CALL"


def test_stream_events(server: ContractServer, tmp_path: Path) -> None:
    def tool(delta: dict[str, object]) -> dict[str, object]:
        return {"message": {"tool_calls": delta}}

    events = [
        ("message-start", {"type": "message-start", "id": "29f14a5a", "delta": {"message": {"role": "assistant"}}}),
        ("content-start", {"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text", "text": ""}}}}),
        ("content-delta", {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "Par"}}}}),
        ("content-delta", {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "is."}}}}),
        ("content-end", {"type": "content-end", "index": 0}),
        ("tool-plan-delta", {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "I will"}}}),
        (
            "tool-call-start",
            {
                "type": "tool-call-start",
                "index": 0,
                "delta": tool({"id": "get_weather_nsz5zm3w56q3", "type": "function", "function": {"name": "get_weather", "arguments": ""}}),
            },
        ),
        ("tool-call-delta", {"type": "tool-call-delta", "index": 0, "delta": tool({"function": {"arguments": '{"city":'}})}),
        ("tool-call-delta", {"type": "tool-call-delta", "index": 0, "delta": tool({"function": {"arguments": '"Paris"}'}})}),
        ("tool-call-end", {"type": "tool-call-end", "index": 0}),
        ("message-end", {"type": "message-end", "delta": {"finish_reason": "TOOL_CALL", "usage": USAGE}}),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "cohere", MODEL, "stream: true\ntools: [{name: get_weather, parameters: {type: object}}]")
    assert code == 0, output
    assert server.requests[0]["body"]["stream"] is True
    out = cell["output"]
    assert out["text"] == "Paris."
    assert [(c["name"], c["args"]) for c in out["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert out["usage"]["input_tokens"] == 71 and out["usage"]["output_tokens"] == 9
    assert cell["stop_reason"] == "TOOL_CALL" and cell["ttft_ms"] is not None


def test_401_is_fatal(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(401, {"id": "a1b2", "message": "invalid api token"}))
    code, output, cell = run_cell(tmp_path, "cohere", MODEL)
    assert cell["status"] == "error" and "401" in cell["error"] and "COHERE_API_KEY" in cell["error"]
    assert len(server.requests) == 1


def test_429_and_503_are_retried(server: ContractServer, tmp_path: Path) -> None:
    server.script(
        Answer(429, {"id": "x", "message": "You are using a Trial key, which is limited to 10 API calls / minute."}, {"Retry-After": "0"}),
        Answer(503, {"id": "y", "message": "service unavailable"}),
        Answer(body=chat({"content": [{"type": "text", "text": "Paris."}]})),
    )
    code, output, cell = run_cell(tmp_path, "cohere", MODEL)
    assert code == 0, output
    assert cell["output"]["text"] == "Paris." and len(server.requests) == 3


def test_400_quotes_the_message(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(400, {"id": "z", "message": "invalid request: model 'nope' not found"}))
    code, output, cell = run_cell(tmp_path, "cohere", MODEL)
    assert cell["status"] == "error" and "model 'nope' not found" in cell["error"] and len(server.requests) == 1
