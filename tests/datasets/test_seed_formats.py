"""Seed-format shorthands scored exactly as their own runners define them, through the CLI.

golden_qa (shared/reference/golden-qa-runner.txt): ``exact_match`` is
"normalised string equality (lowercased, whitespace-collapsed)";
``numeric_close`` passes "if any extracted number is within 1 % of the
expected", ignoring year-like values 2020-2029. The TypeScript harness
(eval-harness-and-runners.txt): ``expectedKeywords`` is "a plain includes()
check".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

# the answer to each question is the question's own "say: ..." part, word for word
AGENT = "def answer(question):\n    return question.split('say: ', 1)[1]\n"


def _run(tmp_path: Path, cases: list[dict[str, Any]], name: str) -> dict[str, str]:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / name).write_text(json.dumps(cases), encoding="utf-8")
    (tmp_path / "evalconfig.yaml").write_text(
        f"version: 1\ntargets: [{{id: bot, type: python, callable: agent.py:answer}}]\ndatasets: [{{id: seed, path: {name}}}]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-q", "-c", str(tmp_path / "evalconfig.yaml")])
    assert result.exit_code in (0, 1), result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    rows = read_cells(run_dir)
    return {r["case_id"]: r["status"] for r in rows}


def _qa(case_id: str, said: str, expected: Any, tolerance: str) -> dict[str, Any]:
    return {"id": case_id, "question": f"say: {said}", "expected_answer": expected, "tolerance": tolerance, "notes": "why"}


@pytest.mark.parametrize(
    ("said", "expected", "status"),
    [
        ("order A1 is delivered", "order a1 IS delivered", "pass"),  # lower-cased
        ("  order a1\n is   delivered ", "order a1 is delivered", "pass"),  # whitespace-collapsed
        ("order a1 IS delivered.", "order A1 is delivered", "fail"),  # a final period is not normalised away
        ('"order a1 is delivered"', "order a1 is delivered", "fail"),  # nor are quotes
        ("order a1 is delivered!", "order a1 is delivered!", "pass"),
    ],
)
def test_golden_qa_exact_match_is_lowercased_whitespace_collapsed_equality(tmp_path: Path, said: str, expected: str, status: str) -> None:
    assert _run(tmp_path, [_qa("q", said, expected, "exact_match")], "golden_qa.json") == {"q": status}


@pytest.mark.parametrize(
    ("said", "expected", "status"),
    [
        ("about 101 units", 100, "pass"),  # within 1 %
        ("about 102 units", 100, "fail"),
        ("in 2024 it was 100", 100, "pass"),
        ("in 2024", 2023.5, "fail"),  # year-like values are ignored
        ("it is 2024", 2024, "pass"),  # unless the expected value is one
    ],
)
def test_golden_qa_numeric_close_is_one_percent_ignoring_years(tmp_path: Path, said: str, expected: float, status: str) -> None:
    assert _run(tmp_path, [_qa("q", said, expected, "numeric_close")], "golden_qa.json") == {"q": status}


@pytest.mark.parametrize(
    ("said", "keywords", "status"),
    [
        ("draw a rectangle", ["rect"], "pass"),  # includes(): part of a word counts
        ("label it hello", ["hello", "label"], "pass"),
        ("label it hello", ["Hello"], "fail"),  # includes() is case-sensitive
        ("label it", ["hello"], "fail"),
    ],
)
def test_expected_keywords_is_a_plain_includes(tmp_path: Path, said: str, keywords: list[str], status: str) -> None:
    case = {"id": "k", "input": f"say: {said}", "expectedKeywords": keywords, "expectedOutput": None}
    assert _run(tmp_path, [case], "cases.json") == {"k": status}


@pytest.mark.parametrize(
    ("normalize", "said", "status"),
    [
        (None, ' "Paris." ', "pass"),  # the default: whitespace, punctuation, case
        ("none", "paris", "fail"),
        ("none", "Paris", "pass"),
        ("casefold", "PARIS", "pass"),
        (["whitespace", "punctuation"], " Paris. ", "pass"),
        (["whitespace", "punctuation"], "paris", "fail"),
    ],
)
def test_equals_normalize_picks_the_steps(tmp_path: Path, normalize: Any, said: str, status: str) -> None:
    check: dict[str, Any] = {"type": "equals", "value": "Paris"}
    if normalize is not None:
        check["normalize"] = normalize
    assert _run(tmp_path, [{"id": "e", "input": f"say: {said}", "assert": [check]}], "cases.json") == {"e": status}


def test_an_unknown_normalize_step_is_a_validate_error(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps([{"id": "e", "input": "x", "assert": [{"type": "equals", "normalize": ["upper"]}]}]))
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: agent.py:answer}]\ndatasets: [{id: seed, path: cases.json}]\n"
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(tmp_path / "evalconfig.yaml")])
    assert result.exit_code == 2 and "cases.json:1 cases[0].assert[0].normalize" in result.output, result.output
