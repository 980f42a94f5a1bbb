"""Transcripts (``messages:``) and trajectory checks per turn and over a conversation, through the real CLI.

The Python agent below answers from the history it is given (it declares ``messages``)
and calls tools by keyword, so a test can say which turn called what.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_project import run_cli, write_config
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

AGENT = '''
import time

REPLIES = {"hello": "Hi! How can I help?", "refund": "Refund issued.", "bye": "Goodbye."}

def chat(messages, case=None):
    """A scripted support agent: a reply per keyword, tool calls named in the message, its system prompt echoed."""
    if isinstance(messages, str):  # a one-shot case: called with its input
        messages = [{"role": "user", "content": messages}]
    last = messages[-1]["content"].lower()
    if "system?" in last:
        return "system: " + str((case or {}).get("system"))
    if "sleep" in last:
        time.sleep(0.15)
    calls = [{"name": name, "args": {}} for name in ("lookup", "refund", "notify") if "call " + name in last]
    text = next((reply for word, reply in REPLIES.items() if word in last), "Noted (" + str(len(messages)) + ").")
    return {"text": text, "tool_calls": calls}

def trajectory(text, case=None):
    """A one-shot agent for golden trajectories: calls get_weather when asked about the weather."""
    calls = [{"name": "get_weather", "args": {"city": "Lisbon"}}] if "weather" in text.lower() else []
    return {"text": "Sunny." if calls else "51", "tool_calls": calls, "usage": {"input_tokens": 10, "output_tokens": 5}}
'''

PYTHON = """
targets:
  - {id: py, type: python, callable: "agent.py:chat"}
"""


def project(tmp_path: Path, datasets: str, targets: str = PYTHON) -> Path:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    return write_config(tmp_path, targets, datasets)


def run(config: Path, *args: str) -> tuple[int, str, Path]:
    return run_cli(config, *args)


def cases(body: str) -> str:
    return "datasets:\n  - id: chat\n    cases:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "      ") + "\n"


TRANSCRIPT = """
- id: support
  messages:
    - {role: user, content: "hello there"}
    - {role: assistant, content: "Hi! How can I help?"}
    - {role: user, content: "I want a refund"}
    - {role: assistant, content: "Refund issued."}
    - {role: user, content: "bye"}
    - {role: assistant, content: "Goodbye."}
"""


def test_a_transcript_runs_as_turns_checked_against_the_assistant_messages(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, cases(TRANSCRIPT)))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "pass"
    assert cell["input"] == "hello there"
    assert [t["input"] for t in cell["turns"]] == ["hello there", "I want a refund", "bye"]
    checks = [a for t in cell["turns"] for a in t["assertions"]]
    assert [(a["type"], a["turn"], a["passed"]) for a in checks] == [("equals", 1, True), ("equals", 2, True), ("equals", 3, True)]


def test_a_second_reply_that_differs_fails_turn_2_named_as_such(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, cases(TRANSCRIPT.replace("Refund issued.", "Refund denied."))))
    assert code == 1
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "fail"
    assert [[a["passed"] for a in t["assertions"]] for t in cell["turns"]] == [[True], [False], [True]]  # turn 3 still ran
    assert "turn 2: equals" in out, out
    junit = (run_dir / "junit.xml").read_text()
    assert 'message="turn 2: equals' in junit


def test_expect_assert_sets_how_replies_are_checked(tmp_path: Path) -> None:
    shorter = TRANSCRIPT.replace("Refund issued.", "REFUND").replace("Goodbye.", "good")  # parts of the agent's replies
    body = shorter.replace("- id: support", "- id: support\n  expect_assert: {type: icontains}")
    code, out, run_dir = run(project(tmp_path, cases(body)))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    checks = [a for t in cell["turns"] for a in t["assertions"]]
    assert [a["type"] for a in checks] == ["icontains"] * 3 and all(a["passed"] for a in checks)
    code, out, run_dir = run(project(tmp_path, cases(shorter)))  # equals, the default, wants the whole reply
    assert code == 1
    (cell,) = read_cells(run_dir)
    assert [[a["passed"] for a in t["assertions"]] for t in cell["turns"]] == [[True], [False], [False]]


def test_a_leading_system_message_is_the_cases_system_and_a_trailing_user_message_is_unchecked(tmp_path: Path) -> None:
    body = """
    - id: sys
      messages:
        - {role: system, content: "You are terse."}
        - {role: user, content: "hello"}
        - {role: assistant, content: "Hi! How can I help?"}
        - {role: user, content: "what is your system?"}
    """
    code, out, run_dir = run(project(tmp_path, cases(body)))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert len(cell["turns"]) == 2
    assert cell["turns"][1]["output"]["text"] == "system: You are terse."
    assert cell["turns"][1]["assertions"] == []  # no expected reply: nothing checked


def test_a_transcript_in_a_jsonl_file(tmp_path: Path) -> None:
    case = {
        "id": "j",
        "expect_assert": {"type": "contains"},
        "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi!"}],
    }
    (tmp_path / "chat.jsonl").write_text(json.dumps(case) + "\n", encoding="utf-8")
    code, out, run_dir = run(project(tmp_path, "datasets:\n  - {id: chat, path: chat.jsonl}\n"))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["turns"][0]["assertions"][0]["type"] == "contains"


def test_expect_assert_in_a_datasets_defaults_checks_its_transcripts_only(tmp_path: Path) -> None:
    body = """
    - id: t
      messages: [{role: user, content: "I want a refund"}, {role: assistant, content: "refund"}]
    - id: plain
      input: "hello"
      assert: [{type: contains, value: "Hi!"}]
    """
    datasets = cases(body).replace("  - id: chat\n", "  - id: chat\n    defaults: {expect_assert: {type: icontains}}\n")
    code, out, run_dir = run(project(tmp_path, datasets))
    assert code == 0, out
    by_id = {c["case_id"]: c for c in read_cells(run_dir)}
    assert by_id["t"]["turns"][0]["assertions"][0]["type"] == "icontains"
    assert [a["type"] for a in by_id["plain"]["assertions"]] == ["contains"] and "turns" not in by_id["plain"]


@pytest.mark.parametrize(
    ("case", "where", "message"),
    [
        ("messages: [{role: bot, content: hi}]", "cases[0].messages[0].role", "is not one of"),
        ("messages: [{role: user, content: a}, {role: user, content: b}]", "cases[0].messages[1]", "two user messages in a row"),
        ("messages: [{role: assistant, content: hi}]", "cases[0].messages[0]", "must answer a user message"),
        (
            "messages: [{role: user, content: a}, {role: assistant, content: b}, {role: assistant, content: c}]",
            "cases[0].messages[2]",
            "follows another assistant message",
        ),
        ("messages: [{role: user, content: a}, {role: system, content: b}]", "cases[0].messages[1].role", "may only come first"),
        ("messages: [{role: system, content: a}]", "cases[0].messages", "has no user message"),
        ("input: hi\n        messages: [{role: user, content: a}]", "cases[0].input", "'input' and 'messages' cannot both be given"),
        ("turns: [{input: hi}]\n        messages: [{role: user, content: a}]", "cases[0].turns", "'turns' and 'messages' cannot"),
        ("messages: [{role: user, contnet: a}]", "cases[0].messages[0]", "'content' is a required property"),
        (
            "messages: [{role: user, content: a}, {role: assistant, content: b}]\n        expect_assert: {type: contians}",
            "cases[0].expect_assert.type",
            "unknown assertion type",
        ),
        (
            "messages: [{role: user, content: a}]\n        expect_assert: {type: equals, value: x}",
            "cases[0].expect_assert.value",
            "takes no 'value'",
        ),
        (
            "messages: [{role: user, content: a}]\n        expect_assert: {type: must_call_tools, tools: [x]}",
            "cases[0].expect_assert.type",
            "must_call_tools compares with no value",
        ),
        ("input: hi\n        expect_assert: {type: equals}", "cases[0].expect_assert", "which this case does not have"),
    ],
)
def test_a_bad_transcript_is_an_error_at_file_line(tmp_path: Path, case: str, where: str, message: str) -> None:
    data = tmp_path / "chat.yaml"
    data.write_text(f"cases:\n  - id: c\n    {case}\n".replace("\n        ", "\n    "), encoding="utf-8")
    config = project(tmp_path, "datasets:\n  - {id: chat, path: chat.yaml}\n")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2, result.output
    line = next((ln for ln in result.output.splitlines() if where in ln), "")
    assert message in line and "chat.yaml:" in line, result.output
    assert "Traceback" not in result.output


TOOLS = """
- id: tools
  turns:
    - input: "please call lookup"
      assert: [{type: must_call_tools, tools: [lookup]}, {type: max_tool_calls, value: 1}]
    - input: "now call refund and call notify"
      assert: [{type: must_call_tools, tools: [refund]}, {type: must_not_call_tools, tools: [lookup]}]
  assert:
    - {type: must_call_tools, tools: [lookup, refund, notify]}
    - {type: tool_order, tools: [lookup, refund, notify], exact: true}
    - {type: max_tool_calls, value: 3}
"""


def test_trajectory_checks_see_their_turns_calls_and_the_case_sees_every_turns_in_order(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, cases(TOOLS)))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert [c["name"] for c in cell["output"]["tool_calls"]] == ["lookup", "refund", "notify"]
    assert all(a["passed"] for a in cell["assertions"]), cell["assertions"]
    whole = [a for a in cell["assertions"] if "turn" not in a]
    assert [a["type"] for a in whole] == ["must_call_tools", "tool_order", "max_tool_calls"]


@pytest.mark.parametrize(
    ("change", "failing", "turn"),
    [
        # turn 2's own calls do not include lookup (turn 1's): a per-turn check sees its turn only
        ("[{type: must_call_tools, tools: [refund]}, {type: must_not", "[{type: must_call_tools, tools: [lookup]}, {type: must_not", 2),
        ("{type: max_tool_calls, value: 1}", "{type: max_tool_calls, value: 0}", 1),
        # the whole conversation's calls are in turn order: notify came after refund
        ("tools: [lookup, refund, notify], exact: true", "tools: [lookup, notify, refund]", None),
        ("{type: max_tool_calls, value: 3}", "{type: max_tool_calls, value: 2}", None),
    ],
)
def test_a_trajectory_check_fails_on_its_own_turn_or_the_whole_conversation(
    tmp_path: Path, change: str, failing: str, turn: int | None
) -> None:
    assert change in TOOLS
    code, out, run_dir = run(project(tmp_path, cases(TOOLS.replace(change, failing))))
    assert code == 1, out
    (cell,) = read_cells(run_dir)
    failed = [a for a in cell["assertions"] if not a["passed"]]
    assert len(failed) == 1, failed
    assert failed[0].get("turn") == turn
    if turn is not None:
        assert f"turn {turn}: {failed[0]['type']}" in out


def test_a_latency_budget_is_per_turn_in_a_turn_and_the_whole_conversation_in_the_case(tmp_path: Path) -> None:
    body = """
    - id: slow
      turns:
        - {input: "sleep please", assert: [{type: max_latency_ms, value: 100}]}
        - {input: "sleep again", assert: [{type: max_latency_ms, value: 5000}]}
      assert: [{type: max_latency_ms, value: 250}]
    """
    code, out, run_dir = run(project(tmp_path, cases(body)))
    assert code == 1, out
    (cell,) = read_cells(run_dir)
    by_turn = {a.get("turn"): a for a in cell["assertions"]}
    assert by_turn[1]["passed"] is False  # 150 ms for that turn alone
    assert by_turn[2]["passed"] is True
    assert by_turn[None]["passed"] is False  # two turns of 150 ms: the conversation took over 250 ms
    assert cell["latency_ms"] >= 300 and all(t["latency_ms"] < cell["latency_ms"] for t in cell["turns"])


def test_a_golden_trajectory_case_is_still_a_one_turn_case(tmp_path: Path) -> None:
    targets = """
    targets:
      - {id: py, type: python, callable: "agent.py:trajectory"}
    """
    body = """
    - id: weather-lookup
      user_message: What's the weather in Lisbon?
      system: You are a helpful assistant.
      required_tools: [get_weather]
      forbidden_tools: [web_search]
      max_tokens: 4000
    - id: no-tools-needed
      user_message: What is 17 * 3?
      forbidden_tools: [get_weather]
    """
    code, out, run_dir = run(project(tmp_path, cases(body), targets))
    assert code == 0, out
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    weather = cells["weather-lookup"]
    assert "turns" not in weather and weather["input"] == "What's the weather in Lisbon?"
    assert [a["type"] for a in weather["assertions"]] == ["must_call_tools", "must_not_call_tools", "max_tokens"]
    assert all(a["passed"] and "turn" not in a for a in weather["assertions"])
    assert cells["no-tools-needed"]["status"] == "pass" and "turns" not in cells["no-tools-needed"]
