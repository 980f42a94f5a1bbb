"""Issue 14, "A cache that serves stale or foreign answers": a scripted server on 127.0.0.1, evalx run through its CLI.

The cache key covers everything that can change the request or how the answer is read: the provider
definition's request and response mapping, the headers (by digest: the cache holds no secret), the base
URL, the rendered body (params, tools, json_mode, an engine's ``vars:``...).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells
from scripted_server import ScriptedServer, openai_answer

from evalx.cli import main


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer().start()
    yield s
    s.stop()


def project(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: cache\n" + textwrap.dedent(body).strip("\n") + "\ndatasets:\n  - id: d\n    cases: [{id: c1, input: hello}]\n",
        encoding="utf-8",
    )
    return config


def run(config: Path, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), *args])
    assert result.exit_code in (0, 1), result.output
    run_dir = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)[-1]
    return sorted(read_cells(run_dir), key=lambda r: r["index"])


ECHO = """
name: echo
base_url: ${ECHO_URL:-http://echo.invalid}
request:
  path: /v1/chat/completions
  body: '{"model": {{ model | tojson }}, "messages": {{ messages | tojson }}}'
response:
  text: response.choices[0].message.content
  stop_reason: response.choices[0].finish_reason
  usage:
    input_tokens: response.usage.prompt_tokens
    output_tokens: response.usage.completion_tokens
pricing:
  echo-1: {input_per_mtok: 1, output_per_mtok: 2}
"""


def test_editing_how_a_provider_reads_its_answer_is_not_served_from_the_cache(
    server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "providers").mkdir()
    definition = tmp_path / "providers" / "echo.yaml"
    definition.write_text(ECHO.lstrip(), encoding="utf-8")
    server.answers["p"] = openai_answer("the text", usage={"prompt_tokens": 3, "completion_tokens": 5})
    config = project(
        tmp_path,
        f"providers_dir: providers\ntargets:\n  - {{id: t, type: provider, provider: echo, model: echo-1, base_url: {server.url}/p}}",
    )

    first = run(config)
    assert first[0]["output"]["text"] == "the text" and not first[0]["cached"]
    again = run(config)
    assert again[0]["cached"] and server.hits["p"] == 1  # the control: unchanged, it is cached

    definition.write_text(ECHO.lstrip().replace("text: response.choices[0].message.content", "text: response.id"), encoding="utf-8")
    edited = run(config)
    assert edited[0]["output"]["text"] == "chatcmpl-1" and not edited[0]["cached"] and server.hits["p"] == 2

    # prices are not part of the key: a cached answer is repriced instead
    definition.write_text(
        ECHO.lstrip()
        .replace("text: response.choices[0].message.content", "text: response.id")
        .replace("output_per_mtok: 2", "output_per_mtok: 4"),
        encoding="utf-8",
    )
    repriced = run(config)
    assert repriced[0]["cached"] and server.hits["p"] == 2
    assert repriced[0]["cost_usd"] == pytest.approx((3 * 1 + 5 * 4) / 1e6)

    # the request mapping too: a changed body template is a new request
    definition.write_text(
        ECHO.lstrip()
        .replace("text: response.choices[0].message.content", "text: response.id")
        .replace('"messages": {{ messages | tojson }}}', '"messages": {{ messages | tojson }}, "seed": 7}'),
        encoding="utf-8",
    )
    assert not run(config)[0]["cached"] and server.hits["p"] == 3


def test_targets_that_differ_only_in_a_header_do_not_share_answers(server: ScriptedServer, tmp_path: Path) -> None:
    base = f"{server.url}/routes/v1"
    config = project(
        tmp_path,
        f"""
        targets:
          - {{id: a, type: provider, provider: openai, model: gpt-4o-mini, base_url: {base}, headers: {{X-Route: alpha}}}}
          - {{id: b, type: provider, provider: openai, model: gpt-4o-mini, base_url: {base}, headers: {{X-Route: beta}}}}
        """,
    )
    first = {r["target"]: r for r in run(config)}
    assert first["a"]["output"]["text"] == "route=alpha" and first["b"]["output"]["text"] == "route=beta"
    assert server.hits["routes"] == 2
    again = {r["target"]: r for r in run(config)}
    assert again["a"]["cached"] and again["b"]["cached"] and server.hits["routes"] == 2
    assert again["a"]["output"]["text"] == "route=alpha" and again["b"]["output"]["text"] == "route=beta"


def test_engine_targets_key_on_headers_url_and_the_rendered_body(server: ScriptedServer, tmp_path: Path) -> None:
    server.answers["agent"] = lambda body: [("text_delta", {"text": f"msg={body['message']}"}), ("done", {})]
    target = (
        f"{{id: e, type: engine, url: {server.url}/agent, cache: true, body: {{message: '{{{{ vars.greeting }}}} {{{{ case.input }}}}'}}}}"
    )
    config = project(tmp_path, f"vars: {{greeting: hi}}\ntargets:\n  - {target}")
    assert run(config)[0]["output"]["text"] == "msg=hi hello"
    assert run(config)[0]["cached"] and server.hits["agent"] == 1  # a new run id (so task_id) still hits
    config.write_text(config.read_text().replace("greeting: hi", "greeting: bye"), encoding="utf-8")
    changed = run(config)[0]
    assert changed["output"]["text"] == "msg=bye hello" and not changed["cached"] and server.hits["agent"] == 2
    config.write_text(config.read_text().replace("cache: true", "cache: true, headers: {X-Agent-Version: '2'}"), encoding="utf-8")
    assert not run(config)[0]["cached"] and server.hits["agent"] == 3


@pytest.mark.parametrize(
    "change",
    [
        ("model: gpt-4o-mini", "model: gpt-4o-mini, params: {temperature: 0.5}"),
        ("model: gpt-4o-mini", "model: gpt-4o-mini, json_mode: true"),
        ("model: gpt-4o-mini", "model: gpt-4o-mini, tools: [{name: lookup, parameters: {type: object}}]"),
        ("model: gpt-4o-mini", "model: gpt-4o-mini, system: Be brief."),
        ("/one/v1", "/two/v1"),
    ],
    ids=["params", "json_mode", "tools", "system", "base_url"],
)
def test_whatever_changes_the_request_changes_the_key(server: ScriptedServer, tmp_path: Path, change: tuple[str, str]) -> None:
    config = project(
        tmp_path, f"targets:\n  - {{id: t, type: provider, provider: openai, model: gpt-4o-mini, base_url: {server.url}/one/v1}}"
    )
    run(config)
    assert run(config)[0]["cached"]
    config.write_text(config.read_text().replace(*change), encoding="utf-8")
    assert not run(config)[0]["cached"]


def test_the_cache_holds_no_secret_header_value(server: ScriptedServer, tmp_path: Path) -> None:
    secret = "sk-route-secret-8c1f2a77d9"
    config = project(
        tmp_path,
        f"""
        targets:
          - {{id: t, type: provider, provider: openai, model: gpt-4o-mini, base_url: {server.url}/s/v1, api_key: key-secret-55aa77cc, headers: {{X-Tenant-Secret: {secret}}}}}
          - {{id: e, type: engine, url: {server.url}/agent, cache: true, api_key: engine-key-99ff00, headers: {{X-Tenant-Secret: {secret}}}}}
        """,
    )
    run(config)
    assert all(r["cached"] for r in run(config))  # the cache was written (and read)
    cache_files = [p for p in (tmp_path / ".evalx").iterdir() if p.is_file()]
    assert any(p.name.startswith("cache.sqlite") for p in cache_files)
    for path in cache_files:
        data = path.read_bytes()
        for value in (secret, "key-secret-55aa77cc", "engine-key-99ff00"):
            assert value.encode() not in data, (path.name, value)
