"""A ``datasets:`` entry as a typed record: the one declaration of its keys and their JSON Schema."""

# No `from __future__ import annotations` here: evalx.common.typeschema reads these annotations at run time, and
# evaluated once at import (from cached bytecode) they cost half of what compiling them from strings does.

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

from evalx.common.json_types import JSONObject
from evalx.common.typeschema import Id, Schema, build

__all__ = ["DatasetSpec", "dataset_spec"]


def _fields_schema() -> JSONObject:
    from evalx.datasets.case_schema import CASE_FIELDS

    return {
        "type": "object",
        "properties": {
            name: {"type": "string", "minLength": 1, "description": f"The column read as the case's {name}."} for name in CASE_FIELDS
        },
        "additionalProperties": False,
    }


def _extra_schema() -> JSONObject:
    from evalx.datasets.fields import EXTRA_MODES

    return {"enum": list(EXTRA_MODES)}


_INLINE_CASES: JSONObject = {
    "if": {"anyOf": [{"required": ["fields"]}, {"required": ["extra"]}]},
    "then": {},
    "else": {"properties": {"cases": {"items": {"$ref": "#/$defs/case"}}}},
}


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetSpec:
    """One ``datasets:`` entry: where its cases come from and what is merged under them."""

    #: inline cases are case-shaped unless fields:/extra: reshape them (the dataset loader checks them after that)
    SCHEMA: ClassVar[Schema] = Schema(build=lambda: _INLINE_CASES)

    id: Id
    description: str | None = None
    path: Annotated[str | None, Schema(description="A .jsonl/.json/.yaml/.csv file or a directory, relative to the config.")] = None
    cases: Annotated[tuple[Mapping[str, object], ...] | None, Schema(description="Cases written here instead of in a file.")] = None
    targets: Annotated[tuple[str, ...] | None, Schema(description="Targets this dataset applies to (default: all).")] = None
    defaults: Annotated[
        Mapping[str, object] | None,
        Schema(
            description="Fields merged under every case (category, tags, assert, system...); "
            "system_file: reads the system prompt from a file relative to the config."
        ),
    ] = None
    fields: Annotated[
        Mapping[str, str] | None,
        Schema(
            build=_fields_schema,
            description="CASE_FIELD: COLUMN, for files in another tool's shape: {input: question, expected: answer} reads each "
            "case's question as its input. A case with no id then gets its place in the dataset (1, 2, ...).",
        ),
    ] = None
    extra: Annotated[
        str,
        Schema(
            build=_extra_schema,
            default="error",
            description="Columns that are neither case fields nor mapped by fields: go into the case's vars (templates see them, "
            "as in a promptfoo CSV), its metadata, or are an error (the default).",
        ),
    ] = "error"


def dataset_spec(entry: Mapping[str, object] | DatasetSpec) -> DatasetSpec:
    """The record of a ``datasets:`` entry the schema accepted; a record is returned as is."""
    return entry if isinstance(entry, DatasetSpec) else build(DatasetSpec, entry)
