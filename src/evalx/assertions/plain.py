"""A fast path for validating assertion specs: a plain-Python check that a spec surely matches its type's schema.

A dataset of 10,000 cases, each with its own ``contains`` value, has 10,000
distinct assertion specs; running jsonschema over each was the largest cost
that distinct specs add to loading a dataset (bench/RESULTS.md). Each
type's JSON Schema is compiled once into a predicate that understands the
keywords assertion schemas use (``type``, ``const``, ``enum``, ``anyOf``,
``allOf``, ``items``, number bounds, string lengths, ``pattern``,
``properties``/``required``/``additionalProperties``). The predicate answers
True only when jsonschema surely finds no error; anything it does not
understand (a ``$ref``, a float given for an integer...) makes it answer
False, and the caller then validates with jsonschema, which also words the
errors. So the fast path makes validation cheaper, never different
(tests/test_fast_paths.py checks it against jsonschema on random specs).

Worth keeping (issue 29, bench/RESULTS.md "Fast paths retired or kept"):
jsonschema costs 20 µs a case more (20,000 instant Python cases, each its
own ``contains``, loaded and planned in-process: 0.50 s against 0.91 s CPU),
15-18 % of a cell of issue 16's million-cell workload; 4.6 % of an instant
5,000-cell provider run; 17 % of ``evalx validate`` of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from evalx.assertions.registry import AssertionType
from evalx.common.json_types import JSON, JSONObject

__all__ = ["compile_schema", "plainly_valid"]

Check = Callable[[Any], bool]

#: keywords that only annotate: jsonschema asserts nothing for them
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"})


def _never(value: Any) -> bool:
    return False


def _always(value: Any) -> bool:
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite_number(value: Any) -> bool:
    """The ``number`` type as evalx's own schemas mean it (documents.SchemaValidator): NaN and infinity are not numbers."""
    return _is_number(value) and (isinstance(value, int) or value - value == 0.0)


#: JSON Schema type name -> a check that a value surely has it (False when unsure: 1.0 as an integer)
_TYPES: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "number": _is_finite_number,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


#: the JSON scalars' types: ``const`` and ``enum`` are decided here for these only
_SCALARS = (str, int, float, bool, type(None))


def _same_json(a: Any, b: Any) -> bool:
    """``a`` equals ``b`` as JSON Schema's ``const``/``enum`` see it, for scalars; False when unsure."""
    return type(a) is type(b) and isinstance(a, _SCALARS) and a == b


def _const(arg: JSON) -> Check:
    """:func:`_same_json` with ``arg``, its type looked at once (a ``type: {const: NAME}`` is checked for every spec)."""
    if not isinstance(arg, _SCALARS):
        return _never  # (no value is the same as a list or a mapping, as _same_json sees it)
    kind = type(arg)
    return lambda v: type(v) is kind and v == arg


def compile_schema(schema: JSON) -> Check:
    """A predicate that is True only for values ``schema`` surely accepts (False for any doubt)."""
    if schema is True or schema == {}:
        return _always
    if not isinstance(schema, dict):
        return _never
    checks: list[Check] = []
    for key, arg in schema.items():
        if key in _ANNOTATIONS:
            continue
        check = _keyword(key, arg, schema)
        if check is None:
            return _never  # a keyword this fast path does not understand: jsonschema decides
        if check is not _always:
            checks.append(check)
    return _all(checks)


def _all(checks: list[Check]) -> Check:
    """True when every check is (written out for the common short lists: this runs per assertion spec)."""
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda v: a(v) and b(v)
    if len(checks) == 3:
        a, b, c = checks
        return lambda v: a(v) and b(v) and c(v)
    return lambda v: all(check(v) for check in checks)


def _any(checks: list[Check]) -> Check:
    """True when some check is."""
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda v: a(v) or b(v)
    return lambda v: any(check(v) for check in checks)


def _keyword(key: str, arg: JSON, schema: JSONObject) -> Check | None:
    """The check for one keyword of ``schema``, or None when it is not understood."""
    if key == "type":
        written = arg if isinstance(arg, list) else [arg]
        names = [n for n in written if isinstance(n, str) and n in _TYPES]
        if not names or len(names) != len(written):
            return None
        return _any([_TYPES[n] for n in names])
    if key == "const":
        return _const(arg)
    if key == "enum":
        if not isinstance(arg, list):
            return None
        members = list(arg)
        return lambda v: any(_same_json(v, m) for m in members)
    if key == "anyOf":
        if not isinstance(arg, list) or not arg:
            return None
        return _any([compile_schema(s) for s in arg])
    if key == "allOf":
        if not isinstance(arg, list) or not arg:
            return None
        return _all([compile_schema(s) for s in arg])
    if key == "items":
        item = compile_schema(arg)
        return lambda v: not isinstance(v, list) or all(item(x) for x in v)
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if not isinstance(arg, int | float) or isinstance(arg, bool):
            return None
        return _bound(key, arg)
    if key == "pattern":
        if not isinstance(arg, str):
            return None
        try:
            regex = re.compile(arg)  # what jsonschema's ``pattern`` uses: ``re.search``
        except re.error:
            return None
        return lambda v: not isinstance(v, str) or regex.search(v) is not None
    if key in ("minLength", "maxLength", "minItems", "maxItems"):
        if not isinstance(arg, int) or isinstance(arg, bool):
            return None
        return _length(key, arg)
    if key == "required":
        if not isinstance(arg, list) or not all(isinstance(k, str) for k in arg):
            return None
        needed = frozenset(arg)
        return lambda v: not isinstance(v, dict) or needed <= v.keys()
    if key == "properties":
        if not isinstance(arg, dict):
            return None
        return _properties(arg, schema.get("additionalProperties", True))
    if key == "additionalProperties":
        if arg is True or "properties" in schema:
            return _always  # checked with the properties
        return None
    return None


def _bound(key: str, limit: float) -> Check:
    # written so NaN (every comparison False) is never "surely valid"
    if key == "minimum":
        return lambda v: not _is_number(v) or v >= limit
    if key == "maximum":
        return lambda v: not _is_number(v) or v <= limit
    if key == "exclusiveMinimum":
        return lambda v: not _is_number(v) or v > limit
    return lambda v: not _is_number(v) or v < limit


def _length(key: str, n: int) -> Check:
    kind = str if key.endswith("Length") else list
    if key.startswith("min"):
        return lambda v: not isinstance(v, kind) or len(v) >= n
    return lambda v: not isinstance(v, kind) or len(v) <= n


def _properties(properties: JSONObject, additional: JSON) -> Check | None:
    if additional is not True and additional is not False:
        return None
    props = {name: compile_schema(sub) for name, sub in properties.items()}
    closed = additional is False

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True  # ``properties`` only applies to objects
        for key, item in value.items():
            prop = props.get(key) if isinstance(key, str) else None
            if prop is None:
                if closed:
                    return False
            elif not prop(item):
                return False
        return True

    return check


_compiled: dict[str, tuple[JSONObject, Check]] = {}


def plainly_valid(atype: AssertionType, spec: Any) -> bool:
    """True when ``spec`` surely passes ``atype``'s schema (so jsonschema need not run on it).

    Each type's schema is compiled once (again if the type is registered anew).
    """
    schema = atype.schema()
    cached = _compiled.get(atype.name)
    if cached is None or cached[0] is not schema:
        cached = _compiled[atype.name] = (schema, compile_schema(schema))
    return cached[1](spec)
