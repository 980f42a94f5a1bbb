"""Provider streaming (``stream: true``): both stream shapes against a real streaming server on 127.0.0.1.

tests/stream_server.py streams as OpenAI (chunks, then ``data: [DONE]``) and Anthropic (typed events,
``message_stop``); the request's model picks what it does (text, tool calls, no usage, cut, idle,
endless, error event...). Runs go through the real CLI entry point.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells
from stream_server import ARGS, OTHER_ARGS, TEXT, StreamServer

from evalx.cli import main

KEY = "sk-stream-test-7d1e2f9a4b"


@pytest.fixture(scope="module")
def server() -> Iterator[StreamServer]:
    s = StreamServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def config(tmp_path: Path, server: StreamServer, provider: str, model: str, extra: str = "stream: true", cases: str = "") -> Path:
    base = f"{server.url}/v1" if provider == "openai" else server.url
    extra_lines = "\n".join(" " * 4 + line for line in textwrap.dedent(extra).strip().splitlines())
    cases = (
        cases
        or """
      - id: capital
        input: What is the capital of France?
        assert: [{type: contains, value: Paris}]
    """
    )
    path = tmp_path / "evalconfig.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: streaming
            targets:
              - id: model
                type: provider
                provider: {provider}
                model: {model}
                base_url: {base}
                api_key: {KEY}
                retries: 0
            """
        )
        + extra_lines
        + "\n"
        + textwrap.dedent(
            """\
            datasets:
              - id: d
                cases:
            """
        )
        + textwrap.indent(textwrap.dedent(cases).strip("\n"), "      ")
        + "\n",
        encoding="utf-8",
    )
    return path


def run(path: Path, *args: str) -> tuple[int, str, list[dict[str, Any]], Path]:
    result = CliRunner().invoke(main, ["run", "-c", str(path), "-v", *args])  # -v: the full summary (cost gaps)
    run_dir = sorted((path.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)[-1]
    return result.exit_code, result.output, read_cells(run_dir), run_dir


def sent(server: StreamServer, model: str) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["body"].get("model") == model]


def everything_written(path: Path) -> str:
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace") for p in path.parent.rglob("*") if p.is_file() and p.name != "evalconfig.yaml"
    )


# --- text, usage, TTFT ------------------------------------------------------------------------


def test_openai_stream_joins_text_reads_usage_and_records_ttft(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "text", "stream: true\npricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}")
    before = len(sent(server, "text"))
    code, output, cells, run_dir = run(path)
    assert code == 0, output
    [cell] = cells
    body = sent(server, "text")[before]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert sent(server, "text")[before]["headers"]["Accept"] == "text/event-stream"
    out = cell["output"]
    assert out["text"] == TEXT
    assert out["usage"] == {"input_tokens": 11, "output_tokens": 7, "cache_hit_tokens": 0}
    assert cell["cost_usd"] == pytest.approx((11 * 1.0 + 7 * 2.0) / 1e6)
    assert cell["stop_reason"] == "stop"
    assert cell["ttft_ms"] is not None and 0 < cell["ttft_ms"] <= cell["latency_ms"]
    assert out["raw"]["stream_events"] == 8
    # TTFT in summary.json (per target and overall), summary.txt and report.html
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["per_target"]["model"]["ttft_ms"]["p50"] == pytest.approx(cell["ttft_ms"])
    assert summary["ttft_ms"]["p50"] == pytest.approx(cell["ttft_ms"])
    assert "ttft p50" in (run_dir / "summary.txt").read_text()
    html = (run_dir / "report.html").read_text()
    assert 'time to first token">TTFT p50</th>' in html  # the targets table's column
    assert '"tt":' in html  # each cell's TTFT in the embedded data


def test_params_stream_true_is_the_same_switch(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "text", "params: {stream: true, temperature: 0}")
    before = len(sent(server, "text"))
    code, output, [cell], _ = run(path)
    assert code == 0, output
    body = sent(server, "text")[before]["body"]
    assert body["stream"] is True and body["temperature"] == 0 and "stream_options" in body
    assert cell["ttft_ms"] is not None and cell["output"]["text"] == TEXT


def test_a_target_that_does_not_stream_sends_no_stream_params(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "text", "params: {stream: false}")
    before = len(sent(server, "text"))
    code, output, [cell], _ = run(path)
    assert code == 0, output
    body = sent(server, "text")[before]["body"]
    assert "stream" not in body and "stream_options" not in body
    assert cell["ttft_ms"] is None and cell["output"]["text"] == TEXT


def test_anthropic_stream_typed_events(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "anthropic", "text")
    before = len(sent(server, "text"))
    code, output, [cell], _ = run(path)
    assert code == 0, output
    assert sent(server, "text")[before]["body"]["stream"] is True
    out = cell["output"]
    assert out["text"] == TEXT
    # message_start's input (11 + 4 cache reads + 0 writes) and message_delta's output count
    assert out["usage"] == {"input_tokens": 15, "output_tokens": 7, "cache_hit_tokens": 4}
    assert cell["stop_reason"] == "end_turn"
    assert 0 < cell["ttft_ms"] <= cell["latency_ms"]


def test_a_definition_may_stream_by_default(server: StreamServer, tmp_path: Path) -> None:
    from evalx.targets.shipped import data_dir

    providers = tmp_path / "providers"
    providers.mkdir()
    text = (data_dir("providers") / "openai.yaml").read_text().replace("name: openai", "name: streamy")
    (providers / "streamy.yaml").write_text(text.replace("stream:\n  params:", "stream:\n  default: true\n  params:"))
    path = config(tmp_path, server, "openai", "text", "")
    path.write_text(path.read_text().replace("provider: openai", "provider: streamy") + "providers_dir: providers\n")
    code, output, [cell], _ = run(path)
    assert code == 0, output
    assert cell["ttft_ms"] is not None
    path.write_text(path.read_text().replace("retries: 0", "retries: 0\n    stream: false"))
    code, output, [cell], _ = run(path)
    assert code == 0, output
    assert cell["ttft_ms"] is None  # the target's stream: false wins


# --- tool calls -------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_tool_calls_split_over_many_deltas_are_put_together(server: StreamServer, tmp_path: Path, provider: str) -> None:
    path = config(
        tmp_path,
        server,
        provider,
        "tools",
        "stream: true\ntools: [{name: get_weather, parameters: {type: object}}, {name: search}]",
        cases="""
          - id: weather
            input: Weather in Paris?
            assert: [{type: must_call_tools, tools: [get_weather]}]
        """,
    )
    code, output, [cell], _ = run(path)
    assert code == 0, output
    calls = cell["output"]["tool_calls"]
    expected = [{"name": "get_weather", "args": json.loads(ARGS), "result": None}]
    if provider == "openai":
        expected.append({"name": "search", "args": json.loads(OTHER_ARGS), "result": None})
        assert cell["output"]["raw"]["tool_call_ids"] == ["call_a", "call_b"]
        assert cell["stop_reason"] == "tool_calls"
    else:
        assert cell["output"]["raw"]["tool_call_ids"] == ["toolu_1"]
        assert cell["output"]["text"] == TEXT
    assert calls == expected


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_malformed_streamed_arguments_are_a_protocol_error_naming_the_tool(server: StreamServer, tmp_path: Path, provider: str) -> None:
    path = config(tmp_path, server, provider, "badargs")
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "arguments of tool call 'get_weather'" in cell["error"] and "not valid JSON" in cell["error"]


# --- usage absent -----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_without_usage_says_so_never_zero_cost(server: StreamServer, tmp_path: Path, provider: str) -> None:
    path = config(tmp_path, server, provider, "nousage", "stream: true\npricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}")
    code, output, [cell], run_dir = run(path)
    assert code == 0, output
    assert cell["output"]["text"] == TEXT
    assert cell["cost_usd"] is None
    assert cell["cost_note"] == "no usage in response"
    assert cell["output"]["raw"]["usage"] is None
    assert "no usage" in cell["output"]["raw"]["usage_note"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost_missing_cells"] == 1
    assert summary["usage_unknown_cells"] == 1 and summary["per_target"]["model"]["usage_unknown_cells"] == 1
    # unknown tokens are shown as unknown, never as 0, in the terminal and in the report
    assert "cost unknown for 1 cell (usage unknown for 1 cell)" in output
    table_row = next(line for line in output.splitlines() if line.startswith("model ") and "100.0%" in line)
    assert table_row.split()[-2] == "—"  # tokens (the last column: cost, also unknown)
    page = (run_dir / "report.html").read_text()
    assert "usage unknown for 1 cell" in page


# --- broken streams ---------------------------------------------------------------------------


@pytest.mark.parametrize(("provider", "marker"), [("openai", "data: [DONE]"), ("anthropic", "event: message_stop")])
def test_a_stream_cut_mid_way_is_an_error_naming_the_missing_end_and_is_not_cached(
    server: StreamServer, tmp_path: Path, provider: str, marker: str
) -> None:
    path = config(tmp_path, server, provider, "cut")
    before = len(sent(server, "cut"))
    code, output, [cell], _ = run(path)
    assert code != 0
    assert cell["status"] == "error"
    assert f"closed before its end ({marker})" in cell["error"]
    assert cell["output"]["text"] == ""  # a part of an answer is never scored
    run(path)
    assert len(sent(server, "cut")) == before + 2  # the error was not cached: asked again


def test_a_dropped_connection_mid_stream_is_an_error_and_not_sent_again(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "drop")
    path.write_text(path.read_text().replace("retries: 0", "retries: 3"))
    before = len(sent(server, "drop"))
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "closed before its end (data: [DONE]) after 3 events" in cell["error"]
    assert len(sent(server, "drop")) == before + 1  # an answer under way is not asked again (its tokens are billed)


def test_an_idle_stream_is_stopped_by_the_idle_timeout(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "idle", "stream: true\nidle_timeout_s: 0.3\ntimeout_s: 30")
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "idle for more than 0.3s" in cell["error"]  # the idle timer ended it, not the 30 s timeout


def test_a_stream_that_never_ends_is_stopped_by_the_timeout(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "endless", "stream: true\ntimeout_s: 0.5")
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "timed out after 0.5s" in cell["error"]


def test_an_error_event_is_the_cells_error_with_the_servers_message(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "error")
    before = len(sent(server, "error"))
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "sent an error" in cell["error"] and "the model crashed" in cell["error"]
    run(path)
    assert len(sent(server, "error")) == before + 2  # never cached


def test_an_anthropic_overloaded_event_before_any_answer_is_retried(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "anthropic", "error")
    path.write_text(path.read_text().replace("retries: 0", "retries: 2"))
    before = len(sent(server, "error"))
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "Overloaded" in cell["error"] and "after 2 retries" in cell["error"]
    assert len(sent(server, "error")) == before + 3  # overloaded_error is retryable (providers/anthropic.yaml)


def test_a_stream_with_no_answer_is_an_error(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "empty")
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "ended without an answer" in cell["error"]


def test_a_server_that_answers_whole_is_read_as_a_plain_answer(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "whole")
    code, output, [cell], _ = run(path)
    assert code == 0, output
    assert cell["output"]["text"] == TEXT and cell["ttft_ms"] is None


def test_secrets_in_a_stream_error_are_not_written(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "echo-key")
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error" and "bad request from" in cell["error"]
    assert KEY not in output
    assert KEY not in everything_written(path)


# --- the cache --------------------------------------------------------------------------------


def test_a_streamed_answer_is_cached_whole(server: StreamServer, tmp_path: Path) -> None:
    path = config(
        tmp_path,
        server,
        "openai",
        "tools",
        "stream: true",
        cases="""
      - id: weather
        input: Weather in Paris for the cache?
        assert: [{type: must_call_tools, tools: [search]}]
    """,
    )
    before = len(sent(server, "tools"))
    code, output, [first], _ = run(path)
    assert code == 0, output
    code, output, [second], _ = run(path)
    assert code == 0, output
    assert len(sent(server, "tools")) == before + 1  # the second run asked nobody
    assert second["cached"] is True and first["cached"] is False
    assert second["output"]["tool_calls"] == first["output"]["tool_calls"]
    assert second["output"]["usage"] == first["output"]["usage"]
    assert second["ttft_ms"] == first["ttft_ms"]  # as for engines: the cached record's own figure


def test_streamed_and_plain_answers_do_not_share_a_cache_entry(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "text", "stream: true")
    run(path)
    path.write_text(path.read_text().replace("stream: true", "stream: false"))
    code, output, [cell], _ = run(path)
    assert cell["cached"] is False and cell["ttft_ms"] is None


# --- definitions ------------------------------------------------------------------------------


def test_stream_true_on_a_provider_that_cannot_stream_fails_validate(tmp_path: Path, server: StreamServer) -> None:
    path = config(tmp_path, server, "ollama", "x", "stream: true")
    result = CliRunner().invoke(main, ["validate", "-c", str(path)])
    assert result.exit_code == 2
    assert "targets[0].stream: provider 'ollama' cannot stream" in result.output
    assert "base_url: http://localhost:11434/v1" in result.output


def test_a_broken_stream_section_names_its_line(tmp_path: Path, server: StreamServer) -> None:
    providers = tmp_path / "providers"
    providers.mkdir()
    (providers / "mine.yaml").write_text(
        textwrap.dedent(
            """\
            name: mine
            request: {path: /x, body: '{}'}
            response: {text: response.text}
            stream:
              params: {stream: true}
              events:
                message:
                  text: event.choices[0].delta.content |||
            """
        )
    )
    path = config(tmp_path, server, "openai", "x", "stream: true")
    path.write_text(path.read_text().replace("provider: openai", "provider: mine") + "providers_dir: providers\n")
    result = CliRunner().invoke(main, ["validate", "-c", str(path)])
    assert result.exit_code == 2
    assert "mine.yaml:4 stream.end: 'end' is a required property" in result.output


@pytest.mark.slow
def test_a_stream_past_max_response_bytes_is_cut(server: StreamServer, tmp_path: Path) -> None:
    path = config(tmp_path, server, "openai", "endless", "stream: true\nmax_response_bytes: 2000\ntimeout_s: 30")
    code, output, [cell], _ = run(path)
    assert cell["status"] == "error"
    assert "larger than max_response_bytes (2,000 bytes)" in cell["error"]  # cut, not ended by the 30 s timeout
