"""`evalx run --max-failures N` and `-x`: no new cell starts once N cells failed or errored; the run is resumable, exits 1."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import evalx
from evalx.cli import main

CONFIG = """version: 1
defaults: {concurrency: 1}
targets:
  - id: bot
    type: python
    callable: agent.py:answer
datasets:
  - id: smoke
    path: smoke.jsonl
"""


def _project(tmp_path: Path, failing: int = 10, passing: int = 0) -> Path:
    (tmp_path / "evalconfig.yaml").write_text(CONFIG)
    (tmp_path / "agent.py").write_text("def answer(text):\n    return 'no'\n")
    lines = [{"id": f"f{i:02d}", "input": "q", "expected": "yes", "assert": [{"type": "equals"}]} for i in range(failing)]
    lines += [{"id": f"p{i:02d}", "input": "q", "expected": "no", "assert": [{"type": "equals"}]} for i in range(passing)]
    (tmp_path / "smoke.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


def _results(run_dir: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return [line for line in lines if line.get("case_id")]


def test_x_stops_at_the_first_failure_and_resume_finishes_the_run(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    stopped = CliRunner().invoke(main, ["run", "-x", "-q"])
    assert stopped.exit_code == 1, stopped.output
    (run_dir,) = (project / "runs").iterdir()
    run_id = run_dir.name
    line = f"stopped early (-x): 1 cell failed or errored; 9 planned cells not run (finish with: evalx run --resume {run_id})"
    assert line in stopped.stderr
    assert len(_results(run_dir)) == 1
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_early"] == line and summary["cells_planned"] == 10

    resumed = CliRunner().invoke(main, ["run", "--resume", run_id, "-q"])
    assert resumed.exit_code == 1, resumed.output  # every case fails: a failing run, now complete
    assert "stopped early" not in resumed.stderr
    assert len(_results(run_dir)) == 10
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
    assert "stopped_early" not in json.loads((run_dir / "summary.json").read_text())


def test_max_failures_counts_failures_not_passes(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = _project(tmp_path, failing=0, passing=4)
    monkeypatch.chdir(project)
    (project / "smoke.jsonl").write_text(
        (project / "smoke.jsonl").read_text()
        + "".join(json.dumps({"id": f"z{i}", "input": "q", "expected": "yes", "assert": [{"type": "equals"}]}) + "\n" for i in range(5))
    )
    result = CliRunner().invoke(main, ["run", "--max-failures", "3", "-q"])
    assert result.exit_code == 1
    (run_dir,) = (project / "runs").iterdir()
    statuses = [r["status"] for r in _results(run_dir)]
    assert statuses.count("pass") == 4 and statuses.count("fail") == 3
    assert "stopped early (--max-failures 3): 3 cells failed or errored; 2 planned cells not run" in result.stderr


def test_a_run_under_its_limit_is_not_stopped(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = _project(tmp_path, failing=2, passing=2)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["run", "--max-failures", "3", "-q"])
    assert result.exit_code == 1 and "stopped early" not in result.stderr
    (run_dir,) = (project / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"


def test_x_and_a_different_max_failures_are_refused(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(_project(tmp_path))
    result = CliRunner().invoke(main, ["run", "-x", "--max-failures", "2"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "evalx: -x is --max-failures 1; give one of -x and --max-failures 2"


def test_the_api_takes_max_failures(tmp_path: Path) -> None:
    project = _project(tmp_path)
    result = evalx.run(project / "evalconfig.yaml", max_failures=2)
    assert result.exit_code == 1
    assert len(_results(result.run_dir)) == 2
    assert result.summary["stopped_early"].startswith("stopped early (--max-failures 2): 2 cells failed or errored; 8 planned")


def test_a_stopped_run_says_so_first_in_every_report_with_the_command_that_finishes_it(tmp_path: Path) -> None:
    """--max-failures leaves cells unrun: the terminal, summary.txt, Markdown, JUnit, HTML, the PR comment and the
    annotations open with ``STOPPED EARLY: N of M planned cells`` and the resume command, which names the config it ran."""
    from cli_project import evalx as cli

    (tmp_path / "suite").mkdir()
    project = _project(tmp_path / "suite")
    (project / "evalconfig.yaml").rename(project / "nightly.yaml")
    stopped = cli(
        "run", "-c", "suite/nightly.yaml", "--max-failures", "2", "--markdown", "step.md", cwd=tmp_path, env={"GITHUB_ACTIONS": "true"}
    )
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    (run_dir,) = (project / "runs").iterdir()
    headline, resume = "STOPPED EARLY: 2 of 10 planned cells", f"evalx run -c suite/nightly.yaml --resume {run_dir.name}"
    assert stopped.stdout.splitlines()[:2] == [headline, f"resume: {resume}"], stopped.stdout
    assert "exit 1: 2 of 10 planned cells ran (stopped early)" in stopped.stdout
    assert f"(finish with: {resume})" in stopped.stderr
    assert (run_dir / "summary.txt").read_text().splitlines()[:2] == [headline, f"resume: {resume}"]
    markdown = (tmp_path / "step.md").read_text().splitlines()
    assert markdown[0].startswith(f"## ⏹️ {headline}") and markdown[2] == f"> Resume: `{resume}`"
    html = (run_dir / "report.html").read_text()
    assert f"<h2>{headline}</h2>" in html and f'<code class="resume-command">{resume}</code>' in html
    assert "stopped early (--max-failures 2)" in html
    assert f'name="interrupted" value="{headline}"' in (run_dir / "junit.xml").read_text()
    annotations = [line for line in stopped.stderr.splitlines() if line.startswith("::")]
    assert annotations[0] == f"::error title=evalx%3A STOPPED EARLY%3A 2 of 10 planned cells::{headline}; resume: {resume}"
    assert len(annotations) == 3  # then the two failing cases
    comment = cli("comment", "-c", "suite/nightly.yaml", "latest", cwd=tmp_path)
    assert f"> ⏹️ **{headline}**" in comment.stdout and f"> Resume: `{resume}`" in comment.stdout

    rendered = cli("report", "-c", "suite/nightly.yaml", "latest", cwd=tmp_path)
    assert rendered.returncode == 0 and rendered.stderr.strip() == f"evalx: {headline}; resume: {resume}"
    assert (run_dir / "summary.txt").read_text().splitlines()[:2] == [headline, f"resume: {resume}"]

    finished = cli(*resume.split()[1:], "-q", cwd=tmp_path)
    assert finished.returncode == 1 and len(_results(run_dir)) == 10
    assert not (run_dir / "summary.txt").read_text().startswith("STOPPED EARLY")
