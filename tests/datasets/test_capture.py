"""`evalx capture`: production traces (summary JSON, SSE transcript, a run's cell) become case files that run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalx.cli import main
from evalx.datasets.loader import load_dataset

TRACE = {
    "trace_id": "3f2a9c1b7d0e4a5f",
    "user_message": "Cancel my order A1002 and refund me",
    "system": "You are a support agent.",
    "final_answer": "I deleted your account.",
    "failure_reason": "deleted the account instead of cancelling the order\nsecond line of detail",
    "tokens_used": 800,
}

SSE = """event: text_delta
data: {"text": "Your order "}

event: tool_call
data: {"tool": "lookup_order", "args": {"order_id": "A1001"}}

event: text_delta
data: {"text": "was lost."}

event: usage
data: {"input_tokens": 300, "output_tokens": 100, "cache_hit_tokens": 0}

event: error
data: {"code": "TOOL_FAILED", "message": "lookup_order timed out"}
"""

# the fixed agent: answers well, in a few tokens
BOT = """
def answer(q):
    return {"text": "I cancelled order A1002; your refund is on its way.", "usage": {"input_tokens": 50, "output_tokens": 20}}

def bad(q):
    return {"text": "I deleted your account.", "usage": {"input_tokens": 50, "output_tokens": 20}}
"""


def cli(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args)


def suite(root: Path, cases_dir: str = "cases") -> Path:
    (root / "bot.py").write_text(BOT)
    (root / "evalconfig.yaml").write_text(
        "version: 1\nname: captured\n"
        "targets: [{id: fixed, type: python, callable: bot.py:answer}, {id: broken, type: python, callable: bot.py:bad}]\n"
        f"datasets: [{{id: regressions, path: {cases_dir}}}]\n"
    )
    return root


def test_trace_summary_becomes_a_case_that_loads_and_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "trace.json").write_text(json.dumps(TRACE))
    res = cli(["capture", "trace.json", "--out", "cases/"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    path = tmp_path / "cases/prod-regression-3f2a9c1b7d0e4a5f.yaml"
    assert res.stdout.strip() == "wrote cases/prod-regression-3f2a9c1b7d0e4a5f.yaml"
    text = path.read_text()
    assert "# Failure reason: deleted the account instead of cancelling the order\n#   second line of detail\n" in text
    assert "TODO for a person" in text
    case = yaml.safe_load(text)
    assert case["id"] == "prod-regression-3f2a9c1b7d0e4a5f"
    assert case["input"] == TRACE["user_message"] and case["system"] == TRACE["system"]
    assert case["assert"] == [
        {"type": "max_tokens", "value": 1200, "count": "total"},
        {"type": "contains", "value": "I deleted your account.", "not": True, "name": "not the bad answer"},
    ]
    assert case["metadata"]["trace_id"] == TRACE["trace_id"]
    (loaded,) = load_dataset({"id": "r", "path": "cases"}, base_dir=tmp_path)
    assert loaded.id == "prod-regression-3f2a9c1b7d0e4a5f"

    # run it as is: the fixed agent passes, the one repeating the bad answer fails
    suite(tmp_path)
    run = cli(["run", "-q", "--json"], tmp_path, monkeypatch)
    assert run.exit_code == 1, run.output
    per_target = json.loads(run.stdout)["per_target"]
    assert per_target["fixed"]["pass"] == 1 and per_target["broken"]["fail"] == 1

    again = cli(["capture", "trace.json", "--out", "cases/"], tmp_path, monkeypatch)
    assert again.exit_code == 2 and "already exists (use --force to overwrite)" in again.stderr
    assert cli(["capture", "trace.json", "--out", "cases/", "--force"], tmp_path, monkeypatch).exit_code == 0


def test_sse_transcript_becomes_a_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "eval-7c1d00aa-run.sse").write_text(SSE)
    res = cli(["capture", "eval-7c1d00aa-run.sse", "--out", "cases", "--input", "Where is my order A1001?"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    (path,) = (tmp_path / "cases").iterdir()
    case = yaml.safe_load(path.read_text())
    assert case["id"] == "prod-regression-eval-7c1d00aa-run"  # the transcript carries no trace id: the file name stands in
    assert case["input"] == "Where is my order A1001?"
    assert {"type": "max_tokens", "value": 600, "count": "total"} in case["assert"]
    assert {"type": "contains", "value": "Your order was lost.", "not": True, "name": "not the bad answer"} in case["assert"]
    assert case["metadata"]["failure_reason"] == "TOOL_FAILED: lookup_order timed out"
    assert case["metadata"]["tool_calls"] == ["lookup_order"]
    assert "# Failure reason: TOOL_FAILED: lookup_order timed out" in path.read_text()

    suite(tmp_path)
    run = cli(["run", "-q", "--target", "fixed"], tmp_path, monkeypatch)
    assert run.exit_code == 0, run.output

    # without --input the case still loads and runs, and the user is told to fill it in
    (tmp_path / "other.sse").write_text(SSE.replace("TOOL_FAILED", "X"))
    warned = cli(["capture", "other.sse", "--out", "more"], tmp_path, monkeypatch)
    assert warned.exit_code == 0 and "has no user message; edit `input:`" in warned.stderr
    load_dataset({"id": "m", "path": "more"}, base_dir=tmp_path)


def test_a_stored_runs_cell_becomes_a_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "agent.py").write_text(
        "def answer(q):\n    return {'text': 'I think it is 5.', 'usage': {'input_tokens': 30, 'output_tokens': 10}}\n"
    )
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: agent.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: math, input: 'What is 2 + 2?', assert: [{type: contains, value: '4'}]}]}]\n"
    )
    assert cli(["run", "-q"], tmp_path, monkeypatch).exit_code == 1
    (run_dir,) = (tmp_path / "runs").iterdir()

    no_case = cli(["capture", f"runs/{run_dir.name}", "--out", "cases"], tmp_path, monkeypatch)
    assert no_case.exit_code == 2 and "name the cell with --case CASE" in no_case.stderr
    unknown = cli(["capture", f"runs/{run_dir.name}", "--case", "nope", "--out", "cases"], tmp_path, monkeypatch)
    assert unknown.exit_code == 2 and "no cell of case 'nope'" in unknown.stderr

    res = cli(["capture", f"runs/{run_dir.name}", "--case", "math", "--out", "cases"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    (path,) = (tmp_path / "cases").iterdir()
    case = yaml.safe_load(path.read_text())
    assert case["id"].startswith("regression-math-")
    assert case["input"] == "What is 2 + 2?"
    assert {"type": "max_tokens", "value": 60, "count": "total"} in case["assert"]
    assert {"type": "contains", "value": "I think it is 5.", "not": True, "name": "not the bad answer"} in case["assert"]
    assert "# Failure reason: contains: " in path.read_text()

    (tmp_path / "fixed.py").write_text("def answer(q):\n    return {'text': '4', 'usage': {'input_tokens': 30, 'output_tokens': 1}}\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: fixed.py:answer}]\ndatasets: [{id: reg, path: cases}]\n"
    )
    run = cli(["run", "-q"], tmp_path, monkeypatch)
    assert run.exit_code == 0, run.output


def test_a_file_that_is_no_trace_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes.txt").write_text("just some notes\n")
    res = cli(["capture", "notes.txt", "--out", "cases"], tmp_path, monkeypatch)
    assert res.exit_code == 2
    assert "not a trace summary JSON, an SSE transcript or a run directory" in res.stderr
    (tmp_path / "t.json").write_text(json.dumps({"user_message": "hi"}))
    assert "needs a 'trace_id'" in cli(["capture", "t.json", "--out", "cases"], tmp_path, monkeypatch).stderr
