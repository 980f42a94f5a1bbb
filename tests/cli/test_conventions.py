"""Command-line conventions (issue 31, item 6): ``-o/--output`` wherever a command writes one file or folder (the old
spellings kept as aliases), click's shell completion as the docs say, ``python -m evalx`` named ``evalx``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.config.schema import schema_json

REPO = Path(__file__).resolve().parents[2]


def _two_runs(root: Path) -> tuple[str, str]:
    (root / "bot.py").write_text("def answer(q):\n    return 'ok'\n", encoding="utf-8")
    config = root / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: 'bot.py:answer'}]\n"
        "datasets: [{id: d, cases: [{id: a, input: x, assert: [{type: contains, value: ok}]}]}]\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    assert runner.invoke(main, ["run", "-c", str(config), "-q"]).exit_code == 0
    config.write_text(config.read_text(encoding="utf-8").replace("value: ok", "value: nope"), encoding="utf-8")
    assert runner.invoke(main, ["run", "-c", str(config), "-q"]).exit_code == 1
    a, b = sorted(p.name for p in (root / "runs").iterdir())
    return a, b


def test_compare_writes_one_file_with_o(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    a, b = _two_runs(tmp_path)
    for args, name in ((["--markdown"], "diff.md"), (["--json"], "diff.json"), ([], "diff.txt")):
        for flag in ("-o", "--output"):
            out = tmp_path / "out" / flag.strip("-") / name
            result = CliRunner().invoke(main, ["compare", a, b, *args, flag, str(out)])
            assert result.exit_code == 0, result.output
            assert result.output == f"wrote {os.path.relpath(out)}\n"  # the comparison went to the file, not stdout
            printed = CliRunner().invoke(main, ["compare", a, b, *args]).output
            assert out.read_text(encoding="utf-8") == printed
    assert json.loads((tmp_path / "out" / "o" / "diff.json").read_text(encoding="utf-8"))["b"]["run_id"] == b


def test_comment_writes_its_markdown_with_o(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _a, b = _two_runs(tmp_path)
    out = tmp_path / "out" / "comment.md"
    result = CliRunner().invoke(main, ["comment", b, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {os.path.relpath(out)}\n"
    assert out.read_text(encoding="utf-8") == CliRunner().invoke(main, ["comment", b]).output


def _commands(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    import click

    assert isinstance(group, click.Group)
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


def test_every_command_takes_color_as_the_group_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`evalx report RUN --color never` works as `evalx --color never report RUN` does, for every command."""
    monkeypatch.chdir(tmp_path)
    _a, b = _two_runs(tmp_path)
    commands = _commands(main)
    assert {("validate",), ("providers",), ("comment",), ("report",), ("compare",), ("init",), ("ci", "fetch-baseline")} <= set(commands)
    for command in commands:
        result = CliRunner().invoke(main, [*command, "--color", "never", "--help"])
        assert result.exit_code == 0 and "--color" in result.output, (command, result.output)
    for args in (["validate"], ["providers"], ["report", b], ["comment", b], ["runs"]):
        result = CliRunner().invoke(main, [*args, "--color", "always"])
        assert result.exit_code == 0, (args, result.output)


def test_schema_o_and_its_old_spelling_write_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for flag in ("-o", "--output", "--write"):
        target = tmp_path / f"{flag.strip('-')}.json"
        result = CliRunner().invoke(main, ["schema", flag, str(target)])
        assert result.exit_code == 0, result.output
        assert target.read_text(encoding="utf-8") == schema_json()
    assert CliRunner().invoke(main, ["schema", "-o"]).exit_code == 0  # no PATH: evalconfig.schema.json here
    assert (tmp_path / "evalconfig.schema.json").read_text(encoding="utf-8") == schema_json()
    provider = CliRunner().invoke(main, ["schema", "--provider", "-o", str(tmp_path / "provider.json")])
    assert provider.exit_code == 0 and json.loads((tmp_path / "provider.json").read_text(encoding="utf-8"))


def test_merge_and_capture_take_o_and_keep_out(tmp_path: Path) -> None:
    for command in ("merge", "capture"):
        options = {o for param in main.commands[command].params for o in (*param.opts, *param.secondary_opts)}
        assert {"-o", "--output", "--out"} <= options, command
    for command, flag in (("report", "-o"), ("compare", "-o"), ("schema", "-o")):
        options = {o for param in main.commands[command].params for o in param.opts}
        assert {flag, "--output"} <= options, command


def test_the_documented_shell_completion_completes_commands_and_options(tmp_path: Path) -> None:
    docs = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    assert 'eval "$(_EVALX_COMPLETE=bash_source evalx)"' in docs and "_EVALX_COMPLETE=zsh_source evalx" in docs

    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "_EVALX_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        proc = subprocess.run([sys.executable, "-m", "evalx"], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return [line.split(",", 1)[1] for line in proc.stdout.splitlines()]

    assert complete("evalx ru", 1) == ["run", "runs"]
    assert {"--color", "--config", "--concurrency"} <= set(complete("evalx run --co", 2))
    assert complete("evalx run --color ", 3) == ["auto", "always", "never"]
    source = subprocess.run(
        [sys.executable, "-m", "evalx"], env={**os.environ, "_EVALX_COMPLETE": "bash_source"}, capture_output=True, text=True, timeout=60
    )
    assert "_evalx_completion()" in source.stdout and "complete -o nosort -F _evalx_completion evalx" in source.stdout


def test_python_m_evalx_is_named_evalx() -> None:
    proc = subprocess.run([sys.executable, "-m", "evalx", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("Usage: evalx [OPTIONS] COMMAND [ARGS]...")
