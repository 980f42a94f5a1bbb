"""Run a case's assertions over a trajectory and decide the cell's status.

Checks count against the cell's time: the executor passes the cell's
:class:`~evalx.common.deadline.Deadline` (with at least :data:`MIN_CHECK_TIME_S`
left). A synchronous check runs on the event loop under it
(:func:`evalx.common.regexes.start_on_loop`; each check gets at least
:data:`MIN_EACH_CHECK_S`, so one slow check does not leave the cheap ones
after it unrun); one whose regexes or schema walk use up
their short slice of the loop (:data:`evalx.common.regexes.ON_LOOP_SLICE_S`) is run
again in a thread of its own with the rest of the budget, so a regex that
backtracks never holds up the other cells, Ctrl-C or SIGTERM. At most
:data:`MAX_CHECK_THREADS` such threads run at once; each ends by its budget.
A check stopped by the deadline (its regexes, its schema walk, or the
watchdog when it holds the loop) is that assertion's error, worded as every
timeout is (``timed out after 1s (...)``): never a pass, and never a fail a
``not:`` could turn into a pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import weakref
from typing import TYPE_CHECKING, Any

from evalx.assertions.registry import COMMON_KEYS, AssertionContext, AssertionFn, get_assertion
from evalx.common import regexes
from evalx.common.deadline import Deadline, HeldTheLoop
from evalx.errors import described
from evalx.models import Verdict, clipped, json_size, too_large

if TYPE_CHECKING:  # types only: `import evalx` (the CLI's startup) must not pay for the results model
    from evalx.results.model import AssertionRecord, Status


#: spec keys that are not arguments of the assertion's function
_NOT_ARGUMENTS = frozenset({*COMMON_KEYS, "judge"})

#: assertion types that compare cells (``pairwise``): never evaluated with one cell (evalx.execution.pairwise_pass)
CROSS_CELL = frozenset({"pairwise"})

#: the least time a cell's checks get, even when its call used up its timeout
MIN_CHECK_TIME_S = 0.5
#: the least time each check gets, even when the checks before it used up the cell's (so cheap ones still run)
MIN_EACH_CHECK_S = 0.1
_IN_A_THREAD: Any = object()  # a check that used its slice of the loop: run it again in a thread

#: checks that outgrew their slice of the event loop and run in threads at once (the rest wait their turn)
MAX_CHECK_THREADS = 2


async def evaluate_case(asserts: list[dict[str, Any]], ctx: AssertionContext, *, deadline: Deadline | None = None) -> list[AssertionRecord]:
    """Evaluate every assertion in order; one that breaks is an assertion error, never a crash.

    ``deadline``: the cell's, which the checks count against (None: each regex match its own default).
    Checks across cells (:data:`CROSS_CELL`) are left out: they are judged after the cells.
    A check that answers at once (the usual, synchronous kind) is recorded without a coroutine of its own.
    """
    records: list[AssertionRecord] = []
    for spec in asserts:
        if spec.get("type") in CROSS_CELL:
            continue
        verdict = _verdict(spec, ctx, deadline)
        if type(verdict) is not Verdict:
            verdict = await _awaited(spec, verdict, ctx, deadline)
        records.append(_record(spec, verdict, ctx.max_bytes))
    return records


async def evaluate_one(spec: dict[str, Any], ctx: AssertionContext, *, deadline: Deadline | None = None) -> AssertionRecord:
    """One assertion's record (what :func:`evaluate_case` gives for each)."""
    verdict = _verdict(spec, ctx, deadline)
    if type(verdict) is not Verdict:
        verdict = await _awaited(spec, verdict, ctx, deadline)
    return _record(spec, verdict, ctx.max_bytes)


def _verdict(spec: dict[str, Any], ctx: AssertionContext, deadline: Deadline | None) -> Any:
    """The check's :class:`Verdict` when it answers at once, else what to await for it (:func:`_awaited`)."""
    kind = spec["type"]
    atype = get_assertion(kind)
    if atype is None:  # validation catches this; be safe at run time too
        return Verdict(None, 0.0, f"unknown assertion type {kind!r}", error=f"unknown assertion type {kind!r}")
    names = atype.arg_names  # (most types rename none of their keys: no lookup a key then)
    kwargs = {names.get(k, k) if names else k: v for k, v in spec.items() if k not in _NOT_ARGUMENTS}
    sub_ctx = ctx
    if "judge" in spec:
        sub_ctx = dataclasses.replace(ctx, judge_settings={**ctx.judge_settings, **spec["judge"]})
    try:
        if deadline is None or atype.is_async:
            res = atype.fn(sub_ctx, **kwargs)
        else:
            regexes.start_on_loop(deadline, MIN_EACH_CHECK_S)  # not a context manager: this runs for every check of every cell
            try:
                res = atype.fn(sub_ctx, **kwargs)
            except regexes.NeedsThread:
                res = _IN_A_THREAD
            finally:
                regexes.stop_on_loop()
            if res is _IN_A_THREAD:
                deadline.at_least(MIN_EACH_CHECK_S)
                return _in_thread(atype.fn, sub_ctx, kwargs, deadline)
        if isinstance(res, Verdict) or not inspect.isawaitable(res):  # a Verdict: skip the slower check
            return res if type(res) is Verdict else _Answered(res)
        return res
    except Exception as exc:  # HeldTheLoop, or an assertion that breaks: see _failed
        return _failed(kind, exc, deadline)


class _Answered:
    """A synchronous check's answer that is not exactly a :class:`Verdict` (a subclass...): given back as it is."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


async def _awaited(spec: dict[str, Any], pending: Any, ctx: AssertionContext, deadline: Deadline | None) -> Any:
    """The verdict of a check that did not answer at once: its coroutine, or its run in a thread."""
    if isinstance(pending, _Answered):
        return pending.value
    try:
        return await pending
    except Exception as exc:
        return _failed(spec["type"], exc, deadline)


def _failed(kind: str, exc: Exception, deadline: Deadline | None) -> Verdict:
    """The verdict of a check that raised: the watchdog's stop (it held the loop) or its own error; never a crash."""
    if isinstance(exc, HeldTheLoop):  # the watchdog stopped a check that held the event loop past the cell's deadline
        msg = deadline.message(f"the check {kind} held the event loop") if deadline else f"the check {kind} held the event loop"
        return Verdict(None, 0.0, msg, error=msg)
    msg = described(exc)
    return Verdict(None, 0.0, f"assertion raised {msg}", error=msg)


def _record(spec: dict[str, Any], verdict: Verdict, max_bytes: int | None = None) -> AssertionRecord:
    """The assertion's record: its verdict, negated for ``not: true``, within ``max_bytes`` (see :func:`_bounded`)."""
    negate = bool(spec.get("not", False))
    if negate and verdict.error is None and verdict.passed is not None:
        verdict = Verdict(
            not verdict.passed,
            1.0 - verdict.score,
            # a negated check that fails says what held that must not have: "not: contains 'x'" read as the opposite
            (f"not: {verdict.reason}" if not verdict.passed else f"must not hold (not: true), but does: {verdict.reason}")
            if verdict.reason
            else "not",
            details=verdict.details,
        )
    out: AssertionRecord = {
        "type": spec["type"],
        "name": spec.get("name"),
        "passed": verdict.passed,
        "score": round(float(verdict.score), 6),
        "reason": verdict.reason,
        "weight": float(spec.get("weight", 1.0)),
    }
    if negate:
        out["not"] = True
    if verdict.error is not None:
        out["error"] = verdict.error
    if verdict.details:
        out["details"] = verdict.details
    if max_bytes is None:
        return out
    reason = verdict.reason  # a short reason, no error and no details (the usual record): nothing to bound
    if verdict.error is None and not verdict.details and (not isinstance(reason, str) or len(reason) <= max_bytes):
        return out
    return _bounded(out, max_bytes)


def _bounded(record: AssertionRecord, max_bytes: int) -> AssertionRecord:
    """``record`` holding at most about ``max_bytes`` (the cell's ``max_response_bytes``), as a target's answer does.

    What a check says comes from user code (a ``python`` check's reason or
    exception, a plugin's details): its reason and error are clipped to the
    limit, saying so, and its details' largest values are dropped until the
    rest fits, named under ``details.clipped`` (small ones — a judge's calls,
    tokens and cost — are kept).
    """
    reason, error = record["reason"], record.get("error")
    if isinstance(reason, str) and len(reason) > max_bytes:
        record["reason"] = clipped(reason, max_bytes) or ""
    if isinstance(error, str) and len(error) > max_bytes:
        record["error"] = clipped(error, max_bytes) or ""
    details = record.get("details")
    if not isinstance(details, dict):
        return record
    size = json_size(details)
    if size <= max_bytes:
        return record
    kept = dict(details)
    sizes = sorted(((json_size(v), k) for k, v in kept.items()), reverse=True)
    dropped: list[str] = []
    for value_size, key in sizes:
        if size <= max_bytes:
            break
        del kept[key]
        dropped.append(key)
        size -= value_size
    kept["clipped"] = too_large(json_size(details), max_bytes, f"left out {', '.join(map(repr, sorted(dropped)))}: the details held")
    record["details"] = kept
    return record


_thread_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


async def _in_thread(fn: AssertionFn, ctx: AssertionContext, kwargs: dict[str, Any], deadline: Deadline) -> Any:
    """``fn(ctx, **kwargs)`` in a daemon thread with the budget left until ``deadline``.

    A daemon thread, not an executor's: a run stopped by Ctrl-C or SIGTERM
    exits without waiting for it (it ends by its budget anyway).
    """
    loop = asyncio.get_running_loop()
    slots = _thread_slots.get(loop)
    if slots is None:
        slots = _thread_slots[loop] = asyncio.Semaphore(MAX_CHECK_THREADS)
    async with slots:
        done: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if done.done():
                return  # the cell was cancelled meanwhile
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def work() -> None:
            result: Any = None
            error: BaseException | None = None
            try:
                with regexes.budget_until(deadline):
                    result = fn(ctx, **kwargs)
            except Exception as exc:  # handed to the cell's task, which reports it
                error = exc
            except BaseException as exc:  # SystemExit and the like: the check's error, not the run's
                error = RuntimeError(described(exc))
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the loop is closed: the run ended meanwhile
                pass

        threading.Thread(target=work, name="evalx-check", daemon=True).start()
        return await done


def cell_status(
    assertions: list[AssertionRecord], *, threshold: float | None = None, target_error: str | None = None
) -> tuple[Status, float | None]:
    """The cell's status and weighted score.

    error: the target broke, or an assertion could not be evaluated;
    fail: a conclusive assertion failed (or the weighted score is under the
    case threshold); skipped: nothing failed but something was inconclusive;
    pass: every assertion passed.
    """
    if target_error is not None:
        return "error", None
    # one pass (sums in the same order as sum() would make them: the same floats)
    conclusive, failed, errored = 0, False, False
    total_w: float = 0
    weighted: float = 0
    for a in assertions:
        if a.get("error"):
            errored = True
        passed = a["passed"]
        if passed is None:
            continue
        conclusive += 1
        weight = a["weight"]
        total_w += weight
        weighted += weight * a["score"]
        if passed is False:
            failed = True
    score = weighted / total_w if total_w else None
    if threshold is not None and conclusive:
        failed = (score or 0.0) < threshold
    if failed:
        return "fail", score
    if errored:
        return "error", score
    if conclusive < len(assertions):
        return "skipped", score
    return "pass", score
