"""The ``judge:`` section (and an assertion's ``judge:`` over it) as a typed record: the one declaration of its keys."""

# No `from __future__ import annotations` here: evalx.common.typeschema reads these annotations at run time, and
# evaluated once at import (from cached bytecode) they cost half of what compiling them from strings does.

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from evalx.common.typeschema import Fraction, NonNegative, PositiveInt, Schema, build
from evalx.targets.spec import AnyTargetSpec, BatchOptions

__all__ = ["DEFAULT_THRESHOLD", "JudgeSettings", "judge_settings"]

#: the pass mark of judge scores when neither the assertion nor ``judge.threshold`` sets one
DEFAULT_THRESHOLD = 0.8


@dataclass(frozen=True, kw_only=True, slots=True)
class JudgeSettings:
    """Who judges and how: the config's ``judge:``, or an assertion's ``judge:`` merged over it."""

    target: Annotated[
        str | Annotated[AnyTargetSpec, Schema(ref="judge_target")] | None,
        Schema(description="The judge: a target id (provider, engine or python), or an inline target (its id is optional)."),
    ] = None
    threshold: Annotated[Fraction | None, Schema(description="Pass mark for judge scores (default 0.8).")] = None
    prompt: Annotated[
        str | None,
        Schema(
            description="Jinja2 judge prompt replacing the default; in scope: kind, case, input, output, tool_calls, expected, "
            "reference, rubric, characteristics, criterion, threshold."
        ),
    ] = None
    prompt_file: Annotated[
        str | None,
        Schema(minLength=1, description="A file holding the judge prompt, relative to the config (instead of prompt)."),
    ] = None
    samples: Annotated[PositiveInt | None, Schema(description="Ask N times and take the majority (a tie fails).")] = None
    temperature: Annotated[NonNegative | None, Schema(description="Sampling temperature for a provider judge.")] = None
    allow_self_grading: Annotated[bool | None, Schema(description="Silence the same-model judge warning.")] = None
    batch: Annotated[
        bool | BatchOptions | None,
        Schema(
            description="Send a provider judge's calls through its provider's batch API (over the judge target's own batch:): "
            "true, false, or {poll_interval_s, max_requests, max_wait_s}."
        ),
    ] = None
    attachments: Annotated[
        bool | None,
        Schema(
            description="Show the judge the case's images and documents (an input of parts) beside its prompt, for vision "
            "rubrics: a provider judge sends them as its definition's parts: maps them; default false (the judge reads their names)."
        ),
    ] = None

    @property
    def pass_mark(self) -> float:
        """``threshold``, or the built-in 0.8."""
        return DEFAULT_THRESHOLD if self.threshold is None else float(self.threshold)


def judge_settings(section: Mapping[str, object] | JudgeSettings | None) -> JudgeSettings:
    """The record of a ``judge:`` mapping the schema accepted (None: no judge); a record is returned as is."""
    if isinstance(section, JudgeSettings):
        return section
    return build(JudgeSettings, section or {})
