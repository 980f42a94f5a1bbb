"""providers/azure-openai.yaml against a fake Azure OpenAI resource written from Azure OpenAI's REST reference.

Checks the request (the deployment — the target's model — in the path, the api-version query from
AZURE_OPENAI_API_VERSION or its default, the api-key header) and reads the documented answers through a real
`evalx run`: text, tool calls, usage with cached tokens, content_filter as the stop reason, the stream (a first chunk
with only prompt_filter_results) and the error classes (400 content_filter and 401 fatal, 429 and 503 retried).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_server import Answer, ContractServer, run_cell

KEY = "azure-test-key-0c4f19ab"
DEPLOYMENT = "gpt4o-mini-prod"


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, server: ContractServer) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.url)
    monkeypatch.delenv("AZURE_OPENAI_API_VERSION", raising=False)


FILTERS = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
    "sexual": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": False, "severity": "safe"},
}


def completion(message: dict[str, object], finish_reason: str = "stop") -> dict[str, object]:
    return {
        "id": "chatcmpl-7R1nGnsXO8n4oi9UPz2f3UHdgAYMn",
        "object": "chat.completion",
        "created": 1686676106,
        "model": "gpt-4o-mini-2024-07-18",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": FILTERS}],
        "choices": [
            {"index": 0, "finish_reason": finish_reason, "message": {"role": "assistant", **message}, "content_filter_results": FILTERS}
        ],
        "usage": {"prompt_tokens": 18, "completion_tokens": 5, "total_tokens": 23, "prompt_tokens_details": {"cached_tokens": 0}},
    }


def test_deployment_in_the_path_api_version_and_key(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=completion({"content": "Paris."})))
    code, output, cell = run_cell(
        tmp_path, "azure-openai", DEPLOYMENT, 'system: "Answer briefly."\npricing: {input_per_mtok: 0.15, output_per_mtok: 0.6}'
    )
    assert code == 0, output
    [req] = server.requests
    assert (req["method"], req["path"]) == ("POST", f"/openai/deployments/{DEPLOYMENT}/chat/completions")
    assert req["query"] == {"api-version": "2024-10-21"}
    assert req["headers"]["api-key"] == KEY and "Authorization" not in req["headers"]
    assert req["body"]["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    assert cell["output"]["text"] == "Paris."
    assert cell["output"]["usage"] == {"input_tokens": 18, "output_tokens": 5, "cache_hit_tokens": 0}
    assert cell["stop_reason"] == "stop"
    assert cell["cost_usd"] == pytest.approx((18 * 0.15 + 5 * 0.6) / 1e6)


def test_api_version_from_the_environment(server: ContractServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_VERSION", "2025-04-01-preview")
    server.script(Answer(body=completion({"content": "Paris."})))
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT)
    assert code == 0, output
    assert server.requests[0]["query"] == {"api-version": "2025-04-01-preview"}


def test_tool_calls_and_content_filter(server: ContractServer, tmp_path: Path) -> None:
    call = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    server.script(Answer(body=completion({"content": None, "tool_calls": [call]}, "tool_calls")))
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT, "tools: [{name: get_weather, parameters: {type: object}}]")
    assert code == 0, output
    assert [(c["name"], c["args"]) for c in cell["output"]["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    server.script(Answer(body=completion({"content": None}, "content_filter")))
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT)
    assert cell["stop_reason"] == "content_filter" and cell["output"]["text"] == ""


def test_stream(server: ContractServer, tmp_path: Path) -> None:
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [
        (None, {"id": "", "object": "", "choices": [], "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": FILTERS}]}),
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"content": "Par"})),
        (None, chunk({"content": "is."})),
        (None, chunk({}, "stop")),
        (
            None,
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {"prompt_tokens": 18, "completion_tokens": 2, "total_tokens": 20},
            },
        ),
        (None, "[DONE]"),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT, "stream: true")
    assert code == 0, output
    assert server.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert cell["output"]["text"] == "Paris."
    assert cell["output"]["usage"]["input_tokens"] == 18 and cell["output"]["usage"]["output_tokens"] == 2
    assert cell["stop_reason"] == "stop" and cell["ttft_ms"] is not None


def test_a_filtered_prompt_and_a_wrong_key_are_fatal(server: ContractServer, tmp_path: Path) -> None:
    filtered = {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {**FILTERS, "violence": {"filtered": True, "severity": "high"}},
            },
        }
    }
    server.script(Answer(400, filtered))
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT)
    assert cell["status"] == "error" and "content management policy" in cell["error"] and len(server.requests) == 1
    server.script(
        Answer(401, {"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint."}})
    )
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT)
    assert cell["status"] == "error" and "AZURE_OPENAI_API_KEY" in cell["error"] and len(server.requests) == 1


def test_429_and_503_are_retried(server: ContractServer, tmp_path: Path) -> None:
    server.script(
        Answer(
            429,
            {"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation have exceeded call rate limit."}},
            {"Retry-After": "0"},
        ),
        Answer(503, {"error": {"code": "ServiceUnavailable", "message": "The service is temporarily unable to process your request."}}),
        Answer(body=completion({"content": "Paris."})),
    )
    code, output, cell = run_cell(tmp_path, "azure-openai", DEPLOYMENT)
    assert code == 0, output
    assert cell["output"]["text"] == "Paris." and len(server.requests) == 3


def test_no_endpoint_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT")
    from click.testing import CliRunner

    from evalx.cli import main

    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: x\ntargets:\n  - {id: m, type: provider, provider: azure-openai, model: d}\n"
        "datasets:\n  - id: d\n    cases:\n      - {id: c, input: hi}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code != 0 and "AZURE_OPENAI_ENDPOINT is not set" in result.output
