"""One assertion as written in a config or a case, as a typed record: the keys every type accepts, and its parameters.

The common keys are declared here once; a type's own parameters are the
keyword-only parameters of its ``@assertion`` function, whose type hints go
through the same :func:`evalx.common.typeschema.schema_of` (``registry.py``), so a
plugin's parameter types join the config schema exactly as the built-ins' do.
"""

# No `from __future__ import annotations` here: evalx.common.typeschema reads these annotations at run time, and
# evaluated once at import (from cached bytecode) they cost half of what compiling them from strings does.

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from evalx.common.typeschema import NonNegative, Schema, build

__all__ = ["AssertionSpec", "assertion_spec"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AssertionSpec:
    """One ``assert:`` entry: its type, the keys every type accepts, and the type's own parameters."""

    type: str
    name: Annotated[str | None, Schema(description="A label shown in reports instead of the type.")] = None
    weight: Annotated[NonNegative | None, Schema(description="Weight in the case's weighted score.")] = None
    not_: Annotated[bool, Schema(key="not", description="Invert the assertion: it passes when the check fails.")] = False
    description: str | None = None
    #: a model-graded type's settings over the config's ``judge:`` (only those types accept the key)
    judge: Annotated[Mapping[str, object] | None, Schema(ref="judge_override")] = None
    #: the type's own parameters (its function's keyword-only parameters), by config key
    params: Annotated[Mapping[str, object], Schema(rest=True)] = field(default_factory=dict)


def assertion_spec(entry: Mapping[str, object] | AssertionSpec) -> AssertionSpec:
    """The record of an assertion the schema accepted; a record is returned as is."""
    return entry if isinstance(entry, AssertionSpec) else build(AssertionSpec, entry)
