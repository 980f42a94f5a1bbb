"""Tracing end to end: apps that report nothing but OpenTelemetry spans are graded through `evalx run --trace`.

The real SDK and OTLP/HTTP exporter: in a Python target in-process (no
exporter configured: evalx's processor takes the spans), and in a separate
engine service (``traced_engine.py``, a subprocess exporting to the receiver
named by ``OTEL_EXPORTER_OTLP_ENDPOINT``). Also: the receiver's encodings and
bounds, late spans, the validate errors, 200 concurrent cells whose spans
never mix, and the OpenInference-instrumented OpenAI client.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, wait_for_port
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

HERE = Path(__file__).parent


def _project(tmp_path: Path, config: str) -> Path:
    shutil.copy(HERE / "traced_app.py", tmp_path / "traced_app.py")
    (tmp_path / "evalconfig.yaml").write_text(config)
    return tmp_path


def _run(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalx", "run", "--config", str(project / "evalconfig.yaml"), *args],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def _summary(project: Path) -> dict[str, Any]:
    (run,) = list((project / "runs").iterdir())
    return json.loads((run / "summary.json").read_text())  # type: ignore[no-any-return]


def _cells(project: Path) -> list[dict[str, Any]]:
    (run,) = list((project / "runs").iterdir())
    return read_cells(run)


IN_PROCESS = """
targets:
  - {id: app, type: python, callable: traced_app.py:agent}
datasets:
  - id: d
    cases:
      - id: good
        input: "paris tool:search tool:weather"
        assert:
          - {type: must_call_tools, tools: [search, weather]}
          - {type: tool_order, tools: [search, weather]}
          - {type: tool_args, tool: search, args: {q: paris}}
          - {type: max_tool_calls, value: 2}
          - {type: max_tokens, value: 10}
          - {type: trace_span, span_name: "chat gpt-test", attributes: {gen_ai.usage.input_tokens: 12}}
          - {type: trace_span, span_name_regex: "^execute_tool ", count: 2}
          - {type: trace_duration, max_ms: 60000}
          - {type: trace_duration, span_name_regex: "execute_tool", max_ms: 60000}
          - {type: trace_errors}
      - id: broken
        input: "lyon fail:search"
        assert:
          - {type: trace_errors}
          - {type: must_not_call_tools, tools: [search]}
"""


def test_an_in_process_sdk_app_is_graded_on_its_spans(tmp_path: Path) -> None:
    project = _project(tmp_path, IN_PROCESS)
    done = _run(project, "--trace")
    assert done.returncode == 1, done.stderr  # the broken case fails, the good one passes
    assert "tracing: receiving OTLP/HTTP spans at http://127.0.0.1:" in done.stderr
    good, broken = _cells(project)
    assert good["status"] == "pass", good["assertions"]
    assert [c["name"] for c in good["output"]["tool_calls"]] == ["search", "weather"]
    assert good["output"]["tool_calls"][0]["result"] == {"hits": 3}
    assert good["output"]["usage"]["input_tokens"] == 12 and good["output"]["usage"]["output_tokens"] == 5
    trace = good["trace"]
    assert trace["source"] == "trace" and len(trace["trace_id"]) == 32
    names = [s["name"] for s in trace["spans"]]
    assert names[0] == "invoke_agent" and set(names) == {"invoke_agent", "chat gpt-test", "execute_tool search", "execute_tool weather"}
    root = trace["spans"][0]
    assert root["parent_span_id"] == trace["span_id"]  # the app's top span is a child of the cell's span
    assert all(s["trace_id"] == trace["trace_id"] for s in trace["spans"])
    assert broken["trace"]["trace_id"] != trace["trace_id"]  # each cell its own trace
    reasons = {a["type"]: a for a in broken["assertions"]}
    assert reasons["trace_errors"]["passed"] is False
    assert "'execute_tool search'" in reasons["trace_errors"]["reason"] and "search is down" in reasons["trace_errors"]["reason"]
    assert reasons["must_not_call_tools"]["passed"] is False  # the failed tool call is still a call
    tracing = _summary(project)["tracing"]
    assert tracing["cells_traced"] == 2 and tracing["spans"] == 4 + 3 and tracing["late_spans"] == 0
    assert tracing["trajectory_from_trace"] == 2


@pytest.mark.slow
def test_a_trajectory_the_target_reports_wins_over_the_spans(tmp_path: Path) -> None:
    project = _project(tmp_path, IN_PROCESS.replace("traced_app.py:agent", "own.py:agent"))
    (project / "own.py").write_text(
        "from traced_app import agent as traced\n"
        "def agent(q):\n"
        "    traced(q)\n"
        "    return {'text': 'x', 'tool_calls': [{'name': 'mine'}], 'usage': {'input_tokens': 1, 'output_tokens': 1}}\n"
    )
    _run(project, "--trace")
    good = _cells(project)[0]
    assert [c["name"] for c in good["output"]["tool_calls"]] == ["mine"]
    assert good["trace"]["source"] == "target" and len(good["trace"]["spans"]) == 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def traced_engine() -> Iterator[tuple[str, int]]:
    """The separate service, started with OTEL_EXPORTER_OTLP_ENDPOINT at the receiver's port (given to the config)."""
    engine_port, receiver_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "traced_engine.py"), str(engine_port)],
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}"},
    )
    try:
        wait_for_port(engine_port, attempts=3000)
        yield f"http://127.0.0.1:{engine_port}", receiver_port
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_a_separate_service_exporting_otlp_is_graded_on_its_spans(tmp_path: Path, traced_engine: tuple[str, int]) -> None:
    url, port = traced_engine
    project = _project(
        tmp_path,
        f"""
targets:
  - {{id: svc, type: engine, url: "{url}", pricing: {{input_per_mtok: 1000000, output_per_mtok: 1000000}}}}
tracing: {{receive: true, port: {port}, flush_ms: 20000}}
datasets:
  - id: d
    cases:
      - id: one
        input: "tool:lookup tool:answer"
        assert:
          - {{type: tool_order, tools: [lookup, answer]}}
          - {{type: tool_args, tool: lookup, args: {{message: "tool:lookup tool:answer"}}}}
          - {{type: max_tokens, value: 7}}
          - {{type: trace_span, span_name: "agent run", attributes: {{}}}}
          - {{type: trace_errors}}
      - id: two
        input: "fail:lookup"
        assert:
          - {{type: trace_errors, max: 1}}
          - {{type: trace_span, span_name: "execute_tool lookup", min: 1, max: 1}}
""",
    )
    done = _run(project)
    assert done.returncode == 0, done.stdout + done.stderr
    one, two = _cells(project)
    assert one["status"] == "pass" and two["status"] == "pass", (one["assertions"], two["assertions"])
    assert one["output"]["usage"] == {"input_tokens": 30, "output_tokens": 7, "cache_hit_tokens": 0}
    assert one["cost_usd"] == pytest.approx(37.0)  # the engine's pricing: applies to usage from spans too
    assert {s["service"] for s in one["trace"]["spans"]} == {"traced-engine"}
    agent_run = next(s for s in one["trace"]["spans"] if s["name"] == "agent run")
    assert agent_run["parent_span_id"] == one["trace"]["span_id"] and agent_run["kind"] == "server"
    tracing = _summary(project)["tracing"]
    assert tracing["cells_traced"] == 2 and tracing["late_spans"] == 0 and tracing["unknown_spans"] == 0


CONCURRENT = """
targets:
  - {id: app, type: python, callable: traced_app.py:tagged, concurrency: 50}
tracing: {receive: true}
datasets:
  - id: d
    path: cases.jsonl
assert:
  - {type: trace_span, span_name: step, count: 1}
"""


@pytest.mark.slow
def test_spans_of_200_concurrent_cells_never_mix(tmp_path: Path) -> None:
    project = _project(tmp_path, CONCURRENT)
    (project / "cases.jsonl").write_text("".join(json.dumps({"id": f"c{i}", "input": f"input-{i}"}) + "\n" for i in range(200)))
    done = _run(project)
    assert done.returncode == 0, done.stderr
    cells = _cells(project)
    assert len(cells) == 200
    trace_ids = set()
    for cell in cells:
        spans = cell["trace"]["spans"]
        assert [s["attributes"]["app.input"] for s in spans] == [cell["input"]] * 2
        trace_ids.add(cell["trace"]["trace_id"])
    assert len(trace_ids) == 200


def test_trace_checks_without_tracing_are_validate_errors(tmp_path: Path) -> None:
    config = IN_PROCESS + "assert:\n  - {type: trace_errors}\n"
    project = _project(tmp_path, config)
    runner = CliRunner()
    out = runner.invoke(main, ["validate", "--config", str(project / "evalconfig.yaml")])
    assert out.exit_code == 2, out.output
    lines = out.output
    assert "evalconfig.yaml:15 datasets[0].cases[0].assert[5]: trace_span: needs tracing: add `tracing: {receive: true}`" in lines
    assert "evalconfig.yaml:26 assert[0].type: trace_errors: needs tracing" in lines
    out = runner.invoke(main, ["run", "--config", str(project / "evalconfig.yaml")])
    assert out.exit_code == 2 and "needs tracing" in out.output and not (project / "runs").exists()


def test_trace_check_parameters_are_checked(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        IN_PROCESS.replace(
            "- {type: trace_errors}\n      - id: broken", "- {type: trace_span, span_name_regex: '(', count: 1, min: 2}\n      - id: broken"
        )
        + "tracing: {receive: true}\n",
    )
    out = CliRunner().invoke(main, ["validate", "--config", str(project / "evalconfig.yaml")])
    assert out.exit_code == 2 and "trace_span: span_name_regex '(' does not compile" in out.output, out.output


def test_without_the_otel_extra_a_traced_run_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evalx.tracing

    monkeypatch.setattr(evalx.tracing, "otel_missing", lambda: evalx.tracing.INSTALL_HINT)
    project = _project(tmp_path, IN_PROCESS)
    out = CliRunner().invoke(main, ["run", "--trace", "--config", str(project / "evalconfig.yaml")])
    assert out.exit_code != 0 and "install evalx-runner[otel]" in out.output and "Traceback" not in out.output


@pytest.mark.slow
def test_an_openinference_instrumented_openai_app_is_graded_on_its_spans(tmp_path: Path) -> None:
    pytest.importorskip("openinference.instrumentation.openai")
    server = FakeLLMServer().start()
    try:
        project = _project(
            tmp_path,
            """
targets:
  - {id: app, type: python, callable: traced_app.py:openinference_app}
tracing: {receive: true}
datasets:
  - id: d
    cases:
      - id: c
        input: "what is the capital of France?"
        assert:
          - {type: trace_span, attributes: {openinference.span.kind: LLM}, count: 1}
          - {type: max_tokens, value: 1000}
""",
        )
        done = _run(project, env={"FAKE_OPENAI_URL": server.url + "/v1", "FAKE_OPENAI_KEY": OPENAI_KEY})
        assert done.returncode == 0, done.stdout + done.stderr
        (cell,) = _cells(project)
        usage = cell["output"]["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, cell
        assert cell["trace"]["source"] == "trace"
        (llm,) = cell["trace"]["spans"]
        assert llm["attributes"]["llm.token_count.prompt"] == usage["input_tokens"]
    finally:
        server.stop()


@pytest.mark.slow
def test_the_example_runs(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "tracing"
    project = tmp_path / "tracing"
    shutil.copytree(example, project)
    done = _run(project)
    assert done.returncode == 0, done.stdout + done.stderr
    paris, no_city = _cells(project)
    assert paris["trace"]["source"] == "trace" and [c["name"] for c in paris["output"]["tool_calls"]] == ["get_weather"]
    assert no_city["status"] == "pass"
