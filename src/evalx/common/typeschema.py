"""Typed config records and their JSON Schema, from one declaration: a frozen dataclass with annotated fields.

The config's sections are frozen dataclasses (``targets/spec.py``,
``datasets/spec.py``, ``judge/spec.py``, ``results/gates.py``,
``config/model.py``); each field's type says what the config may hold there,
and an :class:`Schema` in its ``Annotated[...]`` adds what a type cannot say
(a minimum, a pattern, a description, the YAML key when it is a Python
keyword). From that one declaration:

- :func:`schema_of` writes the JSON Schema (``config/schema.py`` assembles
  ``schemas/evalconfig.schema.json`` from it, and an ``@assertion``'s
  parameter types go through the same function), and
- :func:`build` turns a mapping the schema accepted into the typed records.

The JSON Schema stays the validator (its messages are the error contract:
``file:line key.path: message``); :func:`build` trusts what it accepted and
only converts, so a config is checked once. Plain dataclasses rather than
pydantic: the schema already validated, and pydantic's import and model
classes cost ≈ 0.1 s of a 0.65 s one-cell run (see docs/config.md).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar, Union

from evalx.common.json_types import JSON, JSONObject

__all__ = [
    "Fraction",
    "Id",
    "NonNegative",
    "PositiveInt",
    "PositiveNumber",
    "Schema",
    "build",
    "build_union",
    "object_schema",
    "properties",
    "required_keys",
    "schema_of",
]

T = TypeVar("T")


class Schema:
    """JSON Schema keywords for a field or a type, in ``Annotated[T, Schema(...)]``.

    ``build`` returns a schema fragment that replaces the one derived from the
    type, for the few places whose shape another owner defines (the case
    schema from the dataset loader, the assertion types from the registry);
    ``ref`` makes the field a ``$ref`` to ``#/$defs/<ref>``; ``key`` is the
    YAML key when it differs from the field name (``assert``, ``not``);
    ``rest`` marks the field that gathers the keys no other field names (an
    assertion's parameters), which the schema leaves to another owner.
    """

    __slots__ = ("build", "key", "keywords", "ref", "rest")

    def __init__(
        self,
        *,
        build: Callable[[], JSONObject] | None = None,
        ref: str | None = None,
        key: str | None = None,
        rest: bool = False,
        **keywords: Any,
    ) -> None:
        self.build = build
        self.ref = ref
        self.key = key
        self.rest = rest
        self.keywords = keywords


#: the value types every section uses
Id = Annotated[str, Schema(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$", description="An identifier: letters, digits, _ . : -")]
PositiveInt = Annotated[int, Schema(minimum=1)]
PositiveNumber = Annotated[float, Schema(exclusiveMinimum=0)]
NonNegative = Annotated[float, Schema(minimum=0)]
Fraction = Annotated[float, Schema(minimum=0, maximum=1)]

_PRIMITIVES: dict[object, JSONObject] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    Any: {},
    object: {},
    type(None): {"type": "null"},
}


def _split(hint: Any) -> tuple[Any, list[Schema]]:
    """The type inside ``Annotated[...]`` and its :class:`Schema` marks."""
    marks: list[Schema] = []
    while typing.get_origin(hint) is typing.Annotated:
        args = typing.get_args(hint)
        hint = args[0]
        marks = [m for m in args[1:] if isinstance(m, Schema)] + marks
    return hint, marks


def _union_members(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return None


def schema_of(hint: Any) -> JSONObject:
    """The JSON Schema of a type hint; ``X | None`` is ``X`` (absence is the None); unknown hints accept anything."""
    hint, marks = _split(hint)
    if any(m.ref for m in marks):
        return {"$ref": f"#/$defs/{next(m.ref for m in marks if m.ref)}"}
    built = next((m.build for m in marks if m.build is not None), None)
    out = dict(built()) if built is not None else _schema_of_type(hint)
    keywords = {k: v for mark in marks for k, v in mark.keywords.items()}
    if "anyOf" in out:  # a choice reads better after what it is for
        return {**keywords, **out}
    return {**out, **keywords}


def _schema_of_type(hint: Any) -> JSONObject:
    if hint in _PRIMITIVES:
        return dict(_PRIMITIVES[hint])
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return object_schema(hint)
    members = _union_members(hint)
    if members is not None:
        if len(members) == 1:
            return schema_of(members[0])
        return {"anyOf": [schema_of(a) for a in members]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        item = schema_of(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        value = schema_of(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    if origin is typing.Literal:
        return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
    return {}


#: (field, YAML key, type, marks) of each record class, read once (annotations are evaluated then)
_FIELDS: dict[type, list[tuple[dataclasses.Field[Any], str, Any, list[Schema]]]] = {}


def _fields(cls: type) -> list[tuple[dataclasses.Field[Any], str, Any, list[Schema]]]:
    """(field, YAML key, type, marks) for each field of a record."""
    out = _FIELDS.get(cls)
    if out is None:
        fields = dataclasses.fields(cls)
        if any(isinstance(f.type, str) for f in fields):  # a module with PEP 563 annotations: evaluate them
            hints = typing.get_type_hints(cls, include_extras=True)
        else:  # already evaluated when the class was made
            hints = {f.name: f.type for f in fields}
        out = []
        for f in fields:
            marks = _split(hints[f.name])[1]
            key = next((m.key for m in marks if m.key), f.name)
            out.append((f, key, hints[f.name], marks))
        _FIELDS[cls] = out
    return out


def required_keys(cls: type) -> list[str]:
    """The YAML keys of the fields without a default."""
    return [
        key
        for f, key, _, marks in _fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and not any(m.rest for m in marks)
    ]


#: :func:`properties` of each record class, written once (a class's fields, and so their schemas, never change)
_PROPERTIES: dict[type, dict[str, JSONObject]] = {}


def properties(cls: type) -> dict[str, JSONObject]:
    """The schema of each field of a record, by YAML key (the ``rest`` field left out); shared: copy before changing it."""
    out = _PROPERTIES.get(cls)
    if out is None:
        out = {key: schema_of(hint) for _, key, hint, marks in _fields(cls) if not any(m.rest for m in marks)}
        _PROPERTIES[cls] = out
    return out


def object_schema(cls: type) -> JSONObject:
    """A record's schema: its fields, the required ones, no other key, then the class's ``SCHEMA`` keywords."""
    out: JSONObject = {"type": "object", "properties": dict(properties(cls))}
    required = required_keys(cls)
    if required:
        out["required"] = list[JSON](required)
    out["additionalProperties"] = False
    extra: Schema | None = getattr(cls, "SCHEMA", None)
    if extra is not None:
        out.update(extra.build() if extra.build is not None else {})
        out.update(extra.keywords)
    return out


# --- building records from validated data -----------------------------------------------


def build(cls: type[T], data: Mapping[str, object]) -> T:
    """The record ``cls`` of a mapping the schema accepted (missing keys take the fields' defaults)."""
    kwargs: dict[str, Any] = {}
    rest_field: str | None = None
    named: set[str] = set()
    for f, key, hint, marks in _fields(cls):
        if any(m.rest for m in marks):
            rest_field = f.name
            continue
        named.add(key)
        if key in data:
            kwargs[f.name] = _convert(hint, data[key])
    if rest_field is not None:
        kwargs[rest_field] = {k: v for k, v in data.items() if k not in named}
    return cls(**kwargs)


def build_union(members: Sequence[type[T]], data: Mapping[str, object]) -> T:
    """The record for ``data`` among ``members``, chosen by its ``type:`` (each member's ``KIND``)."""
    if len(members) == 1:
        return build(members[0], data)
    kind = data.get("type")
    for cls in members:
        if getattr(cls, "KIND", None) == kind:
            return build(cls, data)
    raise ValueError(f"no record for type {kind!r} among {[c.__name__ for c in members]}")


def _flat_members(hint: Any) -> list[Any] | None:
    """The types of a union, with unions inside it (``str | Annotated[A | B, ...]``) opened; None for a non-union."""
    members = _union_members(hint)
    if members is None:
        return None
    out: list[Any] = []
    for member in members:
        inner = _split(member)[0]
        nested = _flat_members(inner)
        out.extend(nested if nested is not None else [inner])
    return out


def _convert(hint: Any, value: Any) -> Any:
    hint, _ = _split(hint)
    if value is None:
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build(hint, value) if isinstance(value, Mapping) else value
    members = _flat_members(hint)
    if members is not None:
        records = [m for m in members if isinstance(m, type) and dataclasses.is_dataclass(m)]
        if records and isinstance(value, Mapping):
            return build_union(records, value)
        others = [a for a in members if a not in records]
        return _convert(others[0], value) if len(others) == 1 else value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (tuple, list, Sequence) and isinstance(value, list | tuple):
        item = args[0] if args else Any
        return tuple(_convert(item, v) for v in value)
    if origin in (dict, Mapping) and isinstance(value, Mapping) and len(args) == 2 and _split(args[1])[0] not in (Any, object):
        return {k: _convert(args[1], v) for k, v in value.items()}
    return value
