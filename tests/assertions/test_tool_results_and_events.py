"""tool_result and event_seen: declarative checks of tool results and engine events, unit and through `evalx run`/`validate`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells
from scripted_server import ScriptedServer

from evalx.assertions import AssertionContext
from evalx.assertions.evaluate import evaluate_one
from evalx.cli import main
from evalx.models import Case, ToolCall, Trajectory

CALLS = [
    ToolCall("search", {"q": "paris"}, '{"results": [{"title": "Paris", "score": 0.9}, {"title": "Lyon", "score": 0.4}], "total": 2}'),
    ToolCall("get_weather", {"city": "Paris"}, {"temp_c": 21, "sky": "clear"}),
    ToolCall("get_weather", {"city": "Lyon"}, {"temp_c": 17, "sky": "rain"}),
    ToolCall("lookup", {"id": 1}, None),
]
EVENTS: list[dict[str, Any]] = [
    {"type": "status", "data": {"phase": "planning"}},
    {"type": "tool_call", "data": {"tool": "search", "args": {"q": "paris"}}},
    {"type": "status", "data": {"phase": "answering", "step": 2}},
]


def check(
    spec: dict[str, Any], calls: list[ToolCall] = CALLS, events: list[dict[str, Any]] = EVENTS, truncated: bool = False
) -> dict[str, Any]:
    traj = Trajectory(text="done", tool_calls=calls, events=events, events_truncated=truncated)  # type: ignore[arg-type]
    ctx = AssertionContext(case=Case(id="c", input="q"), output=traj, target="bot")
    return dict(asyncio.run(evaluate_one(spec, ctx)))


def test_tool_result_path_equals_on_a_json_text_result() -> None:
    got = check({"type": "tool_result", "tool": "search", "path": "results[0].title", "equals": "Paris"})
    assert got["passed"] is True and got["reason"] == "tool_calls[0] (search) result.results[0].title matches"
    got = check({"type": "tool_result", "tool": "search", "path": "results[1].title", "equals": "Paris"})
    assert (
        got["passed"] is False
        and got["reason"] == "the result of search: tool_calls[0]: result.results[1].title: expected 'Paris', got 'Lyon'"
    )
    got = check({"type": "tool_result", "tool": "search", "path": "results[5].title"})
    assert got["passed"] is False and "nothing at result.results[5]" in got["reason"]


def test_tool_result_contains_schema_and_count() -> None:
    assert check({"type": "tool_result", "tool": "search", "path": "results", "count": 2})["passed"] is True
    got = check({"type": "tool_result", "tool": "search", "path": "results", "count": 3})
    assert got["passed"] is False and "expected 3 items, got 2" in got["reason"]
    assert check({"type": "tool_result", "tool": "search", "path": "results", "contains": {"title": "Lyon"}})["passed"] is True
    assert check({"type": "tool_result", "tool": "get_weather", "contains": {"sky": "rain"}})["passed"] is True  # any call
    got = check({"type": "tool_result", "tool": "get_weather", "call": "first", "contains": {"sky": "rain"}})
    assert got["passed"] is False and "result.sky: expected 'rain', got 'clear'" in got["reason"]
    assert check({"type": "tool_result", "tool": "get_weather", "index": 1, "path": "sky", "contains": "rai"})["passed"] is True
    schema = {"type": "object", "properties": {"temp_c": {"type": "integer", "maximum": 20}}}
    got = check({"type": "tool_result", "tool": "get_weather", "call": "all", "schema": schema})
    assert got["passed"] is False and got["score"] == 0.5 and "1 of 2 results of get_weather differ" in got["reason"]


def test_tool_result_of_a_call_without_a_result_or_a_tool_never_called_fails() -> None:
    got = check({"type": "tool_result", "tool": "lookup", "equals": 1})
    assert got["passed"] is False and "no result was recorded" in got["reason"]
    got = check({"type": "tool_result", "tool": "refund", "equals": 1})
    assert got["passed"] is False and got["reason"].startswith("refund was never called")
    got = check({"type": "tool_result", "tool": "get_weather", "index": 5, "equals": 1})
    assert got["passed"] is False and "no call at index 5" in got["reason"]


def test_event_seen_by_type_fields_and_counts() -> None:
    assert check({"type": "event_seen", "event": "status"})["passed"] is True
    assert check({"type": "event_seen", "event": "status", "fields": {"phase": "answering"}})["passed"] is True
    got = check({"type": "event_seen", "event": "status", "fields": {"phase": "reviewing"}})
    assert got["passed"] is False and "the first status event differs: data.phase" in got["reason"]
    got = check({"type": "event_seen", "event": "handoff"})
    assert got["passed"] is False and "events seen: [status, tool_call]" in got["reason"]
    assert check({"type": "event_seen", "event": "status", "max": 1})["passed"] is False
    assert check({"type": "event_seen", "event": "status", "min": 2, "max": 2})["passed"] is True
    assert check({"type": "event_seen", "event": "handoff", "min": 0, "max": 0})["passed"] is True  # never sent
    assert check({"type": "event_seen", "event": "handoff"}, truncated=True)["passed"] is None  # the rest was not kept


@pytest.fixture
def engine() -> Iterator[ScriptedServer]:
    s = ScriptedServer().start()
    s.answers["agent"] = [
        ("status", {"phase": "planning"}),
        ("tool_call", {"tool": "search", "args": {"q": "paris"}, "id": "t1"}),
        ("tool_result", {"tool": "search", "id": "t1", "result": {"results": [{"title": "Paris"}], "total": 1}}),
        ("token", {"text": "Paris is sunny."}),
        ("done", {}),
    ]
    yield s
    s.stop()


def _project(tmp_path: Path, url: str, asserts: str) -> Path:
    (tmp_path / "cases.yaml").write_text("- id: weather\n  input: weather in paris?\n  assert:\n" + asserts)
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        f"version: 1\nname: tools\ntargets: [{{id: eng, type: engine, url: '{url}/agent', cache: false}}]\n"
        "datasets: [{id: d, path: cases.yaml}]\n"
    )
    return config


def test_through_the_cli_against_an_engine(tmp_path: Path, engine: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _project(
        tmp_path,
        engine.url,
        "    - {type: tool_result, tool: search, path: 'results[0].title', equals: Paris}\n"
        "    - {type: tool_result, tool: search, path: results, count: 1}\n"
        "    - {type: event_seen, event: status, fields: {phase: planning}}\n"
        "    - {type: event_seen, event: error, max: 0}\n",
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q"])
    assert (tmp_path / "runs").exists(), result.output + result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    (cell,) = read_cells(run_dir)
    assert result.exit_code == 0, (result.stderr, json.dumps(cell.get("assertions"), indent=1))
    assert [a["passed"] for a in cell["assertions"]] == [True, True, True, True]


def test_validate_names_the_line_of_a_check_that_cannot_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _project(
        tmp_path,
        "http://127.0.0.1:9",
        "    - {type: tool_result, tool: search}\n    - {type: event_seen, event: status, min: 3, max: 1}\n",
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    err = result.stderr
    assert "cases.yaml:4" in err and "tool_result needs a check" in err, err
    assert "cases.yaml:5" in err and "max (1) is less than min (3)" in err, err
    (tmp_path / "cases.yaml").write_text(
        "- id: w\n  input: q\n  assert:\n    - {type: tool_result, tool: search, call: latest, equals: 1}\n"
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2 and "cases.yaml:4" in result.stderr and "'latest'" in result.stderr, result.stderr
