"""Model-graded assertion types: a judge model decides.

The judging itself lives in :mod:`evalx.judge.judge` (one client per run, passed
in as ``ctx.judge``). Without a judge each type is inconclusive (``passed``
None, reason "no judge configured"), which makes the cell ``skipped`` rather
than failed. A judge that cannot be reached or read makes the assertion an
error, never a pass or a fail.
"""

from __future__ import annotations

from typing import Any, Literal

from evalx.assertions.deterministic import value_or_expected
from evalx.assertions.registry import AssertionContext, assertion
from evalx.assertions.static import needs_one_of, needs_value
from evalx.models import Verdict

_UNIT: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 1}
NO_JUDGE = "no judge configured"


@assertion("llm_judge", model_graded=True, schema={"threshold": _UNIT}, check=needs_one_of("rubric", "characteristics"))
async def llm_judge(
    ctx: AssertionContext,
    *,
    rubric: str | None = None,
    characteristics: list[str] | None = None,
    threshold: float | None = None,
) -> Verdict:
    """A judge model grades the output against a rubric or a list of characteristics (each graded on its own)."""
    if rubric is None and not characteristics:
        raise ValueError("llm_judge needs a 'rubric' or 'characteristics'")
    if ctx.judge is None:
        return Verdict.inconclusive(NO_JUDGE)
    verdict: Verdict = await ctx.judge.llm_judge(ctx, rubric=rubric, characteristics=characteristics, threshold=threshold)
    return verdict


@assertion("semantic_similar", model_graded=True, schema={"threshold": _UNIT}, check=needs_value())
async def semantic_similar(
    ctx: AssertionContext,
    *,
    value: Any = None,
    threshold: float | None = None,
    embedding: str | None = None,
) -> Verdict:
    """The output means the same as the value (default: the case's expected): a judge's 0-1 score, or embeddings' cosine."""
    expected = value_or_expected(ctx, value)
    if ctx.judge is None:
        return Verdict.inconclusive(NO_JUDGE)
    verdict: Verdict = await ctx.judge.semantic_similar(ctx, expected=expected, threshold=threshold, embedding=embedding)
    return verdict


@assertion("factuality", model_graded=True)
async def factuality(
    ctx: AssertionContext,
    *,
    value: Any = None,
    pass_on: list[Literal["subset", "superset", "same", "disagrees", "immaterial"]] | None = None,
) -> Verdict:
    """A judge compares the output's facts with the value (default: the case's expected): subset, superset, same, disagrees or immaterial."""
    expected = value_or_expected(ctx, value)
    if ctx.judge is None:
        return Verdict.inconclusive(NO_JUDGE)
    verdict: Verdict = await ctx.judge.factuality(ctx, expected=expected, pass_on=list(pass_on) if pass_on is not None else None)
    return verdict
