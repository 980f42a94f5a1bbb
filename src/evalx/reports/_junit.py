"""JUnit XML for CI, written from a run's result dicts.

The file targets the Jenkins xUnit plugin's ``junit-10.xsd`` (a copy lives at
``shared/conformance/junit-10.xsd``; the test suite validates real output
against it). Layout::

    <testsuites name tests failures errors time>   (the XSD allows no `skipped` here)
      <testsuite name=<target> tests failures errors skipped time timestamp>
        <properties><property name="run_id"/><property name="repeat_pass_rule"/></properties>
        <testcase classname="<dataset>.<category>" name="<case_id>" time>   one a case, repeats folded in
          <failure|error|skipped .../>     at most one, by the case's status
          <flakyFailure|flakyError .../>   a passing case: one per repeat that did not pass
          <rerunFailure|rerunError .../>   a failing case: one per further repeat that did not pass
          <system-out>the output text (with repeats: each repeat's outcome first), truncated</system-out>
        </testcase>

A ``fail`` cell (an assertion did not hold) is a ``<failure>``; an ``error``
cell (the target crashed, timed out, the transport failed) is an
``<error>``; the two are never mixed. With repeats a case's status comes from
``repeat_pass_rule`` (:mod:`evalx._repeats`): a passing case keeps its
failed repeats as ``<flakyFailure>``/``<flakyError>`` (Surefire's "passed on a
rerun"), a failing one gets one ``<failure>`` (or ``<error>``) whose message
starts with ``k of N repeats passed``, plus ``<rerunFailure>``/``<rerunError>``
for the other repeats that did not pass — all allowed by the XSD, and
``tests`` still counts ``<testcase>`` elements. Characters XML 1.0 forbids (ANSI
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

from .._repeats import DEFAULT_RULE, RULES, Tally, case_status

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
    broken = [a for a in assertions if a.get("error")]
    if not error and broken:  # the target answered, but grading broke (e.g. an unreadable judge verdict)
        message = "\n".join(f"{_label(a)}: could not be evaluated: {a['error']}" for a in broken)
        return _element("error", {"message": _clip(message, MAX_MESSAGE), "type": "GradingError"}, message)
    message = str(error or "the target failed")
    match = _ERROR_TYPE.match(message)
    error_type = match.group(1) if match else "TargetError"
    traceback = result.get("traceback") or output.get("traceback")
    return _element("error", {"message": _clip(message, MAX_MESSAGE), "type": error_type}, str(traceback or message))


@dataclass
class _Repeat:
    """One cell of a test case: what its testcase (or flaky/rerun element) needs."""

    repeat: int
    status: str
    outcome: ET.Element | None  # <failure>, <error> or <skipped>; None for a pass
    text: str | None  # the output text, clipped
    seconds: float
    order: tuple[float, int]  # (matrix index, arrival) for a stable matrix order
    classname: str


@dataclass
class _Suite:
    name: str
    # (dataset, case_id) -> the case's repeats: one <testcase> each, whatever the repeat count
    cases: dict[tuple[str, str], list[_Repeat]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"failures": 0, "errors": 0, "skipped": 0})
    seconds: float = 0.0

    @property
    def first(self) -> tuple[float, int]:
        return min(r.order for reps in self.cases.values() for r in reps)


def _repeat(result: dict[str, Any], seconds: float, order: tuple[float, int]) -> _Repeat:
    dataset = result.get("dataset") or ""
    category = result.get("category") or "general"
    classname = f"{dataset}.{category}" if dataset else str(category)
    output = result.get("output")
    text = output.get("text") if isinstance(output, dict) else None
    raw_repeat = result.get("repeat")
    status = result.get("status")
    return _Repeat(
        repeat=raw_repeat if isinstance(raw_repeat, int) and not isinstance(raw_repeat, bool) else 0,
        status=status if status in ("pass", "fail", "skipped") else "error",  # unknown: never a pass
        outcome=_outcome(result),
        text=_clip(str(text), MAX_SYSTEM_OUT) if text else None,
        seconds=seconds,
        order=order,
        classname=classname,
    )


def _rerun(tag: str, rep: _Repeat) -> ET.Element:
    """A <flakyFailure>/<flakyError>/<rerunFailure>/<rerunError> for one repeat (the XSD's rerunType)."""
    outcome = rep.outcome
    default_type = "AssertionFailed" if rep.status == "fail" else "TargetError"
    message = outcome.get("message", "") if outcome is not None else ""
    el = ET.Element(tag, {"message": xml_safe(f"repeat {rep.repeat}: {message}"), "type": (outcome.get("type") if outcome is not None else None) or default_type})
    if outcome is not None and outcome.text:
        el.append(_element("stackTrace", {}, outcome.text))
    if rep.text:
        el.append(_element("system-out", {}, rep.text))
    return el


def _repeats_testcase(name: str, reps: list[_Repeat], rule: str) -> tuple[ET.Element, str]:
    """One <testcase> for a case's repeats, and its status by ``rule``.

    A single run is written as it is. With repeats: a passing case carries a
    <flakyFailure>/<flakyError> per repeat that did not pass; a failing (or
    erroring) case carries one <failure> (or <error>) — the first such
    repeat's, its message prefixed with the k/N count and the rule — plus a
    <rerunFailure>/<rerunError> per other repeat that did not pass; a case
    whose every repeat was inconclusive is <skipped>. <system-out> lists
    every repeat's outcome, then the output text of the deciding repeat.
    """
    reps = sorted(reps, key=lambda r: (r.repeat, r.order))
    case = _element("testcase", {"name": name, "classname": reps[0].classname, "time": _fmt_time(sum(r.seconds for r in reps))})
    if len(reps) == 1:
        only = reps[0]
        if only.outcome is not None:
            case.append(only.outcome)
        if only.text:
            case.append(_element("system-out", {}, only.text))
        return case, only.status
    tally = Tally()
    for rep in reps:
        tally.add(rep.status)
    status = case_status(tally, rule)
    counted = f"{tally.passed} of {tally.decided} repeats passed (repeat_pass_rule: {rule})"
    if tally.skipped:
        counted += f", {tally.skipped} inconclusive"
    not_passing = [r for r in reps if r.status in ("fail", "error")]
    shown = reps[0]
    if status == "pass":
        for rep in not_passing:
            case.append(_rerun("flakyFailure" if rep.status == "fail" else "flakyError", rep))
    elif status in ("fail", "error"):
        main = next(r for r in not_passing if r.status == status)
        shown = main
        assert main.outcome is not None
        verdict = _element(
            main.outcome.tag,
            {
                "message": _clip(f"{counted}; repeat {main.repeat}: {main.outcome.get('message', '')}", MAX_MESSAGE),
                "type": main.outcome.get("type") or "AssertionFailed",
            },
            main.outcome.text,
        )
        case.append(verdict)
        for rep in not_passing:
            if rep is not main:
                case.append(_rerun("rerunFailure" if rep.status == "fail" else "rerunError", rep))
    else:  # every repeat inconclusive
        first = reps[0].outcome
        reason = first.get("message", "inconclusive") if first is not None else "inconclusive"
        case.append(_element("skipped", {"message": _clip(f"all {tally.runs} repeats inconclusive: {reason}", MAX_MESSAGE)}))
    lines = [counted]
    for rep in reps:
        why = rep.outcome.get("message", "") if rep.outcome is not None else ""
        lines.append(f"repeat {rep.repeat}: {rep.status}" + (f": {why}" if why else ""))
    if shown.text:
        lines += ["", f"output of repeat {shown.repeat}:", shown.text]
    case.append(_element("system-out", {}, _clip("\n".join(lines), MAX_SYSTEM_OUT)))
    return case, status


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
    repeat_pass_rule: str = DEFAULT_RULE,
) -> None:
    """Write the cells in ``results`` as JUnit XML to ``path`` (atomically).

    One ``<testsuite>`` per target, one ``<testcase>`` per case of that
    target — its repeats folded in, passing or failing by ``repeat_pass_rule``
    (``all``, ``majority`` or ``any``; a run records it in summary.json, so
    re-rendering a stored run passes that value). Suites and cases come out in
    matrix order (each result's ``index``), so the file diffs cleanly between
    runs even when results arrived in completion order.
    """
    if repeat_pass_rule not in RULES:
        raise ValueError(f"unknown repeat_pass_rule {repeat_pass_rule!r} (one of {', '.join(RULES)})")
    stamp = timestamp or _timestamp(run_id)
    suites: dict[str, _Suite] = {}
    for arrival, result in enumerate(results):
        target = str(result.get("target") or "")
        suite = suites.get(target)
        if suite is None:
            suite = suites[target] = _Suite(target)
        seconds = _seconds(result.get("latency_ms"))
        suite.seconds += seconds
        case_key = (str(result.get("dataset") or ""), str(result.get("case_id") or ""))
        index = result.get("index")
        order = (float(index) if isinstance(index, int) else math.inf, arrival)
        suite.cases.setdefault(case_key, []).append(_repeat(result, seconds, order))

    ordered = sorted(suites.values(), key=lambda s: s.first)
    built: list[tuple[_Suite, list[ET.Element]]] = []
    for suite in ordered:
        elements = []
        for case_key, reps in sorted(suite.cases.items(), key=lambda kv: min(r.order for r in kv[1])):
            element, status = _repeats_testcase(case_key[1], reps, repeat_pass_rule)
            if status == "fail":
                suite.counts["failures"] += 1
            elif status == "error":
                suite.counts["errors"] += 1
            elif status == "skipped":
                suite.counts["skipped"] += 1
            elements.append(element)
        built.append((suite, elements))
    tests = sum(len(elements) for _, elements in built)
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
    for suite, elements in built:
        suite_el = _element(
            "testsuite",
            {
                "name": suite.name,
                "tests": len(elements),
                "failures": suite.counts["failures"],
                "errors": suite.counts["errors"],
                "skipped": suite.counts["skipped"],
                "time": _fmt_time(suite.seconds),
                "timestamp": stamp,
            },
        )
        properties = ET.SubElement(suite_el, "properties")
        properties.append(_element("property", {"name": "run_id", "value": run_id}))
        properties.append(_element("property", {"name": "repeat_pass_rule", "value": repeat_pass_rule}))
        suite_el.extend(elements)
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
