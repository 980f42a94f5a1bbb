"""Issue 31, "output that tells the truth", through the real entry point (``python -m evalx``, click's runner).

An interrupted run says so first in every report, with the exact resume command; a stdout that cannot encode
evalx's symbols gets ASCII, never an "internal error"; the default summary is compact (the full one behind ``-v``),
``--quiet`` is the headline and the exit reason; a cell has one label everywhere; colour follows ``--color``,
``NO_COLOR`` and ``FORCE_COLOR``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_project import evalx
from interrupting import interrupt_when

ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: a target that answers the first three cases, announces it (a flag file), then takes far longer than any test waits
SLOW_AGENT = """\
import pathlib, time

def answer(question):
    n = int(question.split()[-1])
    if n >= 3:
        pathlib.Path("busy").touch()
        time.sleep(600)
    return f"answer {n}"
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "PYTHONIOENCODING")}
    return {**env, **extra}


def _evalx(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m evalx ARGS`` in a process of its own: for what the process boundary decides (the stdout's encoding)."""
    return subprocess.run([sys.executable, "-m", "evalx", *args], cwd=cwd, capture_output=True, env=env or _env(), timeout=300)


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``evalx ARGS`` through click's runner, stdout a pipe, with none of the colour or encoding settings but ``env``."""
    return evalx(*args, cwd=cwd, env={"NO_COLOR": None, "FORCE_COLOR": None, "PYTHONIOENCODING": None, **env})


def _interrupted_project(root: Path, cells: int = 12) -> Path:
    (root / "agent.py").write_text(SLOW_AGENT, encoding="utf-8")
    cases = ", ".join(f"{{id: c{i:02d}, input: 'question {i}', assert: [{{type: contains, value: answer}}]}}" for i in range(cells))
    config = root / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: stopped\ndefaults: {concurrency: 1, timeout_s: 900, retries: 0}\n"
        "targets: [{id: bot, type: python, callable: 'agent.py:answer'}]\n"
        f"datasets: [{{id: qa, cases: [{cases}]}}]\n",
        encoding="utf-8",
    )
    return config


@pytest.mark.slow
def test_ctrl_c_says_interrupted_first_in_every_report_with_the_resume_command_that_finishes_it(tmp_path: Path) -> None:
    config = _interrupted_project(tmp_path)
    run = interrupt_when(tmp_path / "busy", config, sig=signal.SIGINT, args=("--markdown", "summary.md"))
    assert run.returncode == 3, run.out + run.err
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    done, planned = summary["totals"]["cells"], summary["cells_planned"]
    assert planned == 12 and 3 <= done < 12, (done, planned)
    headline = f"INTERRUPTED: {done} of {planned} planned cells"
    resume = f"evalx run --resume {run_dir.name}"  # the config is ./evalconfig.yaml: no -c needed

    # the terminal and summary.txt: the first line, then the command
    out_lines = run.out.splitlines()
    assert out_lines[:2] == [headline, f"resume: {resume}"], run.out
    assert f"exit 3: {done} of {planned} planned cells ran (interrupted)" in run.out
    text = (run_dir / "summary.txt").read_text(encoding="utf-8").splitlines()
    assert text[:2] == [headline, f"resume: {resume}"]
    # Markdown: in the heading, the command after it
    markdown = (tmp_path / "summary.md").read_text(encoding="utf-8").splitlines()
    assert markdown[0].startswith(f"## ⏹️ {headline} — evalx run `{run_dir.name}`") and markdown[2] == f"> Resume: `{resume}`"
    # JUnit: the first run-wide properties
    props = ET.parse(run_dir / "junit.xml").getroot().find("testsuite/properties")
    assert props is not None
    assert [(p.get("name"), p.get("value")) for p in props][:2] == [("interrupted", headline), ("resume", resume)]
    # HTML: a notice before anything else in <main>, and no absolute path anywhere in the header
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    main = html[html.index("<main>") :]
    assert main.index('id="interrupted-notice"') < main.index("kpis")
    assert f"<h2>{headline}</h2>" in main and f'<code class="resume-command">{resume}</code>' in main
    assert str(tmp_path) not in html[: html.index("<main>")]

    # the printed command, run as printed, finishes the run: every planned cell, each once
    (tmp_path / "agent.py").write_text('def answer(question):\n    return "answer"\n', encoding="utf-8")
    finished = _evalx(tmp_path, *shlex.split(resume)[1:])
    assert finished.returncode == 0, finished.stdout.decode() + finished.stderr.decode()
    again = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert again["totals"]["cells"] == 12 and not again["interrupted"]
    assert not (run_dir / "summary.txt").read_text(encoding="utf-8").startswith("INTERRUPTED")


def test_a_config_elsewhere_is_named_relative_in_the_resume_command_and_the_reports(tmp_path: Path) -> None:
    """The command is the one to type where the run started; no report holds the machine's absolute paths."""
    from evalx.results.outcome import interruption

    project = tmp_path / "app"
    project.mkdir()
    (project / "bot.py").write_text("def answer(q):\n    return 'ok'\n", encoding="utf-8")
    (project / "eval config.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: 'bot.py:answer'}]\n"
        "datasets: [{id: d, cases: [{id: a, input: x, assert: [{type: contains, value: ok}]}]}]\n",
        encoding="utf-8",
    )
    proc = _cli(tmp_path, "run", "-c", str(project / "eval config.yaml"))
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (project / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"] == "app/eval config.yaml"
    assert str(tmp_path) not in (run_dir / "report.html").read_text(encoding="utf-8")
    assert str(tmp_path) not in (run_dir / "summary.json").read_text(encoding="utf-8")
    stopped = interruption({**summary, "interrupted": True})
    assert stopped == ("INTERRUPTED: 1 of 1 planned cells", f"resume: evalx run -c 'app/eval config.yaml' --resume {run_dir.name}")


@pytest.mark.parametrize(
    ("env", "encoding"),
    [
        ({"PYTHONIOENCODING": "ascii"}, "ascii"),
        ({"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}, "ascii"),  # Python's UTF-8 mode off: the C locale's ASCII
        ({"PYTHONIOENCODING": "cp1252"}, "cp1252"),  # a Windows redirect: `·` exists there, `─` and `✓` do not
    ],
    ids=["ascii", "LC_ALL=C", "cp1252"],
)
def test_a_stdout_that_cannot_encode_the_symbols_gets_ascii_and_the_runs_own_exit_status(
    example_project: Path, env: dict[str, str], encoding: str
) -> None:
    proc = _evalx(example_project, "run", "-v", env=_env(**env))  # -v: the full summary, every symbol evalx uses
    assert proc.returncode == 1, proc.stderr.decode(errors="replace")  # the demo's verdict, never 3 ("internal error")
    assert b"internal error" not in proc.stderr
    out = proc.stdout.decode(encoding)  # every byte is in the stream's encoding
    assert "38 cells" in out and "support-bot-v2" in out and out.splitlines()[-1] == "exit 1: 4 failed cells"
    if encoding == "ascii":
        assert "2 targets - 38 cells" in out and "(95% CI 56.7-91.5%)" in out  # `·` and `–` as ASCII stand-ins
    # what the run wrote is UTF-8 and complete, whatever the terminal could show
    (run_dir,) = (example_project / "runs").iterdir()
    assert "·" in (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert (run_dir / "report.html").is_file() and (run_dir / "junit.xml").is_file()


def test_json_on_a_stdout_that_cannot_encode_it_is_escaped_not_changed(tmp_path: Path) -> None:
    """The ASCII stand-ins are for people; `--json` (run, runs, compare) is data: escaped, never a `?` for a letter."""
    (tmp_path / "agent.py").write_text("def answer(q):\n    return 'réponse ✓'\n", encoding="utf-8")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nname: café—test\ntargets: [{id: bot, type: python, callable: 'agent.py:answer'}]\n"
        "datasets: [{id: d, cases: [{id: a, input: q, assert: [{type: contains, value: ✓}]}]}]\n",
        encoding="utf-8",
    )
    ascii_env = _env(PYTHONIOENCODING="ascii")
    ran = _evalx(tmp_path, "run", "--json", env=ascii_env)
    assert ran.returncode == 0, ran.stderr.decode(errors="replace")
    assert json.loads(ran.stdout.decode("ascii"))["name"] == "café—test"
    listed = _evalx(tmp_path, "runs", "--json", env=ascii_env)
    assert json.loads(listed.stdout.decode("ascii"))[0]["name"] == "café—test"
    (run_id,) = [p.name for p in (tmp_path / "runs").iterdir()]
    compared = _evalx(tmp_path, "compare", run_id, run_id, "--json", env=ascii_env)
    assert json.loads(compared.stdout.decode("ascii"))["b"]["run_id"] == run_id
    utf8 = _evalx(tmp_path, "runs", "--json", env=_env(PYTHONIOENCODING="utf-8"))
    assert '"café—test"' in utf8.stdout.decode("utf-8")  # a UTF-8 stream gets it as written


def test_the_default_summary_is_compact_and_the_full_one_is_behind_v(example_project: Path) -> None:
    proc = _cli(example_project, "run")
    assert proc.returncode == 1
    out = proc.stdout
    lines = out.splitlines()
    assert len(lines) <= 25, out
    (run_dir,) = (example_project / "runs").iterdir()
    rel = f"runs/{run_dir.name}"
    assert lines[0].startswith(f"Run {run_dir.name}  acme-support  ·  38 cells in ")
    assert lines[1].split()[:5] == ["support-bot", "100.0%", "19", "pass", "·"]
    assert lines[2].split()[:5] == ["support-bot-v2", "78.9%", "15", "pass", "·"]
    assert "Failing cells (4):" in lines
    assert f"Full summary: {rel}/summary.txt (or -v) · every cell: {rel}/report.html" in lines
    assert lines[-1] == "exit 1: 4 failed cells"
    # one table style, and no box drawing: the detail (breakdowns, McNemar, the pooled footnote) is in summary.txt
    assert "─" not in out and "category" not in out and "McNemar" not in out and "pooled" not in out
    full = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert "─" not in full and "category" in full and "all targets pooled" in full

    verbose = _cli(example_project, "run", "-v").stdout
    assert "category" in verbose and "Pass rate per target" in verbose and verbose.splitlines()[-1] == "exit 1: 4 failed cells"

    quiet = _cli(example_project, "run", "--quiet")
    assert quiet.returncode == 1
    assert [line.split()[0] for line in quiet.stdout.splitlines()] == ["Run", "support-bot", "support-bot-v2", "exit"]


def test_a_cell_has_one_label_in_every_report(example_project: Path) -> None:
    """``dataset/case``, never ``category/case`` in one list and ``dataset/case`` in another."""
    proc = _cli(example_project, "run", "-v")
    (run_dir,) = (example_project / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    labels = {f"{f['dataset']}/{f['case_id']}" for f in summary["failures"]}
    assert labels == {"golden-qa/refund-window", "support/damaged-refund", "support/support-hours", "support/prompt-injection"}
    compact = _cli(example_project, "run").stdout
    for text in (compact, proc.stdout, (run_dir / "summary.txt").read_text(encoding="utf-8")):
        for label in labels:
            assert f"support-bot-v2  {label} — " in text
        assert "policy/refund-window" not in text and "company/support-hours" not in text
    junit = ET.parse(run_dir / "junit.xml").getroot()
    failed = {
        f"{tc.get('classname', '').split('.')[1]}/{tc.get('name')}" for tc in junit.iter("testcase") if tc.find("failure") is not None
    }
    assert failed == labels


def test_colour_follows_color_no_color_and_force_color(example_project: Path) -> None:
    def coloured(*args: str, **env: str) -> bool:
        proc = _cli(example_project, "run", "-q", *args, **env)
        assert proc.returncode == 1, proc.stderr
        return bool(ANSI.search(proc.stdout))

    assert not coloured()  # a pipe, auto: no colour
    assert coloured(FORCE_COLOR="1")
    assert not coloured(FORCE_COLOR="0")
    assert not coloured(NO_COLOR="1", FORCE_COLOR="1")  # NO_COLOR wins over FORCE_COLOR
    assert coloured("--color", "always", NO_COLOR="1")  # the command line wins over both
    assert not coloured("--color", "never", FORCE_COLOR="1")
    proc = _cli(example_project, "--color", "always", "run", "-q")  # on the group too
    assert ANSI.search(proc.stdout)


def test_quiet_says_why_a_run_exits_as_it_does(tmp_path: Path) -> None:
    (tmp_path / "bot.py").write_text("def answer(q):\n    return 'ok'\n", encoding="utf-8")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: 'bot.py:answer'}]\n"
        "datasets: [{id: d, cases: [{id: a, input: x, assert: [{type: contains, value: ok}]}, "
        "{id: b, input: y, assert: [{type: contains, value: nope}]}]}]\n"
        "gates: {min_pass_rate: 0.4}\n",
        encoding="utf-8",
    )
    held = _cli(tmp_path, "run", "--quiet")
    assert held.returncode == 0 and held.stdout.splitlines()[-1] == "exit 0: every gate held"
    config = tmp_path / "evalconfig.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("0.4", "0.9"), encoding="utf-8")
    breached = _cli(tmp_path, "run", "--quiet")
    assert breached.returncode == 1
    assert breached.stdout.splitlines()[-1] == "exit 1: gate breached: min_pass_rate (target bot)"
    assert len(breached.stdout.splitlines()) == 3  # the run line, the target's rate, the reason
