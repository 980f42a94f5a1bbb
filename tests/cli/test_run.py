"""`evalx run` end to end through the real CLI: files, statuses, JUnit, exit codes, secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main


def run_cli(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args, env=env)


def only_run_dir(project: Path, out: str = "runs") -> Path:
    (run_dir,) = list((project / out).iterdir())
    return run_dir


def results(run_dir: Path) -> list[dict]:  # type: ignore[type-arg]
    return read_cells(run_dir)


def test_default_config_runs_offline(example_project: Path, monkeypatch: pytest.MonkeyPatch, junit_schema) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(["run", "--junit", "ci/junit.xml"], example_project, monkeypatch)
    assert res.exit_code == 1, res.output  # the v2 agent has regressions on purpose
    run_dir = only_run_dir(example_project)
    for name in ("results.jsonl", "summary.json", "summary.txt", "junit.xml", "config.yaml", "run.json"):
        assert (run_dir / name).is_file(), name
    rows = results(run_dir)
    statuses = {r["status"] for r in rows}
    assert statuses == {"pass", "fail"}  # the judge grades the model-graded checks: nothing skipped
    assert [r["index"] for r in rows] == sorted(r["index"] for r in rows)  # matrix order
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["totals"]["cells"] == len(rows) == 38
    junit_schema.validate(str(run_dir / "junit.xml"))
    assert (example_project / "ci/junit.xml").read_bytes() == (run_dir / "junit.xml").read_bytes()
    assert "Failing cells (4):" in res.stdout
    assert "Traceback" not in res.output


def test_golden_qa_published_format(example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = run_cli(["run", "--dataset", "golden-qa", "--target", "support-bot", "-q"], example_project, monkeypatch)
    assert res.exit_code == 0, res.output  # the current bot answers every golden question right
    by_case = {r["case_id"]: r for r in results(only_run_dir(example_project))}
    assert by_case["order-status-exact"]["status"] == "pass"  # exact_match, normalised
    assert by_case["percent-of-order"]["status"] == "pass"  # numeric_close within 1%
    assert by_case["founding-year"]["status"] == "pass"  # a year is kept when expected is one
    assert by_case["refund-window"]["status"] == "pass"
    assert by_case["discount-code"]["status"] == "pass"  # the whole sentence, compared normalised (case, final period)
    judged = by_case["shipping-time-summary"]
    assert judged["status"] == "pass"  # semantic_similar, graded by the config's offline judge
    (verdict,) = [a for a in judged["assertions"] if a["type"] == "semantic_similar"]
    assert verdict["passed"] is True

    # without the judge the same check is inconclusive (skipped), and the summary says how to add one
    config = example_project / "evalconfig.yaml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text[: text.index("\njudge:")] + text[text.index("\nassert:") :], encoding="utf-8")
    res = run_cli(["run", "--dataset", "golden-qa", "--target", "support-bot", "--case", "shipping-*"], example_project, monkeypatch)
    assert res.exit_code == 1, res.output  # nothing graded
    (folder,) = [line.removeprefix("results: ") for line in res.stderr.splitlines() if line.startswith("results: ")]
    (skipped,) = read_cells(example_project / folder)
    assert skipped["status"] == "skipped"
    (verdict,) = [a for a in skipped["assertions"] if a["type"] == "semantic_similar"]
    assert verdict["passed"] is None and verdict["reason"] == "no judge configured"
    assert "no judge configured — add one: `judge: {target: ID}` names a model target (docs/judge.md)" in res.stdout


def test_crashing_target_is_an_error_cell_and_the_run_goes_on(example_project: Path, monkeypatch: pytest.MonkeyPatch, junit_schema) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(["run", "--target", "crashy-bot", "--dataset", "smoke", "-q"], example_project, monkeypatch)
    run_dir = only_run_dir(example_project)
    rows = results(run_dir)
    crash = next(r for r in rows if r["case_id"] == "crash-test")
    assert crash["status"] == "error"
    assert crash["error"] == "RuntimeError: the agent crashed while planning"
    assert "Traceback (most recent call last)" in crash["traceback"]
    assert next(r for r in rows if r["case_id"] == "greeting")["status"] == "pass"
    assert res.exit_code == 1
    assert "Traceback" not in res.output  # kept in results, never printed
    junit = (run_dir / "junit.xml").read_text()
    assert "<error" in junit and "RuntimeError" in junit
    junit_schema.validate(str(run_dir / "junit.xml"))


def test_exit_0_when_everything_passes(example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = run_cli(["run", "--target", "support-bot", "--case", "order-*", "--dataset", "support", "-q"], example_project, monkeypatch)
    assert res.exit_code == 0, res.output
    assert {r["case_id"] for r in results(only_run_dir(example_project))} == {"order-lookup", "order-json"}


def test_every_cell_of_a_target_errors_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bot.py").write_text("def answer(q):\n    raise ValueError('boom')\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: a, input: x, assert: [{type: completed}]}, {id: b, input: y, assert: [{type: completed}]}]}]\n"
    )
    res = run_cli(["run", "-q"], tmp_path, monkeypatch)
    assert res.exit_code == 3
    assert res.stderr.count("every cell failed") == 1
    assert "ValueError: boom" in res.stderr


def test_dry_run_lists_cells_and_runs_nothing(example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = run_cli(["run", "--dry-run", "--category", "orders"], example_project, monkeypatch)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith("10 cells: 5 cases × 2 targets")
    assert not (example_project / "runs").exists()


def test_timeout_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bot.py").write_text(
        "import asyncio\nasync def answer(q):\n    if q == 'slow':\n        await asyncio.sleep(30)\n    return q\n"
    )
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ndefaults: {timeout_s: 2}\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: slow, input: slow, assert: [{type: completed}]}, {id: fast, input: fast, assert: [{type: completed}]}]}]\n"
    )
    res = run_cli(["run", "-q"], tmp_path, monkeypatch)
    assert res.exit_code == 1, res.output
    by_case = {r["case_id"]: r for r in results(only_run_dir(tmp_path))}
    assert by_case["slow"]["status"] == "error" and by_case["slow"]["error"] == "timed out after 2s"
    assert by_case["fast"]["status"] == "pass"


def test_callable_gets_case_and_returns_trajectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bot.py").write_text(
        "def answer(question, case):\n"
        "    return {'text': case['vars']['greeting'] + ' ' + question, 'tool_calls': [{'name': 'search', 'args': {'q': question}}],\n"
        "            'usage': {'input_tokens': 10, 'output_tokens': 5}}\n"
    )
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: a, input: world, vars: {greeting: hello},\n"
        "  assert: [{type: equals, value: hello world}, {type: must_call_tools, tools: [search]}, {type: max_tokens, value: 5}]}]}]\n"
    )
    res = run_cli(["run", "-q", "--json"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["totals"]["pass"] == 1
    (row,) = results(only_run_dir(tmp_path))
    assert row["output"]["tool_calls"] == [{"name": "search", "args": {"q": "world"}, "result": None}]


def test_secrets_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-0123456789abcdef"
    (tmp_path / "bot.py").write_text(
        "import os\ndef answer(q):\n    raise RuntimeError('auth failed with ' + os.environ['MY_API_TOKEN'])\n"
    )
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nvars: {token: '${MY_API_TOKEN}'}\n"
        "targets: [{id: bot, type: python, callable: bot.py:answer}, {id: ok, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: a, input: x, assert: [{type: completed}]}]}]\n"
    )
    res = run_cli(["run"], tmp_path, monkeypatch, env={"MY_API_TOKEN": secret})
    assert secret not in res.output
    run_dir = only_run_dir(tmp_path)
    for f in run_dir.iterdir():
        assert secret not in f.read_text(), f.name
    assert "***" in (run_dir / "results.jsonl").read_text()


def test_init_scaffolds_a_working_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = run_cli(["init", "proj"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    res = run_cli(["run", "-c", "proj/evalconfig.yaml", "-q"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    again = run_cli(["init", "proj"], tmp_path, monkeypatch)
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_version_and_help() -> None:
    assert CliRunner().invoke(main, ["--version"]).output.startswith("evalx, version ")
    assert "validate" in CliRunner().invoke(main, ["--help"]).output


def test_a_lone_surrogate_in_an_answer_is_kept_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, junit_schema) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "bot.py").write_text("def answer(q):\n    return 'bad \\ud800 text'\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: a, input: x, assert: [{type: contains, value: bad}]}]}]\n"
    )
    res = run_cli(["run", "-q"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    run_dir = only_run_dir(tmp_path)
    (row,) = results(run_dir)
    assert row["output"]["text"] == "bad \ufffd text"  # made safe where it entered (issue 13): U+FFFD, readable everywhere
    junit_schema.validate(str(run_dir / "junit.xml"))


def test_lone_surrogates_from_a_target_do_not_lose_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a target's broken text (a lone surrogate cannot be UTF-8) in its output and in its error
    (tmp_path / "bot.py").write_text(
        "def answer(q):\n    if q == 'bad':\n        raise ValueError('broken \\udc80 bytes')\n    return 'half \\ud800 a pair'\n"
    )
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: bad, input: bad, assert: [{type: completed}]},"
        " {id: odd, input: odd, assert: [{type: contains, value: nothing}]}]}]\n"
    )
    res = run_cli(["run", "-q"], tmp_path, monkeypatch)
    assert res.exit_code == 1, res.output
    run_dir = only_run_dir(tmp_path)
    for name in ("results.jsonl", "summary.json", "summary.txt", "junit.xml", "report.html"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["totals"]["error"] == 1 and summary["totals"]["fail"] == 1
    assert "broken \ufffd bytes" in json.dumps(summary, ensure_ascii=False)  # made safe where it entered (issue 13)


def test_the_process_exits_without_walking_its_heap(tmp_path: Path) -> None:
    """The CLI freezes the heap for shutdown (issue 29: ~0.1 s of every command): a handler registered before the
    command runs after it, and sees the objects frozen; the command's own output and exit status are untouched."""
    import subprocess
    import sys

    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: sys.stderr.write(f'frozen={gc.get_freeze_count() > 1000}\\n'))\n"
        "from evalx.cli import main\n"
        "main(['--version'], prog_name='evalx')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("evalx"), done.stdout
    assert "frozen=True" in done.stderr, done.stderr
