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
  ``expectedOutput``, ``mockElements`` (and their snake_case spellings).

Each shorthand scores exactly as its own runner defines it: golden_qa's
``exact_match`` is lower-cased, whitespace-collapsed equality (``equals``
with ``normalize: [whitespace, lower]``, so a final period still counts);
``expectedKeywords`` is a plain, case-sensitive ``includes()`` of each word
(``contains_all``, so "rect" is found in "rectangle").

:func:`expand` runs on a case that already passed schema validation, so the
types of the shorthand fields are known to be right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalx.documents import did_you_mean

KeyPath = tuple[str | int, ...]

_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

#: JSON Schema of every shorthand field, as written in a case
SHORTHAND_PROPERTIES: dict[str, dict[str, Any]] = {
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
}

ENGINE_EXPECTED_KEYS = ("must_call_tools", "must_not_call_tools", "output_must_contain", "max_tokens")
#: golden_qa.json's tolerance modes, as its runner defines them (shared/reference/golden-qa-runner.txt)
TOLERANCE_ASSERTIONS: dict[str, dict[str, Any]] = {
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
    }
)


@dataclass
class Expansion:
    """A case with its shorthands resolved."""

    fields: dict[str, Any]  # keyword arguments of Case, minus id/asserts/source/dataset
    generated: list[tuple[dict[str, Any], KeyPath]] = field(default_factory=list)  # (assertion, shorthand's key path)
    errors: list[tuple[KeyPath, str]] = field(default_factory=list)


def expand(raw: dict[str, Any], *, base_fields: tuple[str, ...]) -> Expansion:
    """Resolve the shorthands of one validated raw case (``assert`` and ``id`` are left to the caller)."""
    out = Expansion({k: v for k, v in raw.items() if k in base_fields and k not in ("id", "assert")})
    if raw.keys().isdisjoint(_SHORTHAND_KEYS) and not isinstance(raw.get("expected"), dict):
        return out  # the usual case (no shorthand at all), without looking for each one: this runs for every case
    for names in _ALIASES.values():
        present = [n for n in names if n in raw]
        for extra in present[1:]:
            out.errors.append(((extra,), f"'{extra}' and '{present[0]}' cannot both be given"))
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
