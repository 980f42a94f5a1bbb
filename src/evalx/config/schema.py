"""The config JSON Schema, written from the typed config records: one source of truth.

The records (``config/model.py`` and the section records it assembles) give
every key, its type and its constraints; assertion sub-schemas come from the
assertion registry (built-ins and the plugins loaded so far, their parameter
types read from their ``@assertion`` functions: the schema is rebuilt when a
type registers) and the case schema from the dataset loader. So
``schemas/evalconfig.schema.json`` (written by ``evalx schema``, pinned by a
test) and the records the loader builds can never drift from each other.
Targets and assertions dispatch on ``type:`` with ``if``/``then`` so a
mistake is reported against the right sub-schema, not as a raw ``oneOf``.
"""

from __future__ import annotations

import json

from evalx.common.json_types import JSONObject
from evalx.common.typeschema import object_schema

SCHEMA_ID = "https://evalx.dev/schemas/evalconfig.schema.json"


def _assertion_schema() -> tuple[JSONObject, JSONObject]:
    from evalx.assertions import registered

    types = registered()
    defs: JSONObject = {f"assert_{name}": t.schema() for name, t in types.items()}
    dispatch: JSONObject = {
        "type": "object",
        "properties": {"type": {"enum": list(types)}},
        "required": ["type"],
        "allOf": [
            {"if": {"properties": {"type": {"const": name}}, "required": ["type"]}, "then": {"$ref": f"#/$defs/assert_{name}"}}
            for name in types
        ],
    }
    return dispatch, defs


_cached: tuple[int, JSONObject] | None = None


def config_schema() -> JSONObject:
    """The config JSON Schema for the assertion types registered now (built-ins and loaded plugins)."""
    global _cached
    from evalx.assertions.registry import generation, registered

    registered()  # the built-ins and the entry-point plugins, before the generation is read
    if _cached is None or _cached[0] != generation():
        _cached = (generation(), _build_schema())
    return _cached[1]


def _build_schema() -> JSONObject:
    from evalx.config.model import EvalConfig
    from evalx.datasets.loader import CASE_SCHEMA
    from evalx.datasets.spec import DatasetSpec
    from evalx.judge.spec import JudgeSettings
    from evalx.targets.spec import target_schema

    assertion, assertion_defs = _assertion_schema()
    schema: JSONObject = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "evalx config (evalconfig.yaml)",
        **object_schema(EvalConfig),
        "$defs": {
            "target": target_schema(["id", "type"]),
            "judge_target": target_schema(["type"]),
            "dataset": object_schema(DatasetSpec),
            "case": CASE_SCHEMA,
            "assertion": assertion,
            "judge_override": object_schema(JudgeSettings),
            **assertion_defs,
        },
    }
    return schema


def tools_schema() -> JSONObject:
    """The schema of a target's ``tools:`` (a ``tools_file:`` is checked against it)."""
    from evalx.targets.spec import tools_schema as provider_tools_schema

    return provider_tools_schema()


def schema_json() -> str:
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"
