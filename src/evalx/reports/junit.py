"""JUnit XML for CI, written from a run's cell results (:class:`~evalx.results.model.CellResult`).

The file targets the Jenkins xUnit plugin's ``junit-10.xsd`` (a copy lives at
``shared/conformance/junit-10.xsd``; the test suite validates real output
against it). Layout::

    <testsuites name tests failures errors time>   (the XSD allows no `skipped` and no <properties> here)
      <testsuite name=<target> tests failures errors skipped time timestamp>
        <properties>[interrupted, resume,] run_id, repeat_pass_rule</properties>   in the first <testsuite> only
        <testcase classname="<target>.<dataset>" name="<case_id>" time>   one a case and target, repeats folded in
          <failure|error|skipped .../>     at most one, by the case's status
          <flakyFailure|flakyError .../>   a passing case: one per repeat that did not pass
          <rerunFailure|rerunError .../>   a failing case: one per further repeat that did not pass
          <system-out>the case's source (file:line), category, difficulty, tags, description and notes;
                      then the output text (with repeats: each repeat's outcome first), truncated</system-out>
        </testcase>

Identity (DESIGN.md "JUnit identity", "JUnit details"): ``classname`` is
``<target or matrix variant id>.<dataset id>`` with every ``.`` inside an id
written as ``_`` (so the one ``.`` separates the two), ``name`` the case id.
Nothing that changes with an edit of the case (category, tags, its line) is in
the identity: those are in ``system-out``. A case's repeats are one testcase
(the case-level verdict by ``repeat_pass_rule``), so ``(classname, name)`` is
unique within a file and a case keeps one CI history whatever its repeat
count. Two ids that only differ by ``.`` against ``_`` (``a.b`` and ``a_b``)
would share a classname: the second one met (in matrix order) gets ``~2``.
The run-wide properties are written once (in the first suite): a parser that
merges every suite's properties into one (xunitparser) fails on a repeated
name. The ``extended`` flavour adds ``file`` and ``line`` attributes (the
case's source) to each ``<testcase>`` for consumers that link them; the XSD
does not allow them, so the default (``standard``) leaves them out.

A ``fail`` cell (an assertion did not hold) is a ``<failure>``; an ``error``
cell (the target crashed, timed out, the transport failed) is an
``<error>``; the two are never mixed. With repeats a case's status comes from
``repeat_pass_rule`` (:mod:`evalx.results.repeats`): a passing case keeps its
failed repeats as ``<flakyFailure>``/``<flakyError>`` (Surefire's "passed on a
rerun"), a failing one gets one ``<failure>`` (or ``<error>``) whose message
starts with ``k of N repeats passed``, plus ``<rerunFailure>``/``<rerunError>``
for the other repeats that did not pass — all allowed by the XSD, and
``tests`` still counts ``<testcase>`` elements. Characters XML 1.0 forbids (ANSI
``\\x1b``, NUL, lone surrogates...) are replaced by a visible ``#xNN`` on
every attribute and text node, as pytest's junitxml does: left in, they make
CI parsers read the file as zero tests, a false pass.

``passes="summary"`` (``--junit-passes summary``, for huge suites; DESIGN.md
"JUnit details") writes every case that did not pass as above and folds the
passing cases of each (target, dataset) into one ``<testcase name="passed
cases (N)">`` at the top of its suite, their ids in its ``<system-out>``, one
a line, then the flaky ones (passed by the rule, not every repeat passed) with
their counts. The ids are spooled, never a list; past :data:`MAX_PASSED_IDS`
bytes they are only counted. ``tests`` still counts ``<testcase>`` elements,
and the suites' times are those of the full file.

The file is written as a stream, never held as a tree: results in matrix
order (what a finished run's ``results.jsonl`` is) are folded one case at a
time into a text buffer per target (in memory while small, spilled to a
temporary file past :data:`SPOOL_BYTES`), and the buffers are joined under
their ``<testsuite>`` headers once the counts are known, so memory stays
O(targets + one case's repeats) however many cells a run has (plus a set of
the hashes of the cases met, to notice one met again: ~70 bytes a case). Input in any
other order (a killed run's completion-order file) is noticed on the fly and
read again, sorted in chunks spilled to temporary files and merged, with the
same bytes; only a list given in memory, or a file that even sorted will not
stream (no indexes), goes through the in-memory sort. Each test case is an
``xml.etree.ElementTree`` element, written with ``ET.indent(space="  ")`` and
``ET.tostring``, except a case of one cell, written straight from its result
with the same bytes (:meth:`_SuiteWriter.single`); the parts around them (the
suites' headers, the summary test cases) are written as text escaped the same way.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Union, cast

from evalx.common.atomic import atomic_write
from evalx.errors import writing
from evalx.reports.spool import Spool
from evalx.results.display import BODY_CHARS, IDENT_CHARS
from evalx.results.model import AssertionRecord, CellOutput, CellResult
from evalx.results.outcome import interruption
from evalx.results.repeats import DEFAULT_RULE, RULES, Tally, case_status

__all__ = ["FLAVORS", "PASSES", "JUnitStream", "classname_part", "run_notes", "write_junit", "xml_safe"]

#: ``standard``: valid against junit-10.xsd; ``extended``: also ``file``/``line`` attributes on each testcase
FLAVORS = ("standard", "extended")

#: longest <system-out> kept per test case, in characters
MAX_SYSTEM_OUT = 10_000
#: longest message="" attribute; the element text keeps the whole story
MAX_MESSAGE = 1_000
#: longest description or notes kept in a test case's <system-out>
MAX_NOTE = 2_000
#: a suite's testcases are kept in memory up to this many characters, then spilled to a temporary file
SPOOL_BYTES = 4 * 1024 * 1024
#: rendered test cases are gathered up to this many characters before they go to the spool
PENDING_CHARS = 64 * 1024
#: ``all``: a testcase per case; ``summary``: the passing cases of a target and dataset folded into one testcase
PASSES = ("all", "summary")
#: the most bytes of passing ids one summary testcase lists (libxml2-based readers refuse a text node over 10 MB)
MAX_PASSED_IDS = 8_000_000
#: the most bytes of flaky-case lines one summary testcase lists
MAX_FLAKY_NOTES = 1_000_000
#: a summary testcase's ids are kept in memory up to this many characters, then spilled to a temporary file
ID_SPOOL_BYTES = 256 * 1024
#: passing ids gathered before they are joined into their spool
PENDING_IDS = 2048
#: results of a file out of matrix order sorted in memory at a time; each sorted chunk then waits in a temporary file
SORT_CHUNK = 20_000

# Everything outside XML 1.0's Char production
# (#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]), written as the code points it leaves
# out: the same set, and compiled in a tenth of the time of its negation (~5 ms at every start)
_ILLEGAL_XML = "\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff"
_ILLEGAL_XML_CHARS = re.compile(f"[{_ILLEGAL_XML}]")
# ... and what evalx.results.display shows escaped: in text, and (more) in names
_XML_BODY = re.compile(f"[{_ILLEGAL_XML}{BODY_CHARS}]")
_XML_IDENT = re.compile(f"[{_ILLEGAL_XML}{IDENT_CHARS}]")
_RUN_ID_TIME = re.compile(r"^(\d{8}-\d{6})")
_ERROR_TYPE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Timeout)):")
_SOURCE_LINE = re.compile(r"^(.*):(\d+)$")
INDENT = "  "

ResultsSource = Union[Iterable[CellResult], str, "os.PathLike[str]"]


def _xml_visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"


def xml_safe(value: Any, *, ident: bool = False) -> str:
    """``value`` as text XML 1.0 can hold, nothing hidden: each forbidden, control, invisible or bidi character becomes ``#xNN``.

    ``ident=True`` (test names, class names) also escapes newlines, tabs, the
    zero-width joiners and blanks other than the space (:mod:`evalx.results.display`).
    """
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable():  # the common case: nothing to replace
        return text
    return (_XML_IDENT if ident else _XML_BODY).sub(_xml_visible, text)


#: what ElementTree writes for these in element text (``&`` first: the others' entities hold one)
_TEXT_ENTITIES = (("&", "&amp;"), (">", "&gt;"), ("<", "&lt;"))
#: ... and in an attribute value
_ATTRIB_ENTITIES = (*_TEXT_ENTITIES, ('"', "&quot;"), ("\r", "&#13;"), ("\n", "&#10;"), ("\t", "&#09;"))


def _replaced(text: str, entities: tuple[tuple[str, str], ...]) -> str:
    """``text`` with each character of ``entities`` replaced, in order (``xml.sax.saxutils.escape``, which replaces
    each one whether present or not: most ids and texts hold none)."""
    for char, entity in entities:
        if char in text:
            text = text.replace(char, entity)
    return text


def _escape_attrib(text: str) -> str:
    """An attribute value as ElementTree escapes it (``& < > "`` and CR, LF, TAB as character references)."""
    return _replaced(text, _ATTRIB_ENTITIES)


def _escape_text(text: str) -> str:
    """Element text as ElementTree escapes it (``& < >``)."""
    return _replaced(text, _TEXT_ENTITIES)


def _rendered(el: ET.Element, level: int) -> str:
    """``el`` as ElementTree writes it, indented by ``ET.indent(space="  ")`` as it would be at ``level`` of the file."""
    ET.indent(el, space=INDENT, level=level)
    return ET.tostring(el, encoding="unicode")


def _new(tag: str, attrib: dict[str, str], text: str | None = None) -> ET.Element:
    """An element whose attributes and text are XML-safe already."""
    el = ET.Element(tag, attrib)
    el.text = text
    return el


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


_NAMES = frozenset({"name", "classname"})  # attributes that hold ids


def _element(tag: str, attrs: Mapping[str, str | int], text: str | None = None) -> ET.Element:
    el = ET.Element(tag, {k: xml_safe(v, ident=k in _NAMES) for k, v in attrs.items()})
    if text:
        el.text = xml_safe(text)
    return el


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _label(assertion: AssertionRecord) -> str:
    kind = str(assertion.get("type") or "assertion")
    name = assertion.get("name")
    label = f"{kind} ({name})" if name else kind
    turn = assertion.get("turn")
    return f"turn {turn}: {label}" if turn is not None else label  # a conversation's check of one turn's reply


def _transcript(turns: Any, text: Any) -> Any:
    """A conversation's system-out text: each turn's user message and reply on a line (clipped), and which checks failed."""
    if not isinstance(turns, list):
        return text
    lines = []
    for n, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            continue
        output = turn.get("output")
        reply = output.get("error") or output.get("text") if isinstance(output, dict) else None
        failed = [
            _label(cast(AssertionRecord, a)) for a in turn.get("assertions") or () if isinstance(a, dict) and a.get("passed") is False
        ]
        lines.append(f"turn {n} user: {_clip(_flat(turn.get('input')), MAX_TURN_LINE)}")
        lines.append(f"turn {n} reply: {_clip(_flat(reply), MAX_TURN_LINE)}" + (f"  [failed: {', '.join(failed)}]" if failed else ""))
    return "\n".join(lines) or text


#: longest user message or reply shown per turn in a conversation's system-out
MAX_TURN_LINE = 200


def _line(assertion: AssertionRecord) -> str:
    reason = assertion.get("reason") or assertion.get("error") or ""
    return f"{_label(assertion)}: {reason}" if reason else _label(assertion)


def _outcome(result: CellResult) -> ET.Element | None:
    """The <failure>, <error> or <skipped> child for a cell; None for a pass."""
    status = result.get("status")
    if status == "pass":
        return None
    assertions = [a for a in result.get("assertions") or [] if isinstance(a, dict)]
    raw_output = result.get("output")
    output: CellOutput = raw_output if isinstance(raw_output, dict) else {}
    if status == "fail":
        failing = [a for a in assertions if a.get("passed") is False]
        review = result.get("review")
        if isinstance(review, dict):  # a reviewer's verdict (reviews.jsonl) decided this failure
            comment = str(review.get("comment") or "")
            message = f"reviewed as fail by {review.get('reviewer') or 'a reviewer'}" + (f": {comment}" if comment else "")
            text = "\n".join([message, f"(the run said {review.get('original_status')})", *(_line(a) for a in failing)])
            return _element("failure", {"message": _clip(message, MAX_MESSAGE), "type": "ReviewedFail"}, text)
        if failing:
            first = failing[0]
            message = str(first.get("reason") or first.get("error") or f"{_label(first)} did not hold")
            if first.get("turn") is not None:  # a conversation: name the turn whose reply failed
                message = _line(first)
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
    result: CellResult  # the case's fields (source, category, tags...) are read from the first repeat's


def _repeat(result: CellResult, seconds: float, order: tuple[float, int]) -> _Repeat:
    output = result.get("output")
    text = output.get("text") if isinstance(output, dict) else None
    if "turns" in result:  # a conversation: the transcript, briefly
        text = _transcript(result.get("turns"), text)
    if result.get("truncated") is True:  # a cut-off answer is flagged where CI shows the output
        text = f"[truncated: the answer was cut off at the token limit, stop_reason {str(result.get('stop_reason'))!r}]\n{text or ''}"
    raw_repeat = result.get("repeat")
    status = result.get("status")
    return _Repeat(
        repeat=raw_repeat if isinstance(raw_repeat, int) and not isinstance(raw_repeat, bool) else 0,
        status=status if status in ("pass", "fail", "skipped") else "error",  # unknown: never a pass
        outcome=_outcome(result),
        text=_clip(str(text), MAX_SYSTEM_OUT) if text else None,
        seconds=seconds,
        order=order,
        result=result,
    )


def classname_part(value: Any) -> str:
    """An id as one part of a ``classname``: each ``.`` written as ``_``, so the one ``.`` separates target and dataset."""
    text = "" if value is None else str(value)
    return text.replace(".", "_") if "." in text else text


def _flat(value: Any) -> str:
    """``value`` on one line (runs of whitespace, newlines included, become one space), XML-safe."""
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable() and "  " not in text:  # the common case
        return text
    return xml_safe(" ".join(text.split()))


def _prose(label: str, value: Any) -> str:
    """``label: value``, XML-safe, the value clipped and its further lines indented so each header line starts with a label."""
    text = _clip(str(value).strip(), MAX_NOTE)
    if "\n" in text or "\r" in text:
        text = "\n  ".join(text.splitlines())
    return f"{label}: {xml_safe(text)}"


def _about(result: CellResult) -> str:
    """What a test case's <system-out> opens with: where the case is and how it is filed (none of it is its identity).

    Already XML-safe, piece by piece: the whole (several lines) would miss
    :func:`xml_safe`'s fast path.
    """
    lines = []
    source = result.get("case_source")
    if source:
        lines.append(f"source: {_flat(source)}")
    lines.append(f"category: {_flat(result.get('category') or 'general')}")
    difficulty = result.get("difficulty")
    if difficulty:
        lines.append(f"difficulty: {_flat(difficulty)}")
    tags = result.get("tags")
    if isinstance(tags, list) and tags:
        lines.append("tags: " + ", ".join(_flat(t) for t in tags))
    for key in ("description", "notes"):
        value = result.get(key)
        if value:
            lines.append(_prose(key, value))
    review = result.get("review")
    if isinstance(review, dict):  # a reviewer's mark (reviews.jsonl): the testcase's outcome is its verdict
        said = f"reviewed: {review.get('verdict')} (the run said {review.get('original_status')}) by {review.get('reviewer')} at {review.get('at')}"
        if review.get("score") is not None:
            said += f"; score {review['score']:g} (the run's: {review.get('original_score')})"
        lines.append(_flat(said))
        if review.get("comment"):
            lines.append(_prose("review comment", review["comment"]))
    return "\n".join(lines)


def _file_line(source: Any) -> dict[str, str]:
    """The ``file``/``line`` attributes of the extended flavour, from the case's ``file:line``."""
    if not source or not isinstance(source, str):
        return {}
    match = _SOURCE_LINE.match(source)
    return {"file": match.group(1), "line": match.group(2)} if match else {"file": source}


def _rerun(tag: str, rep: _Repeat) -> ET.Element:
    """A <flakyFailure>/<flakyError>/<rerunFailure>/<rerunError> for one repeat (the XSD's rerunType)."""
    outcome = rep.outcome
    default_type = "AssertionFailed" if rep.status == "fail" else "TargetError"
    message = outcome.get("message", "") if outcome is not None else ""
    el = _new(
        tag,
        {
            "message": xml_safe(f"repeat {rep.repeat}: {message}"),
            "type": (outcome.get("type") if outcome is not None else None) or default_type,
        },
    )
    if outcome is not None and outcome.text:
        el.append(_element("stackTrace", {}, outcome.text))
    if rep.text:
        el.append(_element("system-out", {}, rep.text))
    return el


def _repeats_testcase(name: str, classname: str, reps: list[_Repeat], rule: str, *, flavor: str = "standard") -> tuple[ET.Element, str]:
    """One <testcase> for a case's repeats, and its status by ``rule``.

    A single run is written as it is. With repeats: a passing case carries a
    <flakyFailure>/<flakyError> per repeat that did not pass; a failing (or
    erroring) case carries one <failure> (or <error>) — the first such
    repeat's, its message prefixed with the k/N count and the rule — plus a
    <rerunFailure>/<rerunError> per other repeat that did not pass; a case
    whose every repeat was inconclusive is <skipped>. <system-out> lists
    every repeat's outcome, then the output text of the deciding repeat,
    after :func:`_about` (the case's source, category, tags...).
    """
    reps = sorted(reps, key=lambda r: (r.repeat, r.order))
    attrs: dict[str, str] = {"name": name, "classname": classname, "time": _fmt_time(sum(r.seconds for r in reps))}
    if flavor == "extended":
        attrs.update(_file_line(reps[0].result.get("case_source")))
    case = _element("testcase", attrs)
    about = _about(reps[0].result)
    if len(reps) == 1:
        only = reps[0]
        if only.outcome is not None:
            case.append(only.outcome)
        case.append(_new("system-out", {}, f"{about}\n\n{xml_safe(only.text)}" if only.text else about))
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
    case.append(_new("system-out", {}, about + "\n\n" + xml_safe(_clip("\n".join(lines), MAX_SYSTEM_OUT))))
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


# ---------------------------------------------------------------- writing


@dataclass
class _Passed:
    """``passes="summary"``: the passing cases of one (target, dataset), counted and timed, their ids spooled (never a list)."""

    classname: str
    ids: Spool  # one escaped id a line
    pending: list[str] = field(default_factory=list)  # ids not yet in ``ids``: at most PENDING_IDS
    cases: int = 0
    seconds: float = 0.0
    listed: int = 0  # bytes of ids written to ``ids``; past MAX_PASSED_IDS the rest are only counted
    listed_cases: int = 0
    repeats: bool = False  # some case had more than one repeat
    flaky: int = 0
    notes: Spool | None = None  # the flaky cases, one a line (made on the first)
    noted: int = 0  # bytes written to ``notes``
    noted_cases: int = 0


@dataclass
class _Suite:
    """One target's <testsuite>: its counts and its <testcase> elements, already rendered, in a spool."""

    name: str
    body: Spool
    tests: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"failures": 0, "errors": 0, "skipped": 0})
    seconds: float = 0.0
    passed: dict[str, _Passed] = field(default_factory=dict)  # classname -> its passes (``summary`` only)


class _Disorder(Exception):
    """The results are not in matrix order: stream them again through the in-memory sort."""


_COUNT_OF = {"fail": "failures", "error": "errors", "skipped": "skipped"}
_CASE_INDENT = "\n" + INDENT * 2
_CHILD_INDENT = "\n" + INDENT * 3
_CASE_END = "\n" + INDENT * 2 + "</testcase>"


def _attr(value: str, *, ident: bool = True) -> str:
    """An attribute value as :func:`_element` + :func:`_rendered` write it (for the parts written as text: headers, summaries)."""
    return _escape_attrib(xml_safe(value, ident=ident))


class _SuiteWriter:
    """Renders whole test cases, in the order given, into one spool per target.

    ``passes="summary"`` keeps every case that does not pass as it is and
    folds the passing ones into one ``<testcase>`` per (target, dataset),
    written at the top of its suite (:meth:`write`).
    """

    def __init__(self, rule: str, spool_dir: Path, flavor: str = "standard", passes: str = "all") -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"unknown JUnit flavor {flavor!r} (one of {', '.join(FLAVORS)})")
        if passes not in PASSES:
            raise ValueError(f"unknown junit passes {passes!r} (one of {', '.join(PASSES)})")
        self.rule = rule
        self.spool_dir = spool_dir
        self.flavor = flavor
        self.summary = passes == "summary"
        self.suites: dict[str, _Suite] = {}
        self.classnames: dict[tuple[str, str], str] = {}  # (target, dataset) -> its classname, as written
        self.escaped: dict[str, str] = {}  # classname -> its attribute text
        self.taken: set[str] = set()  # classnames written (as XML-safe text)
        self.reserved: set[tuple[str, str]] = set()  # ``summary``: (classname, name) of cases in full named "passed cases..."

    def classname(self, target: str, dataset: str, *, strict: bool = False) -> str:
        """The classname of ``(target, dataset)``: unique in the file; a clash of written forms gets ``~2``, ``~3``...

        ``strict`` (the streaming path) raises :class:`_Disorder` on a clash
        instead, so the in-memory sort decides who gets the plain name, in the
        same order whichever path wrote the file.
        """
        key = (target, dataset)
        known = self.classnames.get(key)
        if known is not None:
            return known
        base = classname_part(target) + ("." + classname_part(dataset) if dataset else "")
        name, n = base, 1
        while xml_safe(name, ident=True) in self.taken:
            if strict:
                raise _Disorder
            n += 1
            name = f"{base}~{n}"
        self.taken.add(xml_safe(name, ident=True))
        self.classnames[key] = name
        self.escaped[name] = _attr(name)
        return name

    def suite(self, target: str) -> _Suite:
        suite = self.suites.get(target)
        if suite is None:
            body = Spool(max_size=SPOOL_BYTES, batch=PENDING_CHARS, dir=self.spool_dir)
            suite = self.suites[target] = _Suite(target, body)
        return suite

    def case(self, suite: _Suite, key: tuple[str, str, str], reps: list[_Repeat], *, strict: bool = False) -> None:
        """Render the test case ``key`` (target, dataset, case id) from its repeats into ``suite``."""
        classname = self.classname(key[0], key[1], strict=strict)
        if self.summary:
            tally = Tally()
            for rep in reps:
                tally.add(rep.status)
            if case_status(tally, self.rule) == "pass":
                passed = self.add_pass(suite, classname, key[2], sum(r.seconds for r in reps))
                if len(reps) > 1:
                    self._add_repeats_pass(passed, key[2], reps, tally)
                return
            self._reserve(classname, key[2])
        element, status = _repeats_testcase(key[2], classname, reps, self.rule, flavor=self.flavor)
        if status != "pass":
            suite.counts[_COUNT_OF[status]] += 1
        suite.tests += 1
        suite.body.write(_CASE_INDENT + _rendered(element, 2))

    def single(self, suite: _Suite, classname: str, case_id: str, result: CellResult, seconds: float) -> None:
        """:meth:`case` for a case of one cell, rendered straight from its result: the same bytes, a few times faster.

        Worth keeping (issue 29, bench/RESULTS.md "Fast paths retired or kept"): through :meth:`case`
        (an ElementTree element per case) writing junit.xml for 20,000 one-cell cases takes 0.49 s
        CPU instead of 0.24, 12 µs a cell: ~10 % of a cell of issue 16's million-cell workload.
        """
        status = result.get("status")
        if status == "pass":
            if self.summary:
                self.add_pass(suite, classname, case_id, seconds)
                return
        else:
            if self.summary:
                self._reserve(classname, case_id)
            suite.counts[_COUNT_OF.get(status, "errors")] += 1  # unknown: an error, never a pass
        suite.tests += 1
        output = result.get("output")
        text = output.get("text") if type(output) is dict else None
        if "turns" in result:  # a conversation: the transcript, briefly
            text = _transcript(result.get("turns"), text)
        if result.get("truncated") is True:
            text = f"[truncated: the answer was cut off at the token limit, stop_reason {str(result.get('stop_reason'))!r}]\n{text or ''}"
        about = _about(result)
        body = f"{about}\n\n{xml_safe(_clip(str(text), MAX_SYSTEM_OUT))}" if text else about
        extra = ""
        if self.flavor == "extended":
            extra = "".join(f' {k}="{_attr(v, ident=False)}"' for k, v in _file_line(result.get("case_source")).items())
        outcome = ""
        if status != "pass":
            element = _outcome(result)
            assert element is not None
            outcome = _CHILD_INDENT + _rendered(element, 3)
        suite.body.write(
            f'{_CASE_INDENT}<testcase name="{_attr(case_id)}" classname="{self.escaped[classname]}" time="{seconds:.3f}"{extra}>'
            f"{outcome}{_CHILD_INDENT}<system-out>{_escape_text(body)}</system-out>{_CASE_END}"
        )

    def add_pass(self, suite: _Suite, classname: str, case_id: str, seconds: float) -> _Passed:
        """Fold a passing case into its (target, dataset)'s summary testcase: its id on a line of the spool (the hot path)."""
        passed = suite.passed.get(classname)
        if passed is None:
            ids = Spool(max_size=ID_SPOOL_BYTES, batch=PENDING_CHARS, dir=self.spool_dir)
            passed = suite.passed[classname] = _Passed(classname, ids)
            suite.tests += 1
        passed.cases += 1
        passed.seconds += seconds
        if case_id.isascii() and case_id.isprintable():  # the common case: xml_safe leaves it alone
            line = _escape_text(case_id) if "&" in case_id or "<" in case_id or ">" in case_id else case_id
            size = len(line) + 1
        else:
            line = _escape_text(xml_safe(case_id, ident=True))
            size = len(line.encode("utf-8", "replace")) + 1
        if passed.listed + size <= MAX_PASSED_IDS:
            pending = passed.pending
            pending.append(line)
            if len(pending) >= PENDING_IDS:
                passed.ids.write("\n".join(pending) + "\n")
                pending.clear()
            passed.listed += size
            passed.listed_cases += 1
        return passed

    def _add_repeats_pass(self, passed: _Passed, case_id: str, reps: list[_Repeat], tally: Tally) -> None:
        """A passing case with repeats: if some did not pass (flaky), a line for the summary testcase's flaky list."""
        passed.repeats = True
        not_passing = [r for r in sorted(reps, key=lambda r: (r.repeat, r.order)) if r.status != "pass"]
        if not not_passing:
            return
        passed.flaky += 1
        note = f"{xml_safe(case_id, ident=True)}: {tally.passed} of {tally.decided} repeats passed; " + ", ".join(
            f"repeat {r.repeat}: {r.status}" for r in not_passing
        )
        note = _escape_text(_clip(note, MAX_MESSAGE)) + "\n"
        size = len(note.encode("utf-8", "replace"))
        if passed.noted + size <= MAX_FLAKY_NOTES:
            if passed.notes is None:
                passed.notes = Spool(max_size=ID_SPOOL_BYTES, batch=PENDING_CHARS, dir=self.spool_dir)
            passed.notes.write(note)
            passed.noted += size
            passed.noted_cases += 1

    def _reserve(self, classname: str, case_id: str) -> None:
        """``summary``: a case written in full whose name looks like a summary testcase's, so that one is named apart."""
        if case_id.startswith("passed cases"):
            self.reserved.add((classname, xml_safe(case_id, ident=True)))

    def _write_passed(self, fh: IO[str], passed: _Passed) -> None:
        """The summary testcase of ``passed``: how many passed, then their ids, one a line (then the flaky ones)."""
        rule = f" by repeat_pass_rule {self.rule}" if passed.repeats else ""
        flaky = f", {passed.flaky} of them flaky (listed after the ids)" if passed.flaky else ""
        # one name whatever the count, so CI keeps the testcase's history from run to run
        name, n = "passed cases", 1
        while (passed.classname, xml_safe(name, ident=True)) in self.reserved:  # a case of that name: keep identities unique
            n += 1
            name = f"passed cases~{n}"
        fh.write(
            f'{_CASE_INDENT}<testcase name="{_attr(name)}" classname="{self.escaped[passed.classname]}"'
            f' time="{passed.seconds:.3f}">{_CHILD_INDENT}<system-out>'
            f"{passed.cases} case{'' if passed.cases == 1 else 's'} passed{rule}{flaky}; their ids, one a line:\n"
        )
        if passed.pending:
            passed.ids.write("\n".join(passed.pending) + "\n")
            passed.pending.clear()
        passed.ids.copy_to(fh)
        unlisted = passed.cases - passed.listed_cases
        if unlisted:
            fh.write(f"… and {unlisted} more, not listed (the list stops at {MAX_PASSED_IDS} bytes; results.jsonl has every case)\n")
        if passed.notes is not None:
            fh.write("\nflaky (passed by the rule, not every repeat passed):\n")
            passed.notes.copy_to(fh)
            if passed.flaky > passed.noted_cases:
                fh.write(f"… and {passed.flaky - passed.noted_cases} more\n")
        fh.write(f"</system-out>{_CASE_END}")

    def close(self) -> None:
        for suite in self.suites.values():
            suite.body.close()
            for passed in suite.passed.values():
                passed.ids.close()
                if passed.notes is not None:
                    passed.notes.close()

    def write(self, fh: IO[str], *, name: str, run_id: str, stamp: str, rule: str, notes: Sequence[tuple[str, str]] = ()) -> None:
        suites = list(self.suites.values())
        root = _element(
            "testsuites",
            {
                "name": name,
                "tests": sum(s.tests for s in suites),
                "failures": sum(s.counts["failures"] for s in suites),
                "errors": sum(s.counts["errors"] for s in suites),
                "time": _fmt_time(sum(s.seconds for s in suites)),
            },
        )
        fh.write("<?xml version='1.0' encoding='utf-8'?>\n")
        if not suites:  # ET.indent leaves a childless root alone: <testsuites ... />
            fh.write(_rendered(root, 0) + "\n")
            return
        fh.write(_rendered(root, 0)[: -len(" />")] + ">")  # "<testsuites ... />": reopen it as a start tag
        for number, suite in enumerate(suites):
            suite_el = _element(
                "testsuite",
                {
                    "name": suite.name,
                    "tests": suite.tests,
                    "failures": suite.counts["failures"],
                    "errors": suite.counts["errors"],
                    "skipped": suite.counts["skipped"],
                    "time": _fmt_time(suite.seconds),
                    "timestamp": stamp,
                },
            )
            if number == 0:  # run-wide: once in the file (the XSD allows no <properties> under <testsuites>)
                properties = _new("properties", {})
                for key, value in notes:  # first: an interrupted run's notice and resume command
                    properties.append(_element("property", {"name": key, "value": value}))
                properties.append(_element("property", {"name": "run_id", "value": run_id}))
                properties.append(_element("property", {"name": "repeat_pass_rule", "value": rule}))
                suite_el.append(properties)
            rendered = "\n" + INDENT + _rendered(suite_el, 1)
            closing = "\n" + INDENT + "</testsuite>"
            if len(suite_el):
                assert rendered.endswith(closing)
                fh.write(rendered[: -len(closing)])
            else:  # "<testsuite ... />": reopen it as a start tag
                fh.write(rendered[: -len(" />")] + ">")
            for passed in suite.passed.values():
                self._write_passed(fh, passed)
            suite.body.copy_to(fh)
            fh.write(closing)
        fh.write("\n</testsuites>\n")


def _order(result: CellResult, arrival: int) -> tuple[float, int]:
    index = result.get("index")
    return (float(index) if isinstance(index, int) else math.inf, arrival)


def _key(result: CellResult) -> tuple[str, str, str]:
    return str(result.get("target") or ""), str(result.get("dataset") or ""), str(result.get("case_id") or "")


class JUnitStream:
    """Folds results given in matrix order into a :class:`_SuiteWriter`, one case at a time.

    Matrix order here: every ``index`` an int, strictly increasing, and each
    (target, dataset, case) group contiguous — a finished run's
    ``results.jsonl``. Then a case is complete as soon as the next one starts,
    and first appearance is the order the in-memory sort would give.
    :meth:`add` raises :class:`_Disorder` on the first result that breaks it.
    """

    def __init__(self, writer: _SuiteWriter) -> None:
        self.writer = writer
        self.summary = writer.summary
        self.last = -1
        self.current: tuple[str, str, str] | None = None
        self.cells: list[CellResult] = []  # the current case's
        self.seconds = 0.0  # the last cell's (the case's, for a case of one cell)
        self.pair: tuple[str, str] | None = None  # the current case's (target, dataset), its classname and suite
        self.classname = ""
        self.suite: _Suite | None = None
        # the groups met, by hash (two keys with one hash read as one group: the slower path, never a wrong file);
        # a group seen again after another means disorder
        self.groups: set[int] = set()

    def add(self, result: CellResult) -> None:
        index = result.get("index")
        if type(index) is not int or index <= self.last:
            raise _Disorder
        self.last = index
        target, dataset, case_id = result.get("target"), result.get("dataset"), result.get("case_id")
        key = (
            target if type(target) is str else str(target or ""),
            dataset if type(dataset) is str else str(dataset or ""),
            case_id if type(case_id) is str else str(case_id or ""),
        )
        if key == self.current:
            self.cells.append(result)
        else:
            cells = self.cells
            if cells:
                if self.summary and len(cells) == 1 and cells[0].get("status") == "pass" and self.suite and self.current:
                    self.writer.add_pass(self.suite, self.classname, self.current[2], self.seconds)  # the hot path of a huge suite
                else:
                    self._flush()
            group = hash(key)
            if group in self.groups:
                raise _Disorder
            self.groups.add(group)
            self.current = key
            self.cells = [result]
            pair = self.pair
            if pair is None or pair[0] != key[0] or pair[1] != key[1]:
                # a clash of classnames: the in-memory sort names them
                self.classname = self.writer.classname(key[0], key[1], strict=True)
                self.suite = self.writer.suite(key[0])
                self.pair = (key[0], key[1])
        latency = result.get("latency_ms")
        seconds = latency / 1000.0 if type(latency) is float and 0.0 <= latency < math.inf else _seconds(latency)
        self.seconds = seconds
        self.suite.seconds += seconds  # type: ignore[union-attr]  # set with self.pair

    def offer(self, result: CellResult) -> bool:
        """:meth:`add`, saying False instead of raising once the results are out of matrix order."""
        try:
            self.add(result)
        except _Disorder:
            return False
        return True

    def _flush(self) -> None:
        """Write the current case (complete: the next one started, or the results ended)."""
        cells, key, suite = self.cells, self.current, self.suite
        if not cells or key is None or suite is None:
            return
        if len(cells) == 1:
            result = cells[0]
            if self.summary and result.get("status") == "pass":
                self.writer.add_pass(suite, self.classname, key[2], self.seconds)
            else:
                self.writer.single(suite, self.classname, key[2], result, self.seconds)
        else:  # indexes are unique here: (index, 0) orders the repeats as (index, arrival) would
            reps = [_repeat(r, _seconds(r.get("latency_ms")), (float(r.get("index") or 0), 0)) for r in cells]
            self.writer.case(suite, key, reps)
        self.cells = []

    @classmethod
    def start(cls, repeat_pass_rule: str, spool_dir: Path, *, flavor: str = "standard", passes: str = "all") -> JUnitStream:
        """A stream whose suites spool in ``spool_dir``; :meth:`close` it when done (``passes``: :data:`PASSES`)."""
        if repeat_pass_rule not in RULES:
            raise ValueError(f"unknown repeat_pass_rule {repeat_pass_rule!r} (one of {', '.join(RULES)})")
        return cls(_SuiteWriter(repeat_pass_rule, spool_dir, flavor, passes))

    def close(self) -> None:
        self.writer.close()

    def finish(
        self,
        path: Path,
        *,
        name: str,
        run_id: str,
        timestamp: str | None = None,
        repeat_pass_rule: str = DEFAULT_RULE,
        notes: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Write the file (atomically) from what was added (``notes``: run-wide properties written first)."""
        self._flush()
        _write_file(
            self.writer, Path(path), name=name, run_id=run_id, stamp=timestamp or _timestamp(run_id), rule=repeat_pass_rule, notes=notes
        )


def _stream(results: Iterable[CellResult], writer: _SuiteWriter) -> None:
    stream = JUnitStream(writer)
    for result in results:
        stream.add(result)
    stream._flush()


def _external_sort(results: Iterable[CellResult], spool_dir: Path) -> Generator[CellResult, None, None]:
    """``results`` in matrix order (``index``, then arrival) in flat memory: sorted :data:`SORT_CHUNK` at a time, spilled, merged.

    Each chunk waits in a temporary file in ``spool_dir`` as JSON lines; the
    merge reads one line of each at a time. What :func:`_stream` then makes of
    them is what :func:`_sorted` would (a group is contiguous in matrix order).
    """
    files: list[IO[str]] = []
    try:
        chunk: list[tuple[float, int, str]] = []
        for arrival, result in enumerate(results):
            index = result.get("index")
            chunk.append((float(index) if type(index) is int else math.inf, arrival, json.dumps(result)))
            if len(chunk) >= SORT_CHUNK:
                files.append(_spill(chunk, spool_dir))
                chunk = []
        chunk.sort()
        if files:
            if chunk:
                files.append(_spill(chunk, spool_dir))
                chunk = []
            merged: Iterable[tuple[float, int, str]] = heapq.merge(*(_spilled(fh) for fh in files))
        else:
            merged = chunk
        for _, _, line in merged:
            yield json.loads(line)
    finally:
        for fh in files:
            fh.close()


def _spill(chunk: list[tuple[float, int, str]], spool_dir: Path) -> IO[str]:
    """A sorted chunk in a temporary file: ``index<TAB>arrival<TAB>json`` lines (JSON escapes its own tabs and newlines)."""
    chunk.sort()
    fh = tempfile.TemporaryFile(mode="w+", encoding="utf-8", newline="\n", dir=spool_dir)
    fh.writelines(f"{index!r}\t{arrival}\t{line}\n" for index, arrival, line in chunk)
    fh.seek(0)
    return fh


def _spilled(fh: IO[str]) -> Iterator[tuple[float, int, str]]:
    for line in fh:
        index, arrival, text = line.split("\t", 2)
        yield float(index), int(arrival), text


def _sorted(results: Iterable[CellResult], writer: _SuiteWriter) -> None:
    """Any order: gather every case in memory, then write suites and cases in matrix order (the last resort: see write_junit)."""
    groups: dict[str, dict[tuple[str, str], list[_Repeat]]] = {}
    seconds_of: dict[str, float] = {}
    for arrival, result in enumerate(results):
        target, dataset, case_id = _key(result)
        seconds = _seconds(result.get("latency_ms"))
        seconds_of[target] = seconds_of.get(target, 0.0) + seconds
        groups.setdefault(target, {}).setdefault((dataset, case_id), []).append(_repeat(result, seconds, _order(result, arrival)))

    def first(cases: dict[tuple[str, str], list[_Repeat]]) -> tuple[float, int]:
        return min(r.order for reps in cases.values() for r in reps)

    for target, cases in sorted(groups.items(), key=lambda kv: first(kv[1])):
        suite = writer.suite(target)
        suite.seconds = seconds_of[target]
        for (dataset, case_id), reps in sorted(cases.items(), key=lambda kv: min(r.order for r in kv[1])):
            writer.case(suite, (target, dataset, case_id), reps)


def write_junit(
    results: ResultsSource,
    path: Path,
    *,
    name: str,
    run_id: str,
    timestamp: str | None = None,
    repeat_pass_rule: str = DEFAULT_RULE,
    flavor: str = "standard",
    passes: str = "all",
    notes: Sequence[tuple[str, str]] = (),
) -> None:
    """Write the cells in ``results`` as JUnit XML to ``path`` (atomically).

    ``results`` is a ``results.jsonl`` path (read as a stream; if it is not in
    matrix order — a killed run's — read again and sorted in chunks spilled to
    temporary files, :func:`_external_sort`, so memory stays flat) or the
    result dicts themselves (an iterator is read into a list first, so it can
    be gone through again; out of order, sorted in memory). One
    ``<testsuite>`` per target, one ``<testcase>`` per case of that target —
    its repeats folded in, passing or failing by ``repeat_pass_rule``
    (``all``, ``majority`` or ``any``; a run records it in summary.json, so
    re-rendering a stored run passes that value). Suites and cases come out in
    matrix order (each result's ``index``), so the file diffs cleanly between
    runs even when results arrived in completion order. ``flavor``
    ``extended`` adds ``file``/``line`` attributes to each testcase (outside
    junit-10.xsd; :data:`FLAVORS`). ``passes`` ``summary`` writes every case
    that did not pass as ``all`` does and, for each target and dataset, one
    ``<testcase>`` named ``passed cases`` whose ``<system-out>`` lists
    the passing ids, one a line (:data:`PASSES`; for huge suites). ``notes``
    are run-wide properties written before ``run_id`` (an interrupted run's
    ``interrupted`` and ``resume``: :func:`run_notes`).
    """
    if passes not in PASSES:
        raise ValueError(f"unknown junit passes {passes!r} (one of {', '.join(PASSES)})")
    if flavor not in FLAVORS:
        raise ValueError(f"unknown JUnit flavor {flavor!r} (one of {', '.join(FLAVORS)})")
    if repeat_pass_rule not in RULES:
        raise ValueError(f"unknown repeat_pass_rule {repeat_pass_rule!r} (one of {', '.join(RULES)})")
    if isinstance(results, (str, os.PathLike)):
        from evalx.results.store import read_results

        source = Path(results)

        def again() -> Iterable[CellResult]:
            return (r for r in read_results(source) if isinstance(r, dict))
    else:
        items = results if isinstance(results, (list, tuple)) else list(results)

        def again() -> Iterable[CellResult]:
            return items

    stamp = timestamp or _timestamp(run_id)
    path = Path(path)
    with writing(path):  # a full disk or a read-only folder: an error naming the file, not a traceback
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = _SuiteWriter(repeat_pass_rule, path.parent, flavor, passes)
        try:
            try:
                _stream(again(), writer)
            except _Disorder:
                writer.close()
                writer = _SuiteWriter(repeat_pass_rule, path.parent, flavor, passes)
                if isinstance(results, (str, os.PathLike)):  # a file: sorted in flat memory, unless even sorted it will not stream
                    try:
                        sorted_results = _external_sort(again(), path.parent)
                        try:
                            _stream(sorted_results, writer)
                        finally:
                            sorted_results.close()
                    except _Disorder:
                        writer.close()
                        writer = _SuiteWriter(repeat_pass_rule, path.parent, flavor, passes)
                        _sorted(again(), writer)
                else:
                    _sorted(again(), writer)
            _write_file(writer, path, name=name, run_id=run_id, stamp=stamp, rule=repeat_pass_rule, notes=notes)
        finally:
            writer.close()


def run_notes(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run-wide properties that come first: ``interrupted`` (``INTERRUPTED: N of M planned cells``) and ``resume``."""
    stopped = interruption(summary)
    if stopped is None:
        return []
    return [("interrupted", stopped[0]), ("resume", stopped[1].removeprefix("resume: "))]


def _write_file(
    writer: _SuiteWriter, path: Path, *, name: str, run_id: str, stamp: str, rule: str, notes: Sequence[tuple[str, str]] = ()
) -> None:
    # written beside the target and renamed: CI never reads a half-written file
    with atomic_write(path, errors="xmlcharrefreplace", newline="\n") as fh:
        writer.write(fh, name=name, run_id=run_id, stamp=stamp, rule=rule, notes=notes)
