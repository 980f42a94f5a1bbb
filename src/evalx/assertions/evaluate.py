"""Run a case's assertions over a trajectory and decide the cell's status."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from evalx.assertions.registry import COMMON_KEYS, AssertionContext, get_assertion
from evalx.models import Verdict

if TYPE_CHECKING:  # types only: `import evalx` (the CLI's startup) must not pay for the results model
    from evalx.results.model import AssertionRecord, Status


#: spec keys that are not arguments of the assertion's function
_NOT_ARGUMENTS = frozenset({*COMMON_KEYS, "judge"})


async def evaluate_case(asserts: list[dict[str, Any]], ctx: AssertionContext) -> list[AssertionRecord]:
    """Evaluate every assertion in order; one that breaks is an assertion error, never a crash."""
    return [await evaluate_one(spec, ctx) for spec in asserts]


async def evaluate_one(spec: dict[str, Any], ctx: AssertionContext) -> AssertionRecord:
    kind = spec["type"]
    atype = get_assertion(kind)
    weight = float(spec.get("weight", 1.0))
    negate = bool(spec.get("not", False))
    if atype is None:  # validation catches this; be safe at run time too
        verdict = Verdict(None, 0.0, f"unknown assertion type {kind!r}", error=f"unknown assertion type {kind!r}")
    else:
        names = atype.arg_names
        kwargs = {names.get(k, k): v for k, v in spec.items() if k not in _NOT_ARGUMENTS}
        sub_ctx = ctx
        if "judge" in spec:
            sub_ctx = AssertionContext(
                case=ctx.case,
                output=ctx.output,
                config_dir=ctx.config_dir,
                judge=ctx.judge,
                judge_settings={**ctx.judge_settings, **spec["judge"]},
                target=ctx.target,
            )
        try:
            res = atype.fn(sub_ctx, **kwargs)
            if not isinstance(res, Verdict) and inspect.isawaitable(res):  # a Verdict: skip the slower check
                res = await res
            verdict = res
        except Exception as exc:  # an assertion that breaks is reported, not raised
            msg = f"{type(exc).__name__}: {exc}"
            verdict = Verdict(None, 0.0, f"assertion raised {msg}", error=msg)
    if negate and verdict.error is None and verdict.passed is not None:
        verdict = Verdict(
            not verdict.passed,
            1.0 - verdict.score,
            f"not: {verdict.reason}" if verdict.reason else "not",
            details=verdict.details,
        )
    out: AssertionRecord = {
        "type": kind,
        "name": spec.get("name"),
        "passed": verdict.passed,
        "score": round(float(verdict.score), 6),
        "reason": verdict.reason,
        "weight": weight,
    }
    if negate:
        out["not"] = True
    if verdict.error is not None:
        out["error"] = verdict.error
    if verdict.details:
        out["details"] = verdict.details
    return out


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
    conclusive = [a for a in assertions if a["passed"] is not None]
    total_w = sum(a["weight"] for a in conclusive)
    score = (sum(a["weight"] * a["score"] for a in conclusive) / total_w) if total_w else None
    failed = any(a["passed"] is False for a in conclusive)
    if threshold is not None and conclusive:
        failed = (score or 0.0) < threshold
    if failed:
        return "fail", score
    if any(a.get("error") for a in assertions):
        return "error", score
    if len(conclusive) < len(assertions):
        return "skipped", score
    return "pass", score
