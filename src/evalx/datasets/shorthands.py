"""Map the case formats of existing golden sets onto evalx cases.

Golden sets written for hand-made harnesses must run unchanged (DESIGN.md,
"Cases"). Each shorthand field becomes a plain case field or an assertion
appended after the case's own ``assert`` list:

- Engine harness: ``expected: {must_call_tools, must_not_call_tools,
  output_must_contain, max_tokens}``;
- golden trajectories: ``user_message``, ``required_tools``,
  ``forbidden_tools``, ``max_tokens`` (total tokens), ``max_iterations``;
- golden_qa.json: ``question``, ``expected_answer``, ``tolerance``, ``notes``;
- TypeScript harnesses: ``expectedKeywords``, ``expectedCharacteristics``,
  ``expectedOutput``, ``mockElements`` (and their snake_case spellings);
- transcripts: ``messages: [{role, content}]`` becomes ``turns:`` (each user
  message a turn's input, the assistant message after it that turn's expected
  reply, checked by ``expect_assert``, default ``{type: equals}``), a leading
  ``system`` message the case's ``system``.

Each shorthand scores exactly as its own runner defines it: golden_qa's
``exact_match`` is lower-cased, whitespace-collapsed equality (``equals``
with ``normalize: [whitespace, lower]``, so a final period still counts);
``expectedKeywords`` is a plain, case-sensitive ``includes()`` of each word
(``contains_all``, so "rect" is found in "rectangle").

:func:`expand` runs on a case that already passed schema validation, so the
types of the shorthand fields are known to be right.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from evalx.assertions.registry import get_assertion
from evalx.common.documents import did_you_mean
from evalx.common.json_types import JSONObject

KeyPath = tuple[str | int, ...]

_STRINGS: JSONObject = {"type": "array", "items": {"type": "string"}}
MESSAGE_ROLES = ("user", "assistant", "system")
#: how a transcript's expected replies are checked when the case names no ``expect_assert``
DEFAULT_EXPECT_ASSERT: JSONObject = {"type": "equals"}

#: JSON Schema of every shorthand field, as written in a case
SHORTHAND_PROPERTIES: dict[str, JSONObject] = {
    "user_message": {"type": "string", "description": "Golden trajectories: the input."},
    "question": {"type": "string", "description": "golden_qa.json: the input."},
    "expected_answer": {"description": "golden_qa.json: the expected value."},
    "tolerance": {
        "enum": ["exact_match", "numeric_close", "semantic_similar"],
        "description": "golden_qa.json: how the answer is compared with expected_answer.",
    },
    "required_tools": {**_STRINGS, "description": "Tools that must be called (must_call_tools)."},
    "forbidden_tools": {**_STRINGS, "description": "Tools that must not be called (must_not_call_tools)."},
    "max_tokens": {"type": "integer", "minimum": 0, "description": "Ceiling on total tokens."},
    "max_iterations": {"type": "integer", "minimum": 0, "description": "Ceiling on agent iterations."},
    "expectedKeywords": {**_STRINGS, "description": "Words the output must contain (keywords)."},
    "expected_keywords": {**_STRINGS, "description": "Words the output must contain (keywords)."},
    "expectedCharacteristics": {**_STRINGS, "description": "A judge rubric (llm_judge)."},
    "expected_characteristics": {**_STRINGS, "description": "A judge rubric (llm_judge)."},
    "expectedOutput": {"description": "The expected value."},
    "expected_output": {"description": "The expected value."},
    "mockElements": {"type": "array", "description": "Kept as metadata.mockElements."},
    "messages": {
        "type": "array",
        "minItems": 1,
        "description": "A transcript: each user message is a turn's input, the assistant message after it the expected "
        "reply (checked by expect_assert); a leading system message is the case's system.",
        "items": {
            "type": "object",
            "required": ["role", "content"],
            "properties": {"role": {"enum": list(MESSAGE_ROLES)}, "content": {"type": "string"}},
            "additionalProperties": False,
        },
    },
    "expect_assert": {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"type": "string"}},
        "description": "How each assistant message of 'messages' is checked: an assertion whose value is that message "
        "(default {type: equals}).",
    },
}

ENGINE_EXPECTED_KEYS = ("must_call_tools", "must_not_call_tools", "output_must_contain", "max_tokens")
#: golden_qa.json's tolerance modes, as its runner defines them (shared/reference/golden-qa-runner.txt)
TOLERANCE_ASSERTIONS: dict[str, JSONObject] = {
    "exact_match": {"type": "equals", "normalize": ["whitespace", "lower"]},  # lower-cased, whitespace-collapsed equality
    "numeric_close": {"type": "numeric_close"},  # any number within 1 %, years 2020-2029 ignored
    "semantic_similar": {"type": "semantic_similar", "threshold": 0.8},  # a judge score of 0.8 or more
}

# spellings of one case field; at most one of each group may be given
_ALIASES: dict[str, tuple[str, ...]] = {
    "input": ("input", "user_message", "question"),
    "expected": ("expected", "expected_answer", "expectedOutput", "expected_output"),
    "keywords": ("expectedKeywords", "expected_keywords"),
    "characteristics": ("expectedCharacteristics", "expected_characteristics"),
}
_INPUT_NAMES = _ALIASES["input"]
_GOLDEN_QA_FIELDS = ("question", "expected_answer")
#: the keys :func:`expand` acts on (besides an ``expected`` mapping): a case without any is its fields as given
_SHORTHAND_KEYS = frozenset(
    {
        *(name for names in _ALIASES.values() for name in names[1:]),
        *_ALIASES["keywords"],
        *_ALIASES["characteristics"],
        *_GOLDEN_QA_FIELDS,
        "required_tools",
        "forbidden_tools",
        "max_tokens",
        "max_iterations",
        "tolerance",
        "mockElements",
        "messages",
        "expect_assert",
    }
)


@dataclass
class Expansion:
    """A case with its shorthands resolved."""

    fields: dict[str, Any]  # keyword arguments of Case, minus id/asserts/source/dataset
    generated: list[tuple[JSONObject, KeyPath]] = field(default_factory=list)  # (assertion, shorthand's key path)
    #: for ``messages:``, the key path of each turn's expected reply (None for a turn without one), by turn
    turn_origins: list[KeyPath | None] = field(default_factory=list)
    errors: list[tuple[KeyPath, str]] = field(default_factory=list)


def expand(raw: dict[str, Any], *, base_fields: Collection[str]) -> Expansion:
    """Resolve the shorthands of one validated raw case (``assert`` and ``id`` are left to the caller)."""
    out = Expansion({k: v for k, v in raw.items() if k in base_fields and k not in ("id", "assert")})
    if raw.keys().isdisjoint(_SHORTHAND_KEYS) and not isinstance(raw.get("expected"), dict):
        return out  # the usual case (no shorthand at all), without looking for each one: this runs for every case
    for names in _ALIASES.values():
        present = [n for n in names if n in raw]
        for extra in present[1:]:
            out.errors.append(((extra,), f"'{extra}' and '{present[0]}' cannot both be given"))
    if "messages" in raw or "expect_assert" in raw:
        _transcript(raw, out)
    if out.errors:
        return out

    for name in _INPUT_NAMES[1:]:
        if name in raw:
            out.fields["input"] = raw[name]
    for name in _ALIASES["expected"][1:]:
        if name in raw:
            out.fields["expected"] = raw[name]

    _engine_expected(raw, out)

    for key, kind in (("required_tools", "must_call_tools"), ("forbidden_tools", "must_not_call_tools")):
        if raw.get(key):
            out.generated.append(({"type": kind, "tools": list(raw[key])}, (key,)))
    if "max_tokens" in raw:
        out.generated.append(({"type": "max_tokens", "value": raw["max_tokens"], "count": "total"}, ("max_tokens",)))
    if "max_iterations" in raw:
        out.generated.append(({"type": "max_iterations", "value": raw["max_iterations"]}, ("max_iterations",)))

    if "tolerance" in raw:
        if out.fields.get("expected") is None:
            out.errors.append((("tolerance",), "'tolerance' needs an 'expected_answer' to compare with"))
        else:
            out.generated.append((dict(TOLERANCE_ASSERTIONS[raw["tolerance"]]), ("tolerance",)))
    if any(k in raw for k in _GOLDEN_QA_FIELDS) and "difficulty" not in raw:
        out.fields["difficulty"] = "easy"  # golden_qa.json's documented default

    for name in _ALIASES["keywords"]:
        if raw.get(name):  # a plain includes() per word, as the TypeScript harness checks them
            out.generated.append(({"type": "contains_all", "values": list(raw[name])}, (name,)))
    for name in _ALIASES["characteristics"]:
        if raw.get(name):
            out.generated.append(({"type": "llm_judge", "characteristics": list(raw[name])}, (name,)))

    if "mockElements" in raw:
        out.fields["metadata"] = {**raw.get("metadata", {}), "mockElements": raw["mockElements"]}
    return out


def _transcript(raw: dict[str, Any], out: Expansion) -> None:
    """``messages: [{role, content}]`` becomes ``turns:`` (and ``system``); see the module's docstring.

    Two user messages in a row are an error rather than joined: a transcript
    that asks twice before an answer is more likely a mistake (a missing
    assistant message) than one question, and joining would hide it.
    """
    if "messages" not in raw:
        return  # an expect_assert from the dataset's defaults:, for its other cases (the loader rejects a case's own)
    for name in ("turns", *_INPUT_NAMES):
        if name in raw:
            out.errors.append(((name,), f"{name!r} and 'messages' cannot both be given (the user messages are the turns)"))
    spec = raw.get("expect_assert", DEFAULT_EXPECT_ASSERT)
    if "value" in spec:
        out.errors.append((("expect_assert", "value"), "'expect_assert' takes no 'value': each assistant message is the value"))
    atype = get_assertion(spec["type"])
    if atype is not None and "value" not in atype.params:
        problem = f"{spec['type']} compares with no value; expect_assert needs a type that does (equals, icontains, regex, ...)"
        out.errors.append((("expect_assert", "type"), problem))
    messages: list[JSONObject] = raw["messages"]
    turns: list[JSONObject] = []
    origins: list[KeyPath | None] = []
    for i, message in enumerate(messages):
        role, content = message["role"], message["content"]
        previous = messages[i - 1]["role"] if i else None
        if role == "system":
            if i:
                out.errors.append((("messages", i, "role"), "a system message may only come first in 'messages'"))
            elif "system" in raw:
                out.errors.append((("messages", 0), "'system' and a leading system message cannot both be given"))
            else:
                out.fields["system"] = content
        elif role == "user":
            if previous == "user":
                problem = f"two user messages in a row (messages[{i - 1}] and messages[{i}]): add the assistant's reply between them, or join them"
                out.errors.append((("messages", i), problem))
            turns.append({"input": content})
            origins.append(None)
        elif previous != "user":
            after = "comes first" if previous in (None, "system") else "follows another assistant message"
            out.errors.append((("messages", i), f"an assistant message must answer a user message; this one {after}"))
        else:
            turns[-1]["assert"] = [{**spec, "value": content}]
            origins[-1] = ("messages", i)
    if not turns and not out.errors:
        out.errors.append((("messages",), "'messages' has no user message"))
    out.fields["turns"] = turns
    out.turn_origins = origins


def _engine_expected(raw: dict[str, Any], out: Expansion) -> None:
    """``expected: {must_call_tools, ...}`` (Engine harness) becomes assertions.

    A mapping that mixes these keys with others is an error rather than a
    plain expected value: ``{must_call_tools: [a], must_not_cal_tools: [b]}``
    would otherwise drop the misspelt check without a word.
    """
    expected = raw.get("expected")
    if not isinstance(expected, dict) or not any(k in ENGINE_EXPECTED_KEYS for k in expected):
        return
    unknown = [k for k in expected if k not in ENGINE_EXPECTED_KEYS]
    for key in unknown:
        hint = did_you_mean(key, ENGINE_EXPECTED_KEYS)
        out.errors.append((("expected", key), f"unknown field {key!r} in an Engine-harness 'expected'{hint}"))
    if unknown:
        return
    kinds = {
        "must_call_tools": ("must_call_tools", "tools"),
        "must_not_call_tools": ("must_not_call_tools", "tools"),
        "output_must_contain": ("contains_all", "values"),
    }
    for key, (kind, param) in kinds.items():
        value = expected.get(key)
        if value is not None and value != []:  # an empty list checks nothing
            out.generated.append(({"type": kind, param: value}, ("expected", key)))
    if expected.get("max_tokens") is not None:
        out.generated.append(({"type": "max_tokens", "value": expected["max_tokens"]}, ("expected", "max_tokens")))
    out.fields["expected"] = None


def unknown_field(name: str, known: tuple[str, ...] | list[str]) -> str:
    """``unknown field 'expectd' (did you mean 'expected'?)``"""
    return f"unknown field {name!r}{did_you_mean(name, known)}"
