"""JUnit XML for CI, written from a run's result dicts.

The file targets the Jenkins xUnit plugin's ``junit-10.xsd`` (a copy lives at
``shared/conformance/junit-10.xsd``; the test suite validates real output
against it). Layout::

    <testsuites name tests failures errors time>   (the XSD allows no `skipped` here)
      <testsuite name=<target> tests failures errors skipped time timestamp>
        <properties><property name="run_id" value=.../></properties>
        <testcase classname="<dataset>.<category>" name="<case_id>[ #r<repeat>]" time>
          <failure|error|skipped .../>     at most one, by the cell's status
          <system-out>the output text, truncated</system-out>
        </testcase>

A ``fail`` cell (an assertion did not hold) is a ``<failure>``; an ``error``
cell (the target crashed, timed out, the transport failed) is an
``<error>``; the two are never mixed. Characters XML 1.0 forbids (ANSI
``\\x1b``, NUL, lone surrogates...) are replaced by a visible ``#xNN`` on
every attribute and text node, as pytest's junitxml does: left in, they make
CI parsers read the file as zero tests, a false pass.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["write_junit", "xml_safe"]

#: longest <system-out> kept per test case, in characters
MAX_SYSTEM_OUT = 10_000
#: longest message="" attribute; the element text keeps the whole story
MAX_MESSAGE = 1_000

# Everything outside XML 1.0's Char production:
# #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
_ILLEGAL_XML_CHARS = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_RUN_ID_TIME = re.compile(r"^(\d{8}-\d{6})")
_ERROR_TYPE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Timeout)):")


def xml_safe(value: Any) -> str:
    """``value`` as text XML 1.0 can hold: each forbidden character becomes ``#xNN``."""
    text = "" if value is None else str(value)

    def visible(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"

    return _ILLEGAL_XML_CHARS.sub(visible, text)


def _seconds(latency_ms: Any) -> float:
    """Latency in seconds; anything unusable (None, NaN, negative) counts as 0."""
    if isinstance(latency_ms, bool) or not isinstance(latency_ms, (int, float)):
        return 0.0
    if not math.isfinite(latency_ms) or latency_ms < 0:
        return 0.0
    return float(latency_ms) / 1000.0


def _fmt_time(seconds: float) -> str:
    # plain decimal always: the XSD's SUREFIRE_TIME pattern rejects `1e-05`
    return f"{seconds:.3f}"


def _element(tag: str, attrs: dict[str, Any], text: str | None = None) -> ET.Element:
    el = ET.Element(tag, {k: xml_safe(v) for k, v in attrs.items()})
    if text:
        el.text = xml_safe(text)
    return el


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _label(assertion: dict[str, Any]) -> str:
    kind = str(assertion.get("type") or "assertion")
    name = assertion.get("name")
    return f"{kind} ({name})" if name else kind


def _line(assertion: dict[str, Any]) -> str:
    reason = assertion.get("reason") or assertion.get("error") or ""
    return f"{_label(assertion)}: {reason}" if reason else _label(assertion)


def _outcome(result: dict[str, Any]) -> ET.Element | None:
    """The <failure>, <error> or <skipped> child for a cell; None for a pass."""
    status = result.get("status")
    assertions = [a for a in result.get("assertions") or [] if isinstance(a, dict)]
    raw_output = result.get("output")
    output: dict[str, Any] = raw_output if isinstance(raw_output, dict) else {}
    if status == "pass":
        return None
    if status == "fail":
        failing = [a for a in assertions if a.get("passed") is False]
        if failing:
            first = failing[0]
            message = str(first.get("reason") or first.get("error") or f"{_label(first)} did not hold")
            text = "\n".join(_line(a) for a in failing)
        else:  # a weighted score under the case threshold, no single culprit
            score = result.get("score")
            message = f"score {score:.3f} is below the case threshold" if isinstance(score, (int, float)) else "failed"
            text = message
        return _element("failure", {"message": _clip(message, MAX_MESSAGE), "type": "AssertionFailed"}, text)
    if status == "skipped":
        inconclusive = [a for a in assertions if a.get("passed") is None]
        message = _line(inconclusive[0]) if inconclusive else "inconclusive"
        return _element("skipped", {"message": _clip(message, MAX_MESSAGE)})
    # "error", and any status this writer does not know: never report it as passing
    error = result.get("error") or output.get("error")
    if status != "error":
        error = f"unknown cell status {status!r}" + (f": {error}" if error else "")
    message = str(error or "the target failed")
    match = _ERROR_TYPE.match(message)
    error_type = match.group(1) if match else "TargetError"
    traceback = result.get("traceback") or output.get("traceback")
    return _element("error", {"message": _clip(message, MAX_MESSAGE), "type": error_type}, str(traceback or message))


@dataclass
class _Case:
    element: ET.Element
    case_key: tuple[str, str]  # (dataset, case_id)
    repeat: int
    order: tuple[float, int]  # (matrix index, arrival) for a stable matrix order


@dataclass
class _Suite:
    name: str
    cases: list[_Case] = field(default_factory=list)
    repeated: set[tuple[str, str]] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: {"failures": 0, "errors": 0, "skipped": 0})
    seconds: float = 0.0

    @property
    def first(self) -> tuple[float, int]:
        return min(c.order for c in self.cases)


def _testcase(result: dict[str, Any], seconds: float) -> ET.Element:
    dataset = result.get("dataset") or ""
    category = result.get("category") or "general"
    classname = f"{dataset}.{category}" if dataset else str(category)
    # "name" first so it leads the attributes; the final value is set once repeats are known
    case = _element("testcase", {"name": "", "classname": classname, "time": _fmt_time(seconds)})
    outcome = _outcome(result)
    if outcome is not None:
        case.append(outcome)
    output = result.get("output")
    text = output.get("text") if isinstance(output, dict) else None
    if text:
        case.append(_element("system-out", {}, _clip(str(text), MAX_SYSTEM_OUT)))
    return case


def _timestamp(run_id: str) -> str:
    # the run id starts with the run's start time; fall back to now
    match = _RUN_ID_TIME.match(run_id)
    if match:
        try:
            return datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").isoformat()
        except ValueError:
            pass
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")


def write_junit(
    results: Iterable[dict[str, Any]],
    path: Path,
    *,
    name: str,
    run_id: str,
    timestamp: str | None = None,
) -> None:
    """Write the cells in ``results`` as JUnit XML to ``path`` (atomically).

    One ``<testsuite>`` per target, one ``<testcase>`` per cell. Suites and
    cases come out in matrix order (each result's ``index``), so the file
    diffs cleanly between runs even when results arrived in completion order;
    for results already in matrix order that is their first-seen order.
    Only the finished ``<testcase>`` elements are held, grouped by target.
    """
    stamp = timestamp or _timestamp(run_id)
    suites: dict[str, _Suite] = {}
    for arrival, result in enumerate(results):
        target = str(result.get("target") or "")
        suite = suites.get(target)
        if suite is None:
            suite = suites[target] = _Suite(target)
        seconds = _seconds(result.get("latency_ms"))
        status = result.get("status")
        if status == "fail":
            suite.counts["failures"] += 1
        elif status == "skipped":
            suite.counts["skipped"] += 1
        elif status != "pass":  # "error", or a status we do not know: never a silent pass
            suite.counts["errors"] += 1
        suite.seconds += seconds
        case_key = (str(result.get("dataset") or ""), str(result.get("case_id") or ""))
        raw_repeat = result.get("repeat")
        repeat = raw_repeat if isinstance(raw_repeat, int) else 0
        if repeat > 0:
            suite.repeated.add(case_key)
        index = result.get("index")
        order = (float(index) if isinstance(index, int) else math.inf, arrival)
        suite.cases.append(_Case(_testcase(result, seconds), case_key, repeat, order))

    ordered = sorted(suites.values(), key=lambda s: s.first)
    tests = sum(len(s.cases) for s in ordered)
    root = _element(
        "testsuites",
        {
            "name": name,
            "tests": tests,
            "failures": sum(s.counts["failures"] for s in ordered),
            "errors": sum(s.counts["errors"] for s in ordered),
            "time": _fmt_time(sum(s.seconds for s in ordered)),
        },
    )
    for suite in ordered:
        suite_el = _element(
            "testsuite",
            {
                "name": suite.name,
                "tests": len(suite.cases),
                "failures": suite.counts["failures"],
                "errors": suite.counts["errors"],
                "skipped": suite.counts["skipped"],
                "time": _fmt_time(suite.seconds),
                "timestamp": stamp,
            },
        )
        properties = ET.SubElement(suite_el, "properties")
        properties.append(_element("property", {"name": "run_id", "value": run_id}))
        for case in sorted(suite.cases, key=lambda c: c.order):
            label = case.case_key[1]
            if case.case_key in suite.repeated:  # repeats share a case id: tell them apart
                label = f"{label} #r{case.repeat}"
            case.element.set("name", xml_safe(label))
            suite_el.append(case.element)
        root.append(suite_el)

    tree = ET.ElementTree(root)
    ET.indent(tree, space="  ")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # write beside the target and rename: CI never reads a half-written file
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            tree.write(fh, encoding="utf-8", xml_declaration=True)
            fh.write(b"\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
