"""Deterministic assertion types: checks on the output text that need no model.

Types that take a ``value`` fall back to the case's ``expected`` when the
config leaves it out; with neither, they raise ``ValueError``, which the
evaluator reports as an assertion error.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
import referencing.exceptions

from evalx.assertions.registry import AssertionContext, assertion
from evalx.assertions.static import needs_value, needs_values
from evalx.assertions.user_schema import refused_ref_reason, schema_problems, user_validator
from evalx.common import regexes
from evalx.common.json_types import JSONObject
from evalx.common.usercode import resolve_callable
from evalx.models import Verdict

# -- helpers shared by the types below (and by trajectory.py) ----------------


def short(value: Any, limit: int = 80) -> str:
    """``value`` quoted for a reason, cut to about ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def value_or_expected(ctx: AssertionContext, value: Any, key: str = "value") -> Any:
    """The configured ``value``, else the case's ``expected``; an error when neither is set."""
    if value is not None:
        return value
    if ctx.expected is not None:
        return ctx.expected
    raise ValueError(f"no {key!r} given and the case has no 'expected'")


def _strings_or_expected(ctx: AssertionContext, values: list[str] | None) -> list[str]:
    if values is None:
        if not isinstance(ctx.expected, list):
            raise ValueError("no 'values' given and the case's 'expected' is not a list")
        values = ctx.expected
    return [v if isinstance(v, str) else str(v) for v in values]


_FENCE = re.compile(r"```[ \t]*(?:json[c5]?)?[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL | re.IGNORECASE)


def parse_json(text: str) -> tuple[bool, Any, str]:
    """Parse ``text`` as JSON, or the first ```json fenced block in it: (ok, value, error)."""
    try:
        return True, json.loads(text), ""
    except ValueError as exc:
        error = str(exc)
    for match in _FENCE.finditer(text):
        try:
            return True, json.loads(match.group(1)), ""
        except ValueError:
            continue
    return False, None, error


def json_equal(a: Any, b: Any) -> bool:
    """Structural equality as JSON sees it: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


# -- text ---------------------------------------------------------------------

# quotes, sentence punctuation and markdown emphasis a model wraps answers in
_EDGE_CHARS = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb.,;:!?*_ \t\r\n"


def normalise(text: str) -> str:
    """Case-folded, whitespace collapsed, surrounding quotes and punctuation removed (``equals``' default)."""
    return " ".join(text.split()).strip(_EDGE_CHARS).casefold()


#: ``equals``' ``normalize:`` steps, applied in this order whatever order they are written in
NORMALIZE_STEPS: dict[str, Callable[[str], str]] = {
    "whitespace": lambda t: " ".join(t.split()),  # runs of whitespace become one space; none at the ends
    "punctuation": lambda t: t.strip(_EDGE_CHARS),  # surrounding quotes and punctuation (a final period...)
    "lower": str.lower,
    "casefold": str.casefold,
}
_DEFAULT_STEPS = ("whitespace", "punctuation", "casefold")
_NORMALIZE_SCHEMA: JSONObject = {
    "description": "How both sides are normalised before comparing: none, one step or a list of steps "
    "(whitespace, punctuation, lower, casefold). Default: whitespace, punctuation, casefold.",
    "anyOf": [
        {"enum": ["none", *NORMALIZE_STEPS]},
        {"type": "array", "items": {"enum": list(NORMALIZE_STEPS)}, "uniqueItems": True},
    ],
}


def _normaliser(normalize: str | list[str] | None) -> Any:
    if normalize is None:
        return normalise
    steps = [] if normalize == "none" else [normalize] if isinstance(normalize, str) else list(normalize)
    chain = [NORMALIZE_STEPS[name] for name in NORMALIZE_STEPS if name in steps]

    def apply(text: str) -> str:
        for step in chain:
            text = step(text)
        return text

    return apply


@assertion("equals", schema={"normalize": _NORMALIZE_SCHEMA}, check=needs_value())
def equals(ctx: AssertionContext, *, value: Any = None, normalize: str | list[str] | None = None) -> Verdict:
    """The output equals the value, ignoring case, spacing and surrounding quotes or punctuation (``normalize:`` says which)."""
    expected = value_or_expected(ctx, value)
    if not isinstance(expected, str):
        ok, parsed, _ = parse_json(ctx.text.strip())
        if ok and json_equal(parsed, expected):
            return Verdict.ok(f"equals {short(expected)}")
        expected_text = json.dumps(expected) if isinstance(expected, (dict, list, bool)) else str(expected)
    else:
        expected_text = expected
    norm = _normaliser(normalize)
    if norm(ctx.text) == norm(expected_text):
        return Verdict.ok(f"equals {short(expected_text)}")
    return Verdict.no(f"expected {short(expected_text)}, got {short(ctx.text)}")


def case_note(missing: list[str], text: str, hint: str = "icontains ignores case") -> str:
    """What a case-sensitive check's failure says about case: ``(case-sensitive)``, or what the output has in another case.

    ``missing 'forgot password' (case-sensitive: the output has 'Forgot password'; icontains ignores case)``
    tells a person the check, not the answer, is what to look at.
    """
    folded = text.casefold()
    for needle in missing:
        at = folded.find(needle.casefold()) if needle else -1
        if at >= 0 and len(folded) == len(text):  # casefold kept the length: the offset is the text's
            found = text[at : at + len(needle)]
            return f"(case-sensitive: the output has {short(found)}; {hint})"
    return "(case-sensitive)"


@assertion("contains", check=needs_value())
def contains(ctx: AssertionContext, *, value: str | float | None = None) -> Verdict:
    """The output contains the value (case-sensitive)."""
    needle = str(value_or_expected(ctx, value))
    if needle in ctx.text:
        return Verdict.ok(f"contains {short(needle)}")
    return Verdict.no(f"expected to contain {short(needle)} {case_note([needle], ctx.text)}, got {short(ctx.text)}")


@assertion("icontains", check=needs_value())
def icontains(ctx: AssertionContext, *, value: str | float | None = None) -> Verdict:
    """The output contains the value, ignoring case."""
    needle = str(value_or_expected(ctx, value))
    if needle.casefold() in ctx.text.casefold():
        return Verdict.ok(f"contains {short(needle)} (any case)")
    return Verdict.no(f"expected to contain {short(needle)} (any case), got {short(ctx.text)}")


@assertion("starts_with", check=needs_value())
def starts_with(ctx: AssertionContext, *, value: str | float | None = None) -> Verdict:
    """The output, leading whitespace aside, starts with the value (case-sensitive)."""
    prefix = str(value_or_expected(ctx, value))
    if ctx.text.lstrip().startswith(prefix):
        return Verdict.ok(f"starts with {short(prefix)}")
    return Verdict.no(
        f"expected to start with {short(prefix)} {case_note([prefix], ctx.text.lstrip()[: len(prefix)], 'a regex with flags: i ignores case')}, got {short(ctx.text)}"
    )


@assertion("contains_all", check=needs_values())
def contains_all(ctx: AssertionContext, *, values: list[str] | None = None) -> Verdict:
    """The output contains every one of the values (case-sensitive); the score is the fraction found."""
    needles = _strings_or_expected(ctx, values)
    if not needles:
        raise ValueError("'values' is empty")
    missing = [n for n in needles if n not in ctx.text]
    score = 1 - len(missing) / len(needles)
    if not missing:
        return Verdict.ok(f"contains all {len(needles)} values")
    return Verdict.no(f"missing {', '.join(short(m) for m in missing)} {case_note(missing, ctx.text)} in {short(ctx.text)}", score)


@assertion("contains_any", check=needs_values())
def contains_any(ctx: AssertionContext, *, values: list[str] | None = None) -> Verdict:
    """The output contains at least one of the values (case-sensitive)."""
    needles = _strings_or_expected(ctx, values)
    if not needles:
        raise ValueError("'values' is empty")
    found = [n for n in needles if n in ctx.text]
    if found:
        return Verdict.ok(f"contains {', '.join(short(f) for f in found)}")
    return Verdict.no(f"expected any of {', '.join(short(n) for n in needles)} {case_note(needles, ctx.text)}, got {short(ctx.text)}")


_REGEX_FLAGS = {"i": regexes.IGNORECASE, "m": regexes.MULTILINE, "s": regexes.DOTALL, "x": regexes.VERBOSE}


def _compiles(pattern: Any) -> None:
    """Raise ValueError saying why ``pattern`` is not a regex the ``regex`` assertion can use."""
    if not isinstance(pattern, str):
        raise ValueError(f"a regex must be a string, not {type(pattern).__name__}")
    try:
        regexes.compile_user(pattern)
    except regexes.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from None


@assertion("regex", schema={"flags": {"type": "string", "pattern": "^[imsx]*$"}}, check=needs_value(convert=_compiles))
def regex(ctx: AssertionContext, *, value: str | None = None, flags: str | None = None) -> Verdict:
    """The output matches the regular expression somewhere (flags: any of "imsx").

    The match runs under the cell's time limit (:mod:`evalx.common.regexes`): a regex
    that backtracks past it is an assertion error, never a pass.
    """
    pattern = value_or_expected(ctx, value)
    if not isinstance(pattern, str):
        raise ValueError(f"a regex must be a string, not {type(pattern).__name__}")
    re_flags = 0
    for flag in flags or "":
        if flag not in _REGEX_FLAGS:
            raise ValueError(f"unknown regex flag {flag!r} (use any of 'imsx')")
        re_flags |= _REGEX_FLAGS[flag]
    match = regexes.search(regexes.compile_user(pattern, re_flags), ctx.text)
    if match:
        return Verdict.ok(f"matches /{pattern}/ at {short(match.group(0))}")
    return Verdict.no(f"expected to match /{pattern}/, got {short(ctx.text)}")


@assertion("keywords", check=needs_values())
def keywords(ctx: AssertionContext, *, values: list[str] | None = None) -> Verdict:
    """Every keyword appears as a whole word, ignoring case; the score is the fraction found."""
    words = _strings_or_expected(ctx, values)
    if not words:
        raise ValueError("'values' is empty")
    missing = [w for w in words if not _keyword_pattern(w).search(ctx.text)]
    score = 1 - len(missing) / len(words)
    if not missing:
        return Verdict.ok(f"all {len(words)} keywords found")
    found = len(words) - len(missing)
    return Verdict.no(f"missing keywords {', '.join(short(m) for m in missing)} ({found}/{len(words)} found)", score)


def _keyword_pattern(word: str) -> re.Pattern[str]:
    # word-ish: not inside a longer word, any run of whitespace matches a space
    body = r"\s+".join(re.escape(part) for part in word.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


# -- numbers ------------------------------------------------------------------

# a sign only when it does not follow a word (so "gpt-4" and "2020-2024" have no negatives)
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212]?)(?P<dollar>\$?)"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?P<pct>%?)"
)


def _numbers(text: str) -> list[tuple[float, bool]]:
    """Every number in ``text`` as (value, year_like)."""
    out: list[tuple[float, bool]] = []
    for m in _NUMBER.finditer(text):
        raw = m.group("num")
        number = float(raw.replace(",", ""))
        if m.group("sign"):
            number = -number
        plain_int = raw.isdigit() and not m.group("sign") and not m.group("dollar") and not m.group("pct")
        out.append((number, plain_int and _is_year(number)))
    return out


def _is_year(number: float) -> bool:
    return number.is_integer() and 2020 <= number <= 2029


def _to_number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, not {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        found = _numbers(value)
        if len(found) == 1:
            return found[0][0]
    raise ValueError(f"expected a number, not {value!r}")


def _fmt(number: float) -> str:
    number = float(number)  # config values may be ints, which lack is_integer() before 3.12
    return str(int(number)) if number.is_integer() and abs(number) < 1e15 else f"{number:.10g}"


@assertion(
    "numeric_close",
    schema={"tolerance": {"type": "number", "minimum": 0}, "abs_tolerance": {"type": "number", "minimum": 0}},
    check=needs_value(convert=_to_number),
)
def numeric_close(
    ctx: AssertionContext,
    *,
    value: float | str | None = None,
    tolerance: float = 0.01,
    abs_tolerance: float | None = None,
) -> Verdict:
    """Some number in the output is within a relative (default 1%) or absolute tolerance of the value.

    Year-like integers (2020-2029) in the output are ignored unless the value is one.
    """
    expected = _to_number(value_or_expected(ctx, value))
    allowed = max(tolerance * abs(expected), abs_tolerance or 0.0)
    bounds = f"\u00b1{_fmt(tolerance * 100)}%" + (f" or \u00b1{_fmt(abs_tolerance)}" if abs_tolerance is not None else "")
    head = f"expected {_fmt(expected)} ({bounds})"
    seen: list[str] = []
    for number, year_like in _numbers(ctx.text):
        if year_like and not _is_year(expected):
            seen.append(f"{_fmt(number)} ignored")
            continue
        if abs(number - expected) <= allowed * (1 + 1e-9):  # slack for float rounding at the edge
            return Verdict.ok(f"{head}, found {_fmt(number)}")
        seen.append(_fmt(number))
    if not seen:
        return Verdict.no(f"{head}, found no number in {short(ctx.text)}")
    shown = seen[:10] + (["..."] if len(seen) > 10 else [])
    return Verdict.no(f"{head}, found [{', '.join(shown)}]")


# -- JSON ---------------------------------------------------------------------


@assertion("is_json")
def is_json(ctx: AssertionContext) -> Verdict:
    """The output is JSON (a ```json fenced block is accepted)."""
    ok, _, error = parse_json(ctx.text.strip())
    if ok:
        return Verdict.ok("valid JSON")
    return Verdict.no(f"not JSON ({error}): {short(ctx.text)}")


@assertion("json_schema")
def json_schema(ctx: AssertionContext, *, schema: dict[str, Any]) -> Verdict:
    """The output is JSON that validates against the JSON Schema.

    ``$ref`` resolves only inside the schema (evalx never fetches one); patterns
    match under the cell's time limit (:mod:`evalx.assertions.user_schema`).
    """
    ok, doc, error = parse_json(ctx.text.strip())
    if not ok:
        return Verdict.no(f"not JSON ({error}): {short(ctx.text)}")
    validator = user_validator(schema)  # a broken schema raises: an assertion error, not a failure
    try:
        errors = list(validator.iter_errors(doc))
    except referencing.exceptions.Unresolvable as exc:  # a $ref outside the schema (never fetched) or to nothing
        raise ValueError(refused_ref_reason(exc)) from None
    if not errors:
        return Verdict.ok("matches the schema")
    first = jsonschema.exceptions.best_match(errors) or errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Verdict.no(f"{_json_location(first.absolute_path)}: {first.message}{more}")


def spec_problems(spec: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """Problems in an assertion spec that its type's JSON Schema cannot see: (key path in the spec, message) each.

    A ``json_schema`` whose ``$ref`` points outside the schema (``evalx validate``
    reports it; at run time it is refused, never fetched).
    """
    if isinstance(spec, dict) and spec.get("type") == "json_schema" and isinstance(spec.get("schema"), dict):
        return [(("schema", *path), message) for path, message in schema_problems(spec["schema"])]
    return []


def _json_location(path: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


_MISSING: Any = object()

_PATH_TOKEN = re.compile(r"""\.?([^.\[\]]+)|\[\s*(-?\d+)\s*\]|\[\s*(['"])(.*?)\3\s*\]""")


def parse_path(path: str) -> list[str | int]:
    """``a.b[0]["c.d"]`` (optionally starting with ``$``) as keys and indexes."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        m = _PATH_TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot read JSON path {path!r} at {text[pos:]!r}")
        if m.group(1) is not None:
            steps.append(m.group(1))
        elif m.group(2) is not None:
            steps.append(int(m.group(2)))
        else:
            steps.append(m.group(4))
        pos = m.end()
    if not steps:
        raise ValueError(f"JSON path {path!r} is empty")
    return steps


def walk_path(doc: Any, steps: list[str | int]) -> tuple[bool, Any, str]:
    """Follow ``steps`` into ``doc``: (found, value, where it stopped)."""
    node = doc
    for i, step in enumerate(steps):
        where = _json_location(steps[: i + 1])
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and (isinstance(step, int) or step.isdigit()):
            index = int(step)
            if not -len(node) <= index < len(node):
                return False, None, where
            node = node[index]
        else:
            return False, None, where
    return True, node, ""


@assertion("json_path")
def json_path(ctx: AssertionContext, *, path: str, value: Any = _MISSING) -> Verdict:
    """The output is JSON and the path (like ``a.b[0].c``) exists, or holds the value when one is given."""
    steps = parse_path(path)
    ok, doc, error = parse_json(ctx.text.strip())
    if not ok:
        return Verdict.no(f"not JSON ({error}): {short(ctx.text)}")
    found, got, where = walk_path(doc, steps)
    if not found:
        return Verdict.no(f"{path} not found (nothing at {where})")
    if value is _MISSING:
        return Verdict.ok(f"{path} exists")
    if json_equal(got, value):
        return Verdict.ok(f"{path} = {short(value)}")
    return Verdict.no(f"{path}: expected {short(value)}, got {short(got)}")


# -- custom -------------------------------------------------------------------


def _accepts_config(fn: Any) -> bool:
    params = inspect.signature(fn).parameters.values()
    return any(p.name == "config" or p.kind is p.VAR_KEYWORD for p in params)


@assertion("python", schema={"threshold": {"type": "number", "minimum": 0, "maximum": 1}})
async def python(
    ctx: AssertionContext,
    *,
    callable: str,
    config: dict[str, Any] | None = None,
    threshold: float = 0.5,
) -> Verdict:
    """A custom check ``fn(output, ctx)`` named as "module:function", "file.py:function" or "file.py:Class.method"."""
    fn = resolve_callable(callable, ctx.config_dir)
    if config is not None and not _accepts_config(fn):
        raise TypeError(f"{callable} does not take a 'config' keyword")
    result = fn(ctx.text, ctx, config=config) if config is not None else fn(ctx.text, ctx)
    if inspect.isawaitable(result):
        result = await result
    return _to_verdict(result, callable, threshold)


def _to_verdict(result: Any, name: str, threshold: float) -> Verdict:
    if isinstance(result, Verdict):
        return result
    if isinstance(result, bool):
        return Verdict(result, float(result), f"{name} returned {result}")
    if isinstance(result, (int, float)):
        score = _check_score(float(result), name)
        return Verdict(score >= threshold, score, f"{name} scored {_fmt(score)} (threshold {_fmt(threshold)})")
    if isinstance(result, dict):
        passed = result.get("pass", result.get("passed"))
        raw_score = result.get("score")
        if passed is None and raw_score is None:
            raise ValueError(f"{name} returned a dict without 'pass' or 'score'")
        dict_score = None if raw_score is None else _check_score(float(raw_score), name)
        if passed is None:
            passed = dict_score is not None and dict_score >= threshold
        reason = str(result.get("reason") or f"{name} returned pass={bool(passed)}")
        return Verdict(bool(passed), float(bool(passed)) if dict_score is None else dict_score, reason)
    raise TypeError(f"{name} returned {type(result).__name__}; expected bool, float, dict or Verdict")


def _check_score(score: float, name: str) -> float:
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"{name} returned score {score}, outside 0..1")
    return score
