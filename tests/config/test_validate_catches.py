"""`evalx validate` catches what `evalx run` would fail on, at the assertion's file:line (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalx.cli import main


def _project(tmp_path: Path, cases: list[dict[str, Any]]) -> Path:
    (tmp_path / "agent.py").write_text("def answer(question):\n    return 'the answer is 42'\n", encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: agent.py:answer}]\ndatasets: [{id: d, path: cases.jsonl}]\n",
        encoding="utf-8",
    )
    return config


@pytest.mark.parametrize(
    ("check", "expected", "message"),
    [
        ({"type": "numeric_close"}, None, "numeric_close: no 'value' given and the case has no 'expected' to compare with"),
        ({"type": "numeric_close"}, "about forty", "numeric_close: the case's 'expected': expected a number, not 'about forty'"),
        ({"type": "numeric_close", "value": "n/a"}, 42, "numeric_close: 'value': expected a number, not 'n/a'"),
        ({"type": "contains"}, None, "contains: no 'value' given and the case has no 'expected' to compare with"),
        ({"type": "equals"}, None, "equals: no 'value' given"),
        ({"type": "contains_all"}, "not a list", "contains_all: no 'values' given and the case's 'expected' is not a list"),
        ({"type": "contains_any", "values": []}, None, "contains_any: 'values' is empty: it would check nothing"),
        ({"type": "llm_judge"}, None, "llm_judge: needs 'rubric' or 'characteristics'"),
        ({"type": "regex", "value": "(unclosed"}, None, "regex: 'value': '(unclosed' is not a valid regex: missing )"),
        ({"type": "regex"}, "[z-a]", "regex: the case's 'expected': '[z-a]' is not a valid regex: bad character range"),
        ({"type": "semantic_similar"}, None, "semantic_similar: no 'value' given"),
    ],
)
def test_an_assertion_that_cannot_work_is_a_validate_error(tmp_path: Path, check: dict[str, Any], expected: Any, message: str) -> None:
    case: dict[str, Any] = {"id": "ok", "input": "q", "assert": [{"type": "contains", "value": "42"}]}
    bad: dict[str, Any] = {"id": "bad", "input": "q", "assert": [{"type": "contains", "value": "42"}, check]}
    if expected is not None:
        bad["expected"] = expected
    config = _project(tmp_path, [case, bad])
    for command in ("validate", "run"):
        result = CliRunner().invoke(main, [command, "-c", str(config)])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("cases.jsonl:2 cases[1].assert[1]: ") and message in lines[0], result.output
    assert not (tmp_path / "runs").exists()


def test_the_same_assertions_with_what_they_need_validate(tmp_path: Path) -> None:
    cases = [
        {"id": "a", "input": "q", "expected": 42, "assert": [{"type": "numeric_close"}, {"type": "contains"}]},
        {"id": "b", "input": "q", "expected": ["the", "answer"], "assert": [{"type": "contains_all"}]},
        {"id": "c", "input": "q", "expectedCharacteristics": ["is short"]},
    ]
    result = CliRunner().invoke(main, ["validate", "-c", str(_project(tmp_path, cases))])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("field", "template", "message"),
    [
        ("prompt", "Hello {{ case.input ", "targets[1].prompt: template syntax error: unexpected end of template"),
        ("system", "{% if x %}never closed", "targets[1].system: template syntax error: Unexpected end of template"),
        ("system", "{% include 'system.txt' %}", "targets[1].system: included file 'system.txt': no such file"),
    ],
)
def test_a_template_that_cannot_render_is_a_validate_error(tmp_path: Path, field: str, template: str, message: str) -> None:
    config = _project(tmp_path, [{"id": "ok", "input": "q", "assert": [{"type": "contains", "value": "42"}]}])
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            "targets: [{id: bot, type: python, callable: agent.py:answer}]",
            "targets:\n  - {id: bot, type: python, callable: agent.py:answer}\n"
            f"  - {{id: model, type: provider, provider: openai, model: m, api_key: sk-test-0000, {field}: {json.dumps(template)}}}",
        ),
        encoding="utf-8",
    )
    for command in ("validate", "run"):
        result = CliRunner().invoke(main, [command, "-c", str(config)])
        assert result.exit_code == 2, result.output
        assert message in result.output and "evalconfig.yaml:4 " in result.output, result.output
