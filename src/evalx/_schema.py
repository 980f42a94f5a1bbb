"""The config JSON Schema, built from one source of truth.

Assertion sub-schemas come from the assertion registry and the case schema
from the dataset loader, so ``schemas/evalconfig.schema.json`` (written by
``evalx schema``, pinned by a test) can never drift from the code.
Targets and assertions dispatch on ``type:`` with ``if``/``then`` so a
mistake is reported against the right sub-schema, not as a raw ``oneOf``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

SCHEMA_ID = "https://evalx.dev/schemas/evalconfig.schema.json"

_ID = {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$", "description": "An identifier: letters, digits, _ . : -"}
_POS_INT = {"type": "integer", "minimum": 1}
_POS_NUM = {"type": "number", "exclusiveMinimum": 0}
_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

_RUN_SETTINGS: dict[str, Any] = {
    "concurrency": {**_POS_INT, "description": "Cells in flight at once, per target."},
    "timeout_s": {**_POS_NUM, "description": "Per-cell timeout in seconds."},
    "retries": {"type": "integer", "minimum": 0, "description": "Retries on transport errors, 429 and 5xx."},
    "cache": {"type": "boolean", "description": "Cache responses (default: on for provider targets, off otherwise)."},
}

_PRICING = {
    "type": "object",
    "properties": {
        "input_per_mtok": {"type": "number", "minimum": 0},
        "output_per_mtok": {"type": "number", "minimum": 0},
        "cached_input_per_mtok": {"type": "number", "minimum": 0},
    },
    "additionalProperties": False,
}

_TARGET_COMMON: dict[str, Any] = {
    "id": _ID,
    "type": {"enum": ["python", "engine", "provider"]},
    "description": {"type": "string"},
    **_RUN_SETTINGS,
    "vars": {"type": "object"},
}

_TARGETS: dict[str, dict[str, Any]] = {
    "python": {
        "properties": {
            "callable": {
                "type": "string",
                "pattern": r"^[^:]+:[A-Za-z_][A-Za-z0-9_.]*$",
                "description": "module:function or path/to/file.py:function (relative to the config).",
            },
        },
        "required": ["callable"],
    },
    "engine": {
        "properties": {
            "url": {"type": "string", "description": "Base URL; evalx POSTs to {url}/execute."},
            "api_key": {"type": "string", "description": "Sent as X-Engine-Key; never written anywhere."},
            "headers": _STR_MAP,
            "body": {"description": "Request body template (Jinja2 in every string)."},
            "idle_timeout_s": {**_POS_NUM, "description": "Fail when the stream sends nothing for this long."},
            "end_event": {"type": "string", "description": "Event type that ends a complete stream (e.g. done)."},
            "max_events": {**_POS_INT, "description": "Events kept per cell in results (default 1000)."},
        },
        "required": ["url"],
    },
    "provider": {
        "properties": {
            "provider": {"type": "string", "description": "A provider definition name (providers/NAME.yaml)."},
            "model": {"type": "string"},
            "base_url": {"type": "string"},
            "api_key": {"type": "string"},
            "headers": _STR_MAP,
            "params": {"type": "object", "description": "Request parameters: temperature, max_tokens, ..."},
            "system": {"type": "string"},
            "prompt": {"type": "string", "description": "User message template (Jinja2 over case, vars)."},
            "messages": {"type": "array", "items": {"type": "object"}},
            "tools": {"type": "array", "items": {"type": "object"}},
            "pricing": _PRICING,
            "rate_limit": {
                "type": "object",
                "properties": {"rpm": _POS_NUM},
                "additionalProperties": False,
            },
        },
        "required": ["provider", "model"],
    },
}

_GATE_SET: dict[str, Any] = {
    "min_pass_rate": _FRACTION,
    "max_pass_rate_drop": _FRACTION,
    "no_new_failures": {"type": "boolean"},
    "max_cost_increase": {"type": "number", "minimum": 0},
    "max_p99_increase": {"type": "number", "minimum": 0},
}

_JUDGE_SETTINGS: dict[str, Any] = {
    "target": {
        "description": "A target id, or an inline provider target.",
        "anyOf": [{"type": "string"}, {"$ref": "#/$defs/target"}],
    },
    "threshold": _FRACTION,
    "prompt": {"type": "string", "description": "Jinja2 template with case, output, rubric, expected."},
    "samples": {**_POS_INT, "description": "Ask N times and take the majority."},
    "temperature": {"type": "number", "minimum": 0},
    "allow_self_grading": {"type": "boolean"},
}


def _target_schema() -> dict[str, Any]:
    branches = []
    for kind, sub in _TARGETS.items():
        branches.append(
            {
                "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
                "then": {
                    "properties": {**_TARGET_COMMON, **sub["properties"]},
                    "required": sub["required"],
                    "additionalProperties": False,
                },
            }
        )
    return {
        "type": "object",
        "properties": {"id": _ID, "type": _TARGET_COMMON["type"]},
        "required": ["id", "type"],
        "allOf": branches,
    }


def _assertion_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    from .assertions import registered

    types = registered()
    defs = {f"assert_{name}": t.schema() for name, t in types.items()}
    dispatch = {
        "type": "object",
        "properties": {"type": {"enum": list(types)}},
        "required": ["type"],
        "allOf": [
            {"if": {"properties": {"type": {"const": name}}, "required": ["type"]}, "then": {"$ref": f"#/$defs/assert_{name}"}}
            for name in types
        ],
    }
    return dispatch, defs


@lru_cache(maxsize=1)
def config_schema() -> dict[str, Any]:
    from ._datasets import CASE_SCHEMA

    assertion, assertion_defs = _assertion_schema()
    dataset = {
        "type": "object",
        "properties": {
            "id": _ID,
            "description": {"type": "string"},
            "path": {"type": "string", "description": "A .jsonl/.json/.yaml/.csv file or a directory, relative to the config."},
            "cases": {"type": "array", "items": {"$ref": "#/$defs/case"}},
            "targets": {"type": "array", "items": {"type": "string"}, "description": "Targets this dataset applies to (default: all)."},
            "defaults": {"type": "object", "description": "Fields merged under every case (category, tags, assert...)."},
        },
        "required": ["id"],
        "additionalProperties": False,
    }
    gate_set = {"type": "object", "properties": _GATE_SET, "additionalProperties": False}
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "evalx config (evalconfig.yaml)",
        "type": "object",
        "properties": {
            "version": {"const": 1},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "defaults": {
                "type": "object",
                "properties": {
                    **_RUN_SETTINGS,
                    "repeat": {**_POS_INT, "description": "Samples per case and target."},
                    "targets": {"type": "array", "items": {"type": "string"}, "description": "Targets `evalx run` uses without --matrix."},
                    "idle_timeout_s": _POS_NUM,
                    "max_total_cost": {"type": "number", "minimum": 0, "description": "Stop scheduling cells past this spend (USD)."},
                    "repeat_pass_rule": {"enum": ["all", "majority", "any"]},
                },
                "additionalProperties": False,
            },
            "vars": {"type": "object", "description": "Values available to every template as `vars`."},
            "secrets": {"type": "array", "items": {"type": "string"}, "description": "Env vars whose values are redacted everywhere."},
            "providers_dir": {"type": "string"},
            "targets": {"type": "array", "items": {"$ref": "#/$defs/target"}, "minItems": 1},
            "datasets": {"type": "array", "items": {"$ref": "#/$defs/dataset"}, "minItems": 1},
            "assert": {"type": "array", "items": {"$ref": "#/$defs/assertion"}},
            "judge": {"type": "object", "properties": _JUDGE_SETTINGS, "additionalProperties": False},
            "matrix": {
                "type": "object",
                "properties": {
                    "targets": {"type": "array", "items": {"type": "string"}},
                    "params": {"type": "object", "additionalProperties": {"type": "array", "minItems": 1}},
                    "include": {"type": "array", "items": {"type": "object"}},
                    "exclude": {"type": "array", "items": {"type": "object"}},
                },
                "additionalProperties": False,
            },
            "gates": {
                "type": "object",
                "properties": {
                    **_GATE_SET,
                    "baseline": {"type": "string", "description": "A run id, a path, or `latest`."},
                    "targets": {"type": "object", "additionalProperties": gate_set},
                    "categories": {"type": "object", "additionalProperties": gate_set},
                },
                "additionalProperties": False,
            },
            "output": {
                "type": "object",
                "properties": {
                    "dir": {"type": "string", "description": "Where runs are stored (default: runs)."},
                },
                "additionalProperties": False,
            },
        },
        "required": ["targets", "datasets"],
        "additionalProperties": False,
        "$defs": {
            "target": _target_schema(),
            "dataset": dataset,
            "case": CASE_SCHEMA,
            "assertion": assertion,
            "judge_override": {"type": "object", "properties": {k: v for k, v in _JUDGE_SETTINGS.items()}, "additionalProperties": False},
            **assertion_defs,
        },
    }
    return schema


def schema_json() -> str:
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"
