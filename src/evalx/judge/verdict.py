"""Reading a judge's reply: a verdict that never breaks and never guesses.

A judge is asked for JSON (``{"pass": bool, "score": 0..1, "reason": "..."}``,
or ``{"category": ..., "reason": ...}`` for factuality). Models wrap JSON in
code fences, put chatter before it, or answer ``PASS: reason`` instead; all
of that is read. What cannot be read raises :class:`JudgeError` carrying the
raw text, so the assertion becomes an ``error`` — never a silent pass or fail.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evalx.errors import JudgeError

__all__ = ["FACTUALITY_CATEGORIES", "parse_category", "parse_verdict"]

#: factuality classes, after promptfoo / OpenAI evals' "fact" grader (A–E)
FACTUALITY_CATEGORIES = ("subset", "superset", "same", "disagrees", "immaterial")

_VERDICT_KEYS = ("pass", "passed", "verdict", "result", "score")
_CATEGORY_KEYS = ("category", "choice", "classification", "answer", "verdict")
_REASON_KEYS = ("reason", "explanation", "reasoning", "rationale", "justification")
_MAX_REASON = 500
#: '{' positions tried when looking for a JSON object in chatter
_MAX_OBJECT_STARTS = 200

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)```", re.S)
# "PASS", "**FAIL** - reason", "Verdict: PASS. reason", "> Final answer: FAIL"
_LINE_VERDICT = re.compile(
    r"^[\s>*#_`\"'\[(-]*(?:(?:final\s+)?(?:verdict|answer|result|grade|decision)[*_\s]*[:=\-][\s*_`\"'\[(]*)?"
    r"(PASS|FAIL)(?:ED|S)?\b[*_`\"'\])]*\s*[:.\-—–,;]?\s*(.*)$",
    re.I | re.M,
)
_ANY_VERDICT = re.compile(r"\b(PASS|FAIL)(?:ED|ES|S)?\b")  # case-sensitive: shouted words only

_TRUE = {"pass", "passed", "true", "yes", "y", "1", "ok", "correct"}
_FALSE = {"fail", "failed", "false", "no", "n", "0", "incorrect"}

_CATEGORY_ALIASES = {
    "a": "subset",
    "subset": "subset",
    "b": "superset",
    "superset": "superset",
    "c": "same",
    "same": "same",
    "agree": "same",
    "agrees": "same",
    "equivalent": "same",
    "d": "disagrees",
    "disagree": "disagrees",
    "disagrees": "disagrees",
    "disagreement": "disagrees",
    "contradicts": "disagrees",
    "e": "immaterial",
    "immaterial": "immaterial",
    "differbutfactual": "immaterial",
    "differs_but_immaterial": "immaterial",
    "differ_but_factual": "immaterial",
}
_CATEGORY_LINE = re.compile(r"^[\s>*#_`\"']*(?:category|choice|classification|answer)\s*[:=\-]\s*[*_`\"'(]*([A-Za-z_]+)", re.I | re.M)
_CATEGORY_WORD = re.compile(r"\b(subset|superset|disagrees|disagree|immaterial)\b", re.I)
_CATEGORY_LETTER = re.compile(r"\(([A-E])\)")


def _clip(text: str, limit: int = _MAX_REASON) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _candidates(text: str) -> list[Any]:
    """JSON values found in ``text``: the whole text, fenced blocks, then each ``{...}`` in order."""
    found: list[Any] = []
    stripped = text.strip()
    for chunk in [stripped, *(m.group(1).strip() for m in _FENCE.finditer(text))]:
        try:
            found.append(json.loads(chunk))
        except ValueError:
            pass
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text) if ch == "{"][:_MAX_OBJECT_STARTS]
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        found.append(value)
    return found


def _find_object(text: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    for value in _candidates(text):
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            if any(k in lowered for k in keys):
                return lowered
    return None


def _reason(obj: dict[str, Any]) -> str:
    for key in _REASON_KEYS:
        value = obj.get(key)
        if value is not None and value != "":
            return _clip(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return ""


def _as_bool(value: Any, raw: str) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise JudgeError(f"the judge's verdict has an unreadable pass value {value!r}", raw=raw)


def _as_score(value: Any, raw: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%")) / (100 if value.strip().endswith("%") else 1)
        except ValueError:
            raise JudgeError(f"the judge's score {value!r} is not a number", raw=raw) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise JudgeError(f"the judge's score {value!r} is not a number", raw=raw)
    if not 0 <= value <= 1:
        raise JudgeError(f"the judge's score {value!r} is outside 0..1", raw=raw)
    return float(value)


def parse_verdict(text: str) -> tuple[bool | None, float | None, str]:
    """``(pass, score, reason)`` from a judge's reply.

    JSON first — ``{"pass": true, "score": 0.9, "reason": "..."}`` anywhere in
    the text (fenced, after chatter); ``pass`` may also be ``"PASS"``/``"FAIL"``
    or come as ``passed``/``verdict``. Then the plain form: a line starting
    with PASS or FAIL, the reason after it. ``pass`` is None when the judge
    gave only a score (the caller applies its threshold); ``score`` is None
    when it gave only pass/fail. Anything else raises :class:`JudgeError`.
    """
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("the judge returned an empty reply", raw=text if isinstance(text, str) else None)
    obj = _find_object(text, _VERDICT_KEYS)
    if obj is not None:
        pass_value = next((obj[k] for k in ("pass", "passed", "verdict", "result") if k in obj), None)
        passed = _as_bool(pass_value, text)
        score = _as_score(obj.get("score"), text)
        if passed is None and score is None:
            raise JudgeError("the judge's JSON verdict has neither 'pass' nor 'score'", raw=text)
        return passed, score, _reason(obj)

    match = _LINE_VERDICT.search(text)
    if match:
        passed = match.group(1).upper() == "PASS"
        reason = match.group(2).strip()
        if not reason:  # the reason on the lines after a bare PASS/FAIL
            reason = text[match.end() :].strip()
        return passed, None, _clip(reason.strip("*_` "))

    shouted = {m.group(1) for m in _ANY_VERDICT.finditer(text)}
    if len(shouted) == 1:
        return shouted.pop() == "PASS", None, _clip(text)
    if len(shouted) > 1:
        raise JudgeError("the judge's reply says both PASS and FAIL", raw=text)
    raise JudgeError('the judge\'s verdict is unreadable (expected JSON {"pass", "score", "reason"} or PASS/FAIL)', raw=text)


def _category(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    key = re.sub(r"[^a-z_]", "", re.sub(r"[\s-]+", "_", value.strip().lower())).strip("_")
    return _CATEGORY_ALIASES.get(key) or _CATEGORY_ALIASES.get(key.replace("_", ""))


def parse_category(text: str) -> tuple[str, str]:
    """``(category, reason)`` from a factuality judge's reply; see :data:`FACTUALITY_CATEGORIES`.

    JSON ``{"category": "subset", "reason": "..."}`` anywhere in the text, or
    a ``Category: superset`` line, or a single ``(A)``..``(E)`` letter, or a
    single category word. Raises :class:`JudgeError` otherwise.
    """
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("the judge returned an empty reply", raw=text if isinstance(text, str) else None)
    obj = _find_object(text, _CATEGORY_KEYS)
    if obj is not None:
        value = next(obj[k] for k in _CATEGORY_KEYS if k in obj)
        category = _category(value)
        if category is None:
            raise JudgeError(f"the judge's category {value!r} is not one of {', '.join(FACTUALITY_CATEGORIES)}", raw=text)
        return category, _reason(obj)
    line = _CATEGORY_LINE.search(text)
    if line and _category(line.group(1)):
        return str(_category(line.group(1))), _clip(text[line.end() :].strip(" .:-—\n") or text)
    letters = {m.group(1) for m in _CATEGORY_LETTER.finditer(text)}
    if len(letters) == 1:
        return str(_category(letters.pop())), _clip(text)
    words = {_category(m.group(1)) for m in _CATEGORY_WORD.finditer(text)}
    if len(words) == 1:
        return str(words.pop()), _clip(text)
    raise JudgeError(
        'the judge\'s factuality verdict is unreadable (expected JSON {"category": ' + "|".join(FACTUALITY_CATEGORIES) + ', "reason"})',
        raw=text,
    )
