"""Provider definitions: one YAML file a provider, no Python.

A definition (``providers/NAME.yaml``, validated against
``schemas/provider.schema.json``) declares the base URL, how to authenticate,
the request (a Jinja2 body template rendering to JSON), where text, tool calls
and usage sit in the response (Jinja2 expressions over the decoded JSON), which
errors mean rate-limited / retryable / fatal, prices per model and, optionally,
an ``embeddings:`` request (body template, and where the vector and its token
count sit in the response).

Shipped definitions live in :func:`evalx.targets.shipped.data_dir("providers")`; a
config's ``providers_dir:`` adds more, and a user file overrides a shipped one
of the same name. Every problem in a definition is reported as
``FILE:LINE key.path: message``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, NotRequired, TypedDict, cast

from jinja2 import ChainableUndefined, StrictUndefined, TemplateError, TemplateSyntaxError, Undefined, nodes
from jinja2.compiler import generate
from jinja2.parser import Parser

from evalx.common import regexes
from evalx.common.documents import KeyPath, Loaded, SchemaValidator, format_path, load_yaml
from evalx.common.json_types import JSON, JSONArray, JSONObject, as_object, json_encoder
from evalx.common.reading import PROVIDER, read_text
from evalx.common.templates import BoundedSandbox, sandbox
from evalx.errors import ConfigError, Issue, UnreadableFile
from evalx.errors import DefinitionError as DefinitionError  # defined in errors.py, imported from here too
from evalx.errors import UnknownProvider as UnknownProvider
from evalx.targets.shipped import data_dir
from evalx.targets.spec import Pricing, ProviderTargetSpec
from evalx.targets.transport.pacing import BUCKET_KINDS, BucketHeaders, RateLimitHeaders

PROVIDER_SCHEMA_ID = "https://evalx.dev/schemas/provider.schema.json"
#: what a definition's ``capabilities:`` may declare, in the order ``evalx providers`` shows them
CAPABILITIES = ("streaming", "tools", "embeddings", "vision", "json_mode", "tool_history")
#: the kinds of input part a definition's ``parts.accepts`` may list
PART_KINDS = ("image", "image_url", "document")
#: the capability that changes a request: a conversation's tool calls and tool results go in ``messages``
#: (OpenAI's ``tool_calls`` / ``role: tool`` shape) instead of the replies' text only
TOOL_HISTORY = "tool_history"

#: ``stream.framing``: how a stream's events are framed (see :mod:`evalx.targets.provider_stream`)
STREAM_FRAMINGS = ("sse", "aws-eventstream")

#: ``auth.kind``: what each needs besides the kind itself (see :mod:`evalx.targets.auth`)
AUTH_KINDS: dict[str, tuple[str, ...]] = {"header": ("header",), "bearer_from_command": ("command",), "google": (), "sigv4": ("service",)}
#: ``auth`` keys that only a kind reads (another kind's key is an error naming its line)
_AUTH_KEYS_OF: dict[str, frozenset[str]] = {
    "header": frozenset({"header", "value", "env", "required"}),
    "bearer_from_command": frozenset({"command", "ttl_s"}),
    "google": frozenset({"scopes"}),
    "sigv4": frozenset({"service"}),
}

_EXPR: JSONObject = {"type": "string", "description": "A Jinja2 expression over the decoded response JSON (`response`)."}
_STATUS_LIST: JSONObject = {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 599}}
_ERROR_CLASS: JSONObject = {
    "type": "object",
    "properties": {
        "status": {**_STATUS_LIST, "description": "HTTP statuses in this class."},
        "body": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Regular expressions; an error body matching one is in this class.",
        },
    },
    "additionalProperties": False,
}
_BUCKET: JSONObject = {
    "type": "object",
    "properties": {
        "limit": {"type": "string", "description": "The header giving the bucket's size."},
        "remaining": {"type": "string", "description": "The header giving what is left in it."},
        "reset": {
            "type": "string",
            "description": "The header giving when it is full again: seconds, a duration (1s, 6m0s, 20ms) or an RFC 3339 time.",
        },
    },
    "required": ["remaining"],
    "additionalProperties": False,
}
_PRICE: JSONObject = {
    "type": "object",
    "properties": {
        "input_per_mtok": {"type": "number", "minimum": 0, "description": "USD per million input tokens."},
        "output_per_mtok": {"type": "number", "minimum": 0, "description": "USD per million output tokens."},
        "cached_input_per_mtok": {
            "type": "number",
            "minimum": 0,
            "description": "USD per million input tokens served from the provider's prompt cache (default: the input price).",
        },
    },
    "required": ["input_per_mtok", "output_per_mtok"],
    "additionalProperties": False,
}

_STREAM_EVENT: JSONObject = {
    "type": "object",
    "description": "What one event of this type carries; every expression is over `event` (the event's decoded JSON data).",
    "properties": {
        "text": {**_EXPR, "description": "A piece of the answer's text (the pieces are joined; the first one sets ttft_ms)."},
        "tool_calls": {
            "type": "object",
            "description": "Tool-call deltas: pieces of calls, put together by index into whole calls.",
            "properties": {
                "items": {**_EXPR, "description": "The list of deltas in the event (default: the event itself is one delta, `item`)."},
                "index": {
                    **_EXPR,
                    "description": "Which call a delta belongs to (default: a delta with a name starts a call, others add to the last).",
                },
                "id": {**_EXPR, "description": "The call id, over `item`."},
                "name": {**_EXPR, "description": "The tool name, over `item`."},
                "args": {
                    **_EXPR,
                    "description": "A fragment of the arguments' JSON text (fragments are joined, then parsed), or a whole object.",
                },
            },
            "additionalProperties": False,
        },
        "usage": {
            "type": "object",
            "description": "Token counts: the last one the stream sends of each wins (servers send running totals).",
            "properties": {
                "input_tokens": {**_EXPR, "description": "All input tokens, including those served from the prompt cache."},
                "output_tokens": _EXPR,
                "cached_tokens": {**_EXPR, "description": "Input tokens served from the provider's prompt cache."},
            },
            "additionalProperties": False,
        },
        "stop_reason": {**_EXPR, "description": "Why the model stopped (the last one sent wins)."},
        "error": {
            **_EXPR,
            "description": "The message of an error this event carries (default: errors.message, for an `error` event or "
            "data with an `error`).",
        },
    },
    "additionalProperties": False,
}

_STREAM: JSONObject = {
    "type": "object",
    "description": "How the API streams an answer (Server-Sent Events, or AWS event-stream messages): a target with stream: true uses it.",
    "properties": {
        "framing": {
            "enum": list(STREAM_FRAMINGS),
            "description": "How events are framed on the wire: sse (default; text/event-stream), or aws-eventstream "
            "(application/vnd.amazon.eventstream, as Bedrock's ConverseStream answers: an event's type is its :event-type "
            "header, its data the JSON payload; an exception message is the cell's error, its :exception-type matched "
            "by the errors: classes' body patterns).",
        },
        "default": {"type": "boolean", "description": "Stream unless a target sets stream: false (default false)."},
        "params": {
            "type": "object",
            "description": "Request params added when streaming, e.g. {stream: true, stream_options: {include_usage: true}}.",
        },
        "end": {
            "type": "object",
            "description": "What ends a complete stream; a stream that closes without it is the cell's error.",
            "properties": {
                "data": {"type": "string", "description": "An event whose data is exactly this text, e.g. '[DONE]'."},
                "event": {"type": "string", "description": "An event of this type, e.g. message_stop."},
                "when": {
                    **_EXPR,
                    "description": "An event for which this expression over `event` is true (read, then the end), for APIs "
                    "with no end marker, e.g. event.candidates[0].finishReason.",
                },
            },
            "minProperties": 1,
            "additionalProperties": False,
        },
        "events": {
            "type": "object",
            "description": "By event type (the SSE event: field, else the data's `type` when listed here, else `message`).",
            "additionalProperties": _STREAM_EVENT,
        },
    },
    "required": ["params", "end", "events"],
    "additionalProperties": False,
}

_BATCH: JSONObject = {
    "type": "object",
    "description": "How the provider's batch API takes many requests at once, at a discount (a target's batch: true uses it; "
    "docs/providers.md#batch-mode). Templates and expressions as elsewhere; without this section batch: true is refused.",
    "properties": {
        "discount": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "description": "The batch price as a fraction of the normal one (0.5: half price).",
        },
        "max_requests": {"type": "integer", "minimum": 1, "description": "The most requests one batch may hold."},
        "max_bytes": {"type": "integer", "minimum": 1, "description": "The most bytes one batch's requests may take."},
        "request": {
            "type": "string",
            "description": "Jinja2 template rendering one request of the batch to JSON; in scope: custom_id, body (the request "
            "body a normal call sends), method, path (the normal call's URL path, e.g. /v1/chat/completions), model.",
        },
        "upload": {
            "type": "object",
            "description": "Optional: the requests go first as a JSONL file (one rendered request a line), uploaded as multipart form data.",
            "properties": {
                "path": {"type": "string", "description": "Appended to base_url, e.g. /files."},
                "fields": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Form fields sent with the file, e.g. {purpose: batch}.",
                },
                "file_id": {**_EXPR, "description": "Expression over `response` (the upload's answer) giving the file id."},
            },
            "required": ["path", "file_id"],
            "additionalProperties": False,
        },
        "create": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Appended to base_url, e.g. /batches."},
                "body": {
                    "type": "string",
                    "description": "Jinja2 template rendering to JSON; in scope: file_id (with upload:), requests (the rendered "
                    "requests, a list), model, path (the normal call's URL path).",
                },
                "id": {**_EXPR, "description": "Expression over `response` giving the batch id."},
            },
            "required": ["path", "body", "id"],
            "additionalProperties": False,
        },
        "status": {
            "type": "object",
            "description": "Polling a batch: GET path; expressions over `response` (its answer).",
            "properties": {
                "path": {"type": "string", "description": "Jinja2 template with batch_id, e.g. /batches/{{ batch_id }}."},
                "state": {**_EXPR, "description": "The batch's state."},
                "ended": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "States in which the batch will change no more (its results can be read).",
                },
                "done": {**_EXPR, "description": "Requests finished so far (for the progress line)."},
                "total": {**_EXPR, "description": "Requests in the batch (for the progress line)."},
                "results": {
                    **_EXPR,
                    "description": "Where the results are, once ended: a path (appended to base_url) or a URL on base_url's "
                    "host, or a list of them; none, or an empty list, for no results.",
                },
                "error": {**_EXPR, "description": "Why a batch that ended without results failed."},
            },
            "required": ["path", "state", "ended", "results"],
            "additionalProperties": False,
        },
        "result": {
            "type": "object",
            "description": "One line of the results JSONL: expressions over `line`.",
            "properties": {
                "custom_id": {**_EXPR, "description": "The request's custom_id."},
                "outcome": {**_EXPR, "description": "succeeded, errored, expired or canceled."},
                "response": {**_EXPR, "description": "A succeeded request's answer: read with response: as a normal call's."},
                "status": {**_EXPR, "description": "An errored request's HTTP status, if the API gives one."},
                "error": {**_EXPR, "description": "An errored request's message."},
            },
            "required": ["custom_id", "outcome", "response"],
            "additionalProperties": False,
        },
    },
    "required": ["discount", "max_requests", "request", "create", "status", "result"],
    "additionalProperties": False,
}

#: a whole definition (one that extends another, once merged): what the loader validates
WHOLE_SCHEMA: JSONObject = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", "description": "Must equal the file name without .yaml."},
        "description": {"type": "string"},
        "extends": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
            "description": "Inherit the definition of this name (shipped or the project's): mappings merge key by key, "
            "lists and scalars replace, null removes an inherited key; pricing: replaces the inherited table whole. A project file "
            "extending its own name extends the shipped one.",
        },
        "example_model": {
            "type": "string",
            "minLength": 1,
            "description": "A model to start from: `evalx init --provider NAME` writes it as the target's model. "
            "Not inherited through extends: (another host names its models its own way).",
        },
        "capabilities": {
            "type": "object",
            "description": "What the provider supports, shown by `evalx providers` (tool_history also changes what a conversation "
            "sends; vision: true needs a parts: section that maps images, and vision: false refuses cases with images).",
            "properties": {
                **{name: {"type": "boolean"} for name in CAPABILITIES},
                TOOL_HISTORY: {
                    "type": "boolean",
                    "description": "The request body takes a conversation's tool calls and tool results: `messages` then "
                    "holds assistant turns with OpenAI's `tool_calls` and `role: tool` results (default false: the replies' "
                    "text only).",
                },
            },
            "additionalProperties": False,
        },
        "base_url": {"type": "string", "description": "Default base URL; ${VAR:-default} reads the environment."},
        "auth": {
            "type": "object",
            "description": "How requests authenticate: kind header (default: a key in a header), bearer_from_command, google or sigv4.",
            "properties": {
                "kind": {
                    "enum": list(AUTH_KINDS),
                    "description": "header (default): `header`/`value` with the key; bearer_from_command: `command`'s output "
                    "as a bearer token; google: Application Default Credentials (evalx-runner[google]); sigv4: AWS Signature V4 "
                    "over each request (evalx-runner[aws]).",
                },
                "header": {"type": "string", "description": "Header carrying the key, e.g. Authorization or x-api-key."},
                "value": {"type": "string", "description": "Jinja2 template with `api_key`, e.g. 'Bearer {{ api_key }}'."},
                "env": {
                    "oneOf": [
                        {"type": "string", "minLength": 1},
                        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                    ],
                    "description": "Environment variable read when a target sets no api_key; a list: the first one set "
                    "(e.g. [GEMINI_API_KEY, GOOGLE_API_KEY]).",
                },
                "required": {"type": "boolean", "description": "Refuse to run without a key (default false: local servers need none)."},
                "command": {
                    "oneOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
                    "description": "bearer_from_command: the command printing a token, e.g. 'gcloud auth print-access-token' "
                    "(a string is split as a shell would, never run by a shell).",
                },
                "ttl_s": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "bearer_from_command: how long a token is used before the command runs again (default 600).",
                },
                "scopes": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "google: OAuth scopes (default https://www.googleapis.com/auth/cloud-platform).",
                },
                "service": {"type": "string", "description": "sigv4: the AWS service signed for, e.g. bedrock."},
            },
            "additionalProperties": False,
        },
        "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra headers on every request."},
        "request": {
            "type": "object",
            "properties": {
                "method": {"enum": ["POST", "PUT", "GET"]},
                "path": {
                    "type": "string",
                    "description": "Appended to base_url; a Jinja2 template with `model` and `stream` in scope, "
                    "e.g. /models/{{ model | urlencode }}:generateContent.",
                },
                "body": {
                    "type": "string",
                    "description": "Jinja2 template rendering to JSON; in scope: model, messages, system, params, tools, json_mode.",
                },
            },
            "required": ["path", "body"],
            "additionalProperties": False,
        },
        "response": {
            "type": "object",
            "properties": {
                "text": _EXPR,
                "tool_calls": {
                    "type": "object",
                    "properties": {
                        "items": {**_EXPR, "description": "Expression giving the list of tool calls."},
                        "name": {**_EXPR, "description": "Expression over `item` (one call) giving its name."},
                        "args": {
                            **_EXPR,
                            "description": "Expression over `item` giving its arguments (`| fromjson` decodes a JSON string).",
                        },
                        "id": {**_EXPR, "description": "Expression over `item` giving the call id."},
                    },
                    "required": ["items", "name"],
                    "additionalProperties": False,
                },
                "usage": {
                    "type": "object",
                    "properties": {
                        "input_tokens": {**_EXPR, "description": "All input tokens, including those served from the prompt cache."},
                        "output_tokens": _EXPR,
                        "cached_tokens": {**_EXPR, "description": "Input tokens served from the provider's prompt cache."},
                    },
                    "additionalProperties": False,
                },
                "stop_reason": _EXPR,
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        "errors": {
            "type": "object",
            "properties": {
                "message": {**_EXPR, "description": "Expression giving the error message from an error body."},
                "rate_limited": {**_ERROR_CLASS, "description": "Retried after Retry-After (or a backoff)."},
                "retryable": {**_ERROR_CLASS, "description": "Retried with jittered backoff."},
                "fatal": {**_ERROR_CLASS, "description": "Never retried; checked first (e.g. insufficient_quota on a 429)."},
                "retry_after_header": {"type": "string", "description": "Header naming seconds to wait (default Retry-After)."},
            },
            "additionalProperties": False,
        },
        "parts": {
            "type": "object",
            "description": "How a case's input parts (text, images, PDF documents) go on the wire: `message` renders the user "
            "message that replaces the case's text (docs/providers.md, Images and documents).",
            "properties": {
                "accepts": {
                    "type": "array",
                    "items": {"enum": list(PART_KINDS)},
                    "description": "What the API takes: image (bytes, base64), image_url (an image by URL), document (a PDF).",
                },
                "message": {
                    "type": "string",
                    "description": 'Jinja2 template rendering the user message as JSON, e.g. {"role": "user", "content": [...]}; '
                    "in scope: parts (each {type, text, media_type, base64, data_url, url, name}) and text (the text parts joined).",
                },
            },
            "required": ["accepts", "message"],
            "additionalProperties": False,
        },
        "rate_limits": {
            "type": "object",
            "description": "The rate-limit headers the provider sends (names, any case): evalx paces requests from them before "
            "a limit is hit, and waits out a 429 for as long as they say (docs/providers.md, Rate limits and adaptive concurrency).",
            "properties": {
                "requests": {**_BUCKET, "description": "The requests bucket."},
                "tokens": {**_BUCKET, "description": "The tokens bucket (input and output counted together)."},
                "input_tokens": {**_BUCKET, "description": "The input tokens bucket."},
                "output_tokens": {**_BUCKET, "description": "The output tokens bucket."},
                "retry_after": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Headers giving the seconds (or an HTTP date) to wait after a 429; the first sent wins, "
                    "after retry_after_ms (default [retry-after]).",
                },
                "retry_after_ms": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Headers giving the milliseconds to wait after a 429, read first (default [retry-after-ms]).",
                },
                "overloaded": {
                    **_ERROR_CLASS,
                    "description": "Answers that mean the provider is overloaded (Anthropic's 529): backed off like a 429.",
                },
            },
            "additionalProperties": False,
        },
        "json_mode": {
            "type": "object",
            "properties": {"params": {"type": "object", "description": "Params merged in when a caller wants a JSON answer."}},
            "additionalProperties": False,
        },
        "params": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The request params the API knows: a target's params key not listed is a warning (with a did-you-mean). "
            "Without the list nothing is checked.",
        },
        "stream": _STREAM,
        "embeddings": {
            "type": "object",
            "description": "Optional: how to embed a text (semantic_similar's `embedding:` target). Without it the provider cannot embed.",
            "properties": {
                "method": {"enum": ["POST", "PUT", "GET"]},
                "path": {
                    "type": "string",
                    "description": "Appended to base_url, e.g. /embeddings; a Jinja2 template with `model` in scope.",
                },
                "body": {"type": "string", "description": "Jinja2 template rendering to JSON; in scope: model, input (the text)."},
                "vector": {**_EXPR, "description": "Expression over `response` giving the embedding, a list of numbers."},
                "usage": {
                    "type": "object",
                    "properties": {"input_tokens": {**_EXPR, "description": "Tokens embedded (priced at the model's input price)."}},
                    "additionalProperties": False,
                },
            },
            "required": ["path", "body", "vector"],
            "additionalProperties": False,
        },
        "batch": _BATCH,
        "pricing": {
            "type": "object",
            "description": "Model name (or glob like 'gpt-4o-mini-*') → prices in USD per million tokens. A definition that "
            "extends: another replaces its table whole (a price table is one host's).",
            "additionalProperties": _PRICE,
        },
    },
    "required": ["request", "response"],
    "additionalProperties": False,
}


def _partial(schema: JSON, value: bool = False) -> JSON:
    """``schema`` with nothing required and every mapping's values nullable (``value``: ``schema`` is one): a file that
    ``extends:`` another says only what differs, and ``null`` removes an inherited key (a header, a price, a section)."""
    if isinstance(schema, list):
        return [_partial(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: JSONObject = {
        k: _partial(v, value=k == "additionalProperties")
        for k, v in schema.items()
        if k not in ("required", "minProperties", "$schema", "properties")
    }
    if isinstance(schema.get("properties"), dict):  # names of keys, not keywords: all kept
        out["properties"] = {name: _partial(sub, value=True) for name, sub in as_object(schema["properties"]).items()}
    kind = out.get("type")
    if isinstance(kind, str) and (value or kind == "object"):
        out["type"] = [kind, "null"]
    return out


#: the published schema (schemas/provider.schema.json, for editors): a whole definition, or, with
#: ``extends:``, a part of one (the loader validates the merged definition against :data:`WHOLE_SCHEMA`)
PROVIDER_SCHEMA: JSONObject = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": PROVIDER_SCHEMA_ID,
    "title": "evalx provider definition (providers/NAME.yaml)",
    "if": {"type": "object", "required": ["extends"]},
    "then": _partial({k: v for k, v in WHOLE_SCHEMA.items() if k != "$schema"}),
    "else": {k: v for k, v in WHOLE_SCHEMA.items() if k != "$schema"},
}


def schema_json() -> str:
    return json.dumps(PROVIDER_SCHEMA, indent=2, ensure_ascii=False) + "\n"


# --- the file's sections, as the schema above accepts them ------------------------
# (``_parse_definition`` reads a file only once the schema accepted it: these say what it then holds)


class AuthSection(TypedDict, total=False):
    kind: str
    header: str
    value: str
    env: str | list[str]
    required: bool
    command: str | list[str]
    ttl_s: float
    scopes: list[str]
    service: str


@dataclass(frozen=True)
class AuthSpec:
    """A definition's ``auth:`` beyond kind ``header`` (which :class:`ProviderDefinition`'s ``auth_*`` fields hold)."""

    kind: str = "header"
    #: bearer_from_command: the command's argv
    command: tuple[str, ...] = ()
    ttl_s: float = 600.0
    scopes: tuple[str, ...] = ()
    service: str = ""


class RequestSection(TypedDict):
    path: str
    body: str
    method: NotRequired[str]


class ToolCallsSection(TypedDict, total=False):
    """``response.tool_calls``: expressions (``items`` and ``name`` are required there)."""

    items: str
    name: str
    args: str
    id: str


class UsageSection(TypedDict, total=False):
    input_tokens: str
    output_tokens: str
    cached_tokens: str


class ResponseSection(TypedDict, total=False):
    """``response:``: where the answer sits, as expressions over ``response`` (``text`` is required)."""

    text: str
    tool_calls: ToolCallsSection
    usage: UsageSection
    stop_reason: str


class ErrorClassSection(TypedDict, total=False):
    status: list[int]
    body: list[str]


class ErrorsSection(TypedDict, total=False):
    message: str
    rate_limited: ErrorClassSection
    retryable: ErrorClassSection
    fatal: ErrorClassSection
    retry_after_header: str


class BucketSection(TypedDict, total=False):
    limit: str
    remaining: str
    reset: str


class RateLimitsSection(TypedDict, total=False):
    requests: BucketSection
    tokens: BucketSection
    input_tokens: BucketSection
    output_tokens: BucketSection
    retry_after: list[str]
    retry_after_ms: list[str]
    overloaded: ErrorClassSection


class JsonModeSection(TypedDict, total=False):
    params: JSONObject


class StreamToolCallsSection(TypedDict, total=False):
    items: str
    index: str
    id: str
    name: str
    args: str


class StreamEventSection(TypedDict, total=False):
    """One event type's entry under ``stream.events``: expressions over ``event``."""

    text: str
    tool_calls: StreamToolCallsSection
    usage: UsageSection
    stop_reason: str
    error: str


class StreamEndSection(TypedDict, total=False):
    data: str
    event: str
    when: str


class StreamSection(TypedDict):
    params: JSONObject
    end: StreamEndSection
    events: dict[str, StreamEventSection]
    default: NotRequired[bool]
    framing: NotRequired[str]


class EmbeddingsUsageSection(TypedDict, total=False):
    input_tokens: str


class EmbeddingsSection(TypedDict):
    path: str
    body: str
    vector: str
    method: NotRequired[str]
    usage: NotRequired[EmbeddingsUsageSection]


class PriceSection(TypedDict):
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: NotRequired[float]


class BatchUploadSection(TypedDict):
    path: str
    file_id: str
    fields: NotRequired[dict[str, str]]


class BatchCreateSection(TypedDict):
    path: str
    body: str
    id: str


class BatchStatusSection(TypedDict):
    path: str
    state: str
    ended: list[str]
    results: str
    done: NotRequired[str]
    total: NotRequired[str]
    error: NotRequired[str]


class BatchResultSection(TypedDict):
    custom_id: str
    outcome: str
    response: str
    status: NotRequired[str]
    error: NotRequired[str]


class BatchSection(TypedDict):
    discount: float
    max_requests: int
    request: str
    create: BatchCreateSection
    status: BatchStatusSection
    result: BatchResultSection
    max_bytes: NotRequired[int]
    upload: NotRequired[BatchUploadSection]


class PartsSection(TypedDict):
    """A definition's ``parts:``: what kinds of part the API takes, and the user message template."""

    accepts: list[str]
    message: str


class DefinitionFile(TypedDict, total=False):
    """A whole ``providers/NAME.yaml`` (``request`` and ``response`` are required)."""

    name: str
    description: str
    extends: str
    example_model: str
    capabilities: dict[str, bool]
    base_url: str
    auth: AuthSection
    headers: dict[str, str]
    request: RequestSection
    response: ResponseSection
    errors: ErrorsSection
    rate_limits: RateLimitsSection
    json_mode: JsonModeSection
    params: list[str]
    stream: StreamSection
    embeddings: EmbeddingsSection
    batch: BatchSection
    pricing: dict[str, PriceSection]
    parts: PartsSection


# --- what templates and expressions see -------------------------------------------


class ToolDefinition(TypedDict):
    """A tool offered to the model, as a provider target normalises its ``tools:`` (the body template sees these)."""

    name: str
    description: NotRequired[str]
    parameters: NotRequired[JSON]


class RequestScope(TypedDict):
    """What a definition's ``request.body`` template sees."""

    model: str
    #: the conversation as sent (without system turns): messages a config or case writes go as they are
    messages: list[JSONObject]
    system: str | None
    #: the request params (the target's, templates rendered, with the definition's json_mode/stream params)
    params: Mapping[str, object]
    tools: list[ToolDefinition]
    json_mode: bool


class EmbeddingsScope(TypedDict):
    """What a definition's ``embeddings.body`` template sees."""

    model: str
    input: str


class ExpressionScope(TypedDict, total=False):
    """What a response (or stream event) expression sees."""

    #: the decoded response body
    response: JSON
    status: int
    #: only for a definition whose expressions read them (:attr:`ProviderDefinition.reads_headers`)
    headers: dict[str, str]
    #: one tool call (``tool_calls.items``' element), for the expressions read over each
    item: object
    #: a stream event's decoded data
    event: JSON
    #: one decoded line of a batch's results (``batch.result``)
    line: JSON


#: a response expression, looked up once (:meth:`ProviderDefinition.reader`): what it gives, Jinja's value of any kind
Reader = Callable[[ExpressionScope], object]


# --- templates ----------------------------------------------------------------


def _fromjson(value: Any) -> Any:
    """Decode a JSON string; anything else (or invalid JSON) passes through unchanged."""
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _make_env(undefined: type[Undefined]) -> BoundedSandbox:
    env = sandbox(undefined)  # evalx's one sandbox: bounded sizes, no file access
    env.filters["tojson"] = _tojson
    env.filters["fromjson"] = _fromjson
    return env


# request templates: an undefined name is an error (a typo must not drop a field)
_REQUEST_ENV = _make_env(StrictUndefined)
# response expressions: a missing field is None (a response without tool calls is normal)
_RESPONSE_ENV = _make_env(ChainableUndefined)


# --- the definition -----------------------------------------------------------


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    @classmethod
    def from_mapping(cls, d: PriceSection) -> Price:
        cached = d.get("cached_input_per_mtok")
        return cls(float(d["input_per_mtok"]), float(d["output_per_mtok"]), None if cached is None else float(cached))

    @classmethod
    def of(cls, pricing: Pricing) -> Price:
        """The price a target's ``pricing:`` record sets."""
        cached = pricing.cached_input_per_mtok
        return cls(float(pricing.input_per_mtok), float(pricing.output_per_mtok), None if cached is None else float(cached))

    def scaled(self, factor: float) -> Price:
        """This price times ``factor`` (a batch API's discount)."""
        cached = None if self.cached_input_per_mtok is None else self.cached_input_per_mtok * factor
        return Price(self.input_per_mtok * factor, self.output_per_mtok * factor, cached)

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """USD for one call; ``input_tokens`` includes the ``cached_tokens``."""
        cached = min(max(cached_tokens, 0), input_tokens)
        cached_price = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        usd = (input_tokens - cached) * self.input_per_mtok + cached * cached_price + output_tokens * self.output_per_mtok
        return round(usd / 1_000_000, 10)


@dataclass(frozen=True)
class EmbeddingsRequest:
    """A definition's ``embeddings:`` section; ``vector`` and ``usage`` are read with :meth:`ProviderDefinition.evaluate`."""

    method: str
    path: str
    body: str
    has_input_tokens: bool = False


@dataclass(frozen=True)
class BatchSpec:
    """A definition's ``batch:`` section; its expressions are read with :meth:`ProviderDefinition.evaluate` at
    ``("batch", "status", KEY)`` and ``("batch", "result", KEY)`` (see :mod:`evalx.targets.batch`)."""

    discount: float
    max_requests: int
    #: the most bytes a batch's requests (rendered, one a line) may take; None: no limit given
    max_bytes: int | None
    request: str
    create_path: str
    create_body: str
    status_path: str
    ended: frozenset[str]
    #: with ``upload:``: its path and form fields (the requests go as a JSONL file first)
    upload_path: str | None = None
    upload_fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StreamSpec:
    """A definition's ``stream:`` section; its expressions are read with :meth:`ProviderDefinition.reader`
    at ``("stream", "events", TYPE, ...)`` (see :mod:`evalx.targets.provider_stream`)."""

    params: JSONObject
    #: the data text that ends a complete stream (``[DONE]``), if any
    end_data: str | None
    #: the event type that ends a complete stream (``message_stop``), if any
    end_event: str | None
    #: event type -> its ``events:`` entry
    events: dict[str, StreamEventSection]
    default: bool = False
    #: an expression over ``event`` (``stream.end.when``): an event for which it is true ends a complete stream
    end_when: str | None = None
    #: ``stream.framing``: ``sse`` or ``aws-eventstream``
    framing: str = "sse"

    @property
    def end_shown(self) -> str:
        """The end marker as a message names it: ``data: [DONE]``, ``event: message_stop`` or ``an event where EXPR``."""
        if self.end_data is not None:
            return f"data: {self.end_data}"
        return f"event: {self.end_event}" if self.end_event is not None else f"an event where {self.end_when}"


@dataclass
class ErrorClass:
    statuses: frozenset[int] = frozenset()
    #: the ``body:`` patterns (checked by the definition's validation), compiled by the first error response that needs them
    patterns: tuple[str, ...] = ()

    def matches(self, status: int, body: str) -> bool:
        # evalx.common.regexes: a server's body cannot make them backtrack for ever
        return status in self.statuses or any(regexes.search(regexes.compile_user(p), body) is not None for p in self.patterns)


@dataclass
class ProviderDefinition:
    name: str
    source: Path
    shipped: bool
    loaded: Loaded
    description: str = ""
    #: ``example_model:``, the model ``evalx init --provider NAME`` writes (None: the definition names none)
    example_model: str | None = None
    base_url: str | None = None
    auth_header: str | None = None
    auth_value: str = "{{ api_key }}"
    #: ``auth.env``: the variables read, in order, when a target sets no api_key (the first one set wins)
    auth_envs: tuple[str, ...] = ()
    auth_required: bool = False
    auth: AuthSpec = field(default_factory=AuthSpec)
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    path: str = ""
    body: str = ""
    response: ResponseSection = field(default_factory=ResponseSection)
    error_message: str | None = None
    rate_limited: ErrorClass = field(default_factory=ErrorClass)
    retryable: ErrorClass = field(default_factory=ErrorClass)
    fatal: ErrorClass = field(default_factory=ErrorClass)
    retry_after_header: str = "Retry-After"
    #: ``rate_limits:``: the headers a provider's limiter reads (None: the definition names none)
    rate_limits: RateLimitHeaders | None = None
    #: ``rate_limits.overloaded``: answers backed off like a 429 (Anthropic's 529)
    overloaded: ErrorClass = field(default_factory=ErrorClass)
    json_mode_params: JSONObject = field(default_factory=dict)
    pricing: dict[str, Price] = field(default_factory=dict)
    embeddings: EmbeddingsRequest | None = None  # None: this provider cannot embed
    stream: StreamSpec | None = None  # None: this provider cannot stream
    batch: BatchSpec | None = None  # None: this provider has no batch API (``batch: true`` is refused)
    #: the request params the API knows (``params:``); None: the definition does not say
    known_params: tuple[str, ...] | None = None
    #: ``capabilities:`` as declared (streaming, tools, embeddings, vision, json_mode)
    capabilities: dict[str, bool] = field(default_factory=dict)
    #: ``parts.accepts``: the kinds of part (image, image_url, document) the API takes
    parts_accepted: tuple[str, ...] = ()
    #: ``parts.message``: the template of a user message made of parts (None: text only)
    parts_message: str | None = None
    #: the files this definition was read from, itself first, then what it ``extends:``, nearest first
    layers: tuple[Loaded, ...] = ()
    #: response expression path -> its reader (:meth:`reader`), made once
    _expressions: dict[tuple[str, ...], Reader] = field(default_factory=dict, repr=False, compare=False)
    _reads_headers: bool | None = field(default=None, repr=False, compare=False)

    @property
    def file(self) -> str:
        return self.loaded.file

    def written(self, *path: str) -> str | None:
        """The string at ``path`` as the file wrote it (``${VAR}`` not yet read), or None when there is none."""
        node: Any = self.loaded.data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, str):
            return None
        return self.loaded.interpolated.get(tuple(path), node)

    @property
    def uses_region(self) -> bool:
        """Whether the URL (``base_url`` or ``request.path``) has the target's ``{{ region }}`` in it."""
        return any(_REGION_REF.search(self.written(*path) or "") for path in (("base_url",), ("request", "path")))

    @property
    def sends_tool_history(self) -> bool:
        """Whether a conversation's tool calls and tool results go in ``messages`` (``capabilities.tool_history``)."""
        return bool(self.capabilities.get(TOOL_HISTORY, False))

    @property
    def auth_env(self) -> str | None:
        """The first variable ``auth.env`` names (None: none)."""
        return self.auth_envs[0] if self.auth_envs else None

    def key_from_env(self) -> str | None:
        """The key from the first ``auth.env`` variable that is set and not empty."""
        for name in self.auth_envs:
            value = os.environ.get(name)
            if value:
                return value
        return None

    @property
    def reads_headers(self) -> bool:
        """Whether a ``response:`` expression may read ``headers`` (else a response's scope can go without them)."""
        found = self._reads_headers
        if found is None:
            found = self._reads_headers = "headers" in json.dumps(self.response)
        return found

    @property
    def extends(self) -> tuple[str, ...]:
        """The names this definition inherits from, nearest first (empty: it extends nothing)."""
        return tuple(Path(layer.file).stem for layer in self.layers[1:])

    def where(self, *path: str | int) -> str:
        """``FILE:LINE key.path`` for a key of this definition (in the file of the layer that set it)."""
        layer = _origin(self.layers or (self.loaded,), tuple(path))
        line = layer.line_of(tuple(path))
        return f"{layer.file}:{line} {format_path(tuple(path))}" if line else f"{layer.file} {format_path(tuple(path))}"

    def missing_env(self, *path: str | int) -> str | None:
        """The unset variable used under ``path`` (e.g. base_url), if any."""
        for p, var in self.loaded.missing_env:
            if p[: len(path)] == tuple(path):
                return var
        return None

    def price(self, model: str) -> Price | None:
        """The price of ``model``: an exact key, else the longest matching glob."""
        if model in self.pricing:
            return self.pricing[model]
        globs = sorted((k for k in self.pricing if any(c in k for c in "*?[")), key=len, reverse=True)
        for pattern in globs:
            if fnmatch.fnmatchcase(model, pattern):
                return self.pricing[pattern]
        return None

    # -- rendering and extraction ----------------------------------------------

    def render_body(self, scope: RequestScope) -> JSON:
        return self.render_request_body(scope)[0]

    def render_request_body(self, scope: RequestScope) -> tuple[JSON, bytes | None]:
        """The request body for ``scope``, and the bytes to send for it when they are known already.

        The bytes, when not None, are exactly what the HTTP client would send for the body
        (``json.dumps(body, ensure_ascii=False)`` in UTF-8), so it need not encode the body again.
        """
        if self.body == OPENAI_BODY:
            found = _openai_request(scope)
            if found is not _SLOW:
                body, data = found
                return body, data
        try:
            text = _compile_template(self.body).render(**scope)
        except TemplateError as exc:
            raise DefinitionError(f"{self.where('request', 'body')}: template error: {exc}") from None
        try:
            return json.loads(text), None
        except ValueError as exc:
            raise DefinitionError(f"{self.where('request', 'body')}: did not render to JSON: {exc}") from None

    def refuses_parts(self, kinds: Iterable[str]) -> str | None:
        """Why a case whose input holds parts of ``kinds`` (image, image_url, document) cannot be sent; None when it can."""
        vision = bool(self.capabilities.get("vision", False))
        for kind in sorted(set(kinds)):
            if kind.startswith("image") and not vision:
                return f"provider {self.name!r} declares capabilities.vision false ({self.file}): it takes no images"
            if kind not in self.parts_accepted or self.parts_message is None:
                what = {"image": "images", "image_url": "images given by url", "document": "documents (PDF)"}.get(kind, kind)
                return f"provider {self.name!r} takes no {what} ({self.file}: parts.accepts lists {list(self.parts_accepted)})"
        return None

    def render_parts_message(self, parts: Sequence[Mapping[str, object]], text: str) -> JSONObject:
        """The user message ``parts.message`` renders for a case's input parts."""
        if self.parts_message is None:
            raise DefinitionError(f"{self.file}: provider {self.name!r} has no parts: section (it takes text only)")
        try:
            rendered = _compile_template(self.parts_message).render(parts=parts, text=text)
        except TemplateError as exc:
            raise DefinitionError(f"{self.where('parts', 'message')}: template error: {exc}") from None
        try:
            message = json.loads(rendered)
        except ValueError as exc:
            raise DefinitionError(f"{self.where('parts', 'message')}: did not render to JSON: {exc}") from None
        if not isinstance(message, dict):
            raise DefinitionError(f"{self.where('parts', 'message')}: must render a JSON object (the user message)")
        return message

    def render_embeddings_body(self, scope: EmbeddingsScope) -> JSON:
        """The embeddings request body for ``scope`` (``model``, ``input``); needs an ``embeddings:`` section."""
        assert self.embeddings is not None, "no embeddings: section"
        try:
            text = _compile_template(self.embeddings.body).render(**scope)
        except TemplateError as exc:
            raise DefinitionError(f"{self.where('embeddings', 'body')}: template error: {exc}") from None
        try:
            body: JSON = json.loads(text)
        except ValueError as exc:
            raise DefinitionError(f"{self.where('embeddings', 'body')}: did not render to JSON: {exc}") from None
        return body

    def render_location(self, text: str, scope: Mapping[str, object], *path: str) -> str:
        """``base_url`` or a path with ``{{ model }}``, ``{{ region }}`` and ``{{ stream }}`` filled in (text without
        ``{{``/``{%`` as it is): for APIs that put the model, the region or the streaming switch in the URL."""
        written = self.loaded.interpolated.get(tuple(path), text)  # as written, before ${VAR}
        if "{{" not in written and "{%" not in written:
            return text  # a ``{{`` an environment value brought is data, sent as it is
        if written != text and _template_marks(text) != _template_marks(_ENV_REF_WHOLE.sub("", written)):
            raise DefinitionError(f"{self.where(*path)}: an environment variable's value has template markers ({{{{, {{%, {{#)")
        if scope.get("region") is None and "region" in written:
            raise DefinitionError(f"{self.where(*path)} uses the region: set the target's region")
        try:
            return str(_compile_template(text).render(**{k: v for k, v in scope.items() if v is not None})).strip()
        except TemplateError as exc:
            raise DefinitionError(f"{self.where(*path)}: template error: {exc}") from None

    def render_json(self, source: str, scope: Mapping[str, object], *path: str) -> JSON:
        """The template ``source`` (the definition's at ``path``) rendered with ``scope`` and read as JSON."""
        try:
            text = _compile_template(source).render(**scope)
        except TemplateError as exc:
            raise DefinitionError(f"{self.where(*path)}: template error: {exc}") from None
        try:
            found: JSON = json.loads(text)
        except ValueError as exc:
            raise DefinitionError(f"{self.where(*path)}: did not render to JSON: {exc}") from None
        return found

    def render_path(self, key: tuple[str, str], scope: Mapping[str, object]) -> str:
        """The path at ``key`` (``("request", "path")`` or ``("embeddings", "path")``) for ``scope`` (:meth:`render_location`)."""
        source = self.path if key == ("request", "path") else self.embeddings.path if self.embeddings is not None else ""
        return self.render_location(source, scope, *key)

    def render_auth(self, api_key: str) -> str:
        try:
            return str(_compile_template(self.auth_value).render(api_key=api_key))
        except TemplateError as exc:
            raise DefinitionError(f"{self.where('auth', 'value')}: template error: {exc}") from None

    def evaluate(self, path: tuple[str, ...], scope: ExpressionScope) -> object:
        """Evaluate the response expression at ``path`` (e.g. ``("response", "text")``)."""
        read = self._expressions.get(path)
        if read is None:
            read = self.reader(path)
        return read(scope)

    def reader(self, path: tuple[str, ...]) -> Reader:
        """``lambda scope: self.evaluate(path, scope)``, with the expression looked up once (a caller can keep it)."""
        read = self._expressions.get(path)
        if read is not None:
            return read
        node: Any = self.loaded.data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, str):
            read = _nothing
        else:
            source: str = node

            def slow(scope: ExpressionScope) -> object:
                return self._jinja(path, source, scope)

            read = _fast_path(source, slow) or slow  # one call a read: the fast path asks Jinja itself when it cannot say

        self._expressions[path] = read
        return read

    def _jinja(self, path: tuple[str, ...], source: str, scope: ExpressionScope) -> object:
        """The expression at ``path`` evaluated by Jinja, its errors as DefinitionError naming FILE:LINE."""
        try:
            value = _compile_expression(source)(**scope)
        except TemplateError as exc:
            raise DefinitionError(f"{self.where(*path)}: {exc}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise DefinitionError(f"{self.where(*path)}: {type(exc).__name__}: {exc}") from None
        return _plain(value)

    def classify(self, status: int, body: str) -> str:
        """``fatal``, ``rate_limited``, ``retryable`` — definition first, then HTTP defaults."""
        if self.fatal.matches(status, body):
            return "fatal"
        if self.rate_limited.matches(status, body):
            return "rate_limited"
        if self.retryable.matches(status, body):
            return "retryable"
        if status == 429:
            return "rate_limited"
        if status >= 500 or status == 408:
            return "retryable"
        return "fatal"


#: providers/openai.yaml's request body (also what OpenAI-compatible definitions copy): built by
#: :func:`_openai_request` without Jinja when a definition's body is exactly this text
OPENAI_BODY = (
    '{\n  "model": {{ model | tojson }},\n  "messages": {{ (([{"role": "system", "content": system}] if system else []) + messages) | tojson }}\n'
    '  {%- if tools %},\n  "tools": [\n    {%- for t in tools %}{{ "," if not loop.first }}{"type": "function", "function": {{ t | tojson }}}{% endfor -%}\n'
    "  ]\n  {%- endif %}\n  {%- for key, value in params.items() %},\n  {{ key | tojson }}: {{ value | tojson }}\n  {%- endfor %}\n}\n"
)


_OPENAI_SCOPE = frozenset({"model", "messages", "system", "params", "tools"})


def _openai_layout(scope: RequestScope) -> Any:
    """The dict :data:`OPENAI_BODY` lays out, in plain Python, before its JSON round trip; ``_SLOW`` for unusual scopes.

    Rendering the body template cost a Jinja context and a JSON parse per
    cell (bench/RESULTS.md). The dict is built as the template lays it out —
    a params key repeating ``model``/``messages``/``tools`` replaces the value
    in place, as ``json.loads`` keeps the last duplicate; :func:`_openai_request`
    gives it one ``json.dumps``/``json.loads`` round trip, so values are copied and
    normalised (tuples to lists, keys to strings) and an unserialisable value
    raises the same TypeError the template's ``tojson`` does. Anything the
    template would treat differently (messages, tools or params of another
    type, a params key that is not a string) is left to Jinja; a test checks
    the two agree.

    Worth keeping (issue 29, ``python bench/fast_paths.py``): without it a
    5,000-cell instant provider run takes 9-11 % more CPU (whole process,
    median of 5-9 interleaved rounds, four runs; 22 µs a cell in-process,
    ``--stages``); at 50-500 ms a call, 0.3 % of the run's wall time.
    """
    if not scope.keys() >= _OPENAI_SCOPE:
        return _SLOW  # the template's StrictUndefined error, from Jinja
    messages, params, tools, system = scope["messages"], scope["params"], scope["tools"], scope["system"]
    if type(messages) is not list or type(params) is not dict or type(tools) is not list:
        return _SLOW
    if not all(type(key) is str for key in params):
        return _SLOW
    body: dict[str, object] = {  # values JSON may not hold raise tojson's TypeError in _openai_request
        "model": scope["model"],
        "messages": ([{"role": "system", "content": system}] if system else []) + messages,
    }
    if tools:
        body["tools"] = [{"type": "function", "function": t} for t in tools]
    body.update(params)
    return body


def _openai_request(scope: RequestScope) -> Any:
    """``(body, bytes)`` as :meth:`ProviderDefinition.render_request_body` gives them, from :func:`_openai_layout`; or ``_SLOW``.

    The body is the layout after a ``json.dumps``/``json.loads`` round trip. The text
    ``json.dumps`` makes is the request itself: the HTTP client would encode the decoded
    body back to the same text — unless a dict has a key that is not a string
    (``{1: "a", "1": "b"}`` becomes one key once decoded), or the text does not encode
    to UTF-8 (a lone surrogate): then the bytes are None and the client encodes the body
    as before. A layout of plain JSON values only (the usual one) is copied instead of
    decoded: the same values, for less. Tests compare both with the slow ways on random bodies.
    """
    built = _openai_layout(scope)
    if built is _SLOW:
        return _SLOW
    text = _DUMPS(built)  # the TypeError of tojson for what JSON cannot hold
    body = _json_copy(built)
    if body is _SLOW:  # a tuple, a subclass, a key that is not a string...
        body = json.loads(text)
        if not _string_keys(built):
            return body, None
    try:
        return body, text.encode("utf-8")
    except UnicodeEncodeError:
        return body, None


#: ``json.dumps(value, ensure_ascii=False)`` (what the template's ``tojson`` does), one encoder for all calls
_DUMPS = json_encoder(separators=(", ", ": "))


def _json_copy(value: Any) -> Any:
    """A deep copy of ``value`` if it holds only dicts with ``str`` keys, lists, str, int, float, bool and None
    (exact types: what ``json.loads(json.dumps(value))`` gives back equal); else ``_SLOW``."""
    kind = type(value)
    if kind is dict:
        out: JSONObject = {}
        for key, item in value.items():
            if type(key) is not str:
                return _SLOW
            t = type(item)
            if t is str or t is int or t is float or t is bool or item is None:
                out[key] = item
            else:
                item = _json_copy(item)
                if item is _SLOW:
                    return _SLOW
                out[key] = item
        return out
    if kind is list:
        items: JSONArray = []
        for item in value:
            t = type(item)
            if t is str or t is int or t is float or t is bool or item is None:
                items.append(item)
            else:
                item = _json_copy(item)
                if item is _SLOW:
                    return _SLOW
                items.append(item)
        return items
    return _SLOW


def _string_keys(value: Any) -> bool:
    """Whether every dict inside ``value`` (lists and tuples searched too) has only ``str`` keys."""
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                return False
            if isinstance(item, (dict, list, tuple)) and not _string_keys(item):
                return False
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, (dict, list, tuple)) and not _string_keys(item):
                return False
    return True


def _openai_body(scope: RequestScope) -> Any:
    """What :data:`OPENAI_BODY` renders to, then ``json.loads``; ``_SLOW`` for unusual scopes."""
    found = _openai_request(scope)
    return found if found is _SLOW else found[0]


@lru_cache(maxsize=256)
def _compile_template(source: str) -> Any:
    return _REQUEST_ENV.from_string(source)


@lru_cache(maxsize=256)
def _compile_expression(source: str) -> Any:
    return _RESPONSE_ENV.compile_expression(_strip_braces(source), undefined_to_none=True)


def _check_expression(source: str) -> None:
    """Raise the :class:`TemplateSyntaxError` :func:`_compile_expression` would (a syntax error, an unknown filter or test).

    Jinja's own steps up to the Python source of the expression (``Environment.compile_expression``), without
    compiling that source: a definition's expressions are checked when it loads, and compiled only when a
    response needs one (most never do; a definition has ~30). Code generation is the costly step (~1.5 M
    instructions an expression), and for an expression the only errors it raises are an unknown filter or test
    (``CodeGenerator.fail``'s other uses are in statements); an expression without either (a plain path, an
    ``or`` chain: most of a definition's) is not generated at all.
    """
    parser = Parser(_RESPONSE_ENV, _strip_braces(source), state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
    named = (nodes.Filter, nodes.Test)
    if not isinstance(expr, named) and next(expr.find_all(named), None) is None:
        return
    expr.set_environment(_RESPONSE_ENV)
    generate(nodes.Template([nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)], lineno=1), _RESPONSE_ENV, None, None)


#: ``response.choices[0].message.content or ""``: a name, then ``.field`` / ``[N]`` steps, then an optional ``or`` literal
_PATH_EXPR = re.compile(r"\s*([A-Za-z_]\w*)((?:\s*(?:\.\s*[A-Za-z_]\w*|\[\s*\d+\s*\]))*)(?:\s+or\s+(\"\"|''|\[\]|none|None|0))?\s*")
_STEP = re.compile(r"\.\s*([A-Za-z_]\w*)|\[\s*(\d+)\s*\]")
_LITERALS: dict[str, JSON] = {'""': "", "''": "", "[]": [], "none": None, "None": None, "0": 0}
_SLOW = object()  # "the fast path cannot say: ask Jinja"


def _fast_path(source: str, slow: Reader | None = None) -> Reader | None:
    """A plain-Python reader for the common response expressions, or None.

    Rendering a Jinja expression costs a context per call, and a response is
    read with ~6 of them: a per-cell hot spot (bench/RESULTS.md). The reader
    only answers when every step is a plain hit — a key present in a dict
    (and not a dict method's name, which Jinja would resolve to the method)
    or an index inside a list — and returns ``_SLOW`` otherwise (or, given
    ``slow``, what ``slow(scope)`` says: Jinja's reader), so anything missing
    or unusual is still evaluated by Jinja with its exact semantics. What it
    answers is :func:`_plain`, as Jinja's answers are.

    Worth keeping (issue 29, ``python bench/fast_paths.py``): without it a
    5,000-cell instant provider run takes 10-16 % more CPU (whole process,
    median of 5-7 interleaved rounds; 57 µs a cell in-process,
    ``--stages``); at 50-500 ms a call, 0.7 % of the run's wall time.
    """
    path = _plain_path(source)
    if path is None:
        return None
    name, steps, has_default, default = path
    keyed: tuple[tuple[bool, Any], ...] = tuple((type(step) is str, step) for step in steps)  # a key or an index: found once

    def read(scope: ExpressionScope) -> object:
        node: Any = scope.get(name, _SLOW)
        if node is _SLOW:
            return _SLOW if slow is None else slow(scope)
        for is_key, step in keyed:
            # a missing key, an index past the end or a step into None is undefined in Jinja
            # (ChainableUndefined: it stays undefined to the end); any other miss asks Jinja
            if node is None:
                break
            if is_key:
                if type(node) is not dict:
                    return _SLOW if slow is None else slow(scope)
                node = node.get(step, _SLOW)
                if node is _SLOW:
                    node = None
                    break
            elif type(node) is not list:
                return _SLOW if slow is None else slow(scope)
            elif step >= len(node):
                node = None
                break
            else:
                node = node[step]
        if has_default:
            node = node or (list(default) if isinstance(default, list) else default)
        return node if type(node) in _PLAIN_SCALARS else _plain(node)

    return read


@lru_cache(maxsize=256)
def _plain_path(source: str) -> tuple[str, tuple[str | int, ...], bool, Any] | None:
    """What :func:`_fast_path` reads for ``source``: (name, steps, whether an ``or`` literal follows, that literal),
    or None for an expression it leaves to Jinja. Parsed once a source (a definition's readers are made per target)."""
    m = _PATH_EXPR.fullmatch(_strip_braces(source))
    if m is None:
        return None
    name, steps_text, literal = m.group(1), m.group(2), m.group(3)
    steps = tuple(key if key else int(index) for key, index in _STEP.findall(steps_text))
    for step in steps:
        if isinstance(step, str) and (hasattr(dict, step) or step.startswith("_")):
            return None
    return name, steps, literal is not None, _LITERALS.get(literal or "")


def _strip_braces(source: str) -> str:
    s = source.strip()
    if s.startswith("{{") and s.endswith("}}") and s.count("{{") == 1:
        return s[2:-2].strip()
    return s


def plain_path(source: str) -> tuple[str, tuple[str | int, ...]] | None:
    """``(name, steps)`` of a response expression that is a plain path (``response.choices[0].message.content or ""``:
    a name, ``.field`` and ``[N]`` steps, an optional ``or`` literal), else None."""
    m = _PATH_EXPR.fullmatch(_strip_braces(source))
    if m is None:
        return None
    return m.group(1), tuple(key if key else int(index) for key, index in _STEP.findall(m.group(2)))


#: values :func:`_plain` gives back as they are
_PLAIN_SCALARS = frozenset({str, int, float, bool, dict, type(None)})


def _nothing(scope: ExpressionScope) -> None:
    """The reader of an expression the definition does not have."""
    return None


def _plain(value: Any) -> Any:
    """Jinja undefined values (and those nested in lists) become None."""
    if isinstance(value, Undefined):
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --- loading ------------------------------------------------------------------


@lru_cache(maxsize=1)
def shipped_dir() -> Path:
    return data_dir("providers")


def _issue(loaded: Loaded | tuple[Loaded, ...], path: KeyPath, message: str) -> Issue:
    """The issue at ``path``, named in the file (of an ``extends:`` chain's, nearest first) that set it."""
    layer = _origin(loaded, path) if isinstance(loaded, tuple) else loaded
    return Issue(layer.file, layer.line_of(path), format_path(path), message)


def _display(path: Path) -> str:
    from evalx.common.documents import display_path

    return display_path(path)


#: ``{{ region }}`` (or an expression with it) in a URL template
_REGION_REF = re.compile(r"\{\{[^}]*\bregion\b")

#: the definition's strings that are Jinja templates
_TEMPLATE_PATHS = frozenset(
    {("request", "body"), ("auth", "value"), ("embeddings", "body"), ("batch", "request"), ("batch", "create", "body")}
)


#: a ``${VAR}`` a definition uses (its value is part of what the file means)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")
#: a whole ``${VAR}`` or ``${VAR:-default}``
_ENV_REF_WHOLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-[^}]*)?\}")


def _template_marks(text: str) -> tuple[int, int, int]:
    return text.count("{{"), text.count("{%"), text.count("{#")


#: parsed definitions (or their issues) by everything they were made from: see :func:`load_definition`
_PARSED: dict[tuple[Any, ...], ProviderDefinition | list[Issue]] = {}
#: path -> what its last read found, trusted again while the file's stat is unchanged (see :func:`_stamp`)
_SEEN: dict[
    tuple[str, bool, str | None],
    tuple[tuple[tuple[str, tuple[int, ...] | None], ...], str, tuple[tuple[str, str | None], ...], ProviderDefinition | list[Issue]],
] = {}
_KEEP = 64
#: a file changed this recently may change again within the same timestamp tick without its stat changing
_RACY_NS = 2_000_000_000


def _stamp(path: Path | str) -> tuple[int, ...] | None:
    """The stat of ``path`` that any edit changes, or None when it cannot be trusted: changed too recently to tell."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_NS:
        return None  # as git does with a "racily clean" index entry: look at the content instead
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _KEEP:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _env_of(names: tuple[str, ...] | list[str]) -> tuple[tuple[str, str | None], ...]:
    return tuple((name, os.environ.get(name)) for name in names)


def load_definition(path: Path, *, shipped: bool = False, user_dir: Path | None = None) -> ProviderDefinition:
    """Read, resolve and validate one provider file; raise :class:`ConfigError` naming FILE:LINE.

    This is the one place ``extends:`` is resolved (:func:`_chain`): the file and the
    definitions it extends (looked up in ``user_dir`` and the shipped ones) are merged,
    then validated as one, so everything downstream sees a whole definition.

    Each file is parsed and validated once: the result (or its issues) is kept
    under the files' paths, their text and the values of the ``${VAR}`` they use,
    so a plan of 10,000 matrix variants of one provider reads its YAML once,
    while an edited file, or a changed variable, is read afresh. Files whose
    stat has not changed since they were read (and were not changed just before)
    are not even read again.
    """
    cwd = os.getcwd()  # messages name the file relative to it
    seen_key = (str(path), shipped, str(user_dir) if user_dir is not None else None)
    seen = _SEEN.get(seen_key)
    if (
        seen is not None
        and seen[1] == cwd
        and all(s is not None and _stamp(f) == s for f, s in seen[0])
        and _env_of([n for n, _ in seen[2]]) == seen[2]
    ):
        found = seen[3]
    else:
        stamps = [(str(path), _stamp(path))]
        chain = _chain(path, shipped, user_dir)
        if len(chain) > 1:  # which file a name means depends on the directory's listing too
            stamps += [(str(p), _stamp(p)) for _, _, p in chain[1:]]
            if user_dir is not None:
                stamps.append((str(user_dir), _stamp(user_dir)))
        key = (shipped, tuple(k for k, _, _ in chain))
        env = tuple(sorted({pair for k in key[1] for pair in k[3]}))
        cached = _PARSED.get(key)
        if cached is None:
            try:
                cached = _parse_definition(path, tuple(layer for _, layer, _ in chain), shipped)
            except ConfigError as exc:
                cached = list(exc.issues)
            _remember(_PARSED, key, cached)
        found = cached
        if all(s is not None and _stamp(f) == s for f, s in stamps):  # unchanged while read
            _remember(_SEEN, seen_key, (tuple(stamps), cwd, env, found))
    if isinstance(found, list):
        raise ConfigError(list(found))
    return found


#: one file's YAML (or its issues) by its path, name shown, text and the ${VAR} values it uses
_LAYERS: dict[tuple[Any, ...], Loaded | list[Issue]] = {}


def _read_layer(path: Path) -> tuple[tuple[Any, ...], Loaded]:
    """One definition file as YAML (not yet validated: it may be only the part of a definition that ``extends:`` another)."""
    shown = _display(path)
    try:  # a regular file only, at most PROVIDER's size
        text = read_text(path, PROVIDER, shown=shown)
    except UnreadableFile as exc:
        raise ConfigError(Issue(shown, None, "", f"cannot read provider definition: {exc.reason}")) from None
    key = (str(path), shown, text, _env_of(sorted(set(_ENV_REF.findall(text)))))
    found = _LAYERS.get(key)
    if found is None:
        try:  # ${VAR} in a template is data, never template code
            found = load_yaml(text, shown, template_path=_TEMPLATE_PATHS.__contains__)
        except ConfigError as exc:
            found = list(exc.issues)
        _remember(_LAYERS, key, found)
    if isinstance(found, list):
        raise ConfigError(list(found))
    if not isinstance(found.data, dict):
        raise ConfigError(Issue(shown, found.line_of(()) or 1, "", "a provider definition must be a mapping with request: and response:"))
    return key, found


def _chain(path: Path, shipped: bool, user_dir: Path | None) -> list[tuple[tuple[Any, ...], Loaded, Path]]:
    """The file at ``path`` and every definition it ``extends:``, nearest first.

    A shipped definition extends shipped ones only; a project file looks in ``user_dir``
    first, and one extending its own name (``openai.yaml`` with ``extends: openai``) means
    the shipped one. An unknown name or a cycle is one issue at the ``extends:`` line.
    """
    chain: list[tuple[tuple[Any, ...], Loaded, Path]] = []
    current, current_shipped = path, shipped
    while True:
        key, layer = _read_layer(current)
        chain.append((key, layer, current))
        parent = layer.data.get("extends")
        if parent is None:
            return chain
        if not isinstance(parent, str):
            raise ConfigError(_issue(layer, ("extends",), "must be the name of a provider definition (a string)"))
        own = current_shipped or parent == current.stem
        entries = available(None if own else user_dir)
        if own:
            entries = {name: e for name, e in entries.items() if e.shipped}
        entry = entries.get(parent)
        if entry is None and parent == current.stem:
            raise ConfigError(_issue(layer, ("extends",), f"extends its own name, and no shipped definition is called {parent!r}"))
        if entry is None:
            raise ConfigError(_issue(layer, ("extends",), _unknown_message(parent, entries, None if own else user_dir)))
        names = [p.stem for _, _, p in chain]
        if any(entry.path == p for _, _, p in chain):
            loop = " -> ".join([*names, entry.name])
            raise ConfigError(_issue(layer, ("extends",), f"a cycle: {loop}"))
        current, current_shipped = entry.path, entry.shipped


def _has(data: object, path: KeyPath) -> bool:
    """Whether ``path`` leads to a value in ``data``."""
    for part in path:
        if isinstance(data, list) and isinstance(part, int):
            if not 0 <= part < len(data):
                return False
            data = data[part]
            continue
        if not (isinstance(data, dict) and part in data):
            return False
        data = data[part]
    return True


def _origin(layers: tuple[Loaded, ...], path: KeyPath) -> Loaded:
    """The layer (a file of an ``extends:`` chain, nearest first) that set the value at ``path``, or its nearest ancestor's."""
    if len(layers) == 1:
        return layers[0]
    p = tuple(path)
    while p:
        for layer in layers:
            if _has(layer.data, p):
                return layer
        p = p[:-1]
    return layers[0]


#: top-level sections a child's definition replaces whole rather than merges: a price table is one host's
#: (OpenAI's prices merged under xAI's would price a model xAI does not serve)
_REPLACED_WHOLE = frozenset({"pricing"})


def _merge(base: object, over: object, top: bool = False) -> object:
    """``over`` on top of ``base``: mappings merge key by key (a None value removes the key), anything else replaces.

    A mapping whose ``kind:`` differs from the inherited one's (``auth: {kind: sigv4, ...}`` over a
    header key) replaces it whole: another kind's keys would not mean anything there; so does a
    definition's ``pricing:`` (``top``: ``base`` and ``over`` are whole definitions).
    """
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    if over.get("kind", base.get("kind")) != base.get("kind"):
        return {key: value for key, value in over.items() if value is not None}
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif key in out and not (top and key in _REPLACED_WHOLE):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


#: what a definition never takes from the one it ``extends:``
_NOT_INHERITED = frozenset({"name", "extends", "example_model"})


def _resolved(layers: tuple[Loaded, ...]) -> Loaded:
    """The one document an ``extends:`` chain (nearest first) makes: the files merged, root first."""
    if len(layers) == 1:
        return layers[0]
    data: object = {}
    for layer in reversed(layers):
        own = {k: v for k, v in layer.data.items() if layer is layers[0] or k not in _NOT_INHERITED}
        data = _merge(data, own, top=True)
    child = layers[0]
    return Loaded(
        data=data,
        lines=child.lines,
        file=child.file,
        missing_env=[(p, v) for layer in layers for p, v in layer.missing_env if _origin(layers, p) is layer],
        env_values={k: v for layer in reversed(layers) for k, v in layer.env_values.items()},
        interpolated={p: t for layer in reversed(layers) for p, t in layer.interpolated.items() if _origin(layers, p) is layer},
    )


def _unknown_message(name: str, entries: Mapping[str, ProviderEntry], user_dir: Path | None) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(entries), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    where = f"; looked in {_display(user_dir)} and the shipped providers" if user_dir else ""
    known = ", ".join(entries) or "none"
    return f"unknown provider {name!r}{hint}{where}; known: {known}"


def _parse_definition(path: Path, layers: tuple[Loaded, ...], shipped: bool) -> ProviderDefinition:
    from evalx.common.documents import describe_schema_error, schema_error_leaves

    loaded = _resolved(layers)
    if len(layers) > 1:
        loaded.data.pop("extends", None)  # resolved (_chain checked it): downstream sees the whole definition
    issues: list[Issue] = []
    for err in SchemaValidator(WHOLE_SCHEMA).iter_errors(loaded.data):
        for leaf in schema_error_leaves(err):
            key, message = describe_schema_error(leaf)
            issues.append(_issue(layers, key, message))
    data = loaded.data
    stem = path.stem
    if isinstance(data.get("name"), str) and data["name"] != stem:
        issues.append(_issue(layers, ("name",), f"name {data['name']!r} must match the file name {stem!r}"))
    if not issues:
        issues += _auth_issues(layers, data)
        issues += _template_issues(layers, data)
        check_template_source = data.get("parts", {}).get("message") if isinstance(data.get("parts"), dict) else None
        if isinstance(check_template_source, str):
            try:
                _REQUEST_ENV.parse(check_template_source)
            except TemplateSyntaxError as exc:
                issues.append(_issue(layers, ("parts", "message"), f"template syntax error: {exc.message}"))
        vision = isinstance(data.get("capabilities"), dict) and data["capabilities"].get("vision") is True
        accepts = data.get("parts", {}).get("accepts") if isinstance(data.get("parts"), dict) else None
        if vision and "image" not in (accepts or ()):
            message = "capabilities.vision is true but no parts: section maps images (parts: {accepts: [image], message: ...})"
            issues.append(_issue(layers, ("capabilities", "vision"), message))
    if issues:
        issues.sort(key=lambda i: (i.file != loaded.file, i.line or 0))
        raise ConfigError(issues)

    file = cast(DefinitionFile, data)  # the schema accepted it: DefinitionFile says what PROVIDER_SCHEMA does
    auth = file.get("auth") or AuthSection()
    errors = file.get("errors") or ErrorsSection()
    request = file["request"]
    return ProviderDefinition(
        name=stem,
        source=path,
        shipped=shipped,
        loaded=loaded,
        description=str(file.get("description") or ""),
        example_model=file.get("example_model"),
        base_url=file.get("base_url"),
        auth_header=auth.get("header"),
        auth_value=auth.get("value", "{{ api_key }}"),
        auth_envs=_env_names(auth.get("env")),
        auth_required=bool(auth.get("required", False)),
        auth=_auth_spec(auth),
        headers=dict(file.get("headers") or {}),
        method=request.get("method", "POST"),
        path=request["path"],
        body=request["body"],
        response=file["response"],
        error_message=errors.get("message"),
        rate_limited=_error_class(errors.get("rate_limited")),
        retryable=_error_class(errors.get("retryable")),
        fatal=_error_class(errors.get("fatal")),
        retry_after_header=errors.get("retry_after_header", "Retry-After"),
        rate_limits=_rate_limits(file.get("rate_limits")),
        overloaded=_error_class((file.get("rate_limits") or RateLimitsSection()).get("overloaded")),
        json_mode_params=dict((file.get("json_mode") or JsonModeSection()).get("params") or {}),
        pricing={model: Price.from_mapping(p) for model, p in (file.get("pricing") or {}).items()},
        embeddings=_embeddings_request(file.get("embeddings")),
        stream=_stream_spec(file.get("stream")),
        batch=_batch_spec(file.get("batch")),
        known_params=tuple(file["params"]) if "params" in file else None,
        capabilities=dict(file.get("capabilities") or {}),
        parts_accepted=tuple(file["parts"]["accepts"]) if "parts" in file else (),
        parts_message=file["parts"]["message"] if "parts" in file else None,
        layers=layers,
    )


def _env_names(value: str | list[str] | None) -> tuple[str, ...]:
    """``auth.env`` as a tuple of names: one, a list of them, or none."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _auth_command(value: str | list[str]) -> tuple[str, ...]:
    import shlex

    return tuple(shlex.split(value)) if isinstance(value, str) else tuple(value)


def _auth_spec(auth: AuthSection) -> AuthSpec:
    return AuthSpec(
        kind=auth.get("kind", "header"),
        command=_auth_command(auth["command"]) if "command" in auth else (),
        ttl_s=float(auth.get("ttl_s", 600.0)),
        scopes=tuple(auth.get("scopes") or ()),
        service=auth.get("service", ""),
    )


def _auth_issues(loaded: tuple[Loaded, ...], data: Any) -> list[Issue]:
    """``auth:``'s keys (of ``data``, an ``extends:`` chain's, resolved) against its kind: each kind's required keys, and no key
    another kind reads."""
    auth = data.get("auth")
    if not isinstance(auth, dict):
        return []
    kind = auth.get("kind", "header")
    issues: list[Issue] = []
    for key in AUTH_KINDS[kind]:
        if key not in auth:
            issues.append(_issue(loaded, ("auth",), f"auth kind {kind!r} needs {key}:"))
    for key in auth:
        if key != "kind" and key not in _AUTH_KEYS_OF[kind]:
            issues.append(_issue(loaded, ("auth", key), f"{key}: is not read by auth kind {kind!r}"))
    if "command" in auth:
        try:
            if not _auth_command(auth["command"]):
                issues.append(_issue(loaded, ("auth", "command"), "the command is empty"))
        except ValueError as exc:
            issues.append(_issue(loaded, ("auth", "command"), f"cannot split the command: {exc}"))
    return issues


def _stream_spec(spec: StreamSection | None) -> StreamSpec | None:
    if not spec:
        return None
    end = spec["end"]
    return StreamSpec(
        params=dict(spec["params"]),
        end_data=end.get("data"),
        end_event=end.get("event"),
        end_when=end.get("when"),
        events={str(k): v.copy() if v else StreamEventSection() for k, v in spec["events"].items()},
        default=bool(spec.get("default", False)),
        framing=spec.get("framing", "sse"),
    )


def _batch_spec(spec: BatchSection | None) -> BatchSpec | None:
    if not spec:
        return None
    upload = spec.get("upload")
    return BatchSpec(
        discount=float(spec["discount"]),
        max_requests=int(spec["max_requests"]),
        max_bytes=int(spec["max_bytes"]) if "max_bytes" in spec else None,
        request=spec["request"],
        create_path=spec["create"]["path"],
        create_body=spec["create"]["body"],
        status_path=spec["status"]["path"],
        ended=frozenset(spec["status"]["ended"]),
        upload_path=upload["path"] if upload else None,
        upload_fields=tuple(sorted((upload.get("fields") or {}).items())) if upload else (),
    )


def _embeddings_request(spec: EmbeddingsSection | None) -> EmbeddingsRequest | None:
    if not spec:
        return None
    return EmbeddingsRequest(
        method=spec.get("method", "POST"),
        path=spec["path"],
        body=spec["body"],
        has_input_tokens="input_tokens" in (spec.get("usage") or EmbeddingsUsageSection()),
    )


def _rate_limits(spec: RateLimitsSection | None) -> RateLimitHeaders | None:
    """A ``rate_limits:`` section as the limiter reads it (header names lower-cased: responses' headers are looked up so)."""
    if spec is None:
        return None
    sections = cast("Mapping[str, BucketSection]", spec)
    buckets = tuple(
        (kind, BucketHeaders(b["remaining"].lower(), (b.get("limit") or "").lower() or None, (b.get("reset") or "").lower() or None))
        for kind in BUCKET_KINDS
        if (b := sections.get(kind)) is not None
    )
    waits = [(name.lower(), 0.001) for name in spec.get("retry_after_ms", ["retry-after-ms"])]
    waits += [(name.lower(), 1.0) for name in spec.get("retry_after", ["retry-after"])]
    return RateLimitHeaders(buckets, tuple(waits))


def _error_class(spec: ErrorClassSection | None) -> ErrorClass:
    spec = spec or ErrorClassSection()
    return ErrorClass(frozenset(spec.get("status") or ()), tuple(spec.get("body") or ()))


def _template_issues(loaded: tuple[Loaded, ...], data: Any) -> list[Issue]:
    """Compile every template and expression of ``data`` (an ``extends:`` chain's, resolved) now, so a typo names its line before any request."""
    issues: list[Issue] = []

    def check_template(path: KeyPath, source: Any) -> None:
        if isinstance(source, str):
            try:
                _REQUEST_ENV.parse(source)
            except TemplateSyntaxError as exc:
                layer = _origin(loaded, path)
                line = (layer.line_of(path) or 0) + (exc.lineno if isinstance(source, str) and "\n" in source else 0)
                issues.append(Issue(layer.file, line or None, format_path(path), f"template syntax error: {exc.message}"))

    def check_expression(path: KeyPath, source: Any) -> None:
        if isinstance(source, str):
            try:
                _check_expression(source)
            except TemplateSyntaxError as exc:
                issues.append(_issue(loaded, path, f"expression syntax error: {exc.message}"))

    check_template(("request", "path"), data["request"].get("path"))
    check_template(("request", "body"), data["request"].get("body"))
    check_template(("base_url",), data.get("base_url"))
    check_template(("auth", "value"), (data.get("auth") or {}).get("value"))
    response = data["response"]
    check_expression(("response", "text"), response.get("text"))
    check_expression(("response", "stop_reason"), response.get("stop_reason"))
    for section in ("tool_calls", "usage"):
        for key, expr in (response.get(section) or {}).items():
            check_expression(("response", section, key), expr)
    check_expression(("errors", "message"), (data.get("errors") or {}).get("message"))
    embeddings = data.get("embeddings") or {}
    check_template(("embeddings", "path"), embeddings.get("path"))
    check_template(("embeddings", "body"), embeddings.get("body"))
    check_expression(("embeddings", "vector"), embeddings.get("vector"))
    for key, expr in (embeddings.get("usage") or {}).items():
        check_expression(("embeddings", "usage", key), expr)
    check_expression(("stream", "end", "when"), ((data.get("stream") or {}).get("end") or {}).get("when"))
    for kind, entry in ((data.get("stream") or {}).get("events") or {}).items():
        for key, expr in (entry or {}).items():
            if isinstance(expr, dict):
                for sub, inner in expr.items():
                    check_expression(("stream", "events", kind, key, sub), inner)
            else:
                check_expression(("stream", "events", kind, key), expr)
    batch = data.get("batch") or {}
    check_template(("batch", "request"), batch.get("request"))
    templates: tuple[tuple[str, tuple[str, ...]], ...] = (("upload", ("path",)), ("create", ("path", "body")), ("status", ("path",)))
    for section, keys in templates:
        for key in keys:
            check_template(("batch", section, key), (batch.get(section) or {}).get(key))
    expressions: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("upload", ("file_id",)),
        ("create", ("id",)),
        ("status", ("state", "done", "total", "results", "error")),
        ("result", ("custom_id", "outcome", "response", "status", "error")),
    )
    for section, names in expressions:
        for key in names:
            check_expression(("batch", section, key), (batch.get(section) or {}).get(key))
    for cls in ("rate_limited", "retryable", "fatal"):
        for i, pattern in enumerate(((data.get("errors") or {}).get(cls) or {}).get("body") or []):
            try:
                re.compile(pattern)
            except re.error as exc:
                issues.append(_issue(loaded, ("errors", cls, "body", i), f"invalid regular expression: {exc}"))
    return issues


# --- a target's params against its definition -------------------------------------


def batch_requested(spec: ProviderTargetSpec | Mapping[str, object]) -> bool:
    """Whether a provider target's entry asks for its batch API (``batch: true`` or ``batch: {...}``)."""
    value = spec.batch if isinstance(spec, ProviderTargetSpec) else spec.get("batch")
    return value is not None and value is not False


def _stream_and_params(spec: ProviderTargetSpec | Mapping[str, object]) -> tuple[object, object]:
    """A provider target's ``stream`` and ``params``: its record's, or (while a config is checked) its entry's as written."""
    if isinstance(spec, ProviderTargetSpec):
        return spec.stream, spec.params
    return spec.get("stream"), spec.get("params")


def stream_requested(spec: ProviderTargetSpec | Mapping[str, object], definition: ProviderDefinition) -> bool:
    """Whether a provider target streams: its ``stream:``, else ``params: {stream: ...}``, else the definition's default."""
    value, params = _stream_and_params(spec)
    if value is None:
        value = params.get("stream") if isinstance(params, Mapping) else None
    if value is None or not isinstance(value, bool):  # a templated params.stream is sent as it is
        return definition.stream is not None and definition.stream.default
    return value


def target_problems(spec: ProviderTargetSpec | Mapping[str, object], definition: ProviderDefinition) -> list[tuple[KeyPath, str, bool]]:
    """What a provider target's ``stream``/``params`` get wrong against its definition: ``(path under the target, message, is_warning)``.

    A target that streams with a definition that has no ``stream:`` section is an error; a
    ``params:`` key the definition's ``params:`` list does not know is a warning with a
    did-you-mean (a definition without the list checks nothing).
    """
    from evalx.common.documents import did_you_mean

    problems: list[tuple[KeyPath, str, bool]] = []
    stream, params = _stream_and_params(spec)
    if definition.stream is None and stream_requested(spec, definition):
        path: KeyPath = ("stream",) if stream is not None else ("params", "stream")
        problems.append(
            (
                path,
                f"provider {definition.name!r} cannot stream ({definition.file} has no stream: section)"
                + (
                    "; for Ollama use provider: openai with base_url: http://localhost:11434/v1, its OpenAI-compatible API"
                    if definition.name == "ollama"
                    else ""
                ),
                False,
            )
        )
    if definition.batch is None and batch_requested(spec):
        problems.append((("batch",), f"provider {definition.name!r} has no batch API ({definition.file} has no batch: section)", False))
    known = definition.known_params
    if known is not None and isinstance(params, Mapping):
        allowed = set(known) | {"stream"}
        for key in params:
            if isinstance(key, str) and key not in allowed:
                problems.append(
                    (
                        ("params", key),
                        f"{key!r} is not a parameter provider {definition.name!r} knows{did_you_mean(key, known)} "
                        f"(its list: {definition.where('params')}); it is sent as it is",
                        True,
                    )
                )
    return problems


# --- finding definitions --------------------------------------------------------


def providers_dir_of(config: Any) -> Path | None:
    """The config's ``providers_dir:`` resolved against the config's folder, if set."""
    value = config.data.get("providers_dir")
    return (config.base_dir / value).resolve() if isinstance(value, str) and value else None


#: directory -> (its stat, its provider files) when listed, trusted while the stat is unchanged
_LISTED: dict[str, tuple[tuple[int, ...], dict[str, Path]]] = {}


_NO_FILES: Mapping[str, Path] = MappingProxyType({})


def _files(directory: Path | None) -> Mapping[str, Path]:
    """The provider files in ``directory`` by name (the same mapping while its listing is trusted: read it, never change it)."""
    if directory is None or not directory.is_dir():
        return _NO_FILES
    stamp = _stamp(directory)  # adding, removing or renaming a file changes its directory's stat
    listed = _LISTED.get(str(directory)) if stamp is not None else None
    if listed is not None and listed[0] == stamp:
        return listed[1]
    out: dict[str, Path] = {}
    for p in sorted(directory.iterdir()):
        # not only regular files: one that is not (a FIFO) is named when it is loaded, not mistaken for a missing provider
        if p.suffix in (".yaml", ".yml") and not p.is_dir() and p.stem not in out:
            out[p.stem] = p
    if stamp is not None and _stamp(directory) == stamp:
        _remember(_LISTED, str(directory), (stamp, dict(out)))
    return out


@dataclass(frozen=True)
class ProviderEntry:
    name: str
    path: Path
    shipped: bool
    overrides_shipped: bool = False


#: the last listings :func:`available` combined (kept, so they are not collected and their ids reused) and what it made
_AVAILABLE: list[tuple[Mapping[str, Path], Mapping[str, Path], dict[str, ProviderEntry]]] = []


def available(user_dir: Path | None = None) -> dict[str, ProviderEntry]:
    """Every provider name found, a user directory's file winning over a shipped one."""
    shipped, mine = _files(shipped_dir()), _files(user_dir)
    for seen_shipped, seen_mine, made in _AVAILABLE:
        if seen_shipped is shipped and seen_mine is mine:  # the same trusted listings: the same entries
            return dict(made)
    entries = {name: ProviderEntry(name, p, True) for name, p in shipped.items()}
    for name, p in mine.items():
        entries[name] = ProviderEntry(name, p, False, overrides_shipped=name in entries)
    made = dict(sorted(entries.items()))
    if shipped:
        _AVAILABLE.insert(0, (shipped, mine, made))
        del _AVAILABLE[8:]
    return dict(made)


def find_provider(name: str, user_dir: Path | None = None) -> ProviderDefinition:
    """Load the definition called ``name``; raise :class:`ConfigError` if unknown or invalid."""
    entries = available(user_dir)
    entry = entries.get(name)
    if entry is None:
        raise UnknownProvider(_unknown_message(name, entries, user_dir))
    return load_definition(entry.path, shipped=entry.shipped, user_dir=user_dir)
