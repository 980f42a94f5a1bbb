"""Conversations against engine targets: one ``task_id`` for every turn of a cell, a 1-based ``turn``, state on the engine's side.

The scripted engine (tests/engine_server.py) keeps each conversation: it
remembers what an earlier turn told it and refuses a turn out of order, so a
client that resent a conversation under a new id, or skipped a turn, fails here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import ENGINE_TEST_KEY
from engine_server import EngineServer

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
