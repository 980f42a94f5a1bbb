"""Provider definitions: the schema, the shipped YAMLs, loading, rendering, extraction, pricing, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from evalx.cli import main
from evalx.common.documents import load_yaml
from evalx.errors import ConfigError
from evalx.targets.definitions import PROVIDER_SCHEMA, Price, available, find_provider, load_definition, schema_json, shipped_dir
from evalx.targets.shipped import data_dir

REPO = Path(__file__).resolve().parents[2]
#: a target names a deployment of its own, not a model: no price table to look it up in
UNPRICED = ("azure-openai",)
SHIPPED = ("anthropic", "azure-openai", "bedrock", "cohere", "gemini", "mistral", "ollama", "openai", "openai-responses", "vertex")

SCOPE = {
    "model": "m-1",
    "messages": [{"role": "user", "content": 'say "hi"\nplease'}],
    "system": "Be brief.",
    "params": {"temperature": 0, "max_tokens": 50},
    "tools": [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ],
    "json_mode": False,
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# --- schema and shipped files ---------------------------------------------------


def test_provider_schema_file_is_generated_from_code() -> None:
    assert (REPO / "schemas/provider.schema.json").read_text(encoding="utf-8") == schema_json()
    result = CliRunner().invoke(main, ["schema", "--provider"])
    assert result.exit_code == 0 and json.loads(result.output) == PROVIDER_SCHEMA


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_definitions_are_valid(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.openai.azure.com")  # azure-openai has no default
    path = shipped_dir() / f"{name}.yaml"
    data = load_yaml(path.read_text(encoding="utf-8"), str(path)).data
    assert list(Draft202012Validator(PROVIDER_SCHEMA).iter_errors(data)) == []
    d = load_definition(path, shipped=True)
    assert d.name == name and d.shipped and d.base_url
    assert d.pricing or name in UNPRICED


def test_data_dir_finds_the_checkout_files() -> None:
    assert (data_dir("providers") / "openai.yaml").is_file()
    assert (data_dir("schemas") / "provider.schema.json").is_file()
    assert set(available()) >= set(SHIPPED)
    assert not (REPO / "providers/.keep").exists()


def test_base_url_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    assert find_provider("openai").base_url == "http://127.0.0.1:8080/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert find_provider("openai").base_url == "https://api.openai.com/v1"


# --- request rendering ------------------------------------------------------------


def test_openai_body() -> None:
    body = find_provider("openai").render_body(SCOPE)
    assert body == {
        "model": "m-1",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'say "hi"\nplease'}],
        "tools": [{"type": "function", "function": SCOPE["tools"][0]}],
        "temperature": 0,
        "max_tokens": 50,
    }
    bare = find_provider("openai").render_body({**SCOPE, "system": None, "tools": [], "params": {}})
    assert bare == {"model": "m-1", "messages": SCOPE["messages"]}


def test_anthropic_body_has_top_level_system_and_input_schema() -> None:
    body = find_provider("anthropic").render_body(SCOPE)
    assert body["system"] == "Be brief." and body["max_tokens"] == 50 and body["temperature"] == 0
    assert body["messages"] == SCOPE["messages"]
    assert body["tools"] == [{"name": "get_weather", "description": "Weather for a city", "input_schema": SCOPE["tools"][0]["parameters"]}]
    bare = find_provider("anthropic").render_body({**SCOPE, "system": None, "tools": [{"name": "t"}], "params": {}})
    assert bare == {
        "model": "m-1",
        "max_tokens": 1024,  # the API requires it
        "tools": [{"name": "t", "input_schema": {"type": "object", "properties": {}}}],
        "messages": SCOPE["messages"],
    }


def test_ollama_body_puts_sampling_params_under_options() -> None:
    body = find_provider("ollama").render_body({**SCOPE, "params": {"temperature": 0.2, "max_tokens": 9, "format": "json"}})
    assert body["stream"] is False and body["format"] == "json"
    assert body["options"] == {"temperature": 0.2, "num_predict": 9}
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


# --- response extraction -----------------------------------------------------------


def _extract(name: str, response: dict) -> dict:
    d = find_provider(name)
    scope = {"response": response}
    items = d.evaluate(("response", "tool_calls", "items"), scope) or []
    return {
        "text": d.evaluate(("response", "text"), scope),
        "calls": [
            (
                d.evaluate(("response", "tool_calls", "name"), {**scope, "item": i}),
                d.evaluate(("response", "tool_calls", "args"), {**scope, "item": i}),
            )
            for i in items
        ],
        "usage": {k: d.evaluate(("response", "usage", k), scope) for k in ("input_tokens", "output_tokens", "cached_tokens")},
    }


def test_openai_extraction_decodes_tool_arguments() -> None:
    response = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "refunds"}'}},
                        {"id": "c2", "type": "function", "function": {"name": "broken", "arguments": "{not json"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 64}},
    }
    got = _extract("openai", response)
    assert got["text"] == ""
    assert got["calls"] == [("search", {"q": "refunds"}), ("broken", "{not json")]  # invalid JSON is kept as sent
    assert got["usage"] == {"input_tokens": 100, "output_tokens": 20, "cached_tokens": 64}
    # a server that reports no usage and no tool calls is fine
    assert _extract("openai", {"choices": [{"message": {"content": "hi"}}]}) == {
        "text": "hi",
        "calls": [],
        "usage": {"input_tokens": None, "output_tokens": None, "cached_tokens": None},
    }


def test_anthropic_extraction_reads_content_blocks() -> None:
    response = {
        "content": [
            {"type": "text", "text": "Checking. "},
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "text", "text": "Done."},
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 2},
    }
    got = _extract("anthropic", response)
    assert got["text"] == "Checking. Done."
    assert got["calls"] == [("get_weather", {"city": "Paris"})]
    # evalx's input_tokens include prompt-cache reads and writes
    assert got["usage"] == {"input_tokens": 42, "output_tokens": 5, "cached_tokens": 30}


def test_ollama_extraction() -> None:
    response = {
        "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
        "prompt_eval_count": 26,
        "eval_count": 8,
        "done_reason": "stop",
    }
    got = _extract("ollama", response)
    assert got["calls"] == [("f", {"x": 1})] and got["usage"]["input_tokens"] == 26 and got["usage"]["output_tokens"] == 8


def test_error_classification() -> None:
    openai = find_provider("openai")
    assert openai.classify(429, '{"error": {"code": "rate_limit_exceeded"}}') == "rate_limited"
    assert openai.classify(429, '{"error": {"code": "insufficient_quota"}}') == "fatal"  # waiting will not help
    assert openai.classify(503, "") == "retryable"
    assert openai.classify(400, "") == "fatal"
    anthropic = find_provider("anthropic")
    assert anthropic.classify(529, '{"error": {"type": "overloaded_error"}}') == "retryable"
    assert anthropic.retry_after_header.lower() == "retry-after"


# --- pricing ----------------------------------------------------------------------


def test_pricing_exact_then_longest_glob() -> None:
    openai = find_provider("openai")
    assert openai.price("gpt-4o-mini") == Price(0.15, 0.60, 0.075)
    assert openai.price("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60, 0.075)  # not gpt-4o's price
    assert openai.price("gpt-4o-2024-05-13") == Price(5.0, 15.0)  # exact beats the glob
    assert openai.price("llama-3.1-8b") is None  # unknown: the cost will be null, not 0
    anthropic = find_provider("anthropic")
    assert anthropic.price("claude-opus-4-5-20251101") == Price(5.0, 25.0, 0.5)
    assert anthropic.price("claude-opus-4-20250514") == Price(15.0, 75.0, 1.5)


def test_price_counts_cached_input_at_its_own_rate() -> None:
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
    # 1M input of which 400k cached, 100k output
    assert price.cost(1_000_000, 100_000, 400_000) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)
    assert Price(1.0, 1.0).cost(1000, 0, 500) == pytest.approx(0.001)  # no cached price: input price


# --- definition errors name FILE:LINE -------------------------------------------------


def test_definition_errors_name_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(
        tmp_path / "providers/acme.yaml",
        """
        name: acme
        base_url: http://example.invalid
        request:
          path: /generate
          bodyy: "{}"
        response:
          text: response.answer
        pricing:
          acme-1: {input_per_mtok: 1}
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_definition(path)
    assert [str(i) for i in err.value.issues] == [
        "providers/acme.yaml:3 request.body: 'body' is a required property",
        "providers/acme.yaml:5 request.bodyy: unknown key 'bodyy' (did you mean 'body'?)",
        "providers/acme.yaml:9 pricing.acme-1.output_per_mtok: 'output_per_mtok' is a required property",
    ]


def test_template_errors_name_the_line_inside_the_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(
        tmp_path / "providers/acme.yaml",
        """
        request:
          path: /generate
          body: |
            {
              "model": {{ model | tojson }
            }
        response:
          text: response.answer[
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_definition(path)
    lines = [str(i) for i in err.value.issues]
    assert lines[0].startswith("providers/acme.yaml:5 request.body: template syntax error:")
    assert lines[1].startswith("providers/acme.yaml:8 response.text: expression syntax error:")


def test_an_unknown_filter_or_test_in_an_expression_is_an_error_at_load_as_jinja_compiles_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only code generation finds an unknown filter or test; the load checks every expression that has one, at any depth,
    and leaves one in a conditional branch to run time, as ``Environment.compile_expression`` does."""
    monkeypatch.chdir(tmp_path)
    path = write(
        tmp_path / "providers/acme.yaml",
        """
        request: {path: /generate, body: "{}"}
        response:
          text: response.answer | no_such_filter
          stop_reason: "[response.reason is no_such_test][0]"
          usage:
            input_tokens: response.a if response.b else response.c | no_such_filter
            output_tokens: response.usage.out or 0
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_definition(path)
    assert [str(i) for i in err.value.issues] == [
        "providers/acme.yaml:3 response.text: expression syntax error: No filter named 'no_such_filter'.",
        "providers/acme.yaml:4 response.stop_reason: expression syntax error: No test named 'no_such_test'.",
    ]


def test_path_and_stream_end_templates_are_checked_and_rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = """
        request:
          path: /models/{{ model | urlencode }}:{{ "stream" if stream else "generate" }}
          body: "{}"
        response:
          text: response.answer
        stream:
          params: {}
          end:
            when: event.done
          events: {message: {text: event.piece}}
        """
    path = write(tmp_path / "providers/acme.yaml", text)
    d = load_definition(path)
    assert d.render_path(("request", "path"), {"model": "acme/large v2", "stream": False}) == "/models/acme/large%20v2:generate"
    assert d.render_path(("request", "path"), {"model": "m", "stream": True}) == "/models/m:stream"
    assert d.stream is not None and d.stream.end_when == "event.done"
    broken = text.replace("{{ model | urlencode }}", "{{ model | urlencode }").replace("event.done", "event.done[")
    write(tmp_path / "providers/acme.yaml", broken)
    with pytest.raises(ConfigError) as err:
        load_definition(path)
    lines = [str(i) for i in err.value.issues]
    assert lines[0].startswith("providers/acme.yaml:2 request.path: template syntax error:")
    assert lines[1].startswith("providers/acme.yaml:9 stream.end.when: expression syntax error:")


def test_name_must_match_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "p/acme.yaml", 'name: other\nrequest: {path: /x, body: "{}"}\nresponse: {text: response.a}\n')
    with pytest.raises(ConfigError, match=r"^p/acme.yaml:1 name: name 'other' must match the file name 'acme'$"):
        load_definition(path)


def test_unknown_provider_in_a_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path / "evalconfig.yaml",
        """
        version: 1
        targets:
          - id: m
            type: provider
            provider: opnai
            model: x
        datasets:
          - {id: d, cases: [{id: a, input: hi, assert: [{type: contains, value: hi}]}]}
        """,
    )
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 2
    assert "evalconfig.yaml:5 targets[0].provider: unknown provider 'opnai' (did you mean 'openai'?)" in result.output


def test_a_broken_user_definition_fails_validate_naming_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "my-providers/acme.yaml", 'request: {path: /x, body: "{}"}\nresponse: {text: response.a, txet: b}\n')
    write(
        tmp_path / "evalconfig.yaml",
        """
        version: 1
        providers_dir: my-providers
        targets:
          - {id: m, type: provider, provider: acme, model: x}
        datasets:
          - {id: d, cases: [{id: a, input: hi, assert: [{type: contains, value: hi}]}]}
        """,
    )
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 2
    assert "my-providers/acme.yaml:2 response.txet: unknown key 'txet' (did you mean 'text'?)" in result.output


# --- evalx providers ------------------------------------------------------------------


def test_providers_command_lists_shipped_and_user_definitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["providers"])  # no config here: the shipped ones
    assert result.exit_code == 0, result.output
    for name in SHIPPED:
        assert name in result.output
    assert "shipped" in result.output and "providers_dir" not in result.output

    write(tmp_path / "custom/acme.yaml", 'description: Acme inference\nrequest: {path: /x, body: "{}"}\nresponse: {text: response.a}\n')
    write(tmp_path / "custom/openai.yaml", 'description: my own openai\nrequest: {path: /x, body: "{}"}\nresponse: {text: response.a}\n')
    write(
        tmp_path / "sub/evalconfig.yaml",
        """
        version: 1
        providers_dir: ../custom
        targets: [{id: p, type: python, callable: "x:y"}]
        datasets: [{id: d, cases: [{id: a, input: hi}]}]
        """,
    )
    result = CliRunner().invoke(main, ["providers", "-c", "sub/evalconfig.yaml"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[2:]}
    assert "Acme inference" in rows["acme"] and "custom/acme.yaml" in rows["acme"]
    assert "my own openai" in rows["openai"] and "overrides shipped" in rows["openai"] and "custom/openai.yaml" in rows["openai"]
    assert "shipped" in rows["anthropic"]


def test_providers_command_with_a_missing_explicit_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["providers", "-c", "nope.yaml"])
    assert result.exit_code == 2 and "nope.yaml: config file not found" in result.output


# --- packaging: schemas/ and providers/ ship in the wheel ---------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and "hatchling" in proc.stderr:
        pytest.skip("hatchling is not installed (pip install hatchling)")
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("evalx_runner-*.whl")
    return whl


def test_wheel_contains_schemas_and_providers(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in SHIPPED:
        assert f"evalx/_data/providers/{name}.yaml" in names
    assert "evalx/_data/schemas/provider.schema.json" in names
    assert "evalx/_data/schemas/evalconfig.schema.json" in names
    assert "evalx/py.typed" in names  # PEP 561: plugin and target authors' type checkers read evalx's hints


@pytest.mark.slow
def test_installed_wheel_lists_shipped_providers_from_anywhere(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin/python"
    site = Path(
        subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    )
    # dependencies come from the test venv (no network); evalx itself only from the wheel
    (site / "_evalx_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [str(python), "-c", "import evalx; print(evalx.__file__)"], cwd=elsewhere, capture_output=True, text=True, env=env
    )
    assert str(site) in where.stdout, where.stdout + where.stderr  # the installed copy, not the checkout
    proc = subprocess.run([str(env_dir / "bin/evalx"), "providers"], cwd=elsewhere, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    for name in SHIPPED:
        assert name in proc.stdout
    assert "_data/providers/openai.yaml" in proc.stdout
