"""Output size by category and difficulty, and slow cells (``defaults.slow_ms``), through `evalx run` and `evalx report` (issue 35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalx.cli import main

AGENT = """
import time

def answer(q):
    level = q.split()[0]
    if level == "slow":
        time.sleep(1.5)
    n = {"easy": 1, "hard": 8, "slow": 1}[level]
    return {"text": "word " * (10 * n), "usage": {"input_tokens": 5, "output_tokens": 12 * n}}
"""


def _project(tmp_path: Path, slow_ms: int | None = 1000) -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    with (tmp_path / "cases.jsonl").open("w") as f:
        for i in range(9):
            level = "hard" if i % 3 == 0 else "easy"
            f.write(
                json.dumps({"id": f"c{i}", "input": f"{level} q{i}", "difficulty": level, "category": "math" if i % 2 else "prose"}) + "\n"
            )
        f.write(json.dumps({"id": "sloth", "input": "slow q", "difficulty": "easy", "category": "prose"}) + "\n")
    config = tmp_path / "evalconfig.yaml"
    defaults = f"defaults: {{slow_ms: {slow_ms}}}\n" if slow_ms else ""
    config.write_text(
        "version: 1\nname: sizes\n" + defaults + "targets: [{id: a, type: python, callable: agent.py:answer, concurrency: 4}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\nassert: [{type: contains, value: word}]\n"
    )
    return config


def _run(config: Path, *args: str) -> tuple[int, str, Path]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), *args])
    assert (config.parent / "runs").is_dir(), result.output
    (run_dir,) = (config.parent / "runs").iterdir()
    return result.exit_code, result.stdout + result.stderr, run_dir


def test_breakdowns_carry_output_tokens_characters_and_latency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, run_dir = _run(_project(tmp_path, slow_ms=None), "-v", "--markdown", "summary.md")
    assert code == 0, out
    summary = json.loads((run_dir / "summary.json").read_text())
    hard = summary["per_target"]["a"]["per_difficulty"]["hard"]["outputs"]
    easy = summary["per_target"]["a"]["per_difficulty"]["easy"]["outputs"]
    assert hard["output_tokens"] == {"mean": 96.0, "p95": 96.0} and hard["output_chars"] == {"mean": 400.0, "p95": 400.0}
    assert easy["output_tokens"]["mean"] == 12.0 and easy["output_chars"]["p95"] == 50.0
    assert easy["latency_ms"]["p95"] is not None and easy["latency_ms"]["p95"] >= easy["latency_ms"]["mean"] * 0  # present
    pooled = summary["per_difficulty"]["hard"]["outputs"]  # all targets pooled: one target here, the same figures
    assert pooled["output_tokens"] == hard["output_tokens"]
    cross = summary["per_target"]["a"]["per_category_difficulty"]
    assert all("outputs" in row for row in cross)
    assert "Output size by difficulty:" in out and "tok out mean" in out
    markdown = (tmp_path / "summary.md").read_text()
    assert "### Output size by difficulty" in markdown and "| a | hard | 96 | 96 | 400 | 400 |" in markdown
    report = (run_dir / "report.html").read_text()
    assert 'id="sizes"' in report and "Output size by difficulty" in report
    # no threshold: the five slowest are still listed, the slow case first
    assert summary["slowest"]["threshold_ms"] is None and summary["slowest"]["over_threshold"] is None
    assert len(summary["slowest"]["cells"]) == 5 and summary["slowest"]["cells"][0]["case_id"] == "sloth"


def test_cells_over_slow_ms_are_counted_listed_and_kept_by_evalx_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, run_dir = _run(_project(tmp_path))
    assert code == 0, out
    slowest = json.loads((run_dir / "summary.json").read_text())["slowest"]
    assert slowest["threshold_ms"] == 1000 and slowest["over_threshold"] >= 1  # the sleeper, at least (1.5 s or more)
    first = slowest["cells"][0]
    assert first["case_id"] == "sloth" and first["latency_ms"] >= 1500 and first["status"] == "pass"
    assert all(c["latency_ms"] > 1000 for c in slowest["cells"])
    assert "Slow: " in out and "over slow_ms 1.00s" in out and "d/sloth" in out  # the compact summary's one line
    text = (run_dir / "summary.txt").read_text()
    assert "Slow cells (" in text and "d/sloth" in text
    report = (run_dir / "report.html").read_text()
    assert "Slowest cells" in report and "over slow_ms" in report and "d/sloth" in report
    (run_dir / "summary.json").unlink()  # rebuilt from the results: the threshold is the stored summary's, so write it back first
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    rebuilt = json.loads((run_dir / "summary.json").read_text())["slowest"]
    assert rebuilt["cells"][0]["case_id"] == "sloth"


def test_slow_ms_is_checked_by_the_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _project(tmp_path)
    config.write_text(config.read_text().replace("slow_ms: 1000", "slow_ms: -5"))
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2 and "evalconfig.yaml:3 defaults.slow_ms:" in result.stderr, result.stderr
