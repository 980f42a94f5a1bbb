"""An error many cells share is one line with its count in every summary: the terminal, summary.txt and Markdown."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from evalx.cli import main

CONFIG = """version: 1
targets:
  - id: bot
    type: python
    callable: agent.py:answer
datasets:
  - id: smoke
    path: smoke.jsonl
"""

AGENT = """def answer(text):
    if text == "down":
        raise ConnectionError("the knowledge base is down")
    if text == "odd":
        raise ValueError("an odd one")
    return "no"
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "evalconfig.yaml").write_text(CONFIG)
    (tmp_path / "agent.py").write_text(AGENT)
    rows = [{"id": f"kb{i:02d}", "input": "down", "expected": "yes"} for i in range(30)]
    rows += [{"id": "odd", "input": "odd", "expected": "yes"}, {"id": "wrong", "input": "q", "expected": "yes"}]
    (tmp_path / "smoke.jsonl").write_text("".join(json.dumps({**r, "assert": [{"type": "equals"}]}) + "\n" for r in rows))
    return tmp_path


def test_a_shared_error_is_one_line_with_its_count(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(_project(tmp_path))
    result = CliRunner().invoke(main, ["run", "-v", "--markdown", "summary.md"])
    assert result.exit_code == 1, result.output
    (run_dir,) = Path("runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["error_groups"] == [
        {"target": "bot", "reason": "ConnectionError: the knowledge base is down", "count": 30},
    ]
    shared = "bot  30 cells (first smoke/kb00) — error: ConnectionError: the knowledge base is down"
    for text in (result.stdout, (run_dir / "summary.txt").read_text()):
        failed = text.split("Failed cases:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert [line.strip() for line in failed] == [
            shared,
            "bot  smoke/odd — error: ValueError: an odd one",
            "bot  smoke/wrong — equals: expected 'yes', got 'no'",
        ], text
    markdown = Path("summary.md").read_text()
    assert "| bot | 30 cells (first smoke/kb00) | ConnectionError: the knowledge base is down |" in markdown
    assert markdown.count("knowledge base is down") == 1
