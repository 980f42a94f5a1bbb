"""A run exported to a real Arize Phoenix server, started by the test on 127.0.0.1, and read back through its REST API.

Phoenix lives in a venv of its own (``.ci/phoenix`` makes it once, under
``~/.cache/evalx-test/phoenix-venv`` or ``$EVALX_PHOENIX_VENV``) so that its
dependencies never mix with evalx's. Without it, and without the package
index to make it, the test is skipped and says why.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from test_export import clean_otel_env, project, run  # noqa: F401  (a fixture)

pytest.importorskip("opentelemetry.sdk.trace", reason="the export needs evalx-runner[otel]")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("EVALX_PHOENIX_VENV") or Path.home() / ".cache" / "evalx-test" / "phoenix-venv")
#: Phoenix starts in ~40 s on a loaded 2-core machine (database migrations, the app)
START_S = 240.0
#: spans reach Phoenix's database in batches
INGEST_S = 120.0


def _phoenix_bin() -> Path:
    """The ``phoenix`` command of the cached venv, made by ``.ci/phoenix`` when missing (or a skip saying why not)."""
    made = subprocess.run(["bash", str(ROOT / ".ci" / "phoenix")], capture_output=True, text=True, timeout=1200, env=os.environ.copy())
    binary = VENV / "bin" / "phoenix"
    if made.returncode != 0 or not binary.exists():
        pytest.skip(f"no Phoenix venv at {VENV} and .ci/phoenix could not make it (no package index?): {made.stderr.strip()[-300:]}")
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _phoenix_bin()
    work = tmp_path_factory.mktemp("phoenix")
    port, grpc = _free_port(), _free_port()
    env = {
        **os.environ,
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "phoenix.log").open("wb")
    proc = subprocess.Popen([str(binary), "serve"], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:  # the port, then the app behind it
            if proc.poll() is not None:
                pytest.fail(f"phoenix serve exited ({proc.returncode}): {(work / 'phoenix.log').read_text()[-2000:]}")
            try:
                _get(f"{url}/v1/projects")
                break
            except (OSError, urllib.error.URLError, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail(f"phoenix did not answer within {START_S:g} s: {(work / 'phoenix.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def _spans(url: str, project_name: str, want: int) -> list[dict[str, Any]]:
    """The project's spans once ``want`` of them are stored (Phoenix writes them in batches), at most :data:`INGEST_S`."""
    deadline = time.monotonic() + INGEST_S
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            spans = _get(f"{url}/v1/projects/{project_name}/spans?limit=1000")["data"]
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # 404: the project does not exist until its first span is stored
                raise
        if len(spans) >= want:
            return spans
        time.sleep(0.5)
    return spans


def test_a_run_exported_to_phoenix_shows_there_with_its_results(tmp_path: Path, server: FakeLLMServer, phoenix: str) -> None:
    result = run(project(tmp_path, server), "--otlp-endpoint", phoenix)  # no path: /v1/traces
    assert result.exit_code == 1, result.output
    run_id = next((tmp_path / "runs").iterdir()).name
    # run + 2 cells + 2 target calls + 2 checks + 3 assertions + 1 judge call
    spans = _spans(phoenix, "exported", 11)
    assert len(spans) == 11, [s["name"] for s in spans]
    by_id = {s["context"]["span_id"]: s for s in spans}
    cells = {s["attributes"]["evalx.case.id"]: s for s in spans if s["name"] == "evalx.cell"}
    assert set(cells) == {"sum", "fruit"}
    fruit = cells["fruit"]
    assert fruit["span_kind"] == "CHAIN" and fruit["parent_id"] is None and fruit["status_code"] == "ERROR"
    attrs = fruit["attributes"]
    assert attrs["evalx.status"] == "fail" and attrs["evalx.run.id"] == run_id and attrs["session.id"] == run_id
    assert attrs["evalx.target"] == "mini" and attrs["evalx.repeat"] == 0 and attrs["evalx.score"] == 0.0
    assert any("says banana" in reason for reason in attrs["evalx.assertions.failed"])
    assert cells["sum"]["attributes"]["evalx.status"] == "pass" and cells["sum"]["status_code"] == "OK"
    (call,) = [s for s in spans if s["name"] == "chat local-model" and s["parent_id"] == fruit["context"]["span_id"]]
    assert call["span_kind"] == "LLM"
    assert call["attributes"]["gen_ai.request.model"] == "local-model" and call["attributes"]["llm.token_count.prompt"] > 0
    judge = next(s for s in spans if s["name"] == "chat judge")
    assertion = by_id[judge["parent_id"]]
    assert assertion["name"] == "assert llm_judge" and assertion["span_kind"] == "EVALUATOR"
    assert by_id[assertion["parent_id"]]["name"] == "evalx.checks"
    (run_span,) = [s for s in spans if s["name"] == "evalx.run"]
    assert run_span["attributes"]["evalx.run.cells"] == 2 and run_span["attributes"]["evalx.run.exit_code"] == 1
