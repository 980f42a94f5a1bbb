"""The config JSON Schema, built from one source of truth.

Assertion sub-schemas come from the assertion registry (built-ins and the
plugins loaded so far: the schema is rebuilt when a type registers) and the
case schema from the dataset loader, so ``schemas/evalconfig.schema.json``
(written by ``evalx schema``, pinned by a test) can never drift from the code.
Targets and assertions dispatch on ``type:`` with ``if``/``then`` so a
mistake is reported against the right sub-schema, not as a raw ``oneOf``.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_ID = "https://evalx.dev/schemas/evalconfig.schema.json"

_ID = {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$", "description": "An identifier: letters, digits, _ . : -"}
_POS_INT = {"type": "integer", "minimum": 1}
_POS_NUM = {"type": "number", "exclusiveMinimum": 0}
_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_FILE = {"type": "string", "minLength": 1}

_RUN_SETTINGS: dict[str, Any] = {
    "concurrency": {**_POS_INT, "description": "Cells in flight at once, per target."},
    "timeout_s": {**_POS_NUM, "description": "Per-cell timeout in seconds."},
    "retries": {"type": "integer", "minimum": 0, "description": "Retries on transport errors, 429 and 5xx."},
    "backoff_s": {
        "type": "number",
        "minimum": 0,
        "description": "Base of the jittered exponential backoff between retries, in seconds (default 0.5).",
    },
    "cache": {"type": "boolean", "description": "Cache responses (default: on for provider targets, off otherwise)."},
    "max_response_bytes": {
        **_POS_INT,
        "description": "The most bytes one response (a body or a stream, counted after decompression) may have; "
        "past it the cell is an error (default 67108864, 64 MiB).",
    },
}

_PRICING = {
    "type": "object",
    "properties": {
        "input_per_mtok": {"type": "number", "minimum": 0},
        "output_per_mtok": {"type": "number", "minimum": 0},
        "cached_input_per_mtok": {"type": "number", "minimum": 0},
    },
    "required": ["input_per_mtok", "output_per_mtok"],
    "additionalProperties": False,
    "description": "USD per million tokens; overrides the provider definition's price for this model.",
}

#: a target's pool of actors under ``--executor ray`` (docs/scale-out.md)
_RAY_TARGET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "actors": {**_POS_INT, "description": "Ray actors running this target's cells, each with the target started once (default 1)."},
        "concurrency": {**_POS_INT, "description": "Cells in flight in each actor (default: the target's concurrency shared out)."},
        "num_cpus": {
            "type": "number",
            "minimum": 0,
            "description": "CPUs each actor holds (default 1 for python, 0 for engine and provider targets, which wait on the network).",
        },
        "num_gpus": {"type": "number", "minimum": 0, "description": "GPUs each actor holds (default 0)."},
    },
    "additionalProperties": False,
    "description": "How this target runs under --executor ray.",
}

_TARGET_COMMON: dict[str, Any] = {
    "id": _ID,
    "type": {"enum": ["python", "engine", "provider"]},
    "description": {"type": "string"},
    **_RUN_SETTINGS,
    "vars": {"type": "object"},
    "ray": _RAY_TARGET,
}

#: a python or engine target's ``tools:`` (what ``tool_calls_valid`` checks its calls against)
_DECLARED_TOOLS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "required": ["name"]},
    "description": "The tools the target may call, {name, description, parameters}: tool_calls_valid checks its calls against them.",
}

_TARGETS: dict[str, dict[str, Any]] = {
    "python": {
        "properties": {
            "callable": {
                "type": "string",
                "pattern": r"^[^:]+:[A-Za-z_][A-Za-z0-9_.]*$",
                "description": "module:function or path/to/file.py:function (relative to the config).",
            },
            "tools": _DECLARED_TOOLS,
            "idempotent": {
                "type": "boolean",
                "description": "The callable has no side effects: under --executor ray a cell lost with its actor runs again "
                "elsewhere (default false: it becomes an error, which --resume runs again).",
            },
        },
        "required": ["callable"],
    },
    "engine": {
        "properties": {
            "url": {"type": "string", "description": "Base URL; evalx POSTs to {url}/execute."},
            "api_key": {"type": "string", "description": "Sent as X-Engine-Key; never written anywhere."},
            "headers": _STR_MAP,
            "body": {"type": "object", "description": "Request body template (Jinja2 in every string); task_id is added."},
            "idle_timeout_s": {**_POS_NUM, "description": "Fail when the stream sends nothing for this long."},
            "end_event": {"type": "string", "description": "Event type that ends a complete stream (e.g. done)."},
            "max_events": {**_POS_INT, "description": "Events kept per cell in results (default 1000)."},
            "tools": _DECLARED_TOOLS,
            "pricing": {
                **_PRICING,
                "description": "USD per million tokens, applied to the usage events when the engine reports no cost_usd of its own.",
            },
        },
        "required": ["url"],
    },
    "provider": {
        "properties": {
            "provider": {"type": "string", "description": "A provider definition name (providers/NAME.yaml, shipped or in providers_dir)."},
            "model": {"type": "string"},
            "base_url": {"type": "string", "description": "Overrides the provider's base URL, e.g. http://localhost:8080/v1."},
            "api_key": {
                "type": "string",
                "description": "Overrides the provider's key variable (e.g. OPENAI_API_KEY); never written anywhere.",
            },
            "headers": _STR_MAP,
            "params": {"type": "object", "description": "Request parameters: temperature, max_tokens, ..."},
            "system": {"type": "string", "description": "System prompt template (a case's own system wins)."},
            "system_file": {
                **_FILE,
                "description": "A file holding the system prompt template, relative to the config (instead of system).",
            },
            "prompt": {"type": "string", "description": "User message template (Jinja2 over case, vars); default: the case input."},
            "prompt_file": {**_FILE, "description": "A file holding the prompt template, relative to the config (instead of prompt)."},
            "messages": {
                "type": "array",
                "items": {"type": "object", "required": ["role", "content"]},
                "description": "The conversation ({role, content} templates) instead of prompt.",
            },
            "tools": {
                "type": "array",
                "items": {"type": "object"},
                "description": "Tools offered to the model: {name, description, parameters} (OpenAI and Anthropic forms are accepted too).",
            },
            "tools_file": {
                **_FILE,
                "description": "A YAML or JSON file holding the tools list, relative to the config (instead of tools).",
            },
            "json_mode": {"type": "boolean", "description": "Ask for a JSON answer (the provider definition's json_mode params)."},
            "stream": {
                "type": "boolean",
                "description": "Stream the answer (the provider definition's stream: section) and record ttft_ms; "
                "params: {stream: true} means the same.",
            },
            "idle_timeout_s": {**_POS_NUM, "description": "With stream: fail when the stream sends nothing for this long."},
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


def _ratio_gate(floor: str, description: str) -> dict[str, Any]:
    """A gate given as a ratio, or as ``{ratio, <floor>}`` (DESIGN.md "Gates with floors")."""
    ratio = {"type": "number", "minimum": 0}
    with_floor = {"type": "object", "properties": {"ratio": ratio, floor: ratio}, "required": ["ratio"], "additionalProperties": False}
    return {"description": description, "anyOf": [ratio, with_floor]}


_GATE_SET: dict[str, Any] = {
    "min_pass_rate": _FRACTION,
    "max_pass_rate_drop": _FRACTION,
    "no_new_failures": {"type": "boolean"},
    "max_cost_increase": _ratio_gate("min_usd", "Breach when cost rises by more than this ratio and by more than min_usd (default $0.01)."),
    "max_p99_increase": _ratio_gate(
        "min_ms", "Breach when p99 latency rises by more than this ratio and by more than min_ms (default 50 ms)."
    ),
    "max_skipped_rate": {**_FRACTION, "description": "Breach when more than this share of a target's cells was skipped."},
}

_JUDGE_SETTINGS: dict[str, Any] = {
    "target": {
        "description": "The judge: a target id (provider, engine or python), or an inline target (its id is optional).",
        "anyOf": [{"type": "string"}, {"$ref": "#/$defs/judge_target"}],
    },
    "threshold": {**_FRACTION, "description": "Pass mark for judge scores (default 0.8)."},
    "prompt": {
        "type": "string",
        "description": "Jinja2 judge prompt replacing the default; in scope: kind, case, input, output, tool_calls, expected, "
        "reference, rubric, characteristics, criterion, threshold.",
    },
    "prompt_file": {
        "type": "string",
        "minLength": 1,
        "description": "A file holding the judge prompt, relative to the config (instead of prompt).",
    },
    "samples": {**_POS_INT, "description": "Ask N times and take the majority (a tie fails)."},
    "temperature": {"type": "number", "minimum": 0, "description": "Sampling temperature for a provider judge."},
    "allow_self_grading": {"type": "boolean", "description": "Silence the same-model judge warning."},
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
    from evalx.assertions import registered

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


_cached: tuple[int, dict[str, Any]] | None = None


def config_schema() -> dict[str, Any]:
    """The config JSON Schema for the assertion types registered now (built-ins and loaded plugins)."""
    global _cached
    from evalx.assertions.registry import generation, registered

    registered()  # the built-ins and the entry-point plugins, before the generation is read
    if _cached is None or _cached[0] != generation():
        _cached = (generation(), _build_schema())
    return _cached[1]


def _build_schema() -> dict[str, Any]:
    from evalx.datasets.fields import EXTRA_MODES
    from evalx.datasets.loader import CASE_FIELDS, CASE_SCHEMA

    assertion, assertion_defs = _assertion_schema()
    dataset = {
        "type": "object",
        "properties": {
            "id": _ID,
            "description": {"type": "string"},
            "path": {"type": "string", "description": "A .jsonl/.json/.yaml/.csv file or a directory, relative to the config."},
            "cases": {"type": "array", "items": {"type": "object"}, "description": "Cases written here instead of in a file."},
            "targets": {"type": "array", "items": {"type": "string"}, "description": "Targets this dataset applies to (default: all)."},
            "defaults": {
                "type": "object",
                "description": "Fields merged under every case (category, tags, assert, system...); "
                "system_file: reads the system prompt from a file relative to the config.",
            },
            "fields": {
                "type": "object",
                "properties": {
                    name: {"type": "string", "minLength": 1, "description": f"The column read as the case's {name}."}
                    for name in CASE_FIELDS
                },
                "additionalProperties": False,
                "description": "CASE_FIELD: COLUMN, for files in another tool's shape: {input: question, expected: answer} reads each "
                "case's question as its input. A case with no id then gets its place in the dataset (1, 2, ...).",
            },
            "extra": {
                "enum": list(EXTRA_MODES),
                "default": "error",
                "description": "Columns that are neither case fields nor mapped by fields: go into the case's vars (templates see them, "
                "as in a promptfoo CSV), its metadata, or are an error (the default).",
            },
        },
        "required": ["id"],
        "additionalProperties": False,
        # inline cases are case-shaped unless fields:/extra: reshape them (the dataset loader checks them after that)
        "if": {"anyOf": [{"required": ["fields"]}, {"required": ["extra"]}]},
        "then": {},
        "else": {"properties": {"cases": {"items": {"$ref": "#/$defs/case"}}}},
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
                    "max_cells": {
                        **_POS_INT,
                        "description": "Refuse a run of more cells (targets x cases x repeats) before it starts (default 10000000; --max-cells).",
                    },
                    "max_variants": {
                        **_POS_INT,
                        "description": "Refuse a --matrix run of more variants before it expands (default 10000; --max-variants).",
                    },
                    "targets": {"type": "array", "items": {"type": "string"}, "description": "Targets `evalx run` uses without --matrix."},
                    "idle_timeout_s": _POS_NUM,
                    "max_total_cost": {"type": "number", "minimum": 0, "description": "Stop scheduling cells past this spend (USD)."},
                    "repeat_pass_rule": {"enum": ["all", "majority", "any"]},
                },
                "additionalProperties": False,
            },
            "vars": {"type": "object", "description": "Values available to every template as `vars`."},
            "secrets": {"type": "array", "items": {"type": "string"}, "description": "Env vars whose values are redacted everywhere."},
            "plugins": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": "Modules that register assertion types, imported before the config is checked: "
                ".py files relative to the config, or module names (docs/plugins.md).",
            },
            "providers_dir": {"type": "string"},
            "targets": {"type": "array", "items": {"$ref": "#/$defs/target"}, "minItems": 1},
            "datasets": {"type": "array", "items": {"$ref": "#/$defs/dataset"}, "minItems": 1},
            "assert": {"type": "array", "items": {"$ref": "#/$defs/assertion"}},
            "judge": {"type": "object", "properties": _JUDGE_SETTINGS, "additionalProperties": False},
            "matrix": {
                "type": "object",
                "properties": {
                    "targets": {"type": "array", "items": {"type": "string"}},
                    "params": {
                        "type": "object",
                        "additionalProperties": {"type": "array"},
                        "description": "Axes: model sets a provider target's model, any other name params[name].",
                    },
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
            "executor": {
                "type": "object",
                "properties": {
                    "kind": {"enum": ["local", "ray"], "description": "Where cells run (default local; --executor)."},
                    "address": {
                        "type": "string",
                        "description": "The Ray cluster: auto (a running one, the default), local (start one), or an address (--ray-address).",
                    },
                    "batch_size": {**_POS_INT, "description": "Cells sent to a Ray actor at once (default: sized to about 0.5 s of work)."},
                    "working_dir": {
                        "enum": ["auto", "upload", "shared"],
                        "description": "How the config's folder reaches Ray workers: upload (runtime_env working_dir), shared (read in place), "
                        "auto (upload unless every node is this machine).",
                    },
                },
                "additionalProperties": False,
            },
        },
        "required": ["targets", "datasets"],
        "additionalProperties": False,
        "$defs": {
            "target": _target_schema(),
            "judge_target": {**_target_schema(), "required": ["type"]},
            "dataset": dataset,
            "case": CASE_SCHEMA,
            "assertion": assertion,
            "judge_override": {"type": "object", "properties": {k: v for k, v in _JUDGE_SETTINGS.items()}, "additionalProperties": False},
            **assertion_defs,
        },
    }
    return schema


def tools_schema() -> dict[str, Any]:
    """The schema of a target's ``tools:`` (a ``tools_file:`` is checked against it)."""
    return dict(_TARGETS["provider"]["properties"]["tools"])


def schema_json() -> str:
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"
