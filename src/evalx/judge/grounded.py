"""Grounded and rubric judging: ``faithfulness``, ``answer_relevance``, ``context_recall`` and ``g_eval``.

Each asks the run's judge through :meth:`Judge._decide` (samples, majority,
the response cache, costing) with its prompt from
:data:`evalx.judge.prompts.TEMPLATES` (``judge.prompt`` overrides it, as for
every kind), and reads the reply by the strict rule of
:func:`evalx.judge.verdict.read_verdict`: the last JSON object with ``pass``
or ``score``; the lists asked for (``unsupported`` claims, ``missing``
facts, the judge's ``steps``) are read from that same object, never from
one quoted earlier.

- ``faithfulness``: the judge lists the output's claims the case's
  ``context`` does not support. Without ``threshold`` it passes when that
  list is empty; with one, when the supported fraction (``score``) reaches
  it. A list and a ``pass`` that disagree (``pass: true`` beside unsupported
  claims) is an unreadable reply.
- ``context_recall``: the same, for the facts of the expected answer
  (``value``, default: the case's ``expected``) that the context lacks.
- ``answer_relevance``: a 0..1 score of how fully the output addresses the
  input, against ``threshold`` (default: the judge's).
- ``g_eval``: the judge writes (or follows the given) evaluation steps and
  scores 1..``scale``; the score is normalised, ``(score - 1) / (scale - 1)``,
  and compared with ``threshold`` (default: the judge's). A score that is
  not a whole number in range is an error keeping the raw reply.

A case without the context a check needs is an error naming what is
missing, never a pass (``evalx validate`` reports it before a run).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evalx.assertions.model_graded import missing_context
from evalx.common.json_types import JSON, JSONObject
from evalx.errors import JudgeError
from evalx.judge.prompts import passages
from evalx.judge.verdict import NO_JUDGE, Vote, pass_mark, read_verdict
from evalx.models import Verdict

if TYPE_CHECKING:
    from evalx.judge.judge import Judge, PromptExtras  # which imports this module when a grounded assertion is graded

__all__ = ["CRITERIA", "GROUNDED_KINDS", "grade"]

#: the criterion each kind records (``details``, a Python judge's ``metadata.judge.criterion``)
CRITERIA = {
    "faithfulness": "every claim in the output is supported by the context",
    "answer_relevance": "the output addresses the input",
    "context_recall": "the context holds the facts of the expected answer",
}
GROUNDED_KINDS = (*CRITERIA, "g_eval")
DEFAULT_SCALE = 5
_SHOWN = 5  # claims or facts named in a reason; the details keep them all
_CLIP = 160


async def grade(judge: Judge, ctx: Any, kind: str, params: Mapping[str, object]) -> Verdict:
    """One grounded or rubric check of ``ctx``'s output; see the module docstring.

    ``params``: the assertion's parameters (``threshold``, ``expected``; g_eval's ``criteria``, ``steps``, ``scale``).
    """
    problem = missing_context(kind, ctx.case.context)
    if problem is not None:
        return Verdict(None, 0.0, problem, error=problem)
    if kind == "answer_relevance" and ctx.case.input in (None, ""):
        problem = "answer_relevance grades the output against the case's input, and this case has none"
        return Verdict(None, 0.0, problem, error=problem)
    if not judge.configured(ctx.judge_settings):
        return Verdict.inconclusive(NO_JUDGE)
    context = ctx.case.context
    extra: PromptExtras = {"context": context, "passages": passages(context)}
    threshold = _number(params.get("threshold"))
    if kind == "faithfulness":
        return await _listed(judge, ctx, kind, "unsupported", threshold, extra)
    if kind == "context_recall":
        extra["expected"] = params["expected"]
        return await _listed(judge, ctx, kind, "missing", threshold, extra)
    if kind == "answer_relevance":
        return await _relevance(judge, ctx, threshold, extra)
    if kind == "g_eval":
        return await _g_eval(judge, ctx, params, extra)
    raise JudgeError(f"unknown grounded check {kind!r}")


# ---------------------------------------------------------------- claims and facts


def _number(value: object) -> float | None:
    """A threshold as the assertion gives it (the schema made it a number), or None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _items(obj: JSONObject | None, key: str, raw: str) -> list[str] | None:
    """The list ``key`` of the verdict's JSON object (None when the verdict has none)."""
    if obj is None or obj.get(key) is None:
        return None
    value = obj[key]
    if not isinstance(value, list):
        raise JudgeError(f"the judge's {key!r} is not a list", raw=raw)
    return [item if isinstance(item, str) else _json(item) for item in value]


def _json(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _named(items: list[str]) -> str:
    shown = "; ".join(repr(_clip(item)) for item in items[:_SHOWN])
    return shown + (f" (and {len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"


_WORDS = {
    "unsupported": ("unsupported claim", "unsupported claims", "every claim is supported by the context"),
    "missing": (
        "fact of the expected answer is not in the context",
        "facts of the expected answer are not in the context",
        "the context holds every fact of the expected answer",
    ),
}


async def _listed(judge: Judge, ctx: Any, kind: str, key: str, threshold: float | None, extra: PromptExtras) -> Verdict:
    """faithfulness and context_recall: the judge lists what is wrong; no list item (or the score, with a threshold) passes."""
    readings: dict[str, tuple[bool, list[str] | None]] = {}  # reply -> (its vote, its list)
    one, many, none = _WORDS[key]

    def interpret(text: str) -> Vote:
        passed, score, reason, obj = read_verdict(text)
        items = _items(obj, key, text)
        if items is not None and passed is not None and passed == bool(items):
            said = "pass: true" if passed else "pass: false"
            raise JudgeError(f"the judge's verdict says {said} but lists {len(items)} {many if len(items) != 1 else one}", raw=text)
        if score is None:
            score = 0.0 if passed is False or items else 1.0
        if threshold is not None:
            ok = score >= threshold
        elif items is not None:
            ok = not items
        else:
            ok = passed if passed is not None else score >= 1.0
        readings[text] = (ok, items)
        if items:
            what = f"{len(items)} {one if len(items) == 1 else many}: {_named(items)}"
        elif ok:
            what = none + (f": {reason}" if reason else "")
        else:
            what = reason or f"the judge found {'unsupported claims' if key == 'unsupported' else 'missing facts'}"
        if threshold is not None:
            what = f"{kind} {score:.2f} {'≥' if ok else '<'} {threshold:g}: {what}"
        return Vote(ok, score, what)

    decision = await judge._decide(ctx, kind, CRITERIA[kind], extra, interpret)
    verdict = judge._combine(ctx, [decision], what=kind)
    if verdict.details is not None:
        verdict.details["passages"] = len(extra.get("passages", []))
        listed = [readings[t] for t in decision.raw if t in readings and readings[t][1] is not None]
        agreeing = [items for ok, items in listed if ok == decision.passed]
        if listed:  # the list of a sample that agrees with the outcome, else the first one given
            verdict.details[key] = (agreeing or [items for _, items in listed])[0]
    return verdict


# ---------------------------------------------------------------- relevance and rubric scores


async def _relevance(judge: Judge, ctx: Any, threshold: float | None, extra: PromptExtras) -> Verdict:
    limit = pass_mark(threshold, ctx.judge_settings)

    def interpret(text: str) -> Vote:
        passed, score, reason, _ = read_verdict(text)
        if score is None:  # a bare PASS/FAIL: all or nothing
            score = 1.0 if passed else 0.0
        ok = score >= limit and passed is not False
        return Vote(ok, score, f"relevance {score:.2f} {'≥' if ok else '<'} {limit:g}" + (f": {reason}" if reason else ""))

    decision = await judge._decide(ctx, "answer_relevance", CRITERIA["answer_relevance"], extra, interpret)
    return judge._combine(ctx, [decision], what="answer_relevance")


async def _g_eval(judge: Judge, ctx: Any, params: Mapping[str, object], extra: PromptExtras) -> Verdict:
    given_scale, given_steps = params.get("scale"), params.get("steps")
    scale = given_scale if isinstance(given_scale, int) and given_scale else DEFAULT_SCALE
    limit = pass_mark(_number(params.get("threshold")), ctx.judge_settings)
    steps = [str(s) for s in given_steps] if isinstance(given_steps, list) else []
    criteria = str(params["criteria"])
    written: dict[str, list[str] | None] = {}

    def interpret(text: str) -> Vote:
        _, rating, reason, obj = read_verdict(text, scale=scale)
        if rating is None:
            raise JudgeError(f"the judge gave no score from 1 to {scale}", raw=text)
        written[text] = _items(obj, "steps", text)
        score = (rating - 1) / (scale - 1)
        ok = score >= limit
        return Vote(ok, score, f"score {rating:g}/{scale} ({score:.2f} {'≥' if ok else '<'} {limit:g})" + (f": {reason}" if reason else ""))

    decision = await judge._decide(ctx, "g_eval", criteria, {**extra, "steps": steps, "scale": scale}, interpret)
    verdict = judge._combine(ctx, [decision], what="g_eval")
    if verdict.details is not None and decision.error is None:
        verdict.details["scale"] = scale
        verdict.details["rating"] = round(decision.score * (scale - 1) + 1, 3)
        given = [w for t in decision.raw if (w := written.get(t))]
        followed = steps or (given[0] if given else None)
        if followed:
            verdict.details["steps"] = followed
    return verdict
