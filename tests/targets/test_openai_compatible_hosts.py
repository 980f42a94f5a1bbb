"""Contract tests of the OpenAI-compatible hosts (providers/{groq,together,...}.yaml, each ``extends: openai``).

Each runs a real ``evalx run`` against a fake server on 127.0.0.1, the host's base URL
pointed at it by the host's own variable (GROQ_BASE_URL, VLLM_BASE_URL, ...), and checks
what the host documents: the path, the Authorization header from the host's key variable
(never OPENAI_API_KEY), the body's model; and that the answer, its usage and the host's
differences (DeepSeek's cache hits) are read. Also the native Ollama API's contract.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import FakeLLMServer, Logged
from aiohttp import web
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.targets.definitions import find_provider


@dataclass(frozen=True)
class Host:
    name: str
    base_url: str  # as the host documents it
    base_var: str
    key_var: str | None  # None: no key at all
    key_required: bool
    #: the usage field the host reports cache hits in
    cache_field: str = "prompt_tokens_details"


HOSTS = [
    Host("groq", "https://api.groq.com/openai/v1", "GROQ_BASE_URL", "GROQ_API_KEY", True),
    Host("together", "https://api.together.xyz/v1", "TOGETHER_BASE_URL", "TOGETHER_API_KEY", True),
    Host("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_BASE_URL", "FIREWORKS_API_KEY", True),
    Host("deepseek", "https://api.deepseek.com", "DEEPSEEK_BASE_URL", "DEEPSEEK_API_KEY", True, cache_field="prompt_cache_hit_tokens"),
    Host("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_BASE_URL", "OPENROUTER_API_KEY", True),
    Host("xai", "https://api.x.ai/v1", "XAI_BASE_URL", "XAI_API_KEY", True),
    Host("perplexity", "https://api.perplexity.ai", "PERPLEXITY_BASE_URL", "PERPLEXITY_API_KEY", True),
    Host("vllm", "http://localhost:8000/v1", "VLLM_BASE_URL", "VLLM_API_KEY", False),
    Host("lmstudio", "http://localhost:1234/v1", "LMSTUDIO_BASE_URL", None, False),
]
OPENAI_SECRET = "sk-openai-must-not-leak-0000"


class AnyPathServer(FakeLLMServer):
    """Answers every POST with a chat completion (OpenAI shape) or, at /api/chat, Ollama's native answer."""

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tail:.*}", self._any)

    async def _any(self, request: web.Request) -> web.Response:
        body, canned = await self._log(request)
        if canned is not None:
            return canned
        if request.path.endswith("/api/chat"):
            return web.json_response(
                {"model": body["model"], "message": {"role": "assistant", "content": "4"}, "done": True, "done_reason": "stop",
                 "prompt_eval_count": 11, "eval_count": 2}
            )  # fmt: skip
        if body.get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                {"choices": [{"index": 0, "delta": {"content": "4"}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 3},
                                          "prompt_cache_hit_tokens": 5}},
            ]  # fmt: skip
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return web.Response(text=text, content_type="text/event-stream")
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": 11,
                    "completion_tokens": 2,
                    "total_tokens": 13,
                    "prompt_tokens_details": {"cached_tokens": 3},
                    "prompt_cache_hit_tokens": 5,  # DeepSeek's own field
                },
            }
        )


@pytest.fixture
def any_server() -> Any:
    s = AnyPathServer().start()
    yield s
    s.stop()


def project(tmp_path: Path, provider: str, model: str) -> Path:
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            version: 1
            name: contract
            targets:
              - {{id: t, type: provider, provider: {provider}, model: {model}, params: {{temperature: 0}}}}
            datasets:
              - id: d
                cases:
                  - {{id: add, input: "What is 2 + 2?", expected: "4", assert: [{{type: equals, value: "4"}}]}}
            """
        ).lstrip(),
        encoding="utf-8",
    )
    return config


def run(config: Path) -> tuple[int, str, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns) if (config.parent / "runs").is_dir() else []
    return result.exit_code, result.output, read_cells(runs[-1]) if runs else []


def only_request(server: FakeLLMServer) -> Logged:
    assert len(server.requests) == 1, [r.path for r in server.requests]
    return server.requests[0]


@pytest.mark.parametrize("host", HOSTS, ids=[h.name for h in HOSTS])
def test_each_host_sends_the_documented_request(
    host: Host, any_server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)  # set, and never sent to another host
    monkeypatch.setenv(host.base_var, f"{any_server.url}/{host.name}/v1")
    key = f"key-{host.name}-12345"
    if host.key_var:
        monkeypatch.setenv(host.key_var, key)
    config = project(tmp_path, host.name, f"{host.name}/model-x")
    code, output, cells = run(config)
    assert code == 0, output
    sent = only_request(any_server)
    assert sent.method == "POST" and sent.path == f"/{host.name}/v1/chat/completions"
    if host.key_var:
        assert sent.headers["Authorization"] == f"Bearer {key}"
    else:
        assert "Authorization" not in sent.headers
    assert OPENAI_SECRET not in json.dumps(sent.headers)
    assert sent.body["model"] == f"{host.name}/model-x"
    assert sent.body["messages"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert sent.body["temperature"] == 0
    # the answer and its usage, as the host reports them
    [cell] = cells
    assert cell["status"] == "pass" and cell["output"]["text"] == "4"
    usage = cell["output"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (11, 2)
    assert usage["cache_hit_tokens"] == (5 if host.cache_field == "prompt_cache_hit_tokens" else 3)
    if host.key_var:  # the key is a secret on every path
        assert key not in output
        assert not any(key in p.read_text(encoding="utf-8", errors="replace") for p in (tmp_path / "runs").rglob("*") if p.is_file())


@pytest.mark.parametrize("host", [h for h in HOSTS if h.name in ("groq", "deepseek", "vllm")], ids=lambda h: h.name)
def test_a_streamed_answer_is_read_with_the_hosts_usage(
    host: Host, any_server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(host.base_var, f"{any_server.url}/{host.name}/v1")
    if host.key_var:
        monkeypatch.setenv(host.key_var, "k-1")
    config = project(tmp_path, host.name, "m")
    config.write_text(config.read_text(encoding="utf-8").replace("params: {temperature: 0}", "stream: true"), encoding="utf-8")
    code, output, cells = run(config)
    assert code == 0, output
    sent = only_request(any_server)
    assert sent.body["stream"] is True and sent.body["stream_options"] == {"include_usage": True}
    [cell] = cells
    assert cell["status"] == "pass" and cell["output"]["text"] == "4"
    usage = cell["output"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (11, 2)
    assert usage["cache_hit_tokens"] == (5 if host.cache_field == "prompt_cache_hit_tokens" else 3)


@pytest.mark.parametrize("host", HOSTS, ids=[h.name for h in HOSTS])
def test_each_host_defaults_to_its_documented_endpoint_and_key(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(host.base_var, raising=False)
    definition = find_provider(host.name)
    assert definition.base_url == host.base_url
    assert definition.auth_env == host.key_var and definition.auth_required is host.key_required
    assert definition.extends == ("openai",)
    assert definition.path == "/chat/completions"
    assert not set(definition.pricing) & set(find_provider("openai").pricing)  # OpenAI's prices are not theirs
    assert set(definition.capabilities) == {"streaming", "tools", "embeddings", "vision", "json_mode", "tool_history"}
    assert definition.sends_tool_history is definition.capabilities["tools"]  # inherited from openai (perplexity: no tools)
    assert (definition.embeddings is not None) is definition.capabilities["embeddings"]


def test_a_hosted_key_that_is_missing_is_named(any_server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    monkeypatch.setenv("GROQ_BASE_URL", f"{any_server.url}/groq/v1")
    code, output, _ = run(project(tmp_path, "groq", "llama-3.1-8b-instant"))
    assert code != 0 and "GROQ_API_KEY" in output, output
    assert any_server.requests == [] and OPENAI_SECRET not in output


def test_ollama_native_chat_contract(any_server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", any_server.url)
    code, output, cells = run(project(tmp_path, "ollama", "llama3.2"))
    assert code == 0, output
    sent = only_request(any_server)
    assert sent.path == "/api/chat" and "Authorization" not in sent.headers
    assert sent.body["model"] == "llama3.2" and sent.body["stream"] is False
    assert sent.body["messages"] == [{"role": "user", "content": "What is 2 + 2?"}]
    [cell] = cells
    assert cell["status"] == "pass" and cell["output"]["text"] == "4"
    assert (cell["output"]["usage"]["input_tokens"], cell["output"]["usage"]["output_tokens"]) == (11, 2)
