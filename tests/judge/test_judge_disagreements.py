"""Judge vs function: a deterministic check and a judge check that share a ``name:`` and disagree are listed to read by hand."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.reports.pairwise import disagreement_lines, markdown_disagreements
from evalx.results.preferences import MAX_DISAGREEMENTS, Disagreements

AGENT = """\
ANSWERS = {
    "refund": "You can get a refund within 30 days.",
    "window": "Refunds are possible for a month after purchase.",
    "none": "Please contact support.",
    "broken": "Refunds: 30 days.",
}

def answer(q):
    return ANSWERS[q]
"""

# the judge thinks an answer mentions the refund window when it says "30 days" or "a month";
# it cannot read the output of the "broken" case
JUDGE = """\
import json

def judge(prompt, case):
    output = case["metadata"]["judge"]["output"]
    if output.startswith("Refunds: 30"):
        return "Hmm."
    ok = "30 days" in output or "a month" in output
    return json.dumps({"pass": ok, "reason": "mentions the window" if ok else "no refund window"})
"""

CASES = [
    {"id": "agree-pass", "input": "refund"},
    {"id": "disagree", "input": "window"},
    {"id": "agree-fail", "input": "none"},
    {"id": "judge-error", "input": "broken"},
]


def project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "agent.py").write_text(AGENT)
    (root / "judges.py").write_text(JUDGE)
    (root / "cases.json").write_text(json.dumps(CASES))
    (root / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            defaults: {targets: [bot], retries: 0}
            targets:
              - {id: bot, type: python, callable: agent.py:answer}
              - {id: referee, type: python, callable: judges.py:judge}
            datasets:
              - {id: d, path: cases.json}
            assert:
              - {type: icontains, value: 30 days, name: refund window}
              - {type: llm_judge, rubric: states the refund window, name: refund window}
              - {type: icontains, value: refund, name: unrelated}
            judge: {target: referee}
            """
        )
    )
    return root


def test_disagreeing_named_checks_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p")
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["run", "-v", "--markdown", str(tmp_path / "summary.md")])
    assert "Traceback" not in res.output, res.output
    (run_dir,) = list((root / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    block = summary["judge_disagreements"]
    # agree-pass and agree-fail agree; judge-error has no judge verdict; "unrelated" has no judge side
    assert block["checked"] == 3 and block["total"] == 1
    (row,) = block["rows"]
    assert (row["target"], row["dataset"], row["case_id"], row["name"]) == ("bot", "d", "disagree", "refund window")
    assert (row["function"], row["judge"]) == (False, True)
    assert row["function_types"] == ["icontains"] and row["judge_types"] == ["llm_judge"]
    text = (run_dir / "summary.txt").read_text()
    assert "Judge vs function (1 of 3 checks sharing a name disagree — read these by hand):" in text
    assert "bot d/disagree refund window: function failed, judge passed" in text
    assert "Judge vs function" in res.output
    markdown = (tmp_path / "summary.md").read_text()
    assert "**Judge vs function**" in markdown and "| bot | d/disagree | refund window | fail | pass |" in markdown
    html = (run_dir / "report.html").read_text()
    assert 'id="judge-vs-function"' in html and "d/disagree" in html

    # evalx report rebuilds the list from the stored cells
    (run_dir / "summary.json").unlink()
    assert CliRunner().invoke(main, ["report", str(run_dir)]).exit_code in (0, 1)
    assert json.loads((run_dir / "summary.json").read_text())["judge_disagreements"] == block


def _cell(index: int, assertions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"index": index, "target": "t", "dataset": "d", "case_id": f"c{index}", "repeat": 0, "assertions": assertions}


def _function(passed: bool | None, name: str = "n") -> dict[str, Any]:
    return {"type": "contains", "name": name, "passed": passed, "reason": "f"}


def _judge(passed: bool | None, name: str = "n", error: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "llm_judge", "name": name, "passed": passed, "reason": "j", "details": {"judge": "referee"}}
    if error:
        out["error"] = error
    return out


def test_inconclusive_and_errors_are_not_disagreements() -> None:
    d = Disagreements()
    cells = [
        _cell(0, [_function(True), _judge(None, error="judge error: unreadable")]),
        _cell(1, [_function(False), {"type": "llm_judge", "name": "n", "passed": None, "reason": "no judge configured"}]),
        _cell(2, [_function(None), _judge(False)]),
        _cell(3, [_function(True), _judge(True, name="other")]),  # different names: not linked
        _cell(4, [_function(True), _function(False), _judge(False)]),  # all functions of the name must pass: agree
        _cell(5, [_function(False), _judge(True)]),
    ]
    for cell in cells:
        d.add(cell, cell["assertions"])
    figures = d.figures()
    assert figures["checked"] == 2 and figures["total"] == 1
    assert [r["case_id"] for r in figures["rows"]] == ["c5"]


def test_the_list_is_capped_in_matrix_order_and_the_text_says_how_many_more() -> None:
    d = Disagreements()
    for index in reversed(range(MAX_DISAGREEMENTS + 30)):  # arriving out of order
        cell = _cell(index, [_function(True), _judge(False)])
        d.add(cell, cell["assertions"])
    figures = d.figures()
    assert figures["total"] == MAX_DISAGREEMENTS + 30
    assert [r["case_id"] for r in figures["rows"]] == [f"c{i}" for i in range(MAX_DISAGREEMENTS)]
    text = "\n".join(disagreement_lines(figures))
    assert f"… and {MAX_DISAGREEMENTS + 20} more (summary.json)" in text
    assert text.count("function passed, judge failed") == 10
    assert f"… and {MAX_DISAGREEMENTS + 20} more in summary.json" in "\n".join(markdown_disagreements(figures))
