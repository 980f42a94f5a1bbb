"""One rendering of a case's system prompt for every target kind (issue 35 item 2), through the CLI.

A dataset's ``defaults: {system_file: ...}`` whose file uses ``{{ vars }}`` and
``{% include %}`` reaches a provider's request, an engine's body (its default
body and a ``body:`` template's ``case.system``) and a Python callable (``system=``
and ``case["system"]``) as the same rendered text, never the raw template.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells
from scripted_server import ScriptedServer, openai_answer

from evalx.cli import main

RENDERED = "You are the Acme agent.\nRefunds within 30 days."


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    s = ScriptedServer().start()
    yield s
    s.stop()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")


def test_every_target_kind_gets_the_same_rendered_system_prompt(scripted: ScriptedServer, tmp_path: Path) -> None:
    def provider_answer(body: dict[str, Any]) -> dict[str, Any]:
        system = next(m["content"] for m in body["messages"] if m["role"] == "system")
        return openai_answer(f"system={system}", usage={"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8})

    def engine_answer(body: dict[str, Any]) -> list[tuple[str, Any]]:
        return [("text_delta", {"text": "system=" + str(body.get("system", body.get("persona")))}), ("done", {})]

    scripted.answers.update({"prov": provider_answer, "eng": engine_answer, "tmpl": engine_answer})
    write(
        tmp_path,
        {
            "persona.md": "You are the {{ vars.product }} agent.\n{% include 'parts/rules.md' %}",
            "parts/rules.md": "Refunds within 30 days.",
            "agent.py": """\
                def declared(question, system):
                    return f"system={system}"


                def from_case(question, case):
                    return f"system={case['system']}"
                """,
        },
    )
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: system-everywhere
            vars: {{product: Acme}}
            defaults: {{retries: 0, cache: false}}
            targets:
              - {{id: prov, type: provider, provider: openai, model: m, base_url: {scripted.url}/prov/v1, api_key: sk-test-123456789}}
              - {{id: eng, type: engine, url: {scripted.url}/eng}}
              - id: tmpl
                type: engine
                url: {scripted.url}/tmpl
                body: {{message: "{{{{ case.input }}}}", persona: "{{{{ case.system }}}}"}}
              - {{id: declared, type: python, callable: agent.py:declared}}
              - {{id: from_case, type: python, callable: agent.py:from_case}}
            datasets:
              - id: smoke
                defaults: {{system_file: persona.md}}
                cases:
                  - {{id: one, input: "hello"}}
            """
        ),
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    texts = {c["target"]: c["output"]["text"] for c in read_cells(run)}
    assert texts == dict.fromkeys(["prov", "eng", "tmpl", "declared", "from_case"], f"system={RENDERED}"), texts
    sent = [json.loads(r["body"]) for r in scripted.requests if r["name"] == "eng"]
    assert sent[0]["message"] == "hello" and sent[0]["system"] == RENDERED  # the engine's default body carries it


def test_a_system_prompt_that_cannot_render_is_the_cells_error_on_every_kind(scripted: ScriptedServer, tmp_path: Path) -> None:
    write(tmp_path, {"agent.py": "def declared(question, system):\n    return 'never'\n"})
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: broken-system
            defaults: {{retries: 0, cache: false}}
            targets:
              - {{id: prov, type: provider, provider: openai, model: m, base_url: {scripted.url}/prov/v1, api_key: sk-test-123456789}}
              - {{id: eng, type: engine, url: {scripted.url}/eng}}
              - {{id: declared, type: python, callable: agent.py:declared}}
            datasets:
              - id: smoke
                cases:
                  - {{id: one, input: "hello", system: "Hi {{{{ vars.nobody }}}}"}}
            """
        ),
        encoding="utf-8",
    )
    # a literal reference no case has is refused before the run, at the case's line
    refused = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert refused.exit_code == 2 and "system: case 'one': unknown var 'nobody'" in refused.stderr, refused.output
    # one the check cannot see (a computed key) is the cell's error when it renders
    config.write_text(config.read_text(encoding="utf-8").replace("vars.nobody", "vars['no' ~ 'body']"), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    (run,) = (tmp_path / "runs").iterdir()
    cells = read_cells(run)
    assert [c["status"] for c in cells] == ["error"] * 3
    for cell in cells:
        assert "nobody" in json.dumps(cell["error"]), cell["error"]
    assert scripted.requests == []  # nothing was sent with a half-rendered prompt
