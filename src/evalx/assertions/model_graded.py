"""Model-graded assertion types: a judge model decides.

The judging itself lives in :mod:`evalx.judge.judge` (one client per run, passed
in as ``ctx.judge``; the grounded and rubric types in :mod:`evalx.judge.grounded`). Without a judge each type is inconclusive (``passed``
None, reason "no judge configured"), which makes the cell ``skipped`` rather
than failed. A judge that cannot be reached or read makes the assertion an
error, never a pass or a fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from evalx.assertions.deterministic import value_or_expected
from evalx.assertions.registry import AssertionContext, assertion
from evalx.assertions.static import needs_one_of, needs_value
from evalx.common.json_types import JSON, JSONObject
from evalx.models import Case, Verdict

_UNIT: JSONObject = {"type": "number", "minimum": 0, "maximum": 1}
NO_JUDGE = "no judge configured"
#: the types that grade the output against the case's ``context``
NEEDS_CONTEXT = ("faithfulness", "context_recall")


def missing_context(kind: str, context: Any) -> str | None:
    """Why ``kind`` cannot grade a case with this ``context`` (None when it can): the one wording, at load and at run time."""
    if kind not in NEEDS_CONTEXT:
        return None
    if isinstance(context, str) and context.strip():
        return None
    if isinstance(context, list) and any(str(p).strip() for p in context):
        return None
    what = "none" if context is None else "an empty one"
    return f"needs the case's context (context: or context_file:) to check the output against; the case has {what}"


def _needs_context(spec: Mapping[str, JSON], case: Case) -> str | None:
    problem = missing_context(str(spec.get("type")), case.context)
    if problem is None and spec.get("type") == "context_recall":
        return needs_value()(spec, case)
    return problem


@assertion("faithfulness", model_graded=True, schema={"threshold": _UNIT}, check=_needs_context)
async def faithfulness(ctx: AssertionContext, *, threshold: float | None = None) -> Verdict:
    """Every claim in the output is supported by the case's context: the judge lists the unsupported claims (with threshold: the supported fraction reaches it)."""
    return await _grounded(ctx, "faithfulness", {"threshold": threshold})


@assertion("answer_relevance", model_graded=True, schema={"threshold": _UNIT})
async def answer_relevance(ctx: AssertionContext, *, threshold: float | None = None) -> Verdict:
    """The output addresses the case's input: a judge's 0-1 relevance score reaches threshold (default: the judge's)."""
    return await _grounded(ctx, "answer_relevance", {"threshold": threshold})


@assertion("context_recall", model_graded=True, schema={"threshold": _UNIT}, check=_needs_context)
async def context_recall(ctx: AssertionContext, *, value: Any = None, threshold: float | None = None) -> Verdict:
    """The facts of the expected answer (value, default: the case's expected) are in the case's context: the judge lists the missing ones."""
    expected = value_or_expected(ctx, value)
    return await _grounded(ctx, "context_recall", {"threshold": threshold, "expected": expected})


@assertion(
    "g_eval",
    model_graded=True,
    schema={
        "criteria": {"type": "string", "minLength": 1, "description": "What the output is graded on."},
        "steps": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "description": "Evaluation steps for the judge to follow (default: the judge writes its own).",
        },
        "scale": {"type": "integer", "minimum": 2, "maximum": 100, "default": 5, "description": "Scores run from 1 to this."},
        "threshold": {**_UNIT, "description": "Pass mark for the normalised score (score - 1) / (scale - 1); default: the judge's."},
    },
)
async def g_eval(
    ctx: AssertionContext, *, criteria: str, steps: list[str] | None = None, scale: int = 5, threshold: float | None = None
) -> Verdict:
    """G-Eval: the judge writes its evaluation steps (or follows the given ones) and scores 1..scale; the normalised score is thresholded."""
    return await _grounded(ctx, "g_eval", {"criteria": criteria, "steps": steps, "scale": scale, "threshold": threshold})


async def _grounded(ctx: AssertionContext, kind: str, params: dict[str, Any]) -> Verdict:
    problem = missing_context(kind, ctx.case.context)
    if problem is not None:  # a config mistake: an error, never a pass (nor an inconclusive "no judge")
        return Verdict(None, 0.0, problem, error=problem)
    if ctx.judge is None:
        return Verdict.inconclusive(NO_JUDGE)
    verdict: Verdict = await ctx.judge.grounded(ctx, kind, params)
    return verdict


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


@assertion("pairwise", model_graded=True)
async def pairwise(ctx: AssertionContext, *, rubric: str | None = None) -> Verdict:
    """Across a run's targets: a judge picks the better of two targets' outputs for the case, asked in both orders (disagreeing answers are a tie).

    Judged after the cells ran (:mod:`evalx.execution.pairwise_pass`), never with a
    cell, and it never changes a cell's status; the run's summary reports each
    pair's wins, ties and how often the longer answer won.
    """
    return Verdict.inconclusive("pairwise is judged across targets after the cells run")
