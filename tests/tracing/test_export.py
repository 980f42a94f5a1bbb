"""``tracing: {export: URL}`` / ``--otlp-endpoint``: a run's own spans, sent to a real OTLP/HTTP collector on 127.0.0.1.

The collector (tests/otlp_collector.py) decodes what the SDK's exporter sends
with opentelemetry-proto; the tests read the span tree, the results as
attributes, and look for secrets in every attribute.
"""

from __future__ import annotations

import json
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner
from otlp_collector import OTLPCollector, Span

from evalx.cli import main

pytest.importorskip("opentelemetry.sdk.trace", reason="the export needs evalx-runner[otel]")

SECRET = "tok-SECRET-9f8e7d6c5b4a"
HEADER_SECRET = "hdr-SECRET-0a1b2c3d4e5f"

JUDGES = """
def judge(prompt, case):
    return {"text": "FAIL - it never says banana", "usage": {"input_tokens": 40, "output_tokens": 6}, "cost_usd": 0.0002}
"""


@pytest.fixture
def collector() -> Iterator[OTLPCollector]:
    c = OTLPCollector().start()
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MY_TOKEN", SECRET)


def project(root: Path, llm: FakeLLMServer, export: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "judges.py").write_text(JUDGES)
    tracing = f"tracing: {{export: {export}}}\n" if export else ""
    (root / "evalconfig.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: exported
            secrets: [MY_TOKEN]
            defaults: {{targets: [mini], retries: 0}}
            targets:
              - id: mini
                type: provider
                provider: openai
                model: local-model
                base_url: {llm.url}/v1
                api_key: {OPENAI_KEY}
              - {{id: judge, type: python, callable: "judges.py:judge"}}
            judge: {{target: judge}}
            datasets:
              - id: qa
                cases:
                  - id: sum
                    input: "What is 2 + 2? (ticket ${{MY_TOKEN}})"
                    assert: [{{type: contains, value: "4"}}]
                  - id: fruit
                    input: "What is the capital of France?"
                    assert:
                      - {{type: contains, value: "banana", name: says banana}}
                      - {{type: llm_judge, rubric: "it mentions a banana"}}
            """
        )
        + tracing
    )
    return root / "evalconfig.yaml"


def run(config: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["run", "-c", str(config), *args], catch_exceptions=False)


def by_name(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def test_a_run_is_exported_as_a_span_tree_with_its_results_as_attributes(
    tmp_path: Path, server: FakeLLMServer, collector: OTLPCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-api-key={HEADER_SECRET},x-project-name=evals")
    config = project(tmp_path, server)
    result = run(config, "--otlp-endpoint", collector.url)  # no path: /v1/traces
    assert result.exit_code == 1, result.output  # "fruit" fails: the run is graded as usual
    run_id = next((tmp_path / "runs").iterdir()).name
    spans = collector.spans
    names = by_name(spans)

    (run_span,) = names["evalx.run"]
    assert run_span.parent_span_id is None
    assert run_span.attributes["evalx.run.id"] == run_id
    assert run_span.attributes["evalx.run.cells"] == 2 and run_span.attributes["evalx.run.fail"] == 1
    assert run_span.attributes["evalx.run.exit_code"] == 1
    assert run_span.resource["service.name"] == "evalx" and run_span.resource["openinference.project.name"] == "exported"

    cells = {s.attributes["evalx.case.id"]: s for s in names["evalx.cell"]}
    assert set(cells) == {"sum", "fruit"}
    for cell in cells.values():  # each cell its own trace, a root linked to the run's span
        assert cell.parent_span_id is None
        assert cell.trace_id != run_span.trace_id
        assert cell.links == [(run_span.trace_id, run_span.span_id)]
        assert cell.attributes["session.id"] == run_id
        assert cell.attributes["evalx.target"] == "mini" and cell.attributes["evalx.repeat"] == 0
        assert cell.attributes["gen_ai.request.model"] == "local-model"
    assert len({c.trace_id for c in cells.values()}) == 2
    assert cells["sum"].attributes["evalx.status"] == "pass" and cells["sum"].status == 1  # OK
    fruit = cells["fruit"]
    assert fruit.attributes["evalx.status"] == "fail" and fruit.status == 2  # ERROR
    assert fruit.attributes["evalx.score"] == 0.0
    assert any("says banana" in r for r in fruit.attributes["evalx.assertions.failed"])
    assert fruit.attributes["output.value"] == "Paris is the capital of France."

    # the target call: a GenAI chat span under the cell, inside the cell's time
    calls = [s for s in spans if s.name == "chat local-model"]
    assert {c.trace_id for c in calls} == {c.trace_id for c in cells.values()}
    for call in calls:
        cell = next(c for c in cells.values() if c.trace_id == call.trace_id)
        assert call.parent_span_id == cell.span_id
        assert cell.start <= call.start <= call.end <= cell.end
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.provider.name"] == "openai"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0 and call.attributes["gen_ai.usage.output_tokens"] > 0
        assert call.attributes["evalx.latency_ms"] >= 0

    # the checks, one span a verdict, and the judge's call under its assertion
    checks = {s.trace_id: s for s in names["evalx.checks"]}
    assert checks[fruit.trace_id].parent_span_id == fruit.span_id and checks[fruit.trace_id].status == 2
    asserts = [s for s in spans if s.name.startswith("assert ") and s.trace_id == fruit.trace_id]
    assert sorted(s.name for s in asserts) == ["assert contains", "assert llm_judge"]
    banana = next(s for s in asserts if s.name == "assert contains")
    assert banana.attributes["gen_ai.evaluation.name"] == "says banana"
    assert banana.attributes["gen_ai.evaluation.score.label"] == "fail" and banana.status == 2
    assert "banana" in banana.attributes["gen_ai.evaluation.explanation"]
    judged = next(s for s in asserts if s.name == "assert llm_judge")
    (judge_call,) = [s for s in spans if s.parent_span_id == judged.span_id]
    assert judge_call.name == "chat judge" and judge_call.attributes["evalx.judge.target"] == "judge"
    assert judge_call.attributes["gen_ai.usage.input_tokens"] == 40 and judge_call.attributes["evalx.cost_usd"] == 0.0002

    # the headers of OTEL_EXPORTER_OTLP_HEADERS were sent, and no secret is in any attribute
    assert all(h.get("x-api-key") == HEADER_SECRET for h in collector.headers)
    everything = json.dumps([[s.name, s.attributes, s.resource, s.events, s.status_message] for s in spans])
    for secret in (SECRET, OPENAI_KEY, HEADER_SECRET):
        assert secret not in everything
    assert "(ticket ***)" in cells["sum"].attributes["input.value"]
    # nor in what the run wrote or printed
    run_dir = tmp_path / "runs" / run_id
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert HEADER_SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    assert HEADER_SECRET not in result.output


def test_the_config_names_the_endpoint_and_the_environment_can(
    tmp_path: Path, server: FakeLLMServer, collector: OTLPCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(project(tmp_path / "a", server, export=f"{collector.url}/v1/traces"))
    assert result.exit_code == 1, result.output
    assert len([s for s in collector.spans if s.name == "evalx.cell"]) == 2

    collector.spans.clear()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)  # a base URL: v1/traces is appended
    result = run(project(tmp_path / "b", server))
    assert result.exit_code == 1, result.output
    assert len([s for s in collector.spans if s.name == "evalx.cell"]) == 2

    collector.spans.clear()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    result = run(project(tmp_path / "c", server))
    assert result.exit_code == 1, result.output
    assert collector.spans == []


def test_without_export_nothing_is_sent(tmp_path: Path, server: FakeLLMServer, collector: OTLPCollector) -> None:
    result = run(project(tmp_path, server))
    assert result.exit_code == 1, result.output
    assert collector.requests == 0


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


@pytest.mark.parametrize("kind", ["refused", "503"])
def test_an_endpoint_that_fails_is_one_warning_never_a_failed_run(
    tmp_path: Path, server: FakeLLMServer, kind: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1500")  # the SDK retries a 503 within one request's timeout
    down = OTLPCollector(status=503).start() if kind == "503" else None
    try:
        url = down.url if down is not None else f"http://127.0.0.1:{_closed_port()}"
        with caplog.at_level("WARNING"):
            result = run(project(tmp_path, server), "--otlp-endpoint", f"{url}/v1/traces?api_key=QUERYSECRET123")
        assert result.exit_code == 1, result.output  # the verdict of the cells, not of the export
        warnings = [r.getMessage() for r in caplog.records if "tracing export" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert "did not take the run's spans" in warnings[0] and "spans not sent" in warnings[0]
        assert "QUERYSECRET123" not in warnings[0] and "QUERYSECRET123" not in result.output
        assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]  # the SDK's own messages are not shown
        if down is not None:
            assert down.requests >= 1 and "Service Unavailable" in warnings[0]
    finally:
        if down is not None:
            down.stop()


def test_a_bad_endpoint_is_a_usage_error(tmp_path: Path, server: FakeLLMServer) -> None:
    result = CliRunner().invoke(main, ["run", "-c", str(project(tmp_path, server)), "--otlp-endpoint", "localhost:4318"])
    assert result.exit_code == 2
    assert "--otlp-endpoint" in result.output and "http://" in result.output
    bad = project(tmp_path / "b", server, export="ftp://x")
    result = CliRunner().invoke(main, ["validate", "-c", str(bad)])
    assert result.exit_code == 2 and "tracing.export" in result.output


def test_the_received_spans_hook_puts_a_cells_own_spans_under_its_target_call(collector: OTLPCollector) -> None:
    """After the merge with the receive side a result carries ``trace``: its ids are the cell's, its spans go under the call."""
    from evalx.tracing.export import Endpoint, RunExporter, TargetFacts

    cell_trace, cell_span = "ab" * 16, "cd" * 8
    stored = [
        {"name": "tool search", "trace_id": cell_trace, "span_id": "01" * 8, "parent_span_id": cell_span, "start_unix_nano": 1_000,
         "end_unix_nano": 2_000, "status": "ok", "status_message": "", "kind": "internal", "service": "app",
         "attributes": {"gen_ai.tool.name": "search", "note": f"key {SECRET}"}},
        {"name": "http get", "trace_id": cell_trace, "span_id": "02" * 8, "parent_span_id": "01" * 8, "start_unix_nano": 1_100,
         "end_unix_nano": 1_900, "status": "error", "status_message": "404", "kind": "client", "service": "app", "attributes": {}},
    ]  # fmt: skip
    result: Any = {
        "run_id": "r1", "target": "py", "target_type": "python", "dataset": "d", "case_id": "c", "repeat": 0,
        "status": "pass", "score": 1.0, "assertions": [], "output": {"text": "ok"}, "latency_ms": 5.0,
        "started_at": "2026-01-01T00:00:00.000+00:00", "input": "hi",
        "trace": {"trace_id": cell_trace, "span_id": cell_span, "spans": stored, "dropped": 0, "source": "trace"},
    }  # fmt: skip
    exporter = RunExporter(
        Endpoint(f"{collector.url}/v1/traces", "--otlp-endpoint"),
        run_id="r1", name="hook", redact=lambda text: text.replace(SECRET, "***"), targets={"py": TargetFacts("python")},
    )  # fmt: skip
    exporter.cell(result)
    exporter.finish(None)
    spans = {s.name: s for s in collector.spans}
    cell, call = spans["evalx.cell"], spans["invoke_agent py"]
    assert (cell.trace_id, cell.span_id) == (cell_trace, cell_span)  # the ids the target's spans were given
    assert spans["tool search"].parent_span_id == call.span_id  # re-parented under the target call
    assert spans["http get"].parent_span_id == "01" * 8 and spans["http get"].status == 2
    assert spans["tool search"].resource["service.name"] == "app"
    assert spans["tool search"].attributes["note"] == "key ***"


def test_without_the_sdk_one_line_says_what_to_install(
    tmp_path: Path, server: FakeLLMServer, collector: OTLPCollector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import evalx.tracing.export as export

    monkeypatch.setattr(export, "otel_sdk_missing", lambda: True)
    asked = CliRunner().invoke(main, ["run", "-c", str(project(tmp_path / "a", server)), "--otlp-endpoint", collector.url])
    assert asked.exit_code == 2, asked.output
    assert "--otlp-endpoint: exporting spans needs the OpenTelemetry SDK: install evalx-runner[otel]" in asked.output
    assert not (tmp_path / "a" / "runs").exists()  # nothing ran
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{collector.url}/v1/traces")
    with caplog.at_level("WARNING"):
        inherited = run(project(tmp_path / "b", server))
    assert inherited.exit_code == 1, inherited.output  # the run goes on without export
    assert [r.getMessage() for r in caplog.records if "evalx-runner[otel]" in r.getMessage()] == [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set: exporting spans needs the OpenTelemetry SDK: install evalx-runner[otel]"
    ]
    assert collector.requests == 0
