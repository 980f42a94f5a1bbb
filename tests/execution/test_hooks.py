"""``hooks: {before_run, after_run}`` through the real CLI: order, failures, timeouts, Ctrl-C, callables and redaction."""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from interrupting import interrupt_when
from results_file import read_cells

from evalx.cli import main

AGENT = """
import os
from pathlib import Path

def answer(q):
    # the before_run hook's file must exist before any cell runs
    return "ok " + Path(os.environ["HOOK_DIR"], "before.txt").read_text().strip()
"""


def _project(tmp_path: Path, hooks: str, agent: str = AGENT, cases: int = 2) -> Path:
    (tmp_path / "agent.py").write_text(agent)
    (tmp_path / "cases.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "contains", "value": "ok"}]}) + "\n" for i in range(cases))
    )
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: hooks\n"
        "targets: [{id: a, type: python, callable: agent.py:answer}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\n" + textwrap.dedent(hooks)
    )
    return config


def _run(config: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("HOOK_DIR", str(config.parent))
    monkeypatch.chdir(config.parent)
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", *args])
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stdout, result.stderr


def _run_dir(config: Path) -> Path:
    (run_dir,) = (config.parent / "runs").iterdir()
    return run_dir


def test_before_run_runs_before_any_cell_and_after_run_after_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(
        tmp_path,
        """
        hooks:
          before_run: 'echo "$EVALX_RUN_ID" > before.txt && echo seeded'
          after_run: [/bin/sh, -c, 'ls "$EVALX_RUN_DIR" > after.txt; echo "$EVALX_HOOK" >> after.txt']
        """,
    )
    code, _, err = _run(config, monkeypatch)
    assert code == 0, err
    run_dir = _run_dir(config)
    cells = read_cells(run_dir)
    assert {c["status"] for c in cells} == {"pass"}
    assert {c["output"]["text"] for c in cells} == {f"ok {run_dir.name}"}  # the hook saw the run id, before the cells
    after = (tmp_path / "after.txt").read_text().split()
    assert "report.html" in after and "summary.json" in after and after[-1] == "after_run"  # after the reports
    assert (run_dir / "hooks" / "before_run.log").read_text().strip() == "seeded"


def test_a_failing_before_run_stops_the_run_before_any_cell_and_after_run_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _project(
        tmp_path,
        """
        hooks:
          before_run: 'echo "cannot reach the engine" >&2; exit 4'
          after_run: 'touch cleaned.txt'
        """,
    )
    code, _, err = _run(config, monkeypatch)
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "before_run hook failed (exit status 4)" in lines[0] and "hooks/before_run.log" in lines[0], err
    run_dir = _run_dir(config)
    assert not (run_dir / "results.jsonl").exists()  # no cell ran
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    assert "cannot reach the engine" in (run_dir / "hooks" / "before_run.log").read_text()
    assert (tmp_path / "cleaned.txt").exists()


def test_a_failed_before_run_names_the_command_that_resumes_the_run_once_it_is_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run folder exists with no results.jsonl: the printed ``--resume`` command runs every cell in it."""
    (tmp_path / "flag").write_text("down")
    config = _project(tmp_path, "hooks: {before_run: 'grep -q up flag && echo x > before.txt'}\n")
    code, _, err = _run(config, monkeypatch)
    run_dir = _run_dir(config)
    assert code == 3 and err.strip().endswith(f"once it is fixed: evalx run --resume {run_dir.name}"), err
    (tmp_path / "flag").write_text("up")
    result = CliRunner().invoke(main, ["run", "--resume", run_dir.name, "-q"])
    assert result.exit_code == 0, result.output
    assert {c["status"] for c in read_cells(run_dir)} == {"pass"} and len(read_cells(run_dir)) == 2
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"


def test_a_failing_after_run_is_reported_and_the_verdict_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(tmp_path, "hooks: {before_run: 'echo x > before.txt', after_run: 'exit 7'}\n")
    code, _, err = _run(config, monkeypatch)
    assert code == 0, err
    assert "after_run hook failed (exit status 7); the verdict stands" in err


def test_a_hook_past_its_timeout_is_stopped_with_its_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(tmp_path, "hooks:\n  before_run: {run: 'sleep 600 & sleep 600; echo late', timeout_s: 0.5}\n")
    code, _, err = _run(config, monkeypatch)
    assert code == 3 and "timed out after 0.5s" in err, err
    assert "late" not in (_run_dir(config) / "hooks" / "before_run.log").read_text()


def test_a_program_that_does_not_exist_is_a_hook_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(tmp_path, "hooks: {before_run: [./no-such-program, --reset]}\n")
    code, _, err = _run(config, monkeypatch)
    assert code == 3 and "cannot start './no-such-program'" in err, err


def test_callable_hooks_get_the_run_and_their_exceptions_fail_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hooks.py").write_text(
        textwrap.dedent(
            """
            import os
            from pathlib import Path

            def seed(run):
                Path(os.environ["HOOK_DIR"], "before.txt").write_text(run["EVALX_RUN_ID"])

            async def check(run):
                raise RuntimeError("the engine did not reset for " + run["EVALX_HOOK"])
            """
        )
    )
    config = _project(tmp_path, "hooks: {before_run: {callable: 'hooks.py:seed'}, after_run: {callable: 'hooks.py:check'}}\n")
    code, _, err = _run(config, monkeypatch)
    assert code == 0, err
    assert {c["status"] for c in read_cells(_run_dir(config))} == {"pass"}
    assert "RuntimeError: the engine did not reset for after_run" in err


def test_a_hook_callables_huge_exception_is_one_bounded_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What user code raises is bounded like a command hook's output (issue 30, class 9): one line, in the log too."""
    (tmp_path / "hooks.py").write_text(
        "def seed(run):\n    open('before.txt', 'w').write('x')\n\n"
        "def loud(run):\n    raise RuntimeError('line one\\n' + 'h' * 5_000_000)\n"
    )
    config = _project(tmp_path, "hooks: {before_run: {callable: 'hooks.py:seed'}, after_run: {callable: 'hooks.py:loud'}}\n")
    code, _, err = _run(config, monkeypatch)
    assert code == 0, err[:2000]
    assert len(err) < 5000, len(err)
    (line,) = [line for line in err.splitlines() if "after_run hook failed" in line]
    assert "RuntimeError: line one hhhh" in line and "(clipped: 5,000,023 characters)" in line, line[-200:]
    log = (_run_dir(config) / "hooks" / "after_run.log").read_text()
    assert len(log) < 5000 and "(clipped: 5,000,023 characters)" in log


def test_a_hook_callable_that_cannot_be_imported_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(tmp_path, "hooks:\n  before_run: {callable: 'hooks.py:missing'}\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert "evalconfig.yaml:6 hooks.before_run.callable:" in result.stderr, result.stderr


def test_a_hook_written_wrong_names_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(tmp_path, "hooks:\n  before_run: {timeout_s: 5}\n  after_runn: 'true'\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "hooks.before_run" in result.stderr and "after_runn" in result.stderr, result.stderr


def test_secrets_in_hook_output_are_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_API_KEY", "sk-hook-secret-1234567890")
    config = _project(tmp_path, "hooks: {before_run: 'echo x > before.txt; echo \"key is $ENGINE_API_KEY\"; exit 1'}\n")
    code, _, err = _run(config, monkeypatch)
    assert code == 3
    log = (_run_dir(config) / "hooks" / "before_run.log").read_text()
    assert "key is ***" in log and "sk-hook-secret" not in log and "sk-hook-secret" not in err


@pytest.mark.slow
def test_after_run_runs_after_ctrl_c(tmp_path: Path) -> None:
    agent = """
import os, time
from pathlib import Path

def answer(q):
    Path(os.environ["HOOK_DIR"], "busy.flag").touch()
    time.sleep(120)
    return "ok"
"""
    config = _project(tmp_path, "hooks: {after_run: 'echo \"$EVALX_RUN_ID\" > after.txt'}\n", agent=agent)
    import os

    done = interrupt_when(tmp_path / "busy.flag", config, sig=signal.SIGINT, env={**os.environ, "HOOK_DIR": str(tmp_path)})
    assert done.returncode == 3, done.err
    run_dir = _run_dir(config)
    assert (tmp_path / "after.txt").read_text().strip() == run_dir.name
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"


def test_sigterm_during_before_run_stops_the_hook_and_records_a_resumable_run(tmp_path: Path) -> None:
    """A CI cancel while before_run runs: not death on the spot (run.json left `running`, after_run skipped), but
    Ctrl-C's path: the hook's processes stopped, the run recorded as interrupted, after_run run, one line to resume."""
    import os

    config = _project(
        tmp_path,
        """
        hooks:
          before_run: 'touch busy.flag; sleep 600'
          after_run: 'touch cleaned.txt'
        """,
    )
    done = interrupt_when(tmp_path / "busy.flag", config, sig=signal.SIGTERM, env={**os.environ, "HOOK_DIR": str(tmp_path)})
    run_dir = _run_dir(config)
    assert done.returncode == 3, done.err
    assert done.err.strip() == f"evalx: interrupted during the before_run hook; no cell ran: resume with evalx run --resume {run_dir.name}"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert (tmp_path / "cleaned.txt").exists()
    # what CI runs next on that folder says what happened, not "no run"
    for command in ("report", "comment"):
        said = CliRunner().invoke(main, [command, str(run_dir)])
        assert said.exit_code == 2
        assert said.stderr.strip() == (
            f"evalx: {os.path.relpath(run_dir)}: no cell ran in this run (run.json: interrupted), nothing to report: "
            f"evalx run --resume {run_dir.name} runs them"
        )
