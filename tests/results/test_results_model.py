"""The results model (evalx.results.model) pinned to what `evalx run` really writes, and its one constructor."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.models import Case
from evalx.results import model
from evalx.results.model import AssertionRecord, CellOutput, CellResult, RunSummary, cell_result, failure_reason, not_run
from evalx.results.outcome import RUN_KEYS

BOT = """
def answer(q):
    if q == "crash":
        raise RuntimeError("the bot fell over")
    return {"text": "right" if q == "alpha" else "wrong", "tool_calls": [{"name": "lookup", "args": {"q": q}}],
            "usage": {"input_tokens": 10, "output_tokens": 5}, "cost_usd": 0.01}

def other(q):
    return {"text": "right", "cost_usd": 0.02}
"""

CONFIG = """version: 1
name: modelled
{defaults}
targets:
  - {{id: bot, type: python, callable: bot.py:answer}}
  - {{id: other, type: python, callable: bot.py:other}}
datasets:
  - id: d
    cases:
      - {{id: alpha, input: alpha, category: core, difficulty: easy, tags: [t1], expected: right,
          assert: [{{type: equals, value: right, name: exact}}, {{type: contains, value: wrong, not: true}}]}}
      - {{id: beta, input: beta, category: extra, assert: [{{type: equals, value: right}}]}}
      - {{id: crash, input: crash, assert: [{{type: equals, value: right}}]}}
{gates}
"""

GATES = """gates:
  baseline: latest
  min_pass_rate: 0.1
  no_new_failures: true
"""


def _run(root: Path, monkeypatch: pytest.MonkeyPatch, *, defaults: str, gates: str = "") -> Path:
    (root / "evalconfig.yaml").write_text(CONFIG.format(defaults=defaults, gates=gates))
    before = set((root / "runs").iterdir()) if (root / "runs").is_dir() else set()
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["run", "-q"])
    assert res.exit_code in (0, 1), res.output
    [run_dir] = set((root / "runs").iterdir()) - before
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two real runs: repeats and two targets; then a baseline, gates and a cost guard that skips cells."""
    root = tmp_path_factory.mktemp("model")
    (root / "bot.py").write_text(BOT)
    with pytest.MonkeyPatch.context() as mp:
        first = _run(root, mp, defaults="defaults: {repeat: 2}")
        second = _run(root, mp, defaults="defaults: {concurrency: 1, max_total_cost: 0.000001}", gates=GATES)
    return [first, second]


def _typeddict(hint: Any) -> Any:
    """The TypedDict inside a hint (``X``, ``X | None``), or None."""
    if is_typeddict(hint):
        return hint
    if get_origin(hint) in (typing.Union, types.UnionType):
        found = [a for a in get_args(hint) if is_typeddict(a)]
        return found[0] if len(found) == 1 else None
    return None


def _check(value: Any, td: Any, where: str, problems: list[str]) -> None:
    """Every key of ``value`` is declared by TypedDict ``td``, every required one is there; nested records too."""
    if not isinstance(value, dict):
        problems.append(f"{where}: {type(value).__name__}, not a mapping ({td.__name__})")
        return
    hints = get_type_hints(td)
    problems += [f"{where}.{key}: not declared in {td.__name__}" for key in value if key not in hints]
    problems += [f"{where}.{key}: required by {td.__name__}, missing" for key in td.__required_keys__ if key not in value]
    for key, hint in hints.items():
        if key not in value or value[key] is None:
            continue
        inner, origin = _typeddict(hint), get_origin(hint)
        if inner is not None:
            _check(value[key], inner, f"{where}.{key}", problems)
        elif origin is list and _typeddict(get_args(hint)[0]) is not None:
            for i, item in enumerate(value[key]):
                _check(item, _typeddict(get_args(hint)[0]), f"{where}.{key}[{i}]", problems)
        elif origin is dict and _typeddict(get_args(hint)[1]) is not None:
            for name, item in value[key].items():
                _check(item, _typeddict(get_args(hint)[1]), f"{where}.{key}.{name}", problems)


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    return read_cells(run_dir)


def test_every_results_line_is_a_declared_cell_result(runs: list[Path]) -> None:
    lines = [line for run_dir in runs for line in _lines(run_dir)]
    problems: list[str] = []
    for i, line in enumerate(lines):
        _check(line, CellResult, f"line {i}", problems)
    assert not problems, "\n".join(problems)
    # the runs really went through every path the model declares
    assert {line["status"] for line in lines} == {"pass", "fail", "error", "skipped"}
    assert any("skip_reason" in line for line in lines) and any(line["traceback"] for line in lines)
    assert any(a.get("not") for line in lines for a in line["assertions"])
    assert any(line["output"].get("tool_calls") for line in lines)


def test_results_keys_are_written_in_the_declared_order(runs: list[Path]) -> None:
    declared = list(get_type_hints(CellResult))
    for line in _lines(runs[0]) + _lines(runs[1]):
        assert list(line) == [key for key in declared if key in line]
        assert line["version"] == model.RESULT_VERSION


def test_summary_json_is_a_declared_run_summary(runs: list[Path]) -> None:
    problems: list[str] = []
    summaries = [json.loads((run_dir / "summary.json").read_text(encoding="utf-8")) for run_dir in runs]
    for run_dir, summary in zip(runs, summaries, strict=True):
        _check(summary, RunSummary, run_dir.name, problems)
    assert not problems, "\n".join(problems)
    first, second = summaries
    assert first["version"] == model.SUMMARY_VERSION
    assert first["repeats"] and first["pairwise"] and first["failures"]  # nested records were checked
    # what the run adds, after the figures, in one place (results/outcome.py)
    assert {"config", "interrupted", "cells_planned"} <= set(first) and "gates" not in first
    assert {"cost_guard", "comparison", "baseline", "gates"} <= set(second)
    figures = list(get_type_hints(model.SummaryFigures))
    assert list(second)[: len(figures)] == figures
    assert list(second)[len(figures) :] == [k for k in RUN_KEYS if k in second]
    assert set(RUN_KEYS) == RunSummary.__optional_keys__


def _case() -> Case:
    return Case(id="c1", input="hi", dataset="d", expected="yo", category="billing", tags=["x"], source="d.yaml:3")


def test_one_constructor_for_every_status() -> None:
    ran = cell_result("r", 3, "t", "python", _case(), "d", 1, "pass", 0.12345678, [], {"text": "yo"}, 1.5, None, 0.01,
                      None, False, None, None, "2026-01-01T00:00:00.000+00:00")  # fmt: skip
    skipped = cell_result("r", 4, "t", "python", _case(), "d", 0, "skipped", None, [not_run("budget")], {}, skip_reason="budget")
    assert list(skipped)[:-1] == list(ran) and list(skipped)[-1] == "skip_reason"
    assert ran["score"] == 0.123457 and ran["case_source"] == "d.yaml:3" and ran["index"] == 3
    assert skipped["assertions"] == [{"type": "not_run", "name": None, "passed": None, "score": 0.0, "reason": "budget", "weight": 1.0}]
    assert skipped["latency_ms"] is None and skipped["started_at"] is None and skipped["cached"] is False


def _result(status: str, assertions: list[AssertionRecord], **more: Any) -> CellResult:
    output: CellOutput = {}
    base = cell_result("r", 0, "t", "python", _case(), "d", 0, "pass", None, assertions, output)
    return typing.cast(CellResult, {**base, "status": status, **more})


def test_failure_reason_names_the_assertion_or_the_error() -> None:
    failing: AssertionRecord = {"type": "regex", "name": "order-id", "passed": False, "score": 0.0, "reason": "no match", "weight": 1.0}
    assert failure_reason(_result("fail", [failing])) == "regex (order-id): no match"
    unnamed: AssertionRecord = {"type": "contains", "name": None, "passed": False, "score": 0.0, "reason": "", "weight": 1.0}
    assert failure_reason(_result("fail", [unnamed])) == "contains did not hold"
    assert failure_reason(_result("fail", [], score=0.4)) == "score 0.400 is below the case threshold"
    assert failure_reason(_result("error", [], error="TargetTimeout: no answer")) == "TargetTimeout: no answer"
    broken: AssertionRecord = {"type": "llm_judge", "name": None, "passed": None, "score": 0.0, "reason": "", "weight": 1.0,
                               "error": "unreadable verdict"}  # fmt: skip
    assert failure_reason(_result("error", [broken])) == "llm_judge: could not be evaluated: unreadable verdict"
    assert failure_reason(_result("error", [])) == "the target failed"
    assert failure_reason(_result("weird", [failing]), "error") == "the target failed"  # the caller's reading wins


def test_compare_and_capture_give_the_summary_s_reason(runs: list[Path]) -> None:
    from evalx.datasets.capture import read_traces
    from evalx.results.compare import case_verdicts

    summary = json.loads((runs[0] / "summary.json").read_text(encoding="utf-8"))
    by_case = {(f["target"], f["case_id"]): f["reason"] for f in summary["failures"]}
    verdicts = case_verdicts(runs[0])
    assert by_case[("bot", "beta")] == verdicts[("bot", "d", "beta")].reason == "equals: expected 'right', got 'wrong'"
    assert by_case[("bot", "crash")].startswith("RuntimeError: the bot fell over")
    [trace] = read_traces(runs[0], cases=["crash"], target="bot")
    assert trace.failure_reason == by_case[("bot", "crash")]


def test_a_record_typed_with_json_resolves_its_hints_from_any_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # JSON refers to itself by name: those names must resolve from the module that uses the alias, not only json_types
    (tmp_path / "uses_json.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TypedDict\n"
        "from evalx.common.json_types import JSONObject\n"
        "class Record(TypedDict):\n"
        "    data: JSONObject\n"
        "    items: list[JSONObject]\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import uses_json  # type: ignore[import-not-found]

    hints = get_type_hints(uses_json.Record)
    assert get_origin(hints["data"]) is dict and get_origin(hints["items"]) is list
