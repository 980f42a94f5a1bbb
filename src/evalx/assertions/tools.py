"""Tool-call assertion types: with what arguments tools were called, whether calls fit the declared tools, and a golden sequence.

``tool_args`` compares one tool's calls with a JSON subset or a JSON Schema;
``tool_calls_valid`` checks every call against the target's ``tools:``;
``trajectory_match`` scores the called tool names against a golden list
(precision, recall and F1, defined in docs/assertions.md).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

from jsonschema import exceptions as schema_errors
from jsonschema import validators

from evalx.assertions.registry import AssertionContext, assertion
from evalx.common.json_types import JSON, JSONObject
from evalx.models import Case, ToolCall, Verdict

_CALLS = ("any", "first", "last", "all")
_MODES = ("exact", "in_order", "any_order", "subset", "superset")


def _arguments(call: ToolCall) -> Any:
    """A call's arguments as JSON values (a JSON string of arguments, as some providers send, is parsed; none is {})."""
    args = call.args
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: 1 == 1.0, but true is not 1; lists element by element; mappings key by key."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _first_difference(expected: Any, actual: Any, path: str) -> str | None:
    """Where ``actual`` stops containing ``expected`` (mappings: a subset, nested; anything else: JSON-equal), or None."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return f"{path}: expected an object, got {_show(actual)}"
        for key, want in expected.items():
            if key not in actual:
                return f"{path}.{key}: expected {_show(want)}, missing"
            diff = _first_difference(want, actual[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if _json_equal(expected, actual):
        return None
    return f"{path}: expected {_show(expected)}, got {_show(actual)}"


def _show(value: Any) -> str:
    """A JSON value for a reason: a string quoted, anything else as JSON, cut to about 80 characters."""
    return _cut(repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))


#: the JSON-subset comparison and the value shown in a reason, for the other assertion modules
#: (main made these the public names themselves since: on merge, keep main's definitions and drop these aliases)
first_difference = _first_difference
show_json = _show


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """The first (most relevant) way ``value`` fails ``schema``, with its path from ``args``, or None."""
    validator = validators.validator_for(schema)(schema)
    error = schema_errors.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "args" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where}: {_cut(error.message, 160)}"


def _bad_schema(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return f"must be a JSON Schema (a mapping), not {type(schema).__name__}"
    try:
        validators.validator_for(schema).check_schema(schema)
    except schema_errors.SchemaError as exc:
        return f"is not a valid JSON Schema: {_cut(exc.message, 160)}"
    return None


def _check_tool_args(spec: Mapping[str, JSON], case: Case) -> str | None:
    if "args" not in spec and "schema" not in spec:
        return "tool_args needs args (a JSON subset of the arguments) or schema (a JSON Schema for them)"
    if "schema" in spec:
        bad = _bad_schema(spec["schema"])
        if bad:
            return f"schema {bad}"
    return None


@assertion(
    "tool_args",
    schema={
        "tool": {"type": "string", "minLength": 1, "description": "The tool whose calls are checked."},
        "args": {"type": "object", "description": "A JSON subset the arguments must contain (nested mappings a subset; lists equal)."},
        "schema": {"type": "object", "description": "A JSON Schema the arguments must validate against (per-field regex: pattern)."},
        "call": {"enum": list(_CALLS), "description": "Which calls of the tool must match: any (default), first, last or all."},
    },
    check=_check_tool_args,
)
def tool_args(
    ctx: AssertionContext,
    *,
    tool: str,
    args: dict[str, Any] | None = None,
    schema: dict[str, Any] | None = None,
    call: Literal["any", "first", "last", "all"] = "any",
) -> Verdict:
    """A call of the tool has arguments containing ``args`` (a JSON subset) and/or valid against ``schema``."""
    calls = [(i, c) for i, c in enumerate(ctx.output.tool_calls) if c.name == tool]
    if not calls:
        return Verdict.no(f"{tool} was never called (called {_names(ctx.output.tool_names)})")
    chosen = {"first": calls[:1], "last": calls[-1:]}.get(call, calls)
    problems: list[tuple[int, str]] = []
    for index, c in chosen:
        value = _arguments(c)
        problem = _first_difference(args, value, "args") if args is not None else None
        if problem is None and schema is not None:
            problem = _schema_error(schema, value)
        if problem is None:
            if call != "all":
                return Verdict.ok(f"tool_calls[{index}] ({tool}) matches")
        else:
            problems.append((index, problem))
    if not problems:
        return Verdict.ok(f"all {len(chosen)} calls of {tool} match")
    index, problem = problems[0]
    which = {"any": f"no call of {tool} matches", "all": f"{len(problems)} of {len(chosen)} calls of {tool} differ"}
    lead = which.get(call, f"the {call} call of {tool} differs")
    score = 1 - len(problems) / len(chosen) if call == "all" else 0.0
    return Verdict.no(f"{lead}: tool_calls[{index}]: {problem}", score)


def _declared(tools: list[JSONObject] | None) -> JSONObject | None:
    """The target's declared tools as ``{name: parameters or None}`` (OpenAI and Anthropic forms too), or None without ``tools:``."""
    if not isinstance(tools, list):
        return None
    out: JSONObject = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, dict):
            tool = function
        name = tool.get("name")
        if isinstance(name, str):
            out[name] = tool.get("parameters", tool.get("input_schema"))
    return out


@assertion("tool_calls_valid")
def tool_calls_valid(ctx: AssertionContext) -> Verdict:
    """Every call names a tool the target declares (``tools:``) with arguments valid against its parameters.

    A target that declares no ``tools:`` makes this inconclusive: there is nothing to check the calls against.
    """
    declared = _declared(ctx.tools)
    if declared is None:
        return Verdict.inconclusive(f"target {ctx.target or '?'} declares no tools: nothing to check the calls against")
    calls = ctx.output.tool_calls
    for index, c in enumerate(calls):
        if c.name not in declared:
            return Verdict.no(f"tool_calls[{index}] calls undeclared tool {c.name!r} (declared: {_names(sorted(declared))})")
        parameters = declared[c.name]
        if isinstance(parameters, Mapping):
            problem = _schema_error(parameters, _arguments(c))
            if problem:
                return Verdict.no(f"tool_calls[{index}] ({c.name}): {problem}")
    return Verdict.ok(f"{len(calls)} call{'s' if len(calls) != 1 else ''} valid against the declared tools")


def _lcs(a: list[str], b: list[str]) -> int:
    """The length of the longest common subsequence of ``a`` and ``b``."""
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], prev + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def match_counts(expected: list[str], called: list[str], mode: str) -> tuple[int, bool]:
    """How many calls match the golden list under ``mode``, and whether the mode's condition holds."""
    if mode == "exact":
        return sum(x == y for x, y in zip(expected, called, strict=False)), called == expected
    if mode == "in_order":
        common = _lcs(expected, called)
        return common, common == len(expected)
    want, got = Counter(expected), Counter(called)
    common = sum((want & got).values())
    holds = {"any_order": want == got, "subset": not (got - want), "superset": not (want - got)}[mode]
    return common, holds


@assertion(
    "trajectory_match",
    schema={
        "tools": {"type": "array", "items": {"type": "string"}, "description": "The golden sequence of tool names."},
        "mode": {"enum": list(_MODES), "description": "exact, in_order (default), any_order, subset or superset."},
        "threshold": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "When given, pass on F1 >= threshold instead of on the mode's condition (partial credit).",
        },
    },
)
def trajectory_match(
    ctx: AssertionContext,
    *,
    tools: list[str],
    mode: Literal["exact", "in_order", "any_order", "subset", "superset"] = "in_order",
    threshold: float | None = None,
) -> Verdict:
    """The called tool names against a golden sequence; the score is the F1 of precision and recall.

    Without ``threshold`` it passes when the mode's condition holds (``in_order``: the golden
    list is a subsequence of the calls, other calls may come between); with one, when the F1
    reaches it (the score then decides, whether the condition holds or not).
    """
    called = ctx.output.tool_names
    common, holds = match_counts(tools, called, mode)
    precision = common / len(called) if called else 1.0
    recall = common / len(tools) if tools else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    details = {"precision": round(precision, 6), "recall": round(recall, 6), "f1": round(f1, 6), "mode": mode}
    shown = f"expected {_names(tools)} ({mode}), called {_names(called)}; f1={f1:.3g}"
    if threshold is None:
        passed = holds
        note = "" if holds else f"; not {mode.replace('_', ' ')}"
    else:
        passed = f1 >= threshold
        note = f" {'>=' if passed else '<'} threshold {threshold:g}"
    return Verdict(passed, round(f1, 6), shown + note, details=details)


def _names(names: list[str]) -> str:
    return "[" + ", ".join(names) + "]"
