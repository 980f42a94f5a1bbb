"""Review marks (reviews.jsonl): applied when a run is read, counted by summaries, gates, JUnit and the HTML report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_project import run_cli, write_config
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.results.reviews import REVIEWS, add_mark, load_marks
from evalx.results.store import RESULTS, read_results, rewrite_results

DATA = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A bot that echoes its input: case a passes, case b fails (it expects what the bot never says)."""
    (tmp_path / "bot.py").write_text("def answer(q):\n    return q\n")
    return write_config(
        tmp_path,
        "targets: [{id: bot, type: python, callable: bot.py:answer}]\n",
        """
        datasets:
          - id: d
            cases:
              - {id: a, input: alpha, assert: [{type: contains, value: alpha}]}
              - {id: b, input: beta, assert: [{type: contains, value: gamma}]}
        """,
    )


def statuses(run_dir: Path) -> dict[str, str]:
    return {c["case_id"]: c["status"] for c in read_cells(run_dir)}


def report(run_dir: Path) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    res = CliRunner().invoke(main, ["report", str(run_dir)])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, res.output, json.loads((run_dir / "summary.json").read_text())


def test_marks_apply_latest_wins_and_reports_count_them(project: Path) -> None:
    code, _, run = run_cli(project)
    assert code == 1 and statuses(run) == {"a": "pass", "b": "fail"}
    add_mark(run, target="bot", dataset="d", case_id="b", verdict="pass", comment="gamma is fine here", reviewer="ana")
    add_mark(run, target="bot", dataset="d", case_id="a", verdict="fail", comment="first look", reviewer="ana")
    add_mark(run, target="bot", dataset="d", case_id="a", verdict="pass", comment="on second look fine", reviewer="bo")
    cells = {c["case_id"]: c for c in read_cells(run)}
    assert cells["b"]["status"] == "pass"
    assert cells["b"]["review"] == {
        "verdict": "pass",
        "comment": "gamma is fine here",
        "reviewer": "ana",
        "at": cells["b"]["review"]["at"],
        "original_status": "fail",
    }
    assert cells["a"]["status"] == "pass" and cells["a"]["review"]["reviewer"] == "bo"  # the latest mark wins
    # the results file itself is untouched: marks live in reviews.jsonl only
    assert "review" not in (run / RESULTS).read_text() and all("review" not in c for c in read_results(run / RESULTS, raw=True))

    code, out, summary = report(run)
    assert code == 0, out
    assert summary["totals"]["pass"] == 2 and summary["totals"]["pass_rate"] == 1.0
    assert summary["reviews"] == {"reviewed_cells": 2, "overridden_cells": 1, "marks": 3}
    text = (run / "summary.txt").read_text()
    assert "2 cells reviewed, 1 overridden" in text
    html = (run / "report.html").read_text()
    assert "2 cells reviewed, 1 overridden" in html and '"rv":["pass","fail","ana"' in html


def test_junit_shows_reviewed_fail_and_stays_valid(project: Path) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    _, _, run = run_cli(project)
    add_mark(run, target="bot", dataset="d", case_id="a", verdict="fail", comment="alpha is the wrong answer", reviewer="ana")
    code, _, summary = report(run)
    assert code == 0 and summary["totals"]["fail"] == 2
    reasons = {f["case_id"]: f["reason"] for f in summary["failures"]}
    assert reasons["a"] == "reviewed as fail by ana: alpha is the wrong answer"  # the summary's failure list says why
    xml = (run / "junit.xml").read_text()
    xmlschema.XMLSchema(str(DATA)).validate(run / "junit.xml")
    case_a = next(tc for tc in ET.fromstring(xml).iter("testcase") if tc.get("name") == "a")
    failure = case_a.find("failure")
    assert failure is not None and failure.get("type") == "ReviewedFail"
    assert failure.get("message") == "reviewed as fail by ana: alpha is the wrong answer"
    out = case_a.findtext("system-out") or ""
    assert "reviewed: fail (the run said pass) by ana" in out and "review comment: alpha is the wrong answer" in out


def test_a_mark_for_one_repeat_and_for_every_repeat(project: Path) -> None:
    _, _, run = run_cli(project, "--repeat", "3")
    add_mark(run, target="bot", dataset="d", case_id="b", verdict="pass", reviewer="ana")  # every repeat
    add_mark(run, target="bot", dataset="d", case_id="b", repeat=1, verdict="fail", reviewer="ana")  # then repeat 1 again
    b = sorted((c["repeat"], c["status"]) for c in read_cells(run) if c["case_id"] == "b")
    assert b == [(0, "pass"), (1, "fail"), (2, "pass")]
    _, _, summary = report(run)
    assert summary["reviews"]["reviewed_cells"] == 3 and summary["reviews"]["overridden_cells"] == 2


def test_damaged_lines_warn_and_are_skipped(project: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, _, run = run_cli(project)
    add_mark(run, target="bot", dataset="d", case_id="b", verdict="pass", reviewer="ana")
    with open(run / REVIEWS, "a", encoding="utf-8") as f:
        f.write("{not json\n")
        f.write(json.dumps({"target": "bot", "dataset": "d", "case_id": "a", "verdict": "maybe"}) + "\n")
        f.write("[1, 2]\n")
        f.write('{"target": "bot", "dataset": "d", "case_id": "a", "verdict": "fa')  # torn by a kill
    marks = load_marks(run)
    assert marks.count == 1 and marks.bad_lines == [2, 3, 4, 5]
    assert "4 unreadable review line(s) skipped (line 2, 3, 4, 5)" in caplog.text
    assert statuses(run) == {"a": "pass", "b": "pass"}
    res = CliRunner().invoke(main, ["report", str(run)])
    assert res.exit_code == 0 and "Traceback" not in res.output


def test_add_mark_refuses_bad_verdicts(project: Path) -> None:
    from evalx.errors import EvalxError

    _, _, run = run_cli(project)
    with pytest.raises(EvalxError, match="use pass or fail"):
        add_mark(run, target="bot", dataset="d", case_id="a", verdict="maybe")
    with pytest.raises(EvalxError, match="not a run directory"):
        add_mark(run.parent, target="bot", dataset="d", case_id="a", verdict="pass")


def test_a_rewrite_never_bakes_marks_into_results(project: Path) -> None:
    _, _, run = run_cli(project)
    add_mark(run, target="bot", dataset="d", case_id="b", verdict="pass", reviewer="ana")
    rewrite_results(run / RESULTS, read_results(run / RESULTS))  # read with the mark, written back
    raw = {c["case_id"]: c["status"] for c in read_results(run / RESULTS, raw=True)}
    assert raw == {"a": "pass", "b": "fail"} and "review" not in (run / RESULTS).read_text()


GATED = """
gates:
  no_new_failures: true
"""


def test_baseline_gates_read_the_baseline_with_its_marks(project: Path) -> None:
    project.write_text(project.read_text() + GATED)
    _, _, first = run_cli(project)
    code, out, _ = run_cli(project, "--baseline", str(first))
    assert code == 0, out  # b failed in both runs: nothing new
    # a reviewer says b was right in the baseline: b failing now is a new failure
    add_mark(first, target="bot", dataset="d", case_id="b", verdict="pass", comment="fine", reviewer="ana")
    code, out, second = run_cli(project, "--baseline", str(first))
    assert code == 1 and "no_new_failures" in out and "BREACHED" in out, out
    gates = {r["gate"]: r for r in json.loads((second / "summary.json").read_text())["gates"]["results"]}
    assert gates["no_new_failures"]["held"] is False and gates["no_new_failures"]["value"] == 1
    # the marks stay with their run: the new run's own b is a plain failure
    assert statuses(second)["b"] == "fail" and not (second / REVIEWS).exists()


def test_compare_uses_marks_newer_than_the_stored_summary(project: Path) -> None:
    _, _, first = run_cli(project)
    _, _, second = run_cli(project)
    add_mark(second, target="bot", dataset="d", case_id="b", verdict="pass", reviewer="ana")  # summary.json not rewritten
    res = CliRunner().invoke(main, ["compare", str(first), str(second), "--json"])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.output[res.output.index("{") :])
    assert cmp["overall"]["pass_rate"]["b"] == 1.0 and cmp["newly_passing_total"] == 1


def test_capture_reviewed_failing_cell(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, run = run_cli(project)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["capture", str(run), "--case", "a", "--reviewed", "--out", "cases"])
    assert res.exit_code == 2 and "reviewed as failing" in res.output, res.output
    add_mark(run, target="bot", dataset="d", case_id="a", verdict="fail", comment="should say the Greek letter's meaning", reviewer="ana")
    res = CliRunner().invoke(main, ["capture", str(run), "--case", "a", "--reviewed", "--out", "cases"])
    assert res.exit_code == 0, res.output
    written = list((tmp_path / "cases").glob("*.yaml"))
    assert len(written) == 1
    text = written[0].read_text()
    assert "alpha" in text and "reviewed by ana: should say the Greek letter's meaning (the run said pass)" in text
