"""Scripted conversations (``turns:``) through the real CLI: Python and provider targets, per-turn results and reports.

The Python agent below remembers what it was told (it declares ``messages``); the provider
target talks to the fake OpenAI server (tests/_fake_llm.py), whose answers come from the
history it is sent ("what is my order number?" repeats a number said two turns before).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner
from results_file import read_cells
from stream_server import TEXT as STREAM_TEXT
from stream_server import StreamServer

from evalx.cli import main

STREAM_KEY = "sk-test-stream-0123456789"

AGENT = '''
import re

def chat(messages, case=None):
    """Answers from the whole history: the order number said earlier, or how many user messages came."""
    if isinstance(messages, str):  # a one-shot case: called with its input
        messages = [{"role": "user", "content": messages}]
    users = [m["content"] for m in messages if m["role"] == "user"]
    last = users[-1].lower()
    if "raise" in last:
        raise RuntimeError("the agent broke on purpose")
    if "what is my order number" in last:
        for text in users[:-1]:
            found = re.search(r"order number is (\\w+)", text)
            if found:
                return "Your order number is " + found.group(1) + "."
        return "I do not know."
    if "forget" in last:
        return "Forgotten."
    return "Noted (" + str(len(users)) + " messages)."

def one_arg(text):
    return "echo: " + text

async def slow(messages):
    import asyncio
    if len(messages) >= 3:  # the second turn never answers in time
        await asyncio.sleep(30)
    return "quick"
'''

TURNS = """
datasets:
  - id: chat
    cases:
      - id: remembers
        turns:
          - input: "Hi, my order number is 1234."
            assert: [{type: contains, value: "1 messages"}]
          - input: "I want a refund."
            assert: [{type: contains, value: "2 messages"}]
          - input: "What is my order number?"
            assert: [{type: contains, value: "1234"}]
        assert: [{type: contains, value: "order number is 1234"}]
"""


def project(tmp_path: Path, targets: str, datasets: str = TURNS) -> Path:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text("version: 1\n" + textwrap.dedent(targets).strip("\n") + "\n" + textwrap.dedent(datasets), encoding="utf-8")
    return config


PYTHON = """
targets:
  - {id: py, type: python, callable: "agent.py:chat"}
"""


def run(config: Path, *args: str) -> tuple[int, str, Path]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), *args])
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return result.exit_code, result.output, runs[-1]


def test_a_python_target_that_declares_messages_gets_the_history_each_turn(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, PYTHON))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "pass"
    assert cell["input"] == "Hi, my order number is 1234."  # the first turn's input is the case's
    assert cell["output"]["text"] == "Your order number is 1234."  # the last reply
    turns = cell["turns"]
    assert [t["input"] for t in turns] == ["Hi, my order number is 1234.", "I want a refund.", "What is my order number?"]
    assert [t["output"]["text"] for t in turns] == ["Noted (1 messages).", "Noted (2 messages).", "Your order number is 1234."]
    assert all(set(t) >= {"input", "output", "latency_ms", "usage", "tool_calls", "assertions"} for t in turns)
    assert [[a["turn"] for a in t["assertions"]] for t in turns] == [[1], [2], [3]]
    assert [a.get("turn") for a in cell["assertions"]] == [1, 2, 3, None]  # the case's own check last, untagged
    assert cell["latency_ms"] >= sum(t["latency_ms"] for t in turns) * 0.5


def test_a_failing_second_turn_fails_the_cell_and_is_named_everywhere(tmp_path: Path, junit_schema: Any) -> None:
    datasets = TURNS.replace('value: "2 messages"', 'value: "refund approved"')
    code, out, run_dir = run(project(tmp_path, PYTHON, datasets))
    assert code == 1
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "fail"
    turns = cell["turns"]
    assert len(turns) == 3  # later turns still ran
    assert turns[1]["assertions"][0]["passed"] is False and turns[1]["assertions"][0]["turn"] == 2
    assert turns[2]["assertions"][0]["passed"] is True
    assert "turn 2: contains" in out, out  # the terminal's reason
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "turn 2: contains" in json.dumps(summary["failures"])
    junit = (run_dir / "junit.xml").read_text()
    assert 'message="turn 2: contains' in junit
    assert "Noted (2 messages)." in junit  # the transcript, briefly, in system-out
    junit_schema.validate(str(run_dir / "junit.xml"))


def test_a_turn_that_errors_ends_the_conversation_naming_the_turn(tmp_path: Path) -> None:
    datasets = TURNS.replace("I want a refund.", "please raise now")
    code, out, run_dir = run(project(tmp_path, PYTHON, datasets))
    assert code == 3  # every cell of the target errored
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "error"
    assert cell["error"].startswith("turn 2: RuntimeError: the agent broke on purpose"), cell["error"]
    assert len(cell["turns"]) == 2  # turn 3 was never called
    assert cell["turns"][1]["output"]["error"] == "RuntimeError: the agent broke on purpose"
    assert "turn 2" in out


def test_a_function_without_messages_gets_each_turns_input(tmp_path: Path) -> None:
    targets = """
    targets:
      - {id: py, type: python, callable: "agent.py:one_arg"}
    """
    datasets = """
    datasets:
      - id: chat
        cases:
          - id: echo
            turns:
              - {input: "one", assert: [{type: equals, value: "echo: one"}]}
              - {input: "two", assert: [{type: equals, value: "echo: two"}]}
    """
    code, out, run_dir = run(project(tmp_path, targets, datasets))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert [t["output"]["text"] for t in cell["turns"]] == ["echo: one", "echo: two"]


def openai(server: FakeLLMServer, extra: str = "") -> str:
    return f"""
    targets:
      - id: mini
        type: provider
        provider: openai
        model: local-model
        base_url: {server.url}/v1
        api_key: {OPENAI_KEY}
        system: "You are a support agent."
        {extra}
    """


PROVIDER_TURNS = """
datasets:
  - id: chat
    cases:
      - id: order
        turns:
          - {input: "Hi, my order number is 1234.", assert: [{type: contains, value: "1234"}]}
          - {input: "How many messages did I send?", assert: [{type: contains, value: "2 messages"}]}
          - {input: "What is my order number?", assert: [{type: contains, value: "1234"}]}
        assert: [{type: contains, value: "Your order number is 1234"}]
"""


def test_a_provider_target_sends_the_growing_history(server: FakeLLMServer, tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, openai(server), PROVIDER_TURNS))
    assert code == 0, out
    bodies = server.bodies("/v1/chat/completions")
    assert len(bodies) == 3
    assert [len(b["messages"]) for b in bodies] == [2, 4, 6]  # system + the history so far
    assert bodies[2]["messages"][0] == {"role": "system", "content": "You are a support agent."}
    assert [m["role"] for m in bodies[2]["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert bodies[2]["messages"][2]["content"] == "You said: Hi, my order number is 1234."
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "pass"
    assert cell["output"]["text"] == "Your order number is 1234."
    assert cell["output"]["usage"]["input_tokens"] == sum(t["usage"]["input_tokens"] for t in cell["turns"])
    assert cell["cached"] is False


def test_a_provider_conversation_is_replayed_from_the_cache(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai(server), PROVIDER_TURNS)
    assert run(config)[0] == 0
    assert run(config)[0] == 0
    assert server.count("/v1/chat/completions") == 3  # every turn replayed (tests/execution/test_conversation_cache.py has the rest)


def test_a_provider_failing_second_turn(server: FakeLLMServer, tmp_path: Path) -> None:
    datasets = PROVIDER_TURNS.replace('value: "2 messages"', 'value: "3 messages"')
    code, out, run_dir = run(project(tmp_path, openai(server), datasets))
    assert code == 1
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "fail"
    assert cell["turns"][1]["assertions"][0]["passed"] is False
    assert "turn 2: contains" in out


@pytest.mark.parametrize(
    ("case", "where", "message"),
    [
        ("turns: []", "cases[0].turns", "should be non-empty"),
        ("turns: [{inptu: hi}]", "cases[0].turns[0].inptu", "did you mean 'input'"),
        ("turns: [{input: hi, assert: [{type: contians, value: x}]}]", "cases[0].turns[0].assert[0].type", "unknown assertion type"),
        ("input: hi\n        turns: [{input: hi}]", "cases[0].input", "'input' and 'turns' cannot both be given"),
        ("turns: [{input: 3}]", "cases[0].turns[0].input", "is not of type 'string'"),
    ],
)
def test_a_bad_turns_is_an_error_at_file_line(tmp_path: Path, case: str, where: str, message: str) -> None:
    data = tmp_path / "chat.yaml"
    data.write_text(
        f"cases:\n      - id: c\n        {case}\n".replace("\n      ", "\n  ").replace("\n        ", "\n    "), encoding="utf-8"
    )
    config = project(tmp_path, PYTHON, "datasets:\n  - {id: chat, path: chat.yaml}\n")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    line = next(ln for ln in result.output.splitlines() if where in ln)
    assert message in line and "chat.yaml:" in line, result.output
    assert "Traceback" not in result.output


def test_turns_in_a_jsonl_file(tmp_path: Path) -> None:
    case = {"id": "j", "turns": [{"input": "one"}, {"input": "What is my order number?", "assert": [{"type": "contains", "value": "not"}]}]}
    (tmp_path / "chat.jsonl").write_text(json.dumps(case) + "\n", encoding="utf-8")
    config = project(tmp_path, PYTHON, "datasets:\n  - {id: chat, path: chat.jsonl}\n")
    code, out, run_dir = run(config)
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["turns"][1]["output"]["text"] == "I do not know."


def test_turns_round_trip_through_results_and_other_cells_are_unchanged(tmp_path: Path) -> None:
    from evalx.results.compact import compact_cell, expand

    datasets = (
        TURNS
        + """
      - id: plain
        input: "What is my order number?"
        assert: [{type: contains, value: "know"}]
"""
    )
    code, out, run_dir = run(project(tmp_path, PYTHON, datasets))
    assert code == 0, out
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    assert "turns" not in cells["plain"] and "turns" not in cells["plain"]["output"]
    conv = cells["remembers"]
    line = compact_cell(conv, {"py": "python"}, with_case=True)
    back: dict[str, Any] = dict(expand(json.loads(json.dumps(line)), None, None))
    assert back["turns"] == conv["turns"]


def streaming(server: StreamServer, model: str) -> str:
    return f"""
    targets:
      - id: streamed
        type: provider
        provider: openai
        model: {model}
        base_url: {server.url}/v1
        api_key: {STREAM_KEY}
        stream: true
        retries: 0
    """


@pytest.fixture
def stream_server() -> Iterator[StreamServer]:
    s = StreamServer().start()
    yield s
    s.stop()


def test_a_streamed_provider_conversation_streams_each_turn(stream_server: StreamServer, tmp_path: Path) -> None:
    datasets = """
    datasets:
      - id: chat
        cases:
          - id: paris
            turns:
              - {input: "Capital of France?", assert: [{type: contains, value: Paris}]}
              - {input: "Again?", assert: [{type: contains, value: Paris}]}
    """
    code, out, run_dir = run(project(tmp_path, streaming(stream_server, "text"), datasets))
    assert code == 0, out
    bodies = [r["body"] for r in stream_server.requests]
    assert [b["stream"] for b in bodies] == [True, True]
    assert bodies[1]["messages"] == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": STREAM_TEXT},
        {"role": "user", "content": "Again?"},
    ]
    (cell,) = read_cells(run_dir)
    assert all(t["output"]["ttft_ms"] is not None for t in cell["turns"])
    assert cell["ttft_ms"] == cell["turns"][0]["output"]["ttft_ms"]


def test_tool_calls_and_mocked_tool_results_go_back_as_tool_messages(stream_server: StreamServer, tmp_path: Path) -> None:
    datasets = """
    datasets:
      - id: chat
        cases:
          - id: weather
            tool_results: {search: "no results"}
            turns:
              - {input: "Weather in Paris?", tool_results: {get_weather: {temp: 21}}}
              - {input: "And tomorrow?"}
            assert: [{type: must_call_tools, tools: [get_weather, search]}]
    """
    code, out, run_dir = run(project(tmp_path, streaming(stream_server, "tools"), datasets))
    assert code == 0, out
    second = stream_server.requests[1]["body"]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool", "user"]
    calls = second[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "search"]
    assert [m["tool_call_id"] for m in second[2:4]] == [c["id"] for c in calls]
    assert json.loads(second[2]["content"]) == {"temp": 21} and second[3]["content"] == "no results"
    (cell,) = read_cells(run_dir)
    assert [c["name"] for c in cell["output"]["tool_calls"]] == ["get_weather", "search", "get_weather", "search"]  # every turn's
    assert cell["turns"][0]["tool_calls"][0]["result"] == {"temp": 21}


@pytest.mark.parametrize(
    ("provider", "tool_messages"),
    [("groq", True), ("declared", True), ("undeclared", False)],
    ids=["extends-openai", "declares-tool_history", "declares-no-tool_history"],
)
def test_tool_history_follows_the_definitions_capability_not_its_name(
    provider: str, tool_messages: bool, stream_server: StreamServer, tmp_path: Path
) -> None:
    """groq extends openai (and inherits ``tool_history: true``); ``declared`` is its own file that declares it;
    ``undeclared`` is the same file with ``tool_history: false``: the replies' text only."""
    shipped = (Path(__file__).resolve().parents[2] / "providers" / "openai.yaml").read_text(encoding="utf-8")
    assert "tool_history: true" in shipped and "extends:" not in shipped
    (tmp_path / "providers").mkdir()
    for name, value in (("declared", "true"), ("undeclared", "false")):
        text = shipped.replace("name: openai", f"name: {name}").replace("tool_history: true", f"tool_history: {value}")
        (tmp_path / "providers" / f"{name}.yaml").write_text(text, encoding="utf-8")
    targets = f"""
    providers_dir: providers
    targets:
      - {{id: t, type: provider, provider: {provider}, model: tools, base_url: {stream_server.url}/v1,
         api_key: {STREAM_KEY}, stream: true, retries: 0}}
    """
    datasets = """
    datasets:
      - id: chat
        cases:
          - id: weather
            turns:
              - {input: "Weather in Paris?", tool_results: {get_weather: {temp: 21}, search: "none"}}
              - {input: "And tomorrow?"}
    """
    code, out, run_dir = run(project(tmp_path, targets, datasets))
    assert code == 0, out
    second = stream_server.requests[1]["body"]["messages"]
    if tool_messages:
        assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool", "user"]
        assert [c["function"]["name"] for c in second[1]["tool_calls"]] == ["get_weather", "search"]
        assert json.loads(second[2]["content"]) == {"temp": 21}
    else:
        assert [m["role"] for m in second] == ["user", "assistant", "user"]
        assert "tool_calls" not in second[1]


def test_the_timeout_bounds_the_whole_conversation(tmp_path: Path) -> None:
    targets = """
    targets:
      - {id: py, type: python, callable: "agent.py:slow", timeout_s: 2}
    """
    code, out, run_dir = run(project(tmp_path, targets))
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "error"
    assert cell["error"].startswith("turn 2: timed out after 2s"), cell["error"]
    assert [t["output"]["text"] for t in cell["turns"]] == ["quick", ""]
    assert cell["latency_ms"] < 15000  # bounded by the 2 s timeout, not the second turn's 30 s


def test_a_case_without_turns_keeps_its_digest_and_mapping() -> None:
    import hashlib

    from evalx.datasets.table import case_digest
    from evalx.models import Case

    case = Case(id="a", input="hi", asserts=[{"type": "contains", "value": "x"}])
    assert "turns" not in case.to_dict() and "tool_results" not in case.to_dict()
    before = [case.input, case.dataset, case.expected, case.category, case.difficulty, case.tags, case.vars, case.asserts]
    before += [case.description, case.notes, case.metadata, case.threshold, case.repeat, case.targets, case.system]
    assert case_digest(case, lambda v: v) == hashlib.blake2b(repr(["a", *before]).encode(), digest_size=16).digest()
    case.turns = [{"input": "hi"}]
    assert case_digest(case, lambda v: v) != hashlib.blake2b(repr(["a", *before]).encode(), digest_size=16).digest()
