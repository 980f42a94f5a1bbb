"""Checks of a traced cell's spans (docs/tracing.md): ``trace_span``, ``trace_duration``, ``trace_errors``.

``trace_span`` passes when spans matching ``span_name`` (or ``span_name_regex``,
a search) and ``attributes`` (a JSON subset of the span's attributes) number
``count`` exactly, or between ``min`` (default 1) and ``max``.
``trace_duration`` passes when every matching span lasted at most
``max_ms`` — or, with neither ``span_name`` nor ``span_name_regex``, the whole trace
(first start to last end). ``trace_errors`` passes when at most ``max``
(default 0) spans have error status. Without ``tracing: {receive: true}``
(or ``evalx run --trace``) each is a validate error, never a pass; on a cell
that has no trace (its answer came from the response cache) inconclusive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalx.assertions.registry import AssertionContext, assertion
from evalx.assertions.tools import first_difference, show_json
from evalx.common import regexes, trace_context
from evalx.common.json_types import JSON, JSONObject
from evalx.models import Case, Verdict
from evalx.tracing.spans import StoredSpan

__all__ = ["NEEDS_TRACING", "needs_tracing"]

#: the assertion types that read spans: a config without tracing cannot use them
NEEDS_TRACING = frozenset({"trace_span", "trace_duration", "trace_errors"})

_NOT_TRACED = "needs tracing: add `tracing: {receive: true}` to the config (or run with --trace)"
_NAME: JSONObject = {"type": "string", "minLength": 1, "description": "The span's name, exactly."}
_NAME_REGEX: JSONObject = {"type": "string", "minLength": 1, "description": "A regex searched in the span's name."}
_ATTRIBUTES: JSONObject = {"type": "object", "description": "A JSON subset of the span's attributes (e.g. {gen_ai.tool.name: search})."}
_COUNT: JSONObject = {"type": "integer", "minimum": 0}
#: spans named in a failure's reason
_SHOWN = 5


def needs_tracing() -> str | None:
    """Why a trace check cannot be used in the config being loaded, or None when the run receives traces."""
    return None if trace_context.RECEIVING.get() else _NOT_TRACED


def _check_selector(spec: Mapping[str, JSON], case: Case) -> str | None:
    if not trace_context.RECEIVING.get():
        return _NOT_TRACED
    if "span_name" in spec and "span_name_regex" in spec:
        return "give one of span_name and span_name_regex"
    pattern = spec.get("span_name_regex")
    if isinstance(pattern, str):
        try:
            regexes.compile_user(pattern)
        except regexes.error as exc:
            return f"span_name_regex {pattern!r} does not compile: {exc}"
    return None


def _check_trace_span(spec: Mapping[str, JSON], case: Case) -> str | None:
    problem = _check_selector(spec, case)
    if problem is None and "count" in spec and ("min" in spec or "max" in spec):
        return "give count, or min and/or max, not both"
    lo, hi = spec.get("min"), spec.get("max")
    if problem is None and isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        return f"min {lo} is more than max {hi}"
    return problem


def _check_needs_tracing(spec: Mapping[str, JSON], case: Case) -> str | None:
    return needs_tracing()


def _spans(ctx: AssertionContext) -> list[StoredSpan] | Verdict:
    if ctx.spans is None:
        if ctx.traced:
            return Verdict.inconclusive("this cell has no trace (its answer came from the response cache: run with --no-cache)")
        return Verdict(None, 0.0, _NOT_TRACED, error=_NOT_TRACED)
    return ctx.spans


def _matching(spans: list[StoredSpan], name: str | None, name_regex: str | None, attributes: JSONObject | None) -> list[StoredSpan]:
    pattern = regexes.compile_user(name_regex) if name_regex else None
    out = []
    for span in spans:
        if name is not None and span["name"] != name:
            continue
        if pattern is not None and regexes.search(pattern, span["name"]) is None:
            continue
        if attributes and first_difference(attributes, span["attributes"], "attributes") is not None:
            continue
        out.append(span)
    return out


def _what(name: str | None, name_regex: str | None, attributes: JSONObject | None) -> str:
    what = f"span {name!r}" if name else f"span /{name_regex}/" if name_regex else "span"
    return what + (f" with {show_json(attributes)}" if attributes else "")


def _names(spans: list[StoredSpan]) -> str:
    names = sorted({s["name"] for s in spans})
    shown = ", ".join(names[:_SHOWN]) + (f", … {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
    return f"[{shown}]"


@assertion(
    "trace_span",
    schema={"span_name": _NAME, "span_name_regex": _NAME_REGEX, "attributes": _ATTRIBUTES, "count": _COUNT, "min": _COUNT, "max": _COUNT},
    check=_check_trace_span,
)
def trace_span(
    ctx: AssertionContext,
    *,
    span_name: str | None = None,
    span_name_regex: str | None = None,
    attributes: dict[str, Any] | None = None,
    count: int | None = None,
    min: int | None = None,
    max: int | None = None,
) -> Verdict:
    """Spans matching ``span_name``/``span_name_regex`` and ``attributes`` number ``count``, or between ``min`` (default 1) and ``max``."""
    spans = _spans(ctx)
    if isinstance(spans, Verdict):
        return spans
    name, name_regex = span_name, span_name_regex
    matching = _matching(spans, name, name_regex, attributes)
    seen = len(matching)
    what = _what(name, name_regex, attributes)
    hi: int | None
    if count is not None:
        lo, hi = count, count
    else:
        lo = (0 if max == 0 else 1) if min is None else min
        hi = max
    if seen < lo or (hi is not None and seen > hi):
        expected = f"exactly {lo}" if lo == hi else f"at least {lo}" if seen < lo else f"at most {hi}"
        detail = f"; spans seen: {_names(spans)}" if seen < lo else f"; e.g. {matching[0]['name']!r} ({matching[0]['span_id']})"
        if seen < lo and attributes and name is not None:
            same_name = [s for s in spans if s["name"] == name]
            if same_name:
                detail = f"; the first {name!r} span differs: {first_difference(attributes, same_name[0]['attributes'], 'attributes')}"
        return Verdict.no(f"{what}: {seen} found (expected {expected}){detail}")
    first = f": {matching[0]['name']!r} ({matching[0]['span_id']})" if matching else ""
    return Verdict.ok(f"{what}: {seen} found{first}")


@assertion(
    "trace_duration",
    schema={
        "max_ms": {"type": "number", "minimum": 0, "description": "The longest a matching span (or the whole trace) may last, in ms."},
        "span_name": _NAME,
        "span_name_regex": _NAME_REGEX,
        "attributes": _ATTRIBUTES,
    },
    check=_check_selector,
)
def trace_duration(
    ctx: AssertionContext,
    *,
    max_ms: float,
    span_name: str | None = None,
    span_name_regex: str | None = None,
    attributes: dict[str, Any] | None = None,
) -> Verdict:
    """Every matching span lasted at most ``max_ms``; with no selector, the whole trace (first start to last end)."""
    spans = _spans(ctx)
    if isinstance(spans, Verdict):
        return spans
    name, name_regex = span_name, span_name_regex
    if name is None and name_regex is None and not attributes:
        if not spans:
            return Verdict.no("the trace has no spans")
        start = min(s["start_unix_nano"] for s in spans)
        end = max(s["end_unix_nano"] for s in spans)
        took = (end - start) / 1e6
        verdict = Verdict.ok if took <= max_ms else Verdict.no
        return verdict(f"the trace took {took:.1f} ms ({len(spans)} spans; at most {max_ms:g} ms)")
    what = _what(name, name_regex, attributes)
    matching = _matching(spans, name, name_regex, attributes)
    if not matching:
        return Verdict.no(f"no {what}; spans seen: {_names(spans)}")
    slow = [s for s in matching if s["duration_ms"] > max_ms]
    if slow:
        worst = max(slow, key=lambda s: s["duration_ms"])
        return Verdict.no(
            f"{len(slow)} of {len(matching)} {what}s took over {max_ms:g} ms: {worst['name']!r} ({worst['span_id']}) took {worst['duration_ms']:.1f} ms"
        )
    longest = max(s["duration_ms"] for s in matching)
    return Verdict.ok(f"{len(matching)} {what}s, the longest {longest:.1f} ms (at most {max_ms:g} ms)")


@assertion(
    "trace_errors", schema={"max": {**_COUNT, "description": "Spans with error status allowed (default 0)."}}, check=_check_needs_tracing
)
def trace_errors(ctx: AssertionContext, *, max: int = 0) -> Verdict:
    """At most ``max`` (default 0) spans of the cell's trace have error status."""
    spans = _spans(ctx)
    if isinstance(spans, Verdict):
        return spans
    errors = [s for s in spans if s["status"] == "error"]
    if len(errors) <= max:
        return Verdict.ok(f"{len(errors)} span(s) with error status of {len(spans)} (at most {max})")
    first = errors[0]
    message = f": {first['status_message']}" if first["status_message"] else ""
    return Verdict.no(f"{len(errors)} span(s) with error status (at most {max}): {first['name']!r} ({first['span_id']}){message}")
