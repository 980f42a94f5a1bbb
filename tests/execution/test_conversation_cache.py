"""The response cache for conversations, through the CLI: turn by turn for providers and Python, whole for engines.

The fake OpenAI server (tests/_fake_llm.py) counts the requests it answers,
the Python agent below counts its calls in a file, and the scripted engine
(tests/engine_server.py) records every turn it was sent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fake_llm import OPENAI_KEY, Canned, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from cli_project import run_cli, write_config
from conftest import ENGINE_TEST_KEY
from engine_server import EngineServer
from results_file import read_cells

CHAT = "/v1/chat/completions"

AGENT = '''
from pathlib import Path

CALLS = Path(__file__).with_name("calls.txt")

def chat(messages):
    """Counts its calls; answers with how many user messages it got (turn 2 is wrong every other time it is asked)."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    with CALLS.open("a") as f:
        f.write(str(len(users)) + "\\n")
    if len(users) == 2 and "flaky" in users[-1]:
        asked = CALLS.read_text().split().count("2")
        if asked % 2 == 0:
            return "wrong"
    return "Noted (" + str(len(users)) + " messages)."
'''


def three_turns(second: str = "How many messages did I send?") -> str:
    return f"""
    datasets:
      - id: chat
        cases:
          - id: order
            turns:
              - {{input: "Hi, my order number is 1234."}}
              - {{input: "{second}"}}
              - {{input: "What is my order number?"}}
            assert: [{{type: contains, value: "Your order number is 1234"}}]
    """


def project(tmp_path: Path, targets: str, datasets: str) -> Path:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    return write_config(tmp_path, targets, datasets)


def run(config: Path, *args: str) -> tuple[int, str, Path]:
    return run_cli(config, *args)


def openai(server: FakeLLMServer) -> str:
    return f"""
    targets:
      - {{id: mini, type: provider, provider: openai, model: local-model, base_url: "{server.url}/v1", api_key: {OPENAI_KEY}}}
    """


def cached_turns(run_dir: Path) -> list[bool]:
    (cell,) = read_cells(run_dir)
    return [bool(t.get("cached")) for t in cell["turns"]]


def test_a_rerun_replays_every_turn_without_a_request(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai(server), three_turns())
    code, out, first = run(config)
    assert code == 0, out
    assert server.count(CHAT) == 3
    assert cached_turns(first) == [False, False, False]
    assert read_cells(first)[0]["cached"] is False
    code, out, second = run(config)
    assert code == 0, out
    assert server.count(CHAT) == 3  # not one request more
    (cell,) = read_cells(second)
    assert cached_turns(second) == [True, True, True] and cell["cached"] is True
    assert cell["status"] == "pass" and cell["output"]["text"] == "Your order number is 1234."
    assert [t["output"]["text"] for t in cell["turns"]] == [t["output"]["text"] for t in read_cells(first)[0]["turns"]]


def test_a_changed_second_turn_is_asked_again_with_every_later_turn(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai(server), three_turns())
    assert run(config)[0] == 0
    project(tmp_path, openai(server), three_turns("How many messages have I sent?"))
    code, out, rerun = run(config)
    assert code == 0, out
    assert server.count(CHAT) == 3 + 2  # turns 2 and 3
    assert cached_turns(rerun) == [True, False, False]
    (cell,) = read_cells(rerun)
    assert cell["cached"] is False  # not every turn was
    bodies = server.bodies(CHAT)[3:]
    assert [len(b["messages"]) for b in bodies] == [3, 5]  # the replayed reply of turn 1 is in the history sent
    assert bodies[0]["messages"][1]["content"] == cell["turns"][0]["output"]["text"]


def test_a_turn_that_errored_is_asked_again_on_the_rerun(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai(server), three_turns())
    assert run(config)[0] == 0
    project(tmp_path, openai(server), three_turns("How many messages have I sent?"))
    server.script(Canned(400, {"error": {"message": "bad request on purpose", "type": "invalid_request_error"}}))
    code, out, broken = run(config)
    (cell,) = read_cells(broken)
    assert cell["status"] == "error" and cell["error"].startswith("turn 2:"), cell["error"]
    assert server.count(CHAT) == 3 + 1
    code, out, rerun = run(config)
    assert code == 0, out
    assert server.count(CHAT) == 3 + 1 + 2  # the errored turn 2 was not stored: asked again, and turn 3 after it
    assert cached_turns(rerun) == [True, False, False]


def test_no_cache_asks_every_turn(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, openai(server), three_turns())
    assert run(config)[0] == 0
    code, out, rerun = run(config, "--no-cache")
    assert code == 0, out
    assert server.count(CHAT) == 6
    assert cached_turns(rerun) == [False, False, False]


PYTHON_TURNS = """
datasets:
  - id: chat
    cases:
      - id: count
        turns:
          - {input: "one", assert: [{type: contains, value: "1 messages"}]}
          - {input: "two", assert: [{type: contains, value: "2 messages"}]}
          - {input: "three", assert: [{type: contains, value: "3 messages"}]}
"""


def calls(tmp_path: Path) -> list[int]:
    path = tmp_path / "calls.txt"
    return [int(n) for n in path.read_text().split()] if path.exists() else []


def test_a_python_target_with_cache_true_replays_unchanged_turns(tmp_path: Path) -> None:
    targets = """
    targets:
      - {id: py, type: python, callable: "agent.py:chat", cache: true}
    """
    config = project(tmp_path, targets, PYTHON_TURNS)
    assert run(config)[0] == 0
    assert calls(tmp_path) == [1, 2, 3]
    code, out, rerun = run(config)
    assert code == 0, out
    assert calls(tmp_path) == [1, 2, 3]  # no call at all
    assert cached_turns(rerun) == [True, True, True] and read_cells(rerun)[0]["cached"] is True
    project(tmp_path, targets, PYTHON_TURNS.replace('"three"', '"drei"'))
    code, out, rerun = run(config)
    assert code == 0, out
    assert calls(tmp_path) == [1, 2, 3, 3]  # only the changed last turn
    assert cached_turns(rerun) == [True, True, False]


def test_a_python_target_is_not_cached_by_default(tmp_path: Path) -> None:
    targets = """
    targets:
      - {id: py, type: python, callable: "agent.py:chat"}
    """
    config = project(tmp_path, targets, PYTHON_TURNS)
    assert run(config)[0] == 0
    assert run(config)[0] == 0
    assert calls(tmp_path) == [1, 2, 3, 1, 2, 3]


# ---------------------------------------------------------------- engines: cached whole, only with cache: true

ORDER = {
    "id": "order",
    "turns": [
        {"input": "Hi, my order number is 48151623."},
        {"input": "Which turn is this?", "assert": [{"type": "contains", "value": "turn 2"}]},
        {"input": "What is my order number?", "assert": [{"type": "contains", "value": "48151623"}]},
    ],
}


def engine_config(tmp: Path, server: EngineServer, cases: list[dict[str, Any]], **target: Any) -> Path:
    config = {
        "version": 1,
        "targets": [{"id": "agent", "type": "engine", "url": server.url, "api_key": "${ENGINE_KEY}", **target}],
        "datasets": [{"id": "chats", "cases": cases}],
    }
    path = tmp / "evalconfig.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def engine_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.01")
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("engine_env")
def test_an_engine_conversation_is_not_cached_by_default(engine_server: EngineServer, tmp_path: Path) -> None:
    config = engine_config(tmp_path, engine_server, [ORDER])
    for _ in range(2):
        code, out, run_dir = run(config)
        assert code == 0, out
        assert [s[1] for s in engine_server.turns_sent(run_dir.name)] == [1, 2, 3]
        assert cached_turns(run_dir) == [False, False, False]
    assert not (tmp_path / ".evalx").exists()


@pytest.mark.usefixtures("engine_env")
def test_an_engine_conversation_with_cache_true_is_cached_whole(engine_server: EngineServer, tmp_path: Path) -> None:
    config = engine_config(tmp_path, engine_server, [ORDER], cache=True)
    code, out, first = run(config)
    assert code == 0, out
    assert [s[1] for s in engine_server.turns_sent(first.name)] == [1, 2, 3]
    code, out, second = run(config)
    assert code == 0, out
    assert engine_server.turns_sent(second.name) == []  # not one turn sent
    (cell,) = read_cells(second)
    assert cell["cached"] is True and cached_turns(second) == [True, True, True]
    assert [t["output"]["text"] for t in cell["turns"]] == [t["output"]["text"] for t in read_cells(first)[0]["turns"]]
    # a changed last turn: the whole conversation again, from turn 1 (the engine starts afresh)
    changed = {**ORDER, "turns": [*ORDER["turns"][:2], {"input": "What was my order number again?"}]}
    engine_config(tmp_path, engine_server, [changed], cache=True)
    code, out, third = run(config)
    assert code == 0, out
    assert [s[1] for s in engine_server.turns_sent(third.name)] == [1, 2, 3]
    assert cached_turns(third) == [False, False, False]


# ---------------------------------------------------------------- repeats: flakiness per turn

FLAKY_TURNS = """
datasets:
  - id: chat
    cases:
      - id: shaky
        turns:
          - {input: "one", assert: [{type: contains, value: "1 messages"}]}
          - {input: "flaky two", assert: [{type: contains, value: "2 messages"}]}
          - {input: "three", assert: [{type: contains, value: "3 messages"}]}
      - id: steady
        turns:
          - {input: "one", assert: [{type: contains, value: "1 messages"}]}
          - {input: "two", assert: [{type: contains, value: "2 messages"}]}
"""


def test_a_turn_that_fails_in_some_repeats_is_reported_flaky(tmp_path: Path) -> None:
    targets = """
    targets:
      - {id: py, type: python, callable: "agent.py:chat", concurrency: 1}
    """
    config = project(tmp_path, targets, FLAKY_TURNS)
    code, out, run_dir = run(config, "--repeat", "4", "-v")  # -v: the full summary lists flaky turns
    assert code == 1, out
    cells = [c for c in read_cells(run_dir) if c["case_id"] == "shaky"]
    assert sorted(c["status"] for c in cells) == ["fail", "fail", "pass", "pass"]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    flaky = summary["repeats"]["flaky_turns"]
    assert flaky == [{"target": "py", "dataset": "chat", "case_id": "shaky", "turn": 2, "passed": 2, "runs": 4}]
    assert re.search(r"py\s+chat/shaky\s+turn 2\s+2/4", out), out
    assert "steady" not in json.dumps(flaky)
