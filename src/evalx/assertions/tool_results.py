"""Declarative checks of what tools returned and which events an engine sent, without Python.

``tool_result`` selects the result of a tool's call (by tool name, and
``call``: ``any``, ``first``, ``last``, ``all``, or ``index`` among that tool's calls),
optionally a value inside it by ``path`` (``a.b[0].c``, the ``json_path``
subset), and checks it with ``equals`` (JSON equality), ``contains`` (a
substring of text, an item of a list, or a JSON subset of an object),
``schema`` (a JSON Schema) and/or ``count`` (the number of items of a list,
keys of an object or characters of a string). ``event_seen`` passes when the
engine sent an event of a ``type`` whose data contains ``fields`` (a JSON
subset), at least ``min`` (default 1; 0 with ``max: 0``) and at most ``max`` times.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from evalx.assertions.deterministic import json_equal, parse_path, walk_path
from evalx.assertions.registry import AssertionContext, assertion
from evalx.assertions.tools import bad_schema, first_difference, schema_error, show_json
from evalx.common.json_types import JSON, JSONObject
from evalx.models import Case, ToolCall, Verdict

_CALL: JSONObject = {"enum": ["any", "first", "last", "all"], "description": "Which calls of the tool: any (default), first, last or all."}
_COUNT: JSONObject = {"type": "integer", "minimum": 0}
_CHECKS = ("equals", "contains", "schema", "count")


def _check_tool_result(spec: Mapping[str, JSON], case: Case) -> str | None:
    if not any(k in spec for k in _CHECKS) and "path" not in spec:
        return "tool_result needs a check: equals, contains, schema, count (or path alone: the path exists)"
    if "schema" in spec:
        bad = bad_schema(spec["schema"])
        if bad:
            return f"schema {bad}"
    path = spec.get("path")
    if isinstance(path, str) and not parse_path(path):
        return f"path {path!r} names nothing (write it like results[0].title)"
    return None


@assertion(
    "tool_result",
    schema={
        "tool": {"type": "string", "minLength": 1, "description": "The tool whose call's result is checked."},
        "call": _CALL,
        "index": {"type": "integer", "minimum": 0, "description": "The call to check among this tool's calls (0: its first)."},
        "path": {"type": "string", "minLength": 1, "description": "A value inside the result: a.b[0].c (a JSON string result is parsed)."},
        "schema": {"type": "object", "description": "A JSON Schema the selected value must validate against."},
        "count": _COUNT,
    },
    check=_check_tool_result,
)
def tool_result(
    ctx: AssertionContext,
    *,
    tool: str,
    call: str = "any",
    index: int | None = None,
    path: str | None = None,
    equals: Any = None,
    contains: Any = None,
    schema: dict[str, Any] | None = None,
    count: int | None = None,
) -> Verdict:
    """The result of a call of ``tool`` (at ``path``) equals, contains, validates against or counts what is given."""
    calls = [(i, c) for i, c in enumerate(ctx.output.tool_calls) if c.name == tool]
    if not calls:
        called = ", ".join(ctx.output.tool_names)
        return Verdict.no(f"{tool} was never called (called [{called}])")
    if index is not None:
        if index >= len(calls):
            return Verdict.no(f"{tool} was called {len(calls)} time(s): no call at index {index}")
        chosen = [calls[index]]
    else:
        chosen = {"first": calls[:1], "last": calls[-1:]}.get(call, calls)
    problems: list[tuple[int, str]] = []
    for at, c in chosen:
        problem = _check_one(c, path, equals, contains, schema, count)
        if problem is None and call != "all":
            return Verdict.ok(f"tool_calls[{at}] ({tool}) result{'.' + path if path else ''} matches")
        if problem is not None:
            problems.append((at, problem))
    if not problems:
        return Verdict.ok(f"the results of all {len(chosen)} calls of {tool} match")
    at, problem = problems[0]
    lead = f"{len(problems)} of {len(chosen)} results of {tool} differ" if call == "all" else f"no result of {tool} matches"
    if len(chosen) == 1:
        lead = f"the result of {tool}"
    score = 1 - len(problems) / len(chosen) if call == "all" else 0.0
    return Verdict.no(f"{lead}: tool_calls[{at}]: {problem}", score)


def _result(call: ToolCall) -> Any:
    """A call's result as JSON values: a string that is a JSON object or list is parsed (tools often return JSON text)."""
    result = call.result
    if isinstance(result, str) and result.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return result


def _check_one(
    call: ToolCall, path: str | None, equals: Any, contains: Any, schema: dict[str, Any] | None, count: int | None
) -> str | None:
    value = _result(call)
    where = "result"
    if call.result is None:
        return "no result was recorded for this call"
    if path:
        found, value, missing_at = walk_path(value, parse_path(path))
        if not found:
            return f"result.{path}: nothing at {missing_at.replace('$', 'result', 1)}"
        where = f"result.{path}"
    if equals is not None and not json_equal(equals, value):
        return f"{where}: expected {show_json(equals)}, got {show_json(value)}"
    if contains is not None:
        problem = _contains(value, contains, where)
        if problem:
            return problem
    if schema is not None:
        problem = schema_error(schema, value)
        if problem:
            return problem.replace("args", where, 1)
    if count is not None:
        if not isinstance(value, (list, dict, str)):
            return f"{where}: cannot count the items of {show_json(value)}"
        if len(value) != count:
            return f"{where}: expected {count} items, got {len(value)}"
    return None


def _contains(value: Any, wanted: Any, where: str) -> str | None:
    if isinstance(value, str) and isinstance(wanted, str):
        return None if wanted in value else f"{where}: {show_json(value)} does not contain {show_json(wanted)}"
    if isinstance(value, list):
        if any(json_equal(wanted, item) or (isinstance(wanted, Mapping) and first_difference(wanted, item, "") is None) for item in value):
            return None
        return f"{where}: no item is {show_json(wanted)}"
    if isinstance(value, Mapping) and isinstance(wanted, Mapping):
        diff = first_difference(wanted, value, where)
        return diff
    return f"{where}: {show_json(value)} cannot contain {show_json(wanted)}"


def _check_event_seen(spec: Mapping[str, JSON], case: Case) -> str | None:
    high = spec.get("max")
    low = spec.get("min", 0 if high == 0 else 1)
    if isinstance(low, int) and isinstance(high, int) and high < low:
        return f"max ({high}) is less than min ({low})"
    return None


@assertion(
    "event_seen",
    schema={
        "event": {"type": "string", "minLength": 1, "description": "The event type (an engine's SSE `event:` or its data's `type`)."},
        "fields": {"type": "object", "description": "A JSON subset the event's data must contain."},
        "min": _COUNT,
        "max": _COUNT,
    },
    check=_check_event_seen,
)
def event_seen(
    ctx: AssertionContext, *, event: str, fields: dict[str, Any] | None = None, min: int | None = None, max: int | None = None
) -> Verdict:
    """The engine sent an event of type ``event`` whose data contains ``fields``, between ``min`` and ``max`` times."""
    if min is None:  # at least once, unless the check is that it never came (max: 0)
        min = 0 if max == 0 else 1
    of_type = [e for e in ctx.output.events if e.get("type") == event]
    matching = [e for e in of_type if fields is None or first_difference(fields, e.get("data"), "data") is None]
    seen = len(matching)
    what = f"{event} event" + (f" with {show_json(fields)}" if fields else "")
    if ctx.output.events_truncated and seen < min:
        return Verdict.inconclusive(f"{what}: seen {seen} times in the events kept (the rest were not stored)")
    if seen < min:
        if of_type and fields:
            first = first_difference(fields, of_type[0].get("data"), "data")
            return Verdict.no(f"{what} seen {seen} times (expected at least {min}); the first {event} event differs: {first}")
        kinds = sorted({str(e.get("type")) for e in ctx.output.events})
        return Verdict.no(f"{what} seen {seen} times (expected at least {min}); events seen: [{', '.join(kinds)}]")
    if max is not None and seen > max:
        return Verdict.no(f"{what} seen {seen} times (expected at most {max})")
    return Verdict.ok(f"{what} seen {seen} times")
