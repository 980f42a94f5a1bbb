"""Model-graded assertion types: a judge model decides.

Without a judge configured each is inconclusive (``passed`` None), which
makes the cell ``skipped`` rather than failed. Judging itself is not
implemented yet; these register the types and their config schema.
"""

from __future__ import annotations

from typing import Any, Literal

from .._models import Verdict
from ._registry import AssertionContext, assertion
from .deterministic import value_or_expected

_UNIT: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 1}
_NOT_IMPLEMENTED = "judge not implemented yet"


def _no_judge(ctx: AssertionContext) -> Verdict:
    if ctx.judge is None:
        return Verdict.inconclusive("no judge configured")
    return Verdict.inconclusive(_NOT_IMPLEMENTED)


@assertion("llm_judge", model_graded=True, schema={"threshold": _UNIT})
async def llm_judge(
    ctx: AssertionContext,
    *,
    rubric: str | None = None,
    characteristics: list[str] | None = None,
    threshold: float | None = None,
) -> Verdict:
    """A judge model grades the output against a rubric or a list of characteristics."""
    if rubric is None and not characteristics:
        raise ValueError("llm_judge needs a 'rubric' or 'characteristics'")
    return _no_judge(ctx)


@assertion("semantic_similar", model_graded=True, schema={"threshold": _UNIT})
async def semantic_similar(
    ctx: AssertionContext,
    *,
    value: Any = None,
    threshold: float | None = None,
    embedding: str | None = None,
) -> Verdict:
    """The output means the same as the value (default: the case's expected)."""
    value_or_expected(ctx, value)
    return _no_judge(ctx)


@assertion("factuality", model_graded=True)
async def factuality(
    ctx: AssertionContext,
    *,
    value: Any = None,
    pass_on: list[Literal["subset", "superset", "same", "disagrees"]] | None = None,
) -> Verdict:
    """A judge compares the output's facts with the value (default: the case's expected)."""
    value_or_expected(ctx, value)
    return _no_judge(ctx)
