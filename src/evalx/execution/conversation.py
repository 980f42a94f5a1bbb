"""Run a scripted conversation (a case with ``turns:``) as one cell: turn by turn, then its checks.

For each turn, in order, the user message is appended to the history and the
target's ``converse(cell, run, history, turn)`` (1-based ``turn``) gives the
reply, which is appended as the assistant's message (with its tool calls, and
the mocked ``tool_results`` of the turn or the case as ``tool`` messages). The
cell's timeout bounds the whole conversation; a turn that errors (or times out)
ends it and the cell is ``error``, its error naming the turn (``turn 2: ...``).
Once the turns are done, each turn's ``assert`` checks its own reply and the
case's ``assert`` (and the config's) the whole conversation: the last reply is
``output``, with the tool calls, tokens and cost of every turn. A failing turn
fails the cell; later turns still ran. The cell's ``latency_ms`` is the
conversation's wall time; each turn keeps its own. The response cache
(:mod:`evalx.execution.turn_cache`) replays a stateless target's turns one by
one, an engine's conversation whole; the cell is ``cached`` when every turn was.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from typing import TYPE_CHECKING, Any

from evalx.assertions import cell_status, evaluate_case
from evalx.assertions.evaluate import MIN_CHECK_TIME_S
from evalx.common.deadline import Deadline, HeldTheLoop, within
from evalx.common.json_types import JSON, JSONObject, Message, as_array, as_object
from evalx.execution import cells, turn_cache
from evalx.execution.turns import Turn, TurnFailed, reply_messages, take_turn
from evalx.models import Cell, ToolCall, Trajectory, Usage
from evalx.results.model import AssertionRecord, CellResult, TurnRecord, cell_result
from evalx.targets import RunContext, current_tally

if TYPE_CHECKING:
    from evalx.execution.executor import Executor, TargetPlan
    from evalx.execution.simulate import Simulation

__all__ = ["run_conversation"]


async def run_conversation(executor: Executor, plan: TargetPlan, cell: Cell) -> CellResult:
    """The result of a conversation cell (``cell.case.turns`` is set): every turn run, checked and recorded."""
    run, target, case = executor.run, plan.target, cell.case
    turns_spec: list[JSONObject] = case.turns or []  # as the dataset loader checked them: {input, assert?, tool_results?}
    sim = _simulation(executor, cell)  # None unless the case has simulate:
    if plan.pacer is not None:
        await plan.pacer()  # one turn of the rate limit for the cell, as a one-shot cell takes
    started_at = cells.started_at()
    t0 = time.perf_counter()
    task = asyncio.current_task()
    done: list[Turn] = []
    error: str | None = None
    tb: str | None = None
    deadline = Deadline(plan.settings.timeout_s, task=task)  # the limit of the whole conversation, as of a one-shot cell
    live = executor.live  # the watchdog's view of the cells in flight
    converse = getattr(target, "converse", None)
    if converse is None:
        error = f"conversations (turns:) are not supported by {target.type} targets (target {target.id!r})"
    else:
        cancels = cells.cancels(task)
        converse = turn_cache.per_turn(executor, plan, converse)  # each turn looked up first (stateless targets)
        whole = turn_cache.whole_key(executor, plan, cell)  # an engine's conversation, cached whole with cache: true
        limit = plan.settings.max_response_bytes  # bounds each reply and the whole conversation, user messages included
        talk = (
            _talk(converse, cell, run, turns_spec, done, limit)
            if whole is None
            else _talk_whole(executor, plan, whole, converse, cell, turns_spec, done)
        )
        if sim is not None:  # a simulated user writes the user messages: its own loop (evalx.execution.simulate)
            talk.close()
            talk = sim.talk(converse, run, done, limit)
        live[deadline] = None
        try:
            await within(deadline, talk)
        except TurnFailed as exc:
            error, tb = exc.message, exc.tb
        except (TimeoutError, asyncio.TimeoutError) as exc:
            notes = getattr(exc.__cause__, "__notes__", None) or []
            n = len(done) + 1
            reason = "; ".join([deadline.message("the limit of the whole conversation"), *notes])
            error = f"turn {n}: {reason}"
            done.append(Turn(_pending(turns_spec, n, sim), Trajectory(error=reason), None))
        except asyncio.CancelledError:
            if cancels is None or cells.cancels(task) != cancels:
                raise  # the run is interrupted
            n = len(done) + 1
            error, tb = f"turn {n}: CancelledError raised by the target", traceback.format_exc()
            done.append(Turn(_pending(turns_spec, n, sim), Trajectory(error="CancelledError raised by the target"), None))
        finally:
            del live[deadline]
    latency = round((time.perf_counter() - t0) * 1000.0, 3)

    final = _final(done, latency)
    if error is not None:
        final.error = error
    records: list[TurnRecord] = []
    assertions: list[AssertionRecord] = []
    if error is None:
        deadline.at_least(MIN_CHECK_TIME_S)  # the checks count against the cell's time too, with a minimum
        live[deadline] = None
        try:
            for n, turn in enumerate(done, 1):
                own = [as_object(a) for a in as_array(turns_spec[n - 1].get("assert"))] if n <= len(turns_spec) else []
                checked = (
                    await evaluate_case(
                        own, executor.assertion_context(cell, target, turn.traj, plan.settings.max_response_bytes), deadline=deadline
                    )
                    if own
                    else []
                )
                for a in checked:
                    a["turn"] = n
                assertions.extend(checked)
                records.append(_record(turn, checked))
            asserts = [*executor.global_asserts, *case.asserts]
            assertions.extend(
                await evaluate_case(
                    asserts, executor.assertion_context(cell, target, final, plan.settings.max_response_bytes), deadline=deadline
                )
            )
        except HeldTheLoop:  # the watchdog stopped a check outside the part that reports its own errors
            error = final.error = deadline.message("the checks held the event loop")
        finally:
            del live[deadline]
    else:
        records = [_record(turn, []) for turn in done]
    executor.stats.cells_by_target[target.id] = executor.stats.cells_by_target.get(target.id, 0) + 1
    status, score = cell_status(assertions, threshold=case.threshold, target_error=error)
    output, _, _ = cells.stored_output(final)
    result = cell_result(
        run.run_id, cell.index, target.id, target.type, case, cell.dataset, cell.repeat,
        status, score, assertions, output, final.latency_ms, final.ttft_ms, final.cost_usd,
        cells.judge_cost(assertions), bool(done) and error is None and all(t.traj.cached for t in done), error, tb, started_at,
        None, cells.rate_limits(current_tally()),
    )  # fmt: skip
    result["turns"] = records
    if sim is not None:
        sim.annotate(records)
        result["simulation"] = sim.summary(len(done))
    if run.redactor:
        result = run.redactor.obj(result)
    if result["error"] is not None:
        executor.stats.add_error(target.id, result["error"])
    return result


def _simulation(executor: Executor, cell: Cell) -> Simulation | None:
    """A :class:`evalx.execution.simulate.Simulation` for a case with ``simulate:``, else None."""
    if cell.case.simulate is None:
        return None
    from evalx.execution.simulate import Simulation

    return Simulation(executor, cell)


def _pending(turns: list[JSONObject], n: int, sim: Simulation | None) -> JSON:
    """The user message of turn ``n``, which did not finish: the script's, or the simulated user's."""
    return turns[n - 1]["input"] if n <= len(turns) else sim.pending if sim is not None else ""


def _mocked(cell: Cell, turn: JSONObject) -> JSONObject:
    """The tool results mocked for a turn: the case's, with the turn's own over them."""
    return {**(cell.case.tool_results or {}), **as_object(turn.get("tool_results"))}


async def _talk(
    converse: Any, cell: Cell, run: RunContext, turns: list[JSONObject], done: list[Turn], max_bytes: int | None = None
) -> None:
    """Call the target turn by turn, appending each finished turn to ``done``; raise :class:`TurnFailed` on an error.

    ``max_bytes`` (``max_response_bytes``) bounds each reply and the whole conversation (:func:`take_turn`).
    """

    history: list[Message] = []
    for n, spec in enumerate(turns, 1):
        text = spec["input"]
        history.append({"role": "user", "content": text})
        traj = await take_turn(converse, cell, run, history, n, text, done, max_bytes)
        history.extend(reply_messages(traj, _mocked(cell, spec)))


async def _talk_whole(
    executor: Executor, plan: TargetPlan, key: str, converse: Any, cell: Cell, turns: list[JSONObject], done: list[Turn]
) -> None:
    """:func:`_talk` for a conversation cached whole: every turn replayed from the cache, or run and then stored."""
    replayed = await turn_cache.replay_whole(executor, plan, key, len(turns))
    if replayed is None:
        await _talk(converse, cell, executor.run, turns, done, plan.settings.max_response_bytes)
        turn_cache.store_whole(executor, key, [t.traj for t in done])
        return
    for spec, traj in zip(turns, replayed):
        reply_messages(traj, _mocked(cell, spec))  # the mocked results, as when it ran
        done.append(Turn(spec["input"], traj, traj.latency_ms))


def _final(done: list[Turn], latency_ms: float) -> Trajectory:
    """The conversation as one trajectory: the last reply, with every turn's tool calls, tokens and cost added up."""
    if not done:
        return Trajectory(latency_ms=latency_ms)
    last = done[-1].traj
    calls: list[ToolCall] = []
    usage = Usage()
    costs = [t.traj.cost_usd for t in done if t.traj.cost_usd is not None]
    iterations = [t.traj.iterations for t in done if t.traj.iterations is not None]
    for turn in done:
        calls.extend(turn.traj.tool_calls)
        usage.add(turn.traj.to_dict()["usage"])
    return Trajectory(
        text=last.text,
        tool_calls=calls,
        usage=usage,
        iterations=sum(iterations) if iterations else None,
        events=last.events,
        events_truncated=last.events_truncated,
        latency_ms=latency_ms,
        ttft_ms=done[0].traj.ttft_ms,
        cost_usd=round(sum(costs), 8) if costs else None,
        request=last.request,
        raw=last.raw,
        printed=last.printed,
        stop_reason=last.stop_reason,
        cost_note=next((t.traj.cost_note for t in done if t.traj.cost_note is not None), None),
    )


def _record(turn: Turn, assertions: list[AssertionRecord]) -> TurnRecord:
    """A turn as ``results.jsonl`` keeps it: ``{input, output, latency_ms, usage, tool_calls, assertions}``."""
    output, tb, _ = cells.stored_output(turn.traj)
    record: TurnRecord = {
        "input": turn.input,
        "output": output,
        "latency_ms": turn.latency_ms,
        "usage": output["usage"],
        "tool_calls": output["tool_calls"],
        "assertions": assertions,
    }
    if tb is not None:
        record["traceback"] = tb
    if turn.traj.cached:
        record["cached"] = True
    return record
