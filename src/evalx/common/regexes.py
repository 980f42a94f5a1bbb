"""User regular expressions matched against untrusted text under a time limit (the ``regex`` package).

CPython's ``re`` cannot be interrupted: ``(a|a)+$`` against 30 ``a``s and a
``!`` holds the thread (and the GIL, so every thread) for minutes. The
``regex`` package is ``re``'s syntax with a ``timeout=`` that it checks while
it backtracks, and it is immune to many patterns that are catastrophic for
``re`` (``(a+)+$``, ``(\\w+\\s?)+$``). Every regex a user writes and evalx
applies to a model's or a server's output (the ``regex`` assertion, a JSON
Schema's ``pattern`` and ``patternProperties``, a provider definition's
``errors:`` body patterns) goes through :func:`search`.

How long a match may take is the *scoring budget* of the thread that asks:

- on the event loop, the evaluator sets the cell's budget (its
  :class:`~evalx.common.deadline.Deadline`) with :func:`start_on_loop` around each check; a match may then
  hold the loop for at most :data:`ON_LOOP_SLICE_S` in all, after which
  :class:`NeedsThread` is raised and the check is run again in a thread of
  its own (:func:`evalx.assertions.evaluate.evaluate_one`), where the match
  releases the GIL and may use the rest of the budget;
- anywhere else (a plugin calling :func:`search`, a test), a match may take
  :data:`DEFAULT_TIMEOUT_S`.

A match past its budget raises :class:`RegexTimeout` (worded as every
timeout is: ``timed out after 1s (the regex /…/ on N characters …)``), which
the evaluator reports as that assertion's error: never a pass, and never a
fail a ``not:`` could turn into a pass. (The ``regex`` package counts its
timeout in the process's CPU time: on a loaded machine a match takes longer
in wall time, and the deadline, which the watchdog also reads, is extended
by no one: the error says the time was up.)
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from evalx.common.deadline import Deadline
from evalx.errors import NeedsThread, OutOfTime, RegexTimeout

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ON_LOOP_SLICE_S",
    "NeedsThread",
    "OutOfTime",
    "RegexTimeout",
    "budget",
    "budget_until",
    "checkpoint",
    "compile_user",
    "search",
    "start_on_loop",
    "stop_on_loop",
]

#: how long one match may take outside a cell's scoring budget
DEFAULT_TIMEOUT_S = 1.0
#: how long the matches of one check may hold the event loop before the check moves to a thread
ON_LOOP_SLICE_S = 0.05

# the ``regex`` package (~50 M instructions to import) is loaded by the first pattern compiled: a run whose checks
# match no regex never loads it. Its flags have ``re``'s values.
IGNORECASE, MULTILINE, DOTALL, VERBOSE = int(re.IGNORECASE), int(re.MULTILINE), int(re.DOTALL), int(re.VERBOSE)


def __getattr__(name: str) -> Any:
    """``error``: the ``regex`` package's, what :func:`compile_user` raises for a bad pattern (imported when first asked for)."""
    if name == "error":
        import regex

        return regex.error
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Budget(threading.local):
    deadline: Deadline | None = None  # the cell's: a match past it is out of time
    on_loop = False  # the thread is the event loop's: matches share a short slice, then NeedsThread
    slice_end: float | None = None  # set by the first match on the loop
    floor_s = 0.0  # on the loop: the least time from the first match on


_budget = _Budget()


def start_on_loop(deadline: Deadline, floor_s: float) -> None:
    """Matches on this thread (the event loop's) may run until ``deadline``, until :func:`stop_on_loop`.

    At least ``floor_s`` from the first match on (the deadline is moved, so the
    watchdog, which reads it too, agrees). The cheap form of :func:`budget_until`
    the evaluator uses around each check on the loop (no clock read unless a
    regex runs; no nesting there).
    """
    state = _budget
    state.deadline, state.floor_s, state.on_loop, state.slice_end = deadline, floor_s, True, None


def stop_on_loop() -> None:
    state = _budget
    state.deadline, state.on_loop = None, False


@contextmanager
def budget_until(deadline: Deadline, *, on_loop: bool = False) -> Iterator[None]:
    """Matches on this thread, for the ``with`` block, may run until ``deadline``."""
    state = _budget
    saved = (state.deadline, state.on_loop, state.slice_end)
    state.deadline, state.on_loop, state.slice_end, state.floor_s = deadline, on_loop, None, 0.0
    try:
        yield
    finally:
        state.deadline, state.on_loop, state.slice_end = saved


def budget(seconds: float, *, on_loop: bool) -> Any:
    """Matches on this thread, for the ``with`` block, may take ``seconds`` in all (a deadline of their own)."""
    return budget_until(Deadline(seconds), on_loop=on_loop)


def _name(what: Any) -> str:
    return what if isinstance(what, str) else f"the regex /{what.pattern}/"


def _time_left(what: Any) -> float:
    """Seconds the next piece of work may take (NeedsThread / OutOfTime when there are none).

    ``what`` names the work in the error: a string, or a pattern (named only if needed: this runs per match).
    """
    state = _budget
    deadline = state.deadline
    if deadline is None:
        return DEFAULT_TIMEOUT_S
    now = time.monotonic()
    if state.on_loop:
        if state.slice_end is None:  # the check's first match: its slice of the loop starts now
            state.slice_end = now + ON_LOOP_SLICE_S
            deadline.at_least(state.floor_s)
        left = deadline.when - now
        if state.slice_end - now <= 0 < left:
            raise NeedsThread
        left = min(left, state.slice_end - now)
    else:
        left = deadline.when - now
    if left <= 0:
        raise OutOfTime(deadline.message(_name(what)))
    return left


def checkpoint(what: str = "the check") -> None:
    """Raise when this thread's scoring budget is spent (long-running checks call it as they go)."""
    if _budget.deadline is not None:
        _time_left(what)


@lru_cache(maxsize=1024)
def compile_user(pattern: str, flags: int = 0) -> Any:
    """``pattern`` compiled once (``regex`` with ``re``'s syntax: its VERSION0)."""
    import regex

    return regex.compile(pattern, flags | regex.VERSION0)


def search(pattern: Any, text: str, *, what: str | None = None) -> Any:
    """``pattern.search(text)`` (``pattern`` from :func:`compile_user`) within this thread's budget."""
    state = _budget
    left = _time_left(what or pattern)
    try:
        if state.on_loop:
            return pattern.search(text, timeout=left)
        return pattern.search(text, timeout=left, concurrent=True)  # off the loop: let the loop's thread run meanwhile
    except TimeoutError:
        pass
    deadline = state.deadline
    if state.on_loop and deadline is not None and deadline.when > time.monotonic():
        raise NeedsThread from None
    what = (
        f"the regex /{pattern.pattern}/ on {len(text):,} characters: it backtracks too much, simplify it (no nested quantifiers like (a+)+)"
    )
    if deadline is not None:
        raise RegexTimeout(deadline.message(what)) from None
    raise RegexTimeout(
        f"the regex /{pattern.pattern}/ ran past {DEFAULT_TIMEOUT_S:g}s on {len(text):,} characters (it backtracks too much: simplify it, e.g. no nested quantifiers like (a+)+)"
    ) from None
