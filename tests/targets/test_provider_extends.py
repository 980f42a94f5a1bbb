"""``extends:`` in provider definitions: the loader merges a definition onto the one it names, once, for everyone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.errors import ConfigError
from evalx.targets.definitions import find_provider


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def issues(name: str, user_dir: Path) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        find_provider(name, user_dir)
    return [str(i) for i in exc.value.issues]


def test_mappings_merge_key_by_key_lists_and_scalars_replace_and_null_removes(tmp_path: Path) -> None:
    write(
        tmp_path,
        "mine",
        """
        name: mine
        extends: openai
        base_url: http://127.0.0.1:9/v9
        request:
          path: /v9/chat
        errors:
          retryable: {status: [503]}
        embeddings: null
        params: [temperature]
        """,
    )
    mine, openai = find_provider("mine", tmp_path), find_provider("openai")
    assert mine.path == "/v9/chat" and mine.body == openai.body and mine.method == "POST"  # request.path only
    assert mine.base_url == "http://127.0.0.1:9/v9"
    assert mine.retryable.statuses == frozenset({503}) and mine.fatal.statuses == openai.fatal.statuses
    assert mine.known_params == ("temperature",)  # a list replaces
    assert mine.embeddings is None and mine.stream is not None and mine.auth_env == "OPENAI_API_KEY"
    assert mine.extends == ("openai",) and "extends" not in mine.loaded.data  # resolved
    # each key is named where it was written
    assert mine.where("request", "path") == f"{mine.file}:5 request.path"
    assert mine.where("request", "body").startswith(f"{openai.file}:")


def test_chains_resolve_nearest_first(tmp_path: Path) -> None:
    write(tmp_path, "a", "name: a\nextends: openai\nbase_url: http://a/v1\ndescription: A\n")
    write(tmp_path, "b", "name: b\nextends: a\nauth: {env: B_KEY}\n")
    b = find_provider("b", tmp_path)
    assert (b.base_url, b.description, b.auth_env, b.auth_header) == ("http://a/v1", "A", "B_KEY", "Authorization")
    assert b.extends == ("a", "openai")


def test_a_project_file_extending_its_own_name_extends_the_shipped_one(tmp_path: Path) -> None:
    write(tmp_path, "openai", "name: openai\nextends: openai\nheaders: {X-Team: evals}\n")
    d = find_provider("openai", tmp_path)
    assert d.headers == {"X-Team": "evals"} and d.path == "/chat/completions" and not d.shipped


def test_an_unknown_parent_is_one_line_at_the_extends_key(tmp_path: Path) -> None:
    path = write(tmp_path, "mine", "name: mine\ndescription: x\nextends: opneai\n")
    [issue] = issues("mine", tmp_path)
    assert issue.startswith(f"{path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}:3 extends: ")
    assert "unknown provider 'opneai'" in issue and "did you mean 'openai'" in issue and "\n" not in issue


def test_a_cycle_is_one_line_naming_the_loop(tmp_path: Path) -> None:
    write(tmp_path, "a", "name: a\nextends: b\n")
    write(tmp_path, "b", "name: b\n\nextends: a\n")
    [issue] = issues("a", tmp_path)
    assert ":3 extends: " in issue and "b.yaml" in issue and "cycle: a -> b -> a" in issue
    write(tmp_path, "self", "name: self\nextends: self\n")
    [issue] = issues("self", tmp_path)
    assert "self.yaml:2 extends: extends its own name, and no shipped definition is called 'self'" in issue


def test_the_merged_definition_is_validated_and_problems_name_their_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "mine", "name: mine\nextends: openai\nrequest:\n  method: PATCH\nresponse:\n  usage: {tokens: response.x}\n")
    found = issues("mine", tmp_path)
    assert any(":4 request.method" in i for i in found) and any("mine.yaml:6 response.usage" in i for i in found), found
    write(tmp_path, "partial", "name: partial\nextends: 3\n")
    [issue] = issues("partial", tmp_path)
    assert "partial.yaml:2 extends" in issue
    # a definition without extends: still needs request: and response:
    write(tmp_path, "bare", "name: bare\nbase_url: http://x\n")
    assert any("request" in i for i in issues("bare", tmp_path))


def test_an_edited_parent_is_seen_by_its_child(tmp_path: Path) -> None:
    write(tmp_path, "a", "name: a\nextends: openai\nbase_url: http://one/v1\n")
    write(tmp_path, "b", "name: b\nextends: a\n")
    assert find_provider("b", tmp_path).base_url == "http://one/v1"
    write(tmp_path, "a", "name: a\nextends: openai\nbase_url: http://two-changed/v1\n")
    assert find_provider("b", tmp_path).base_url == "http://two-changed/v1"


def test_validate_names_a_bad_extends_through_the_cli(tmp_path: Path) -> None:
    write(tmp_path / "providers", "mine", "name: mine\nextends: nowhere\n")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: x\nproviders_dir: providers\n"
        "targets:\n  - {id: t, type: provider, provider: mine, model: m}\n"
        "datasets:\n  - id: d\n    cases:\n      - {id: c, input: hi, assert: [{type: contains, value: hi}]}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code != 0
    assert "mine.yaml:2 extends: unknown provider 'nowhere'" in result.output
    assert "Traceback" not in result.output


# --- evalx providers / evalx providers show, through the real CLI --------------------------


def test_providers_lists_shipped_and_project_definitions_with_capabilities(tmp_path: Path) -> None:
    write(tmp_path / "providers", "mine", "name: mine\nextends: groq\ndescription: Our gateway\ncapabilities: {vision: false}\n")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: x\nproviders_dir: providers\n"
        "targets:\n  - {id: t, type: provider, provider: mine, model: m}\n"
        "datasets:\n  - id: d\n    cases:\n      - {id: c, input: hi, assert: [{type: contains, value: hi}]}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["providers", "-c", str(config)])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[2:]}
    assert {"openai", "groq", "vllm", "lmstudio", "mine"} <= set(rows)
    assert "streaming,tools,embeddings,vision,json_mode" in rows["openai"]
    assert "Our gateway" in rows["mine"] and "streaming,tools,json_mode" in rows["mine"] and "groq,openai" in rows["mine"]
    assert "providers_dir" in rows["mine"] and "shipped" in rows["groq"]


def test_providers_show_prints_the_resolved_definition_as_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    monkeypatch.chdir(tmp_path)  # no config here: shipped definitions only
    monkeypatch.setenv("GROQ_BASE_URL", "https://user:hunter2@proxy.example/v1")
    result = CliRunner().invoke(main, ["providers", "show", "groq"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# groq: ") and "extends openai" in result.output.splitlines()[0]
    shown = yaml.safe_load(result.output)
    assert shown["name"] == "groq" and "extends" not in shown
    assert shown["auth"] == {"header": "Authorization", "value": "Bearer {{ api_key }}", "env": "GROQ_API_KEY", "required": True}
    assert shown["request"]["path"] == "/chat/completions" and "{{ model | tojson }}" in shown["request"]["body"]
    assert "pricing" not in shown and "embeddings" not in shown
    assert shown["base_url"] == "${GROQ_BASE_URL:-https://api.groq.com/openai/v1}" and "hunter2" not in result.output

    unknown = CliRunner().invoke(main, ["providers", "show", "groqq"])
    assert unknown.exit_code == 2 and "unknown provider 'groqq' (did you mean 'groq'?)" in unknown.output
    assert "Traceback" not in unknown.output


def test_a_mapping_of_another_kind_replaces_the_inherited_one() -> None:
    from evalx.targets.definitions import _merge

    base = {"auth": {"header": "Authorization", "value": "Bearer {{ api_key }}", "env": "K"}, "x": 1}
    assert _merge(base, {"auth": {"kind": "sigv4", "service": "bedrock"}}) == {"auth": {"kind": "sigv4", "service": "bedrock"}, "x": 1}
    assert _merge(base, {"auth": {"env": "J"}})["auth"] == {"header": "Authorization", "value": "Bearer {{ api_key }}", "env": "J"}
    assert _merge({"auth": {"kind": "google", "scopes": ["a"]}}, {"auth": {"kind": "google"}}) == {
        "auth": {"kind": "google", "scopes": ["a"]}
    }
