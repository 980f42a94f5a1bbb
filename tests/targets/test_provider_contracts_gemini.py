"""providers/gemini.yaml against a fake generativelanguage.googleapis.com written from the Gemini API reference.

Checks the request (the model in the path, x-goog-api-key, contents with user/model roles, systemInstruction,
functionDeclarations, params split between generationConfig and the top level) and reads the documented answers
through a real `evalx run`: text parts (thoughts skipped), functionCall parts, usageMetadata (cached and thinking
tokens), finishReason with SAFETY and a blocked prompt as their own stop reasons, streamGenerateContent?alt=sse (no end
marker: the chunk with a finishReason ends it) and the error classes (400 bad key and 403 fatal, 429 and 503 retried).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_server import Answer, ContractServer, run_cell

KEY = "AIza-gemini-test-3f0c7d"
MODEL = "gemini-2.5-flash"
USAGE = {"promptTokenCount": 20, "candidatesTokenCount": 8, "thoughtsTokenCount": 30, "cachedContentTokenCount": 4, "totalTokenCount": 58}


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, server: ContractServer) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_BASE_URL", server.url)


def answer(parts: list[dict[str, object]], finish: str = "STOP", usage: dict[str, int] = USAGE) -> dict[str, object]:
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}],
        "usageMetadata": usage,
        "modelVersion": MODEL,
        "responseId": "mAitaLmkHPPlz7IPvtfUqQ4",
    }


def test_text_usage_and_request_shape(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=answer([{"text": "Let me think.", "thought": True}, {"text": "The capital is "}, {"text": "Paris."}])))
    params = "params: {temperature: 0, maxOutputTokens: 256, safetySettings: [{category: HARM_CATEGORY_HARASSMENT, threshold: BLOCK_NONE}]}"
    code, output, cell = run_cell(tmp_path, "gemini", MODEL, f'system: "Answer briefly."\n{params}')
    assert code == 0, output
    [req] = server.requests
    assert (req["method"], req["path"], req["query"]) == ("POST", f"/v1beta/models/{MODEL}:generateContent", {})
    assert req["headers"]["x-goog-api-key"] == KEY
    assert req["body"] == {
        "systemInstruction": {"parts": [{"text": "Answer briefly."}]},
        "generationConfig": {"temperature": 0, "maxOutputTokens": 256},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "contents": [{"role": "user", "parts": [{"text": "What is the capital of France?"}]}],
    }
    assert cell["output"]["text"] == "The capital is Paris."
    # thinking tokens are billed as output
    assert cell["output"]["usage"] == {"input_tokens": 20, "output_tokens": 38, "cache_hit_tokens": 4}
    assert cell["stop_reason"] == "STOP"
    assert cell["cost_usd"] == pytest.approx((16 * 0.30 + 4 * 0.075 + 38 * 2.50) / 1e6)


def test_function_calls(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=answer([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}])))
    tools = "tools: [{name: get_weather, description: Current weather, parameters: {type: object, properties: {city: {type: string}}}}]"
    code, output, cell = run_cell(tmp_path, "gemini", MODEL, tools)
    assert code == 0, output
    assert server.requests[0]["body"]["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ]
        }
    ]
    assert cell["output"]["text"] == ""
    assert [(c["name"], c["args"]) for c in cell["output"]["tool_calls"]] == [("get_weather", {"city": "Paris"})]


def test_json_mode_and_max_tokens(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=answer([{"text": '{"city": "Par'}], "MAX_TOKENS")))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL, "json_mode: true")
    assert server.requests[0]["body"]["generationConfig"] == {"responseMimeType": "application/json"}
    assert cell["stop_reason"] == "MAX_TOKENS" and cell["truncated"]


def test_safety_is_its_own_stop_reason(server: ContractServer, tmp_path: Path) -> None:
    ratings = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]
    blocked = {
        "candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": ratings}],
        "usageMetadata": {"promptTokenCount": 20, "totalTokenCount": 20},
    }
    server.script(Answer(body=blocked))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert cell["stop_reason"] == "SAFETY" and cell["output"]["text"] == "" and not cell.get("truncated")
    # a prompt blocked before any candidate
    server.script(Answer(body={"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 20}}))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert cell["stop_reason"] == "PROHIBITED_CONTENT" and cell["output"]["text"] == ""


def test_stream_ends_at_the_chunk_with_a_finish_reason(server: ContractServer, tmp_path: Path) -> None:
    def chunk(parts: list[dict[str, object]], finish: str | None = None, usage: dict[str, int] | None = None) -> dict[str, object]:
        cand: dict[str, object] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        return {"candidates": [{**cand, "finishReason": finish} if finish else cand], "usageMetadata": usage or {"promptTokenCount": 20}}

    events = [
        (None, chunk([{"text": "The capital"}])),
        (None, chunk([{"text": " is Paris."}, {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}])),
        (None, chunk([{"text": ""}], "STOP", USAGE)),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL, "stream: true\ntools: [{name: get_weather, parameters: {type: object}}]")
    assert code == 0, output
    req = server.requests[0]
    assert (req["path"], req["query"]) == (f"/v1beta/models/{MODEL}:streamGenerateContent", {"alt": "sse"})
    out = cell["output"]
    assert out["text"] == "The capital is Paris."
    assert [(c["name"], c["args"]) for c in out["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert out["usage"] == {"input_tokens": 20, "output_tokens": 38, "cache_hit_tokens": 4}
    assert cell["stop_reason"] == "STOP" and cell["ttft_ms"] is not None


def test_a_stream_cut_before_its_finish_reason_is_an_error(server: ContractServer, tmp_path: Path) -> None:
    cut = [(None, {"candidates": [{"content": {"parts": [{"text": "The capital"}], "role": "model"}, "index": 0}]})]
    server.script(Answer(events=cut), Answer(events=cut), Answer(events=cut))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL, "stream: true")
    assert cell["status"] == "error"
    assert "before its end (an event where event.candidates[0].finishReason" in cell["error"]


def error(code: int, message: str, status: str) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "status": status}}


def test_a_wrong_key_and_403_are_fatal(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(400, error(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT")))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert cell["status"] == "error" and "API key not valid" in cell["error"] and len(server.requests) == 1
    server.script(Answer(403, error(403, "Method doesn't allow unregistered callers.", "PERMISSION_DENIED")))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert cell["status"] == "error" and "403" in cell["error"] and len(server.requests) == 1
    assert KEY not in cell["error"]


def test_429_and_503_are_retried(server: ContractServer, tmp_path: Path) -> None:
    server.script(
        Answer(429, error(429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED")),
        Answer(503, error(503, "The model is overloaded. Please try again later.", "UNAVAILABLE")),
        Answer(body=answer([{"text": "Paris."}])),
    )
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert code == 0, output
    assert cell["output"]["text"] == "Paris." and len(server.requests) == 3


def test_google_api_key_is_read_when_gemini_api_key_is_not_set(
    server: ContractServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    google_key = "AIza-google-fallback-9e1d"
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", google_key)
    server.script(Answer(body=answer([{"text": "Paris."}])))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert code == 0, output
    assert server.requests[0]["headers"]["x-goog-api-key"] == google_key
    assert google_key not in json.dumps(cell)
    # both set: GEMINI_API_KEY, the first the definition lists
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    server.script(Answer(body=answer([{"text": "Paris."}])))
    code, output, cell = run_cell(tmp_path, "gemini", MODEL)
    assert server.requests[0]["headers"]["x-goog-api-key"] == KEY


def test_no_key_names_both_variables(server: ContractServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    server.script()
    from click.testing import CliRunner

    from evalx.cli import main

    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        f"version: 1\ntargets: [{{id: m, type: provider, provider: gemini, model: {MODEL}}}]\n"
        "datasets: [{id: d, cases: [{id: a, input: hi}]}]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code == 2 and server.requests == []
    assert "needs an API key: set the target's api_key, GEMINI_API_KEY or GOOGLE_API_KEY" in result.output, result.output
