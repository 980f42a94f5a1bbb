"""Engine targets end to end: the real client against the scripted engine (tests/engine_server.py).

Runs go through the CLI (``evalx run -c <config>``) like a user's would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from conftest import ENGINE_TEST_KEY, REPO
from engine_server import NASTY, EngineServer
from results_file import read_cells

from evalx.cli import main

TIMEOUT_S = 1.0
RETRIES = 2
IDLE_S = 0.3


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.01")
    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)


def write_config(tmp: Path, targets: list[dict[str, Any]], cases: list[dict[str, Any]] | None = None, **extra: Any) -> Path:
    config: dict[str, Any] = {
        "version": 1,
        "name": "engine-tests",
        "defaults": {"concurrency": 8, "timeout_s": TIMEOUT_S, "retries": RETRIES},
        "targets": targets,
        "datasets": extra.pop("datasets", None) or [{"id": "cases", "cases": cases}],
        **extra,
    }
    path = tmp / "evalconfig.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def engine_target(server: EngineServer, **over: Any) -> dict[str, Any]:
    return {"id": "agent", "type": "engine", "url": server.url, "api_key": "${ENGINE_KEY}", "idle_timeout_s": IDLE_S, **over}


def cli_run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["run", "-c", str(config), "--quiet", *args], catch_exceptions=False)


def run_dir(config: Path, result: Result | None = None) -> Path:
    """The run directory of ``result`` (from the CLI's ``results:`` line), else the only run there is."""
    if result is not None:
        match = re.search(r"^results: (.+?)/?$", result.output, re.M)
        assert match, result.output
        return Path(match.group(1)) if Path(match.group(1)).is_absolute() else Path.cwd() / match.group(1)
    runs = sorted((config.parent / "runs").iterdir())
    assert len(runs) == 1, "several runs here: pass the CLI result"
    return runs[0]


def results(config: Path, result: Result | None = None) -> dict[str, dict[str, Any]]:
    out = {}
    for r in read_cells(run_dir(config, result)):
        out[f"{r['case_id']}" + (f"#r{r['repeat']}" if r["repeat"] else "")] = r
    return out


def case(case_id: str, scenario: str, asserts: list[dict[str, Any]] | None = None, **body: Any) -> dict[str, Any]:
    return {
        "id": case_id,
        "input": {"scenario": scenario, "message": f"case {case_id}", **body},
        "assert": asserts or [{"type": "completed"}],
    }


# ---------------------------------------------------------------- a normal run


def test_normal_run_builds_the_full_trajectory(tmp_path: Path, engine_server: EngineServer) -> None:
    cases = [
        {"id": "weather", "input": "What's the weather in Paris?", "assert": [
            {"type": "must_call_tools", "tools": ["web_search"]},
            {"type": "tool_order", "tools": ["web_search"], "exact": True},
            {"type": "max_tool_calls", "value": 1},
            {"type": "max_iterations", "value": 2},
            {"type": "max_tokens", "value": 20},
            {"type": "max_input_tokens", "value": 100},
            {"type": "max_latency_ms", "value": 60000},
            {"type": "contains", "value": "sunny"},
        ]},
    ]  # fmt: skip
    config = write_config(tmp_path, [engine_target(engine_server)], cases)
    result = cli_run(config)
    assert result.exit_code == 0, result.output
    r = results(config)["weather"]
    assert r["status"] == "pass" and r["error"] is None
    out = r["output"]
    assert out["text"] == "It is sunny in Paris, 21°C."
    assert out["tool_calls"] == [{"name": "web_search", "args": {"query": "What's the weather in Paris?"}, "result": "web_search ok"}]
    assert out["usage"] == {"input_tokens": 100, "output_tokens": 20, "cache_hit_tokens": 40}  # two usage events summed
    assert out["iterations"] == 2
    assert [e["type"] for e in out["events"]] == [
        "iteration", "tool_call", "tool_result", "iteration", "text_delta", "text_delta", "usage", "usage", "done",
    ]  # fmt: skip
    assert out["events_truncated"] is False
    assert 0 < r["ttft_ms"] <= r["latency_ms"]
    run_id = r["run_id"]
    assert out["request"]["body"] == {"message": "What's the weather in Paris?", "task_id": f"eval-{run_id}-weather"}
    sent = engine_server.requests_for(run_id)
    assert len(sent) == 1 and sent[0]["path"] == "/execute"
    assert sent[0]["headers"]["X-Engine-Key"] == ENGINE_TEST_KEY
    assert sent[0]["headers"]["Accept"] == "text/event-stream"
    summary = json.loads((run_dir(config) / "summary.json").read_text())
    agent = summary["per_target"]["agent"]
    assert agent["tokens"] == {"input": 100, "output": 20, "cache_hit": 40} and agent["cache_hit_ratio"] == 0.4
    assert agent["ttft_ms"]["p50"] == r["ttft_ms"] and agent["latency_ms"]["p99"] == r["latency_ms"]
    text = (run_dir(config) / "summary.txt").read_text()
    assert re.search(r"^target +lat p50 +lat p95 +lat p99 +ttft p50 +ttft p95 +ttft p99 +tok in +tok out +cache hit$", text, re.M)
    assert re.search(r"^agent .* 100 +20 +40\.0%$", text, re.M)


def test_request_bodies_headers_and_templates(tmp_path: Path, engine_server: EngineServer) -> None:
    targets = [
        engine_target(engine_server, id="plain", headers={"X-Tenant": "acme"}),
        engine_target(
            engine_server,
            id="templated",
            body={"scenario": "echo", "prompt": "{{ case.input.text }}", "meta": {"case": "{{ case.id }}", "n": "{{ vars.n }}"}},
        ),
    ]
    cases = [{"id": "mapping", "input": {"scenario": "echo", "text": "hi", "user": "u1"}, "assert": [{"type": "completed"}]}]
    config = write_config(tmp_path, targets, cases, vars={"n": 3})
    assert cli_run(config).exit_code == 0
    run_id = next(iter(results(config).values()))["run_id"]
    by_target = {r["headers"].get("X-Tenant"): r for r in engine_server.requests_for(run_id)}
    plain, templated = by_target["acme"], by_target[None]
    assert plain["body"] == {"scenario": "echo", "text": "hi", "user": "u1", "task_id": f"eval-{run_id}-mapping"}
    assert templated["body"] == {
        "scenario": "echo",
        "prompt": "hi",
        "meta": {"case": "mapping", "n": 3},
        "task_id": f"eval-{run_id}-mapping",
    }


def test_missing_key_is_omitted_and_reported(tmp_path: Path, engine_server: EngineServer) -> None:
    target = engine_target(engine_server)
    del target["api_key"]
    config = write_config(tmp_path, [target], [case("c1", "normal")])
    result = cli_run(config)
    assert result.exit_code == 3  # every cell of the target failed
    r = results(config)["c1"]
    assert "X-Engine-Key" not in engine_server.requests_for(r["run_id"])[0]["headers"]
    assert r["status"] == "error"
    assert r["error"] == (
        f"HTTP 401 unauthorized from {engine_server.url}/execute: the API key is wrong or missing (check api_key, sent as X-Engine-Key)"
    )


def test_wrong_key_is_not_retried_and_not_printed(tmp_path: Path, engine_server: EngineServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_KEY", "wrong-key-0123456789")
    config = write_config(tmp_path, [engine_target(engine_server)], [case("c1", "normal"), case("c2", "normal")])
    result = cli_run(config)
    assert result.exit_code == 3
    assert "wrong-key-0123456789" not in result.output
    line = f"target 'agent': every cell failed (2): HTTP 401 unauthorized from {engine_server.url}/execute: the API key is wrong or missing"
    assert line in result.output
    assert len(engine_server.requests_for(results(config)["c1"]["run_id"])) == 2  # one attempt a cell


# ---------------------------------------------------------------- every mode in one run

#: case id -> (scenario and body, expected status, expected error: exact, or a regex when it starts with ^)
MODES: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "normal": ({"scenario": "normal"}, "pass", None),
    "multiline": ({"scenario": "multiline"}, "pass", None),
    "comments": ({"scenario": "comments"}, "pass", None),
    "crlf": ({"scenario": "crlf"}, "pass", None),
    "cr": ({"scenario": "cr"}, "pass", None),
    "chunked": ({"scenario": "chunked"}, "pass", None),
    "forbidden-403": ({"scenario": "status", "code": 403}, "error",
                      "HTTP 403 forbidden from {url}: the API key is wrong or missing (check api_key, sent as X-Engine-Key)"),
    "unprocessable-422": ({"scenario": "status", "code": 422}, "error", "HTTP 422 from {url}: scripted failure 422"),
    "server-error-500": ({"scenario": "status", "code": 500}, "error", "HTTP 500 from {url}: scripted failure 500 (after 2 retries)"),
    "flaky-500": ({"scenario": "flaky500", "failures": 2}, "pass", None),
    "rate-limited-429": ({"scenario": "rate429", "retry_after": "0.05"}, "pass", None),
    "llm-rate-limited": ({"scenario": "llm_rate_limited"}, "pass", None),
    "rate-limited-after-text": ({"scenario": "rate_limited_after_text"}, "error", "engine error LLM_RATE_LIMITED: provider rate limit"),
    "error-event": ({"scenario": "error_event"}, "error", "engine error TOOL_FAILED: the sandbox crashed"),
    "idle": ({"scenario": "idle"}, "error", f"stream from {{url}} idle for more than {IDLE_S:g}s"),
    "early-close": ({"scenario": "early_close"}, "error", "stream from {url} closed before its 'done' event (after 1 event)"),
    "mid-event-close": ({"scenario": "mid_event_close"}, "error", "stream from {url} closed in the middle of an event (after 1 event)"),
    "abort": ({"scenario": "abort"}, "error", "the response from {url} broke off before its end"),
    "empty": ({"scenario": "empty"}, "error", "stream from {url} closed before its 'done' event (after 0 events) (after 2 retries)"),
    "malformed": ({"scenario": "malformed"}, "error",
                  "^malformed JSON in the data of 'tool_call' event #2 from {url}: Expecting property name enclosed in double quotes"),
    "not-a-stream": ({"scenario": "json_answer"}, "error", "{url} answered Content-Type application/json, not text/event-stream"),
    "slow": ({"scenario": "slow"}, "error", f"timed out after {TIMEOUT_S:g}s"),
}  # fmt: skip
TEXTS = {
    "multiline": "first line\nsecond line",
    "comments": "hello world",
    "chunked": "split ✓ across chunks",
    "crlf": "You said: case crlf",
    "cr": "You said: case cr",
}
ATTEMPTS = {"server-error-500": 3, "flaky-500": 3, "rate-limited-429": 2, "llm-rate-limited": 2, "rate-limited-after-text": 1,
            "empty": 3, "forbidden-403": 1, "malformed": 1, "idle": 1, "abort": 1}  # fmt: skip


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory, engine_server: EngineServer) -> Iterator[tuple[Result, Path]]:
    tmp = tmp_path_factory.mktemp("mixed")
    cases = [
        {"id": cid, "input": {"message": f"case {cid}", **body}, "assert": [{"type": "completed"}]} for cid, (body, _, _) in MODES.items()
    ]
    target = engine_target(engine_server, end_event="done", max_events=1000)
    config = write_config(tmp, [target], cases)
    env = {"EVALX_BACKOFF_BASE_S": "0.01", "ENGINE_KEY": ENGINE_TEST_KEY}
    result = CliRunner(env=env).invoke(main, ["run", "-c", str(config), "--quiet", "--repeat", "2"], catch_exceptions=False)
    yield result, config


@pytest.mark.slow
def test_mixed_run_finishes_in_time_and_goes_on(mixed_run: tuple[Result, Path]) -> None:
    result, config = mixed_run
    assert result.exit_code == 1, result.output  # some cells errored, the run completed
    assert "Traceback" not in result.output
    summary = json.loads((run_dir(config) / "summary.json").read_text())
    assert summary["totals"]["cells"] == 2 * len(MODES)
    # every cell is bounded by its timeout: ~1.5 s here; the slow scenario alone streams for 60 s (the bound holds on a loaded machine)
    assert summary["duration_s"] < 30


@pytest.mark.parametrize("case_id", list(MODES))
def test_each_mode(case_id: str, mixed_run: tuple[Result, Path], engine_server: EngineServer) -> None:
    _, config = mixed_run
    body, status, error = MODES[case_id]
    url = f"{engine_server.url}/execute"
    for key in (case_id, f"{case_id}#r1"):
        r = results(config)[key]
        assert r["status"] == status, (key, r["error"])
        if error is None:
            assert r["error"] is None
        elif error.startswith("^"):
            assert re.match(re.escape(error[1:].format(url=url)), r["error"]), r["error"]
        else:
            assert r["error"] == error.format(url=url)
        assert r["traceback"] is None  # a target failure is one line, not a crash
        if case_id in TEXTS:
            assert r["output"]["text"] == TEXTS[case_id]
    if case_id in ATTEMPTS:
        run_id = r["run_id"]
        tid = f"eval-{run_id}-{case_id}"
        assert engine_server.attempts[tid] == ATTEMPTS[case_id]


def test_retried_cells_say_so(mixed_run: tuple[Result, Path]) -> None:
    _, config = mixed_run
    res = results(config)
    assert res["flaky-500"]["output"]["raw"]["attempts"] == 3
    llm = res["llm-rate-limited"]["output"]
    assert llm["raw"]["retried_after"] == ["engine error LLM_RATE_LIMITED: provider rate limit"]
    assert llm["tool_calls"] == []  # the failed attempt's web_search is not kept: only the final attempt counts
    assert res["normal"]["output"]["raw"] is None


def test_stream_details(mixed_run: tuple[Result, Path]) -> None:
    _, config = mixed_run
    res = results(config)
    multiline = res["multiline"]["output"]
    assert multiline["tool_calls"] == [{"name": "web_search", "args": {"q": "x"}, "result": None}]
    comments = res["comments"]["output"]
    assert [e.get("id") for e in comments["events"]] == ["7", "8", "8"]
    chunked = res["chunked"]["output"]
    assert chunked["usage"] == {"input_tokens": 5, "output_tokens": 7, "cache_hit_tokens": 0}
    assert chunked["tool_calls"][0]["args"] == {"q": "é"}


def test_distinct_task_ids(mixed_run: tuple[Result, Path], engine_server: EngineServer) -> None:
    _, config = mixed_run
    res = results(config)
    run_id = res["normal"]["run_id"]
    sent = {r["body"]["task_id"] for r in engine_server.requests_for(run_id)}
    expected = {f"eval-{run_id}-{cid}" for cid in MODES} | {f"eval-{run_id}-{cid}-r1" for cid in MODES}
    assert sent == expected  # one task id a cell (retries reuse it), each naming run and case
    assert len(expected) == len(res)


# ---------------------------------------------------------------- single modes


def test_close_without_end_event_is_the_end_by_default(tmp_path: Path, engine_server: EngineServer) -> None:
    config = write_config(tmp_path, [engine_target(engine_server)], [case("early", "early_close"), case("mid", "mid_event_close")])
    cli_run(config)
    res = results(config)
    assert res["early"]["status"] == "pass" and res["early"]["output"]["text"] == "half an ans"
    assert res["mid"]["error"] == f"stream from {engine_server.url}/execute closed in the middle of an event (after 1 event)"


def test_events_are_bounded(tmp_path: Path, engine_server: EngineServer) -> None:
    config = write_config(tmp_path, [engine_target(engine_server, max_events=10)], [case("many", "many", count=50)])
    assert cli_run(config).exit_code == 0
    out = results(config)["many"]["output"]
    assert out["text"] == "x" * 50 and len(out["events"]) == 10 and out["events_truncated"] is True


def test_wrong_url_is_a_404(tmp_path: Path, engine_server: EngineServer) -> None:
    config = write_config(tmp_path, [engine_target(engine_server, url=engine_server.url + "/v2/")], [case("c", "normal")])
    assert cli_run(config).exit_code == 3
    assert results(config)["c"]["error"] == f"HTTP 404 not found: {engine_server.url}/v2/execute (check the url): 404: Not Found"


def test_connection_refused_reported_once(tmp_path: Path, engine_server: EngineServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    # one cell at a time on "down": its 6th cell is not yet taken when its 5th fails
    targets = [engine_target(engine_server, id="up"), engine_target(engine_server, id="down", url=url, concurrency=1)]
    cases = [case(f"c{i}", "normal") for i in range(6)]
    config = write_config(tmp_path, targets, cases, defaults={"concurrency": 2, "timeout_s": TIMEOUT_S, "retries": RETRIES})
    # the pre-flight connect: one line before any cell, the run stops
    result = cli_run(config)
    assert result.exit_code == 3
    assert result.output.strip() == f"evalx: target 'down': cannot connect to {url}/execute (connection refused): is the server running?"
    assert not read_cells(run_dir(config))
    shutil.rmtree(config.parent / "runs")
    # without it (EVALX_NO_PREFLIGHT=1): the target's first 5 cells fail to connect, its last is not run, said once
    monkeypatch.setenv("EVALX_NO_PREFLIGHT", "1")
    result = cli_run(config)
    assert result.exit_code == 3
    message = f"cannot connect to {url}/execute: connection refused (after {RETRIES} retries)"
    loud = [line for line in result.output.splitlines() if "stopped early" in line or "every cell failed" in line]
    assert loud == [
        f"target 'down': stopped early, 1 cell not run — the first 5 cells of target 'down' got no answer ({message}); is the server running?"
    ]
    res = json.loads((run_dir(config) / "summary.json").read_text())
    assert res["per_target"]["up"]["pass"] == 6 and res["per_target"]["down"]["error"] == 5 and res["per_target"]["down"]["skipped"] == 1
    assert {r["error"] for r in results_by_target(config, "down") if r["status"] == "error"} == {message}


def results_by_target(config: Path, target: str) -> list[dict[str, Any]]:
    return [r for r in read_cells(run_dir(config)) if r["target"] == target]


# ---------------------------------------------------------------- golden sets


def test_engine_harness_and_golden_trajectories_score_right(tmp_path: Path, engine_server: EngineServer) -> None:
    shutil.copytree(REPO / "tests/data/engine", tmp_path / "golden")
    datasets = [{"id": "harness", "path": "golden/harness"}, {"id": "trajectories", "path": "golden/trajectories.yaml"}]
    config = write_config(tmp_path, [engine_target(engine_server)], datasets=datasets)
    result = cli_run(config)
    assert result.exit_code == 1
    res = {r["case_id"]: r for r in read_cells(run_dir(config))}

    def reasons(case_id: str) -> list[str]:
        return [a["reason"] for a in res[case_id]["assertions"] if a["passed"] is False]

    assert res["eval-2026-04-001"]["status"] == "pass"
    assert reasons("eval-2026-04-002") == ["missing required tool call: web_search"]
    assert reasons("eval-2026-04-003") == ["forbidden tool called: delete_file"]
    assert reasons("eval-2026-04-004") == ["output_tokens=500 > 100"]
    assert res["eval-2026-04-005"]["status"] == "fail" and reasons("eval-2026-04-005")[0].startswith("missing 'rate_limit'")
    assert res["weather-uses-search"]["status"] == "pass"
    assert reasons("read-within-budget") == ["total_tokens=120 > 50"]
    assert reasons("never-delete") == ["forbidden tool called: delete_file"]
    summary = (run_dir(config) / "summary.txt").read_text()
    assert "harness/eval-2026-04-002 — must_call_tools: missing required tool call: web_search" in summary  # dataset/case


# ---------------------------------------------------------------- hostile output and secrets


def test_junit_valid_with_hostile_answers(tmp_path: Path, engine_server: EngineServer, junit_schema: Any) -> None:
    cases = [
        case("nasty-pass", "nasty", [{"type": "contains", "value": "markup"}]),
        case("nasty-fail", "nasty", [{"type": "equals", "value": "something else"}]),
        case("nasty-error", "error_event"),
    ]
    config = write_config(tmp_path, [engine_target(engine_server)], cases)
    result = cli_run(config, "--junit", str(tmp_path / "ci" / "junit.xml"))
    assert result.exit_code == 1
    res = results(config)
    assert res["nasty-pass"]["output"]["text"] == NASTY
    for path in (run_dir(config) / "junit.xml", tmp_path / "ci" / "junit.xml"):
        junit_schema.validate(str(path))
        xml = path.read_text(encoding="utf-8")
        assert "\x1b" not in xml and "\x00" not in xml
    assert 'tests="3"' in (run_dir(config) / "junit.xml").read_text()


def test_engine_key_never_written(tmp_path: Path, engine_server: EngineServer) -> None:
    cases = [
        case("leak", "leak"),
        case("leak-error", "leak", then_error=True),
        case("normal", "normal"),
        case("refused-auth", "status", code=401),
    ]
    config = write_config(tmp_path, [engine_target(engine_server)], cases)
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--junit", str(tmp_path / "junit.xml"), "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    res = results(config)
    assert res["leak"]["output"]["text"] == "your key is ***"
    assert res["leak-error"]["error"] == "engine error AUTH_DEBUG: key *** looks odd"
    sent = engine_server.requests_for(res["leak"]["run_id"])
    assert all(r["headers"]["X-Engine-Key"] == ENGINE_TEST_KEY for r in sent)  # it was sent...
    assert ENGINE_TEST_KEY not in result.output  # ...and never written anywhere
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "evalconfig.yaml"]
    assert {p.name for p in files} >= {"results.jsonl", "summary.json", "summary.txt", "junit.xml", "config.yaml", "run.json"}
    for p in files:
        assert ENGINE_TEST_KEY not in p.read_text(encoding="utf-8", errors="replace"), p
    stored = yaml.safe_load((run_dir(config) / "config.yaml").read_text())
    assert stored["targets"][0]["api_key"] == "***"


# ---------------------------------------------------------------- the shipped example


def test_example_engine_runs(tmp_path: Path) -> None:
    project = tmp_path / "engine"
    shutil.copytree(REPO / "examples/engine", project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "ENGINE_KEY": "demo-secret-key"}
    proc = subprocess.Popen(
        [sys.executable, str(project / "demo_engine.py"), "--port", str(port), "--delay", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the engine says it is listening once it is: no sleeping
        assert f"127.0.0.1:{port}" in first, first
        runner = CliRunner(env={"ENGINE_URL": f"http://127.0.0.1:{port}", "ENGINE_KEY": "demo-secret-key"})
        result = runner.invoke(main, ["run", "-c", str(project / "evalconfig.yaml"), "--quiet"], catch_exceptions=False)
    finally:
        proc.terminate()
        proc.wait(10)
    assert result.exit_code == 0, result.output
    assert "demo-secret-key" not in result.output
    summary = json.loads(next((project / "runs").glob("*/summary.json")).read_text())
    assert summary["totals"]["pass"] == summary["totals"]["cells"] > 0


def test_cache_is_opt_in_for_engines(tmp_path: Path, engine_server: EngineServer) -> None:
    cases = [case("c1", "normal")]
    plain = write_config(tmp_path, [engine_target(engine_server)], cases)
    cli_run(plain)
    assert not results(plain, cli_run(plain))["c1"]["cached"]  # off by default
    cached = write_config(tmp_path, [engine_target(engine_server, cache=True)], cases)
    first = results(cached, cli_run(cached))["c1"]
    second = results(cached, cli_run(cached))["c1"]
    assert not first["cached"] and second["cached"]
    assert second["output"]["text"] == first["output"]["text"] and second["status"] == "pass"
    assert engine_server.requests_for(second["run_id"]) == []  # answered from the cache
