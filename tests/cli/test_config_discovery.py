"""Without -c and without ./evalconfig.yaml, a command uses the nearest evalconfig.yaml above, up to the repository root."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_project import evalx

CONFIG = """version: 1
targets:
  - id: echo
    type: python
    callable: agent.py:answer
datasets:
  - id: smoke
    path: data/smoke.jsonl
"""


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "evalconfig.yaml").write_text(CONFIG)
    (root / "agent.py").write_text("def answer(text):\n    return text\n")
    (root / "data").mkdir()
    (root / "data" / "smoke.jsonl").write_text('{"id": "a", "input": "hi", "expected": "hi", "assert": [{"type": "equals"}]}\n')
    return root


def _evalx(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return evalx(*args, cwd=cwd)


def test_a_subfolder_finds_the_config_above_and_its_paths_stay_relative_to_it(tmp_path: Path) -> None:
    repo = _project(tmp_path / "repo")
    (repo / ".git").mkdir()
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)

    validated = _evalx(deep, "validate")
    assert validated.returncode == 0, validated.stderr
    assert "evalx: using ../../evalconfig.yaml (the nearest evalconfig.yaml above this folder)" in validated.stderr
    assert "1 cases" in validated.stdout

    ran = _evalx(deep, "run", "--json", "-q")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["totals"]["pass"] == 1
    assert list((repo / "runs").iterdir()), "the run is written under the config's folder"
    assert not (deep / "runs").exists()


def test_the_walk_stops_at_the_repository_root(tmp_path: Path) -> None:
    _project(tmp_path)  # a config above the repository: another project's
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    sub = repo / "sub"
    sub.mkdir()
    proc = _evalx(sub, "validate")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "evalconfig.yaml: config file not found (create one with `evalx init`)"


def test_the_config_here_and_an_explicit_c_win(tmp_path: Path) -> None:
    repo = _project(tmp_path / "repo")
    (repo / ".git").mkdir()
    inner = _project(repo / "inner")
    (inner / "data" / "smoke.jsonl").write_text('{"id": "a", "input": "x", "expected": "x"}\n{"id": "b", "input": "y", "expected": "y"}\n')
    here = _evalx(inner, "validate")
    assert here.returncode == 0 and "2 cases" in here.stdout and "evalx: using" not in here.stderr
    named = _evalx(inner / "data", "validate", "-c", "../../evalconfig.yaml")
    assert named.returncode == 0 and "1 cases" in named.stdout and "evalx: using" not in named.stderr


def test_an_evalconfig_yaml_that_is_not_a_file_is_named_not_passed_by(tmp_path: Path) -> None:
    import os

    repo = _project(tmp_path / "repo")
    (repo / ".git").mkdir()
    sub = repo / "sub"
    sub.mkdir()
    os.mkfifo(sub / "evalconfig.yaml")  # nobody writes it: reading it would hang
    deeper = sub / "deeper"
    deeper.mkdir()
    proc = _evalx(deeper, "validate")  # the FIFO is the nearest: named, never passed by for the config above
    assert proc.returncode == 2, proc.stderr
    assert "evalconfig.yaml" in proc.stderr and "not a regular file" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2 and "Traceback" not in proc.stderr


def test_from_a_subfolder_the_config_is_named_as_typed_there(tmp_path: Path) -> None:
    repo = _project(tmp_path / "repo")
    (repo / ".git").mkdir()
    sub = repo / "sub"
    sub.mkdir()
    ok = _evalx(sub, "validate")
    assert ok.stdout.startswith("../evalconfig.yaml: ok"), ok.stdout
    (repo / "evalconfig.yaml").write_text(CONFIG + "bogus: 2\n")
    bad = _evalx(sub, "validate")
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1].startswith("../evalconfig.yaml:9 bogus: unknown key"), bad.stderr
