"""What a case may hold, as JSON Schema: its fields (shorthands included), read by the loader and the ``datasets:`` record."""

from __future__ import annotations

from evalx.common.json_types import JSONObject
from evalx.datasets.context import CONTEXT_PROPERTIES
from evalx.datasets.shorthands import SHORTHAND_PROPERTIES

__all__ = ["BASE_FIELDS", "BASE_PROPERTIES", "CASE_FIELDS", "CASE_PROPERTIES", "CASE_SCHEMA", "TURN_PROPERTIES"]

_STRINGS: JSONObject = {"type": "array", "items": {"type": "string"}}
#: the keys of one turn of a scripted conversation
TURN_PROPERTIES: dict[str, JSONObject] = {
    "input": {"type": "string", "description": "The user message of this turn."},
    "assert": {"type": "array", "items": {"$ref": "#/$defs/assertion"}},
    "tool_results": {"type": "object", "description": "Mocked tool results {TOOL: VALUE} for this turn."},
}
BASE_PROPERTIES: dict[str, JSONObject] = {
    "id": {"type": ["string", "number"], "minLength": 1, "description": "Unique in its dataset; numbers become strings."},
    "input": {
        "type": ["string", "object", "array"],
        "items": {"type": "object"},
        "description": "Text, a mapping for structured targets, or a list of parts: {type: text, text}, "
        "{type: image, path | url | data + media_type}, {type: document, path | data + media_type} (a PDF).",
    },
    "expected": {"description": "What the assertions compare with; adds no check on its own."},
    "category": {"type": "string", "default": "general"},
    "difficulty": {"type": "string", "description": "Free text, e.g. easy|medium|hard|simple|edge."},
    "tags": _STRINGS,
    "vars": {"type": "object", "description": "Template variables for this case."},
    "assert": {"type": "array", "items": {"$ref": "#/$defs/assertion"}},
    "description": {"type": "string"},
    "notes": {"type": "string"},
    "metadata": {"type": "object"},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1, "description": "Pass when the weighted score reaches this."},
    "repeat": {"type": "integer", "minimum": 1},
    "targets": {**_STRINGS, "description": "Target ids this case runs on (default: the dataset's)."},
    "system": {"type": "string", "description": "A system prompt for this case."},
    "turns": {
        "type": "array",
        "minItems": 1,
        "description": "A scripted conversation: each turn's input is the next user message, its assert checks the reply "
        "to it; the case's own assert checks the whole conversation (the last reply is the output).",
        "items": {
            "type": "object",
            "required": ["input"],
            "properties": dict(TURN_PROPERTIES),
            "additionalProperties": False,
        },
    },
    "tool_results": {"type": "object", "description": "Mocked tool results {TOOL: VALUE} for every turn."},
    "simulate": {
        "type": "object",
        "description": "A simulated user: a target that plays the user with its instructions until stop or max_turns "
        "agent replies (instead of turns:; the case's input, if any, is the first user message).",
        "required": ["target", "instructions"],
        "properties": {
            "target": {"type": "string", "minLength": 1, "description": "The id of the target that plays the user."},
            "instructions": {"type": "string", "description": "The user's persona and goal."},
            "max_turns": {"type": "integer", "minimum": 1, "default": 5, "description": "Agent replies at most."},
            "stop": {
                "type": "object",
                "description": "{regex: PATTERN} on the agent's reply, {tool: NAME} when the agent calls it, or "
                '{user_done: true}: the user target returns {"done": true}.',
                "properties": {"regex": {"type": "string"}, "tool": {"type": "string", "minLength": 1}, "user_done": {"const": True}},
                "minProperties": 1,
                "maxProperties": 1,
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
    **CONTEXT_PROPERTIES,
}
#: a case's own fields (no shorthand)
BASE_FIELDS = tuple(BASE_PROPERTIES)

#: every field a case may have, shorthands included
CASE_FIELDS: tuple[str, ...] = BASE_FIELDS + tuple(SHORTHAND_PROPERTIES)

#: every field of a case and its schema
CASE_PROPERTIES: dict[str, JSONObject] = {**BASE_PROPERTIES, **SHORTHAND_PROPERTIES}

#: JSON Schema (2020-12) of one case as written in a file; ``#/$defs/assertion`` is the embedder's
CASE_SCHEMA: JSONObject = {
    "type": "object",
    "properties": dict(CASE_PROPERTIES),
    "required": ["id"],
    "anyOf": [{"required": [name]} for name in ("input", "user_message", "question", "turns", "messages", "simulate")],
    "additionalProperties": False,
}
