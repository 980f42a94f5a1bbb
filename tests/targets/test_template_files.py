"""Prompts, system prompts and tools from files: ``system_file:``/``prompt_file:``/``tools_file:`` and ``{% include %}``.

End to end through the CLI against the fake OpenAI server (tests/_fake_llm.py),
so what the files hold is seen in the request body; and ``evalx validate`` /
``evalx run`` refusing a missing file, an escape from the config's folder and
a broken tools file with ``FILE:LINE key.path``, exit 2, before any cell runs.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner, Result
from results_file import read_cells

from evalx.cli import main
from evalx.common import reading
from evalx.common.templates import TemplateRenderError, render, use_folder

COMPLETIONS = "/v1/chat/completions"

TOOLS_YAML = """\
- name: get_weather
  description: The weather in a city.
  parameters:
    type: object
    properties: {city: {type: string}}
    required: [city]
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # errors name files relative to here


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def config_text(url: str, target_extra: str = "", top_extra: str = "") -> str:
    extra = textwrap.indent(textwrap.dedent(target_extra).strip("\n"), " " * 4)
    return (
        textwrap.dedent(
            f"""\
            version: 1
            name: files
            vars: {{product: Acme}}
            targets:
              - id: bot
                type: provider
                provider: openai
                model: local-model
                base_url: {url}/v1
                api_key: {OPENAI_KEY}
                params: {{max_tokens: 64}}
            """
        )
        + (extra + "\n" if extra.strip() else "")
        + textwrap.dedent(
            """\
            datasets:
              - id: smoke
                cases:
                  - id: capital
                    input: "What is the capital of France?"
                    assert: [{type: icontains, value: paris}]
                  - id: weather
                    input: "What is the weather in Paris?"
                    assert: [{type: must_call_tools, tools: [get_weather]}]
            """
        )
        + textwrap.dedent(top_extra)
    )


def project(tmp_path: Path, url: str, target_extra: str, files: dict[str, str], top_extra: str = "") -> Path:
    write(tmp_path, files)
    config = tmp_path / "evalconfig.yaml"
    config.write_text(config_text(url, target_extra, top_extra), encoding="utf-8")
    return config


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def error_lines(result: Result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


SHARED = {
    "prompts/system.txt": "You are the support agent of {{ vars.product }}.\n{% include 'prompts/policy.txt' %}",
    "prompts/policy.txt": "Refunds within 30 days.",
    "prompts/user.txt": "Customer asks: {{ case.input }}",
    "tools.yaml": TOOLS_YAML,
}
FILE_KEYS = """
system_file: prompts/system.txt
prompt_file: prompts/user.txt
tools_file: tools.yaml
"""


def test_cases_share_a_system_prompt_and_tools_from_files(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, FILE_KEYS, SHARED)
    validated = cli("validate", "-c", str(config))
    assert validated.exit_code == 0, validated.output

    result = cli("run", "-c", str(config))
    assert result.exit_code == 0, result.output
    bodies = server.bodies(COMPLETIONS)
    assert len(bodies) == 2
    for body in bodies:
        system, user = body["messages"]
        assert system == {"role": "system", "content": "You are the support agent of Acme.\nRefunds within 30 days."}
        assert user["role"] == "user" and user["content"].startswith("Customer asks: What is")
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                },
            }
        ]
    runs = sorted((tmp_path / "runs").iterdir())
    cells = {c["case_id"]: c for c in read_cells(runs[-1])}
    assert cells["capital"]["status"] == "pass" and cells["weather"]["status"] == "pass", cells

    # the second run is served from the cache; an edit to an included file is a new request (its text is in the key)
    again = cli("run", "-c", str(config))
    assert again.exit_code == 0 and server.count(COMPLETIONS) == 2
    (tmp_path / "prompts/policy.txt").write_text("Refunds within 14 days.", encoding="utf-8")
    edited = cli("run", "-c", str(config))
    assert edited.exit_code == 0 and server.count(COMPLETIONS) == 4
    assert server.bodies(COMPLETIONS)[-1]["messages"][0]["content"].endswith("Refunds within 14 days.")


def test_a_judge_prompt_and_a_dataset_system_prompt_from_files(server: FakeLLMServer, tmp_path: Path) -> None:
    files = {"judge.txt": "Grade {{ output }} against {{ rubric }}.", "persona.txt": "You are terse."}
    config = project(tmp_path, server.url, "", files, top_extra="judge: {prompt_file: judge.txt}\n")
    text = config.read_text().replace("  - id: smoke\n", "  - id: smoke\n    defaults: {system_file: persona.txt}\n")
    config.write_text(text, encoding="utf-8")
    assert cli("validate", "-c", str(config)).exit_code == 0
    from evalx.config.loader import load_config

    loaded = load_config(config)
    assert loaded.data["judge"] == {"prompt": "Grade {{ output }} against {{ rubric }}."}
    assert loaded.data["datasets"][0]["defaults"] == {"system": "You are terse."}
    result = cli("run", "-c", str(config), "--case", "capital")
    assert result.exit_code == 0, result.output
    assert server.bodies(COMPLETIONS)[0]["messages"][0] == {"role": "system", "content": "You are terse."}


def test_include_in_an_inline_template_works_and_is_read_once(server: FakeLLMServer, tmp_path: Path) -> None:
    files = {"parts/greeting.txt": "Hello from {{ vars.product }}.", "tools.yaml": TOOLS_YAML}
    config = project(tmp_path, server.url, "system: \"{% include 'parts/greeting.txt' %} Be brief.\"\ntools_file: tools.yaml", files)
    assert cli("validate", "-c", str(config)).exit_code == 0
    reads: list[str] = []
    real_read = reading.read_bytes  # every file evalx reads whole goes through it

    def counting(path: Any, *args: Any, **kwargs: Any) -> bytes:
        if Path(path).name == "greeting.txt":
            reads.append(str(path))
        return real_read(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reading, "read_bytes", counting)
        result = cli("run", "-c", str(config), "--no-cache")
    assert result.exit_code == 0, result.output
    assert [b["messages"][0]["content"] for b in server.bodies(COMPLETIONS)] == ["Hello from Acme. Be brief."] * 2
    assert len(reads) == 2  # once by validate's static check when the config loads, once by the renderer: not once a cell


# --- what validate (and run, before any cell) refuses -------------------------------------------


def refused(config: Path, server: FakeLLMServer) -> str:
    """The one error line of ``evalx validate`` and of ``evalx run`` (which sends nothing)."""
    validated = cli("validate", "-c", str(config))
    assert validated.exit_code == 2, validated.output
    assert "Traceback" not in validated.output
    lines = error_lines(validated)
    assert len(lines) == 1, validated.output
    ran = cli("run", "-c", str(config))
    assert ran.exit_code == 2 and error_lines(ran) == lines, ran.output
    assert server.count() == 0 and not (config.parent / "runs").exists()
    return lines[0]


def test_a_missing_system_file_names_the_config_line_and_key(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "system_file: prompts/nope.txt", {})
    line = refused(config, server)
    assert line.startswith("evalconfig.yaml:12 targets[0].system_file: system_file 'prompts/nope.txt': no such file"), line


def test_a_missing_include_names_the_config_line_and_key(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "system_file: prompts/system.txt", {"prompts/system.txt": "Hi {% include 'gone.txt' %}"})
    line = refused(config, server)
    assert line.startswith("evalconfig.yaml:12 targets[0].system: system_file prompts/system.txt: included file 'gone.txt': no such file")


def test_an_include_in_an_inline_prompt_that_is_missing(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "prompt: \"{% include 'gone.txt' %}\"", {})
    line = refused(config, server)
    assert line.startswith("evalconfig.yaml:12 targets[0].prompt: included file 'gone.txt': no such file"), line


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../outside.txt", "'..' leads outside the config's folder"),
        ("prompts/../../outside.txt", "'..' leads outside the config's folder"),
        ("/etc/hostname", "an absolute path"),
        ("link/outside.txt", "a symlink leads outside the config's folder"),
    ],
)
def test_files_outside_the_config_folder_are_refused(server: FakeLLMServer, tmp_path: Path, name: str, why: str) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("secret", encoding="utf-8")
    os.symlink(tmp_path, root / "link")
    for extra in (f"system_file: {name}", f"system: \"{{% include '{name}' %}}\""):
        config = project(root, server.url, extra, {})
        line = refused(config, server)
        assert line.startswith("project/evalconfig.yaml:12 targets[0].system") and why in line, line
        assert "secret" not in line


def test_include_cycles_and_syntax_errors_in_included_files(server: FakeLLMServer, tmp_path: Path) -> None:
    files = {"a.txt": "{% include 'b.txt' %}", "b.txt": "{% include 'a.txt' %}", "bad.txt": "line one\n{{ oops "}
    config = project(tmp_path, server.url, "system_file: a.txt", files)
    assert "a file that includes itself" in refused(config, server)
    config = project(tmp_path, server.url, "prompt: \"{% include 'bad.txt' %}\"", files)
    assert "included file bad.txt:2: template syntax error" in refused(config, server)


def test_a_tools_file_that_is_not_yaml_names_its_own_line(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "tools_file: tools.yaml", {"tools.yaml": "- name: a\n  description: [unclosed\n"})
    line = refused(config, server)
    assert line.startswith("tools.yaml:3: invalid YAML") or line.startswith("tools.yaml:2: invalid YAML"), line


def test_a_tools_file_checked_against_the_inline_tools_schema(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "tools_file: tools.json", {"tools.json": '[\n  {"name": "a"},\n  "not a tool"\n]\n'})
    line = refused(config, server)
    assert line.startswith("tools.json:3 [1]:") and "object" in line, line
    config = project(tmp_path, server.url, "tools_file: tools.yaml", {"tools.yaml": "name: a\n"})
    assert refused(config, server).startswith("tools.yaml:1: a tools file holds a list of tools")


def test_a_value_and_its_file_twin_together_is_an_error(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "system: inline\nsystem_file: prompts/system.txt", SHARED)
    assert refused(config, server) == "evalconfig.yaml:13 targets[0].system_file: give system or system_file, not both"


def test_a_file_key_on_a_target_kind_without_the_value_is_unknown(tmp_path: Path) -> None:
    write(tmp_path, {"agent.py": "def answer(q):\n    return q\n", "s.txt": "x"})
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "targets:\n  - {id: a, type: python, callable: agent.py:answer, system_file: s.txt}\n"
        "datasets:\n  - {id: d, cases: [{id: c, input: hi}]}\n",
        encoding="utf-8",
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 2 and "system_file" in result.output and "Traceback" not in result.output


def test_render_without_a_config_folder_refuses_an_include_clearly() -> None:
    use_folder(None)
    with pytest.raises(TemplateRenderError, match="templates include files only from a config's folder"):
        render("{% include 'x.txt' %}", {}, field="prompt")


def test_every_jinja_environment_that_renders_user_text_is_the_one_bounded_sandbox() -> None:
    """templates.py makes them all: the config's templates and provider definitions' bodies and expressions.

    (reports/html.py renders evalx's own report templates, autoescaped: it is not one of these.)
    """
    import re as re_

    from evalx.common.templates import BoundedSandbox
    from evalx.targets import definitions

    assert isinstance(definitions._REQUEST_ENV, BoundedSandbox) and isinstance(definitions._RESPONSE_ENV, BoundedSandbox)
    src = Path(__file__).resolve().parents[2] / "src" / "evalx"
    makers = re_.compile(r"\b(?:Sandboxed|ImmutableSandboxed)?Environment\(")
    found = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if makers.search(p.read_text(encoding="utf-8")))
    assert found == ["reports/html.py"], found  # templates.py subclasses ImmutableSandboxedEnvironment (BoundedSandbox)
