"""Issue 14, "Numbers and statuses a server can fake": scripted servers on 127.0.0.1, evalx run through its CLI.

- a 2xx answer that carries an error, or no answer, is the cell's error with the server's message, never an
  empty answer: a ``not contains`` check cannot pass on it, and it is never cached;
- negative, non-finite or non-numeric usage and cost are the cell's protocol error naming the field, so the
  cost guard and ``max_tokens`` hold, and every JSON file evalx writes is strict JSON;
- a cut-off answer (``finish_reason: length``) is flagged in results, summary, JUnit and HTML, and
  ``not_truncated`` fails it; an answer without usage costs ``null`` with a reason, never a silent 0.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells
from scripted_server import ScriptedServer, openai_answer

from evalx.cli import main

USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer().start()
    yield s
    s.stop()


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and the infinities, as most JSON parsers do."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def project(tmp_path: Path, body: str, cases: list[dict[str, Any]] | None = None) -> Path:
    config = tmp_path / "evalconfig.yaml"
    cases = cases or [{"id": "c1", "input": "hello"}]
    config.write_text(
        "version: 1\nname: numbers\n"
        + textwrap.dedent(body).strip("\n")
        + "\ndatasets:\n  - id: d\n    cases: "
        + json.dumps(cases)
        + "\n",
        encoding="utf-8",
    )
    return config


def run(config: Path, *args: str) -> tuple[int, str, list[dict[str, Any]], dict[str, Any], Path]:
    """``evalx run`` through the CLI; every JSON file of the run is read with a strict parser."""
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-v", *args])  # -v: the full summary
    run_dir = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)[-1]
    results = read_cells(run_dir)
    summary = strict_json((run_dir / "summary.json").read_text())
    for path in run_dir.glob("*.json"):
        strict_json(path.read_text())
    return result.exit_code, result.output, results, summary, run_dir


def provider(server: ScriptedServer, name: str, *, kind: str = "openai", model: str = "gpt-4o-mini", extra: str = "") -> str:
    base = f"{server.url}/{name}" if kind == "anthropic" else f"{server.url}/{name}/v1"
    key = ", api_key: test-key-123456" if kind == "anthropic" else ""
    return f"  - {{id: {name}, type: provider, provider: {kind}, model: {model}, base_url: {json.dumps(base)}{key}{extra}}}\n"


def engine(server: ScriptedServer, name: str, extra: str = "") -> str:
    return f"  - {{id: {name}, type: engine, url: {json.dumps(f'{server.url}/{name}')}{extra}}}\n"


# ------------------------------------------------------------ a 2xx that is an error


#: (target kind, scripted answer, what the cell's error must say)
ERRORS_IN_200: dict[str, tuple[str, Any, str]] = {
    "openai-error": (
        "openai",
        {"error": {"message": "quota exceeded for org-42", "type": "insufficient_quota"}},
        "quota exceeded for org-42",
    ),
    "openai-error-string": ("openai", {"error": "model is loading"}, "model is loading"),
    "openai-empty-choices": ("openai", {"id": "x", "object": "chat.completion", "choices": [], "usage": USAGE}, "without an answer"),
    "openai-no-message": ("openai", {"choices": [{"index": 0, "finish_reason": "stop"}], "usage": USAGE}, "without an answer"),
    "openai-null-choices": ("openai", {"choices": None}, "without an answer"),
    "vllm-error-object": ("openai", {"object": "error", "message": "The model `x` does not exist.", "code": 404}, "does not exist"),
    "anthropic-error": (
        "anthropic",
        {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}},
        "prompt is too long",
    ),
    "anthropic-no-content": ("anthropic", {"type": "message", "role": "assistant", "usage": {"output_tokens": 1}}, "without an answer"),
}


@pytest.mark.parametrize("name", list(ERRORS_IN_200))
def test_a_200_that_carries_an_error_is_the_cells_error_never_a_passing_empty_answer(
    server: ScriptedServer, tmp_path: Path, name: str
) -> None:
    kind, answer, message = ERRORS_IN_200[name]
    server.answers[name] = answer
    config = project(
        tmp_path,
        "targets:\n" + provider(server, name, kind=kind, model="claude-sonnet-4-5" if kind == "anthropic" else "gpt-4o-mini"),
        [{"id": "c1", "input": "hello", "assert": [{"type": "contains", "value": "refund", "not": True}]}],
    )
    for attempt in (1, 2):
        code, output, results, summary, _ = run(config)
        cell = results[0]
        assert cell["status"] == "error", (name, cell)
        assert message in cell["error"], cell["error"]
        assert cell["assertions"] == [] and not cell["cached"]
        assert summary["totals"]["error"] == 1 and summary["totals"]["pass"] == 0
        assert code != 0
        assert server.hits[name] == attempt  # never cached: the second run asks the server again


def test_an_error_in_a_200_keeps_the_server_message_safe(server: ScriptedServer, tmp_path: Path) -> None:
    """One line, clipped, no lone surrogate, the key masked (terminal controls are the display's job: docs/hardening.md)."""
    server.answers["bad"] = {"error": {"message": "no\n\ud800 way, key test-key-123456 " + "x" * 5000}}
    config = project(tmp_path, "targets:\n" + provider(server, "bad", extra=", api_key: test-key-123456"))
    _, _, results, _, _ = run(config)
    error = results[0]["error"]
    assert "no \ufffd way" in error and "\n" not in error and "test-key-123456" not in error
    assert len(error) < 400


#: engine streams that end in an error, or without an answer: (events, what the error says)
ENGINE_ERRORS: dict[str, tuple[list[tuple[str, Any]], str]] = {
    "error-after-text": (
        [("text_delta", {"text": "partial"}), ("error", {"code": "TOOL_FAILED", "message": "the tool crashed"})],
        "the tool crashed",
    ),
    "error-nested": ([("error", {"error": {"message": "context overflow"}})], "context overflow"),
    "error-json-string": ([("error", json.dumps("upstream said no"))], "upstream said no"),
    "error-plain-text": ([("text_delta", {"text": "partial"}), ("error", "upstream said no")], "upstream said no"),
    "done-with-error": (
        [("text_delta", {"text": "partial"}), ("done", {"status": "failed", "error": "budget exhausted"})],
        "budget exhausted",
    ),
    "done-status-failed": ([("done", {"status": "failed", "message": "agent crashed"})], "agent crashed"),
    "no-answer": ([("usage", {"input_tokens": 3, "output_tokens": 0}), ("iteration", {"n": 1})], "without an answer"),
}


@pytest.mark.parametrize("name", list(ENGINE_ERRORS))
def test_an_engine_stream_that_ends_in_an_error_or_without_an_answer_is_an_error(server: ScriptedServer, tmp_path: Path, name: str) -> None:
    events, message = ENGINE_ERRORS[name]
    server.answers[name] = events
    config = project(
        tmp_path,
        "targets:\n" + engine(server, name, ", cache: true, retries: 0"),
        [{"id": "c1", "input": "hello", "assert": [{"type": "contains", "value": "refund", "not": True}]}],
    )
    for attempt in (1, 2):
        _, _, results, _, _ = run(config)
        assert results[0]["status"] == "error" and message in results[0]["error"], results[0]
        assert server.hits[name] == attempt


def test_answers_that_are_fine_still_pass_and_are_cached(server: ScriptedServer, tmp_path: Path) -> None:
    """The control: an empty but well-formed answer is an answer; tool-call-only answers too."""
    server.answers["empty"] = openai_answer("", usage=USAGE)
    server.answers["nullcontent"] = openai_answer(None, usage=USAGE)  # type: ignore[arg-type]
    server.answers["eng"] = [("done", {"text": "4"})]
    config = project(
        tmp_path,
        "targets:\n" + provider(server, "empty") + provider(server, "nullcontent") + engine(server, "eng", ", cache: true"),
        [{"id": "c1", "input": "hello", "assert": [{"type": "contains", "value": "refund", "not": True}]}],
    )
    _, _, results, _, _ = run(config)
    assert [r["status"] for r in results] == ["pass"] * 3, results
    _, _, again, _, _ = run(config)
    assert all(r["cached"] for r in again) and server.hits["empty"] == 1 and server.hits["eng"] == 1


# ------------------------------------------------------------ usage and cost a server can fake


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"input_tokens": float("nan"), "output_tokens": 1}, "input_tokens"),
        ({"input_tokens": 1, "output_tokens": -1_000_000}, "output_tokens"),
        ({"input_tokens": 1, "output_tokens": float("inf")}, "output_tokens"),
        ({"input_tokens": "12", "output_tokens": 1}, "input_tokens"),
        ({"input_tokens": 1.5, "output_tokens": 1}, "input_tokens"),
        ({"input_tokens": True, "output_tokens": 1}, "input_tokens"),
        ({"input_tokens": 1, "output_tokens": 1, "cost_usd": float("nan")}, "cost_usd"),
        ({"input_tokens": 1, "output_tokens": 1, "cost_usd": -1e6}, "cost_usd"),
        ({"input_tokens": 1, "output_tokens": 1, "cost_usd": float("-inf")}, "cost_usd"),
        ({"input_tokens": 1, "output_tokens": 1, "cost_usd": "0.30"}, "cost_usd"),
    ],
)
def test_faked_engine_usage_or_cost_is_a_protocol_error_naming_the_field(
    server: ScriptedServer, tmp_path: Path, usage: dict[str, Any], field: str
) -> None:
    server.answers["e"] = [("text_delta", {"text": "4"}), ("usage", usage), ("done", {})]
    config = project(
        tmp_path, "targets:\n" + engine(server, "e"), [{"id": "c1", "input": "hi", "assert": [{"type": "max_tokens", "value": 10}]}]
    )
    _, _, results, summary, _ = run(config)
    cell = results[0]
    assert cell["status"] == "error" and field in cell["error"] and "'usage' event" in cell["error"], cell["error"]
    assert summary["tokens"] == {"input": 0, "output": 0, "cache_hit": 0} and summary["cost_usd"] is None


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"prompt_tokens": -5, "completion_tokens": 5}, "input_tokens"),
        ({"prompt_tokens": 3, "completion_tokens": float("nan")}, "output_tokens"),
        ({"prompt_tokens": 3, "completion_tokens": float("inf")}, "output_tokens"),
        ({"prompt_tokens": 3, "completion_tokens": "5"}, "output_tokens"),
        ({"prompt_tokens": 3, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": -1}}, "cached_tokens"),
    ],
)
def test_faked_provider_usage_is_a_protocol_error_naming_the_field(
    server: ScriptedServer, tmp_path: Path, usage: dict[str, Any], field: str
) -> None:
    server.answers["p"] = openai_answer("4", usage=usage)
    config = project(tmp_path, "targets:\n" + provider(server, "p"))
    _, _, results, _, _ = run(config)
    assert results[0]["status"] == "error", results[0]
    assert f"response.usage.{field}" in results[0]["error"] and "expected a number of tokens" in results[0]["error"]
    _, _, again, _, _ = run(config)
    assert not again[0]["cached"] and server.hits["p"] == 2


@pytest.mark.parametrize("first", [float("nan"), -1e6, float("inf")])
def test_the_cost_guard_holds_when_the_first_cell_fakes_its_cost(server: ScriptedServer, tmp_path: Path, first: float) -> None:
    """Five $0.30 engine cells under max_total_cost 0.5, the first faking NaN / -1e6 / inf: the guard still stops the run."""

    def answer(body: dict[str, Any]) -> list[tuple[str, Any]]:
        cost = first if body["message"] == "q0" else 0.30
        return [("text_delta", {"text": "ok"}), ("usage", {"input_tokens": 1, "output_tokens": 1, "cost_usd": cost}), ("done", {})]

    server.answers["e"] = answer
    config = project(
        tmp_path,
        "defaults: {max_total_cost: 0.5, concurrency: 1}\ntargets:\n" + engine(server, "e"),
        [{"id": f"c{i}", "input": f"q{i}"} for i in range(5)],
    )
    code, output, results, summary, _ = run(config)
    statuses = [r["status"] for r in sorted(results, key=lambda r: r["index"])]
    assert statuses[0] == "error" and "cost_usd" in results[0]["error"]
    assert statuses.count("skipped") >= 2, statuses  # without the guard all five would run ($1.20)
    guard = summary["cost_guard"]
    assert guard["skipped"] >= 2 and math.isfinite(guard["spent_usd"]) and 0.5 <= guard["spent_usd"] <= 0.6 + 1e-9
    assert server.hits["e"] == 5 - guard["skipped"]
    assert "cost guard" in output


def test_every_json_file_is_strict_even_when_the_server_sends_nan(server: ScriptedServer, tmp_path: Path) -> None:
    """A NaN elsewhere in a server's JSON (Python's parser accepts it) is written as null in results, cache and reports."""
    answer = openai_answer("4", usage=USAGE)
    answer["choices"][0]["logprobs"] = {"content": [{"token": "4", "logprob": float("nan")}, {"token": "x", "logprob": float("-inf")}]}
    server.answers["p"] = answer
    config = project(tmp_path, "targets:\n" + provider(server, "p"))
    code, _, results, summary, run_dir = run(config)
    assert results[0]["status"] == "pass", results[0]
    logprobs = results[0]["output"]["raw"]["response"]["choices"][0]["logprobs"]["content"]
    assert [item["logprob"] for item in logprobs] == [None, None]
    _, _, again, _, _ = run(config, "--json")
    assert again[0]["cached"]
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--json"])
    strict_json(result.stdout)
    import sqlite3

    with sqlite3.connect(tmp_path / ".evalx" / "cache.sqlite") as db:
        for (value,) in db.execute("SELECT value FROM responses"):
            strict_json(value)


# ------------------------------------------------------------ truncation and missing usage


def test_a_cut_off_answer_is_flagged_in_results_summary_junit_and_html(server: ScriptedServer, tmp_path: Path) -> None:
    server.answers["cut"] = openai_answer("The refund policy is that you can", finish_reason="length", usage=USAGE)
    server.answers["whole"] = openai_answer("The refund policy is 30 days.", finish_reason="stop", usage=USAGE)
    server.answers["claude"] = {
        "type": "message",
        "content": [{"type": "text", "text": "The refund"}],
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 3, "output_tokens": 5},
    }
    server.answers["agent"] = [("text_delta", {"text": "The refund"}), ("done", {"stop_reason": "length"})]
    config = project(
        tmp_path,
        "targets:\n"
        + provider(server, "cut")
        + provider(server, "whole")
        + provider(server, "claude", kind="anthropic", model="claude-sonnet-4-5")
        + engine(server, "agent"),
        [{"id": "c1", "input": "policy?", "assert": [{"type": "contains", "value": "refund"}]}],
    )
    junit = tmp_path / "junit.xml"
    code, output, results, summary, run_dir = run(config, "--junit", str(junit))
    by_target = {r["target"]: r for r in results}
    assert by_target["cut"]["stop_reason"] == "length" and by_target["cut"]["truncated"] is True
    assert by_target["claude"]["stop_reason"] == "max_tokens" and by_target["claude"]["truncated"] is True
    assert by_target["agent"]["stop_reason"] == "length" and by_target["agent"]["truncated"] is True
    assert by_target["whole"]["stop_reason"] == "stop" and "truncated" not in by_target["whole"]
    assert all(r["status"] == "pass" for r in results)  # flagged, not failed, unless asked (below)
    assert summary["truncated_cells"] == 3
    assert summary["per_target"]["cut"]["truncated_cells"] == 1 and summary["per_target"]["whole"]["truncated_cells"] == 0
    assert re.search(r"^Truncated +3 answers cut off at a token limit", output, re.M), output  # the terminal says so too
    xml = junit.read_text()
    assert xml.count("[truncated: the answer was cut off at the token limit") == 3 and "stop_reason 'max_tokens'" in xml
    xmlschema = pytest.importorskip("xmlschema")
    xsd = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"
    xmlschema.XMLSchema(str(xsd)).validate(str(junit))
    html = (run_dir / "report.html").read_text()
    assert html.count('"tr":1') == 3 and '"st":"length"' in html and "cut off" in html


def test_not_truncated_fails_a_cut_off_answer(server: ScriptedServer, tmp_path: Path) -> None:
    server.answers["cut"] = openai_answer("The refund policy is that you can", finish_reason="length", usage=USAGE)
    server.answers["whole"] = openai_answer("The refund policy is 30 days.", usage=USAGE)
    config = project(
        tmp_path,
        "assert: [{type: not_truncated}]\ntargets:\n" + provider(server, "cut") + provider(server, "whole"),
    )
    assert CliRunner().invoke(main, ["validate", "-c", str(config)]).exit_code == 0
    code, _, results, _, _ = run(config)
    by_target = {r["target"]: r for r in results}
    assert by_target["cut"]["status"] == "fail" and "cut off" in by_target["cut"]["assertions"][0]["reason"]
    assert by_target["whole"]["status"] == "pass"
    assert code == 1


def test_an_answer_without_usage_costs_null_with_a_reason_never_zero(server: ScriptedServer, tmp_path: Path) -> None:
    server.answers["p"] = openai_answer("4")  # no usage at all
    config = project(tmp_path, "targets:\n" + provider(server, "p"))
    code, output, results, summary, _ = run(config)
    cell = results[0]
    assert cell["status"] == "pass" and cell["cost_usd"] is None and cell["cost_note"] == "no usage in response"
    assert summary["cost_missing_cells"] == 1 and summary["cost_usd"] is None
    _, _, again, _, _ = run(config)  # replayed from the cache: still unknown, not repriced to 0
    assert again[0]["cached"] and again[0]["cost_usd"] is None and again[0]["cost_note"] == "no usage in response"


def test_the_cost_guard_counts_unknown_cost_cells_at_the_mean(server: ScriptedServer, tmp_path: Path) -> None:
    """One $0.20 cell, then answers without usage: they are not free, so the guard stops at max_total_cost 0.5."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        first = body["messages"][-1]["content"] == "q0"
        return openai_answer("ok", usage=USAGE if first else None)

    server.answers["p"] = answer
    config = project(
        tmp_path,
        "defaults: {max_total_cost: 0.5, concurrency: 1, cache: false}\ntargets:\n"
        + provider(server, "p", extra=", pricing: {input_per_mtok: 0, output_per_mtok: 40000}"),
        [{"id": f"c{i}", "input": f"q{i}"} for i in range(5)],
    )
    code, output, results, summary, _ = run(config)
    statuses = [r["status"] for r in sorted(results, key=lambda r: r["index"])]
    assert statuses == ["pass", "pass", "skipped", "skipped", "skipped"], statuses
    assert "1 cell of unknown cost counted at the mean" in summary["cost_guard"]["message"]
