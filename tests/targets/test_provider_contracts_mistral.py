"""providers/mistral.yaml against a fake https://api.mistral.ai/v1/chat/completions written from Mistral's API reference.

Checks the request (path, bearer key, system turn, function tools) and reads the documented answers through a real
`evalx run`: text, tool calls with JSON-string arguments, usage, finish_reason, the stream (usage in the last chunk,
no stream_options sent) and the error classes (401 and 422 fatal, 429 and 503 retried).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_server import Answer, ContractServer, run_cell

KEY = "mistral-test-key-5a8b1c"
MODEL = "mistral-small-latest"


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, server: ContractServer) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    monkeypatch.setenv("MISTRAL_API_KEY", KEY)
    monkeypatch.setenv("MISTRAL_BASE_URL", f"{server.url}/v1")


def completion(message: dict[str, object], finish_reason: str = "stop") -> dict[str, object]:
    return {
        "id": "cmpl-e5cc70bb28c444948073e77776eb30ef",
        "object": "chat.completion",
        "model": MODEL,
        "created": 1702256327,
        "choices": [{"index": 0, "message": {"role": "assistant", "prefix": False, **message}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 16, "completion_tokens": 34, "total_tokens": 50},
    }


def test_text_usage_and_request_shape(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=completion({"content": "Paris.", "tool_calls": None})))
    code, output, cell = run_cell(tmp_path, "mistral", MODEL, 'system: "Answer briefly."\nparams: {temperature: 0, random_seed: 7}')
    assert code == 0, output
    [req] = server.requests
    assert (req["method"], req["path"]) == ("POST", "/v1/chat/completions")
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    assert req["body"] == {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0,
        "random_seed": 7,
    }
    assert cell["output"]["text"] == "Paris."
    assert cell["output"]["usage"]["input_tokens"] == 16 and cell["output"]["usage"]["output_tokens"] == 34
    assert cell["stop_reason"] == "stop"
    assert cell["cost_usd"] == pytest.approx((16 * 0.10 + 34 * 0.30) / 1e6)


def test_tool_calls(server: ContractServer, tmp_path: Path) -> None:
    call = {"id": "D681PevKs", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    server.script(Answer(body=completion({"content": "", "tool_calls": [call]}, "tool_calls")))
    code, output, cell = run_cell(tmp_path, "mistral", MODEL, "tools: [{name: get_weather, parameters: {type: object}}]")
    assert code == 0, output
    assert server.requests[0]["body"]["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    assert [(c["name"], c["args"]) for c in cell["output"]["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert cell["stop_reason"] == "tool_calls"


def test_model_length_is_truncated(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=completion({"content": "The capital"}, "model_length")))
    code, output, cell = run_cell(tmp_path, "mistral", MODEL)
    assert cell["stop_reason"] == "model_length" and cell["truncated"]


def test_stream_reads_usage_from_the_last_chunk(server: ContractServer, tmp_path: Path) -> None:
    def chunk(delta: dict[str, object], finish: str | None = None, usage: dict[str, int] | None = None) -> dict[str, object]:
        data: dict[str, object] = {
            "id": "cmpl-1",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return {**data, "usage": usage} if usage else data

    events = [
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"content": "Par"})),
        (None, chunk({"content": "is."})),
        (None, chunk({"content": ""}, "stop", {"prompt_tokens": 16, "completion_tokens": 3, "total_tokens": 19})),
        (None, "[DONE]"),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "mistral", MODEL, "stream: true")
    assert code == 0, output
    body = server.requests[0]["body"]
    assert body["stream"] is True and "stream_options" not in body
    assert cell["output"]["text"] == "Paris."
    assert cell["output"]["usage"]["input_tokens"] == 16 and cell["output"]["usage"]["output_tokens"] == 3
    assert cell["stop_reason"] == "stop" and cell["ttft_ms"] is not None


def test_401_and_422_are_fatal(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(401, {"message": "Unauthorized", "request_id": "0b7d2c"}))
    code, output, cell = run_cell(tmp_path, "mistral", MODEL)
    assert cell["status"] == "error" and "401" in cell["error"] and "MISTRAL_API_KEY" in cell["error"]
    assert len(server.requests) == 1
    detail = {"detail": [{"type": "extra_forbidden", "loc": ["body", "bogus"], "msg": "Extra inputs are not permitted"}]}
    server.script(Answer(422, {"object": "error", "message": detail, "type": "invalid_request_error", "param": None, "code": None}))
    code, output, cell = run_cell(tmp_path, "mistral", MODEL, "params: {bogus: 1}")
    assert cell["status"] == "error" and "Extra inputs are not permitted" in cell["error"]
    assert len(server.requests) == 1


def test_429_and_503_are_retried(server: ContractServer, tmp_path: Path) -> None:
    server.script(
        Answer(429, {"message": "Requests rate limit exceeded"}, {"Retry-After": "0"}),
        Answer(503, {"object": "error", "message": "Service unavailable", "type": "internal_server_error"}),
        Answer(body=completion({"content": "Paris."})),
    )
    code, output, cell = run_cell(tmp_path, "mistral", MODEL)
    assert code == 0, output
    assert cell["output"]["text"] == "Paris." and len(server.requests) == 3
