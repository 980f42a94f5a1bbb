"""Kill a real `python -m evalx run` mid-run, then `--resume`: every cell exactly once, none redone.

The target logs each call and blocks on case c3 until a `go` file exists, so
the test knows exactly what finished when it kills the process: it polls
results.jsonl and the call log, never sleeps blindly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import cell_lines, read_cells

from evalx.cli import main

BOT = """
import time
from pathlib import Path

HERE = Path(__file__).parent

def answer(q):
    with open(HERE / "calls.log", "a") as f:
        f.write(q + "\\n")
    if q == "c3":
        while not (HERE / "go").exists():  # blocks until the test says go
            time.sleep(0.005)
    return "ok " + q
"""

N_CASES = 6


def project(root: Path, n_cases: int = N_CASES) -> Path:
    (root / "bot.py").write_text(BOT)
    cases = "".join(f"      - {{id: c{i}, input: c{i}, assert: [{{type: contains, value: ok}}]}}\n" for i in range(n_cases))
    (root / "evalconfig.yaml").write_text(
        "version: 1\nname: resumable\ndefaults: {concurrency: 1}\n"
        "targets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets:\n  - id: d\n    cases:\n" + cases
    )
    return root


def wait_for(condition, what: str, proc: subprocess.Popen | None = None, limit_s: float = 60.0):  # type: ignore[no-untyped-def,type-arg]
    """Poll until condition() is truthy; fail (not hang) if the child died or it never happens."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"evalx exited {proc.returncode} before {what}: {err.decode()[-2000:]}")
        time.sleep(0.005)
    pytest.fail(f"timed out waiting for {what}")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start_run(root: Path) -> tuple[subprocess.Popen, Path]:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "evalx", "run", "-q"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run_dir() -> Path | None:
        runs = root / "runs"
        found = [p for p in runs.iterdir() if (p / "results.jsonl").exists()] if runs.exists() else []
        return found[0] if found else None

    found = wait_for(run_dir, "the run directory", proc)
    # c0..c2 finished and written, c3 in flight (called, blocked)
    wait_for(
        lambda: len(cell_lines(found / "results.jsonl")) == 3 and "c3" in lines(root / "calls.log"), "3 results and c3 in flight", proc
    )
    return proc, found


def results(run_dir: Path) -> list[dict]:  # type: ignore[type-arg]
    return read_cells(run_dir / "results.jsonl") if (run_dir / "results.jsonl").exists() else []


def test_sigkill_then_resume_runs_each_cell_exactly_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    proc, run_dir = start_run(root)
    proc.kill()  # SIGKILL: no handler runs, nothing is tidied up
    proc.communicate()
    assert [r["case_id"] for r in results(run_dir)] == ["c0", "c1", "c2"]  # finished cells survived
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    assert not (run_dir / "summary.json").exists()
    # the process died mid-write: a torn last line
    with open(run_dir / "results.jsonl", "ab") as f:
        f.write(b'{"version":1,"index":3,"target":"bot","case_id":"c3","sta')

    monkeypatch.chdir(root)
    listed = CliRunner().invoke(main, ["runs"])
    assert "running/killed" in listed.stdout

    (root / "go").write_text("")
    res = CliRunner().invoke(main, ["run", "--resume", run_dir.name, "-q"])
    assert res.exit_code == 0, res.output
    assert f"resuming {run_dir.name}: 3 of 6 cells have results, running 3" in res.stderr

    rows = results(run_dir)
    assert [r["index"] for r in rows] == list(range(N_CASES))  # every cell exactly once, in matrix order
    assert {r["run_id"] for r in rows} == {run_dir.name}  # under the same run id
    assert all(r["status"] == "pass" for r in rows)
    calls = Counter(lines(root / "calls.log"))
    # finished cells were not called again; c3 was in flight when killed, so it ran again
    assert calls == {"c0": 1, "c1": 1, "c2": 1, "c3": 2, "c4": 1, "c5": 1}
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "complete" and len(meta["resumed_at"]) == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["totals"]["cells"] == N_CASES and summary["totals"]["pass"] == N_CASES
    assert (run_dir / "junit.xml").exists() and (run_dir / "report.html").exists()
    assert [p.name for p in (root / "runs").iterdir()] == [run_dir.name]  # no second run directory


def test_sigterm_writes_a_partial_summary_and_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    proc, run_dir = start_run(root)
    proc.send_signal(signal.SIGTERM)

    def status() -> str:
        try:
            return str(json.loads((run_dir / "run.json").read_text())["status"])
        except (OSError, ValueError):
            return ""

    # c3 is still blocked, so the run can only have ended through the signal
    wait_for(lambda: status() == "interrupted", "the run to stop on SIGTERM")
    (root / "go").write_text("")  # now let the blocked worker thread return so the process can exit
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err.decode()
    assert b"Traceback" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["totals"]["cells"] == 3
    assert (run_dir / "junit.xml").exists() and (run_dir / "report.html").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert len(results(run_dir)) == 3  # the in-flight cell was cancelled, not half-written

    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["run", "--resume", run_dir.name, "-q"])
    assert res.exit_code == 0, res.output
    assert [r["case_id"] for r in results(run_dir)] == [f"c{i}" for i in range(N_CASES)]


def test_resume_refuses_when_cells_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    proc, run_dir = start_run(root)
    proc.kill()
    proc.communicate()
    (root / "go").write_text("")
    monkeypatch.chdir(root)

    other_selection = CliRunner().invoke(main, ["run", "--resume", run_dir.name, "--case", "c1"])
    assert other_selection.exit_code == 2
    assert "runs that run's own selection" in other_selection.stderr

    project(root, n_cases=N_CASES + 1)  # a case added: the run's cells are not the same any more
    changed = CliRunner().invoke(main, ["run", "--resume", run_dir.name])
    assert changed.exit_code == 2
    assert (
        f"cannot resume {run_dir.name}: the config or datasets changed in ways that alter its cells (6 planned cells then, 7 now)"
        in changed.stderr
    )

    project(root)  # restored: a change that does not alter cells (gates:) is allowed
    (root / "evalconfig.yaml").write_text((root / "evalconfig.yaml").read_text() + "gates: {min_pass_rate: 0.5}\n")
    ok = CliRunner().invoke(main, ["run", "--resume", run_dir.name, "-q"])
    assert ok.exit_code == 0, ok.output
    assert "the config changed since" in ok.stderr
    assert len(results(run_dir)) == N_CASES

    unknown = CliRunner().invoke(main, ["run", "--resume", "nope"])
    assert unknown.exit_code == 2 and "--resume: no run 'nope'" in unknown.stderr


# -- the plan fingerprint (version 2) ------------------------------------------------------------


def _fingerprint(root: Path, config_text: str, version: int | None = None) -> str:
    from evalx.config.loader import load_config
    from evalx.execution.plan import Selection, build_plan
    from evalx.execution.resume import plan_fingerprint

    (root / "evalconfig.yaml").write_text(config_text, encoding="utf-8")
    config = load_config(root / "evalconfig.yaml")
    plan = build_plan(config, Selection())
    return plan_fingerprint(config, plan) if version is None else plan_fingerprint(config, plan, version)


FP_CONFIG = (
    "version: 1\nname: fp\nsecrets: [FP_TOKEN]\n"
    "targets: [{id: a, type: python, callable: bot.py:answer}, {id: b, type: python, callable: bot.py:answer}]\n"
    "datasets:\n  - id: d\n    cases:\n"
    "      - {id: c1, input: 'hi ${FP_TOKEN}', vars: {k: [1, 2.5, null]}, assert: [{type: contains, value: ok}]}\n"
    "      - {id: c2, input: second, repeat: 2, targets: [a]}\n"
)


@pytest.mark.parametrize(
    "change",
    [
        ("input: second", "input: Second"),  # a case's content
        ("[1, 2.5, null]", "[1, 2.5, 0]"),  # deep inside it
        ("repeat: 2", "repeat: 3"),  # its cells
        ("targets: [a]", "targets: [b]"),  # which targets run it
        ("id: c2", "id: c3"),  # its id
        ("{id: b, type: python", "{id: b2, type: python"),  # a target
    ],
)
def test_fingerprint_changes_with_the_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: tuple[str, str]) -> None:
    monkeypatch.setenv("FP_TOKEN", "s3cret-value-1")
    (tmp_path / "bot.py").write_text("def answer(q):\n    return 'ok'\n")
    before = _fingerprint(tmp_path, FP_CONFIG)
    assert _fingerprint(tmp_path, FP_CONFIG) == before  # the same config, the same digest
    assert _fingerprint(tmp_path, FP_CONFIG.replace(*change)) != before


def test_fingerprint_ignores_line_moves_and_secret_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bot.py").write_text("def answer(q):\n    return 'ok'\n")
    monkeypatch.setenv("FP_TOKEN", "s3cret-value-1")
    before = _fingerprint(tmp_path, FP_CONFIG)
    assert _fingerprint(tmp_path, FP_CONFIG.replace("datasets:\n", "\n\ndatasets:\n")) == before  # source lines moved
    monkeypatch.setenv("FP_TOKEN", "another-secret-2")
    assert _fingerprint(tmp_path, FP_CONFIG) == before  # a secret's value never goes into the digest
    assert _fingerprint(tmp_path, FP_CONFIG, version=1) != before


def test_resume_of_a_run_with_an_unknown_fingerprint_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project(tmp_path, n_cases=2)
    (tmp_path / "go").write_text("")
    monkeypatch.chdir(tmp_path)
    first = CliRunner().invoke(main, ["run", "-q"])
    assert first.exit_code == 0, first.output
    run_dir = next((tmp_path / "runs").iterdir())
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["plan_digest_version"] == 2
    meta["plan_digest_version"] = 7
    (run_dir / "run.json").write_text(json.dumps(meta))
    again = CliRunner().invoke(main, ["run", "--resume", run_dir.name])
    assert again.exit_code == 2
    assert "plan fingerprint of version 7" in again.output and "Traceback" not in again.output
