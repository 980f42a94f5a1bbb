"""Provider targets end to end: CLI → config → provider YAML → a real HTTP server on 127.0.0.1.

The fake servers (tests/_fake_llm.py) speak the OpenAI chat-completions and
Anthropic messages shapes. Set ``EVALX_TEST_OPENAI_BASE_URL`` (and optionally
``EVALX_TEST_OPENAI_MODEL``, ``EVALX_TEST_OPENAI_API_KEY``) to also run one
case against a real OpenAI-compatible server (see the README); CI does not.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import ANTHROPIC_KEY, OPENAI_KEY, Canned, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

COMPLETIONS = "/v1/chat/completions"
MESSAGES = "/v1/messages"

CASES = """
datasets:
  - id: smoke
    cases:
      - id: add
        input: "What is 2 + 2?"
        expected: "4"
        assert: [{type: numeric_close}]
      - id: capital
        input: "What is the capital of France?"
        assert: [{type: icontains, value: paris}]
      - id: refund
        input: "How do I get a refund?"
        assert: [{type: contains, value: "30 days"}]
"""


def project(tmp_path: Path, body: str, cases: str = CASES) -> Path:
    config = tmp_path / "evalconfig.yaml"
    config.write_text("version: 1\nname: providers\n" + textwrap.dedent(body).strip("\n") + "\n" + textwrap.dedent(cases), encoding="utf-8")
    return config


def run(config: Path, *args: str) -> tuple[int, str, list[dict[str, Any]], dict[str, Any]]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-v", *args])  # -v: the full summary (cache, cost gaps)
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    run_dir = runs[-1]
    results = read_cells(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    return result.exit_code, result.output, results, summary


def all_output_files(config: Path) -> str:
    """Everything evalx wrote beside the config: runs and the cache."""
    text = []
    for p in config.parent.rglob("*"):
        if p.is_file() and p.name != "evalconfig.yaml":
            text.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(text)


def openai_target(server: FakeLLMServer, extra: str = "") -> str:
    """An openai target on the fake server; ``extra`` adds target keys, one ``key: value`` a line."""
    extra_lines = "\n".join(" " * 8 + line.strip() for line in extra.splitlines() if line.strip())
    return f"""
    targets:
      - id: mini
        type: provider
        provider: openai
        model: local-model
        base_url: {server.url}/v1
        api_key: {OPENAI_KEY}
        pricing: {{input_per_mtok: 2.0, output_per_mtok: 8.0, cached_input_per_mtok: 0.5}}
        params: {{temperature: 0, max_tokens: 64}}
        system: "You are a support agent for {{{{ vars.product }}}}."
        prompt: "Customer asks: {{{{ case.input }}}}"
{extra_lines}
    vars: {{product: Acme}}
    """


# --- Done when: runs and scores, every cell has a cost, the key appears nowhere ----------------


def test_openai_compatible_server_runs_scores_and_costs(server: FakeLLMServer, tmp_path: Path) -> None:
    server.cached_tokens = 4
    config = project(tmp_path, openai_target(server))
    code, output, results, summary = run(config)
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass", "pass", "pass"]
    assert server.count(COMPLETIONS) == 3
    for r in results:
        usage = r["output"]["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["cache_hit_tokens"] == 4
        expected = ((usage["input_tokens"] - 4) * 2.0 + 4 * 0.5 + usage["output_tokens"] * 8.0) / 1e6
        assert r["cost_usd"] == pytest.approx(expected) and r["output"]["cost_usd"] == r["cost_usd"]
        assert r["cached"] is False and r["target_type"] == "provider"
    assert summary["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in results))
    assert summary["cost_missing_cells"] == 0

    # what was sent: rendered templates, params merged, the key only in the auth header
    sent = server.requests[0]
    assert sent.headers["Authorization"] == f"Bearer {OPENAI_KEY}"
    assert sent.body == {
        "model": "local-model",
        "messages": [
            {"role": "system", "content": "You are a support agent for Acme."},
            {"role": "user", "content": "Customer asks: What is 2 + 2?"},
        ],
        "temperature": 0,
        "max_tokens": 64,
    }
    # the stored request has the body and URL but no credentials
    request = results[0]["output"]["request"]
    assert request["body"] == sent.body and request["url"] == f"{server.url}/v1/chat/completions"
    assert "Authorization" not in request["headers"]

    assert OPENAI_KEY not in output
    assert OPENAI_KEY not in all_output_files(config)


def test_the_key_from_the_environment_is_used_and_never_written(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")  # the definition's ${OPENAI_BASE_URL:-...}
    config = project(tmp_path, "targets: [{id: m, type: provider, provider: openai, model: gpt-4o-mini}]")
    code, output, results, summary = run(config)
    assert code == 0, output
    assert all(r["cost_usd"] is not None for r in results)  # gpt-4o-mini is priced by openai.yaml
    assert OPENAI_KEY not in output and OPENAI_KEY not in all_output_files(config)


# --- Done when: a second run is served from the cache; --no-cache sends again -----------------


def test_second_run_is_cached_and_no_cache_sends_again(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai_target(server))
    code, _, first, _ = run(config)
    assert code == 0 and server.count() == 3

    code, output, second, summary = run(config)
    assert code == 0, output
    assert server.count() == 3  # no request at all
    assert [r["cached"] for r in second] == [True, True, True]
    assert [r["output"]["text"] for r in second] == [r["output"]["text"] for r in first]
    assert [r["cost_usd"] for r in second] == [r["cost_usd"] for r in first]
    assert summary["cached_cells"] == 3 and summary["response_cache_hit_ratio"] == 1.0
    assert "3 of 3 cells from the response cache" in output
    assert (tmp_path / ".evalx" / "cache.sqlite").is_file()
    assert OPENAI_KEY not in (tmp_path / ".evalx" / "cache.sqlite").read_bytes().decode("utf-8", "replace")

    code, _, third, summary = run(config, "--no-cache")
    assert code == 0
    assert server.count() == 6
    assert [r["cached"] for r in third] == [False, False, False] and summary["cached_cells"] == 0


def test_cache_key_includes_the_request_and_the_repeat(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai_target(server))
    run(config, "--repeat", "2")
    assert server.count() == 6  # repeats are separate samples, not cache hits
    config.write_text(config.read_text().replace("temperature: 0,", "temperature: 0.5,"))
    run(config)
    assert server.count() == 9  # different params: a different request


def test_errors_are_never_cached(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai_target(server, "    retries: 0"))
    server.script(Canned(400, {"error": {"message": "model is loading"}}, paths=(COMPLETIONS,)))
    code, output, results, _ = run(config)
    assert code == 1
    assert [r["status"] for r in results].count("error") == 1
    code, _, results, _ = run(config)
    assert code == 0 and server.count() == 4  # only the errored cell is sent again
    assert [r["cached"] for r in results].count(True) == 2


def test_cost_is_repriced_when_pricing_changes(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(
        tmp_path,
        f"targets: [{{id: m, type: provider, provider: openai, model: local-model, base_url: '{server.url}/v1', api_key: '{OPENAI_KEY}'}}]",
    )
    code, output, results, summary = run(config)
    assert [r["cost_usd"] for r in results] == [None, None, None]  # unknown model: null, never 0
    assert summary["cost_missing_cells"] == 3 and "prices missing for 3 cells" in output
    config.write_text(
        config.read_text().replace("model: local-model,", "model: local-model, pricing: {input_per_mtok: 1, output_per_mtok: 1},")
    )
    code, output, results, summary = run(config)
    assert all(r["cached"] and r["cost_usd"] > 0 for r in results) and summary["cost_missing_cells"] == 0


def test_python_targets_are_not_reported_as_missing_prices(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        "def answer(q):\n    return {'text': '4 and Paris and 30 days', 'usage': {'input_tokens': 5, 'output_tokens': 5}}\n"
    )
    config = project(tmp_path, "targets: [{id: py, type: python, callable: 'agent.py:answer'}]")
    code, output, results, summary = run(config)
    assert code == 0, output
    assert [r["target_type"] for r in results] == ["python"] * 3
    assert summary["cost_missing_cells"] == 0 and "prices missing" not in output
    assert not (tmp_path / ".evalx").exists()  # python targets are not cached unless asked


def test_python_targets_cache_with_cache_true(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("CALLS = []\ndef answer(q):\n    CALLS.append(q)\n    return '4 and Paris and 30 days'\n")
    config = project(tmp_path, "targets: [{id: py, type: python, callable: 'agent.py:answer', cache: true}]")
    _, _, first, _ = run(config)
    _, _, second, summary = run(config)
    assert [r["cached"] for r in first] == [False] * 3
    assert [r["cached"] for r in second] == [True] * 3 and summary["cached_cells"] == 3


# --- retries and rate limits through the shared HTTP layer ----------------------------------


def test_429_with_retry_after_then_success(server: FakeLLMServer, tmp_path: Path) -> None:
    server.script(Canned(429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}, {"Retry-After": "0"}))
    config = project(tmp_path, openai_target(server, "    concurrency: 1"))
    code, output, results, _ = run(config)
    assert code == 0, output
    assert server.count() == 4 and [r["status"] for r in results] == ["pass"] * 3


def test_a_500_burst_is_retried(server: FakeLLMServer, tmp_path: Path) -> None:
    server.script(*[Canned(500, {"error": {"message": "upstream hiccup"}}) for _ in range(3)])
    config = project(tmp_path, openai_target(server, "    concurrency: 1\n    retries: 3"))
    code, output, results, _ = run(config)
    assert code == 0, output
    assert server.count() == 6 and [r["status"] for r in results] == ["pass"] * 3


def test_a_500_burst_longer_than_the_retries_is_a_cell_error(server: FakeLLMServer, tmp_path: Path) -> None:
    server.script(*[Canned(503, {"error": {"message": "overloaded"}}) for _ in range(3)])
    config = project(tmp_path, openai_target(server, "    concurrency: 1\n    retries: 2"))
    code, output, results, _ = run(config)
    assert code == 1
    assert results[0]["status"] == "error"
    assert results[0]["error"] == f"HTTP 503 from {server.url}/v1/chat/completions: overloaded (after 2 retries)"
    assert [r["status"] for r in results[1:]] == ["pass", "pass"]


def test_insufficient_quota_is_not_retried(server: FakeLLMServer, tmp_path: Path) -> None:
    server.script(
        Canned(429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}, {"Retry-After": "0"})
    )
    config = project(tmp_path, openai_target(server, "    concurrency: 1"))
    code, _, results, _ = run(config)
    assert results[0]["status"] == "error" and "exceeded your current quota" in results[0]["error"]
    assert server.count() == 3  # the 429 was not retried


def test_wrong_key_is_a_clear_error_without_the_key(server: FakeLLMServer, tmp_path: Path) -> None:
    wrong = "sk-wrong-key-9876543210"
    body = openai_target(server).replace(OPENAI_KEY, wrong)
    config = project(tmp_path, body)
    code, output, results, _ = run(config)
    assert code == 3  # every cell of the target errored
    assert results[0]["error"] == (
        f"HTTP 401 unauthorized from {server.url}/v1/chat/completions: "
        "the API key is wrong or missing (check the target's api_key or OPENAI_API_KEY)"
    )
    assert server.count() == 3  # a 401 is not retried
    assert wrong not in output and wrong not in all_output_files(config)


def test_anthropic_requires_a_key(tmp_path: Path, server: FakeLLMServer) -> None:
    config = project(
        tmp_path, f"targets: [{{id: c, type: provider, provider: anthropic, model: claude-3-5-haiku-latest, base_url: '{server.url}'}}]"
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code == 2
    assert "provider 'anthropic' needs an API key: set the target's api_key or ANTHROPIC_API_KEY" in result.output
    assert server.count() == 0


def test_rate_limit_rpm_is_accepted(server: FakeLLMServer, tmp_path: Path) -> None:
    # 6000 rpm = one request every 10 ms: the run stays fast; the spacing itself is unit-tested
    config = project(tmp_path, openai_target(server, "    rate_limit: {rpm: 6000}"))
    code, output, results, _ = run(config)
    assert code == 0, output
    assert server.count() == 3


# --- Done when: Anthropic, tool calls included -------------------------------------------------


def test_anthropic_with_tool_calls(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(
        tmp_path,
        f"""
        targets:
          - id: claude
            type: provider
            provider: anthropic
            model: claude-3-5-haiku-20241022
            base_url: {server.url}
            api_key: {ANTHROPIC_KEY}
            system: Answer briefly.
            params: {{max_tokens: 200, temperature: 0}}
            tools:
              - name: get_weather
                description: Current weather for a city
                parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}
        """,
        cases="""
        datasets:
          - id: tools
            cases:
              - id: weather
                input: "What's the weather in Paris?"
                assert:
                  - {type: must_call_tools, tools: [get_weather]}
                  - {type: contains, value: "check the weather"}
              - id: capital
                input: "What is the capital of France?"
                assert: [{type: icontains, value: paris}, {type: max_tool_calls, value: 0}]
        """,
    )
    code, output, results, summary = run(config)
    assert code == 0, output
    weather = results[0]["output"]
    assert weather["tool_calls"] == [{"name": "get_weather", "args": {"city": "Paris"}, "result": None}]
    assert weather["raw"]["stop_reason"] == "tool_use"
    # usage: input 20 + 5 cache reads; price from anthropic.yaml (claude-3-5-haiku*: 0.80 / 4.00 / 0.08)
    assert weather["usage"] == {"input_tokens": 25, "output_tokens": 10, "cache_hit_tokens": 5}
    assert results[0]["cost_usd"] == pytest.approx((20 * 0.80 + 5 * 0.08 + 10 * 4.00) / 1e6)

    sent = server.requests[0]
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.body["system"] == "Answer briefly." and sent.body["max_tokens"] == 200
    assert sent.body["messages"] == [{"role": "user", "content": "What's the weather in Paris?"}]
    assert sent.body["tools"][0]["input_schema"]["required"] == ["city"]
    assert "x-api-key" not in results[0]["output"]["request"]["headers"]
    assert results[0]["output"]["request"]["headers"] == {"anthropic-version": "2023-06-01"}
    assert ANTHROPIC_KEY not in output and ANTHROPIC_KEY not in all_output_files(config)


def test_openai_tool_calls_and_messages(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(
        tmp_path,
        f"""
        targets:
          - id: mini
            type: provider
            provider: openai
            model: gpt-4o-mini
            base_url: {server.url}/v1
            api_key: {OPENAI_KEY}
            messages:
              - {{role: system, content: "Use tools."}}
              - {{role: user, content: "Hello"}}
              - {{role: assistant, content: "Hi! How can I help?"}}
              - {{role: user, content: "{{{{ case.input }}}}"}}
            tools:
              - {{type: function, function: {{name: get_weather, parameters: {{type: object}}}}}}
        """,
        cases="""
        datasets:
          - id: tools
            cases:
              - {id: weather, input: "weather in Paris?", assert: [{type: must_call_tools, tools: [get_weather]}]}
        """,
    )
    code, output, results, _ = run(config)
    assert code == 0, output
    assert results[0]["output"]["tool_calls"][0]["args"] == {"city": "Paris"}  # decoded from the JSON string
    assert results[0]["output"]["raw"]["tool_call_ids"] == ["call_1"]
    sent = server.requests[0].body
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    assert sent["tools"] == [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


# --- Done when: a new provider is one YAML file in providers_dir -------------------------------


ACME = """
# a made-up API: POST /acme/generate {"query": ...} -> {"result": {"answer": ...}, "meter": {...}}
name: acme
description: Acme inference API
base_url: ${ACME_URL:-http://acme.invalid}
auth:
  header: X-Acme-Token
  value: "{{ api_key }}"
  env: ACME_TOKEN
  required: true
request:
  path: /acme/generate
  body: |
    {"engine": {{ model | tojson }}, "query": {{ messages[-1].content | tojson }}
     {%- if system %}, "preamble": {{ system | tojson }}{% endif %}}
response:
  text: response.result.answer
  usage:
    input_tokens: response.meter.in
    output_tokens: response.meter.out
errors:
  message: response.problem
pricing:
  acme-*: {input_per_mtok: 10, output_per_mtok: 20}
"""


def test_a_new_provider_is_a_yaml_file_in_providers_dir(server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my-providers").mkdir()
    (tmp_path / "my-providers" / "acme.yaml").write_text(ACME.lstrip(), encoding="utf-8")
    monkeypatch.setenv("ACME_URL", server.url)
    monkeypatch.setenv("ACME_TOKEN", "acme-secret-token-42")
    config = project(
        tmp_path,
        """
        providers_dir: my-providers
        targets:
          - {id: acme, type: provider, provider: acme, model: acme-large, system: Be nice.}
        """,
    )
    listing = CliRunner().invoke(main, ["providers", "-c", str(config)])
    assert listing.exit_code == 0 and "acme" in listing.output and "Acme inference API" in listing.output

    code, output, results, summary = run(config)
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * 3
    assert server.bodies("/acme/generate")[0] == {"engine": "acme-large", "query": "What is 2 + 2?", "preamble": "Be nice."}
    assert all(r["cost_usd"] == pytest.approx((7 * 10 + 3 * 20) / 1e6) for r in results)
    assert "acme-secret-token-42" not in output and "acme-secret-token-42" not in all_output_files(config)

    # its error mapping applies too: a 401 names the key's variable, a 400 quotes errors.message
    server.script(Canned(400, {"problem": "query too long"}, paths=("/acme/generate",)))
    code, output, results, _ = run(config, "--no-cache")
    assert results[0]["error"] == f"HTTP 400 from {server.url}/acme/generate: query too long"


def test_a_broken_response_expression_names_its_line(server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p").mkdir()
    broken = ACME.replace("input_tokens: response.meter.in", "input_tokens: response.result.answer")
    (tmp_path / "p" / "acme.yaml").write_text(broken.lstrip(), encoding="utf-8")
    monkeypatch.setenv("ACME_URL", server.url)
    monkeypatch.setenv("ACME_TOKEN", "acme-secret-token-42")
    monkeypatch.chdir(tmp_path)
    config = project(tmp_path, "providers_dir: p\ntargets: [{id: acme, type: provider, provider: acme, model: acme-1}]")
    code, output, results, _ = run(config)
    assert code == 3
    assert results[0]["error"].startswith(
        "reading the response of provider 'acme': p/acme.yaml:18 response.usage.input_tokens: expected a number of tokens, got 'The answer is 4.'"
    )


# --- optional: a real local OpenAI-compatible server ---------------------------------------------


@pytest.mark.skipif(not os.environ.get("EVALX_TEST_OPENAI_BASE_URL"), reason="set EVALX_TEST_OPENAI_BASE_URL to test a real server")
def test_real_openai_compatible_server(tmp_path: Path) -> None:
    base_url = os.environ["EVALX_TEST_OPENAI_BASE_URL"]
    model = os.environ.get("EVALX_TEST_OPENAI_MODEL", "local")
    key = os.environ.get("EVALX_TEST_OPENAI_API_KEY", "no-key")
    config = project(
        tmp_path,
        f"""
        targets:
          - id: local
            type: provider
            provider: openai
            model: {json.dumps(model)}
            base_url: {json.dumps(base_url)}
            api_key: {json.dumps(key)}
            params: {{temperature: 0, max_tokens: 32}}
            pricing: {{input_per_mtok: 0, output_per_mtok: 0}}
            timeout_s: 300
        """,
        cases="""
        datasets:
          - id: real
            cases: [{id: hello, input: "Reply with the single word: hello", assert: [{type: completed}]}]
        """,
    )
    code, output, results, _ = run(config)
    assert results[0]["status"] == "pass", results[0]["error"] or output
    assert results[0]["output"]["usage"]["output_tokens"] > 0 and results[0]["cost_usd"] == 0


def test_summary_counts_missing_prices_only_for_priced_target_types() -> None:
    from evalx.results.summary import SummaryBuilder

    def cell(i: int, kind: str | None, *, tokens: int = 0, error: str | None = None, output: bool = True) -> dict[str, Any]:
        usage = {"input_tokens": tokens, "output_tokens": tokens, "cache_hit_tokens": 0}
        result = {
            "run_id": "r",
            "index": i,
            "target": kind or "old",
            "dataset": "d",
            "case_id": f"c{i}",
            "repeat": 0,
            "status": "error" if error else "pass",
            "assertions": [],
            "output": {"text": "x", "usage": usage} if output else {},
            "latency_ms": 1.0,
            "cost_usd": None,
            "cached": False,
            "error": error,
        }
        if kind is not None:
            result["target_type"] = kind
        return result

    builder = SummaryBuilder("r", "n", "2026-01-01T00:00:00+00:00")
    for i, args in enumerate(
        [
            ("python", {"tokens": 5}),  # a callable reporting tokens: not a priced resource
            ("provider", {}),  # answered without usage and without a price: missing
            ("provider", {"error": "HTTP 500"}),  # errored, nothing billed
            ("provider", {"output": False}),  # never ran (cost guard)
            ("engine", {"tokens": 5}),  # used tokens, no price: missing
            (None, {"tokens": 5}),  # results from before target_type: "used tokens" rule
        ]
    ):
        builder.add(cell(i, args[0], **args[1]))
    summary = builder.finish("2026-01-01T00:00:01+00:00", 1.0)
    assert summary["cost_missing_cells"] == 3
