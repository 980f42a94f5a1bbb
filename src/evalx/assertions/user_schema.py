"""Users' JSON Schemas (``json_schema`` assertions): references resolved inside the schema only, regexes and work bounded.

A schema in a dataset may come from anywhere, and the document it checks is
a model's output. So:

- ``$ref`` resolves only inside the schema itself (``#/$defs/x``, an
  ``$id`` the schema declares) or to a JSON Schema meta-schema evalx ships
  (``https://json-schema.org/draft/2020-12/schema``). Anything else (``http:``,
  ``https:``, ``file:``, a relative file name) is reported by
  :func:`schema_problems` when the config is validated, and refused when
  validating at run time: the registry's ``retrieve`` never fetches.
- ``pattern``, ``patternProperties`` and the ``additionalProperties`` /
  ``unevaluatedProperties`` that depend on them match with
  :func:`evalx.common.regexes.search` (a time limit, never ``re``), ``uniqueItems``
  takes linear time, and the keywords that walk the document check the
  scoring budget as they go.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urldefrag, urljoin

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from evalx.common import regexes
from evalx.common.json_types import JSONObject
from evalx.errors import RefusedRef, UnsupportedSchema

__all__ = ["RefusedRef", "UnsupportedSchema", "refused_ref_reason", "schema_problems", "user_validator"]

KeyPath = tuple[str | int, ...]

#: keywords whose value is a mapping of names to schemas / a list of schemas / a schema
_SCHEMA_MAPS = frozenset({"$defs", "definitions", "properties", "patternProperties", "dependentSchemas", "dependencies"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_ONE = frozenset(
    {
        "not", "if", "then", "else", "items", "additionalItems", "additionalProperties", "unevaluatedItems",
        "unevaluatedProperties", "contains", "propertyNames", "contentSchema",
    }
)  # fmt: skip
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


#: jsonschema's ``unevaluatedProperties`` matches ``patternProperties`` with ``re``, which cannot be stopped
_BOTH = ("unevaluatedProperties", "patternProperties")
_BOTH_MESSAGE = "unevaluatedProperties together with patternProperties is not supported (use additionalProperties)"


def _is_shipped(uri: str) -> bool:
    """A JSON Schema meta-schema that ``referencing`` ships (resolved from memory, never fetched)."""
    try:
        referencing.jsonschema.specification_with(uri)
    except referencing.jsonschema.UnknownDialect:
        return False
    return True


def schema_problems(schema: Any) -> list[tuple[KeyPath, str]]:
    """What evalx refuses in a user's schema: (its key path in the schema, a one-line message) for each.

    Each ``$ref`` that points outside the schema or to nothing in it, and
    ``unevaluatedProperties`` used with ``patternProperties``.
    """
    found: list[tuple[KeyPath, str]] = []
    ids: set[str] = {""}
    seen_keys: dict[str, KeyPath] = {}
    bases: dict[KeyPath, str] = {}  # the base URI each $ref resolves against
    refs: list[tuple[KeyPath, str, str]] = []  # (path, ref, its absolute target)

    def walk(node: Any, path: KeyPath, base: str, depth: int) -> None:
        if depth > 200 or not isinstance(node, dict):
            return
        own_id = node.get("$id", node.get("id"))
        if isinstance(own_id, str) and not own_id.startswith("#"):
            base = urljoin(base, own_id)
            ids.add(urldefrag(base).url)
        for key in _REF_KEYS:
            ref = node.get(key)
            if isinstance(ref, str):
                refs.append(((*path, key), ref, urldefrag(urljoin(base, ref)).url))
                bases[(*path, key)] = base
        for key, value in node.items():
            if key in _BOTH:
                seen_keys.setdefault(key, (*path, key))
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    walk(sub, (*path, key, name), base, depth + 1)
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                for i, sub in enumerate(value):
                    walk(sub, (*path, key, i), base, depth + 1)
            elif key in _SCHEMA_ONE:
                walk(value, (*path, key), base, depth + 1)

    walk(schema, (), "", 0)
    resolver = _local_resolver(schema)
    for path, ref, target in refs:
        if target in ids:
            if resolver is not None and not _resolves(resolver, urljoin(bases[path], ref)):
                found.append((path, f"$ref {ref!r} points to nothing in the schema"))
            continue
        if _is_shipped(target):
            continue
        found.append((path, f"$ref {ref!r} points outside the schema: evalx resolves only references inside it (like '#/$defs/name')"))
    if all(key in seen_keys for key in _BOTH):
        found.append((seen_keys["unevaluatedProperties"], _BOTH_MESSAGE))
    return found


def refused_ref_reason(exc: BaseException) -> str:
    """Why a ``$ref`` did not resolve (``exc`` is ``referencing``'s ``Unresolvable``), in one line."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, RefusedRef):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return f"$ref {getattr(exc, 'ref', '')!r} does not resolve inside the schema"


def _local_resolver(schema: JSONObject) -> Any:
    """A resolver over the schema alone (its embedded ``$id`` resources included), or None if it cannot be made."""
    try:
        dialect = schema.get("$schema")
        spec = referencing.jsonschema.specification_with(
            dialect if isinstance(dialect, str) else "", default=referencing.jsonschema.DRAFT202012
        )
        resource = spec.create_resource(schema)
        root = resource.id() or ""
        registry: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]
        return registry.with_resource(root, resource).crawl().resolver(base_uri=root)
    except Exception:  # a schema referencing cannot read: jsonschema words it when the check runs
        return None


def _resolves(resolver: Any, uri: str) -> bool:
    try:
        resolver.lookup(uri)
    except referencing.exceptions.Unresolvable:
        return False
    except Exception:  # anything else is not this check's to report
        return True
    return True


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise RefusedRef(f"$ref {uri!r} points outside the schema: evalx never fetches a schema (resolve it into '$defs')")


_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


# -- keywords: bounded versions of jsonschema's own -----------------------------


def _matches(pattern: str, text: str) -> bool:
    return regexes.search(regexes.compile_user(pattern), text) is not None


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, pattern_properties: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for k, v in instance.items():
            regexes.checkpoint()
            if _matches(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_of(instance: JSONObject, schema: Any) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for name in instance:
        regexes.checkpoint()
        if name in properties or any(_matches(p, name) for p in patterns):
            continue
        extras.append(name)
    return extras


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional_of(instance, schema)
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            shown = ", ".join(repr(e) for e in sorted(extras, key=str))
            yield ValidationError(f"Additional properties are not allowed ({shown} {verb} unexpected)")


def _json_key(value: Any) -> Any:
    """A hashable key equal for values JSON Schema calls equal (``1`` and ``1.0``; not ``true`` and ``1``)."""
    regexes.checkpoint()
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if isinstance(value, dict):
        return ("obj", frozenset((k, _json_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("arr", tuple(_json_key(v) for v in value))
    return (type(value).__name__, value)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # jsonschema compares unhashable items pairwise: a list of 100,000 objects took hours
    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            key = _json_key(item)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


def _checked(fn: Any) -> Any:
    """``fn`` (a keyword that walks the document) with a budget check each time it runs."""

    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        regexes.checkpoint()
        yield from fn(validator, value, instance, schema)

    return keyword


#: keywords that descend into the document or the schema: each call checks the budget
_WALKERS = (
    "properties", "items", "prefixItems", "additionalItems", "contains", "propertyNames", "dependentSchemas",
    "dependencies", "allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef", "unevaluatedItems",
)  # fmt: skip

_classes: dict[Any, Any] = {}


def _bounded_class(cls: Any) -> Any:
    """``cls`` (a jsonschema validator class) with the keywords above replaced or checked."""
    bounded = _classes.get(cls)
    if bounded is None:
        own = cls.VALIDATORS
        replaced: dict[str, Callable[..., Any]] = {name: _checked(own[name]) for name in _WALKERS if name in own}
        replaced.update(pattern=_pattern, patternProperties=_pattern_properties, additionalProperties=_additional_properties)
        replaced["uniqueItems"] = _unique_items
        if "unevaluatedProperties" in own:
            replaced["unevaluatedProperties"] = _checked(own["unevaluatedProperties"])
        bounded = _classes[cls] = validators.extend(cls, replaced)  # type: ignore[no-untyped-call]
    return bounded


_validators: dict[str, Validator] = {}


def user_validator(schema: Any) -> Any:
    """A validator for a user's schema (checked against its meta-schema; a broken one raises); cached by content."""
    try:
        fingerprint = json.dumps(schema, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        fingerprint = None
    cached = _validators.get(fingerprint) if fingerprint is not None else None
    if cached is not None:
        return cached
    cls = validators.validator_for(schema)
    cls.check_schema(schema)  # a broken schema is an assertion error, not a failure
    problems = [message for _, message in schema_problems(schema) if message == _BOTH_MESSAGE]
    if problems:
        raise UnsupportedSchema(problems[0])
    validator = _bounded_class(cls)(schema, registry=_REGISTRY)
    if fingerprint is not None:
        if len(_validators) >= 256:
            _validators.clear()
        _validators[fingerprint] = validator
    return validator
