"""tool_args, tool_calls_valid and trajectory_match: through evaluate_one, and through `evalx run` / `validate` / `schema`."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner
from results_file import read_cells

from evalx.assertions import AssertionContext
from evalx.assertions.evaluate import evaluate_one
from evalx.assertions.tools import match_counts
from evalx.cli import main
from evalx.models import Case, ToolCall, Trajectory

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def check(spec: dict[str, Any], calls: list[tuple[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    traj = Trajectory(text="done", tool_calls=[ToolCall(name, args) for name, args in calls])
    ctx = AssertionContext(case=Case(id="c", input="q"), output=traj, target="bot", tools=tools)
    return dict(asyncio.run(evaluate_one(spec, ctx)))


CALLS = [("search", {"q": "x"}), ("get_weather", {"city": "Lyon", "days": 2}), ("get_weather", {"city": "Paris", "days": 2.0})]


# -- tool_args -----------------------------------------------------------------


def test_tool_args_any_call_containing_the_subset_passes() -> None:
    got = check({"type": "tool_args", "tool": "get_weather", "args": {"city": "Paris", "days": 2}}, CALLS)
    assert got["passed"] is True and got["reason"] == "tool_calls[2] (get_weather) matches"


def test_tool_args_names_the_call_and_the_first_field_that_differed() -> None:
    got = check({"type": "tool_args", "tool": "get_weather", "args": {"city": "Paris"}, "call": "first"}, CALLS)
    assert got["passed"] is False
    assert got["reason"] == "the first call of get_weather differs: tool_calls[1]: args.city: expected 'Paris', got 'Lyon'"
    got = check({"type": "tool_args", "tool": "get_weather", "args": {"city": "Paris"}, "call": "all"}, CALLS)
    assert got["passed"] is False and got["score"] == 0.5
    assert got["reason"].startswith("1 of 2 calls of get_weather differ: tool_calls[1]: args.city")
    assert check({"type": "tool_args", "tool": "get_weather", "args": {"days": 2}, "call": "all"}, CALLS)["passed"] is True
    assert check({"type": "tool_args", "tool": "get_weather", "args": {"city": "Paris"}, "call": "last"}, CALLS)["passed"] is True


def test_tool_args_compares_json_values() -> None:
    calls = [("book", {"when": {"day": 3, "slots": [1, 2]}, "ok": True, "n": 1})]
    assert check({"type": "tool_args", "tool": "book", "args": {"when": {"day": 3.0}}}, calls)["passed"] is True  # numbers as JSON
    got = check({"type": "tool_args", "tool": "book", "args": {"when": {"slots": [1]}}}, calls)  # lists are equal, not a subset
    assert got["passed"] is False and "args.when.slots: expected [1], got [1, 2]" in got["reason"]
    assert check({"type": "tool_args", "tool": "book", "args": {"n": True}}, calls)["passed"] is False  # true is not 1
    got = check({"type": "tool_args", "tool": "book", "args": {"room": "A"}}, calls)
    assert "args.room: expected 'A', missing" in got["reason"]
    # arguments sent as a JSON string (as the OpenAI API does) are parsed first
    assert check({"type": "tool_args", "tool": "book", "args": {"n": 1}}, [("book", '{"n": 1}')])["passed"] is True


def test_tool_args_fails_when_the_tool_was_never_called() -> None:
    got = check({"type": "tool_args", "tool": "refund", "args": {}}, CALLS)
    assert got["passed"] is False and got["reason"] == "refund was never called (called [search, get_weather, get_weather])"


def test_tool_args_schema_with_a_per_field_pattern() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^P"}}, "required": ["city"]}
    assert check({"type": "tool_args", "tool": "get_weather", "schema": schema}, CALLS)["passed"] is True
    got = check({"type": "tool_args", "tool": "get_weather", "schema": schema, "call": "first"}, CALLS)
    assert (
        got["passed"] is False
        and got["reason"] == "the first call of get_weather differs: tool_calls[1]: args.city: 'Lyon' does not match '^P'"
    )
    got = check({"type": "tool_args", "tool": "search", "schema": {"required": ["limit"]}}, CALLS)
    assert got["passed"] is False and "'limit' is a required property" in got["reason"]


def test_tool_args_not_inverts() -> None:
    got = check({"type": "tool_args", "tool": "search", "args": {"q": "y"}, "not": True}, CALLS)
    assert got["passed"] is True


# -- tool_calls_valid ------------------------------------------------------------


def test_tool_calls_valid_passes_calls_that_fit_the_declared_tools() -> None:
    got = check(
        {"type": "tool_calls_valid"}, [("get_weather", {"city": "Paris"}), ("get_weather", '{"city": "Rome", "days": 3}')], [WEATHER]
    )
    assert got["passed"] is True and got["reason"] == "2 calls valid against the declared tools"
    openai_form = [{"type": "function", "function": WEATHER}]
    assert check({"type": "tool_calls_valid"}, [("get_weather", {"city": "Paris"})], openai_form)["passed"] is True


def test_tool_calls_valid_names_the_first_invalid_call_and_the_schema_path() -> None:
    got = check({"type": "tool_calls_valid"}, [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 0})], [WEATHER])
    assert got["passed"] is False and got["reason"] == "tool_calls[1] (get_weather): args.days: 0 is less than the minimum of 1"
    got = check({"type": "tool_calls_valid"}, [("get_weather", {})], [WEATHER])
    assert got["reason"] == "tool_calls[0] (get_weather): args: 'city' is a required property"


def test_tool_calls_valid_fails_an_undeclared_tool() -> None:
    got = check({"type": "tool_calls_valid"}, [("get_weather", {"city": "Paris"}), ("delete_all", {})], [WEATHER])
    assert got["passed"] is False and got["reason"] == "tool_calls[1] calls undeclared tool 'delete_all' (declared: [get_weather])"


def test_tool_calls_valid_without_declared_tools_is_inconclusive() -> None:
    got = check({"type": "tool_calls_valid"}, [("get_weather", {"city": "Paris"})], None)
    assert got["passed"] is None and "declares no tools" in got["reason"] and "error" not in got


# -- trajectory_match ------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected", "called", "common", "holds"),
    [
        ("exact", ["a", "b", "c"], ["a", "b", "c"], 3, True),
        ("exact", ["a", "b", "c"], ["a", "c", "b"], 1, False),
        ("in_order", ["a", "c"], ["a", "b", "c"], 2, True),
        ("in_order", ["a", "c"], ["c", "a"], 1, False),
        ("any_order", ["a", "b", "b"], ["b", "a", "b"], 3, True),
        ("any_order", ["a", "b", "b"], ["b", "a"], 2, False),
        ("subset", ["a", "b", "c"], ["c", "a"], 2, True),
        ("subset", ["a", "b"], ["a", "x"], 1, False),
        ("superset", ["a", "b"], ["b", "x", "a"], 2, True),
        ("superset", ["a", "a"], ["a"], 1, False),
    ],
)
def test_trajectory_match_modes(mode: str, expected: list[str], called: list[str], common: int, holds: bool) -> None:
    assert match_counts(expected, called, mode) == (common, holds)
    got = check({"type": "trajectory_match", "tools": expected, "mode": mode}, [(n, {}) for n in called])
    assert got["passed"] is holds  # without a threshold, the mode's condition decides
    assert got["details"]["precision"] == round(common / len(called), 6) and got["details"]["recall"] == round(common / len(expected), 6)


def test_trajectory_match_threshold_and_reason() -> None:
    calls = [("a", {}), ("x", {}), ("c", {})]
    got = check({"type": "trajectory_match", "tools": ["a", "c"], "mode": "in_order"}, calls)  # the condition holds: x may come between
    assert got["passed"] is True and got["score"] == 0.8
    assert got["reason"] == "expected [a, c] (in_order), called [a, x, c]; f1=0.8"
    got = check({"type": "trajectory_match", "tools": ["a", "c"], "mode": "in_order", "threshold": 0.9}, calls)  # the F1 decides
    assert got["passed"] is False and got["reason"] == "expected [a, c] (in_order), called [a, x, c]; f1=0.8 < threshold 0.9"
    assert check({"type": "trajectory_match", "tools": ["a", "c"], "mode": "superset", "threshold": 0.8}, calls)["passed"] is True
    got = check({"type": "trajectory_match", "tools": ["c", "a"], "mode": "in_order"}, calls)  # out of order
    assert got["passed"] is False and got["reason"].endswith("; not in order")
    got = check({"type": "trajectory_match", "tools": ["c", "a"], "mode": "in_order", "threshold": 0.4}, calls)  # partial credit: f1 0.4
    assert got["passed"] is True and got["reason"].endswith(">= threshold 0.4")
    assert check({"type": "trajectory_match", "tools": []}, [])["passed"] is True  # nothing expected, nothing called


# -- through the CLI ---------------------------------------------------------------

AGENT = '''
def agent(question):
    """Calls tools as the question says: 'weather' -> get_weather(city), 'bad' -> an undeclared tool."""
    calls = [{"name": "search", "args": {"q": question}}]
    if "weather" in question:
        calls.append({"name": "get_weather", "args": {"city": question.split()[-1]}})
    if "bad" in question:
        calls.append({"name": "drop_table", "args": {}})
    return {"text": "ok", "tool_calls": calls}


def chat(messages):
    last = messages[-1]["content"]
    return {"text": "ok", "tool_calls": [{"name": last.split()[0], "args": {}}]}
'''

TOOLS = """
      tools:
        - {name: search, parameters: {type: object, properties: {q: {type: string}}, required: [q]}}
        - {name: get_weather, parameters: {type: object, properties: {city: {type: string, pattern: "^[A-Z]"}}, required: [city]}}
"""


def project(tmp_path: Path, targets: str, datasets: str) -> Path:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text("version: 1\n" + textwrap.dedent(targets).strip("\n") + "\n" + textwrap.dedent(datasets), encoding="utf-8")
    return config


def run(config: Path) -> tuple[int, str, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert "Traceback" not in result.output, result.output
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return result.exit_code, result.output, read_cells(runs[-1])


def test_a_python_target_with_tools_through_evalx_run(tmp_path: Path) -> None:
    datasets = """
    datasets:
      - id: d
        cases:
          - id: good
            input: weather in Paris
            assert:
              - {type: tool_args, tool: get_weather, args: {city: Paris}}
              - {type: tool_calls_valid}
              - {type: trajectory_match, tools: [search, get_weather], mode: exact}
          - id: bad
            input: bad weather in lyon
            assert:
              - {type: tool_args, tool: get_weather, args: {city: Paris}}
              - {type: tool_calls_valid}
              - {type: trajectory_match, tools: [search, get_weather], mode: superset, threshold: 0.8}
    """
    targets = "targets:\n  - id: py\n    type: python\n    callable: agent.py:agent\n" + textwrap.indent(textwrap.dedent(TOOLS), "    ")
    code, out, cells = run(project(tmp_path, targets, datasets))
    by_id = {c["case_id"]: c for c in cells}
    assert by_id["good"]["status"] == "pass", out
    bad = by_id["bad"]["assertions"]
    assert bad[0]["reason"] == "no call of get_weather matches: tool_calls[1]: args.city: expected 'Paris', got 'lyon'"
    assert bad[1]["reason"] == "tool_calls[1] (get_weather): args.city: 'lyon' does not match '^[A-Z]'"
    assert bad[2]["passed"] is True and bad[2]["details"]["precision"] == round(2 / 3, 6)
    assert code == 1, out


def test_a_python_target_without_tools_leaves_tool_calls_valid_inconclusive(tmp_path: Path) -> None:
    datasets = """
    datasets:
      - id: d
        cases:
          - {id: c, input: weather in Paris, assert: [{type: tool_calls_valid}]}
    """
    _, _, (cell,) = run(project(tmp_path, "targets:\n  - {id: py, type: python, callable: agent.py:agent}\n", datasets))
    assert cell["assertions"][0]["passed"] is None and cell["assertions"][0]["reason"].startswith("target py declares no tools")
    assert cell["status"] != "pass"


def test_a_provider_target_with_tools_through_evalx_run(server: FakeLLMServer, tmp_path: Path) -> None:
    targets = (
        f"targets:\n  - id: gpt\n    type: provider\n    provider: openai\n    model: m\n"
        f"    base_url: '{server.url}/v1'\n    api_key: {OPENAI_KEY}\n" + textwrap.indent(textwrap.dedent(TOOLS), "    ")
    )
    datasets = """
    datasets:
      - id: d
        cases:
          - id: w
            input: What is the weather?
            assert:
              - {type: tool_args, tool: search, args: {city: Paris}}
              - {type: tool_calls_valid}
              - {type: trajectory_match, tools: [search], mode: exact}
    """
    code, out, (cell,) = run(project(tmp_path, targets, datasets))
    assert [c["name"] for c in cell["output"]["tool_calls"]] == ["search"]  # the fake model calls the first tool with {city: Paris}
    first, valid, match = cell["assertions"]
    assert first["passed"] is True and match["passed"] is True
    assert valid["passed"] is False and valid["reason"] == "tool_calls[0] (search): args: 'q' is a required property"
    assert code == 1, out
    sent = server.bodies("/v1/chat/completions")[0]["tools"]
    assert [t["function"]["name"] for t in sent] == ["search", "get_weather"]


def test_trajectory_match_in_a_conversation_spans_the_turns(tmp_path: Path) -> None:
    datasets = """
    datasets:
      - id: d
        cases:
          - id: conv
            turns:
              - {input: lookup the order, assert: [{type: trajectory_match, tools: [lookup], mode: exact}]}
              - {input: refund it}
            assert:
              - {type: trajectory_match, tools: [lookup, refund], mode: exact}
              - {type: trajectory_match, tools: [refund, lookup], mode: in_order, name: reversed, not: true}
    """
    code, out, (cell,) = run(project(tmp_path, "targets:\n  - {id: py, type: python, callable: agent.py:chat}\n", datasets))
    assert cell["status"] == "pass", out
    assert [c["name"] for c in cell["output"]["tool_calls"]] == ["lookup", "refund"]
    case_level = [a for a in cell["assertions"] if a.get("turn") is None]
    assert case_level[0]["reason"] == "expected [lookup, refund] (exact), called [lookup, refund]; f1=1"
    assert code == 0


def test_evalx_schema_lists_the_tool_assertions() -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    text = json.dumps(json.loads(result.output))
    for name in ("tool_args", "tool_calls_valid", "trajectory_match"):
        assert json.dumps({"const": name}) in text
    assert '"enum": ["exact", "in_order", "any_order", "subset", "superset"]' in text


@pytest.mark.parametrize(
    ("check_spec", "message"),
    [
        ({"type": "tool_args", "args": {"city": "Paris"}}, "'tool' is a required property"),
        ({"type": "tool_args", "tool": "t", "args": ["city"]}, "is not of type 'object'"),
        ({"type": "tool_args", "tool": "t"}, "tool_args needs args (a JSON subset of the arguments) or schema"),
        ({"type": "tool_args", "tool": "t", "schema": {"type": "strnig"}}, "schema is not a valid JSON Schema"),
        ({"type": "tool_args", "tool": "t", "args": {}, "call": "second"}, "call"),
        ({"type": "trajectory_match", "tools": ["a"], "mode": "fuzzy"}, "mode"),
        ({"type": "trajectory_match", "tools": ["a"], "threshold": 1.5}, "threshold"),
        ({"type": "trajectory_match"}, "'tools' is a required property"),
        ({"type": "tool_calls_valid", "strict": True}, "strict"),
    ],
)
def test_evalx_validate_rejects_bad_parameters_at_file_line(tmp_path: Path, check_spec: dict[str, Any], message: str) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    cases = [
        {"id": "ok", "input": "q", "assert": [{"type": "tool_calls_valid"}]},
        {"id": "bad", "input": "q", "assert": [check_spec]},
    ]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: agent.py:agent, tools: [{name: search}]}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0].startswith("cases.jsonl:2 cases[1].assert[0]") and message in lines[0], result.output


def test_tools_on_python_and_engine_targets_validate(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        "targets:\n  - {id: py, type: python, callable: agent.py:agent, tools: [{name: search, parameters: {type: object}}]}\n"
        "  - {id: eng, type: engine, url: 'http://127.0.0.1:9', tools: [{name: search}]}\n",
        "datasets:\n  - {id: d, cases: [{id: c, input: q, assert: [{type: tool_calls_valid}]}]}\n",
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 0, result.output
    config.write_text(config.read_text().replace("tools: [{name: search}]", "tools: [{description: no name}]"))
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2 and "targets[1].tools[0]" in result.output, result.output
