"""Issue 15, JUnit that CI tools can tell apart: `<target>.<dataset>` / `<case>` identities, read by the real parsers.

Every file is produced through the CLI (`evalx run`, `evalx report`) against a
Python target written into the test's project and the fake OpenAI-compatible
server (tests/_fake_llm.py) on 127.0.0.1; each is read by junitparser,
xunitparser and junit2html and validated against junit-10.xsd.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import junitparser
import pytest
import xunitparser
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner, Result
from junit2htmlreport import parser as junit2html_parser
from junit2htmlreport.matrix import ReportMatrix
from results_file import read_cells

from evalx.cli import main

BOT = """\
import threading

_calls = {}
_lock = threading.Lock()


def answer(question, case):
    # `wobbly` passes on its first call only: 1 of 3 repeats (a failing case with reruns), 1 of 1 without repeats
    with _lock:
        n = _calls.get(case["id"], 0)
        _calls[case["id"]] = n + 1
    if case["id"] == "wobbly":
        return "yes" if n % 3 == 0 else "no"
    if case["id"] == "steady-ish":  # fails on its first call only: 2 of 3 repeats pass (flaky, passing)
        return "no" if n % 3 == 0 else "yes"
    return "You can request a refund within 30 days." if "refund" in question else "The answer is 4."
"""

CASES = """\
{"id": "refund", "input": "How long for a refund?", "category": "billing", "tags": ["policy", "refund"], "description": "Refund window\\nas the policy says", "notes": "from ticket 42", "assert": [{"type": "contains", "value": "30 days"}]}
{"id": "math", "input": "What is 2 + 2?", "category": "basics", "assert": [{"type": "contains", "value": "4"}]}
{"id": "wrong", "input": "What is 2 + 2?", "category": "basics", "assert": [{"type": "contains", "value": "five"}]}
"""

WOBBLY = """\
{"id": "wobbly", "input": "coin", "category": "odd", "assert": [{"type": "equals", "value": "yes"}]}
{"id": "steady-ish", "input": "coin", "category": "odd", "assert": [{"type": "equals", "value": "yes"}]}
"""


def project(root: Path, server: FakeLLMServer, *, cases: str = CASES, targets: str = "[rules.v2, mini]") -> Path:
    """Targets with and without dots in their ids, two datasets (one dotted), a provider for the matrix."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "bot.py").write_text(BOT, encoding="utf-8")
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "golden.v1.jsonl").write_text(cases, encoding="utf-8")
    (root / "data" / "wobbly.jsonl").write_text(WOBBLY, encoding="utf-8")
    (root / "evalconfig.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: identity
            defaults: {{targets: {targets}, concurrency: 2, retries: 0}}
            targets:
              - {{id: rules.v2, type: python, callable: bot.py:answer}}
              - {{id: rules_v2, type: python, callable: bot.py:answer}}
              - id: mini
                type: provider
                provider: openai
                model: local-model
                base_url: {server.url}/v1
                api_key: {OPENAI_KEY}
                params: {{temperature: 0}}
                prompt: "{{{{ case.input }}}}"
            matrix:
              targets: [rules.v2, mini]
              params:
                temperature: [0, 0.7]
            datasets:
              - {{id: golden.v1, path: data/golden.v1.jsonl}}
              - {{id: wobbly, path: data/wobbly.jsonl, targets: [rules.v2, rules_v2]}}
            """
        ),
        encoding="utf-8",
    )
    return root


def evalx(root: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.chdir(root)
    return CliRunner().invoke(main, list(args))


def latest_run(root: Path) -> Path:
    """The run started last (two runs in the same second: run.json's ``started_unix`` orders them)."""
    return max((root / "runs").iterdir(), key=lambda p: json.loads((p / "run.json").read_text())["started_unix"])


def identities(path: Path) -> list[tuple[str, str]]:
    return [(c.get("classname", ""), c.get("name", "")) for c in ET.parse(path).getroot().iter("testcase")]


def read_by_every_parser(path: Path, schema: Any) -> dict[tuple[str, str], str]:
    """Validate ``path`` and read it with junitparser, xunitparser and junit2html; (classname, name) -> outcome.

    The three must agree on the identities and each must find them unique.
    """
    if schema is not None:
        schema.validate(str(path))
    ids = identities(path)
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]

    # junitparser (GitLab, many GitHub actions)
    outcomes: dict[tuple[str, str], str] = {}
    for suite in junitparser.JUnitXml.fromfile(str(path)):
        for case in suite:
            kind = "pass" if case.is_passed else "skipped" if case.is_skipped else type(case.result[0]).__name__.lower()
            outcomes[(case.classname, case.name)] = kind
    assert sorted(outcomes) == sorted(ids)

    # xunitparser: checks the root's totals, and merges every suite's properties into one dict
    with open(path, encoding="utf-8") as fh:
        suite, result = xunitparser.parse(fh)
    tests = list(suite)
    assert sorted((t.classname, t.methodname) for t in tests) == sorted(ids)
    assert len(result.failures) == sum(1 for o in outcomes.values() if o == "failure")
    assert len(result.errors) == sum(1 for o in outcomes.values() if o == "error")

    # junit2html: the report, and the matrix that keys cases on (classname, name)
    report = junit2html_parser.Junit(str(path))
    assert "<html" in report.html()
    matrix = ReportMatrix()
    matrix.add_report(str(path))
    keyed = [(classname, name) for classname, cases in matrix.cases.items() for name in cases]
    assert sorted(keyed) == sorted(ids)
    return outcomes


def system_out(path: Path, classname: str, name: str) -> str:
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.get("classname") == classname and case.get("name") == name:
            return case.findtext("system-out") or ""
    raise AssertionError(f"no testcase {classname} / {name}")


# -- single target, multi-target, matrix, repeats ---------------------------------------------


def test_single_target(tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    root = project(tmp_path / "p", server, targets="[rules.v2]")
    res = evalx(root, monkeypatch, "run", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output  # `wrong` fails
    outcomes = read_by_every_parser(root / "ci" / "junit.xml", junit_schema)
    assert outcomes == {
        ("rules_v2.golden_v1", "refund"): "pass",
        ("rules_v2.golden_v1", "math"): "pass",
        ("rules_v2.golden_v1", "wrong"): "failure",
        ("rules_v2.wobbly", "wobbly"): "pass",
        ("rules_v2.wobbly", "steady-ish"): "failure",
    }
    root_el = ET.parse(root / "ci" / "junit.xml").getroot()
    (suite,) = root_el.findall("testsuite")
    assert suite.get("name") == "rules.v2"  # the suite keeps the id as it is
    assert [p.get("name") for p in suite.iter("property")] == ["run_id", "repeat_pass_rule"]


def test_multi_target_has_one_identity_per_case_and_target(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any
) -> None:
    root = project(tmp_path / "p", server)
    res = evalx(root, monkeypatch, "run", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output
    path = root / "ci" / "junit.xml"
    outcomes = read_by_every_parser(path, junit_schema)
    assert outcomes[("rules_v2.golden_v1", "refund")] == outcomes[("mini.golden_v1", "refund")] == "pass"
    assert {c for c, _ in outcomes} == {"rules_v2.golden_v1", "rules_v2.wobbly", "mini.golden_v1"}
    # the run-wide properties are in the file once: xunitparser merges every suite's into one dict and refuses a repeat
    root_el = ET.parse(path).getroot()
    assert [p.get("name") for p in root_el.iter("property")] == ["run_id", "repeat_pass_rule"]
    with open(path, encoding="utf-8") as fh:
        suite, _ = xunitparser.parse(fh)
    assert suite.properties == {"run_id": latest_run(root).name, "repeat_pass_rule": "majority"}


def test_matrix_variants_are_told_apart(tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    root = project(tmp_path / "p", server)
    res = evalx(root, monkeypatch, "run", "--matrix", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output
    path = root / "ci" / "junit.xml"
    outcomes = read_by_every_parser(path, junit_schema)
    suites = [s.get("name") for s in ET.parse(path).getroot().findall("testsuite")]
    assert suites == ["rules.v2", "mini[temperature=0]", "mini[temperature=0.7]"]
    # `temperature=0.7`'s dot is written as `_`: the one `.` separates variant and dataset
    assert {c for c, _ in outcomes} == {
        "rules_v2.golden_v1",
        "rules_v2.wobbly",
        "mini[temperature=0].golden_v1",
        "mini[temperature=0_7].golden_v1",
    }
    assert outcomes[("mini[temperature=0].golden_v1", "refund")] == "pass"
    assert outcomes[("mini[temperature=0_7].golden_v1", "refund")] == "pass"
    # junit2html's console matrix: one row per (classname, name), not the variants merged into one
    shown = subprocess.run(
        [sys.executable, "-m", "junit2htmlreport", "--summary-matrix", str(path)], capture_output=True, text=True, check=False
    ).stdout
    assert shown.count("refund") == 3 and "mini[temperature=0_7].golden_v1" in shown, shown


def test_repeats_fold_into_one_testcase(tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    root = project(tmp_path / "p", server, targets="[rules.v2, mini]")
    res = evalx(root, monkeypatch, "run", "--repeat", "3", "--no-cache", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output
    path = root / "ci" / "junit.xml"
    outcomes = read_by_every_parser(path, junit_schema)
    assert len(outcomes) == 3 + 3 + 2  # one testcase per case and target, whatever the repeat count
    assert outcomes[("rules_v2.wobbly", "wobbly")] == "failure"  # 1 of 3: fails by majority, its reruns listed
    assert outcomes[("rules_v2.wobbly", "steady-ish")] == "pass"  # 2 of 3: passes, flaky
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(path).getroot().iter("testcase")}
    assert [e.tag for e in cases[("rules_v2.wobbly", "wobbly")]] == ["failure", "rerunFailure", "system-out"]
    assert [e.tag for e in cases[("rules_v2.wobbly", "steady-ish")]] == ["flakyFailure", "system-out"]
    results = read_cells(latest_run(root))
    assert len(results) == 3 * 8


# -- what leaves the identity, and where it goes --------------------------------------------


def test_system_out_names_the_case(tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p", server, targets="[rules.v2]")
    evalx(root, monkeypatch, "run")
    run_dir = latest_run(root)
    out = system_out(run_dir / "junit.xml", "rules_v2.golden_v1", "refund")
    assert out == (
        "source: data/golden.v1.jsonl:1\n"
        "category: billing\n"
        "tags: policy, refund\n"
        "description: Refund window\n"
        "  as the policy says\n"
        "notes: from ticket 42\n"
        "\n"
        "You can request a refund within 30 days."
    )
    assert system_out(run_dir / "junit.xml", "rules_v2.golden_v1", "wrong").startswith(
        "source: data/golden.v1.jsonl:3\ncategory: basics\n\n"
    )
    # description and notes are carried in results.jsonl, only when the case has them
    results = {r["case_id"]: r for r in read_cells(run_dir)}
    assert results["refund"]["description"] == "Refund window\nas the policy says" and results["refund"]["notes"] == "from ticket 42"
    assert "description" not in results["math"] and "notes" not in results["math"]


def test_a_recategorised_case_keeps_its_identity(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any
) -> None:
    root = project(tmp_path / "p", server)
    evalx(root, monkeypatch, "run")
    before = identities(latest_run(root) / "junit.xml")
    # new category, new tags, a case inserted above (every line moves): no identity changes
    edited = CASES.replace('"category": "billing", "tags": ["policy", "refund"]', '"category": "payments", "tags": ["money"]')
    edited = '{"id": "new", "input": "hi", "category": "basics", "assert": [{"type": "contains", "value": "4"}]}\n' + edited
    (root / "data" / "golden.v1.jsonl").write_text(edited, encoding="utf-8")
    evalx(root, monkeypatch, "run")
    after_path = latest_run(root) / "junit.xml"
    read_by_every_parser(after_path, junit_schema)
    after = identities(after_path)
    assert set(after) - set(before) == {("rules_v2.golden_v1", "new"), ("mini.golden_v1", "new")}
    assert set(before) <= set(after)
    out = system_out(after_path, "rules_v2.golden_v1", "refund")
    assert out.startswith("source: data/golden.v1.jsonl:2\ncategory: payments\ntags: money\n")


def test_ids_that_clash_once_dots_are_underscores_stay_apart(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any
) -> None:
    root = project(tmp_path / "p", server, targets="[rules.v2, rules_v2]")
    res = evalx(root, monkeypatch, "run", "--junit", "ci/junit.xml")
    assert res.exit_code == 1, res.output
    outcomes = read_by_every_parser(root / "ci" / "junit.xml", junit_schema)
    # `rules.v2` and `rules_v2` are both written `rules_v2`: the second one met gets `~2`
    assert {c for c, _ in outcomes} == {"rules_v2.golden_v1", "rules_v2.wobbly", "rules_v2.golden_v1~2", "rules_v2.wobbly~2"}
    suites = {s.get("name"): {c.get("classname") for c in s.iter("testcase")} for s in ET.parse(root / "ci" / "junit.xml").getroot()}
    assert suites == {"rules.v2": {"rules_v2.golden_v1", "rules_v2.wobbly"}, "rules_v2": {"rules_v2.golden_v1~2", "rules_v2.wobbly~2"}}
    # `evalx report` writes the same file again (the in-memory sort names the clash the same way)
    before = (latest_run(root) / "junit.xml").read_bytes()
    assert evalx(root, monkeypatch, "report", "latest").exit_code == 0
    assert (latest_run(root) / "junit.xml").read_bytes() == before == (root / "ci" / "junit.xml").read_bytes()


# -- the extended flavour ---------------------------------------------------------------------


def test_extended_flavor_adds_file_and_line(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, junit_schema: Any
) -> None:
    root = project(tmp_path / "p", server)
    res = evalx(root, monkeypatch, "run", "--junit", "ci/junit.xml", "--junit-flavor", "extended")
    assert res.exit_code == 1, res.output
    extended = root / "ci" / "junit.xml"
    outcomes = read_by_every_parser(extended, None)  # outside junit-10.xsd by design; the parsers still read it
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(extended).getroot().iter("testcase")}
    assert cases[("mini.golden_v1", "wrong")].get("file") == "data/golden.v1.jsonl"
    assert cases[("mini.golden_v1", "wrong")].get("line") == "3"
    assert all(c.get("file") and c.get("line") for c in cases.values())
    # the run folder's own junit.xml stays standard (valid), with the same identities and outcomes
    standard = latest_run(root) / "junit.xml"
    assert read_by_every_parser(standard, junit_schema) == outcomes
    assert all(c.get("file") is None for c in ET.parse(standard).getroot().iter("testcase"))
    with pytest.raises(Exception, match="file"):
        junit_schema.validate(str(extended))
    # `evalx report` writes it the same way; without --junit the flavour is a usage error
    again = root / "ci" / "again.xml"
    assert evalx(root, monkeypatch, "report", "latest", "--junit", str(again), "--junit-flavor", "extended").exit_code == 0
    assert again.read_bytes() == extended.read_bytes()
    res = evalx(root, monkeypatch, "run", "--junit-flavor", "extended")
    assert res.exit_code == 2 and "--junit-flavor extended applies to the file --junit writes" in res.output


# -- the default project ----------------------------------------------------------------------


def test_default_config_is_read_by_every_parser(example_project: Path, monkeypatch: pytest.MonkeyPatch, junit_schema: Any) -> None:
    res = evalx(example_project, monkeypatch, "run", "--junit", "ci/junit.xml")
    assert res.exit_code in (0, 1), res.output
    outcomes = read_by_every_parser(example_project / "ci" / "junit.xml", junit_schema)
    assert {c.split(".")[0] for c, _ in outcomes} == {"support-bot", "support-bot-v2"}
