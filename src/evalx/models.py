"""The data that flows between the parts: cases, cells, trajectories, verdicts.

What a run writes (a cell result, the summary, the results file's version)
is declared in :mod:`evalx.results.model`; reporters read that, never the
executor's objects.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    """One eval case, loaded from a dataset, remembering where it came from."""

    id: str
    input: Any
    dataset: str = ""
    expected: Any = None
    category: str = "general"
    difficulty: str | None = None
    tags: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    asserts: list[dict[str, Any]] = field(default_factory=list)
    description: str | None = None
    notes: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    threshold: float | None = None
    repeat: int | None = None
    targets: list[str] | None = None
    system: str | None = None
    source: str = ""  # "file:line"

    def to_dict(self) -> dict[str, Any]:
        """The case as a plain mapping (what a Python target's ``case=`` gets).

        By hand (``dataclasses.asdict`` was a per-cell hot spot), with the same
        result: a deep copy, so whoever gets it may change it freely.
        """
        return {
            "id": self.id,
            "input": _copied(self.input),
            "dataset": self.dataset,
            "expected": _copied(self.expected),
            "category": self.category,
            "difficulty": self.difficulty,
            "tags": _copied(self.tags),
            "vars": _copied(self.vars),
            "description": self.description,
            "notes": self.notes,
            "metadata": _copied(self.metadata),
            "threshold": self.threshold,
            "repeat": self.repeat,
            "targets": _copied(self.targets),
            "system": self.system,
            "source": self.source,
            "assert": _copied(self.asserts),  # last, as asdict() + pop() had it
        }


_ATOMIC = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    """A deep copy of a case field; plain values (most of them) as they are."""
    if isinstance(value, _ATOMIC):
        return value
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    return copy.deepcopy(value)  # anything else, as dataclasses.asdict would


@dataclass
class ToolCall:
    name: str
    args: Any = None
    result: Any = None


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hit_tokens: int = 0

    def add(self, other: dict[str, Any]) -> None:
        self.input_tokens += int(other.get("input_tokens") or 0)
        self.output_tokens += int(other.get("output_tokens") or 0)
        self.cache_hit_tokens += int(other.get("cache_hit_tokens") or 0)


@dataclass
class Trajectory:
    """What a target produced for one case."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    iterations: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    events_truncated: bool = False
    latency_ms: float | None = None
    ttft_ms: float | None = None
    cost_usd: float | None = None
    cached: bool = False
    error: str | None = None
    traceback: str | None = None
    request: Any = None  # the rendered request, secrets removed
    raw: Any = None  # anything else the target returned

    @property
    def tool_names(self) -> list[str]:
        return [c.name for c in self.tool_calls]

    def to_dict(self) -> dict[str, Any]:
        # by hand: dataclasses.asdict deep-copies every value and is a hot spot
        return {
            "text": self.text,
            "tool_calls": [{"name": c.name, "args": c.args, "result": c.result} for c in self.tool_calls],
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
                "cache_hit_tokens": self.usage.cache_hit_tokens,
            },
            "iterations": self.iterations,
            "events": self.events,
            "events_truncated": self.events_truncated,
            "latency_ms": self.latency_ms,
            "ttft_ms": self.ttft_ms,
            "cost_usd": self.cost_usd,
            "cached": self.cached,
            "error": self.error,
            "traceback": self.traceback,
            "request": self.request,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        calls = [c if isinstance(c, ToolCall) else ToolCall(**_tool_call_fields(c)) for c in d.pop("tool_calls", None) or []]
        usage_in = d.pop("usage", None) or {}
        usage = usage_in if isinstance(usage_in, Usage) else Usage()
        if not isinstance(usage_in, Usage):
            usage.add(usage_in)
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(tool_calls=calls, usage=usage, **known)


def _tool_call_fields(c: Any) -> dict[str, Any]:
    if isinstance(c, str):
        return {"name": c}
    if not isinstance(c, dict):
        raise TypeError(f"a tool call must be a name or a mapping, not {type(c).__name__}")
    name = c.get("name", c.get("tool"))
    if not isinstance(name, str):
        raise TypeError("a tool call mapping needs a 'name'")
    return {"name": name, "args": c.get("args", c.get("arguments")), "result": c.get("result")}


@dataclass
class Verdict:
    """What one assertion concluded. ``passed`` is None when inconclusive."""

    passed: bool | None
    score: float = 0.0
    reason: str = ""
    error: str | None = None  # the assertion itself broke (e.g. judge unreadable)
    details: dict[str, Any] | None = None  # judge raw text, tokens, cost...

    @classmethod
    def ok(cls, reason: str = "", score: float = 1.0) -> Verdict:
        return cls(True, score, reason)

    @classmethod
    def no(cls, reason: str, score: float = 0.0) -> Verdict:
        return cls(False, score, reason)

    @classmethod
    def inconclusive(cls, reason: str) -> Verdict:
        return cls(None, 0.0, reason)


@dataclass
class Cell:
    """One unit of work: a case run against a target, one repeat."""

    index: int  # position in matrix order
    target: str
    dataset: str
    case: Case
    repeat: int = 0

    @property
    def key(self) -> str:
        return f"{self.target}\x1f{self.dataset}\x1f{self.case.id}\x1f{self.repeat}"
