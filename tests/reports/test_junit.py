"""JUnit XML: valid against the Jenkins xUnit junit-10 schema, whatever the model said."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from evalx.reports import write_junit, xml_safe

RUN_ID = "20261126-101500-a1b2c3"


def _xsd_path() -> Path | None:
    override = os.environ.get("EVALX_JUNIT_XSD")
    candidates = [Path(override)] if override else []
    # /work/shared sits next to the repository checkout (/work/main)
    candidates.append(Path(__file__).resolve().parents[3] / "shared/conformance/junit-10.xsd")
    # a copy ships with the tests so a checkout without shared/ still validates
    candidates.append(Path(__file__).resolve().parents[1] / "data/junit-10.xsd")
    return next((p for p in candidates if p.is_file()), None)


@pytest.fixture(scope="module")
def schema() -> Any:
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema is needed to validate JUnit output (pip install xmlschema)")
    path = _xsd_path()
    if path is None:
        pytest.skip(
            "junit-10.xsd not found: expected ../shared/conformance/junit-10.xsd beside the repository, "
            "or set EVALX_JUNIT_XSD=/path/to/junit-10.xsd"
        )
    return xmlschema.XMLSchema(str(path))


def result(
    case_id: str,
    status: str = "pass",
    *,
    target: str = "rules",
    repeat: int = 0,
    index: int = 0,
    text: str = "an answer",
    latency_ms: float | None = 12.5,
    assertions: list[dict[str, Any]] | None = None,
    error: str | None = None,
    traceback: str | None = None,
    category: str | None = "billing",
) -> dict[str, Any]:
    if assertions is None:
        passed = {"pass": True, "fail": False, "skipped": None, "error": None}[status]
        assertions = [
            {
                "type": "contains",
                "name": None,
                "passed": passed,
                "score": 1.0 if passed else 0.0,
                "reason": f"reason for {case_id}",
                "weight": 1.0,
            }
        ]
    return {
        "version": 1,
        "run_id": RUN_ID,
        "index": index,
        "target": target,
        "dataset": "golden",
        "case_id": case_id,
        "repeat": repeat,
        "category": category,
        "difficulty": "easy",
        "tags": [],
        "case_source": "golden.jsonl:1",
        "input": "q",
        "expected": "a",
        "status": status,
        "assertions": assertions,
        "score": 1.0 if status == "pass" else 0.0,
        "output": {
            "text": text,
            "tool_calls": [],
            "usage": {"input_tokens": 3, "output_tokens": 4, "cache_hit_tokens": 0},
            "error": error,
            "traceback": traceback,
        },
        "latency_ms": latency_ms,
        "ttft_ms": None,
        "cost_usd": None,
        "judge_cost_usd": None,
        "cached": False,
        "error": error,
        "traceback": traceback,
    }


HOSTILE = "\x1b[31mred\x1b[0m NUL\x00 bell\x07 ]]> <script>alert('x')</script> &amp; \"q\" lone\ud800surrogate \ufffe\uffff tab\tok é 🎉"


def mixed_results() -> list[dict[str, Any]]:
    return [
        result("refund-policy", "pass", index=0),
        result(
            "wrong-refund",
            "fail",
            index=1,
            assertions=[
                {"type": "completed", "name": None, "passed": True, "score": 1.0, "reason": "ok", "weight": 1.0},
                {"type": "contains", "name": None, "passed": False, "score": 0.0, "reason": "expected 'refund'", "weight": 1.0},
                {"type": "regex", "name": "order-id", "passed": False, "score": 0.0, "reason": "no match for \\d+", "weight": 1.0},
            ],
        ),
        result(
            "crash",
            "error",
            index=2,
            error="TargetTimeout: no answer within 120s",
            traceback="Traceback (most recent call last):\n  boom\nTargetTimeout: no answer within 120s",
        ),
        result(
            "needs-judge",
            "skipped",
            index=3,
            assertions=[{"type": "llm_judge", "name": None, "passed": None, "score": 0.0, "reason": "no judge configured", "weight": 1.0}],
        ),
        result(
            "hostile",
            "fail",
            index=4,
            text=HOSTILE,
            assertions=[{"type": "equals", "name": HOSTILE, "passed": False, "score": 0.0, "reason": HOSTILE, "weight": 1.0}],
            category=HOSTILE,
        ),
        result("refund-policy", "pass", target="mini", index=5, latency_ms=0.01),  # 1e-05 seconds
        result("refund-policy", "fail", target="mini", index=6, repeat=1, latency_ms=None),
    ]


def write(tmp_path: Path, results: list[dict[str, Any]], **kw: Any) -> tuple[Path, ET.Element]:
    path = tmp_path / "out" / "junit.xml"
    write_junit(results, path, name=kw.pop("name", "support-agent"), run_id=RUN_ID, **kw)
    return path, ET.parse(path).getroot()


def test_valid_against_schema(tmp_path: Path, schema: Any) -> None:
    path, _ = write(tmp_path, mixed_results())
    schema.validate(str(path))


def test_hostile_output_is_escaped_and_valid(tmp_path: Path, schema: Any) -> None:
    hostile = result("x" + HOSTILE, "error", error="Boom" + HOSTILE, traceback=HOSTILE, text=HOSTILE, category=HOSTILE, target=HOSTILE)
    path, root = write(tmp_path, [hostile], name=HOSTILE)
    schema.validate(str(path))
    raw = path.read_bytes()
    assert b"\x1b" not in raw and b"\x00" not in raw
    assert b"<script>" not in raw  # escaped as text, never markup
    case = root.find("testsuite/testcase")
    assert case is not None
    out = case.findtext("system-out")
    assert out is not None
    assert "#x1B[31mred" in out and "NUL#x00" in out and "bell#x07" in out
    assert "lone#xD800surrogate" in out and "#xFFFE#xFFFF" in out
    assert "]]> <script>alert('x')</script>" in out  # round-trips exactly as text
    assert "tab\tok é 🎉" in out  # legal characters are left alone
    assert root.get("name", "").startswith("#x1B[31mred")
    assert case.get("name", "").startswith("x#x1B")


def test_tests_equals_testcase_count(tmp_path: Path) -> None:
    _, root = write(tmp_path, mixed_results())
    cases = root.findall("testsuite/testcase")
    # 8 cells, 7 cases: mini's refund-policy ran twice and is one testcase
    assert root.get("tests") == str(len(cases)) == "6"
    for suite in root.findall("testsuite"):
        assert suite.get("tests") == str(len(suite.findall("testcase")))


def test_one_suite_per_target_in_matrix_order(tmp_path: Path) -> None:
    _, root = write(tmp_path, mixed_results())
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["rules", "mini"]
    rules = suites[0]
    assert rules.get("failures") == "2" and rules.get("errors") == "1" and rules.get("skipped") == "1"
    assert root.get("failures") == "3" and root.get("errors") == "1"
    assert root.get("skipped") is None  # the xUnit XSD has no such attribute on <testsuites>
    prop = rules.find("properties/property")
    assert prop is not None and prop.get("name") == "run_id" and prop.get("value") == RUN_ID
    assert suites[1].find("properties") is None  # run-wide properties once in the file (xunitparser: no repeated name)
    assert rules.get("timestamp") == "2026-11-26T10:15:00"  # the run id's start time


def test_completion_order_input_is_written_in_matrix_order(tmp_path: Path) -> None:
    results = mixed_results()
    _, in_order = write(tmp_path, results)
    _, shuffled = write(tmp_path, list(reversed(results)))
    assert ET.tostring(in_order) == ET.tostring(shuffled)


def test_statuses_map_to_elements(tmp_path: Path) -> None:
    _, root = write(tmp_path, mixed_results())
    by_name = {c.get("name"): c for c in root.find("testsuite[@name='rules']").findall("testcase")}  # type: ignore[union-attr]
    assert [child.tag for child in by_name["refund-policy"]] == ["system-out"]

    failure = by_name["wrong-refund"].find("failure")
    assert failure is not None
    assert failure.get("type") == "AssertionFailed"
    assert failure.get("message") == "expected 'refund'"
    assert failure.text == "contains: expected 'refund'\nregex (order-id): no match for \\d+"
    assert by_name["wrong-refund"].find("error") is None

    error = by_name["crash"].find("error")
    assert error is not None and by_name["crash"].find("failure") is None
    assert error.get("message") == "TargetTimeout: no answer within 120s"
    assert error.get("type") == "TargetTimeout"
    assert (error.text or "").startswith("Traceback (most recent call last):")

    skipped = by_name["needs-judge"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "llm_judge: no judge configured"


def test_error_without_traceback_uses_the_message(tmp_path: Path) -> None:
    _, root = write(tmp_path, [result("c", "error", error="connection refused")])
    error = root.find(".//error")
    assert error is not None
    assert error.get("type") == "TargetError" and error.text == "connection refused"


def test_unknown_status_is_an_error_not_a_pass(tmp_path: Path) -> None:
    _, root = write(tmp_path, [result("c", "pass") | {"status": "weird"}])
    assert root.get("errors") == "1"
    assert root.find(".//error") is not None


def test_failure_without_a_failing_assertion(tmp_path: Path) -> None:
    r = result("c", "fail", assertions=[]) | {"score": 0.4}
    _, root = write(tmp_path, [r])
    failure = root.find(".//failure")
    assert failure is not None and failure.get("message") == "score 0.400 is below the case threshold"


def test_classname_and_repeat_names(tmp_path: Path) -> None:
    _, root = write(tmp_path, mixed_results())
    mini = root.find("testsuite[@name='mini']")
    assert mini is not None
    # refund-policy ran twice against mini: one testcase, its repeats folded in
    # (1 of 2 passed: not a majority, so it fails — with the count in the message)
    assert [c.get("name") for c in mini.findall("testcase")] == ["refund-policy"]
    failure = mini.find("testcase/failure")
    assert failure is not None and failure.get("message", "").startswith("1 of 2 repeats passed (repeat_pass_rule: majority); repeat 1: ")
    # ... and once against rules, with the same bare name
    assert root.find("testsuite[@name='rules']/testcase").get("name") == "refund-policy"  # type: ignore[union-attr]
    # the identity is <target>.<dataset>; the category is in system-out, not in the classname (issue 15)
    assert {c.get("classname") for c in mini.findall("testcase")} == {"mini.golden"}
    assert {c.get("classname") for c in root.findall("testsuite[@name='rules']/testcase")} == {"rules.golden"}
    missing_category = result("c", category=None)
    _, root = write(tmp_path, [missing_category])
    assert root.find(".//testcase").get("classname") == "rules.golden"  # type: ignore[union-attr]
    assert "\ncategory: general\n" in (root.findtext(".//system-out") or "")


def test_times_are_plain_decimals(tmp_path: Path, schema: Any) -> None:
    tiny = result("tiny", latency_ms=0.01)  # 1e-05 s: str() would say "1e-05"
    huge = result("huge", latency_ms=1234567.891, index=1)
    broken = result("nan", latency_ms=float("nan"), index=2)
    negative = result("neg", latency_ms=-5.0, index=3)
    path, root = write(tmp_path, [tiny, huge, broken, negative])
    schema.validate(str(path))
    times = [c.get("time") for c in root.iter("testcase")]
    assert times == ["0.000", "1234.568", "0.000", "0.000"]
    assert root.get("time") == "1234.568"
    every_time = [el.get("time") for el in root.iter() if el.get("time") is not None]
    assert len(every_time) == 6  # 4 test cases, 1 suite, the root
    assert all(re.fullmatch(r"\d+\.\d{3}", t or "") for t in every_time)


def test_system_out_is_truncated(tmp_path: Path) -> None:
    _, root = write(tmp_path, [result("long", text="x" * 25_000)])
    out = root.findtext(".//system-out")
    assert out is not None
    about, text = out.split("\n\n", 1)  # the case's source, category... then the output text
    assert about.startswith("source: golden.jsonl:1\ncategory: billing")
    assert text.startswith("x" * 10_000) and text.endswith("[15000 more characters]")
    assert len(text) < 10_100


def test_no_output_text_system_out_is_the_case_only(tmp_path: Path) -> None:
    r = result("c", text="")
    _, root = write(tmp_path, [r | {"output": None}, result("d", text="", index=1)])
    outs = [c.findtext("system-out") for c in root.iter("testcase")]
    assert outs == ["source: golden.jsonl:1\ncategory: billing\ndifficulty: easy"] * 2


def test_empty_run_is_valid(tmp_path: Path, schema: Any) -> None:
    path, root = write(tmp_path, [])
    schema.validate(str(path))
    assert root.get("tests") == "0" and root.findall("testsuite") == []


def test_explicit_timestamp_and_generator_input(tmp_path: Path, schema: Any) -> None:
    path, root = write(tmp_path, (r for r in mixed_results()), timestamp="2026-01-02T03:04:05")
    schema.validate(str(path))
    assert {s.get("timestamp") for s in root.findall("testsuite")} == {"2026-01-02T03:04:05"}


def test_write_replaces_atomically(tmp_path: Path) -> None:
    path, _ = write(tmp_path, mixed_results())
    path.write_text("stale")
    write(tmp_path, [result("only")])
    assert ET.parse(path).getroot().get("tests") == "1"
    assert [p.name for p in path.parent.iterdir()] == ["junit.xml"]  # no temp file left


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("\x1b[0m", "#x1B[0m"),
        ("a\x00b", "a#x00b"),
        ("\x0b\x0c", "#x0B#x0C"),
        ("\ud83d", "#xD83D"),
        ("\uffff", "#xFFFF"),
        ("ok\t\n\r", "ok\t\n\r"),
        (None, ""),
        (3, "3"),
    ],
)
def test_xml_safe(raw: Any, escaped: str) -> None:
    assert xml_safe(raw) == escaped


def test_grading_error_is_an_error_naming_the_assertion(tmp_path: Path, schema: Any) -> None:
    broken = {"type": "llm_judge", "name": None, "passed": None, "score": 0.0, "reason": "", "weight": 1.0, "error": "unreadable verdict"}
    path = tmp_path / "junit.xml"
    write_junit([result("a", "error", assertions=[broken])], path, name="n", run_id=RUN_ID)
    schema.validate(str(path))
    error = ET.parse(path).find(".//error")
    assert error is not None and error.get("type") == "GradingError"
    assert error.get("message") == "llm_judge: could not be evaluated: unreadable verdict"
