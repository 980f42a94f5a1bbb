"""The data that flows between the parts: cases, cells, trajectories, verdicts.

What a run writes (a cell result, the summary, the results file's version)
is declared in :mod:`evalx.results.model`; reporters read that, never the
executor's objects.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalx.common.json_types import JSONObject


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
    vars: JSONObject = field(default_factory=dict)
    asserts: list[JSONObject] = field(default_factory=list)
    description: str | None = None
    notes: str | None = None
    metadata: JSONObject = field(default_factory=dict)
    threshold: float | None = None
    repeat: int | None = None
    targets: list[str] | None = None
    system: str | None = None
    source: str = ""  # "file:line"
    #: a scripted conversation: ``[{input, assert?, tool_results?}]`` (plain JSON-like values), None for a one-shot case
    turns: list[dict[str, Any]] | None = None
    #: mocked tool results ``{TOOL: VALUE}`` for every turn of a conversation
    tool_results: JSONObject | None = None
    #: a simulated user: ``{target, instructions, max_turns?, stop?}`` (plain JSON-like values), None otherwise
    simulate: JSONObject | None = None
    #: what a grounded answer is checked against: one passage (a string) or a list of passages, None when not given
    context: str | list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The case as a plain mapping (what a Python target's ``case=`` gets).

        By hand (``dataclasses.asdict`` was a per-cell hot spot), with the same
        result: a deep copy, so whoever gets it may change it freely. Worth
        keeping (issue 29, ``python bench/fast_paths.py --stages``): asdict
        costs 20 µs a call more, 12 % of a 20,000-cell run of an instant
        Python target that takes ``case``.
        """
        out = {
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
        if self.turns is not None:  # only on a conversation: a one-shot case's mapping (and cache key) is as before
            out["turns"] = _copied(self.turns)
        if self.tool_results is not None:
            out["tool_results"] = _copied(self.tool_results)
        if self.simulate is not None:
            out["simulate"] = _copied(self.simulate)
        if self.context is not None:  # only when given: a case without it keeps its mapping and cache key
            out["context"] = _copied(self.context)
        return out


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

    def add(self, other: Mapping[str, float | None]) -> None:
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
    events: list[JSONObject] = field(default_factory=list)
    events_truncated: bool = False
    latency_ms: float | None = None
    ttft_ms: float | None = None
    cost_usd: float | None = None
    cached: bool = False
    error: str | None = None
    traceback: str | None = None
    request: Any = None  # the rendered request, secrets removed
    raw: Any = None  # anything else the target returned
    printed: str | None = None  # what a Python target printed (sys.stdout/sys.stderr) during the call
    stop_reason: str | None = None  # why the model stopped, as the provider or engine said (``length``: cut off)
    cost_note: str | None = None  # why ``cost_usd`` is None although a price is known (``no usage in response``)

    @property
    def tool_names(self) -> list[str]:
        return [c.name for c in self.tool_calls]

    def to_dict(self) -> dict[str, Any]:
        # by hand: dataclasses.asdict deep-copies every value and is a hot spot
        out = {
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
        if self.printed is not None:  # only when the target printed something
            out["printed"] = self.printed
        if self.stop_reason is not None:  # only when the target reported why it stopped
            out["stop_reason"] = self.stop_reason
        if self.cost_note is not None:
            out["cost_note"] = self.cost_note
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        """A trajectory from its fields; unknown keys are ignored.

        Every field is checked for its type (``tool_calls`` a list, ``usage`` a
        mapping of token counts, ``text`` a string...): a malformed one raises
        TypeError or ValueError naming the field and what it got, never a
        guess (a string of tool calls read one call per character).
        """
        d = dict(d)
        raw_calls = d.pop("tool_calls", None)
        if raw_calls is None:
            raw_calls = []
        elif not isinstance(raw_calls, (list, tuple)):
            raise TypeError(f"'tool_calls' must be a list of tool calls, not {_kind(raw_calls)}")
        calls = [c if isinstance(c, ToolCall) else _tool_call(c, i) for i, c in enumerate(raw_calls)]
        usage_in = d.pop("usage", None)
        if isinstance(usage_in, Usage):
            usage = usage_in
        else:
            usage = Usage()
            if usage_in is not None:
                usage.add(_usage_fields(usage_in))
        for key, value in d.items():
            check = _FIELD_CHECKS.get(key)
            if check is not None and value is not None and not check[0](value):
                raise TypeError(f"{key!r} must be {check[1]}, not {_kind(value)}")
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if known.get("text", "") is None:
            known["text"] = ""
        return cls(tool_calls=calls, usage=usage, **known)


def safe_repr(value: Any) -> str:
    """``repr(value)``, never raising: a target's object whose ``__repr__`` raises anything (``SystemExit`` included)
    is shown by its type instead. What evalx shows or stores of a value it cannot store as JSON."""
    try:
        return repr(value)
    except BaseException as exc:  # user code: even SystemExit or KeyboardInterrupt from a __repr__ is the value's problem
        return f"<{type(value).__name__} object: repr failed: {type(exc).__name__}>"


def json_default(value: Any) -> Any:
    """What JSON cannot hold, as evalx stores it (results, the response cache): sets and tuples as lists, bytes as text,
    anything else as its :func:`safe_repr`."""
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return safe_repr(value)


def _kind(value: Any) -> str:
    """``str 'abc'``: a value's type and a short look at it, for an error message."""
    shown = safe_repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:39] + '…'}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


#: the type each scalar field of a trajectory must have (None is always allowed)
_FIELD_CHECKS: dict[str, tuple[Any, str]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "iterations": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "events": (lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v), "a list of mappings"),
    "events_truncated": (lambda v: isinstance(v, bool), "true or false"),
    "latency_ms": (_number, "a number"),
    "ttft_ms": (_number, "a number"),
    "cost_usd": (_number, "a number"),
    "cached": (lambda v: isinstance(v, bool), "true or false"),
    "error": (lambda v: isinstance(v, str), "a string"),
    "traceback": (lambda v: isinstance(v, str), "a string"),
    "printed": (lambda v: isinstance(v, str), "a string"),
    "stop_reason": (lambda v: isinstance(v, str), "a string"),
    "cost_note": (lambda v: isinstance(v, str), "a string"),
}


#: stop reasons that mean the answer was cut off at a length limit (OpenAI ``length``, Anthropic ``max_tokens``,
#: Gemini ``MAX_TOKENS``, Responses API ``max_output_tokens``...), compared in lower case
TRUNCATION_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length", "token_limit"})


def is_truncated(stop_reason: Any) -> bool:
    """Whether a reported stop reason says the answer was cut off at a length limit."""
    return isinstance(stop_reason, str) and stop_reason.lower() in TRUNCATION_REASONS


def check_figures(traj: Trajectory) -> None:
    """Raise ValueError naming the field when a token count, cost or duration of ``traj`` is negative or not finite.

    A server's figures feed the cost guard (``max_total_cost``), ``max_tokens``
    and the summary: NaN, an infinity or a negative count would switch the
    guard off or write invalid JSON, so such a cell is an error, never counted.
    """
    u = traj.usage
    a, b, c = u.input_tokens, u.output_tokens, u.cache_hit_tokens
    if not (type(a) is int and type(b) is int and type(c) is int and a >= 0 and b >= 0 and c >= 0):
        for name in ("input_tokens", "output_tokens", "cache_hit_tokens"):
            value = getattr(u, name)
            if type(value) is not int or value < 0:
                if not (_number(value) and value >= 0 and float(value).is_integer()):
                    raise ValueError(f"usage.{name} is {_kind(value)}: a count of tokens must be a whole number, 0 or more")
                setattr(u, name, int(value))
    if traj.cost_usd is None and traj.latency_ms is None and traj.ttft_ms is None:
        return
    for name in ("cost_usd", "latency_ms", "ttft_ms"):
        value = getattr(traj, name)
        fast = value is None or (type(value) is float and 0.0 <= value < _INF)
        if not fast and (not _number(value) or value < 0):
            raise ValueError(f"{name} is {_kind(value)}: it must be a finite number, 0 or more")


_INF = float("inf")


def token_count(value: Any) -> int:
    """A token count a server reported, as an int; ValueError saying what it was for anything else.

    Negative counts, NaN, infinities, booleans and strings are refused: a
    target reads them as a protocol error of the cell, never as 0.
    """
    if type(value) is int and value >= 0:
        return value
    if type(value) is float and 0.0 <= value < _INF and value.is_integer():
        return int(value)
    raise ValueError(f"expected a number of tokens, got {_shown(value)} (a whole number, 0 or more)")


def usd_amount(value: Any) -> float:
    """A cost a server reported, as a float; ValueError saying what it was when negative, not finite or not a number."""
    if _number(value) and value >= 0:
        return float(value)
    raise ValueError(f"expected an amount of USD, got {_shown(value)} (a finite number, 0 or more)")


def _shown(value: Any) -> str:
    shown = safe_repr(value)
    return shown if len(shown) <= 40 else shown[:39] + "…"


def _usage_fields(usage: Any) -> Any:
    if not isinstance(usage, Mapping):
        raise TypeError(f"'usage' must be a mapping of token counts, not {_kind(usage)}")
    for key in ("input_tokens", "output_tokens", "cache_hit_tokens"):
        value = usage.get(key)
        if value is not None and not (_number(value) and value >= 0):
            raise ValueError(f"'usage.{key}' must be a count of tokens, not {_kind(value)}")
    return usage


def _tool_call(c: object, index: int = 0) -> ToolCall:
    if isinstance(c, str):
        return ToolCall(c)
    if not isinstance(c, dict):
        raise TypeError(f"'tool_calls[{index}]' must be a name or a mapping, not {_kind(c)}")
    name = c.get("name", c.get("tool"))
    if not isinstance(name, str):
        raise TypeError(f"'tool_calls[{index}]' needs a 'name' that is a string, not {_kind(name)}")
    return ToolCall(name, c.get("args", c.get("arguments")), c.get("result"))


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


#: a UTF-16 surrogate code point on its own: valid in a Python str, impossible in UTF-8
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it can be written as UTF-8.

    Strings from outside (a server's error message, a JSON ``"\\ud800"`` escape,
    a callable's exception or output) may hold one; written as they are they
    make every report, ``--resume`` and ``capture`` fail. ``text`` itself when clean.
    """
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


#: how deep a target's output may nest (a value that contains itself never ends)
MAX_DEPTH = 200


def safe_value(value: Any, depth: int = 0) -> Any:
    """``value`` with :func:`safe_text` applied to every string in it (keys too); ``value`` itself when clean.

    Raises ValueError for a value nested deeper than :data:`MAX_DEPTH` (or one
    that contains itself): it could not be written as JSON.
    """
    kind = type(value)
    if kind is str:
        return safe_text(value)
    if kind is dict or kind is list or isinstance(value, (dict, list, tuple)):
        if depth >= MAX_DEPTH:
            raise ValueError(f"it nests deeper than {MAX_DEPTH} levels (or contains itself)")
        depth += 1
        if isinstance(value, dict):
            changed = False
            out = {}
            for k, v in value.items():
                k2, v2 = safe_value(k, depth), safe_value(v, depth)
                changed = changed or k2 is not k or v2 is not v
                out[k2] = v2
            return out if changed else value
        items = [safe_value(v, depth) for v in value]
        return items if any(a is not b for a, b in zip(items, value)) else value
    return value


#: the message of the ValueError json raises for NaN or an infinity under ``allow_nan=False``
OUT_OF_RANGE = "Out of range float values are not JSON compliant"


def finite_json(value: Any, depth: int = 0) -> Any:
    """``value`` with every NaN or infinite float replaced by None: what strict JSON can hold (``value`` itself when clean).

    Every JSON file evalx writes is encoded with ``allow_nan=False`` (``NaN`` is not
    JSON: most parsers refuse it); a writer that meets one (a server's JSON may hold
    ``NaN``, Python's parser accepts it) encodes this copy instead.
    """
    kind = type(value)
    if kind is float:
        return value if value - value == 0.0 else None
    if kind is dict or kind is list or isinstance(value, (dict, list, tuple)):
        if depth >= MAX_DEPTH:
            return value  # the encoder reports what nests this deep
        if isinstance(value, dict):
            out = {k: finite_json(v, depth + 1) for k, v in value.items()}
            return out if any(out[k] is not v for k, v in value.items()) else value
        items = [finite_json(v, depth + 1) for v in value]
        return items if any(a is not b for a, b in zip(items, value)) else value
    if isinstance(value, float):
        return value if value - value == 0.0 else None
    return value


def safe_trajectory(traj: Trajectory, max_bytes: int | None = None) -> Trajectory:
    """``traj`` with no lone surrogate left in its strings: the one place a target's output and errors are made safe.

    Applied by the executor to every trajectory a target produced (or an
    exception became), before it is scored, cached, written or reported.
    Raises ValueError when a value in it could not be stored (see :func:`safe_value`),
    when a token count, cost or duration is negative or not finite (:func:`check_figures`),
    or, with ``max_bytes`` (the target's ``max_response_bytes``), when what it
    would store (:func:`stored_size`) is larger; its error and traceback are then
    clipped to ``max_bytes`` characters.
    The nested values (tool calls, events, request, raw) are checked by one
    pass of the C JSON encoder and walked only when that finds a surrogate.
    """
    check_figures(traj)
    size = 0
    printed = getattr(traj, "printed", None)
    failed = traj.error is not None or traj.traceback is not None  # an answer has neither: no call for them
    if max_bytes is not None:
        size = _str_bytes(traj.text) + (_str_bytes(printed) if printed is not None else 0)
        if size > max_bytes:
            raise ValueError(too_large(size, max_bytes))
        if failed:
            traj.error, traj.traceback = clipped(traj.error, max_bytes), clipped(traj.traceback, max_bytes)
    traj.text = safe_value(traj.text)
    if failed:
        traj.error, traj.traceback = safe_value(traj.error), safe_value(traj.traceback)
    if printed is not None:
        traj.printed = safe_value(printed)  # type: ignore[attr-defined,unused-ignore]
    if not (traj.tool_calls or traj.events or traj.request is not None or traj.raw is not None):
        return traj
    nested = _nested(traj)
    scanned = _scanned(nested)
    if max_bytes is not None and scanned is not None:
        size += _str_bytes(scanned)
        if size > max_bytes:
            raise ValueError(too_large(size, max_bytes))
    if scanned is not None and (scanned.isascii() or _LONE_SURROGATE.search(scanned) is None):
        return traj
    for call in traj.tool_calls:
        if isinstance(call, ToolCall):
            call.name, call.args, call.result = safe_value(call.name), safe_value(call.args), safe_value(call.result)
    traj.events = safe_value(traj.events)
    traj.request = safe_value(traj.request)
    traj.raw = safe_value(traj.raw)
    if max_bytes is not None and scanned is None:  # the encoder could not say: measured once the walk made it writable
        size += _dumped_bytes(_nested(traj))
        if size > max_bytes:
            raise ValueError(too_large(size, max_bytes))
    return traj


def stored_size(traj: Trajectory) -> int:
    """About how many bytes ``traj`` takes where it is stored: its text, printed text, tool calls, events, request and raw value.

    Counted as UTF-8 JSON (the figures and flags, a few dozen bytes, are not
    counted, nor its error and traceback); what ``max_response_bytes`` bounds
    for a Python target's answer, a turn and a conversation.
    """
    size = _str_bytes(traj.text) + _str_bytes(getattr(traj, "printed", None))
    if traj.tool_calls or traj.events or traj.request is not None or traj.raw is not None:
        nested = _nested(traj)
        scanned = _scanned(nested)
        size += _str_bytes(scanned) if scanned is not None else _dumped_bytes(nested)
    return size


def json_size(value: Any) -> int:
    """About how many bytes ``value`` takes as UTF-8 JSON (a string: its own length in UTF-8); what a turn's input stores."""
    if type(value) is str:
        return _str_bytes(value)
    try:
        scanned = _scanned(value)
    except ValueError:
        return 0
    return _str_bytes(scanned) if scanned is not None else _dumped_bytes(value)


def too_large(size: int, limit: int, what: str = "it holds") -> str:
    """The one wording of output past ``max_response_bytes``: ``it holds 2,000,000 bytes, more than max_response_bytes (...)``."""
    return f"{what} {size:,} bytes, more than max_response_bytes ({limit:,} bytes)"


def _str_bytes(text: Any) -> int:
    """The UTF-8 length of ``text`` (0 for what is not a string); an ASCII string's is its length, with no copy."""
    if type(text) is not str:
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def clipped(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters, saying so (an error, a traceback, a check's reason past ``max_response_bytes``)."""
    if type(text) is not str or len(text) <= limit:
        return text
    return text[:limit] + f" … (clipped at max_response_bytes, {limit:,})"


def _nested(traj: Trajectory) -> list[Any]:
    calls = [(c.name, c.args, c.result) if isinstance(c, ToolCall) else c for c in traj.tool_calls]
    return [calls, traj.events, traj.request, traj.raw]


def _scanned(value: Any) -> str | None:
    """``value`` as JSON text, strings kept as they are, by one run of the C JSON encoder (no walk in Python).

    Raises ValueError for a value that contains itself or nests past the
    recursion limit; None when the encoder cannot say (walk it).
    """
    if _SCAN is None:
        return None
    try:
        return "".join(_SCAN(value, 0))
    except RecursionError:
        raise ValueError(f"it nests deeper than {MAX_DEPTH} levels (or contains itself)") from None
    except Exception:  # a key or a repr the encoder refuses: let the walk decide
        return None


def _dumped_bytes(value: Any) -> int:
    """``value``'s UTF-8 JSON length by the pure-Python encoder (what the C one refused), 0 when even that cannot."""
    try:
        return _str_bytes(json.dumps(value, ensure_ascii=False, default=_scan_default, skipkeys=True))
    except (ValueError, TypeError, RecursionError):
        return 0


def _scan_default(value: Any) -> Any:
    return None  # what is not JSON is neither a surrogate nor a cycle the writer cannot handle


#: the C JSON encoder without its circular-reference check (a cycle ends in RecursionError), strings kept as they are
_SCAN: Any = (
    json.encoder.c_make_encoder(None, _scan_default, json.encoder.encode_basestring, None, ":", ",", False, False, True)  # type: ignore[attr-defined]
    if getattr(json.encoder, "c_make_encoder", None) is not None
    else None
)
