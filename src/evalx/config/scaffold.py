"""``evalx init``: a small, working starting point."""

from __future__ import annotations

from pathlib import Path

CONFIG = """\
# yaml-language-server: $schema=https://evalx.dev/schemas/evalconfig.schema.json
# Run `evalx schema > evalconfig.schema.json` for an offline copy of the schema.
version: 1
name: my-agent

defaults:
  concurrency: 8
  timeout_s: 60

targets:
  - id: agent
    type: python
    callable: agent.py:answer     # module:function or file.py:function

datasets:
  - id: golden
    path: datasets/cases.jsonl

assert:                           # applied to every case
  - {type: completed}
"""

CASES = """\
{"id": "greeting", "input": "Say hello", "assert": [{"type": "icontains", "value": "hello"}], "category": "basics"}
{"id": "arithmetic", "input": "What is 2 + 2?", "expected": "4", "assert": [{"type": "numeric_close"}], "category": "math"}
{"id": "refund-window", "input": "How long do I have to ask for a refund?", "expectedKeywords": ["30 days"], "category": "policy"}
"""

AGENT = '''\
"""A stand-in agent: replace the body with a call to yours."""


def answer(question: str) -> str:
    q = question.lower()
    if "hello" in q:
        return "Hello!"
    if "2 + 2" in q:
        return "2 + 2 = 4"
    if "refund" in q:
        return "You can ask for a refund within 30 days of purchase."
    return "I don't know."
'''


def scaffold(directory: Path) -> list[Path]:
    files = {
        directory / "evalconfig.yaml": CONFIG,
        directory / "datasets" / "cases.jsonl": CASES,
        directory / "agent.py": AGENT,
    }
    for path in files:
        if path.exists():
            raise FileExistsError(str(path))
    written = []
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
