"""A small eval project for the CI tests: a Python target whose answers a test sets (``answers.json``) between runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CONFIG = """\
version: 1
name: ci-demo
targets:
  - id: bot
    type: python
    callable: agent.py:answer
datasets:
  - id: qa
    path: qa.jsonl
"""

AGENT = """\
import json
from pathlib import Path


def answer(question):
    return json.loads((Path(__file__).parent / "answers.json").read_text())[question]
"""

CASES = [("one", "1"), ("two", "2"), ("three", "3")]


def make_project(folder: Path) -> Path:
    """The project in ``folder`` (every case passing); its config's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evalconfig.yaml").write_text(CONFIG, encoding="utf-8")
    (folder / "agent.py").write_text(AGENT, encoding="utf-8")
    lines = [json.dumps({"id": case, "input": case, "expected": value, "assert": [{"type": "equals"}]}) for case, value in CASES]
    (folder / "qa.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    set_answers(folder)
    return folder / "evalconfig.yaml"


def set_answers(folder: Path, **wrong: str) -> None:
    """Every case answered right, except those named (``two="5"``)."""
    answers = {case: wrong.get(case, value) for case, value in CASES}
    (folder / "answers.json").write_text(json.dumps(answers), encoding="utf-8")


def base_env(tmp: Path) -> dict[str, str]:
    """A clean environment for a CI job's processes: this interpreter's evalx first on PATH, no GITHUB_*/CI_* of the host."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
    }
    for name in ("PYTHONPATH", "XDG_CACHE_HOME", "SYSTEMROOT"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env
