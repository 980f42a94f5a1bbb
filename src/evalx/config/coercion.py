"""``${VAR}`` where the config schema wants a number or a boolean: the interpolated text read as one.

The environment holds text, so ``concurrency: ${J:-8}`` loads as ``'8'``.
Before the config is checked against its schema, each value that
interpolation produced (and only those: a literal ``'50'`` in quotes stays a
string error) is read as the integer, number or boolean the schema wants at
its key path; text that is not one is an error naming the key, what was
written and what it gave.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from evalx.common.documents import KeyPath, SchemaValidator
from evalx.common.json_types import JSON, JSONObject, as_array, as_object

__all__ = ["coerce_interpolated", "schema_types_at"]

_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
_WHAT = {"integer": "an integer", "number": "a number", "boolean": "a boolean (true or false)"}


def coerce_interpolated(
    data: Any, interpolated: Mapping[KeyPath, str], schema: JSONObject, missing: Collection[KeyPath] = ()
) -> list[tuple[KeyPath, str]]:
    """Replace, in ``data``, each interpolated string the schema wants as a number or boolean; the problems as (key path, message).

    ``missing`` holds the key paths whose variable was unset: such a value is
    left out of its mapping (the default applies), since the unset variable
    is reported where it matters (``Config.check_env``: only for what runs).
    """
    problems: list[tuple[KeyPath, str]] = []
    for path, written in interpolated.items():
        parent = _parent(data, path)
        if parent is None:
            continue
        value = parent[path[-1]]
        if not isinstance(value, str):
            continue
        types = schema_types_at(schema, data, path)
        wanted: list[str] = [t for t in ("integer", "number", "boolean") if t in types]
        if not wanted or "string" in types or value.strip() in _string_consts(schema, data, path):
            continue  # text the schema takes as it is (``concurrency: ${C:-auto}``)
        coerced = _coerce(value.strip(), wanted)
        if coerced is None and path in missing and isinstance(parent, dict) and not value.strip():
            del parent[path[-1]]
        elif coerced is None:
            what = " or ".join(_WHAT[t] for t in wanted)
            problems.append((path, f"{written!r} gave {value!r}, not {what}"))
        else:
            parent[path[-1]] = coerced[0]
    return problems


def _parent(data: Any, path: KeyPath) -> Any:
    """The mapping or list holding the value at ``path`` (None if the path no longer leads there)."""
    if not path:
        return None
    node = data
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    last = path[-1]
    if (isinstance(node, dict) and last in node) or (isinstance(node, list) and isinstance(last, int) and last < len(node)):
        return node
    return None


def _coerce(text: str, wanted: list[str]) -> tuple[Any] | None:
    for kind in wanted:
        if kind == "integer" and _INTEGER.fullmatch(text):
            return (int(text),)
        if kind == "number" and _NUMBER.fullmatch(text):
            number = float(text)
            if math.isfinite(number):
                return (int(text) if _INTEGER.fullmatch(text) else number,)
        if kind == "boolean" and text.lower() in _BOOLEANS:
            return (_BOOLEANS[text.lower()],)
    return None


def schema_types_at(schema: JSONObject, data: Any, path: KeyPath) -> set[str]:
    """The JSON types ``schema`` allows for the value at ``path`` of ``data``.

    Follows ``properties``, ``additionalProperties``, ``items``, local
    ``$ref``, ``allOf``/``anyOf``/``oneOf``, and the ``then`` or ``else`` of an
    ``if``, as it holds for the instance (targets and assertions dispatch on
    ``type:`` that way). Empty when the schema says nothing.
    """
    types: set[str] = set()
    for s in _schemas_at(schema, data, path):
        kind = s.get("type")
        types.update([kind] if isinstance(kind, str) else [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else [])
    return types


def _schemas_at(schema: JSONObject, data: Any, path: KeyPath) -> list[JSONObject]:
    """The sub-schemas of ``schema`` that apply to the value at ``path`` of ``data`` (see :func:`schema_types_at`)."""
    schemas = list(_expand(schema, schema, data))
    node = data
    for key in path:
        try:
            child = node[key]
        except (KeyError, IndexError, TypeError):
            child = None
        nexts: list[JSONObject] = []
        for s in schemas:
            sub: JSON
            if isinstance(key, str):
                sub = as_object(s.get("properties")).get(key)
                extra = s.get("additionalProperties")
                if sub is None and isinstance(extra, dict):
                    sub = extra
            else:
                items = s.get("items")
                sub = items if isinstance(items, dict) else None
            if sub is not None:
                nexts.extend(_expand(sub, schema, child))
        schemas, node = nexts, child
    return schemas


def _string_consts(schema: JSONObject, data: Any, path: KeyPath) -> set[str]:
    """The words the schema allows as they are at ``path`` (a ``const`` in one of its choices: ``auto``)."""
    return {str(s["const"]) for s in _schemas_at(schema, data, path) if isinstance(s.get("const"), str)}  # anyOf: each choice


def _expand(schema: JSON, root: JSONObject, instance: Any) -> Iterator[JSONObject]:
    """``schema`` and the sub-schemas that apply to ``instance`` at the same place."""
    stack: list[JSON] = [schema]
    seen = 0
    while stack and seen < 1000:
        s = stack.pop()
        seen += 1
        if not isinstance(s, dict):
            continue
        yield s
        ref = s.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: JSON = root
            for part in ref[2:].split("/"):
                target = target.get(part) if isinstance(target, dict) else None
            stack.append(target)
        for key in ("allOf", "anyOf", "oneOf"):
            stack.extend(as_array(s.get(key)))
        condition = s.get("if")
        if isinstance(condition, dict):
            stack.append(s.get("then") if SchemaValidator(condition).is_valid(instance) else s.get("else"))
