"""``env_file:`` and ``--env-file``: loaded before ``${VAR}``, set variables win unless told, every value redacted."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import read_cells

import evalx
from evalx.cli import main

SECRET = "dotenv-secret-value-0123456789"

AGENT = """
import os

def answer(q):
    # the values reach the target through the environment (and the config's assertion through ${VAR})
    return f"hi {os.environ['EVALX_TEST_MODE']} {os.environ['EVALX_TEST_SECRET']}"
"""


@pytest.fixture(autouse=True)
def _environment() -> Iterator[None]:
    """Loading a .env file sets variables in this process: each test starts and ends without them."""
    saved = dict(os.environ)
    for name in ("EVALX_TEST_MODE", "EVALX_TEST_SECRET", "EVALX_TEST_GREETING"):
        os.environ.pop(name, None)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _project(tmp_path: Path, env_file: str | None = ".env") -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "cases.jsonl").write_text(json.dumps({"id": "c1", "input": "q"}) + "\n")
    (tmp_path / ".env").write_text(
        f"# the team's settings\nEVALX_TEST_GREETING=hi\nexport EVALX_TEST_MODE=file\nEVALX_TEST_SECRET='{SECRET}'\n"
    )
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: dotenv\n"
        + (f"env_file: {env_file}\n" if env_file else "")
        + "targets: [{id: a, type: python, callable: agent.py:answer}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\n"
        "assert: [{type: contains, value: '${EVALX_TEST_GREETING} '}]\n"
    )
    return config


def _run(config: Path, *args: str) -> tuple[int, str, list[dict[str, object]]]:
    os.chdir(config.parent)
    shutil.rmtree(config.parent / "runs", ignore_errors=True)  # one run folder: two runs in one second sort at random
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", "--no-cache", *args])
    assert "Traceback" not in result.stderr, result.stderr
    runs = sorted((config.parent / "runs").iterdir()) if (config.parent / "runs").exists() else []
    return result.exit_code, result.stdout + result.stderr, read_cells(runs[-1]) if runs else []


def _files_with(root: Path, text: str) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_values_reach_var_and_the_target_and_are_redacted_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _project(tmp_path)
    code, out, cells = _run(config)
    assert code == 0, out
    (cell,) = cells
    assert cell["status"] == "pass"
    assert cell["output"]["text"] == "hi file ***"  # type: ignore[index]
    assert _files_with(tmp_path / "runs", SECRET) == [] and SECRET not in out


def test_the_environment_wins_unless_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    os.environ["EVALX_TEST_MODE"] = "shell"
    config = _project(tmp_path)
    _, _, cells = _run(config)
    assert cells[0]["output"]["text"] == "hi shell ***"  # type: ignore[index]
    config.write_text(config.read_text().replace("env_file: .env", "env_file: {path: [.env], override: true}"))
    _, _, cells = _run(config)
    assert cells[0]["output"]["text"] == "hi file ***"  # type: ignore[index]


def test_env_file_option_comes_after_the_configs_and_validate_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _project(tmp_path)
    (tmp_path / ".env.ci").write_text("EVALX_TEST_MODE=ci\n")
    _, _, cells = _run(config, "--env-file", ".env.ci")
    assert cells[0]["output"]["text"] == "hi ci ***"  # type: ignore[index]
    # without env_file:, the variable comes only from --env-file; validate says it is unset without it
    config = _project(tmp_path / "bare" if (tmp_path / "bare").mkdir() is None else tmp_path, env_file=None)
    os.environ.pop("EVALX_TEST_GREETING", None)
    missing = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert missing.exit_code == 2 and "EVALX_TEST_GREETING is not set" in missing.stderr
    given = CliRunner().invoke(main, ["validate", "-c", str(config), "--env-file", str(config.parent / ".env")])
    assert given.exit_code == 0, given.stderr


def test_a_missing_file_or_a_bad_line_is_one_line_naming_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _project(tmp_path, env_file="[.env, .env.local]")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert result.stderr.strip() == "evalconfig.yaml:3 env_file[1]: env file .env.local: no such file", result.stderr
    (tmp_path / ".env.local").write_text("GOOD=1\nthis is not a setting\n")
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(".env.local:2: not a KEY=value line"), result.stderr


def test_the_python_api_reads_env_file_in_a_mapping(tmp_path: Path) -> None:
    config = _project(tmp_path)
    data = {
        "env_file": ".env",
        "targets": [{"id": "a", "type": "python", "callable": "agent.py:answer"}],
        "datasets": [{"id": "d", "path": "cases.jsonl"}],
        "assert": [{"type": "contains", "value": "${EVALX_TEST_GREETING} "}],
        "output": {"dir": str(tmp_path / "api-runs")},
    }
    result = evalx.run(evalx.load_config(data, base_dir=config.parent))
    (cell,) = result.results()
    assert cell.status == "pass" and cell.text == "hi file ***"
