"""Issue 16, JUnit for huge suites: `--junit-passes summary` through the CLI, read by the real parsers.

Every file comes from `evalx run` / `evalx report` on a project written into
the test's folder: two Python targets, two datasets, cases that pass, fail,
error (the target raises) and are skipped (an `llm_judge` with no judge),
and a case that passes on two of three repeats. Each file is validated
against junit-10.xsd and read by junitparser, xunitparser and junit2html.
"""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import junitparser
import pytest
import xunitparser
from click.testing import CliRunner, Result
from junit2htmlreport import parser as junit2html_parser

import evalx.reports.junit as junit
from evalx.cli import main
from evalx.reports.junit import write_junit

#: a run id with its start time in it: the files' timestamp comes from it, not from the clock (two writes a second apart would differ)
RUN_ID = "20261126-120000-abc123"

AGENT = """\
import threading

_calls = {}
_lock = threading.Lock()


def answer(text, case):
    with _lock:
        n = _calls.get(case["id"], 0)
        _calls[case["id"]] = n + 1
    if case["id"].startswith("crash"):
        raise RuntimeError("the model server went away")
    if case["id"] == "flaky":  # passes but on its first call: 2 of 3 repeats
        return "no" if n == 0 else "yes"
    return "yes"
"""


def _cases(prefix: str, passing: int) -> str:
    lines = [{"id": f"{prefix}-ok-{i}", "input": "q", "assert": [{"type": "contains", "value": "yes"}]} for i in range(passing)]
    lines += [
        {"id": f"{prefix}-wrong", "input": "q", "assert": [{"type": "contains", "value": "no such words"}]},
        {"id": f"crash-{prefix}", "input": "q", "assert": [{"type": "contains", "value": "yes"}]},
        {"id": f"{prefix}-judged", "input": "q", "assert": [{"type": "llm_judge", "rubric": "is it polite?"}]},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def project(root: Path) -> Path:
    """Targets `bot.v1` (a dot: written `bot_v1` in classnames) and `bot2`; datasets `alpha` (with `flaky`) and `beta.v2`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(AGENT, encoding="utf-8")
    (root / "alpha.jsonl").write_text(
        _cases("a", 4) + json.dumps({"id": "flaky", "input": "q", "assert": [{"type": "equals", "value": "yes"}]}) + "\n",
        encoding="utf-8",
    )
    (root / "beta.jsonl").write_text(_cases("b", 3), encoding="utf-8")
    (root / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: huge
            defaults: {concurrency: 1, retries: 0}
            targets:
              - {id: bot.v1, type: python, callable: agent.py:answer}
              - {id: bot2, type: python, callable: agent.py:answer}
            datasets:
              - {id: alpha, path: alpha.jsonl, targets: [bot.v1]}
              - {id: beta.v2, path: beta.jsonl}
            """
        ),
        encoding="utf-8",
    )
    return root


def evalx(root: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.chdir(root)
    return CliRunner().invoke(main, list(args))


def only_run(root: Path) -> Path:
    (run,) = (root / "runs").iterdir()
    return run


def read_by_every_parser(path: Path, schema: Any) -> dict[tuple[str, str], str]:
    """Validate ``path``; junitparser, xunitparser and junit2html must agree on its testcases and counts."""
    schema.validate(str(path))
    root = ET.parse(path).getroot()
    ids = [(c.get("classname", ""), c.get("name", "")) for c in root.iter("testcase")]
    assert len(ids) == len(set(ids))
    assert root.get("tests") == str(len(ids))  # `tests` counts testcases
    for suite in root.findall("testsuite"):
        assert suite.get("tests") == str(len(suite.findall("testcase")))

    outcomes: dict[tuple[str, str], str] = {}
    for suite in junitparser.JUnitXml.fromfile(str(path)):
        for case in suite:
            kind = "pass" if case.is_passed else "skipped" if case.is_skipped else type(case.result[0]).__name__.lower()
            outcomes[(case.classname, case.name)] = kind
    assert sorted(outcomes) == sorted(ids)

    with open(path, encoding="utf-8") as fh:
        xsuite, result = xunitparser.parse(fh)
    assert sorted((t.classname, t.methodname) for t in xsuite) == sorted(ids)
    assert result.testsRun == len(ids)
    assert len(result.failures) == sum(1 for o in outcomes.values() if o == "failure") == int(root.get("failures", "-1"))
    assert len(result.errors) == sum(1 for o in outcomes.values() if o == "error") == int(root.get("errors", "-1"))
    assert len(result.skipped) == sum(1 for o in outcomes.values() if o == "skipped")

    report = junit2html_parser.Junit(str(path))
    assert "<html" in report.html()
    assert sum(len(s.all()) for s in report.suites) == len(ids)
    return outcomes


def system_out(path: Path, classname: str, name: str) -> str:
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.get("classname") == classname and case.get("name") == name:
            return case.findtext("system-out") or ""
    raise AssertionError(f"no testcase {classname} / {name}")


def listed_ids(text: str) -> list[str]:
    """The ids a summary testcase lists: the lines after its first, up to a blank line."""
    lines = text.split("\n")[1:]
    return lines[: lines.index("")] if "" in lines else lines


EXPECTED_SUMMARY = {
    ("bot_v1.alpha", "passed cases"): "pass",  # a-ok-0..3 and flaky (2 of 3 repeats)
    ("bot_v1.alpha", "a-wrong"): "failure",
    ("bot_v1.alpha", "crash-a"): "error",
    ("bot_v1.alpha", "a-judged"): "skipped",
    ("bot_v1.beta_v2", "passed cases"): "pass",
    ("bot_v1.beta_v2", "b-wrong"): "failure",
    ("bot_v1.beta_v2", "crash-b"): "error",
    ("bot_v1.beta_v2", "b-judged"): "skipped",
    ("bot2.beta_v2", "passed cases"): "pass",
    ("bot2.beta_v2", "b-wrong"): "failure",
    ("bot2.beta_v2", "crash-b"): "error",
    ("bot2.beta_v2", "b-judged"): "skipped",
}


def test_summary_folds_the_passes_and_keeps_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    root = project(tmp_path / "p")
    res = evalx(root, monkeypatch, "run", "-q", "--repeat", "3", "--junit-passes", "summary", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output
    run = only_run(root)
    ci = root / "ci" / "junit.xml"
    assert ci.read_bytes() == (run / "junit.xml").read_bytes()  # the run's own file follows the option too
    assert read_by_every_parser(ci, junit_schema) == EXPECTED_SUMMARY

    text = system_out(ci, "bot_v1.alpha", "passed cases")
    assert text.startswith("5 cases passed by repeat_pass_rule majority, 1 of them flaky")
    assert listed_ids(text) == ["a-ok-0", "a-ok-1", "a-ok-2", "a-ok-3", "flaky"]  # in dataset order
    assert "\nflaky (passed by the rule, not every repeat passed):\nflaky: 2 of 3 repeats passed; repeat 0: fail\n" in text
    assert listed_ids(system_out(ci, "bot2.beta_v2", "passed cases")) == ["b-ok-0", "b-ok-1", "b-ok-2"]

    # failures, errors and skips are exactly what the full file has
    full = tmp_path / "full.xml"
    res = evalx(root, monkeypatch, "report", str(run), "--junit", str(full))
    assert res.exit_code == 0, res.output
    kept = {(c.get("classname"), c.get("name")): ET.tostring(c) for c in ET.parse(ci).getroot().iter("testcase")}
    for case in ET.parse(full).getroot().iter("testcase"):
        key = (case.get("classname"), case.get("name"))
        if case.find("failure") is not None or case.find("error") is not None or case.find("skipped") is not None:
            assert kept.pop(key) == ET.tostring(case)
    assert all(name.startswith("passed cases") for _, name in kept)

    # time: the summary testcase's is its passes'; the suites' and the root's are unchanged
    full_root, summary_root = ET.parse(full).getroot(), ET.parse(ci).getroot()
    assert summary_root.get("time") == full_root.get("time")
    assert [s.get("time") for s in summary_root.findall("testsuite")] == [s.get("time") for s in full_root.findall("testsuite")]


def test_default_is_every_case_and_report_can_summarise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    root = project(tmp_path / "p")
    res = evalx(root, monkeypatch, "run", "-q", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output
    run = only_run(root)
    default = (run / "junit.xml").read_bytes()
    outcomes = read_by_every_parser(root / "ci" / "junit.xml", junit_schema)
    assert len(outcomes) == 8 + 6 + 6 and not any(name.startswith("passed cases") for _, name in outcomes)
    assert outcomes[("bot_v1.alpha", "a-ok-0")] == "pass"
    # `all` written on purpose is the default, byte for byte
    res = evalx(root, monkeypatch, "report", str(run), "--junit-passes", "all", "--junit", str(tmp_path / "all.xml"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "all.xml").read_bytes() == default == (run / "junit.xml").read_bytes()

    res = evalx(root, monkeypatch, "report", str(run), "--junit-passes", "summary", "--junit", str(tmp_path / "s.xml"))
    assert res.exit_code == 0, res.output
    outcomes = read_by_every_parser(tmp_path / "s.xml", junit_schema)
    assert outcomes[("bot_v1.alpha", "passed cases")] == "pass"
    assert outcomes[("bot_v1.alpha", "flaky")] == "failure"  # no repeats: its one call fails
    assert outcomes[("bot2.beta_v2", "b-wrong")] == "failure"
    assert len(outcomes) == 5 + 4 + 4
    assert system_out(tmp_path / "s.xml", "bot_v1.alpha", "passed cases").startswith("4 cases passed; their ids, one a line:\n")
    assert (run / "junit.xml").read_bytes() == (tmp_path / "s.xml").read_bytes()  # `evalx report` re-renders the run's file too


def test_summary_with_the_extended_flavor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p")
    res = evalx(root, monkeypatch, "run", "-q", "--junit-passes", "summary", "--junit-flavor", "extended", "--junit", "ext.xml")
    assert res.exit_code == 1, res.output
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(root / "ext.xml").getroot().iter("testcase")}
    assert cases[("bot_v1.alpha", "a-wrong")].get("file") == "alpha.jsonl"
    assert cases[("bot_v1.alpha", "a-wrong")].get("line") == "5"
    assert cases[("bot_v1.alpha", "passed cases")].get("file") is None  # many cases: no one file:line
    outcomes = {
        key: "pass" if not list(c.iter("failure")) + list(c.iter("error")) + list(c.iter("skipped")) else "-" for key, c in cases.items()
    }
    assert sorted(k for k, v in outcomes.items() if v == "pass") == [
        ("bot2.beta_v2", "passed cases"),
        ("bot_v1.alpha", "passed cases"),
        ("bot_v1.beta_v2", "passed cases"),
    ]


def test_unknown_value_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p")
    res = evalx(root, monkeypatch, "run", "--junit-passes", "some")
    assert res.exit_code == 2
    assert "'some' is not one of 'all', 'summary'" in res.output
    assert not (root / "runs").exists()


def _passing(n: int, *, target: str = "t", dataset: str = "d") -> list[dict[str, Any]]:
    return [
        {"index": i, "target": target, "dataset": dataset, "case_id": f"case-{i:07d}", "status": "pass", "latency_ms": 2.0}
        for i in range(n)
    ]


def test_summary_of_many_passes_is_small_spooled_and_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    results = _passing(20_000)
    results[7]["status"] = "fail"
    monkeypatch.setattr(junit, "ID_SPOOL_BYTES", 1024)  # the ids go to a temporary file early
    write_junit(results, tmp_path / "s.xml", name="n", run_id=RUN_ID, passes="summary")
    outcomes = read_by_every_parser(tmp_path / "s.xml", junit_schema)
    assert outcomes == {("t.d", "passed cases"): "pass", ("t.d", "case-0000007"): "failure"}
    ids = listed_ids(system_out(tmp_path / "s.xml", "t.d", "passed cases"))
    assert len(ids) == 19_999 and ids[:8] == [f"case-{i:07d}" for i in (0, 1, 2, 3, 4, 5, 6, 8)]
    case = ET.parse(tmp_path / "s.xml").getroot().find("testsuite/testcase")
    assert case is not None and case.get("time") == "39.998"

    # past MAX_PASSED_IDS bytes the ids are counted, not listed (a libxml2 reader refuses a text node over 10 MB)
    monkeypatch.setattr(junit, "MAX_PASSED_IDS", 13 * 100)
    write_junit(results, tmp_path / "capped.xml", name="n", run_id=RUN_ID, passes="summary")
    text = system_out(tmp_path / "capped.xml", "t.d", "passed cases")
    assert len(listed_ids(text)) == 101  # 100 ids and the line that says how many more
    assert text.endswith("… and 19899 more, not listed (the list stops at 1300 bytes; results.jsonl has every case)\n")


def test_summary_from_completion_order_matches_matrix_order(tmp_path: Path) -> None:
    results = _passing(30) + _passing(30, target="u")
    for i, r in enumerate(results):
        r["index"] = i
        if i % 7 == 0:
            r["status"] = "fail"
    write_junit(results, tmp_path / "a.xml", name="n", run_id=RUN_ID, passes="summary")
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in reversed(results)), encoding="utf-8")  # the in-memory sort
    write_junit(lines, tmp_path / "b.xml", name="n", run_id=RUN_ID, passes="summary")
    assert (tmp_path / "a.xml").read_bytes() == (tmp_path / "b.xml").read_bytes()


def _varied(cases: int) -> list[dict[str, Any]]:
    """Two targets, two datasets, three repeats; passes, fails, errors and skips in a fixed pattern."""
    out: list[dict[str, Any]] = []
    for dataset in ("d1", "d2.v"):
        for c in range(cases):
            for target in ("t.a", "t2"):
                for r in range(3):
                    status = ["pass", "pass", "fail", "pass", "error", "skipped", "pass"][(c * 3 + r + len(target)) % 7]
                    out.append(
                        {
                            "index": len(out),
                            "target": target,
                            "dataset": dataset,
                            "case_id": f"c{c}",
                            "repeat": r,
                            "status": status,
                            "latency_ms": 1.5 * (c + r),
                            "error": "ValueError: boom" if status == "error" else None,
                            "assertions": [{"type": "contains", "passed": {"pass": True, "fail": False}.get(status), "reason": "r"}],
                            "output": {"text": f"out {c} {r} é"},
                            "case_source": f"{dataset}.jsonl:{c + 1}",
                        }
                    )
    return out


@pytest.mark.parametrize("passes", ["all", "summary"])
def test_a_file_out_of_order_is_sorted_in_flat_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, passes: str) -> None:
    """A killed run's file (completion order): sorted in chunks spilled to disk, never gathered whole, same bytes."""
    results = _varied(12)
    write_junit(results, tmp_path / "in_order.xml", name="n", run_id=RUN_ID, passes=passes)
    shuffled = results[:]
    import random

    random.Random(16).shuffle(shuffled)
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in shuffled), encoding="utf-8")

    def gathered(*args: Any) -> None:
        raise AssertionError("the in-memory sort was used")

    monkeypatch.setattr(junit, "_sorted", gathered)
    monkeypatch.setattr(junit, "SORT_CHUNK", 10)  # many chunks, merged
    write_junit(lines, tmp_path / "from_file.xml", name="n", run_id=RUN_ID, passes=passes)
    assert (tmp_path / "from_file.xml").read_bytes() == (tmp_path / "in_order.xml").read_bytes()


def test_a_case_met_again_after_another_is_still_one_testcase(tmp_path: Path) -> None:
    """Increasing indexes but a case's cells apart: the stream notices (its table of groups) and the file is sorted."""
    results = [
        {"index": 0, "target": "t", "dataset": "d", "case_id": "a", "repeat": 0, "status": "pass"},
        {"index": 1, "target": "t", "dataset": "d", "case_id": "b", "repeat": 0, "status": "pass"},
        {"index": 2, "target": "t", "dataset": "d", "case_id": "a", "repeat": 1, "status": "fail"},
    ]
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    write_junit(lines, tmp_path / "j.xml", name="n", run_id=RUN_ID, repeat_pass_rule="all")
    cases = list(ET.parse(tmp_path / "j.xml").getroot().iter("testcase"))
    assert [c.get("name") for c in cases] == ["a", "b"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message", "").startswith("1 of 2 repeats passed")


def test_a_failing_case_named_like_the_summary_keeps_identities_unique(tmp_path: Path, junit_schema: Any) -> None:
    results = _passing(3)
    results[2]["case_id"], results[2]["status"] = "passed cases", "fail"
    write_junit(results, tmp_path / "s.xml", name="n", run_id=RUN_ID, passes="summary")
    outcomes = read_by_every_parser(tmp_path / "s.xml", junit_schema)
    assert outcomes == {("t.d", "passed cases~2"): "pass", ("t.d", "passed cases"): "failure"}


def test_report_keeps_the_options_the_run_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`evalx report RUN` re-renders junit.xml and report.html as the run rendered them, unless told otherwise."""
    import json as _json

    from click.testing import CliRunner

    from evalx.cli import main

    (tmp_path / "agent.py").write_text("def echo(text):\n    return 'Hello ' + text\n", encoding="utf-8")
    cases = "".join(
        _json.dumps({"id": f"c{i}", "input": f"hi {i}", "assert": [{"type": "contains", "value": "hi 3" if i == 3 else "Hello"}]}) + "\n"
        for i in range(6)
    )
    (tmp_path / "cases.jsonl").write_text(cases, encoding="utf-8")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nname: keep\ntargets: [{id: t, type: python, callable: agent.py:echo}]\ndatasets: [{id: d, path: cases.jsonl}]\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(main, ["run", "-q", "--junit-passes", "summary", "--html-max-cells", "3"]).exit_code == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    first = (run_dir / "junit.xml").read_bytes()
    assert b'name="passed cases"' in first
    assert _json.loads((run_dir / "run.json").read_text())["reports"] == {"junit_passes": "summary", "html_max_cells": 3}
    assert CliRunner().invoke(main, ["report", str(run_dir)]).exit_code == 0
    assert b'name="passed cases"' in (run_dir / "junit.xml").read_bytes()  # kept
    assert CliRunner().invoke(main, ["report", str(run_dir), "--junit-passes", "all"]).exit_code == 0
    assert b'name="passed cases"' not in (run_dir / "junit.xml").read_bytes()  # told otherwise
