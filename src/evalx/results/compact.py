"""Results format v2: a cell result written without what a reader can restore, and restored to every v1 key.

A v2 ``results.jsonl`` opens with a run record (``{"kind": "run", "version":
2, "run_id": ..., "target_types": {...}}``). A cell line leaves out every key
whose value is its default (:data:`CELL_DEFAULTS`: nulls, ``false``, empty
lists, repeat 0, category ``general``...), ``run_id``, ``version`` and
``target_type`` (in the run record), and in ``output`` the copies of the
cell's own ``latency_ms``/``ttft_ms``/``cost_usd``/``error`` and the empty
defaults of a trajectory. The case's fields (input, expected, category,
source...) are written once per case: on the cell itself when the case has
one cell, else in a case record (``{"kind": "case", "cells": N, ...}``)
written before the case's first cell. :func:`expand` gives a cell line back
with every key of :class:`~evalx.results.model.CellResult`, in the v1 order,
so every reader of v1 lines reads v2 ones unchanged. docs/results-format.md
describes both versions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from itertools import filterfalse
from typing import Any, Literal, TypedDict

from evalx.common.json_types import JSON, JSONObject, as_object
from evalx.results.model import RESULT_VERSION, CellResult

__all__ = [
    "CASE_KEYS",
    "RESULTS_VERSION",
    "Clock",
    "Expansion",
    "LineDefaults",
    "RunRecord",
    "compact_cell",
    "expand",
    "run_record",
    "split_case",
    "t0_of",
]

#: the version a v2 file's run record says
RESULTS_VERSION = RESULT_VERSION

#: the case's own keys of a cell line, with their defaults (a case record holds those that differ)
CASE_KEYS: JSONObject = {
    "category": "general",
    "difficulty": None,
    "tags": [],
    "case_source": "",
    "input": None,
    "expected": None,
}
#: keys only some cells have (no default: absent means absent)
_OPTIONAL_CASE_KEYS = ("description", "notes", "context")

#: every other key of a v1 cell line, in v1 order, with the value it has when a v2 line leaves it out
CELL_DEFAULTS: JSONObject = {
    "repeat": 0,
    "score": None,
    "assertions": [],
    "latency_ms": None,
    "ttft_ms": None,
    "cost_usd": None,
    "judge_cost_usd": None,
    "cached": False,
    "error": None,
    "traceback": None,
    "started_at": None,
}
#: the keys of a v1 ``output`` a trajectory always has, with their defaults (``None``: copied from the cell)
_OUTPUT_DEFAULTS: JSONObject = {
    "text": "",
    "tool_calls": [],
    "usage": {"input_tokens": 0, "output_tokens": 0, "cache_hit_tokens": 0},
    "iterations": None,
    "events": [],
    "events_truncated": False,
    "latency_ms": None,
    "ttft_ms": None,
    "cost_usd": None,
    "error": None,
    "request": None,
    "raw": None,
}
_FROM_CELL = ("latency_ms", "ttft_ms", "cost_usd", "error")
#: the keys a v2 cell line always has
_IDENTITY = ("index", "target", "dataset", "case_id")


class LineDefaults(TypedDict, total=False):
    """What a v2 cell line leaves out because the run record says it (``defaults`` of :class:`RunRecord`)."""

    t0: str
    """The time a cell's ``t`` counts from (ISO 8601, UTC, whole seconds)."""
    target: str
    """The target of a line without ``target`` (the run's first)."""
    dataset: str
    """The dataset of a line without ``dataset``."""


class RunRecord(TypedDict):
    """The first line of a v2 ``results.jsonl``."""

    kind: Literal["run"]
    version: int
    run_id: str
    target_types: dict[str, str]
    """Each target's kind (``python``, ``provider``...), by id: a cell line leaves its ``target_type`` out."""
    defaults: LineDefaults


def run_record(run_id: str, target_types: dict[str, str], dataset: str | None = None, t0: datetime | None = None) -> RunRecord:
    """The first line of a v2 file: its version, the run's id, each target's kind and the line defaults.

    ``defaults``: the ``target`` and ``dataset`` a cell line leaves out (the
    run's first), and ``t0``, the time ``t`` counts from: a cell's
    ``started_at`` is written as ``t``, milliseconds after it.
    """
    start = (t0 or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    defaults: LineDefaults = {"t0": start.isoformat(timespec="milliseconds")}
    if target_types:
        defaults["target"] = next(iter(target_types))
    if dataset is not None:
        defaults["dataset"] = dataset
    return {"kind": "run", "version": RESULTS_VERSION, "run_id": run_id, "target_types": target_types, "defaults": defaults}


_MS = timedelta(milliseconds=1)
#: the end of a ``started_at`` after its second, by millisecond: "000+00:00"... (a format call less a cell)
_MILLIS = tuple(f"{ms:03d}+00:00" for ms in range(1000))
_DAY_MS = 86_400_000


class Clock:
    """A file's ``t0``: turns a cell's ``started_at`` into ``t`` (ms after it) and back, exactly."""

    __slots__ = ("_in_base", "_in_prefix", "_out_prefix", "_out_second", "date", "ms_of_day", "start")

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.date = start.date().isoformat()
        self.ms_of_day = ((start.hour * 60 + start.minute) * 60 + start.second) * 1000 + start.microsecond // 1000
        # the second last turned each way (cells come a second at a time): its text up to the ms, and its t
        self._in_prefix, self._in_base = "", 0
        self._out_second, self._out_prefix = -1, ""

    def ms_after(self, started_at: Any) -> int | None:
        """``started_at`` (``YYYY-MM-DDTHH:MM:SS.mmm+00:00``, as the executor writes it) as ms after t0; None for anything else."""
        if type(started_at) is not str or len(started_at) != 29 or not started_at.endswith("+00:00"):
            return None
        ms = started_at[20:23]
        if started_at.startswith(self._in_prefix) and self._in_prefix and ms.isdigit() and ms.isascii():
            return self._in_base + int(ms)  # the same second as the last one: read back exactly by construction
        if started_at.startswith(self.date):  # the usual case, by hand: a datetime a cell was a hot spot
            try:
                h, m, sec, ms_ = int(started_at[11:13]), int(started_at[14:16]), int(started_at[17:19]), int(ms)
            except ValueError:
                return None
            t = ((h * 60 + m) * 60 + sec) * 1000 + ms_ - self.ms_of_day
        else:
            try:
                t = (datetime.fromisoformat(started_at) - self.start) // _MS
            except (ValueError, TypeError):
                return None
        if self.time_at(t) != started_at:  # only what reads back the same
            return None
        self._in_prefix, self._in_base = started_at[:20], t - int(ms)
        return t

    def time_at(self, t: int) -> str:
        """The ``started_at`` text of ``t``."""
        of_day = self.ms_of_day + t
        if 0 <= of_day < _DAY_MS:
            second, ms = divmod(of_day, 1000)
            if second != self._out_second:
                minute, sec = divmod(second, 60)
                hour, minute = divmod(minute, 60)
                self._out_second, self._out_prefix = second, f"{self.date}T{hour:02d}:{minute:02d}:{sec:02d}."
            return self._out_prefix + _MILLIS[ms]
        return (self.start + t * _MS).isoformat(timespec="milliseconds")


def t0_of(defaults: LineDefaults | JSONObject) -> Clock | None:
    """The clock of a file's ``t`` (its run record's ``defaults.t0``), or None."""
    t0 = defaults.get("t0")
    if type(t0) is not str:
        return None
    try:
        start = datetime.fromisoformat(t0)
    except ValueError:
        return None
    return Clock(start) if start.utcoffset() == timedelta(0) else None


def split_case(result: CellResult, cells: int) -> dict[str, Any]:
    """The case record of ``result``'s case (``cells``: how many cells the case has), its defaults left out."""
    record: dict[str, Any] = {"kind": "case", "dataset": result.get("dataset"), "case_id": result.get("case_id"), "cells": cells}
    _case_fields(result, record)
    return record


def _case_fields(result: CellResult, into: dict[str, Any]) -> None:
    """Copy the case's own fields of ``result`` that differ from their defaults (:data:`CASE_KEYS`; and description/notes/context)
    into ``into``. Key by key, each default's test written out (``tags``: a list that is not empty...): this runs for every cell."""
    get = result.get
    value = get("category", "general")
    if type(value) is not str or value != "general":
        into["category"] = value
    value = get("difficulty")
    if value is not None:
        into["difficulty"] = value
    value = get("tags", [])
    if type(value) is not list or value:
        into["tags"] = value
    value = get("case_source", "")
    if type(value) is not str or value:
        into["case_source"] = value
    value = get("input")
    if value is not None:
        into["input"] = value
    value = get("expected")
    if value is not None:
        into["expected"] = value
    for key in _OPTIONAL_CASE_KEYS:
        if key in result:
            into[key] = result[key]  # type: ignore[literal-required]


def compact_cell(
    result: CellResult,
    target_types: dict[str, str],
    *,
    with_case: bool,
    defaults: LineDefaults | None = None,
    t0: Clock | None = None,
) -> dict[str, Any]:
    """``result`` as a v2 cell line: defaults, the run's fields and (unless ``with_case``) the case's fields left out.

    ``defaults``: the run record's (the target and dataset a line may leave
    out); ``t0``: its clock (:func:`t0_of`), which ``t`` counts from. By hand,
    key by key, in the order written: this runs for every cell.
    """
    get = result.get
    line: dict[str, Any] = {"index": get("index")}
    target, dataset = get("target"), get("dataset")
    if defaults is None or target != defaults.get("target"):
        line["target"] = target
    if defaults is None or dataset != defaults.get("dataset"):
        line["dataset"] = dataset
    line["case_id"] = get("case_id")
    kind = get("target_type")
    if target_types.get(target) != kind:  # type: ignore[call-overload]
        line["target_type"] = kind
    if with_case:
        _case_fields(result, line)
    status = line["status"] = get("status")
    repeat = get("repeat", 0)
    if repeat != 0 or type(repeat) is not int:
        line["repeat"] = repeat
    score = get("score")
    if status == "pass" and score == 1.0 and type(score) is float:
        pass  # a pass's usual score
    elif score is not None or status == "pass":
        line["score"] = score
    assertions = get("assertions", [])
    if type(assertions) is not list:
        line["assertions"] = assertions
    elif assertions:
        line["assertions"] = [_compact_assertion(a) for a in assertions]
    for key in _NULLABLE:
        value = get(key)
        if value is not None:
            line[key] = value
    cached = get("cached", False)
    if cached is not False:
        line["cached"] = cached
    for key in ("error", "traceback"):
        value = get(key)
        if value is not None:
            line[key] = value
    started = get("started_at")
    if started is not None:
        t = t0.ms_after(started) if t0 is not None else None
        if t is None:
            line["started_at"] = started
        else:
            line["t"] = t
    output = get("output")
    if output:
        line["output"] = _compact_output(output, result) if isinstance(output, dict) else output
    # what v1 writes only when it applies (skip_reason, stop_reason...), and anything newer (never a key of the line:
    # those are all known), in the result's order; picked out in C, without a set of the result's keys made and emptied
    for key in filterfalse(_KNOWN.__contains__, result):
        line[key] = result[key]  # type: ignore[literal-required]
    return line


_NULLABLE = ("latency_ms", "ttft_ms", "cost_usd", "judge_cost_usd")


def _compact_assertion(a: Any) -> Any:
    if type(a) is not dict:
        return a
    out: JSONObject = a.copy()  # then the keys at their defaults taken out (a copy in C: cheaper than a loop over its keys)
    get = out.get
    passed = get("passed")
    score = get("score")
    if type(score) is float and score == (1.0 if passed is True else 0.0):
        del out["score"]
    if get("name", _MISSING) is None:
        del out["name"]
    if passed is None and "passed" in out:
        del out["passed"]
    reason = get("reason")
    if type(reason) is str and reason == "":
        del out["reason"]
    weight = get("weight")
    if type(weight) is float and weight == 1.0:
        del out["weight"]
    return out


def _compact_output(output: JSONObject, result: CellResult) -> JSONObject:
    out = output.copy()  # then each key at its default taken out (its place kept: the rest stay in the output's order)
    get: Callable[[str, object], object] = out.get
    value: object
    default: object
    for key, default in _OUTPUT_FIXED:
        value = get(key, _MISSING)
        if value is default or (value == default and type(value) is type(default)):
            del out[key]
    cell = result.get
    for key in _FROM_CELL:  # a copy of the cell's own figure: left out when the same
        value, default = get(key, _MISSING), cell(key)
        if value is default or (value == default and type(value) is type(default)):
            del out[key]
    if not output.keys() >= _OUTPUT_DEFAULTS.keys():  # some of the usual keys missing: say which, so expand() does not add them
        missing: list[JSON] = [k for k in _OUTPUT_DEFAULTS if k not in output]
        out["_absent"] = missing
    return out


_MISSING = object()
#: the ``output`` keys left out at a default of their own, and that default (the others: at the cell's own value, :data:`_FROM_CELL`)
_OUTPUT_FIXED = tuple((key, default) for key, default in _OUTPUT_DEFAULTS.items() if key not in _FROM_CELL)
_KNOWN = frozenset(
    ("version", "run_id", "target_type", "status", "output", "t", *_IDENTITY, *CASE_KEYS, *_OPTIONAL_CASE_KEYS, *CELL_DEFAULTS)
)


#: the v1 keys a cell line may leave out, in v1 order, with what they are then (``tags`` and ``assertions``: a new
#: empty list each cell; ``output``: a new empty mapping); the run's own (version, run id, default target and dataset,
#: that target's kind) are filled in per file by :class:`Expansion`
_V1_TEMPLATE: JSONObject = {
    "version": RESULTS_VERSION,
    "run_id": None,
    "index": None,
    "target": None,
    "target_type": None,
    "dataset": None,
    "case_id": None,
    "repeat": 0,
    **CASE_KEYS,
    "status": None,
    "score": None,
    "assertions": None,
    "output": None,
    **{key: CELL_DEFAULTS[key] for key in ("latency_ms", "ttft_ms", "cost_usd", "judge_cost_usd", "cached", "error", "traceback")},
    "started_at": None,
}
_V1_KEYS = len(_V1_TEMPLATE)
_ASSERTION_TEMPLATE: JSONObject = {"type": None, "name": None, "passed": None, "score": None, "reason": "", "weight": 1.0}


class Expansion:
    """:func:`expand` for the cell lines of one file: what its run record says (run id, default target and
    dataset, their kinds, the clock of ``t``) is read once, into the v1 cell every line starts from."""

    __slots__ = ("clock", "run_id", "template", "types")

    def __init__(self, run: JSONObject | None, clock: Clock | None = None) -> None:
        run = run or {}
        defaults = as_object(run.get("defaults"))
        types = run.get("target_types")
        self.types = types if isinstance(types, dict) else None
        self.clock = clock if clock is not None else t0_of(defaults)
        self.run_id = run.get("run_id")
        target = defaults.get("target")
        self.template = {
            **_V1_TEMPLATE,
            "run_id": self.run_id,
            "target": target,
            "target_type": self._kind(target),
            "dataset": defaults.get("dataset"),
        }

    def _kind(self, target: JSON) -> JSON:
        return self.types.get(target) if self.types is not None and isinstance(target, str) else None

    def __call__(self, line: JSONObject, case: JSONObject | None) -> CellResult:
        """``line`` with every v1 key back, in v1 order (``case``: its case record, whose fields it then leaves out)."""
        # the v1 cell with the line's values in place (a key v1 does not have goes after them, in the line's order)
        result = self.template.copy()
        result.update(line)
        if "run_id" in line or "version" in line:  # the run's, whatever a line says
            result["run_id"], result["version"] = self.run_id, RESULTS_VERSION
        if "target" in line and "target_type" not in line:
            result["target_type"] = self._kind(result["target"])
        if "t" in line:
            del result["t"]
            if "started_at" not in line:
                t, clock = line["t"], self.clock
                result["started_at"] = clock.time_at(t) if type(t) is int and clock is not None else None
        if "score" not in line and result["status"] == "pass":
            result["score"] = 1.0
        if "assertions" not in line:
            result["assertions"] = []
        else:  # anything but a list (a hand-edited line) is kept as it is, as v1 keeps it
            assertions = result["assertions"]
            if isinstance(assertions, list):
                result["assertions"] = [_expand_assertion(a) for a in assertions]
        result["output"] = _expand_output(result["output"], result) if "output" in line else {}
        source = line
        if case is not None:  # the case's fields are its record's, whatever the line holds
            source, cget = case, case.get
            for key, default in CASE_KEYS.items():
                result[key] = cget(key, default)
            for key in _OPTIONAL_CASE_KEYS:
                result.pop(key, None)
        if "tags" not in source:
            result["tags"] = []
        if "skip_reason" in line or "description" in source or "notes" in source or "context" in source:
            _order_after_v1(result, source)
        return result  # type: ignore[return-value]


def _order_after_v1(result: JSONObject, source: JSONObject) -> None:
    """Put what follows the v1 keys in v1's order: ``skip_reason``, the case's ``description``, ``notes`` and
    ``context`` (from ``source``, the case record or the line), then the line's other keys as they came."""
    rest = {key: result.pop(key) for key in list(result)[_V1_KEYS:]}
    if "skip_reason" in rest:
        result["skip_reason"] = rest.pop("skip_reason")
    for key in _OPTIONAL_CASE_KEYS:
        rest.pop(key, None)
        if key in source:
            result[key] = source[key]
    result.update(rest)


def expand(line: JSONObject, run: JSONObject | None, case: JSONObject | None, clock: Clock | None = None) -> CellResult:
    """A v2 cell line with every v1 key back, in v1 order.

    ``run``: the file's run record; ``case``: its case record; ``clock``: the
    run record's (:func:`t0_of` of its ``defaults``: None reads it from
    ``run``). A reader of many lines builds one :class:`Expansion` instead.
    """
    return Expansion(run, clock)(line, case)


def _expand_assertion(a: JSON) -> JSON:
    if not isinstance(a, dict):
        return a
    out = _ASSERTION_TEMPLATE.copy()
    out.update(a)
    if "score" not in a:
        out["score"] = 1.0 if out["passed"] is True else 0.0  # a pass's score, or a failure's
    return out


#: a v1 output with every key at its default, in v1 order (copied, its lists and dict made afresh, for each cell)
_OUTPUT_TEMPLATE = dict(_OUTPUT_DEFAULTS)


def _expand_output(output: JSON, cell: JSONObject) -> JSON:
    """A v1 output from a line's ``output`` (``cell``: the expanded cell, whose figures it copies)."""
    if not isinstance(output, dict):
        return output
    if "_absent" not in output:  # the usual output: the defaults, the cell's figures, then what the line holds (its keys in place)
        full = _OUTPUT_TEMPLATE.copy()
        if "tool_calls" not in output:
            full["tool_calls"] = []
        if "usage" not in output:
            full["usage"] = {"input_tokens": 0, "output_tokens": 0, "cache_hit_tokens": 0}
        if "events" not in output:
            full["events"] = []
        full["latency_ms"], full["ttft_ms"], full["cost_usd"], full["error"] = (
            cell["latency_ms"],
            cell["ttft_ms"],
            cell["cost_usd"],
            cell["error"],
        )
        full.update(output)
        return full
    absent = output.get("_absent")
    skip = set(absent) if isinstance(absent, list) else ()
    out: JSONObject = {}
    for key, default in _OUTPUT_DEFAULTS.items():
        if key in skip:
            continue
        if key in output:
            out[key] = output[key]
        elif key in _FROM_CELL:
            out[key] = cell[key]
        else:
            out[key] = {**default} if type(default) is dict else ([] if type(default) is list else default)
    for key, value in output.items():
        if key not in out and key != "_absent":
            out[key] = value
    return out
