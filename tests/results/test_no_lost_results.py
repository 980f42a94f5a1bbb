"""Issue 13, data loss: no target, server or damaged file may lose a run's results or its reports.

Each test goes through the CLI: a hostile callable (written into the test's
project), the scripted engine (tests/engine_server.py) or the fake provider
(tests/_fake_llm.py), all on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fake_llm import OPENAI_KEY, Canned, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner, Result
from conftest import ENGINE_TEST_KEY, REPO
from engine_server import SCENARIOS, Call, EngineServer, scenario, sse
from results_file import read_cells

from evalx.cli import main

REPORTS = ("results.jsonl", "summary.json", "summary.txt", "junit.xml", "report.html", "run.json")


def cli(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args)


def project(tmp_path: Path, bot: str, targets: list[dict[str, Any]], inputs: list[Any], **extra: Any) -> Path:
    (tmp_path / "bot.py").write_text(textwrap.dedent(bot), encoding="utf-8")
    config = {
        "version": 1,
        "name": "hostile",
        "targets": targets,
        "datasets": [{"id": "d", "cases": [{"id": f"c{i}", "input": v, "assert": [{"type": "completed"}]} for i, v in enumerate(inputs)]}],
        **extra,
    }
    (tmp_path / "evalconfig.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return tmp_path


def the_run(root: Path) -> Path:
    (run_dir,) = list((root / "runs").iterdir())
    return run_dir


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return read_cells(run_dir)


def assert_reports_written(run_dir: Path) -> None:
    for name in REPORTS:
        assert (run_dir / name).is_file(), name
    assert not list(run_dir.glob("*.tmp")), list(run_dir.glob("*.tmp"))
    for name in REPORTS:
        (run_dir / name).read_bytes().decode("utf-8")  # valid UTF-8 throughout


PY_TARGETS = [
    {"id": "sync", "type": "python", "callable": "bot.py:answer"},
    {"id": "async", "type": "python", "callable": "bot.py:aanswer"},
]


# ---------------------------------------------------------------- lone surrogates


@scenario("surrogate_error")
async def _surrogate_error(call: Call) -> Any:
    await call.open()
    await call.write(sse("text_delta", {"text": "half \ud800 done"}))
    await call.write(sse("error", {"code": "TOOL_FAILED", "message": "the sandbox \udc80 crashed"}))
    return await call.end()


def test_lone_surrogates_from_a_callable_never_break_reports_resume_or_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bot = """
        def answer(q):
            if q == "raise":
                raise ValueError("bad \\ud800 thing")
            if q == "mapping":
                return {"text": "ok", "tool_calls": [{"name": "t\\udfff", "args": {"k\\ud801": ["v\\udc00"]}}], "extra": "x\\ud8ff"}
            return "out \\udc80 x"
        async def aanswer(q):
            return answer(q)
    """
    root = project(tmp_path, bot, PY_TARGETS, ["raise", "mapping", "text"])
    res = cli(["run", "-q"], root, monkeypatch)
    assert res.exit_code == 1, res.output  # two cells error, the rest pass: no internal error
    run_dir = the_run(root)
    assert_reports_written(run_dir)
    by = {(r["target"], r["case_id"]): r for r in rows(run_dir)}
    assert len(by) == 6
    assert by[("sync", "c0")]["error"] == "ValueError: bad \ufffd thing"
    assert by[("async", "c2")]["output"]["text"] == "out \ufffd x"
    assert by[("sync", "c1")]["output"]["tool_calls"][0] == {"name": "t\ufffd", "args": {"k\ufffd": ["v\ufffd"]}, "result": None}
    json.dumps(rows(run_dir), ensure_ascii=False).encode("utf-8")  # not kept as a JSON escape either: every line reads back clean
    assert cli(["report", str(run_dir)], root, monkeypatch).exit_code == 0
    resumed = cli(["run", "-q", "--resume", run_dir.name], root, monkeypatch)
    assert resumed.exit_code == 1, resumed.output
    assert "0 of 6" not in resumed.output and "running 0" in resumed.output
    captured = cli(["capture", str(run_dir), "--case", "c2", "--out", "cases"], root, monkeypatch)
    assert captured.exit_code == 0, captured.output


def test_lone_surrogates_from_an_engine_error_event(tmp_path: Path, engine_server: EngineServer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "surrogate_error" in SCENARIOS
    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)
    target = {"id": "agent", "type": "engine", "url": engine_server.url, "api_key": "${ENGINE_KEY}", "retries": 0}
    root = project(tmp_path, "", [target], [{"scenario": "surrogate_error", "message": "hi"}, {"scenario": "normal", "message": "hi"}])
    res = cli(["run", "-q"], root, monkeypatch)
    assert res.exit_code == 1, res.output
    run_dir = the_run(root)
    assert_reports_written(run_dir)
    bad = next(r for r in rows(run_dir) if r["case_id"] == "c0")
    assert bad["status"] == "error" and "sandbox \ufffd crashed" in bad["error"], bad["error"]
    assert cli(["report", str(run_dir)], root, monkeypatch).exit_code == 0


def test_lone_surrogates_from_a_provider_error_message(tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.script(Canned(400, {"error": {"message": "model \ud800 is loading"}}, paths=("/v1/chat/completions",)))
    target = {"id": "mini", "type": "provider", "provider": "openai", "model": "m", "base_url": f"{server.url}/v1", "api_key": OPENAI_KEY}
    root = project(tmp_path, "", [target], ["What is 2 + 2?", "What is the capital of France?"], defaults={"concurrency": 1})
    res = cli(["run", "-q", "--no-cache"], root, monkeypatch)
    assert res.exit_code == 1, res.output
    run_dir = the_run(root)
    assert_reports_written(run_dir)
    errors = [r["error"] for r in rows(run_dir) if r["error"]]
    assert len(errors) == 1 and "model \ufffd is loading" in errors[0], errors


# ---------------------------------------------------------------- BaseException from a target

EXITING_BOT = """
    import sys

    class Custom(BaseException):
        pass

    def answer(q):
        if q == "exit0":
            sys.exit(0)
        if q == "exit5":
            raise SystemExit(5)
        if q == "kbi":
            raise KeyboardInterrupt
        if q == "genexit":
            raise GeneratorExit
        if q == "custom":
            raise Custom("mine")
        return q

    async def aanswer(q):
        return answer(q)
"""


def test_a_target_that_exits_or_raises_base_exceptions_only_fails_its_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, EXITING_BOT, PY_TARGETS, ["exit0", "exit5", "kbi", "genexit", "custom", "fine"], defaults={"concurrency": 2})
    res = cli(["run", "-q"], root, monkeypatch)
    assert res.exit_code == 1, res.output  # errors, not a green CI, not the target's exit status
    assert "Traceback" not in res.output
    run_dir = the_run(root)
    assert_reports_written(run_dir)
    by = {(r["target"], r["case_id"]): r for r in rows(run_dir)}
    assert len(by) == 12
    for target in ("sync", "async"):
        assert by[(target, "c0")]["error"] == "SystemExit: 0"
        assert by[(target, "c1")]["error"] == "SystemExit: 5"
        assert by[(target, "c2")]["error"] == "KeyboardInterrupt"
        assert by[(target, "c3")]["error"] == "GeneratorExit"
        assert by[(target, "c4")]["error"] == "Custom: mine"
        assert "bot.py" in by[(target, "c4")]["traceback"]
        assert by[(target, "c5")]["status"] == "pass"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["interrupted"] is False and summary["totals"]["cells"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_real_sigterm_or_ctrl_c_still_stops_the_run_with_partial_reports(tmp_path: Path, sig: signal.Signals) -> None:
    bot = """
        import pathlib, time
        def answer(q):
            if q == "block":
                pathlib.Path("started").write_text("x")
                time.sleep(60)
            return q
    """
    root = project(tmp_path, bot, [PY_TARGETS[0]], ["fine", "block"], defaults={"concurrency": 1, "timeout_s": 120})
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "evalx", "run", "-q"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        import select

        for _ in range(2000):  # wait for the target to start: poll for its file, no fixed sleep
            if (root / "started").exists():
                break
            select.select([], [], [], 0.01)
        assert (root / "started").exists()
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 3, err.decode()
    run_dir = the_run(root)
    assert_reports_written(run_dir)
    assert json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["interrupted"] is True


# ---------------------------------------------------------------- output that cannot be stored


def test_output_that_cannot_be_serialised_is_the_cells_error_and_resume_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bot = """
        from evalx.models import Trajectory

        def answer(q):
            if q == "cycle":
                d = {"text": "x"}
                d["raw"] = d
                return d
            if q == "listcycle":
                loop = []
                loop.append(loop)
                return {"text": "x", "tool_calls": [{"name": "t", "args": loop}]}
            if q == "deep":
                v = []
                for _ in range(100_000):
                    v = [v]
                return Trajectory(text="x", raw=v)
            if q == "object":
                return {"text": "x", "raw": object()}
            if q == "badkey":
                return {"text": "x", "raw": {(1, 2): "a tuple key"}}
            if q == "badrepr":
                return {"text": "x", "raw": BadRepr()}
            return q

        class BadRepr:
            def __repr__(self):
                raise RuntimeError("no repr")

        async def aanswer(q):
            return answer(q)
    """
    root = project(tmp_path, bot, PY_TARGETS, ["cycle", "listcycle", "deep", "object", "fine", "badkey", "badrepr"])
    res = cli(["run", "-q"], root, monkeypatch)
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    run_dir = the_run(root)
    assert_reports_written(run_dir)
    by = {(r["target"], r["case_id"]): r for r in rows(run_dir)}
    assert len(by) == 14
    for target in ("sync", "async"):
        for case in ("c0", "c1", "c2"):
            assert by[(target, case)]["status"] == "error"
            assert "cannot store" in by[(target, case)]["error"] and "contains itself" in by[(target, case)]["error"]
        assert by[(target, "c3")]["status"] == "pass"  # an object that is not JSON is stored as its repr
        assert by[(target, "c3")]["output"]["raw"].startswith("<object object")
        assert by[(target, "c4")]["status"] == "pass"
        assert by[(target, "c5")]["status"] == "error"
        assert by[(target, "c5")]["error"].startswith("evalx could not store this cell's output: TypeError: keys must be")
        assert by[(target, "c6")]["output"]["raw"] == "<BadRepr object: repr failed: RuntimeError>"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["totals"]["error"] == 8  # the summary agrees with the lines
    resumed = cli(["run", "-q", "--resume", run_dir.name], root, monkeypatch)
    assert "14 of 14 cells have results, running 0" in resumed.output, resumed.output
    assert len(rows(run_dir)) == 14


#: a target's values and exceptions whose own methods raise what is not an Exception: the run must keep going (issue 30)
WORSE_BOT = """
    import json, sys

    class ReprExits:
        def __repr__(self):
            raise SystemExit(3)

    class ReprInterrupts:
        def __repr__(self):
            raise KeyboardInterrupt

    class StrExits(Exception):
        def __str__(self):
            raise SystemExit(5)

    def answer(q):
        q = q[-1]["content"] if isinstance(q, list) else q
        if q == "repr-exits":
            return {"text": "ok", "raw": ReprExits()}
        if q == "repr-interrupts":
            return {"text": "ok", "raw": ReprInterrupts()}
        if q == "str-exits":
            raise StrExits("x")
        if q == "tuple-keys":
            return {"text": "ok", "raw": {(1, 2): "a tuple key"}}
        return "ok " + q

    def grade(prompt, **kw):
        graded = kw["case"]["metadata"]["judge"]["output"]
        if "judge-exits" in graded:
            sys.exit(4)
        if "judge-str-exits" in graded:
            raise StrExits("y")
        return json.dumps({"pass": True, "score": 1, "reason": "fine"})
"""


def test_values_and_exceptions_whose_methods_exit_stay_their_cells_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``__repr__`` raising SystemExit or KeyboardInterrupt, an exception whose ``__str__`` exits, a Python judge that
    calls sys.exit, and output JSON cannot hold in a cached cell or a conversation's turn: each ends as its own cell,
    never the run (they stopped it with the target's exit status or "internal error")."""
    inputs = ["repr-exits", "repr-interrupts", "str-exits", "tuple-keys", "judge-exits", "judge-str-exits", "fine"]
    targets = [{"id": "bot", "type": "python", "callable": "bot.py:answer"}, {"id": "judge", "type": "python", "callable": "bot.py:grade"}]
    root = project(tmp_path, WORSE_BOT, targets, inputs, defaults={"cache": True, "targets": ["bot"]}, judge={"target": "judge"})
    config = yaml.safe_load((root / "evalconfig.yaml").read_text())
    cases = config["datasets"][0]["cases"]
    for case in cases[4:6]:
        case["assert"] = [{"type": "llm_judge", "rubric": "is fine"}]
    cases.append({"id": "conversation", "turns": [{"input": "fine"}, {"input": "tuple-keys"}], "assert": [{"type": "completed"}]})
    (root / "evalconfig.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for attempt in ("fresh", "cached"):
        res = cli(["run", "-q"], root, monkeypatch)
        assert res.exit_code == 1, (attempt, res.output)  # errored cells, not the target's exit status, not "internal error"
        assert "internal error" not in res.output and "Traceback" not in res.output
        run_dir = max((root / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
        assert_reports_written(run_dir)
        by = {r["case_id"]: r for r in rows(run_dir)}
        assert len(by) == 8, (attempt, sorted(by))
        assert by["c0"]["status"] == "pass" and by["c0"]["output"]["raw"] == "<ReprExits object: repr failed: SystemExit>"
        assert by["c1"]["status"] == "pass" and by["c1"]["output"]["raw"] == "<ReprInterrupts object: repr failed: KeyboardInterrupt>"
        assert by["c2"]["status"] == "error" and by["c2"]["error"] == "StrExits"
        assert by["c3"]["status"] == "error" and by["c3"]["error"].startswith("evalx could not store this cell's output: TypeError")
        judged = {case: by[case]["assertions"][0]["error"] for case in ("c4", "c5")}
        assert judged == {"c4": "the judge call failed: SystemExit: 4", "c5": "the judge call failed: StrExits"}, judged
        assert by["c6"]["status"] == "pass"
        turned = by["conversation"]
        assert turned["status"] == "error" and turned["error"].startswith("evalx could not store this cell's output: TypeError")
        assert [t["input"] for t in turned["turns"]] == ["fine", "tuple-keys"] and turned["turns"][1]["output"] == {"text": "ok"}
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        assert summary["interrupted"] is False and summary["totals"]["cells"] == 8


def test_user_code_that_exits_while_it_is_imported_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target module or a plugin that calls sys.exit() at import ended `evalx run` and `validate` with its status
    and not a word; now one line naming the module and the key, exit 2."""
    root = project(tmp_path, "import sys\nsys.exit(3)\n\ndef answer(q):\n    return q\n", [PY_TARGETS[0]], ["fine"])
    for command in (["run", "-q"], ["validate"]):
        res = cli(command, root, monkeypatch)
        assert res.exit_code == 2, (command, res.exit_code, res.output)
        assert "targets[0].callable: importing 'bot.py' raised SystemExit: 3" in res.output, res.output
    (root / "bot.py").write_text("def answer(q):\n    return q\n")
    (root / "checks.py").write_text("import sys\nsys.exit(4)\n")
    config = yaml.safe_load((root / "evalconfig.yaml").read_text())
    config["plugins"] = ["checks.py"]
    (root / "evalconfig.yaml").write_text(yaml.safe_dump(config))
    res = cli(["run", "-q"], root, monkeypatch)
    assert res.exit_code == 2 and "plugin failed: importing 'checks.py' raised SystemExit: 4" in res.output, res.output


# ---------------------------------------------------------------- one writer per run folder


def test_a_second_writer_of_a_run_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bot = """
        import pathlib, time
        def answer(q):
            if q == "hold":
                pathlib.Path("started").write_text("x")
                while not pathlib.Path("go").exists():
                    time.sleep(0.01)
            return q
    """
    root = project(tmp_path, bot, [PY_TARGETS[0]], ["fine", "hold", "after"], defaults={"concurrency": 1})
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    first = subprocess.Popen(
        [sys.executable, "-m", "evalx", "run", "-q"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        import select

        for _ in range(2000):
            if (root / "started").exists():
                break
            select.select([], [], [], 0.01)
        assert (root / "started").exists()
        run_dir = the_run(root)
        for _ in range(2):  # twice: a refused writer leaves nothing behind
            second = cli(["run", "-q", "--resume", run_dir.name], root, monkeypatch)
            assert second.exit_code == 2, second.output
            assert f"evalx: run {run_dir.name} is in use by another evalx process: wait for it to finish" in second.stderr, second.output
            assert "Traceback" not in second.output
        (root / "go").write_text("x")
        _out, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err.decode()
    assert sorted(r["case_id"] for r in rows(run_dir)) == ["c0", "c1", "c2"]
    assert json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["status"] == "complete"
    # the lock went with the first process: resuming the finished run works now
    again = cli(["run", "-q", "--resume", run_dir.name], root, monkeypatch)
    assert again.exit_code == 0, again.output
    assert "3 of 3 cells have results, running 0" in again.output


# ---------------------------------------------------------------- damaged results.jsonl


def test_report_and_compare_name_damaged_and_duplicate_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, "def answer(q):\n    return q\n", [PY_TARGETS[0]], [f"q{i}" for i in range(10)])
    assert cli(["run", "-q"], root, monkeypatch).exit_code == 0
    run_dir = the_run(root)
    head, *good = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    assert b'"kind":"run"' in head and len(good) == 10  # the run record, then a line a cell
    damaged = [
        head,
        good[0],
        b"\0" * 4096 + good[1],  # a NUL block before a whole line: the line is still read
        good[2][:40] + b"\0" * 512 + b"\n",  # a line cut by a NUL block: lost
        b"garbage {{{\n",
        good[3],
        good[3],  # the same cell twice (two writers)
        good[4],
        b"[1, 2]\n",  # JSON, but not a result
        *good[5:9],
        good[9][:-30],  # torn last line
    ]
    (run_dir / "results.jsonl").write_bytes(b"".join(damaged))
    res = cli(["report", str(run_dir)], root, monkeypatch)
    assert res.exit_code == 0, res.output
    assert "unreadable line(s) skipped (lines 4, 5, 9, 14)" in res.stderr, res.stderr
    assert "1 duplicate line(s) of 1 cell(s) ignored (cell 3)" in res.stderr
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["totals"]["cells"] == 8  # not 10, not 11
    assert summary["unreadable_lines"] == [4, 5, 9, 14]
    assert summary["duplicate_cells"] == [3]
    compared = cli(["compare", str(run_dir), str(run_dir)], root, monkeypatch)
    assert compared.exit_code == 0, compared.output
    assert compared.stderr.count("unreadable line(s) skipped") == 2
    # --resume keeps the readable lines once each and runs the two lost cells again
    resumed = cli(["run", "-q", "--resume", run_dir.name], root, monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    assert "running 2" in resumed.stderr
    assert sorted(r["index"] for r in rows(run_dir)) == list(range(10))
    clean = cli(["report", str(run_dir)], root, monkeypatch)
    assert "warning" not in clean.stderr
    assert "unreadable_lines" not in json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
