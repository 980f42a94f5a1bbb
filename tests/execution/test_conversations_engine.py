"""Conversations against engine targets: one ``task_id`` for every turn of a cell, a 1-based ``turn``, state on the engine's side.

The scripted engine (tests/engine_server.py) keeps each conversation: it
remembers what an earlier turn told it and refuses a turn out of order, so a
client that resent a conversation under a new id, or skipped a turn, fails here.
"""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from conftest import ENGINE_TEST_KEY, REPO
from engine_server import EngineServer
from results_file import read_cells

from evalx.cli import main
from evalx.errors import TargetError
from evalx.models import Case, Cell, Trajectory
from evalx.targets.base import RunContext
from evalx.targets.engine import EngineTarget, conversation_id
from evalx.targets.settings import resolve_settings


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.01")


def target(server: EngineServer, **over: Any) -> EngineTarget:
    spec = {"id": "agent", "type": "engine", "url": server.url, "api_key": ENGINE_TEST_KEY, **over}
    return EngineTarget(spec, resolve_settings(spec, {"timeout_s": 2.0, "retries": 1, "idle_timeout_s": 1.0}))


def cell(index: int = 0, case_id: str = "order", repeat: int = 0, target_id: str = "agent") -> Cell:
    return Cell(index=index, target=target_id, dataset="chats", case=Case(id=case_id, input=None, dataset="chats"), repeat=repeat)


async def converse(t: EngineTarget, c: Cell, run: RunContext, messages: list[Any]) -> list[Trajectory | TargetError]:
    """The driver's loop in small: one ``converse`` a turn, the history growing; an error ends the conversation."""
    history: list[dict[str, Any]] = []
    out: list[Trajectory | TargetError] = []
    for n, message in enumerate(messages, start=1):
        history.append({"role": "user", "content": message})
        try:
            traj = await t.converse(c, run, list(history), n)
        except TargetError as exc:
            out.append(exc)
            break
        out.append(traj)
        history.append({"role": "assistant", "content": traj.text})
    return out


def run_conversations(t: EngineTarget, run: RunContext, work: list[tuple[Cell, list[Any]]]) -> list[list[Trajectory | TargetError]]:
    async def go() -> list[list[Trajectory | TargetError]]:
        await t.start(run)
        try:
            return list(await asyncio.gather(*(converse(t, c, run, m) for c, m in work)))
        finally:
            await t.aclose()

    return asyncio.run(go())


THREE_TURNS = ["Hi, my order number is 48151623.", "Which turn is this?", "What is my order number?"]


def test_three_turns_share_one_task_id_and_the_engine_remembers(engine_server: EngineServer, tmp_path: Path) -> None:
    run = RunContext(run_id="conv-three", config_dir=tmp_path)
    [turns] = run_conversations(target(engine_server), run, [(cell(), THREE_TURNS)])
    assert all(isinstance(t, Trajectory) for t in turns), turns
    texts = [t.text for t in turns if isinstance(t, Trajectory)]
    assert texts == ["Noted: order number 48151623.", "This is turn 2 of our conversation.", "Your order number is 48151623."]
    sent = engine_server.turns_sent("conv-three")
    assert [s[1] for s in sent] == [1, 2, 3]
    assert len({s[0] for s in sent}) == 1 and sent[0][0] == conversation_id("conv-three", cell())
    assert [s[2] for s in sent] == THREE_TURNS  # only the new user message: the engine keeps the history
    for t in turns:
        assert isinstance(t, Trajectory)
        assert t.ttft_ms is not None and t.ttft_ms >= 0  # every turn's own time to first token
        assert t.request is not None and t.request["body"]["turn"] == turns.index(t) + 1
        assert "messages" not in t.request["body"] and "history" not in t.request["body"]


def test_cells_and_repeats_of_a_case_get_their_own_conversation(engine_server: EngineServer, tmp_path: Path) -> None:
    run = RunContext(run_id="conv-apart", config_dir=tmp_path)
    cells = [cell(0), cell(1, repeat=1), cell(2, target_id="agent-b")]
    told = ["my order number is 111", "my order number is 222", "my order number is 333"]
    work = [(c, [message, "what is my order number?"]) for c, message in zip(cells, told, strict=True)]
    results = run_conversations(target(engine_server), run, work)
    answers = [r[1].text for r in results if isinstance(r[1], Trajectory)]
    assert answers == ["Your order number is 111.", "Your order number is 222.", "Your order number is 333."]
    ids = {s[0] for s in engine_server.turns_sent("conv-apart")}
    assert len(ids) == 3


def test_an_engine_error_on_turn_two_ends_the_conversation(engine_server: EngineServer, tmp_path: Path) -> None:
    run = RunContext(run_id="conv-error", config_dir=tmp_path)
    [turns] = run_conversations(
        target(engine_server), run, [(cell(), ["my order number is 7", "script:error_event", "what is my order number?"])]
    )
    assert isinstance(turns[0], Trajectory) and len(turns) == 2
    assert isinstance(turns[1], TargetError) and "TOOL_FAILED" in str(turns[1])
    assert [s[1] for s in engine_server.turns_sent("conv-error")] == [1, 2]  # turn 3 never sent


def test_a_turn_retried_after_a_server_error_keeps_its_number(engine_server: EngineServer, tmp_path: Path) -> None:
    run = RunContext(run_id="conv-retry", config_dir=tmp_path)
    # the scripted engine counts attempts per task_id: turn 1 was the first, so turn 2's first attempt is the second
    second = {"message": "what is my order number?", "scenario": "flaky500", "failures": 2}
    [turns] = run_conversations(target(engine_server), run, [(cell(), ["my order number is 9", second])])
    assert [t.text for t in turns if isinstance(t, Trajectory)] == ["Noted: order number 9.", "Your order number is 9."]
    sent = engine_server.turns_sent("conv-retry")
    assert [s[1] for s in sent] == [1, 2, 2]


def test_a_body_template_sees_the_turn(engine_server: EngineServer, tmp_path: Path) -> None:
    run = RunContext(run_id="conv-template", config_dir=tmp_path)
    body = {"message": "{{ case.input }}", "session": "{{ task_id }}", "n": "{{ turn }}", "scenario": "echo"}
    [turns] = run_conversations(target(engine_server, body=body), run, [(cell(), ["first", "second"])])
    bodies = [t.request["body"] for t in turns if isinstance(t, Trajectory) and t.request]
    tid = conversation_id("conv-template", cell())
    assert [(b["message"], b["session"], b["n"], b["task_id"], b["turn"]) for b in bodies] == [
        ("first", tid, 1, tid, 1),
        ("second", tid, 2, tid, 2),
    ]


def test_a_turn_out_of_order_is_refused_by_the_scripted_engine(engine_server: EngineServer, tmp_path: Path) -> None:
    """The scripted engine checks the protocol: a client that skipped turn 1 would be told."""
    run = RunContext(run_id="conv-order", config_dir=tmp_path)
    t = target(engine_server)

    async def go() -> None:
        await t.start(run)
        try:
            with pytest.raises(TargetError, match="409"):
                await t.converse(cell(), run, [{"role": "user", "content": "hello"}], 2)
        finally:
            await t.aclose()

    asyncio.run(go())


# ---------------------------------------------------------------- through the CLI


def write_config(tmp: Path, server: EngineServer, cases: list[dict[str, Any]], **target: Any) -> Path:
    config = {
        "version": 1,
        "name": "engine-chats",
        "defaults": {"timeout_s": 5.0, "retries": 1},
        "targets": [{"id": "agent", "type": "engine", "url": server.url, "api_key": "${ENGINE_KEY}", "idle_timeout_s": 2.0, **target}],
        "datasets": [{"id": "chats", "cases": cases}],
    }
    path = tmp / "evalconfig.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def cli_run(config: Path, *args: str) -> tuple[Result, Path]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), *args], catch_exceptions=False)
    match = re.search(r"^\s*results: (.+?)/?$", result.output, re.M)
    assert match, result.output
    run_dir = Path(match.group(1))
    return result, run_dir if run_dir.is_absolute() else Path.cwd() / run_dir


ORDER = {
    "id": "order",
    "turns": [
        {"input": "Hi, my order number is 48151623.", "assert": [{"type": "contains", "value": "Noted"}]},
        {"input": "Which turn is this?", "assert": [{"type": "contains", "value": "turn 2"}]},
        {"input": "What is my order number?", "assert": [{"type": "contains", "value": "48151623"}]},
    ],
    "assert": [{"type": "contains", "value": "Your order number"}],
}


@pytest.fixture
def engine_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)


@pytest.mark.usefixtures("engine_key")
def test_a_three_turn_case_passes_against_the_engine(engine_server: EngineServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result, run_dir = cli_run(write_config(tmp_path, engine_server, [ORDER]))
    assert result.exit_code == 0, result.output
    [cell_result] = read_cells(run_dir)
    assert cell_result["status"] == "pass"
    turns = cell_result["turns"]
    assert [t["output"]["text"] for t in turns] == [
        "Noted: order number 48151623.",
        "This is turn 2 of our conversation.",
        "Your order number is 48151623.",
    ]
    assert all(t["latency_ms"] > 0 and t["output"]["ttft_ms"] is not None for t in turns)
    assert cell_result["output"]["text"] == "Your order number is 48151623."  # the case's own assert checks the last reply
    sent = engine_server.turns_sent(run_dir.name)
    assert [s[1] for s in sent] == [1, 2, 3] and len({s[0] for s in sent}) == 1
    assert ENGINE_TEST_KEY not in (run_dir / "results.jsonl").read_text(encoding="utf-8")


@pytest.mark.usefixtures("engine_key")
def test_a_failing_second_turn_is_named_and_later_turns_still_run(
    engine_server: EngineServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    case = {
        **ORDER,
        "turns": [ORDER["turns"][0], {**ORDER["turns"][1], "assert": [{"type": "contains", "value": "turn 9"}]}, ORDER["turns"][2]],
    }
    result, run_dir = cli_run(write_config(tmp_path, engine_server, [case]))
    assert result.exit_code == 1, result.output
    [cell_result] = read_cells(run_dir)
    assert cell_result["status"] == "fail" and len(cell_result["turns"]) == 3
    assert [a["passed"] for a in cell_result["turns"][1]["assertions"]] == [False]
    assert [(a.get("turn"), a["passed"]) for a in cell_result["assertions"]] == [(1, True), (2, False), (3, True), (None, True)]
    assert [s[1] for s in engine_server.turns_sent(run_dir.name)] == [1, 2, 3]
    assert re.search(r"order — turn 2: contains: expected to contain 'turn 9'", result.output), result.output
    junit = ET.parse(run_dir / "junit.xml").getroot()
    [failure] = junit.iter("failure")
    assert failure.get("message", "").startswith("turn 2: contains: expected to contain 'turn 9'")


@pytest.mark.usefixtures("engine_key")
def test_an_engine_error_on_turn_two_errors_the_cell_and_turn_three_is_never_sent(
    engine_server: EngineServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    case = {
        "id": "broken",
        "turns": [{"input": "my order number is 5"}, {"input": "script:error_event"}, {"input": "What is my order number?"}],
    }
    result, run_dir = cli_run(write_config(tmp_path, engine_server, [ORDER, case]))
    assert result.exit_code == 1, result.output
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    assert cells["order"]["status"] == "pass"
    broken = cells["broken"]
    assert broken["status"] == "error"
    assert broken["error"] == "turn 2: engine error TOOL_FAILED: the sandbox crashed"
    assert len(broken["turns"]) == 2
    assert [s[1] for s in engine_server.turns_sent(run_dir.name) if "-broken-" in s[0]] == [1, 2]  # an error ends the conversation
    [error] = ET.parse(run_dir / "junit.xml").getroot().iter("error")
    assert "turn 2: engine error TOOL_FAILED" in error.get("message", "")


@pytest.mark.usefixtures("engine_key")
def test_repeats_and_cells_of_one_case_hold_separate_conversations(
    engine_server: EngineServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, engine_server, [ORDER])
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["targets"].append({**data["targets"][0], "id": "agent-b"})  # the same engine under a second target id
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result, run_dir = cli_run(config, "--repeat", "2")
    assert result.exit_code == 0, result.output
    cells = read_cells(run_dir)
    assert len(cells) == 4 and {c["status"] for c in cells} == {"pass"}
    sent = engine_server.turns_sent(run_dir.name)
    by_id: dict[str, list[int | None]] = {}
    for tid, n, _ in sent:
        by_id.setdefault(tid, []).append(n)
    assert len(by_id) == 4 and all(turns == [1, 2, 3] for turns in by_id.values())


def test_the_demo_engine_keeps_a_conversation(tmp_path: Path) -> None:
    """The case docs/targets.md shows, against examples/engine/demo_engine.py."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = REPO / "examples/engine/demo_engine.py"
    proc = subprocess.Popen(
        [sys.executable, str(demo), "--port", str(port), "--delay", "0", "--key", ""],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    case = {
        "id": "remembers-the-order",
        "turns": [
            {"input": "Hi, my order number is 48151623."},
            {"input": "What is 2 + 2?", "assert": [{"type": "contains", "value": "4"}]},
            {"input": "What is my order number?", "assert": [{"type": "contains", "value": "48151623"}]},
        ],
    }
    single = {"id": "capital", "input": "What is the capital of France?", "assert": [{"type": "contains", "value": "Paris"}]}
    config = {
        "version": 1,
        "name": "demo-chat",
        "targets": [{"id": "demo", "type": "engine", "url": f"http://127.0.0.1:{port}"}],
        "datasets": [{"id": "chats", "cases": [case, single]}],
    }
    path = tmp_path / "evalconfig.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the engine says it is listening once it is: no sleeping
        assert f"127.0.0.1:{port}" in first, first
        result, run_dir = cli_run(path)
    finally:
        proc.terminate()
        proc.wait(10)
    assert result.exit_code == 0, result.output
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    replies = [t["output"]["text"] for t in cells["remembers-the-order"]["turns"]]
    assert replies == ["Noted.", "2 + 2 = 4.", "Your order number is 48151623."]
    assert cells["capital"]["output"]["text"] == "The capital of France is Paris."
