"""Simulated users (``simulate:``) through the real CLI: a user target talks to the agent until its stop condition.

The user targets below are Python functions (a customer who gives an order number, then says
done) and a provider target on the fake OpenAI server (tests/_fake_llm.py); the agents are
Python functions. Both sides of each transcript are checked in results.jsonl and report.html.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, server  # noqa: F401  (fixtures)
from cli_project import run_cli, write_config
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

CODE = '''
import re

def customer(messages, instructions):
    """Opens with a greeting, gives the order number when asked, then says it is done."""
    mine = [m["content"] for m in messages if m["role"] == "assistant"]
    if not mine:
        assert not messages and "order 1234" in instructions
        return "Hi, I need help with an order."
    last = messages[-1]["content"].lower()
    if "order number" in last and not any("1234" in t for t in mine):
        return "My order number is 1234."
    return {"done": True}

def chatty(messages):
    """Never done; the instructions come as a leading system message (no instructions parameter)."""
    assert messages[0]["role"] == "system", messages
    return "Still there? (" + str(len(messages)) + ")"

def broken(messages, instructions):
    if len(messages) > 1:
        raise RuntimeError("the user broke")
    return "hello"

def agent(messages):
    """Asks for the order number, then looks the order up (a tool call) and confirms."""
    said = " ".join(m["content"] for m in messages if m["role"] == "user")
    found = re.search(r"order number is (\\d+)", said)
    if found:
        return {"text": "Order " + found.group(1) + " is on its way. Anything else?",
                "tool_calls": [{"name": "lookup_order", "args": {"id": found.group(1)}}]}
    return "Sure. What is your order number?"
'''

TARGETS = """
targets:
  - {id: bot, type: python, callable: "code.py:agent"}
  - {id: customer, type: python, callable: "code.py:customer"}
  - {id: chatty, type: python, callable: "code.py:chatty"}
  - {id: broken, type: python, callable: "code.py:broken"}
defaults: {targets: [bot]}
"""


def project(tmp_path: Path, simulate: str, *, targets: str = TARGETS, extra: str = "") -> Path:
    (tmp_path / "code.py").write_text(CODE, encoding="utf-8")
    datasets = f"""
    datasets:
      - id: support
        cases:
          - id: order
            {extra}
            simulate: {simulate}
            assert: [{{type: contains, value: "on its way"}}]
    """
    return write_config(tmp_path, targets, datasets)


def run(config: Path, *args: str) -> tuple[int, str, Path]:
    return run_cli(config, *args)


CUSTOMER = '{target: customer, instructions: "You are a customer of order 1234; get its status.", max_turns: 6, stop: {user_done: true}}'


def test_a_simulated_customer_talks_until_it_is_done(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, CUSTOMER))
    assert code == 0, out
    (cell,) = read_cells(run_dir)  # only the agent's cells: the user target is not a cell of its own
    assert cell["target"] == "bot" and cell["status"] == "pass"
    turns = cell["turns"]
    assert [t["input"] for t in turns] == ["Hi, I need help with an order.", "My order number is 1234."]
    assert [t["output"]["text"] for t in turns] == ["Sure. What is your order number?", "Order 1234 is on its way. Anything else?"]
    assert all(t["user"]["latency_ms"] >= 0 and "usage" in t["user"] for t in turns)  # the user side of each turn
    assert cell["simulation"]["stopped_by"] == "user_done" and cell["simulation"]["turns"] == 2
    assert cell["simulation"]["target"] == "customer"
    assert cell["output"]["text"] == "Order 1234 is on its way. Anything else?"
    assert cell["input"] is None  # the user target wrote the first message


def test_the_cases_input_is_the_first_user_message(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, CUSTOMER, extra='input: "Where is my parcel?"'))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["turns"][0]["input"] == "Where is my parcel?" and "user" not in cell["turns"][0]
    assert cell["turns"][1]["input"] == "My order number is 1234."


def test_stop_on_a_regex_of_the_agents_reply(tmp_path: Path) -> None:
    sim = '{target: customer, instructions: "You are a customer of order 1234.", stop: {regex: "on its \\\\w+ way|on its way"}}'
    code, out, run_dir = run(project(tmp_path, sim))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["simulation"]["stopped_by"] == "regex"
    assert len(cell["turns"]) == 2


def test_stop_when_the_agent_calls_a_tool(tmp_path: Path) -> None:
    sim = '{target: customer, instructions: "You are a customer of order 1234.", stop: {tool: lookup_order}}'
    code, out, run_dir = run(project(tmp_path, sim))
    assert code == 0, out
    (cell,) = read_cells(run_dir)
    assert cell["simulation"]["stopped_by"] == "tool"
    assert cell["turns"][-1]["tool_calls"][0]["name"] == "lookup_order"


def test_max_turns_ends_a_conversation_nobody_stops(tmp_path: Path) -> None:
    sim = '{target: chatty, instructions: "Keep talking.", max_turns: 3, stop: {regex: "never said"}}'
    code, out, run_dir = run(project(tmp_path, sim))
    (cell,) = read_cells(run_dir)
    assert cell["simulation"] == {
        "target": "chatty", "turns": 3, "stopped_by": "max_turns", "max_turns": 3,
        "user_usage": {"input_tokens": 0, "output_tokens": 0, "cache_hit_tokens": 0}, "user_cost_usd": None,
    }  # fmt: skip
    assert [t["input"] for t in cell["turns"]] == ["Still there? (1)", "Still there? (3)", "Still there? (5)"]
    assert cell["status"] == "fail"  # the case's assert checks the last reply: the agent never got an order number
    assert code == 1


def test_a_user_target_error_ends_the_simulation_naming_the_turn(tmp_path: Path) -> None:
    sim = '{target: broken, instructions: "x", max_turns: 4}'
    code, out, run_dir = run(project(tmp_path, sim))
    (cell,) = read_cells(run_dir)
    assert cell["status"] == "error"
    assert cell["error"].startswith("turn 2: the simulated user (target 'broken') failed: RuntimeError: the user broke"), cell["error"]
    assert len(cell["turns"]) == 1 and cell["simulation"]["stopped_by"] == "error"


def test_a_provider_target_plays_the_user(server: FakeLLMServer, tmp_path: Path) -> None:
    targets = f"""
    targets:
      - {{id: bot, type: python, callable: "code.py:agent"}}
      - {{id: mini, type: provider, provider: openai, model: local-model, base_url: "{server.url}/v1", api_key: {OPENAI_KEY},
          system: "not used"}}
    defaults: {{targets: [bot]}}
    """
    sim = '{target: mini, instructions: "You are a customer.", max_turns: 2}'
    code, out, run_dir = run(project(tmp_path, sim, targets=targets))
    (cell,) = read_cells(run_dir)
    bodies = server.bodies("/v1/chat/completions")
    assert len(bodies) == 2  # the user's two messages; the agent is Python
    assert bodies[0]["messages"] == [
        {"role": "system", "content": "You are a customer."},
        {"role": "user", "content": "Begin the conversation: write your first message to the agent."},
    ]
    # the second call sees the conversation from the user's side: its own message as assistant, the agent's as user
    assert [m["role"] for m in bodies[1]["messages"]] == ["system", "assistant", "user"]
    assert bodies[1]["messages"][2]["content"] == "Sure. What is your order number?"
    assert [t["input"] for t in cell["turns"]] == [
        "You said: Begin the conversation: write your first message to the agent.",
        "You said: Sure. What is your order number?",
    ]
    assert cell["simulation"]["stopped_by"] == "max_turns"
    assert cell["simulation"]["user_usage"]["input_tokens"] > 0
    assert sum(t["user"]["usage"]["input_tokens"] for t in cell["turns"]) == cell["simulation"]["user_usage"]["input_tokens"]
    assert cell["output"]["usage"]["input_tokens"] == 0  # the user's tokens are not the agent's


def test_a_provider_user_ends_with_the_json_done(server: FakeLLMServer, tmp_path: Path) -> None:
    from _fake_llm import Canned

    server.script(
        Canned(200, {"choices": [{"message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]}),
        Canned(200, {"choices": [{"message": {"role": "assistant", "content": ' {"done": true} '}, "finish_reason": "stop"}]}),
    )
    targets = f"""
    targets:
      - {{id: bot, type: python, callable: "code.py:agent"}}
      - {{id: mini, type: provider, provider: openai, model: local-model, base_url: "{server.url}/v1", api_key: {OPENAI_KEY}}}
    defaults: {{targets: [bot]}}
    """
    code, out, run_dir = run(project(tmp_path, '{target: mini, instructions: "Be brief.", stop: {user_done: true}}', targets=targets))
    (cell,) = read_cells(run_dir)
    assert cell["simulation"]["stopped_by"] == "user_done" and len(cell["turns"]) == 1


def test_the_simulated_transcript_is_in_report_html(tmp_path: Path) -> None:
    code, out, run_dir = run(project(tmp_path, CUSTOMER))
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="evalx-data">(.*?)</script>', html, re.S)
    assert match
    (cell,) = json.loads(match.group(1))["cells"]
    assert [t["i"] for t in cell["cv"]] == ["Hi, I need help with an order.", "My order number is 1234."]
    assert [t["o"] for t in cell["cv"]] == ["Sure. What is your order number?", "Order 1234 is on its way. Anything else?"]


@pytest.mark.slow
def test_the_simulated_chat_renders_in_a_browser(tmp_path: Path) -> None:
    from browser import chromium

    code, out, run_dir = run(project(tmp_path, CUSTOMER))
    url = (run_dir / "report.html").resolve().as_uri()
    browsers = chromium()
    browser = next(browsers)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.wait_for_selector("#mx-body tr.row")
        page.click('#mx-body button.chip[data-row="0"][data-t="0"]')
        page.wait_for_selector("#detail:not([hidden])")
        chat = page.locator("#d-body ol.chat")
        assert chat.locator(".bubble.user pre").all_text_contents() == ["Hi, I need help with an order.", "My order number is 1234."]
        assert chat.locator(".bubble.assistant pre").all_text_contents()[1] == "Order 1234 is on its way. Anything else?"
        assert errors == []
    finally:
        context.close()
        browsers.close()


@pytest.mark.parametrize(
    ("case", "where", "message"),
    [
        (
            "simulate: {target: customer, instructions: x}\n    turns: [{input: hi}]",
            "cases[0].simulate",
            "'turns' and 'simulate' cannot both be given",
        ),
        (
            "simulate: {target: custmer, instructions: x}",
            "cases[0].simulate.target",
            "unknown target 'custmer' for the simulated user (did you mean 'customer'?)",
        ),
        ("simulate: {target: customer, instructions: x, stop: {regx: a}}", "cases[0].simulate.stop", "'regx' was unexpected"),
        (
            "simulate: {target: customer, instructions: x, stop: {regex: '('}}",
            "cases[0].simulate.stop.regex",
            "not a valid regular expression",
        ),
        (
            "simulate: {target: customer, instructions: x, stop: {user_done: false}}",
            "cases[0].simulate.stop.user_done",
            "True was expected",
        ),
        ("simulate: {target: customer, instructions: x, max_turns: 0}", "cases[0].simulate.max_turns", "less than the minimum of 1"),
        ("simulate: {target: customer}", "cases[0].simulate", "'instructions' is a required property"),
    ],
)
def test_a_bad_simulate_is_an_error_at_file_line(tmp_path: Path, case: str, where: str, message: str) -> None:
    (tmp_path / "code.py").write_text(CODE, encoding="utf-8")
    (tmp_path / "chat.yaml").write_text(f"cases:\n  - id: c\n    {case}\n", encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text("version: 1\n" + textwrap.dedent(TARGETS) + "datasets:\n  - {id: chat, path: chat.yaml}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2, result.output
    line = next((ln for ln in result.output.splitlines() if where + ":" in ln or where + " " in ln), "")
    assert message in line and "chat.yaml:" in line, result.output
    assert "Traceback" not in result.output


def test_a_case_without_simulate_keeps_its_mapping() -> None:
    from evalx.models import Case

    case = Case(id="a", input="hi")
    assert "simulate" not in case.to_dict()
    case.simulate = {"target": "u", "instructions": "x"}
    assert case.to_dict()["simulate"] == {"target": "u", "instructions": "x"}


def test_an_engine_target_plays_the_user(engine_server: Any, tmp_path: Path) -> None:
    from conftest import ENGINE_TEST_KEY

    targets = f"""
    targets:
      - {{id: bot, type: python, callable: "code.py:agent"}}
      - {{id: eng, type: engine, url: "{engine_server.url}", api_key: {ENGINE_TEST_KEY}}}
    defaults: {{targets: [bot]}}
    """
    code, out, run_dir = run(project(tmp_path, '{target: eng, instructions: "You are a customer.", max_turns: 2}', targets=targets))
    (cell,) = read_cells(run_dir)
    sent = engine_server.turns_sent(cell["run_id"])
    assert [turn for _, turn, _ in sent] == [1, 2]  # one conversation on the engine's side, turn by turn
    assert len({task for task, _, _ in sent}) == 1 and ".user" in sent[0][0]
    assert sent[0][2] == "You are a customer.\n\nBegin the conversation: write your first message to the agent."
    assert sent[1][2] == "Sure. What is your order number?"  # only the agent's new reply: the engine keeps the rest
    assert cell["simulation"]["stopped_by"] == "max_turns" and len(cell["turns"]) == 2
    assert cell["turns"][1]["input"] == "You said: Sure. What is your order number?"


def test_a_datasets_defaults_may_give_every_case_the_simulated_user(tmp_path: Path) -> None:
    (tmp_path / "code.py").write_text(CODE, encoding="utf-8")
    (tmp_path / "support.jsonl").write_text(
        '{"id": "a", "assert": [{"type": "contains", "value": "on its way"}]}\n'
        '{"id": "b", "input": "Hello?", "assert": [{"type": "contains", "value": "on its way"}]}\n',
        encoding="utf-8",
    )
    config = tmp_path / "evalconfig.yaml"
    datasets = """
    datasets:
      - id: support
        path: support.jsonl
        defaults:
          simulate: {target: customer, instructions: "You are a customer of order 1234.", stop: {user_done: true}}
    """
    config.write_text("version: 1\n" + textwrap.dedent(TARGETS) + textwrap.dedent(datasets), encoding="utf-8")
    code, out, run_dir = run(config)
    assert code == 0, out
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    assert cells["a"]["simulation"]["stopped_by"] == cells["b"]["simulation"]["stopped_by"] == "user_done"
    assert cells["b"]["turns"][0]["input"] == "Hello?"
    config.write_text(config.read_text(encoding="utf-8").replace("target: customer", "target: custome"), encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert "datasets[0].defaults.simulate.target: unknown target 'custome' for the simulated user" in result.output, result.output


def test_turns_in_a_dataset_whose_defaults_simulate_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "code.py").write_text(CODE, encoding="utf-8")
    (tmp_path / "support.jsonl").write_text('{"id": "a", "turns": [{"input": "hi"}]}\n', encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    datasets = """
    datasets:
      - id: support
        path: support.jsonl
        defaults: {simulate: {target: customer, instructions: "x"}}
    """
    config.write_text("version: 1\n" + textwrap.dedent(TARGETS) + textwrap.dedent(datasets), encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert "support.jsonl:1 cases[0].turns: 'turns' and the dataset's defaults.simulate cannot both apply" in result.output, result.output
