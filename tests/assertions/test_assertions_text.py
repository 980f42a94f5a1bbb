"""Text similarity (levenshtein, rouge_l, bleu, chrf) and refusal assertions (issue 19)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from results_file import read_cells

from evalx.assertions import text_metrics
from evalx.assertions.registry import AssertionContext, get_assertion
from evalx.cli import main
from evalx.models import Case, Trajectory, Verdict

REF = "The cat sat on the mat."


def _run(kind: str, text: str, expected: Any = None, **params: Any) -> Verdict:
    spec = get_assertion(kind)
    assert spec is not None
    ctx = AssertionContext(case=Case(id="c", input="q", expected=expected), output=Trajectory(text=text))
    verdict = spec.fn(ctx, **params)
    assert isinstance(verdict, Verdict)
    return verdict


@pytest.mark.parametrize("kind", ["levenshtein", "rouge_l", "bleu", "chrf"])
def test_identical_text_scores_one_and_passes(kind: str) -> None:
    verdict = _run(kind, REF, expected=REF)
    assert verdict.passed is True and verdict.score == 1.0
    assert f"{kind} 1.000 >= threshold" in verdict.reason and repr(REF) in verdict.reason


def test_pinned_scores_on_known_examples() -> None:
    typo = "The cat sat on teh mat."  # a swap: two edits in 23 characters
    assert text_metrics.score("levenshtein", typo, [REF]) == pytest.approx(1 - 2 / 23)
    assert text_metrics.score("levenshtein", "kitten", ["sitting"]) == pytest.approx(1 - 3 / 7)
    # ROUGE-L: LCS "the cat on the mat" = 5 of 6 words each side
    assert text_metrics.rouge_l_f1("the cat is on the mat", REF) == pytest.approx(5 / 6)
    assert text_metrics.rouge_l_f1("", "") == 1.0 and text_metrics.rouge_l_f1("a", "") == 0.0
    # sacrebleu's own figures (sentence_bleu / sentence_chrf, divided by 100)
    assert text_metrics.score("bleu", "The cat is on the mat.", [REF]) == pytest.approx(0.48892, abs=1e-4)
    assert text_metrics.score("chrf", "The cat is on the mat.", [REF]) == pytest.approx(0.64582, abs=1e-4)
    assert text_metrics.score("bleu", "completely different words here", [REF]) < 0.1


def test_a_list_is_several_references_and_the_best_counts() -> None:
    verdict = _run("levenshtein", "yes", expected=["no", "yes"])
    assert verdict.passed is True and verdict.score == 1.0 and "best of 2 references" in verdict.reason


@pytest.mark.parametrize(("kind", "threshold"), [("levenshtein", 0.95), ("rouge_l", 0.9), ("bleu", 0.9), ("chrf", 0.8)])
def test_below_threshold_fails_with_score_threshold_expected_and_found(kind: str, threshold: float) -> None:
    verdict = _run(kind, "The cat is on teh mat.", expected=REF, threshold=threshold)
    assert verdict.passed is False and 0 < verdict.score < threshold
    assert f"< threshold {threshold:g}: expected {REF!r}, found 'The cat is on teh mat.'" in verdict.reason


def test_value_overrides_expected_and_defaults_apply() -> None:
    assert _run("levenshtein", "abc", expected="zzz", value="abc").passed is True
    assert _run("levenshtein", "abcd", expected="abce").passed is False  # 0.75 < 0.8 default
    assert "threshold 0.8" in _run("chrf", REF, expected=REF).reason
    assert "threshold 0.3" in _run("bleu", REF, expected=REF).reason
    assert "threshold 0.5" in _run("rouge_l", REF, expected=REF).reason


@pytest.mark.parametrize("kind", ["levenshtein", "rouge_l", "bleu", "chrf"])
def test_malformed_no_reference_or_bad_threshold_raises(kind: str) -> None:
    with pytest.raises(ValueError, match="needs 'value' or the case's 'expected'"):
        _run(kind, "x")
    with pytest.raises(ValueError, match="threshold must be between 0 and 1"):
        _run(kind, "x", expected="x", threshold=2)


@pytest.mark.parametrize(
    "reply",
    [
        "I'm sorry, but I can't help with that.",
        "I\u2019m sorry, but I can\u2019t help with that.",
        "I cannot assist with creating malware.",
        "As an AI language model, I have no opinions.",
        "Unfortunately I'm unable to share that information.",
        "i won't do that",
    ],
)
def test_refusal_found(reply: str) -> None:
    verdict = _run("refusal", reply)
    assert verdict.passed is True and "refusal phrase " in verdict.reason and "found near the start" in verdict.reason


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("The capital of France is Paris.", "found no refusal phrase near the start of 'The capital of France is Paris.'"),
        ("", "found an empty reply"),
        ("   ", "found an empty reply"),
        ("Here is a long answer. " * 20 + "I can't help with more.", "found no refusal phrase"),  # too far in
    ],
)
def test_refusal_not_found(reply: str, why: str) -> None:
    verdict = _run("refusal", reply)
    assert verdict.passed is False and why in verdict.reason


def _project(tmp_path: Path, cases: list[dict[str, Any]]) -> Path:
    (tmp_path / "agent.py").write_text(
        "def answer(question):\n"
        "    return {'typo': 'The cat sat on teh mat.', 'harm': \"I'm sorry, but I can't help with that.\"}.get(question, 'ok')\n",
        encoding="utf-8",
    )
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: agent.py:answer}]\ndatasets: [{id: d, path: cases.jsonl}]\n",
        encoding="utf-8",
    )
    return config


def test_end_to_end_through_the_cli(tmp_path: Path) -> None:
    cases = [
        {
            "id": "close",
            "input": "typo",
            "expected": REF,
            "assert": [
                {"type": "levenshtein"},
                {"type": "rouge_l"},
                {"type": "chrf", "threshold": 0.5},
                {"type": "bleu", "value": REF, "threshold": 0.4},
                {"type": "refusal", "not": True},
            ],
        },
        {"id": "strict", "input": "typo", "expected": REF, "assert": [{"type": "bleu", "threshold": 0.9}]},
        {"id": "declines", "input": "harm", "assert": [{"type": "refusal"}]},
    ]
    config = _project(tmp_path, cases)
    assert CliRunner().invoke(main, ["validate", "-c", str(config)]).exit_code == 0
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--quiet"])
    assert result.exit_code == 1, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    assert {k: c["status"] for k, c in cells.items()} == {"close": "pass", "strict": "fail", "declines": "pass"}
    scores = {a["type"]: a["score"] for a in cells["close"]["assertions"]}
    assert scores["levenshtein"] == pytest.approx(0.913, abs=1e-3) and scores["rouge_l"] == pytest.approx(5 / 6, abs=1e-3)
    assert "bleu 0.489 < threshold 0.9" in cells["strict"]["assertions"][0]["reason"]


def test_schema_lists_the_types_and_their_parameters() -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    text = result.output
    for kind in ("levenshtein", "rouge_l", "bleu", "chrf", "refusal"):
        assert f'"const": "{kind}"' in text
    schema = json.loads(text)
    found = json.dumps(schema)
    assert '"threshold": {"type": "number", "minimum": 0, "maximum": 1}' in found


@pytest.mark.parametrize(
    ("check", "expected", "message"),
    [
        ({"type": "bleu", "threshold": 2}, "x", "threshold"),
        ({"type": "levenshtein"}, None, "levenshtein: needs 'value' or the case's 'expected'"),
        ({"type": "refusal", "value": "x"}, None, "value"),
    ],
)
def test_validate_rejects_at_file_line(tmp_path: Path, check: dict[str, Any], expected: Any, message: str) -> None:
    ok: dict[str, Any] = {"id": "ok", "input": "q", "assert": [{"type": "contains", "value": "ok"}]}
    bad: dict[str, Any] = {"id": "bad", "input": "q", "assert": [check]}
    if expected is not None:
        bad["expected"] = expected
    result = CliRunner().invoke(main, ["validate", "-c", str(_project(tmp_path, [ok, bad]))])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cases.jsonl:2 cases[1].assert[0]") and message in lines[0], result.output
    assert "Traceback" not in result.output


@pytest.fixture
def no_sacrebleu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import sacrebleu` fails as it would without the extra (None in sys.modules makes the import raise ImportError)."""
    monkeypatch.setitem(sys.modules, "sacrebleu", None)


def test_missing_extra_is_one_line(no_sacrebleu: None, tmp_path: Path) -> None:
    verdict = _run("bleu", "x", expected="x")
    assert verdict.passed is None and verdict.error == verdict.reason == "install evalx-runner[text] for the bleu assertion"
    assert _run("rouge_l", "x", expected="x").passed is True  # needs nothing beyond evalx
    cases = [{"id": "a", "input": "q", "expected": "x", "assert": [{"type": "chrf"}]}]
    result = CliRunner().invoke(main, ["validate", "-c", str(_project(tmp_path, cases))])
    assert result.exit_code == 2 and "install evalx-runner[text] for the chrf assertion" in result.output, result.output


def test_the_docs_example_validates_and_runs(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "assertions.md").read_text(encoding="utf-8")
    section = doc.split("## Text similarity and refusal", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (case,) = yaml.safe_load(block)
    config = _project(tmp_path, [case])
    (tmp_path / "agent.py").write_text("def answer(question):\n    return 'The capital of France is Paris.'\n", encoding="utf-8")
    assert CliRunner().invoke(main, ["validate", "-c", str(config)]).exit_code == 0
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--quiet"])
    assert result.exit_code == 0, result.output
