"""providers/vertex-anthropic.yaml (extends anthropic) against a fake Vertex AI written from Anthropic's "Claude on Vertex AI"
page and the Messages API reference.

Checks the request Vertex documents — POST .../publishers/anthropic/models/MODEL:rawPredict (:streamRawPredict when
streaming), a Google OAuth bearer token (Application Default Credentials, here a fake token source), no x-api-key and no
anthropic-version header, ``anthropic_version: vertex-2023-10-16`` in the body and no ``model`` — and reads the answers
through a real `evalx run`: text and tool_use blocks, usage with prompt-cache reads, the SSE stream (Anthropic's events),
priced with Anthropic's table, and the errors (Anthropic's overloaded_error retried, Google's 429 retried, 403 fatal).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from contract_server import Answer, ContractServer, run_cell

from evalx.targets.definitions import find_provider

google_auth = pytest.importorskip("google.auth")  # the `test` extra installs it

MODEL = "claude-sonnet-4@20250514"
TOKEN = "ya29.vertex-claude-token-7c1e0b"
PROJECT = "my-project"
REGION = "us-east5"
USAGE = {"input_tokens": 12, "output_tokens": 6, "cache_read_input_tokens": 8, "cache_creation_input_tokens": 0}


class FakeCredentials:
    """What google.auth.default gives: a token source, refreshed when not valid."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.refreshes = 0

    @property
    def valid(self) -> bool:
        return self.token is not None

    def refresh(self, request: object) -> None:
        self.refreshes += 1
        self.token = TOKEN


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> FakeCredentials:
    creds = FakeCredentials()
    monkeypatch.setattr(google_auth, "default", lambda scopes=None, **kw: (creds, PROJECT))
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # not needed, and never sent to Vertex
    return creds


def base(server: ContractServer) -> str:
    """A target's base_url standing for https://REGION-aiplatform.googleapis.com/v1/projects/PROJECT/locations/REGION."""
    return f"{server.url}/v1/projects/{PROJECT}/locations/{REGION}"


def message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_vrtx_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": USAGE,
    }


def test_the_definition_is_anthropic_on_vertex_urls() -> None:
    d = find_provider("vertex-anthropic")
    assert d.extends == ("anthropic",) and d.auth.kind == "google" and d.headers == {}
    scope = {"model": MODEL, "region": REGION}
    assert d.render_location(str(d.base_url), scope, "base_url") == (
        f"https://{REGION}-aiplatform.googleapis.com/v1/projects/{PROJECT}/locations/{REGION}"
    )
    assert d.render_path(("request", "path"), {**scope, "stream": False}) == f"/publishers/anthropic/models/{MODEL}:rawPredict"
    assert d.render_path(("request", "path"), {**scope, "stream": True}) == f"/publishers/anthropic/models/{MODEL}:streamRawPredict"
    # Anthropic's answer, stream and prices, inherited: Vertex's model names carry an @version
    anthropic = find_provider("anthropic")
    assert d.response == anthropic.response and d.stream == anthropic.stream
    assert d.price(MODEL) == anthropic.price("claude-sonnet-4-20250514") is not None


def test_text_usage_cost_and_request_shape(server: ContractServer, tmp_path: Path, _env: FakeCredentials) -> None:
    server.script(Answer(body=message([{"type": "text", "text": "Paris."}])))
    extra = 'system: "Answer briefly."\nparams: {max_tokens: 200, temperature: 0}'
    code, output, cell = run_cell(tmp_path, "vertex-anthropic", MODEL, extra, base_url=base(server))
    assert code == 0, output
    [req] = server.requests
    assert (req["method"], req["path"]) == (
        "POST",
        f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{MODEL}:rawPredict",
    )
    headers = {k.lower(): v for k, v in req["headers"].items()}
    assert headers["authorization"] == f"Bearer {TOKEN}" and _env.refreshes == 1
    assert "x-api-key" not in headers and "anthropic-version" not in headers
    assert req["body"] == {
        "anthropic_version": "vertex-2023-10-16",
        "max_tokens": 200,
        "system": "Answer briefly.",
        "temperature": 0,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    }
    out = cell["output"]
    assert out["text"] == "Paris." and cell["stop_reason"] == "end_turn"
    assert out["usage"] == {"input_tokens": 20, "output_tokens": 6, "cache_hit_tokens": 8}
    assert cell["cost_usd"] == pytest.approx((12 * 3.00 + 8 * 0.30 + 6 * 15.00) / 1e6)
    assert TOKEN not in str(cell)


def test_tool_use(server: ContractServer, tmp_path: Path) -> None:
    blocks = [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_vrtx_01", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    server.script(Answer(body=message(blocks, "tool_use")))
    tools = "tools: [{name: get_weather, description: Current weather, parameters: {type: object, properties: {city: {type: string}}}}]"
    code, output, cell = run_cell(tmp_path, "vertex-anthropic", MODEL, tools, base_url=base(server))
    assert code == 0, output
    assert server.requests[0]["body"]["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert [(c["name"], c["args"]) for c in cell["output"]["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert cell["stop_reason"] == "tool_use"


def test_stream_raw_predict(server: ContractServer, tmp_path: Path) -> None:
    start = {**message([], None), "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 8}}  # type: ignore[arg-type]
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "The capital"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " is Paris."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 15}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    server.script(Answer(events=events))
    code, output, cell = run_cell(tmp_path, "vertex-anthropic", MODEL, "stream: true\ntools: [{name: get_weather}]", base_url=base(server))
    assert code == 0, output
    req = server.requests[0]
    assert req["path"].endswith(f"/publishers/anthropic/models/{MODEL}:streamRawPredict")
    assert req["body"]["stream"] is True and req["body"]["anthropic_version"] == "vertex-2023-10-16" and "model" not in req["body"]
    out = cell["output"]
    assert out["text"] == "The capital is Paris."
    assert [(c["name"], c["args"]) for c in out["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    assert out["usage"] == {"input_tokens": 20, "output_tokens": 15, "cache_hit_tokens": 8}
    assert cell["stop_reason"] == "tool_use" and cell["ttft_ms"] is not None


def test_errors_overloaded_and_quota_are_retried_forbidden_is_not(server: ContractServer, tmp_path: Path) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    quota = {
        "error": {
            "code": 429,
            "message": "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model",
            "status": "RESOURCE_EXHAUSTED",
        }
    }
    server.script(Answer(529, overloaded), Answer(429, quota), Answer(body=message([{"type": "text", "text": "Paris."}])))
    code, output, cell = run_cell(tmp_path, "vertex-anthropic", MODEL, base_url=base(server))
    assert code == 0, output
    assert cell["output"]["text"] == "Paris." and len(server.requests) == 3

    denied = {
        "error": {"code": 403, "message": "Permission 'aiplatform.endpoints.predict' denied on resource", "status": "PERMISSION_DENIED"}
    }
    server.script(Answer(403, denied))
    code, output, cell = run_cell(tmp_path, "vertex-anthropic", MODEL, base_url=base(server))
    assert cell["status"] == "error" and "403" in cell["error"] and len(server.requests) == 1
    assert TOKEN not in cell["error"]

    server.script(Answer(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}))
    code, output, cell = run_cell(tmp_path, "vertex-anthropic", MODEL, base_url=base(server))
    assert cell["status"] == "error" and "max_tokens: Field required" in cell["error"] and len(server.requests) == 1
