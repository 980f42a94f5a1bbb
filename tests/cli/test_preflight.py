"""A remote target that is down is said once: the pre-flight connect before the run, and the early stop after its first cells.

Real sockets on 127.0.0.1: a port with nothing listening, a server that accepts and resets every connection,
the scripted engine (tests/engine_server.py) for a run whose cells are all in the response cache.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_project import evalx


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound on 127.0.0.1 with nothing listening (kept bound: nothing else takes it meanwhile)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield int(sock.getsockname()[1])
    sock.close()


@pytest.fixture
def resetting_port() -> Iterator[int]:
    """A server that accepts every connection and resets it at once."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone leaves it waiting)
    server.close()
    thread.join(5)


def _project(folder: Path, url: str, cases: int, extra: str = "") -> Path:
    (folder / "evalconfig.yaml").write_text(
        f"""version: 1
defaults: {{concurrency: 1, retries: 0}}
targets:
  - id: agent
    type: engine
    url: {url}
    start: python demo_engine.py --port 8000
{extra}datasets:
  - id: smoke
    path: smoke.jsonl
"""
    )
    (folder / "smoke.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i:02d}", "input": "hello", "assert": [{"type": "completed"}]}) + "\n" for i in range(cases))
    )
    return folder


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return evalx("run", *args, cwd=folder, env={"EVALX_NO_PREFLIGHT": None, "HTTP_PROXY": None, "http_proxy": None})


def _results(folder: Path) -> list[dict[str, object]]:
    (run_dir,) = (folder / "runs").iterdir()
    path = run_dir / "results.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [line for line in lines if line.get("case_id")]


def test_nothing_listening_is_one_line_before_any_cell(tmp_path: Path, closed_port: int) -> None:
    project = _project(tmp_path, f"http://127.0.0.1:{closed_port}", cases=20)
    proc = _run(project)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip() == (
        f"evalx: target 'agent': cannot connect to http://127.0.0.1:{closed_port}/execute (connection refused): "
        "is the server running? start it with: python demo_engine.py --port 8000"
    )
    assert _results(project) == [], "no cell ran"


def test_a_server_that_resets_stops_its_target_after_the_first_cells(tmp_path: Path, resetting_port: int) -> None:
    project = _project(tmp_path, f"http://127.0.0.1:{resetting_port}", cases=20)
    proc = _run(project, "-q")
    assert proc.returncode == 3, proc.stderr
    cells = _results(project)
    statuses = [c["status"] for c in cells]
    assert statuses.count("error") == 5 and statuses.count("skipped") == 15, statuses
    reasons = {c["skip_reason"] for c in cells if c["status"] == "skipped"}
    assert len(reasons) == 1
    (reason,) = reasons
    assert reason.startswith("not run: the first 5 cells of target 'agent' got no answer (")
    assert reason.endswith("is the server running? start it with: python demo_engine.py --port 8000")
    stopped = [line for line in proc.stderr.splitlines() if "stopped early" in line]
    assert len(stopped) == 1 and stopped[0].startswith("target 'agent': stopped early, 15 cells not run — the first 5 cells")


def test_a_run_whose_cells_are_all_cached_needs_no_server(tmp_path: Path) -> None:
    from conftest import ENGINE_TEST_KEY
    from engine_server import EngineServer

    server = EngineServer(key=ENGINE_TEST_KEY).start()
    project = _project(tmp_path, server.url, cases=3, extra=f"    cache: true\n    api_key: {ENGINE_TEST_KEY}\n")
    try:
        first = _run(project, "-q")
        assert first.returncode == 0, first.stderr
    finally:
        server.stop()
    again = _run(project, "-q", "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["totals"]["pass"] == 3
    assert "cannot connect" not in again.stderr


def test_a_judge_that_takes_no_connection_is_one_warning_and_stops_being_called(tmp_path: Path, closed_port: int) -> None:
    """The judge is checked with the targets: a warning up front (its answers may be cached, so the run goes on), and
    after its first calls got no connection, the other model-graded cells error at once with one reason."""
    (tmp_path / "agent.py").write_text("def answer(q):\n    return 'hello ' + q\n")
    cases = "".join(f"      - {{id: c{i:02d}, input: q{i}, assert: [{{type: llm_judge, rubric: polite}}]}}\n" for i in range(12))
    (tmp_path / "evalconfig.yaml").write_text(
        f"""version: 1
defaults: {{concurrency: 1, retries: 0}}
targets:
  - {{id: bot, type: python, callable: agent.py:answer}}
judge:
  target: {{id: grader, type: provider, provider: openai, model: m, base_url: "http://127.0.0.1:{closed_port}/v1", api_key: k,
            start: "vllm serve m"}}
datasets:
  - id: d
    cases:
{cases}"""
    )
    proc = evalx("run", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "judge target" in line]
    assert warnings == [
        f"evalx: warning: judge target 'grader': cannot connect to http://127.0.0.1:{closed_port}/v1/chat/completions "
        "(connection refused): is the server running? start it with: vllm serve m; "
        "the model-graded checks will error unless their answers are in the response cache"
    ]
    (run_dir,) = (tmp_path / "runs").iterdir()
    errors = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    reasons = [json.dumps(r.get("assertions") or r.get("error")) for r in errors if r.get("case_id")]
    assert len(reasons) == 12
    assert sum("its first 5 calls got no answer: no more are made" in r for r in reasons) == 7, reasons
    assert "(see the cells' errors)" in proc.stdout


def test_a_down_target_whose_cells_all_started_at_once_is_still_an_incomplete_run(tmp_path: Path, closed_port: int) -> None:
    """No pre-flight, every cell in flight before the early stop could skip one: its line is "every cell failed", exit 3
    (it was neither: no line, exit 1 "nothing was graded")."""
    project = _project(tmp_path, f"http://127.0.0.1:{closed_port}", cases=8, extra="    concurrency: 8\n")
    proc = evalx("run", "-q", cwd=project, env={"EVALX_NO_PREFLIGHT": "1", "HTTP_PROXY": None, "http_proxy": None})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("target 'agent'")]
    assert line.startswith("target 'agent': every cell failed (8): ") and "connection refused" in line
    assert proc.stdout.splitlines()[-1] == "exit 3: the run could not complete (every cell of a target errored)"
