"""Trajectory and budget assertion types: which tools an agent called, and what it cost.

A budget the target did not report (no token usage, no price, no latency)
is inconclusive rather than a pass: an unmeasured budget was not kept.
"""

from __future__ import annotations

from typing import Literal

from evalx.assertions.deterministic import short
from evalx.assertions.registry import AssertionContext, assertion
from evalx.common.json_types import JSONObject
from evalx.models import Verdict, is_truncated

_COUNT: JSONObject = {"type": "integer", "minimum": 0}
_AMOUNT: JSONObject = {"type": "number", "minimum": 0}


def _names(names: list[str]) -> str:
    return "[" + ", ".join(names) + "]"


@assertion("must_call_tools")
def must_call_tools(ctx: AssertionContext, *, tools: list[str]) -> Verdict:
    """Every listed tool was called at least once; the score is the fraction called."""
    called = set(ctx.output.tool_names)
    missing = [t for t in tools if t not in called]
    if not missing:
        return Verdict.ok(f"called {', '.join(tools)}")
    score = 1 - len(missing) / len(tools)
    return Verdict.no("; ".join(f"missing required tool call: {t}" for t in missing), score)


@assertion("must_not_call_tools")
def must_not_call_tools(ctx: AssertionContext, *, tools: list[str]) -> Verdict:
    """None of the listed tools was called."""
    called = set(ctx.output.tool_names)
    forbidden = [t for t in tools if t in called]
    if not forbidden:
        return Verdict.ok(f"called none of {', '.join(tools)}")
    return Verdict.no("; ".join(f"forbidden tool called: {t}" for t in forbidden))


@assertion("tool_order")
def tool_order(ctx: AssertionContext, *, tools: list[str], exact: bool = False) -> Verdict:
    """The tools were called in this order (other calls may come between, unless exact)."""
    called = ctx.output.tool_names
    if exact:
        ok = called == tools
    else:
        remaining = iter(called)
        ok = all(t in remaining for t in tools)  # `in` consumes the iterator: a subsequence test
    what = "exactly" if exact else "in order"
    if ok:
        return Verdict.ok(f"called {what} {_names(tools)}")
    return Verdict.no(f"expected {what} {_names(tools)}, called {_names(called)}")


@assertion("max_tool_calls", schema={"value": _COUNT})
def max_tool_calls(ctx: AssertionContext, *, value: int) -> Verdict:
    """At most this many tool calls."""
    return _at_most("tool_calls", len(ctx.output.tool_calls), value)


@assertion("max_iterations", schema={"value": _COUNT})
def max_iterations(ctx: AssertionContext, *, value: int) -> Verdict:
    """At most this many agent iterations (inconclusive if the target does not report them)."""
    if ctx.output.iterations is None:
        return Verdict.inconclusive("the target reported no iteration count")
    return _at_most("iterations", ctx.output.iterations, value)


@assertion("completed")
def completed(ctx: AssertionContext) -> Verdict:
    """The target finished without an error and produced text or at least one tool call."""
    out = ctx.output
    if out.error:
        return Verdict.no(f"target error: {short(out.error)}")
    if not out.text.strip() and not out.tool_calls:
        return Verdict.no("empty output and no tool calls")
    return Verdict.ok("completed")


@assertion("not_truncated")
def not_truncated(ctx: AssertionContext) -> Verdict:
    """The target did not report the answer as cut off at the token limit (stop reason ``length``, ``max_tokens``...).

    A target that reports no stop reason (a Python callable, most engines) passes:
    this fails what is known to be cut off, so it can sit in the global ``assert:``.
    """
    stop = ctx.output.stop_reason
    if stop is None:
        return Verdict.ok("no stop reason reported")
    if is_truncated(stop):
        return Verdict.no(f"the answer was cut off at the token limit (stop reason {stop!r})")
    return Verdict.ok(f"stop reason {stop!r}")


@assertion("max_tokens", schema={"value": _COUNT})
def max_tokens(ctx: AssertionContext, *, value: int, count: Literal["output", "total", "input"] = "output") -> Verdict:
    """At most this many output (or input, or total) tokens."""
    return _token_budget(ctx, value, count)


@assertion("max_input_tokens", schema={"value": _COUNT})
def max_input_tokens(ctx: AssertionContext, *, value: int) -> Verdict:
    """At most this many input tokens."""
    return _token_budget(ctx, value, "input")


def _token_budget(ctx: AssertionContext, value: int, count: str) -> Verdict:
    usage = ctx.output.usage
    if usage.input_tokens == 0 and usage.output_tokens == 0:
        return Verdict.inconclusive("the target reported no token usage")
    used = {
        "output": usage.output_tokens,
        "input": usage.input_tokens,
        "total": usage.input_tokens + usage.output_tokens,
    }[count]
    return _at_most(f"{count}_tokens", used, value)


@assertion("max_cost", schema={"value": _AMOUNT})
def max_cost(ctx: AssertionContext, *, value: float) -> Verdict:
    """The cell cost at most this many US dollars (inconclusive when the price is unknown)."""
    if ctx.output.cost_usd is None:
        return Verdict.inconclusive("cost unknown: no price for this target's model")
    return _at_most("cost_usd", ctx.output.cost_usd, value)


@assertion("max_latency_ms", schema={"value": _AMOUNT})
def max_latency_ms(ctx: AssertionContext, *, value: float) -> Verdict:
    """The target answered within this many milliseconds."""
    if ctx.output.latency_ms is None:
        return Verdict.inconclusive("latency was not measured")
    return _at_most("latency_ms", ctx.output.latency_ms, value)


def _at_most(label: str, seen: float, limit: float) -> Verdict:
    if seen <= limit:
        return Verdict.ok(f"{label}={_num(seen)} <= {_num(limit)}")
    return Verdict.no(f"{label}={_num(seen)} > {_num(limit)}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"
