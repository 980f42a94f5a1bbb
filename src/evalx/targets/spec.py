"""A ``targets:`` entry as typed records: the run settings, the three kinds, and their JSON Schema.

These records are the one declaration of what a target may say:
``config/schema.py`` writes the config schema's ``target`` and
``judge_target`` definitions from them, and :func:`target_spec` turns an
entry the schema accepted (or a ``matrix:`` variant of one) into the record
of its kind.
"""

# No `from __future__ import annotations` here: evalx.common.typeschema reads these annotations at run time, and
# evaluated once at import (from cached bytecode) they cost half of what compiling them from strings does.

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, TypeVar

from evalx.common.json_types import JSON, JSONObject
from evalx.common.typeschema import (
    Id,
    NonNegative,
    PositiveInt,
    PositiveNumber,
    Schema,
    build,
    build_union,
    properties,
    required_keys,
    schema_of,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "TARGET_KINDS",
    "AdaptiveConcurrency",
    "AnyTargetSpec",
    "BatchOptions",
    "DefaultSettings",
    "EngineTargetSpec",
    "Pricing",
    "ProviderTargetSpec",
    "PythonTargetSpec",
    "RateLimit",
    "RaySettings",
    "RunSettings",
    "TargetSpec",
    "record_of",
    "target_schema",
    "target_spec",
    "written_entry",
]

_File = Annotated[str, Schema(minLength=1)]
_StrMap = Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class AdaptiveConcurrency:
    """``concurrency: {min, start, max}``: the adaptive window's bounds (``auto``: 1, 8, 64)."""

    min: Annotated[PositiveInt | None, Schema(description="The fewest requests in flight the window backs off to (default 1).")] = None
    start: Annotated[PositiveInt | None, Schema(description="Requests in flight at first (default 8).")] = None
    max: Annotated[PositiveInt | None, Schema(description="The most requests in flight, and the cells run at once (default 64).")] = None


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The settings a target and ``defaults:`` may both set (resolved by :func:`evalx.targets.resolve_settings`)."""

    concurrency: Annotated[
        PositiveInt | Literal["auto"] | AdaptiveConcurrency | None,
        Schema(
            description="Cells in flight at once, per target; or auto / {min, start, max}: a provider target's requests in flight "
            "grow while the provider keeps up and halve on a 429 (docs/providers.md, Rate limits and adaptive concurrency)."
        ),
    ] = None
    timeout_s: Annotated[PositiveNumber | None, Schema(description="Per-cell timeout in seconds.")] = None
    retries: Annotated[int | None, Schema(minimum=0, description="Retries on transport errors, 429 and 5xx.")] = None
    backoff_s: Annotated[
        NonNegative | None,
        Schema(description="Base of the jittered exponential backoff between retries, in seconds (default 0.5)."),
    ] = None
    cache: Annotated[bool | None, Schema(description="Cache responses (default: on for provider targets, off otherwise).")] = None
    max_response_bytes: Annotated[
        PositiveInt | None,
        Schema(
            description="The most bytes one response (a body or a stream, counted after decompression) may have, "
            "and what a cell may store: a Python target's answer, a turn, a whole conversation (simulated users' "
            "messages included); past it the cell is an error (default 67108864, 64 MiB)."
        ),
    ] = None


@dataclass(frozen=True, kw_only=True)
class DefaultSettings(RunSettings):
    """What ``defaults:`` says of every target's settings (the run-wide rest is :class:`evalx.config.model.Defaults`)."""

    idle_timeout_s: PositiveNumber | None = None


@dataclass(frozen=True, kw_only=True)
class Pricing:
    input_per_mtok: NonNegative
    output_per_mtok: NonNegative
    cached_input_per_mtok: NonNegative | None = None


@dataclass(frozen=True, kw_only=True)
class RaySettings:
    """How this target runs under --executor ray."""

    actors: Annotated[
        PositiveInt | None,
        Schema(description="Ray actors running this target's cells, each with the target started once (default 1)."),
    ] = None
    concurrency: Annotated[
        PositiveInt | None, Schema(description="Cells in flight in each actor (default: the target's concurrency shared out).")
    ] = None
    num_cpus: Annotated[
        NonNegative | None,
        Schema(description="CPUs each actor holds (default 1 for python, 0 for engine and provider targets, which wait on the network)."),
    ] = None
    num_gpus: Annotated[NonNegative | None, Schema(description="GPUs each actor holds (default 0).")] = None


@dataclass(frozen=True, kw_only=True)
class RateLimit:
    rpm: Annotated[PositiveNumber | None, Schema(description="Requests per minute this target sends at most.")] = None
    max_wait_s: Annotated[
        PositiveNumber | None,
        Schema(
            description="With adaptive concurrency: the most seconds one cell's calls wait for the provider's rate limit "
            "(slots and 429s together) before the cell gives up with an error (default 600)."
        ),
    ] = None


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """``batch: {...}`` on a provider target: how its requests go through the provider's batch API."""

    poll_interval_s: Annotated[
        PositiveNumber | None,
        Schema(description="First wait before a batch is polled, doubled after each poll up to 60 s (default 5)."),
    ] = None
    max_requests: Annotated[
        PositiveInt | None,
        Schema(description="The most requests in one batch (default, and at most: the provider definition's limit)."),
    ] = None
    max_wait_s: Annotated[
        PositiveNumber | None,
        Schema(description="How long to wait for a batch before its cells fall back (default 86400, the providers' 24 h window)."),
    ] = None


_Kind = Literal["python", "engine", "provider"]


@dataclass(frozen=True, kw_only=True)
class _Identity:
    id: Id = ""  # an inline judge target may have none
    type: _Kind
    description: str | None = None


#: a python or engine target's ``tools:`` (what ``tool_calls_valid`` checks its calls against)
_DeclaredTools = Annotated[
    tuple[Annotated[Mapping[str, object], Schema(required=["name"])], ...],
    Schema(description="The tools the target may call, {name, description, parameters}: tool_calls_valid checks its calls against them."),
]


@dataclass(frozen=True, kw_only=True)
class TargetSpec(RunSettings, _Identity):
    """What every kind of target may say."""

    KIND: ClassVar[str] = ""
    vars: Mapping[str, object] | None = None
    ray: Annotated[RaySettings | None, Schema(description="How this target runs under --executor ray.")] = None


@dataclass(frozen=True, kw_only=True)
class PythonTargetSpec(TargetSpec):
    KIND: ClassVar[str] = "python"
    type: _Kind = "python"  # an entry built by code (the judge's, a test's) may leave it out
    callable: Annotated[
        str,
        Schema(
            pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_.]*$", description="module:function or path/to/file.py:function (relative to the config)."
        ),
    ]
    tools: _DeclaredTools | None = None
    tools_file: Annotated[
        _File | None, Schema(description="A YAML or JSON file holding the tools list, relative to the config (instead of tools).")
    ] = None
    idempotent: Annotated[
        bool | None,
        Schema(
            description="The callable has no side effects: under --executor ray a cell lost with its actor runs again "
            "elsewhere (default false: it becomes an error, which --resume runs again)."
        ),
    ] = None


@dataclass(frozen=True, kw_only=True)
class EngineTargetSpec(TargetSpec):
    KIND: ClassVar[str] = "engine"
    type: _Kind = "engine"  # an entry built by code (the judge's, a test's) may leave it out
    url: Annotated[str, Schema(description="Base URL; evalx POSTs to {url}/execute.")]
    start: Annotated[
        str | None,
        Schema(description="How to start this target's server (a command or a note): said when the run cannot connect to it."),
    ] = None
    api_key: Annotated[str | None, Schema(description="Sent as X-Engine-Key; never written anywhere.")] = None
    headers: _StrMap | None = None
    body: Annotated[
        Mapping[str, object] | None, Schema(description="Request body template (Jinja2 in every string); task_id is added.")
    ] = None
    idle_timeout_s: Annotated[PositiveNumber | None, Schema(description="Fail when the stream sends nothing for this long.")] = None
    end_event: Annotated[str | None, Schema(description="Event type that ends a complete stream (e.g. done).")] = None
    max_events: Annotated[PositiveInt | None, Schema(description="Events kept per cell in results (default 1000).")] = None
    tools: _DeclaredTools | None = None
    tools_file: Annotated[
        _File | None, Schema(description="A YAML or JSON file holding the tools list, relative to the config (instead of tools).")
    ] = None
    pricing: Annotated[
        Pricing | None,
        Schema(description="USD per million tokens, applied to the usage events when the engine reports no cost_usd of its own."),
    ] = None


#: a provider target's ``tools:`` (a ``tools_file:`` is checked against it)
ProviderTools = Annotated[
    tuple[Mapping[str, object], ...],
    Schema(description="Tools offered to the model: {name, description, parameters} (OpenAI and Anthropic forms are accepted too)."),
]


@dataclass(frozen=True, kw_only=True)
class ProviderTargetSpec(TargetSpec):
    KIND: ClassVar[str] = "provider"
    type: _Kind = "provider"  # an entry built by code (the judge's, a test's) may leave it out
    provider: Annotated[str, Schema(description="A provider definition name (providers/NAME.yaml, shipped or in providers_dir).")]
    model: str
    base_url: Annotated[str | None, Schema(description="Overrides the provider's base URL, e.g. http://localhost:8080/v1.")] = None
    start: Annotated[
        str | None,
        Schema(description="How to start this target's server (a command or a note): said when the run cannot connect to it."),
    ] = None
    region: Annotated[
        str | None,
        Schema(
            description="The cloud region (Bedrock, Vertex): the definition's base_url/path see it as `region`; "
            "default AWS_REGION, else AWS_DEFAULT_REGION."
        ),
    ] = None
    api_key: Annotated[
        str | None, Schema(description="Overrides the provider's key variable (e.g. OPENAI_API_KEY); never written anywhere.")
    ] = None
    headers: _StrMap | None = None
    params: Annotated[Mapping[str, object] | None, Schema(description="Request parameters: temperature, max_tokens, ...")] = None
    system: Annotated[str | None, Schema(description="System prompt template (a case's own system wins).")] = None
    system_file: Annotated[
        _File | None, Schema(description="A file holding the system prompt template, relative to the config (instead of system).")
    ] = None
    prompt: Annotated[str | None, Schema(description="User message template (Jinja2 over case, vars); default: the case input.")] = None
    prompt_file: Annotated[
        _File | None, Schema(description="A file holding the prompt template, relative to the config (instead of prompt).")
    ] = None
    messages: Annotated[
        tuple[Annotated[Mapping[str, object], Schema(required=["role", "content"])], ...] | None,
        Schema(description="The conversation ({role, content} templates) instead of prompt."),
    ] = None
    tools: ProviderTools | None = None
    tools_file: Annotated[
        _File | None, Schema(description="A YAML or JSON file holding the tools list, relative to the config (instead of tools).")
    ] = None
    json_mode: Annotated[bool | None, Schema(description="Ask for a JSON answer (the provider definition's json_mode params).")] = None
    stream: Annotated[
        bool | None,
        Schema(
            description="Stream the answer (the provider definition's stream: section) and record ttft_ms; "
            "params: {stream: true} means the same."
        ),
    ] = None
    idle_timeout_s: Annotated[
        PositiveNumber | None, Schema(description="With stream: fail when the stream sends nothing for this long.")
    ] = None
    pricing: Annotated[
        Pricing | None, Schema(description="USD per million tokens; overrides the provider definition's price for this model.")
    ] = None
    rate_limit: RateLimit | None = None
    batch: Annotated[
        bool | BatchOptions | None,
        Schema(
            description="Send the cells' requests through the provider's batch API (its definition's batch: section), "
            "at its batch price: true, or {poll_interval_s, max_requests, max_wait_s}."
        ),
    ] = None


AnyTargetSpec = PythonTargetSpec | EngineTargetSpec | ProviderTargetSpec
#: the kinds of target, in the order the schema lists them
TARGET_KINDS: tuple[type[TargetSpec], ...] = (PythonTargetSpec, EngineTargetSpec, ProviderTargetSpec)


def target_spec(entry: Mapping[str, object] | TargetSpec) -> TargetSpec:
    """The record of a ``targets:`` entry the schema accepted (or of a ``matrix:`` variant of one); a record is returned as is."""
    if isinstance(entry, TargetSpec):
        return entry
    return build_union(TARGET_KINDS, entry)


_Kind_T = TypeVar("_Kind_T", bound=TargetSpec)


def record_of(kind: type[_Kind_T], entry: Mapping[str, object] | TargetSpec) -> _Kind_T:
    """``entry`` as a record of ``kind``: such a record as it is, else built from the entry as written."""
    if isinstance(entry, kind):
        return entry
    return build(kind, written_entry(entry))


def written_entry(entry: Mapping[str, object] | TargetSpec) -> Mapping[str, object]:
    """A ``targets:`` entry as written: a mapping as it is; a record as the mapping that builds it (the fields it sets).

    Cache keys and the templates' ``target`` are made from it, so a record built from an entry gives that entry back.
    """
    return _fields_set(entry) if isinstance(entry, TargetSpec) else entry


def _fields_set(record: "DataclassInstance") -> dict[str, object]:
    return {f.name: _plain(v) for f in dataclasses.fields(record) if (v := getattr(record, f.name)) is not None}


def _plain(value: object) -> object:
    """A field's value as written: a record as the fields it sets, tuples as lists, all the way down."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields_set(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def target_schema(required: list[str]) -> JSONObject:
    """A target's schema, dispatched on ``type:`` (``if``/``then``) so a mistake is reported against its kind's keys."""
    common = properties(TargetSpec)
    branches: list[JSON] = [
        {
            "if": {"properties": {"type": {"const": kind.KIND}}, "required": ["type"]},
            "then": {
                "properties": dict[str, JSON](properties(kind)),
                "required": [key for key in required_keys(kind) if key not in common],
                "additionalProperties": False,
            },
        }
        for kind in TARGET_KINDS
    ]
    return {"type": "object", "properties": {"id": common["id"], "type": common["type"]}, "required": [*required], "allOf": branches}


def tools_schema() -> JSONObject:
    """The schema of a provider target's ``tools:`` (a ``tools_file:`` is checked against it)."""
    return schema_of(ProviderTools)
