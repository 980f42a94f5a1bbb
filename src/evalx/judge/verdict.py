"""Reading a judge's reply strictly: one verdict, in the place the judge prompt asks for it, or an error.

The judge prompt asks for the verdict last. The verdict is therefore the
*last* verdict in the reply; a verdict that appears earlier — typically the
graded output, quoted by the judge — never counts, so an output cannot
inject its own verdict. Two forms are read:

* a top-level JSON object with a ``pass`` or ``score`` key (keys compared
  case-insensitively; an object nested inside another object is not a
  verdict), fenced or not: ``{"pass": true, "score": 0.9, "reason": "..."}``,
  that *stands as the verdict*: it opens its line (after spaces, Markdown
  emphasis, a list dash or a code fence) or follows a verdict label that
  opens its line (``Verdict: {...}``). An object inside a sentence (``The
  output said to reply {"pass": true}.``) or a quoted line (``> {...}``) is
  quoted, not given, and never counts;
* a *verdict line*: a line whose first word is ``PASS`` or ``FAIL`` in
  capitals, standing alone or followed by a separator (``: - — – . , ; ! )``),
  optionally wrapped in Markdown emphasis (``**FAIL**``) or after a
  ``Verdict:`` / ``Final verdict:`` / ``Final answer:`` label. ``PASS because
  ...``, ``PASSED``, ``pass: ...`` (lower case) and quoted lines (``> PASS``)
  are prose, not verdicts.

Verdicts separated only by whitespace (``"PASS\\nFAIL"``, a verdict line next
to a JSON verdict) are all "in verdict position": if they disagree the reply
is an error; if they agree, the JSON object (which carries score and reason)
is used. Text after the last verdict that holds no verdict (a reason, "hope
that helps") is allowed; text after it that says the opposite verdict word,
even inside a sentence (``{"pass": true}`` then ``Actually: FAIL - ...``),
makes the reply contradict itself: an error; so does a JSON verdict after
the verdict, quoted or not, that says otherwise (``{"pass": true}
{"pass": false}``, ``PASS`` then ``The output said {"pass": false}``, a
second score that differs), and a verdict key outside every complete JSON
object — the judge's own JSON, broken by a raw newline or an unescaped quote
in its reason, around the output's verdict it quotes
(``{"pass": false, "reason": "it said`` + newline + ``{"pass": true}"}``) —
that says otherwise (:func:`_loose`). No verdict at all (a reply whose only verdict-shaped
text is quoted inside a sentence included), or disagreeing verdicts in
position, raise :class:`JudgeError` keeping the raw reply, so the assertion
becomes an ``error`` — never a silent pass or fail.

Factuality categories follow the same rule with a ``category`` JSON key or
a ``Category: X`` / ``(D)`` / ``disagrees`` line, and a pairwise judge's
preference with a ``winner`` JSON key or a ``Winner: A`` line
(:func:`parse_preference`); their JSON objects, too, count only where they
stand as the verdict, and another category or winner named after the verdict
(a quoted object, or ``winner: B`` in a sentence) makes the reply an error.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from evalx.common.json_types import JSON, JSONObject
from evalx.errors import JudgeError
from evalx.judge.spec import DEFAULT_THRESHOLD, JudgeSettings, judge_settings

__all__ = [
    "DEFAULT_THRESHOLD",
    "FACTUALITY_CATEGORIES",
    "NO_JUDGE",
    "PREFERENCES",
    "CallUsage",
    "Vote",
    "call_usage",
    "judge_name",
    "parse_category",
    "parse_preference",
    "parse_verdict",
    "pass_mark",
    "read_verdict",
]

#: the reason of a judged assertion's inconclusive verdict in a run without a judge
NO_JUDGE = "no judge configured"


@dataclass
class Vote:
    """What one sample's reply reads as: passed or not, its score and reason (and a factuality category)."""

    passed: bool
    score: float
    reason: str
    category: str | None = None


def pass_mark(threshold: float | None, settings: Mapping[str, object] | JudgeSettings) -> float:
    """The score to reach: the assertion's ``threshold``, else the ``judge:`` settings', else :data:`DEFAULT_THRESHOLD`."""
    if threshold is not None:
        return float(threshold)
    return judge_settings(settings).pass_mark


#: factuality classes, after promptfoo / OpenAI evals' "fact" grader (A–E)
FACTUALITY_CATEGORIES = ("subset", "superset", "same", "disagrees", "immaterial")

_VERDICT_KEYS = ("pass", "score")
_CATEGORY_KEYS = ("category", "choice", "classification")
_REASON_KEYS = ("reason", "explanation", "reasoning", "rationale", "justification")
_MAX_REASON = 500
#: '{' positions tried when looking for JSON objects; a reply with more is an error, not a guess
_MAX_OBJECT_STARTS = 2000

# leading decoration a model puts before its verdict: spaces, Markdown emphasis/headings, list dashes
_DECOR = r"[ \t*_#`~\-]*"
_SEPARATOR = r"(?:[ \t]*[*_`~]*[ \t]*(?:[:\-—–.,;!)]|$))"
_FENCE_MARK = re.compile(r"```[A-Za-z0-9_-]*")
#: the labels a verdict may follow at the start of its line (``Verdict:``, ``Final answer:``...)
_LABEL = r"(?i:(?:final[ \t]+)?(?:verdict|answer|grade|decision))[*_ \t]*:[*_ \t]*"
#: what may stand before a JSON object on its line for the object to stand as the verdict
_OBJECT_LEAD = re.compile(rf"{_DECOR}(?:```[A-Za-z0-9_-]*[ \t]*)?(?:{_LABEL})?(?:```[A-Za-z0-9_-]*[ \t]*)?")
#: a verdict word anywhere (in capitals, a whole word): after the verdict, the opposite one makes the reply contradict itself
_VERDICT_WORD = re.compile(r"(?<![A-Za-z0-9_])(?:PASS|FAIL)(?![A-Za-z0-9_])")
#: a JSON key and its value written anywhere: outside every complete object, the remains of a JSON object that does not
#: parse (a judge's own, broken by a raw newline or an unescaped quote in its reason, quoting an output's verdict)
#: after a PASS, prose that says it fails in any case ("But it is wrong, so it fails."): the judge echoed a verdict it
#: was quoting (an injection in the graded output) and then judged; a pass is never read from such a reply
_FAILS_AFTER = re.compile(r"(?<![A-Za-z0-9_])(?i:fail|fails|failed|failing)(?![A-Za-z0-9_])")
_LOOSE_KEY = re.compile(r'"([A-Za-z_]{1,32})"[ \t]*:[ \t]*(true|false|True|False|-?\d+(?:\.\d+)?|"[^"\\\n]{0,64}")')
_LINE_VERDICT = re.compile(
    # the label may be in any case, the verdict word must be in capitals
    rf"^{_DECOR}(?:{_LABEL})?(PASS|FAIL)[*_`~]*{_SEPARATOR}(.*)$",
    re.M,
)

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
_CATEGORY_LINE = re.compile(
    rf"^{_DECOR}(?:(?i:category|choice|classification|answer)[*_ \t]*[:=][*_ \t]*)?"
    r"[\"'(]*(?:(?i:(subset|superset|same|disagrees|disagree|immaterial))|([A-E]))[\"')]*"
    rf"[*_`~]*{_SEPARATOR}(.*)$",
    re.M,
)


@dataclass
class _Found:
    """One verdict-shaped thing in a reply: where it is and what it says."""

    start: int
    end: int
    value: Any  # pass bool / category str
    obj: JSONObject | None  # the JSON object, lower-cased keys; None for a line
    reason: str


def _clip(text: str, limit: int = _MAX_REASON) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _objects(text: str) -> list[tuple[int, int, JSONObject]]:
    """Top-level JSON objects in ``text`` in order, as ``(start, end, object with lower-cased keys)``."""
    found: list[tuple[int, int, JSONObject]] = []
    decoder = json.JSONDecoder()
    tried = 0
    pos = text.find("{")
    while pos != -1:
        tried += 1
        if tried > _MAX_OBJECT_STARTS:
            raise JudgeError(f"the judge's reply has more than {_MAX_OBJECT_STARTS} '{{' to read a verdict from", raw=text)
        try:
            value: JSON
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found.append((pos, end, {str(k).lower(): v for k, v in value.items()}))
        pos = text.find("{", end)
    return found


def _reason(obj: JSONObject) -> str:
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


def _as_score(value: Any, raw: str, scale: int | None = None) -> float | None:
    if value is None:
        return None
    if scale is not None:
        return _as_rating(value, raw, scale)
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


def _as_rating(value: Any, raw: str, scale: int) -> float:
    """A score on a 1..``scale`` rubric: a whole number in range (``4``, ``4.0``, ``"4"``), else :class:`JudgeError`."""
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise JudgeError(f"the judge's score {value!r} is not a number", raw=raw) from None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number != number:
        raise JudgeError(f"the judge's score {value!r} is not a number", raw=raw)
    if number != int(number) or not 1 <= number <= scale:
        raise JudgeError(f"the judge's score {value!r} is not a whole number from 1 to {scale}", raw=raw)
    return float(number)


def _line_reason(text: str, match: re.Match[str]) -> str:
    """The reason next to a verdict line: the rest of the line, else the lines after it, else the prose before it."""
    reason = match.group(match.lastindex or 0).strip(" \t*_`~:-—–.,;!")
    if not reason:
        reason = text[match.end() :].strip()
    if not reason:
        reason = text[: match.start()].strip()
    return _clip(reason.strip("*_` "))


def _in_position(text: str, found: list[_Found]) -> list[_Found]:
    """The verdicts at the end of ``found`` separated from the last one only by whitespace (and fence or emphasis marks)."""
    found.sort(key=lambda f: f.start)
    group = [found[-1]]
    for item in reversed(found[:-1]):
        gap = _FENCE_MARK.sub("", text[item.end : group[0].start])
        if gap.strip(" \t\r\n*_~") or item.end > group[0].start:
            break
        group.insert(0, item)
    return group


def parse_verdict(text: str) -> tuple[bool | None, float | None, str]:
    """``(pass, score, reason)`` from a judge's reply, by the rule in the module docstring.

    ``pass`` is None when the judge gave only a score (the caller applies its
    threshold); ``score`` is None when it gave only PASS/FAIL. Anything else
    raises :class:`JudgeError` carrying the raw reply.
    """
    passed, score, reason, _ = read_verdict(text)
    return passed, score, reason


def read_verdict(text: str, *, scale: int | None = None) -> tuple[bool | None, float | None, str, JSONObject | None]:
    """:func:`parse_verdict`'s reading, with the verdict's JSON object (keys lower-cased; None for a verdict line).

    Checks that ask for more than a verdict (the unsupported claims of
    ``faithfulness``) read it from that object, so a list quoted earlier in
    the reply never counts either. With ``scale``, the score is a rubric's
    whole number from 1 to ``scale`` (returned as it is), not a 0..1 fraction.
    """
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("the judge returned an empty reply", raw=text if isinstance(text, str) else None)
    found: list[_Found] = []
    quoted: list[_Found] = []  # verdict-shaped objects inside a sentence: never a verdict
    objects_in_reply = _objects(text)
    for start, end, obj in objects_in_reply:
        if any(key in obj for key in _VERDICT_KEYS):
            if not _stands(text, start):
                quoted.append(_Found(start, end, None, obj, ""))
                continue
            found.append(_Found(start, end, _as_bool(obj.get("pass"), text), obj, ""))
    for match in _LINE_VERDICT.finditer(text):
        if _inside(found, match.start()) or _inside(quoted, match.start()):
            continue  # a "PASS" inside a JSON string spanning lines
        found.append(_Found(match.start(), match.end(), match.group(1) == "PASS", None, _line_reason(text, match)))
    if not found:
        if quoted:
            raise JudgeError(
                "the judge's verdict is unreadable: no verdict of its own, only a quoted one "
                '(a JSON {"pass", "score", "reason"} counts on its own line or after "Verdict:", never inside a sentence)',
                raw=text,
            )
        raise JudgeError(
            'the judge\'s verdict is unreadable: no verdict at the end of its reply (expected a JSON {"pass", "score", "reason"} '
            "or a line starting PASS or FAIL)",
            raw=text,
        )
    group = _in_position(text, found)
    said = {item.value for item in group if item.value is not None}
    if len(said) > 1:
        raise JudgeError("the judge's reply ends with both PASS and FAIL", raw=text)
    passed = said.pop() if said else None
    if passed is not None:
        after = _VERDICT_WORD.search(text, max(item.end for item in group))
        while after is not None and (after.group(0) == "PASS") == passed:
            after = _VERDICT_WORD.search(text, after.end())
        if after is not None:  # "{"pass": true}\nActually: FAIL - ...": the reply takes its verdict back
            raise JudgeError(f"the judge's reply says {after.group(0)} after its verdict ({'PASS' if passed else 'FAIL'})", raw=text)
        if passed and (fails := _FAILS_AFTER.search(text, max(item.end for item in group))) is not None:
            raise JudgeError(f"the judge's reply says {fails.group(0)!r} after its verdict (PASS)", raw=text)
    objects = [item.obj for item in group if item.obj is not None]
    score = None
    if objects:
        score = _as_score(objects[-1].get("score"), text, scale)
        if passed is None and score is None:
            raise JudgeError("the judge's JSON verdict has neither 'pass' nor 'score'", raw=text)
    for start, _, later in objects_in_reply:  # every JSON verdict after it, quoted or not, must say the same
        if start >= group[-1].end and (differs := _differs(later, passed, score, text, scale)) is not None:
            raise JudgeError(f"the judge's reply has a JSON verdict after its own that says otherwise ({differs})", raw=text)
    loose = _loose(text, objects_in_reply, _VERDICT_KEYS)
    if loose and (differs := _differs(loose, passed, score, text, scale)) is not None:
        raise JudgeError(f"the judge's reply has a JSON that does not parse, saying otherwise ({differs})", raw=text)
    if objects:
        obj = objects[-1]
        return passed, score, _reason(obj) or next((i.reason for i in reversed(group) if i.reason), ""), obj
    return passed, None, group[-1].reason, None


def _loose(text: str, objects: list[tuple[int, int, JSONObject]], keys: Sequence[str]) -> JSONObject:
    """The values of ``keys`` written outside every complete JSON object of ``text`` (the first of each; keys lower-cased).

    A judge's JSON that does not parse (``{"pass": false, "reason": "the output said`` + a raw newline +
    ``{"pass": true}"}``) leaves its own verdict outside any object, while the verdict it quotes parses and stands on
    its line: what the broken one says is read here, so a quoted verdict cannot stand in for it.
    """
    if not any(f'"{key}"' in text.lower() for key in keys):
        return {}
    starts = [start for start, _, _ in objects]
    found: JSONObject = {}
    for match in _LOOSE_KEY.finditer(text):
        key = match.group(1).lower()
        if key not in keys or key in found:
            continue
        i = bisect.bisect_right(starts, match.start()) - 1
        if i >= 0 and match.start() < objects[i][1]:
            continue  # inside a complete object: read (or quoted) as that object
        value = match.group(2)
        try:
            found[key] = json.loads(value.lower() if value in ("True", "False") else value)
        except ValueError:
            continue
    return found


def _differs(obj: JSONObject, passed: bool | None, score: float | None, raw: str, scale: int | None) -> str | None:
    """What the verdict-shaped object ``obj`` says that the verdict (``passed``, ``score``) does not, or None when it agrees."""
    try:
        other_pass = _as_bool(obj.get("pass"), raw)
    except JudgeError:
        other_pass = None
    if passed is not None and other_pass is not None and other_pass != passed:
        return f'"pass": {str(other_pass).lower()}'
    try:
        other_score = _as_score(obj.get("score"), raw, scale)
    except JudgeError:
        other_score = None
    if score is not None and other_score is not None and other_score != score:
        return f'"score": {other_score:g}'
    return None


def _stands(text: str, start: int) -> bool:
    """Whether the JSON object at ``start`` stands as a verdict: only decoration or a verdict label before it on its line."""
    return _OBJECT_LEAD.fullmatch(text, text.rfind("\n", 0, start) + 1, start) is not None


def _inside(found: list[_Found], pos: int) -> bool:
    return any(item.obj is not None and item.start <= pos < item.end for item in found)


def _category(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    key = re.sub(r"[^a-z_]", "", re.sub(r"[\s-]+", "_", value.strip().lower())).strip("_")
    return _CATEGORY_ALIASES.get(key) or _CATEGORY_ALIASES.get(key.replace("_", ""))


def parse_category(text: str) -> tuple[str, str]:
    """``(category, reason)`` from a factuality judge's reply; see :data:`FACTUALITY_CATEGORIES`.

    The same "last, in position" rule as :func:`parse_verdict`: the last
    top-level JSON object with a ``category`` key (``choice`` and
    ``classification`` are read too), else the last line that starts with a
    category — ``Category: superset``, ``(D)``, ``disagrees - ...``.
    Disagreeing categories in verdict position, or none, raise :class:`JudgeError`.
    """
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("the judge returned an empty reply", raw=text if isinstance(text, str) else None)
    found: list[_Found] = []
    objects_in_reply = _objects(text)
    for start, end, obj in objects_in_reply:
        key = next((k for k in _CATEGORY_KEYS if k in obj), None)
        if key is None or not _stands(text, start):
            continue
        category = _category(obj[key])
        if category is None:
            raise JudgeError(f"the judge's category {obj[key]!r} is not one of {', '.join(FACTUALITY_CATEGORIES)}", raw=text)
        found.append(_Found(start, end, category, obj, _reason(obj)))
    for match in _CATEGORY_LINE.finditer(text):
        if _inside(found, match.start()):
            continue
        category = _category(match.group(1) or match.group(2))
        if category is not None:
            found.append(_Found(match.start(), match.end(), category, None, _line_reason(text, match)))
    if not found:
        raise JudgeError(
            'the judge\'s factuality verdict is unreadable: no category at the end of its reply (expected JSON {"category": '
            + "|".join(FACTUALITY_CATEGORIES)
            + ', "reason"})',
            raw=text,
        )
    group = _in_position(text, found)
    said = {item.value for item in group}
    if len(said) > 1:
        raise JudgeError(f"the judge's reply ends with more than one category ({', '.join(sorted(said))})", raw=text)
    objects = [item for item in group if item.obj is not None]
    chosen = objects[-1] if objects else group[-1]
    for start, _, later in objects_in_reply:  # a category object after the verdict, quoted or not, must say the same
        key = next((k for k in _CATEGORY_KEYS if k in later), None)
        other = _category(later[key]) if key is not None and start >= group[-1].end else None
        if other is not None and other != chosen.value:
            raise JudgeError(f"the judge's reply names another category after its verdict ({chosen.value}, then {other})", raw=text)
    loose = _loose(text, objects_in_reply, _CATEGORY_KEYS)
    other = next((c for c in map(_category, loose.values()) if c is not None and c != chosen.value), None)
    if other is not None:
        raise JudgeError(f"the judge's reply has a JSON that does not parse, naming another category ({other})", raw=text)
    return str(chosen.value), chosen.reason or next((i.reason for i in reversed(group) if i.reason), "")


#: what a pairwise judge may prefer: the output shown first, the one shown second, or neither
PREFERENCES = ("A", "B", "tie")
_PREFERENCE_ALIASES = {"a": "A", "b": "B", "tie": "tie", "draw": "tie", "equal": "tie", "neither": "tie", "both": "tie"}
_PREFERENCE_LINE = re.compile(
    rf"^{_DECOR}(?i:(?:final[ \t]+)?(?:winner|preference|better|verdict|answer))[*_ \t]*[:=][*_ \t]*"
    r"[\"'(\[]*(?i:(?:output|response|answer)[ \t]+)?([A-Za-z]+)[\"')\]]*"
    rf"[*_`~]*{_SEPARATOR}(.*)$",
    re.M,
)


#: a winner named anywhere (in a sentence too): after the verdict, another one makes the reply contradict itself
_WINNER_ANYWHERE = re.compile(
    r"(?i:winner)[*_ \t]*[:=][*_ \t]*[\"'(\[]*(?:(?i:output|response|answer)[ \t]+)?(A|B|(?i:tie|draw))(?![A-Za-z0-9_])"
)


def _preference(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    key = value.strip().strip("\"'()[]*_` ").lower()
    key = key.removeprefix("output ").removeprefix("response ").removeprefix("answer ").strip()
    return _PREFERENCE_ALIASES.get(key)


def parse_preference(text: str) -> tuple[str, str]:
    """``(preference, reason)`` from a pairwise judge's reply: ``A``, ``B`` or ``tie`` (see :data:`PREFERENCES`).

    The same "last, in position" rule as :func:`parse_verdict`: the last
    top-level JSON object with a ``winner`` key (``{"winner": "A", "reason":
    "..."}``; ``A``/``B``/``tie``, case-insensitive, ``draw`` and ``equal``
    read as ``tie``), else the last labelled line (``Winner: B``). A winner
    that is none of those, disagreeing preferences in verdict position, or
    none at all raise :class:`JudgeError` keeping the raw reply: an unreadable
    reply is never a win.
    """
    if not isinstance(text, str) or not text.strip():
        raise JudgeError("the judge returned an empty reply", raw=text if isinstance(text, str) else None)
    found: list[_Found] = []
    objects_in_reply = _objects(text)
    for start, end, obj in objects_in_reply:
        if "winner" not in obj or not _stands(text, start):
            continue
        # an unknown winner is an error only in verdict position (an earlier object may be quoted)
        found.append(_Found(start, end, _preference(obj["winner"]), obj, _reason(obj)))
    for match in _PREFERENCE_LINE.finditer(text):
        if _inside(found, match.start()):
            continue
        choice = _preference(match.group(1))
        if choice is not None:
            found.append(_Found(match.start(), match.end(), choice, None, _line_reason(text, match)))
    if not found:
        raise JudgeError(
            'the judge\'s preference is unreadable: no winner at the end of its reply (expected JSON {"winner": "A"|"B"|"tie", "reason"})',
            raw=text,
        )
    group = _in_position(text, found)
    unknown = next((item.obj for item in group if item.value is None and item.obj is not None), None)
    if unknown is not None:
        raise JudgeError(f"the judge's winner {unknown['winner']!r} is not one of A, B, tie", raw=text)
    said = {item.value for item in group}
    if len(said) > 1:
        raise JudgeError(f"the judge's reply ends with more than one winner ({', '.join(sorted(said))})", raw=text)
    objects = [item for item in group if item.obj is not None]
    chosen = objects[-1] if objects else group[-1]
    end = group[-1].end
    later = [_preference(obj["winner"]) for start, _, obj in objects_in_reply if start >= end and "winner" in obj]
    later += [_preference(m.group(1)) for m in _WINNER_ANYWHERE.finditer(text, end)]
    other = next((choice for choice in later if choice is not None and choice != chosen.value), None)
    if other is not None:  # a winner after the verdict, quoted or in a sentence, that is another one
        raise JudgeError(f"the judge's reply names another winner after its verdict ({chosen.value}, then {other})", raw=text)
    loose = [_preference(value) for value in _loose(text, objects_in_reply, ("winner",)).values()]
    other = next((choice for choice in loose if choice is not None and choice != chosen.value), None)
    if other is not None:
        raise JudgeError(f"the judge's reply has a JSON that does not parse, naming another winner ({other})", raw=text)
    return str(chosen.value), chosen.reason or next((i.reason for i in reversed(group) if i.reason), "")


class CallUsage(TypedDict):
    """What a check's judge calls took, as its record keeps it (``details`` of an assertion, a pairwise record)."""

    calls: int
    input_tokens: int
    output_tokens: int
    cached: bool
    """Every call was answered from the response cache."""


class _Costed(Protocol):
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    cached: bool


def call_usage(calls: Sequence[_Costed]) -> tuple[CallUsage, float | None]:
    """The calls' usage, and their cost (None when no call said one)."""
    costs = [c.cost_usd for c in calls if c.cost_usd is not None]
    usage: CallUsage = {
        "calls": len(calls),
        "input_tokens": sum(c.input_tokens for c in calls),
        "output_tokens": sum(c.output_tokens for c in calls),
        "cached": bool(calls) and all(c.cached for c in calls),
    }
    return usage, round(sum(costs), 8) if costs else None


def judge_name(ref: JSON) -> str:
    """The judge as a record names it: its target id, or ``provider/model`` of an inline target without one."""
    if isinstance(ref, dict):
        return str(ref.get("id") or f"{ref.get('provider', ref.get('type'))}/{ref.get('model', '')}".rstrip("/"))
    return str(ref)
